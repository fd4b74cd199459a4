//! Test support shared by delayq's integration tests.
//!
//! [`RedisServer`] runs a real `redis-server` of the test's own on a free loopback port, in its
//! own temporary directory, and kills it when dropped, so tests are isolated from each other
//! and from the machine's Redis on 6379 (which they never touch), and can kill and restart
//! their server at will. [`RedisCluster`] runs a Redis Cluster of 3 masters and 3 replicas,
//! [`RedisSentinel`] a master, a replica and 3 sentinels, for failover tests.
//!
//! [`history`] records what clients did and saw, and checks delayq's promises over it.
//! [`SmallFs`] is a small tmpfs of the test's own, to fill up for real. [`FaultProxy`] sits
//! between a client and a server and injects network faults on command; [`ProxiedCluster`] is
//! a Redis Cluster with a proxy in front of every node, announced as the node's address, so
//! that a cluster client reaches every node only through the faults. [`Receiver`] is a
//! webhook receiver for push tests that records requests and answers as told.
//! [`PostgresServer`] runs a PostgreSQL server of the test's own (Debian's postgresql-15), never
//! the machine's on 5432; [`PostgresPair`] a primary and its synchronous streaming replica,
//! for failover tests.

mod cluster;
mod fault_proxy;
pub mod history;
pub mod pki;
mod postgres;
mod proxied_cluster;
mod receiver;
mod sentinel;
mod small_fs;

pub use cluster::RedisCluster;
pub use fault_proxy::{FaultProxy, Faults, random_faults};
pub use postgres::{PG_BIN, PostgresPair, PostgresServer};
pub use proxied_cluster::ProxiedCluster;
pub use receiver::{Call, Receiver, Reply};
pub use sentinel::RedisSentinel;
pub use small_fs::SmallFs;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A `redis-server` of our own. Never the system one on 6379.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    aof: bool,
    extra: Vec<String>,
    sentinel: bool,
}

/// A free loopback port (there is a race until redis-server binds it; `start` retries).
pub(crate) fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().unwrap().port();
        if port != 6379 {
            return port;
        }
    }
}

impl RedisServer {
    /// A server without persistence.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// A server with an append-only file fsynced on every write, for restart tests.
    pub fn start_with_aof() -> Self {
        Self::start_with(true)
    }

    /// A server without persistence replicating the one on `master`, once it has synced.
    /// Panics when it does not sync within 30 s.
    pub fn start_replica_of(master: u16) -> Self {
        let replica = Self::start_with_args(false, replica_of(master));
        let synced = wait_until(Duration::from_secs(30), || {
            replica
                .info_field("replication", "master_link_status")
                .as_deref()
                == Some("up")
        });
        assert!(
            synced,
            "the replica did not sync with the master on {master}"
        );
        replica
    }

    fn start_with(aof: bool) -> Self {
        Self::start_with_args(aof, Vec::new())
    }

