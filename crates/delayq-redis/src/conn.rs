//! How the backend reaches Redis: a standalone server, a master found through Sentinel, or a
//! Redis Cluster. [`Link`] hides the difference from the rest of the crate.
//!
//! | URL                                                  | mode       | connection                      |
//! |------------------------------------------------------|------------|---------------------------------|
//! | `redis://host:port[/db]`, `rediss://…`               | standalone | one `ConnectionManager`         |
//! | `redis+sentinel://h:p[,h:p…]/<master-name>[/db]`     | Sentinel   | a `ConnectionManager` to the master the sentinels name, swapped on failover |
//! | `redis+cluster://h:p[,h:p…]`                         | Cluster    | redis-rs's `ClusterConnection` (MOVED/ASK, slot refresh) |
//!
//! **Sentinel.** The master is asked of all sentinels (`SENTINEL GET-MASTER-ADDR-BY-NAME`;
//! the one most name wins) at start, again after every failed request (an IO error or `READONLY` from
//! a demoted master) and once a second in the background. When the sentinels name another
//! master (one that answers `ROLE` as a master), a new connection replaces the old one: the
//! instance follows a failover without a restart, and requests in between fail as
//! `Unavailable` (503), like any Redis outage.
//!
//! **Cluster.** Every script touches the keys of one partition, which share a hash tag, so
//! it runs on one slot; redis-rs routes it and refreshes its slot map. Its own retries are
//! off, because they resend a command whose reply was lost: [`cluster_request`] follows
//! `MOVED`/`ASK` and retries a refusal given before anything ran, and nothing else. A
//! pipeline of the backend (several partitions at once) is sent as separate concurrent
//! requests, one per command, since its commands are in different slots. The registry hash
//! and the lease keys each live in their own slot and are touched by commands of their own.
//! Events use regular pub/sub, which a cluster broadcasts to every node, so the instance
//! subscribes on any one node and moves to another when that one goes away.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use delayq::Outcome;
use futures_util::future::{BoxFuture, join_all};
use parking_lot::RwLock;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value};

use crate::error::{is_transient, outcome_of};
use tokio::sync::{Notify, watch};

/// A connection of any mode, usable wherever redis-rs wants a `ConnectionLike`.
#[derive(Clone)]
pub(crate) enum Conn {
    /// A standalone server or the current Sentinel master.
    Single(ConnectionManager),
    /// A Redis Cluster.
    Cluster(ClusterConnection),
    /// No master known yet (Sentinel mode before the sentinels answered).
    Down(Arc<str>),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => Box::pin(cluster_request(c, cmd)),
            Conn::Down(why) => {
                let why = why.to_string();
                Box::pin(async move { Err(down(why)) })
            }
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            // The commands of one of our pipelines are in different slots: send each on its
            // own, all at once, and answer in order. A server error stays in its place (as
            // in a pipeline), a connection error fails the whole call.
            Conn::Cluster(c) => {
                let c = c.clone();
                Box::pin(async move {
                    let calls = pipeline.cmd_iter().map(|cmd| {
                        let mut c = c.clone();
                        async move { cluster_request(&mut c, cmd).await }
                    });
                    let mut out = Vec::new();
                    for r in join_all(calls).await {
                        out.push(r?);
                    }
                    Ok(out.into_iter().skip(offset).take(count).collect())
                })
            }
            Conn::Down(why) => {
                let why = why.to_string();
                Box::pin(async move { Err(down(why)) })
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Down(_) => 0,
        }
    }
}

/// How many times a cluster request is sent at most.
const CLUSTER_ATTEMPTS: u32 = 4;

