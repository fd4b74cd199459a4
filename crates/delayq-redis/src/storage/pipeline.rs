//! The connection to Redis and how requests travel over it.
//!
//! [`Redis`] wraps the [`Link`] (one server, a sentinel-named master or a cluster) with what
//! every request needs: an overall timeout that names the operation and the address in its
//! error, marking the link failed on errors worth a reconnect, pipelining several scripts
//! into one round trip (loading the function library when Redis does not have it; in a
//! cluster, one request per script since they live in different slots), and `WAIT` for
//! replicas when [`RedisOptions::wait_replicas`] asks for it.

use std::future::Future;
use std::time::Duration;

use redis::{RedisResult, Value};

use crate::conn::{Conn, Link};
use crate::error::BackendError;
use crate::options::RedisOptions;
use crate::scripts::{MISSING_FUNCTION, ScriptInvocation};

/// The connection, with the timeouts and replication wait of the options.
pub(crate) struct Redis {
    /// The connection to Redis, whatever the mode.
    pub link: Link,
    /// The most one request may take, connecting included.
    op_timeout: Duration,
    /// How many replicas must confirm each write (0: no wait).
    wait_replicas: u32,
    /// How long to wait for them.
    wait_timeout: Duration,
}

impl Redis {
    /// The link with the timeouts and the replication wait of `options`.
    pub fn new(link: Link, options: &RedisOptions) -> Redis {
        Redis {
            link,
            op_timeout: options.connect_timeout * 2 + options.response_timeout,
            wait_replicas: options.wait_replicas,
            wait_timeout: options.wait_timeout,
        }
    }

    /// A connection to use now (a clone of the multiplexed one).
    pub fn conn(&self) -> Conn {
        self.link.conn()
    }

    /// Taken before a write that [`Redis::replicated`] is to confirm: a `WAIT` only speaks
    /// for the server it runs on, so it must run where the write went.
    pub fn mark(&self) -> Mark {
        Mark(self.link.generation())
    }

