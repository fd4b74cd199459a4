//! The settings of the Redis backend, validated once by [`RedisOptions::validate`].

use std::collections::BTreeMap;
use std::time::Duration;

use delayq::Error;

/// The most partitions a topic may have.
pub const MAX_PARTITIONS: u32 = 1_024;

/// The default partition count of a topic on a Redis Cluster.
pub const CLUSTER_PARTITIONS: u32 = 4;

/// How to reach Redis and how to lay tasks out in it.
///
/// Built with [`RedisOptions::new`] and the builder methods; every field has a default that
/// suits a small deployment.
///
/// ```
/// use std::time::Duration;
/// use delayq_redis::RedisOptions;
///
/// let options = RedisOptions::new("redis://127.0.0.1:6379")
///     .partitions(8)
///     .topic_partitions("payments", 32)
///     .lease_ms(1_000)
///     .key_prefix("dq")
///     .response_timeout(Duration::from_secs(2));
/// assert_eq!(options.partitions_for("payments"), 32);
/// assert_eq!(options.partitions_for("orders"), 8);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisOptions {
    /// The Redis URL (`redis://[user:password@]host:port[/db]`, `rediss://` for TLS).
    pub url: String,
    /// The partition count of a topic created by this instance, unless set per topic.
    /// Default: [`CLUSTER_PARTITIONS`] on a Cluster, where partitions spread a busy topic
    /// over the masters; 1 on one Redis or Sentinel, where they would spread nothing and
    /// would cost every pop a look at each partition first (docs/storage.md).
    pub partitions: u32,
    /// Partition counts of particular topics.
    pub topic_partitions: BTreeMap<String, u32>,
    /// How long a promotion lease lasts without renewal; an instance that dies has its
    /// partitions taken over after about this long. Renewals happen every third of it.
    pub lease_ms: u64,
    /// The prefix of every key and channel the backend uses.
    pub key_prefix: String,
    /// How long connecting to Redis may take.
    pub connect_timeout: Duration,
    /// How long Redis may take to answer one request.
    pub response_timeout: Duration,
    /// How many due tasks, expired ttrs or expired records one promotion step handles per
    /// partition before letting other work in.
    pub promote_batch: usize,
    /// How many replicas must have an acknowledged write before it is acknowledged (`WAIT`);
    /// 0 (the default) does not wait. See [`RedisOptions::wait_replicas`].
    pub wait_replicas: u32,
    /// How long to wait for those replicas.
    pub wait_timeout: Duration,
}

impl RedisOptions {
    /// Options for the Redis at `url`, with defaults for everything else.
    pub fn new(url: impl Into<String>) -> Self {
        let url = url.into();
        let partitions = if url.starts_with("redis+cluster://") {
            CLUSTER_PARTITIONS
        } else {
            1
        };
        RedisOptions {
            url,
            partitions,
            topic_partitions: BTreeMap::new(),
            lease_ms: 1_000,
            key_prefix: "dq".to_owned(),
            connect_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(2),
            promote_batch: 1_000,
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(500),
        }
    }

    /// Sets the partition count of topics this instance creates.
    pub fn partitions(mut self, partitions: u32) -> Self {
        self.partitions = partitions;
        self
    }

    /// Sets the partition count of one topic.
    pub fn topic_partitions(mut self, topic: impl Into<String>, partitions: u32) -> Self {
        self.topic_partitions.insert(topic.into(), partitions);
        self
    }

    /// Sets the lease time of promotion leases.
    pub fn lease_ms(mut self, lease_ms: u64) -> Self {
        self.lease_ms = lease_ms;
        self
    }

    /// Sets the prefix of every key and channel.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the response timeout.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Sets how much one promotion step handles per partition.
    pub fn promote_batch(mut self, batch: usize) -> Self {
        self.promote_batch = batch;
        self
    }