/// Sends `cmd` to the cluster, and sends it again only when Redis certainly did not run it.
///
/// redis-rs's own retries are off (`retries(0)` below): they also resend a command whose
/// connection dropped or timed out after it was sent, so a script whose reply was lost ran a
/// second time and answered for the second run (an add "already exists", a release or finish
/// a conflict with its own receipt, a pop another task while the first delivery reached
/// nobody), each a definite answer to a change that did happen. Here a request is sent again
/// only after a redirect (to the node it names, after `ASKING` for `ASK`) or a refusal Redis
/// gives before running anything ([`outcome_of`] says `NotApplied`), a few times with a short
/// wait; any other failure goes to the caller, whose outcome is then unknown.
async fn cluster_request(c: &mut ClusterConnection, cmd: &Cmd) -> Result<Value, RedisError> {
    let mut wait = Duration::from_millis(20);
    let mut redirect: Option<(String, u16, bool)> = None;
    let mut attempt = 1;
    loop {
        let result = match redirect.take() {
            None => c.req_packed_command(cmd).await,
            Some((host, port, ask)) => {
                let node = SingleNodeRoutingInfo::ByAddress { host, port };
                if ask {
                    let mut asking = redis::pipe();
                    asking.cmd("ASKING").add_command(cmd.clone());
                    c.route_pipeline(asking, 1, 1, node)
                        .await
                        .and_then(|mut replies| replies.pop().unwrap_or(Value::Nil).extract_error())
                } else {
                    c.route_command(cmd.clone(), RoutingInfo::SingleNode(node))
                        .await
                }
            }
        };
        let e = match result {
            Ok(value) => return Ok(value),
            Err(e) => e,
        };
        if attempt >= CLUSTER_ATTEMPTS || outcome_of(&e) != Outcome::NotApplied || !is_transient(&e)
        {
            return Err(e);
        }
        attempt += 1;
        let ask = matches!(e.kind(), redis::ErrorKind::Server(ServerErrorKind::Ask));
        redirect = e
            .redirect_node()
            .and_then(|(addr, _slot)| addr.rsplit_once(':'))
            .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?, ask)));
        if redirect.is_none() {
            tokio::time::sleep(wait).await;
            wait = (wait * 3).min(Duration::from_millis(300));
        }
    }
}

fn down(why: String) -> RedisError {
    // Refused: nothing was sent, so the operation certainly did not happen.
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        format!("no Redis master known: {why}"),
    ))
}

/// The mode-specific part of the backend's connection to Redis.
pub(crate) enum Link {
    Single {
        client: redis::Client,
        conn: ConnectionManager,
        addr: String,
    },
    Sentinel(Arc<Sentinel>),
    Cluster {
        conn: ClusterConnection,
        nodes: Vec<redis::Client>,
        addr: String,
    },
}

/// Timeouts and reconnection settings shared by all modes.
pub(crate) struct Settings {
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
}

impl Settings {
    fn manager_config(&self) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.response_timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(50))
            .set_max_delay(Duration::from_millis(500))
    }
}

/// A URL that is not one of the three forms; the text says what is wrong.
pub(crate) type UrlError = String;

/// Splits `scheme://[userinfo@]h:p,h:p[/rest]` into userinfo, hosts and the rest.
fn split_hosts(rest: &str) -> (Option<&str>, Vec<&str>, &str) {
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((auth, rest)) => (Some(auth), rest),
        None => (None, rest),
    };
    let (hosts, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let hosts = hosts.split(',').filter(|h| !h.is_empty()).collect();
    (auth, hosts, path)
}

fn node_url(auth: Option<&str>, host: &str, db: &str) -> String {
    match auth {
        Some(a) => format!("redis://{a}@{host}{db}"),
        None => format!("redis://{host}{db}"),
    }
}