    /// Runs one request to Redis with the overall timeout, naming `op` in any error.
    pub async fn io<T>(
        &self,
        op: &str,
        fut: impl Future<Output = RedisResult<T>>,
    ) -> Result<T, BackendError> {
        let result = match tokio::time::timeout(self.op_timeout, fut).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => BackendError::redis(format!("{op} (Redis at {})", self.link.addr()), e),
            Err(_) => BackendError::Timeout {
                op: format!("{op} (Redis at {})", self.link.addr()),
                ms: self.op_timeout.as_millis(),
            },
        };
        if result.is_retryable() {
            self.link.failed();
        }
        Err(result)
    }

    /// A `PING`, answered or not.
    pub async fn ping(&self) -> Result<(), BackendError> {
        self.io("checking that Redis answers", async {
            redis::cmd("PING").query_async::<()>(&mut self.conn()).await
        })
        .await
    }

    /// Makes sure the shared connection is usable: a few PINGs until one is answered (the
    /// first after Redis came back fails on the old connection and starts a new one).
    pub async fn probe(&self) {
        for _ in 0..5 {
            if self.ping().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Runs several script invocations in one pipeline. A script whose function Redis does
    /// not have (it did not run) is run again on its own, which loads the library. An error of the whole
    /// round trip is returned as such; a script that failed alone gets its own error.
    pub async fn run_scripts(
        &self,
        op: &str,
        invocations: &[ScriptInvocation<'_>],
    ) -> Result<Vec<Result<Value, BackendError>>, BackendError> {
        let mut conn = self.conn();
        if self.link.is_cluster() && invocations.len() > 1 {
            return self.run_scripts_apart(op, invocations).await;
        }
        if let [single] = invocations {
            return match self.io(op, single.invoke_async(&mut conn)).await {
                Ok(v) => Ok(vec![Ok(v)]),
                Err(e) if e.is_retryable() => Err(e),
                Err(e) => Ok(vec![Err(e)]),
            };
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for inv in invocations {
            pipe.add_command(inv.cmd());
        }
        let values: Vec<Value> = self.io(op, pipe.query_async(&mut conn)).await?;
        if values.len() != invocations.len() {
            return Err(BackendError::protocol(
                op,
                format!("{} replies to {} scripts", values.len(), invocations.len()),
            ));
        }
        let mut out = Vec::with_capacity(values.len());
        for (inv, value) in invocations.iter().zip(values) {
            match value {
                Value::ServerError(e)
                    if e.code() == "ERR" && e.details() == Some(MISSING_FUNCTION) =>
                {
                    match self.io(op, inv.invoke_async(&mut conn)).await {
                        Ok(v) => out.push(Ok(v)),
                        Err(e) if e.is_retryable() => return Err(e),
                        Err(e) => out.push(Err(e)),
                    }
                }
                Value::ServerError(e) => {
                    out.push(Err(BackendError::redis(op, redis::RedisError::from(e))))
                }
                v => out.push(Ok(v)),
            }
        }
        Ok(out)
    }

    /// In a cluster the scripts are in different slots: runs them one by one, all at once.
    async fn run_scripts_apart(
        &self,
        op: &str,
        invocations: &[ScriptInvocation<'_>],
    ) -> Result<Vec<Result<Value, BackendError>>, BackendError> {
        let runs = invocations.iter().map(|inv| {
            let mut conn = self.conn();
            async move { self.io(op, inv.invoke_async(&mut conn)).await }
        });
        let mut out = Vec::with_capacity(invocations.len());
        for r in futures_util::future::join_all(runs).await {
            match r {
                Err(e) if e.is_retryable() => return Err(e),
                r => out.push(r),
            }
        }
        Ok(out)
    }

    /// With [`RedisOptions::wait_replicas`], waits until that many replicas have the writes
    /// made since `mark` to the partitions at `bases` (their key prefixes): in a cluster on
    /// the master of each slot written, else on the one master. When the link moved to
    /// another master since `mark` (Sentinel), the writes may have gone to the old one, which
    /// no `WAIT` here can speak for: refused as not replicated.
    ///
    /// `WAIT` waits for the replicas to reach the offset of the last write *of its own
    /// connection*, and the shared connection may have been replaced between a write and its
    /// `WAIT` (a reconnect after a reset): on the new one, `WAIT` answers at once with every
    /// replica, even one that has stopped and lacks the write. So each `WAIT` goes in one
    /// round trip behind a small write of its own (`SET <wait key> 1 PX`, in the slot of the
    /// base): the replication stream is in order, so replicas that have that write have every
    /// write the master ran before it, whichever connection carried it.
    pub async fn replicated<'k>(
        &self,
        op: &str,
        bases: impl IntoIterator<Item = &'k str>,
        mark: Mark,
    ) -> Result<(), BackendError> {
        let wanted = self.wait_replicas;
        if wanted == 0 {
            return Ok(());
        }
        let ms = u64::try_from(self.wait_timeout.as_millis()).unwrap_or(u64::MAX);
        // The connection first, then the check: unchanged now, it is the master of the mark.
        let conn = self.conn();
        if self.link.generation() != mark.0 {
            return Err(BackendError::NotReplicated {
                op: format!(
                    "{op} (the master changed to {} before the write was confirmed)",
                    self.link.addr()
                ),
                got: 0,
                wanted,
                ms: 0,
            });
        }
        let marked_wait = |base: &str| {
            let mut pipe = redis::pipe();
            pipe.cmd("SET")
                .arg(wait_key(base))
                .arg(1)
                .arg("PX")
                .arg(WAIT_KEY_MS)
                .ignore();
            pipe.cmd("WAIT").arg(wanted).arg(ms);
            pipe
        };
        let what = format!("{op}, waiting for {wanted} replicas");
        let counts: Vec<i64> = match conn {
            Conn::Cluster(conn) => {
                use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
                let mut routes: Vec<(Route, &str)> = Vec::new();
                for base in bases {
                    let route = Route::with_key(base.as_bytes(), SlotAddr::Master);
                    if !routes.iter().any(|(r, _)| *r == route) {
                        routes.push((route, base));
                    }
                }
                let waits = routes.into_iter().map(|(route, base)| {
                    let mut conn = conn.clone();
                    let route = SingleNodeRoutingInfo::SpecificNode(route);
                    let what = &what;
                    let pipe = marked_wait(base);
                    async move {
                        let values = self
                            .io(what, conn.route_pipeline(pipe, 0, 2, route))
                            .await?;
                        wait_count(&values).map_err(|e| BackendError::protocol(what.as_str(), e))
                    }
                });
                futures_util::future::join_all(waits)
                    .await
                    .into_iter()
                    .collect::<Result<_, _>>()?
            }
            mut conn => {
                let Some(base) = bases.into_iter().next() else {
                    return Ok(());
                };
                let (count,): (i64,) = self
                    .io(&what, marked_wait(base).query_async(&mut conn))
                    .await?;
                vec![count]
            }
        };
        let got = counts.into_iter().min().unwrap_or(i64::from(wanted));
        if got < i64::from(wanted) {
            self.link.failed();
            return Err(BackendError::NotReplicated {
                op: format!("{op} (Redis at {})", self.link.addr()),
                got,
                wanted,
                ms: ms.into(),
            });
        }
        Ok(())
    }
}

/// The replicas that confirmed, from the replies of a cluster node to the wait write and
/// the `WAIT`. Either refused means none: the node stopped being the slot's master (a
/// failover under way: "WAIT cannot be used with replica instances", or `READONLY` and
/// `MOVED` for the write), and a `WAIT` behind a refused write would not cover the writes
/// before it.
fn wait_count(replies: &[Value]) -> Result<i64, String> {
    match replies {
        [Value::ServerError(_), _] | [_, Value::ServerError(_)] => Ok(0),
        [_, count] => redis::from_redis_value::<i64>(count.clone()).map_err(|e| e.to_string()),
        other => Err(format!(
            "{} replies to the wait write and WAIT",
            other.len()
        )),
    }
}

/// Which server writes went to, as [`Redis::mark`] saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark(u64);

/// How long a wait key lives: it only has to be written, never read.
const WAIT_KEY_MS: u64 = 60_000;

/// The key of the small write that a `WAIT` for the writes at `base` follows: in the slot of
/// `base` (a Cluster node refuses keys of other slots), so with its hash tag when it has one,
/// else with `base` itself as the tag (such bases hold no brace: the key prefix may not, and
/// the other parts are delayq's own words).
fn wait_key(base: &str) -> String {
    if has_hash_tag(base) {
        format!("{base}:wait")
    } else {
        format!("{{{base}}}:wait")
    }
}

/// Whether Redis Cluster hashes only part of `key`: a `{` followed later by a `}` with
/// something between the first two.
fn has_hash_tag(key: &str) -> bool {
    key.find('{')
        .is_some_and(|open| key[open + 1..].find('}').is_some_and(|close| close > 0))
}

#[cfg(test)]
mod tests {
    use redis::cluster_routing::{Route, SlotAddr};

    use super::*;

    #[test]
    fn a_refused_wait_write_or_wait_counts_no_replica() {
        let refused = || {
            redis::parse_redis_value(b"-READONLY You can't write against a read only replica.\r\n")
                .expect("an error reply parses as a value")
        };
        let ok = || Value::Okay;
        for (replies, want) in [
            (vec![ok(), Value::Int(2)], Ok(2)),
            (vec![ok(), Value::Int(0)], Ok(0)),
            // The write refused: the WAIT's count would not cover the writes before it.
            (vec![refused(), Value::Int(1)], Ok(0)),
            (vec![ok(), refused()], Ok(0)),
            (
                vec![Value::Int(1)],
                Err("1 replies to the wait write and WAIT".to_owned()),
            ),
        ] {
            assert_eq!(wait_count(&replies), want, "{replies:?}");
        }
    }

    #[test]
    fn the_wait_key_lives_in_the_slot_of_its_base() {
        for (base, key) in [
            ("dq:{jobs#0}", "dq:{jobs#0}:wait"),
            ("dq:{t#flow}", "dq:{t#flow}:wait"),
            ("dq:jobs", "{dq:jobs}:wait"),
            ("dq:meta:settings", "{dq:meta:settings}:wait"),
            // A topic name with a brace: the first tag is the one that counts.
            ("dq:{a}b#0}", "dq:{a}b#0}:wait"),
        ] {
            assert_eq!(wait_key(base), key, "{base}");
            assert_eq!(
                Route::with_key(key.as_bytes(), SlotAddr::Master),
                Route::with_key(base.as_bytes(), SlotAddr::Master),
                "{base}: {key} is in another slot"
            );
        }
    }

    fn settings() -> crate::conn::Settings {
        crate::conn::Settings {
            connect_timeout: std::time::Duration::from_millis(500),
            response_timeout: std::time::Duration::from_secs(2),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_after_a_move_to_another_master_confirms_nothing() {
        use std::time::{Duration, Instant};

        let mut setup = delayq_testkit::RedisSentinel::start();
        let options = RedisOptions::new(setup.url()).wait_replicas(1, Duration::from_millis(300));
        let link = Link::open(&setup.url(), settings())
            .await
            .expect("open the link");
        let (_stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(
            link.background(stopped)
                .expect("Sentinel mode follows the master"),
        );
        let redis = Redis::new(link, &options);
        let base = ["dq:{t#0}"];
        let before = redis.mark();
        redis
            .replicated("waiting before the failover", base, before)
            .await
            .expect("the replica confirms");

        let old = setup.master_port().expect("the sentinels name a master");
        setup.kill(old);
        let new = setup
            .wait_failover(old, Duration::from_secs(60))
            .expect("the sentinels promote the replica");
        setup.restart_as_replica_of(old, new);
        // The link follows to the new master, which has a replica again.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = redis.mark();
            if now != before && redis.replicated("waiting after", base, now).await.is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no confirmed wait on the new master"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // A write made before the move went to the old master: nothing here confirms it.
        let e = redis
            .replicated("waiting for a write of before the failover", base, before)
            .await
            .expect_err("a mark of the old master is confirmed by nothing");
        assert_confirmed_by_none(&e);
        assert!(e.to_string().contains("the master changed"), "{e}");
    }

    /// `e` says that none of the one replica asked for confirmed.
    fn assert_confirmed_by_none(e: &BackendError) {
        assert!(
            matches!(
                e,
                BackendError::NotReplicated {
                    got: 0,
                    wanted: 1,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_covers_the_writes_another_connection_made() {
        use std::time::Duration;

        let master = delayq_testkit::RedisServer::start();
        let replica = delayq_testkit::RedisServer::start_replica_of(master.port());
        let options = RedisOptions::new(master.url()).wait_replicas(1, Duration::from_millis(300));
        let settings = crate::conn::Settings {
            connect_timeout: Duration::from_millis(500),
            response_timeout: Duration::from_secs(2),
        };
        let link = Link::open(&master.url(), settings)
            .await
            .expect("open the link");
        let redis = Redis::new(link, &options);
        let base = ["dq:{t#0}"];
        redis
            .replicated("waiting with the replica up", base, redis.mark())
            .await
            .expect("the replica confirms");

        // The replica stops reading its master; a write comes over another connection, as
        // after a reconnect of the shared one. A bare WAIT on a connection that wrote nothing
        // answers 1 at once here.
        replica.pause();
        let set = master.command("SET written-elsewhere 1").expect("write");
        assert!(set.starts_with("+OK"), "{set}");
        let e = redis
            .replicated("waiting with the replica stopped", base, redis.mark())
            .await
            .expect_err("a stopped replica confirms nothing");
        assert_confirmed_by_none(&e);

        replica.resume();
        redis
            .replicated("waiting with the replica back", base, redis.mark())
            .await
            .expect("the replica confirms again");
        let copy = replica
            .command("GET written-elsewhere")
            .expect("read the replica");
        assert!(copy.contains('1'), "{copy}");
    }
}
