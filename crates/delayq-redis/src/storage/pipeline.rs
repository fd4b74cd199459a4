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
    /// just made to the partitions at `bases` (their key prefixes): `WAIT` on the
    /// connection, or in a cluster on the master of each slot written.
    pub async fn replicated<'k>(
        &self,
        op: &str,
        bases: impl IntoIterator<Item = &'k str>,
    ) -> Result<(), BackendError> {
        let wanted = self.wait_replicas;
        if wanted == 0 {
            return Ok(());
        }
        let ms = self.wait_timeout.as_millis();
        let wait = || {
            let mut cmd = redis::cmd("WAIT");
            cmd.arg(wanted).arg(u64::try_from(ms).unwrap_or(u64::MAX));
            cmd
        };
        let what = format!("{op}, waiting for {wanted} replicas");
        let counts: Vec<i64> = match self.conn() {
            Conn::Cluster(conn) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let mut routes: Vec<Route> = Vec::new();
                for base in bases {
                    let route = Route::with_key(base, SlotAddr::Master);
                    if !routes.contains(&route) {
                        routes.push(route);
                    }
                }
                let waits = routes.into_iter().map(|route| {
                    let mut conn = conn.clone();
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                    let what = &what;
                    async move {
                        let v = self.io(what, conn.route_command(wait(), route)).await?;
                        if let redis::Value::ServerError(_) = v {
                            // The node stopped being the slot's master (a failover under way:
                            // "WAIT cannot be used with replica instances"): no replica
                            // confirmed the write, which is what the count 0 reports.
                            return Ok(0);
                        }
                        redis::from_redis_value::<i64>(v)
                            .map_err(|e| BackendError::protocol(what.as_str(), e.to_string()))
                    }
                });
                futures_util::future::join_all(waits)
                    .await
                    .into_iter()
                    .collect::<Result<_, _>>()?
            }
            mut conn => vec![self.io(&what, wait().query_async(&mut conn)).await?],
        };
        let got = counts.into_iter().min().unwrap_or(i64::from(wanted));
        if got < i64::from(wanted) {
            self.link.failed();
            return Err(BackendError::NotReplicated {
                op: format!("{op} (Redis at {})", self.link.addr()),
                got,
                wanted,
                ms,
            });
        }
        Ok(())
    }
}