    /// A server with extra command-line arguments (e.g. `--cluster-enabled yes`).
    pub fn start_with_args(aof: bool, extra: Vec<String>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("delayq-redis-test")
            .tempdir()
            .expect("create a temp dir");
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            aof,
            extra,
            sentinel: false,
        };
        for _ in 0..10 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-server on a free port");
    }

    /// Starts the process on `self.port`; false when it did not come up.
    fn spawn(&mut self) -> bool {
        let mut cmd = Command::new("redis-server");
        if self.sentinel {
            cmd.arg(self.dir.path().join("sentinel.conf"))
                .arg("--sentinel");
        }
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--daemonize")
            .arg("no")
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"));
        if self.sentinel {
            // Sentinels keep no data.
        } else if self.aof {
            cmd.args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ]);
        } else {
            cmd.args(["--save", "", "--appendonly", "no"]);
        }
        for arg in &self.extra {
            cmd.arg(arg.replace("{dir}", &self.dir.path().display().to_string()));
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run redis-server (is it installed?)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                eprintln!("redis-server on {} exited: {status}", self.port);
                return false;
            }
            // Our own process must answer (a server another test started on the port while
            // ours was down would answer a PING too), and be done loading its data.
            if self.process_id() == Some(self.child.as_ref().unwrap().id()) && self.ping() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    /// A sentinel (`redis-server <dir>/sentinel.conf --sentinel`) whose directory holds its
    /// config file, on a free loopback port.
    pub(crate) fn start_sentinel(dir: TempDir) -> Self {
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            aof: false,
            extra: Vec::new(),
            sentinel: true,
        };
        for _ in 0..10 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-sentinel on a free port");
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is running (not killed).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn ping(&self) -> bool {
        self.command("PING")
            .map(|r| r.starts_with("+PONG"))
            .unwrap_or(false)
    }

    /// Stops the process (SIGSTOP) until [`RedisServer::resume`]: alive, connected and
    /// silent, as a server that stalls.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.pid().expect("the server runs");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// The pid of the server that answers on the port, if one does.
    fn process_id(&self) -> Option<u32> {
        self.info_field("server", "process_id")?.parse().ok()
    }

    /// Sends one inline command and returns the raw reply.
    pub fn command(&self, line: &str) -> std::io::Result<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.write_all(format!("{line}\r\n").as_bytes())?;
        let mut out = Vec::new();
        let mut buf = [0u8; 65536];
        loop {
            let n = s.read(&mut buf)?;
            out.extend_from_slice(&buf[..n]);
            if n == 0 || reply_complete(&out) {
                break;
            }
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// One `INFO` field, e.g. `used_memory`.
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info = self.command(&format!("INFO {section}")).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .map(|v| v.trim().to_owned())
    }

    /// The last `lines` lines of its log, headed by its port, for a failed test to show.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("redis.log")).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        format!("--- redis-server on {} ---\n{tail}\n", self.port)
    }

    /// The port it listens on (loopback).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its own temporary directory (data, AOF, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its `redis://` URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILLs the server (no shutdown save).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory (AOF replayed if enabled).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }
}

/// The arguments that start a data server as a replica of the one on `master`.
pub(crate) fn replica_of(master: u16) -> Vec<String> {
    vec!["--replicaof".into(), "127.0.0.1".into(), master.to_string()]
}

/// Runs `redis-cli -p <port> <args...>` against a loopback server and returns its output.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-h")
        .arg("127.0.0.1")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli (is it installed?)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts a watchdog (`sh`) that SIGKILLs `pids` once this process has ended, then removes
/// the directories `dirs`: for servers kept in statics, which are never dropped (so their
/// `TempDir`s would stay behind, one per node and test binary).
#[allow(
    clippy::zombie_processes,
    reason = "the watchdog outlives this process on purpose; init reaps it"
)]
pub fn kill_when_process_ends(pids: &[u32], dirs: &[&Path]) {
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    // Single-quoted for sh; a path with a quote in it is left alone rather than mangled.
    let dirs: Vec<String> = dirs
        .iter()
        .filter_map(|d| d.to_str())
        .filter(|d| !d.contains('\''))
        .map(|d| format!("'{d}'"))
        .collect();
    let remove = if dirs.is_empty() {
        String::new()
    } else {
        format!("; rm -rf {}", dirs.join(" "))
    };
    let script = format!(
        "while kill -0 {me} 2>/dev/null; do sleep 0.5; done; kill -9 {pids} 2>/dev/null{remove}",
        me = std::process::id(),
        pids = pids.join(" ")
    );
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the watchdog shell");
}

/// Polls `check` every 50 ms until it holds or `within` passes; false on timeout.
pub fn wait_until(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    check()
}

/// Polls `check` every 10 ms until it returns true, for at most `limit` (the async twin of
/// [`wait_until`]).
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// Whether a buffer holds one complete RESP reply (enough for INFO and simple replies).
fn reply_complete(buf: &[u8]) -> bool {
    match buf.first() {
        Some(b'$') => {
            let Some(end) = buf.windows(2).position(|w| w == b"\r\n") else {
                return false;
            };
            let len: i64 = std::str::from_utf8(&buf[1..end])
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            len < 0 || buf.len() >= end + 2 + len as usize + 2
        }
        Some(_) => buf.ends_with(b"\r\n"),
        None => false,
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