    /// Acknowledges a write only once `replicas` replicas have it: after an add, finish,
    /// release, touch, cancel, requeue or delete, the backend runs `WAIT replicas timeout`
    /// on the connection (in a cluster, on the master of every slot written), and when
    /// fewer replicas confirm within `timeout` the call fails with
    /// [`delayq::Error::Unavailable`] naming the count. The write itself stays applied on
    /// the master (`WAIT` does not roll back): it may be lost if that master fails before
    /// the replicas catch up, which is exactly what the caller is told.
    ///
    /// The cost is a round trip and the replication delay on every acknowledged write, and
    /// a failed write while a master has fewer live replicas than asked (e.g. just after a
    /// failover, until a replica is back). `WAIT` blocks the connection it runs on, so keep
    /// `timeout` well below the response timeout.
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = replicas;
        self.wait_timeout = timeout;
        self
    }

    /// The partition count this instance expects for `topic`.
    pub fn partitions_for(&self, topic: &str) -> u32 {
        self.topic_partitions
            .get(topic)
            .copied()
            .unwrap_or(self.partitions)
    }

    /// Checks every setting, then opens the link to Redis that the URL names (standalone,
    /// Sentinel or Cluster) with the configured timeouts: what the storage and the clock both
    /// start from.
    pub(crate) async fn open_link(&self) -> Result<crate::conn::Link, Error> {
        self.validate()?;
        crate::conn::Link::open(
            &self.url,
            crate::conn::Settings {
                connect_timeout: self.connect_timeout,
                response_timeout: self.response_timeout,
            },
        )
        .await
        .map_err(|e| Error::invalid("redis.url", e))
    }

    /// Checks every setting; the error names the setting and the allowed range.
    pub fn validate(&self) -> Result<(), Error> {
        let check_partitions = |field: String, n: u32| {
            if n == 0 || n > MAX_PARTITIONS {
                Err(Error::invalid(
                    field,
                    format!("is {n}, it must be 1 to {MAX_PARTITIONS}"),
                ))
            } else {
                Ok(())
            }
        };
        check_partitions("redis.partitions".to_owned(), self.partitions)?;
        for (topic, n) in &self.topic_partitions {
            delayq::core::validate::check_topic(topic)
                .map_err(|e| Error::from(e.within("redis.topic_partitions")))?;
            check_partitions(format!("redis.topic_partitions.{topic}"), *n)?;
        }
        if !(100..=60_000).contains(&self.lease_ms) {
            return Err(Error::invalid(
                "redis.lease_ms",
                format!("is {} ms, it must be 100 to 60000 ms", self.lease_ms),
            ));
        }
        let prefix_ok = !self.key_prefix.is_empty()
            && self.key_prefix.len() <= 64
            && !self.key_prefix.contains(['{', '}', ' ']);
        if !prefix_ok {
            return Err(Error::invalid(
                "redis.key_prefix",
                format!(
                    "is {:?}; it must be 1 to 64 characters without braces or spaces",
                    self.key_prefix
                ),
            ));
        }
        if self.connect_timeout.is_zero() || self.response_timeout.is_zero() {
            return Err(Error::invalid(
                "redis.timeouts",
                "connect and response timeouts must be above zero",
            ));
        }
        if !(1..=10_000).contains(&self.promote_batch) {
            return Err(Error::invalid(
                "redis.promote_batch",
                format!("is {}, it must be 1 to 10000", self.promote_batch),
            ));
        }
        if self.wait_replicas > 0
            && (self.wait_timeout.is_zero() || self.wait_timeout >= self.response_timeout)
        {
            return Err(Error::invalid(
                "redis.wait_timeout",
                format!(
                    "is {} ms; with wait_replicas it must be above zero and below the \
                     response timeout ({} ms)",
                    self.wait_timeout.as_millis(),
                    self.response_timeout.as_millis()
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_settings_are_named() {
        let base = RedisOptions::new("redis://127.0.0.1:1");
        let table: [(RedisOptions, Option<&str>); 9] = [
            (
                base.clone().wait_replicas(1, Duration::from_millis(200)),
                None,
            ),
            (
                base.clone().wait_replicas(1, Duration::from_secs(5)),
                Some("redis.wait_timeout"),
            ),
            (base.clone(), None),
            (base.clone().partitions(0), Some("redis.partitions")),
            (
                base.clone().partitions(MAX_PARTITIONS + 1),
                Some("redis.partitions"),
            ),
            (
                base.clone().topic_partitions("t", 0),
                Some("redis.topic_partitions.t"),
            ),
            (base.clone().lease_ms(10), Some("redis.lease_ms")),
            (base.clone().key_prefix("a{b}"), Some("redis.key_prefix")),
            (base.clone().promote_batch(0), Some("redis.promote_batch")),
        ];
        for (options, field) in table {
            let got = options.validate().err().map(|e| match e {
                Error::Invalid(f) => f.field,
                other => panic!("{other}"),
            });
            assert_eq!(got.as_deref(), field, "{options:?}");
        }
    }
}