impl Link {
    /// Opens the link for `url`. Nothing needs to be reachable yet, except that Cluster mode
    /// needs one seed node to answer to learn the slots.
    pub async fn open(url: &str, settings: Settings) -> Result<Link, UrlError> {
        if let Some(rest) = url.strip_prefix("redis+cluster://") {
            let (auth, hosts, path) = split_hosts(rest);
            if hosts.is_empty() || !(path.is_empty() || path == "/") {
                return Err(format!(
                    "{url:?}: a cluster URL is redis+cluster://host:port[,host:port...]"
                ));
            }
            let urls: Vec<String> = hosts.iter().map(|h| node_url(auth, h, "")).collect();
            let nodes = urls
                .iter()
                .map(|u| redis::Client::open(u.as_str()).map_err(|e| format!("{u:?}: {e}")))
                .collect::<Result<Vec<_>, _>>()?;
            let client = redis::cluster::ClusterClient::builder(urls)
                .connection_timeout(settings.connect_timeout)
                .response_timeout(settings.response_timeout)
                // Never resend what may have run: `cluster_request` retries what is safe.
                .retries(0)
                .build()
                .map_err(|e| format!("{url:?}: {e}"))?;
            let config = redis::cluster::ClusterConfig::new()
                .set_connection_timeout(settings.connect_timeout)
                .set_response_timeout(settings.response_timeout);
            let conn = client.get_pending_async_connection_with_config(config);
            return Ok(Link::Cluster {
                conn,
                nodes,
                addr: format!("cluster {}", hosts.join(",")),
            });
        }
        if let Some(rest) = url.strip_prefix("redis+sentinel://") {
            let (auth, hosts, path) = split_hosts(rest);
            let mut segments = path.trim_start_matches('/').splitn(2, '/');
            let name = segments.next().unwrap_or("").to_owned();
            let db = match segments.next() {
                Some(d) if !d.is_empty() => format!("/{d}"),
                _ => String::new(),
            };
            if hosts.is_empty() || name.is_empty() {
                return Err(format!(
                    "{url:?}: a Sentinel URL is \
                     redis+sentinel://host:port[,host:port...]/<master-name>[/db]"
                ));
            }
            let sentinels = hosts
                .iter()
                .map(|h| {
                    redis::Client::open(format!("redis://{h}").as_str())
                        .map(|c| (h.to_string(), c))
                        .map_err(|e| format!("sentinel {h:?}: {e}"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let sentinel = Arc::new(Sentinel {
                sentinels,
                name,
                auth: auth.map(str::to_owned),
                db,
                config: settings.manager_config(),
                connect_timeout: settings.connect_timeout,
                current: RwLock::new(None),
                switches: AtomicU64::new(0),
                nudge: Notify::new(),
            });
            if let Err(e) = sentinel.discover().await {
                tracing::warn!(error = %e, "no master from the sentinels yet; delayq keeps asking");
            }
            return Ok(Link::Sentinel(sentinel));
        }
        let client = redis::Client::open(url).map_err(|e| e.to_string())?;
        let addr = client.get_connection_info().addr().to_string();
        let conn =
            ConnectionManager::new_lazy_with_config(client.clone(), settings.manager_config())
                .map_err(|e| e.to_string())?;
        Ok(Link::Single { client, conn, addr })
    }

    /// A connection to use now.
    pub fn conn(&self) -> Conn {
        match self {
            Link::Single { conn, .. } => Conn::Single(conn.clone()),
            Link::Cluster { conn, .. } => Conn::Cluster(conn.clone()),
            Link::Sentinel(s) => match &*s.current.read() {
                Some(m) => Conn::Single(m.conn.clone()),
                None => {
                    Conn::Down(format!("the sentinels named no master for {:?}", s.name).into())
                }
            },
        }
    }

    /// Where Redis is, for error messages.
    pub fn addr(&self) -> String {
        match self {
            Link::Single { addr, .. } | Link::Cluster { addr, .. } => addr.clone(),
            Link::Sentinel(s) => match &*s.current.read() {
                Some(m) => format!("{} (master {:?} by Sentinel)", m.addr, s.name),
                None => format!("master {:?} by Sentinel (none known)", s.name),
            },
        }
    }

    /// Changes whenever later requests may go to another server than earlier ones did (in
    /// Sentinel mode, a move to another master; never in the other modes). See
    /// `Redis::mark`.
    pub fn generation(&self) -> u64 {
        match self {
            Link::Sentinel(s) => s.switches.load(Ordering::SeqCst),
            _ => 0,
        }
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Link::Cluster { .. })
    }

    /// Tells the link that a request failed, so that Sentinel mode asks for the master now.
    pub fn failed(&self) {
        if let Link::Sentinel(s) = self {
            s.nudge.notify_one();
        }
    }

    /// Clients to subscribe with, to be tried in turn.
    pub fn pubsub_clients(&self) -> Vec<redis::Client> {
        match self {
            Link::Single { client, .. } => vec![client.clone()],
            Link::Cluster { nodes, .. } => nodes.clone(),
            Link::Sentinel(s) => s.current.read().iter().map(|m| m.client.clone()).collect(),
        }
    }

    /// The background work of the link (Sentinel mode: following the master), if any.
    pub fn background(&self, stop: watch::Receiver<bool>) -> Option<BoxFuture<'static, ()>> {
        match self {
            Link::Sentinel(s) => Some(Box::pin(Arc::clone(s).follow(stop))),
            _ => None,
        }
    }
}

/// The master currently in use in Sentinel mode.
struct Master {
    addr: String,
    client: redis::Client,
    conn: ConnectionManager,
}

/// Sentinel mode: the sentinels, and the master they named last.
pub(crate) struct Sentinel {
    sentinels: Vec<(String, redis::Client)>,
    name: String,
    auth: Option<String>,
    db: String,
    config: ConnectionManagerConfig,
    connect_timeout: Duration,
    current: RwLock<Option<Master>>,
    /// How many times `current` was replaced: counted after the replacement, so that an
    /// operation that read the count before it and finds it unchanged used one master.
    switches: AtomicU64,
    nudge: Notify,
}

impl Sentinel {
    /// Asks every sentinel for the master and switches to the one most of them name (a
    /// sentinel that missed a failover may still name the old master, which may be back,
    /// empty, and answering as a master until the sentinels demote it), if it answers as a
    /// master.
    async fn discover(&self) -> Result<(), String> {
        let asks = self.sentinels.iter().map(|(host, client)| async move {
            let ask = async {
                let mut c = client.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.name)
                    .query_async::<Option<(String, u16)>>(&mut c)
                    .await
            };
            match tokio::time::timeout(self.connect_timeout * 2, ask).await {
                Ok(Ok(Some((ip, port)))) => Ok(format!("{ip}:{port}")),
                Ok(Ok(None)) => Err(format!("sentinel {host} does not know {:?}", self.name)),
                Ok(Err(e)) => Err(format!("sentinel {host}: {e}")),
                Err(_) => Err(format!("sentinel {host}: no answer")),
            }
        });
        let mut votes: Vec<(String, usize)> = Vec::new();
        let mut errors = Vec::new();
        for answer in join_all(asks).await {
            match answer {
                Ok(addr) => match votes.iter_mut().find(|(a, _)| *a == addr) {
                    Some((_, n)) => *n += 1,
                    None => votes.push((addr, 1)),
                },
                Err(e) => errors.push(e),
            }
        }
        let current = self.current.read().as_ref().map(|m| m.addr.clone());
        // Most votes first; on a tie, the one in use.
        votes.sort_by_key(|(addr, n)| (std::cmp::Reverse(*n), Some(addr) != current.as_ref()));
        let Some((addr, _)) = votes.into_iter().next() else {
            return Err(errors.join("; "));
        };
        if current.as_ref() == Some(&addr) {
            return Ok(());
        }
        let url = node_url(self.auth.as_deref(), &addr, &self.db);
        let client = redis::Client::open(url.as_str()).map_err(|e| format!("{addr}: {e}"))?;
        let role = async {
            let mut c = client.get_multiplexed_async_connection().await?;
            redis::cmd("ROLE").query_async::<Vec<Value>>(&mut c).await
        };
        match tokio::time::timeout(self.connect_timeout * 2, role).await {
            Ok(Ok(r)) if r.first() == Some(&Value::BulkString(b"master".to_vec())) => {}
            Ok(Ok(_)) => return Err(format!("{addr}, named by the sentinels, is not a master")),
            Ok(Err(e)) => return Err(format!("{addr}, named by the sentinels: {e}")),
            Err(_) => return Err(format!("{addr}, named by the sentinels: no answer")),
        }
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), self.config.clone())
            .map_err(|e| format!("{addr}: {e}"))?;
        let old = self.current.write().replace(Master {
            addr: addr.clone(),
            client,
            conn,
        });
        self.switches.fetch_add(1, Ordering::SeqCst);
        match old {
            Some(old) => {
                tracing::warn!(from = %old.addr, to = %addr, master = %self.name, "following a Sentinel failover")
            }
            None => tracing::info!(%addr, master = %self.name, "master found by Sentinel"),
        }
        Ok(())
    }

    /// Follows the master until `stop`: asks again when nudged and once a second.
    async fn follow(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = self.nudge.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            if let Err(e) = self.discover().await {
                tracing::debug!(error = %e, "asking the sentinels for the master failed");
            }
            // Nudges arrive in bursts (every failed request): at most ten rounds a second.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
