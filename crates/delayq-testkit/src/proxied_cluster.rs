//! [`ProxiedCluster`]: a [`RedisCluster`] whose every node is reached through a
//! [`FaultProxy`] of its own, for chaos tests between delayq and a Redis Cluster.
//!
//! A cluster client learns the nodes' addresses from the cluster itself (`CLUSTER SLOTS`,
//! `MOVED` and `ASK` redirects), not only from the seeds it was given. A proxy in front of
//! the seeds alone would let the client reach every node directly as soon as it followed a
//! redirect, and the faults would miss most of its traffic. So every node announces its
//! proxy's address as its own (`cluster-announce-ip 127.0.0.1`, `cluster-announce-port
//! <proxy port>`): the slot map, the redirects and the seeds all name proxies, and a client
//! has no route to a node but through its proxy. The cluster bus (node to node: gossip,
//! failure detection, replication) keeps the nodes' real bus ports: the faults are meant for
//! the link between delayq and Redis, and a failover should happen only when a test asks.
//!
//! The announced ports are set with `CONFIG SET` before the nodes are joined, and kept in each
//! node's command line so that a restarted node announces the same.

use std::net::SocketAddr;
use std::time::Duration;

use crate::{FaultProxy, RedisCluster, cli, wait_until};

/// Six `redis-server` processes in cluster mode (3 masters, 3 replicas, as
/// [`RedisCluster::start`]), each behind its own [`FaultProxy`] whose port it announces.
pub struct ProxiedCluster {
    /// Drop the proxies after the cluster: they forward nothing once its nodes are gone.
    cluster: RedisCluster,
    /// `proxies[i]` is in front of the node on `real_ports[i]`.
    proxies: Vec<FaultProxy>,
    real_ports: Vec<u16>,
}

impl ProxiedCluster {
    /// Starts the nodes, a proxy in front of each, makes each node announce its proxy, joins
    /// them and waits until the cluster is healthy. Call it inside a multi-threaded tokio
    /// runtime: the proxies run on it while the cluster is being joined (on a blocking
    /// thread). Panics when the cluster does not come up.
    pub async fn start() -> ProxiedCluster {
        let mut nodes = tokio::task::spawn_blocking(|| RedisCluster::start_nodes(1))
            .await
            .expect("start the cluster's nodes");
        let mut proxies = Vec::new();
        for node in &mut nodes {
            let proxy = FaultProxy::start(([127, 0, 0, 1], node.port()).into()).await;
            let port = proxy.addr().port().to_string();
            let out = cli(
                node.port(),
                &[
                    "CONFIG",
                    "SET",
                    "cluster-announce-ip",
                    "127.0.0.1",
                    "cluster-announce-port",
                    &port,
                ],
            );
            assert!(out.trim() == "OK", "CONFIG SET cluster-announce-*: {out}");
            // A restarted node announces the same.
            node.extra.extend([
                "--cluster-announce-ip".to_owned(),
                "127.0.0.1".to_owned(),
                "--cluster-announce-port".to_owned(),
                port,
            ]);
            proxies.push(proxy);
        }
        let real_ports = nodes.iter().map(crate::RedisServer::port).collect();
        let cluster = tokio::task::spawn_blocking(move || RedisCluster::join(nodes, 1))
            .await
            .expect("join the cluster");
        let proxied = ProxiedCluster {
            cluster,
            proxies,
            real_ports,
        };
        let announced = proxied.cluster.nodes_table();
        for proxy in &proxied.proxies {
            assert!(
                announced.contains(&format!("127.0.0.1:{}@", proxy.addr().port())),
                "every node announces its proxy:\n{announced}"
            );
        }
        proxied
    }

    /// `redis+cluster://` URL with every node's proxy as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.proxies.iter().map(|p| p.addr().to_string()).collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The proxies, one per node.
    pub fn proxies(&self) -> &[FaultProxy] {
        &self.proxies
    }

    /// The cluster behind the proxies. Its `masters`, `master_of_slot` and `nodes_table`
    /// name nodes by their announced addresses, the proxies' ports.
    pub fn cluster(&self) -> &RedisCluster {
        &self.cluster
    }

    /// The proxy in front of the node that announces `port` (a port of
    /// [`RedisCluster::masters`]).
    pub fn proxy_at(&self, port: u16) -> Option<&FaultProxy> {
        self.proxies.iter().find(|p| p.addr().port() == port)
    }

    /// The real port of the node behind the proxy on `port`.
    pub fn real_port(&self, port: u16) -> Option<u16> {
        let i = self.proxies.iter().position(|p| p.addr().port() == port)?;
        Some(self.real_ports[i])
    }

    /// The addresses of the proxies in front of the masters that serve slots now.
    pub fn master_proxies(&self) -> Vec<SocketAddr> {
        self.cluster
            .masters()
            .into_iter()
            .filter_map(|port| self.proxy_at(port).map(FaultProxy::addr))
            .collect()
    }

    /// A manual failover of the master announced on `port` (`CLUSTER FAILOVER` on its
    /// replica, straight to the node, not through a proxy): the replica catches up with its
    /// master, the master stops writes meanwhile, and the two swap roles, so nothing
    /// acknowledged is lost. Returns the announced port of the new master once it serves the
    /// slots and the cluster is healthy again; panics when that does not happen in time.
    pub fn fail_over(&self, port: u16) -> u16 {
        let table = self.cluster.nodes_table();
        let fields = |line: &str| -> Vec<String> { line.split(' ').map(str::to_owned).collect() };
        let announced =
            |f: &[String]| -> Option<u16> { f.get(1)?.split(['@', ':']).nth(1)?.parse().ok() };
        let master_id = table
            .lines()
            .map(fields)
            .find(|f| announced(f) == Some(port))
            .map(|f| f[0].clone())
            .unwrap_or_else(|| panic!("no node announces {port}:\n{table}"));
        let replica = table
            .lines()
            .map(fields)
            .find(|f| f.get(3) == Some(&master_id) && !f[2].contains("fail"))
            .and_then(|f| announced(&f))
            .unwrap_or_else(|| panic!("the master on {port} has no live replica:\n{table}"));
        let real = self.real_port(replica).expect("a proxied node");
        let out = cli(real, &["CLUSTER", "FAILOVER"]);
        assert!(out.trim() == "OK", "CLUSTER FAILOVER on {replica}: {out}");
        let promoted = wait_until(Duration::from_secs(30), || {
            self.cluster.masters().contains(&replica) && !self.cluster.masters().contains(&port)
        });
        assert!(
            promoted && self.cluster.wait_healthy(Duration::from_secs(30)),
            "the replica on {replica} did not take over from {port}:\n{}",
            self.cluster.nodes_table()
        );
        replica
    }
}
