//! [`RedisCluster`]: a Redis Cluster of real processes, 3 masters with one replica each.

use std::sync::OnceLock;
use std::time::Duration;

use crate::{RedisServer, cli, free_port, wait_until};

/// Six `redis-server` processes in cluster mode (3 masters, 3 replicas, node timeout 1 s so
/// that a replica takes over a dead master within a few seconds), each on its own free
/// loopback port and in its own temporary directory, all killed when dropped.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the six nodes, joins them with `redis-cli --cluster create` and waits until
    /// every node reports `cluster_state:ok`. Panics when that does not happen in time.
    pub fn start() -> Self {
        Self::start_inner(1)
    }

    /// Three masters and no replicas (for benchmarks: every process does the work of its
    /// slots only).
    pub fn start_masters_only() -> Self {
        Self::start_inner(0)
    }

    /// One cluster for the whole test process, started on first use and shared by every
    /// test in it (give each test its own key prefix). Statics are never dropped, so a
    /// watchdog kills its processes when the test process has ended. Never kill its nodes:
    /// other tests use it; start a cluster of your own for failover tests.
    pub fn shared() -> &'static RedisCluster {
        static SHARED: OnceLock<RedisCluster> = OnceLock::new();
        SHARED.get_or_init(|| {
            let cluster = Self::start_inner(1);
            let pids: Vec<u32> = cluster.nodes.iter().filter_map(RedisServer::pid).collect();
            let dirs: Vec<&std::path::Path> = cluster.nodes.iter().map(RedisServer::dir).collect();
            crate::kill_when_process_ends(&pids, &dirs);
            cluster
        })
    }

    fn start_inner(replicas: usize) -> Self {
        Self::join(Self::start_nodes(replicas), replicas)
    }

    /// Starts the `3 * (1 + replicas)` processes in cluster mode, not yet joined (a
    /// [`crate::ProxiedCluster`] sets what they announce in between).
    pub(crate) fn start_nodes(replicas: usize) -> Vec<RedisServer> {
        // The bus port is given explicitly: the default (port + 10000) may be out of range
        // or taken for a port the OS picked.
        (0..3 * (1 + replicas))
            .map(|_| {
                let mut extra = args(
                    "--cluster-enabled yes --cluster-config-file {dir}/nodes.conf \
                     --cluster-node-timeout 1000 --cluster-require-full-coverage no",
                );
                extra.push("--cluster-port".into());
                extra.push(free_port().to_string());
                RedisServer::start_with_args(false, extra)
            })
            .collect()
    }

    /// Joins `nodes` with `redis-cli --cluster create` (each master with `replicas` replicas)
    /// and waits until every node reports `cluster_state:ok`. Panics when that does not
    /// happen in time.
    pub(crate) fn join(nodes: Vec<RedisServer>, replicas: usize) -> Self {
        let mut create: Vec<String> = vec!["--cluster".into(), "create".into()];
        create.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        create.extend(args(&format!(
            "--cluster-replicas {replicas} --cluster-yes"
        )));
        let create: Vec<&str> = create.iter().map(String::as_str).collect();
        let out = cli(nodes[0].port(), &create);
        assert!(
            out.contains("All 16384 slots covered"),
            "redis-cli --cluster create failed: {out}"
        );
        let cluster = RedisCluster { nodes };
        let ok = wait_until(Duration::from_secs(30), || {
            cluster.nodes.iter().all(|n| {
                cluster_info(n.port(), "cluster_state").as_deref() == Some("ok")
                    && cluster_info(n.port(), "cluster_known_nodes")
                        == Some(cluster.nodes.len().to_string())
            }) && cluster.masters().len() == 3
                && cluster.replicas_in_sync()
        });
        assert!(
            ok,
            "the cluster did not reach cluster_state:ok: {:?} {:?}\n{}",
            cluster_info(cluster.nodes[0].port(), "cluster_state"),
            cluster_info(cluster.nodes[0].port(), "cluster_known_nodes"),
            cluster.nodes_table()
        );
        cluster
    }

    /// Whether every live master has a replica and every live replica is in sync.
    fn replicas_in_sync(&self) -> bool {
        self.nodes.iter().filter(|n| n.is_running()).all(|n| {
            match n.info_field("replication", "role").as_deref() {
                Some("master") => {
                    let want = if self.nodes.len() > 3 { "1" } else { "0" };
                    n.info_field("replication", "connected_slaves").as_deref() == Some(want)
                }
                Some("slave") => {
                    n.info_field("replication", "master_link_status").as_deref() == Some("up")
                }
                _ => false,
            }
        })
    }

    /// `redis+cluster://` URL with every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The end of every node's log, for a failed test to show.
    pub fn report(&self) -> String {
        self.nodes.iter().map(|n| n.log_tail(40)).collect()
    }

    /// The ports of all six nodes.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// `CLUSTER NODES` as seen by the first live node.
    pub fn nodes_table(&self) -> String {
        for n in &self.nodes {
            if n.is_running() {
                let out = cli(n.port(), &["CLUSTER", "NODES"]);
                if !out.trim().is_empty() {
                    return out;
                }
            }
        }
        String::new()
    }

    /// The ports of the live masters that serve slots, as the first live node sees them.
    pub fn masters(&self) -> Vec<u16> {
        let mut out: Vec<u16> = self
            .nodes_table()
            .lines()
            .filter_map(|line| {
                let f: Vec<&str> = line.split(' ').collect();
                let serves = f.len() > 8;
                let live = f.get(2)?.contains("master") && !f[2].contains("fail");
                let port = f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()?;
                (serves && live).then_some(port)
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// The port of the master that serves `slot`.
    pub fn master_of_slot(&self, slot: u16) -> Option<u16> {
        self.nodes_table().lines().find_map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            if !f.get(2)?.contains("master") || f[2].contains("fail") {
                return None;
            }
            let covers = f.iter().skip(8).any(|range| {
                let mut ends = range.split('-');
                let lo: u16 = ends.next().and_then(|x| x.parse().ok()).unwrap_or(u16::MAX);
                let hi: u16 = ends.next().and_then(|x| x.parse().ok()).unwrap_or(lo);
                (lo..=hi).contains(&slot)
            });
            if covers {
                f.get(1)?.split(['@', ':']).nth(1)?.parse().ok()
            } else {
                None
            }
        })
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        let port = self
            .nodes
            .iter()
            .find(|n| n.is_running())
            .map(RedisServer::port)
            .expect("a live node");
        cli(port, &["CLUSTER", "KEYSLOT", key])
            .trim()
            .parse()
            .expect("CLUSTER KEYSLOT answers a number")
    }

    /// Starts the killed node on `port` again, with its data directory and `nodes.conf`, so
    /// that it rejoins the cluster (as a replica, once its replica has taken over).
    pub fn restart(&mut self, port: u16) {
        for n in &mut self.nodes {
            if n.port() == port {
                n.restart();
            }
        }
    }

    /// SIGKILLs the node on `port`.
    pub fn kill(&mut self, port: u16) {
        for n in &mut self.nodes {
            if n.port() == port {
                n.kill();
            }
        }
    }

    /// Waits until the live nodes report `cluster_state:ok` with 3 live masters again.
    pub fn wait_healthy(&self, within: Duration) -> bool {
        wait_until(within, || {
            self.masters().len() == 3
                && self
                    .nodes
                    .iter()
                    .filter(|n| n.is_running())
                    .all(|n| cluster_info(n.port(), "cluster_state").as_deref() == Some("ok"))
        })
    }
}

/// Command-line arguments from one string.
fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

/// One field of `CLUSTER INFO` of the node on `port`.
fn cluster_info(port: u16, field: &str) -> Option<String> {
    cli(port, &["CLUSTER", "INFO"])
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
}
