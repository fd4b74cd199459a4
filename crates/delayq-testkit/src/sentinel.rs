//! [`RedisSentinel`]: a master, its replica and three sentinels, all real processes.

use std::time::Duration;

use crate::{RedisServer, cli, replica_of, wait_until};

/// The name the sentinels know the master by.
pub const MASTER_NAME: &str = "delayq";

/// A master, one replica and three sentinels (quorum 2, `down-after-milliseconds` 1000,
/// `failover-timeout` 3000), each on its own free loopback port and in its own temporary
/// directory, all killed when dropped.
pub struct RedisSentinel {
    servers: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl RedisSentinel {
    /// Starts everything and waits until every sentinel knows the replica and the other
    /// sentinels (so that a failover can be agreed on). Panics when that does not happen.
    pub fn start() -> Self {
        let master = RedisServer::start();
        let replica = RedisServer::start_replica_of(master.port());
        let mut sentinels = Vec::new();
        for _ in 0..3 {
            let dir = tempfile::Builder::new()
                .prefix("delayq-sentinel-conf")
                .tempdir()
                .expect("create a temp dir");
            // The config must be writable: sentinels rewrite it. It lives in the sentinel's
            // own directory.
            let conf = dir.path().join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 3000\n\
                     sentinel parallel-syncs {MASTER_NAME} 1\n",
                    master.port()
                ),
            )
            .expect("write sentinel.conf");
            let server = RedisServer::start_sentinel(dir);
            sentinels.push(server);
        }
        let setup = RedisSentinel {
            servers: vec![master, replica],
            sentinels,
        };
        let ready = wait_until(Duration::from_secs(30), || {
            setup.sentinels.iter().all(|s| {
                let info = cli(s.port(), &["SENTINEL", "MASTER", MASTER_NAME]);
                let field = |name: &str| {
                    let lines: Vec<&str> = info.lines().collect();
                    lines
                        .iter()
                        .position(|l| *l == name)
                        .and_then(|i| lines.get(i + 1))
                        .map(|v| v.to_string())
                };
                field("num-slaves").as_deref() == Some("1")
                    && field("num-other-sentinels").as_deref() == Some("2")
            })
        });
        assert!(
            ready,
            "the sentinels did not discover each other and the replica"
        );
        setup
    }

    /// `redis+sentinel://` URL naming the three sentinels and the master.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        format!("redis+sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The port of the master as the first live sentinel names it.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let out = cli(
                s.port(),
                &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME],
            );
            out.lines().nth(1)?.trim().parse().ok()
        })
    }

    /// Starts the data server on `port` again as a replica of the one on `master`, with
    /// `replica-priority 0`. This is how a master that keeps no data comes back.
    ///
    /// - Restarted as a master, it is empty until the sentinels demote it, and in that window
    ///   the others can be made to sync its empty data set (Redis's documented hazard of a
    ///   master without persistence that restarts).
    /// - Restarted as a replica but promotable, it is promoted when the new master stalls for
    ///   the sentinels' `down-after-milliseconds` (1 s here; a loaded test machine) before it
    ///   has synced, and the new master then syncs its empty data set. Reproduced by hand:
    ///   with the new master stopped (SIGSTOP, 12 s) when the old one came back, the old one
    ///   (`master_link_down_since_seconds:-1`, 0 keys) was promoted over the new one's 100
    ///   keys. With priority 0 the sentinels found no replica to promote and waited.
    ///
    /// The failover test lost every task it had acknowledged in one CI run before each of the
    /// two changes; whether these were the causes was not established (the logs were gone:
    /// the test now prints them, [`RedisSentinel::report`]).
    pub fn restart_as_replica_of(&mut self, port: u16, master: u16) {
        for s in &mut self.servers {
            if s.port() == port {
                s.extra = replica_of(master);
                s.extra
                    .extend(["--replica-priority".to_owned(), "0".to_owned()]);
                s.restart();
            }
        }
    }

    /// The end of every server's and sentinel's log (roles, syncs, failovers), for a failed
    /// test to show.
    pub fn report(&self) -> String {
        self.servers
            .iter()
            .chain(&self.sentinels)
            .map(|s| s.log_tail(40))
            .collect()
    }

    /// SIGKILLs the data server on `port` (master or replica).
    pub fn kill(&mut self, port: u16) {
        for s in &mut self.servers {
            if s.port() == port {
                s.kill();
            }
        }
    }

    /// Waits until the sentinels name a master other than `old` and it answers as a master.
    pub fn wait_failover(&self, old: u16, within: Duration) -> Option<u16> {
        let mut new = None;
        wait_until(within, || {
            new = self.master_port().filter(|&p| p != old);
            new.is_some_and(|p| cli(p, &["ROLE"]).starts_with("master"))
        })
        .then_some(new)
        .flatten()
    }
}
