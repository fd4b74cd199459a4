//! Shared by the integration tests: real `redis-server` processes on free loopback ports,
//! each with its own temporary directory, killed when dropped; and backends over them.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::{Clock, ManualClock, Queue, StorageContext, SystemClock};
use delayq_redis::{RedisOptions, RedisStorage};
use tempfile::TempDir;

/// A `redis-server` of our own. Never the system one on 6379.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    aof: bool,
}

/// A free loopback port (there is a race until redis-server binds it; `start` retries).
fn free_port() -> u16 {
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

    fn start_with(aof: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("delayq-redis-test")
            .tempdir()
            .expect("create a temp dir");
        let mut server = RedisServer {
            child: None,
            port: 0,
            dir,
            aof,
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
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--save")
            .arg("")
            .arg("--daemonize")
            .arg("no")
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"));
        if self.aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
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
            if self.ping() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    fn ping(&self) -> bool {
        self.command("PING")
            .map(|r| r.starts_with("+PONG"))
            .unwrap_or(false)
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

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

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

/// Options for tests: short timeouts so that fault tests fail fast.
pub fn options(server: &RedisServer) -> RedisOptions {
    RedisOptions::new(server.url())
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_secs(2))
}

/// One instance: a backend over `server`, and a queue on it.
pub struct Instance {
    pub storage: Arc<RedisStorage>,
    pub queue: Queue,
}

impl Instance {
    pub async fn start(ctx: StorageContext, options: RedisOptions) -> Self {
        let storage = delayq_redis::start(ctx.clone(), options)
            .await
            .expect("start the Redis backend");
        let queue = Queue::new(storage.clone(), ctx);
        Instance { storage, queue }
    }

    /// An instance on a manual clock standing at `now`.
    pub async fn manual(server: &RedisServer, clock: &ManualClock) -> Self {
        let ctx = StorageContext::new(Arc::new(clock.clone()));
        Self::start(ctx, options(server)).await
    }

    /// An instance on the system clock.
    pub async fn system(options: RedisOptions) -> Self {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock::new());
        Self::start(StorageContext::new(clock), options).await
    }
}

/// Polls `check` every 10 ms until it returns true, for at most `limit`.
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

/// How many lease buckets each instance holds, read from Redis (`dq` prefix).
pub fn lease_owners(server: &RedisServer) -> std::collections::HashMap<String, usize> {
    let keys: Vec<String> = (0..delayq_redis::keys::LEASE_BUCKETS)
        .map(|b| format!("dq:{{lease}}:bucket:{b}"))
        .collect();
    let reply = server
        .command(&format!("MGET {}", keys.join(" ")))
        .expect("MGET the leases");
    let mut owners = std::collections::HashMap::new();
    let mut lines = reply.lines();
    lines.next(); // *64
    while let Some(len) = lines.next() {
        if len == "$-1" {
            continue;
        }
        let value = lines.next().unwrap_or_default();
        let owner = value.split(':').next().unwrap_or_default().to_owned();
        *owners.entry(owner).or_insert(0) += 1;
    }
    owners
}

/// A Redis backend that owns its redis-server: the server is killed when the backend is
/// dropped (for the conformance suite, whose harness owns only the storage).
pub struct Served {
    storage: Arc<RedisStorage>,
    _server: RedisServer,
}

/// Starts a redis-server and a backend over it, on `ctx`.
pub async fn served(ctx: StorageContext) -> Arc<Served> {
    let server = RedisServer::start();
    let storage = delayq_redis::start(ctx, options(&server))
        .await
        .expect("start the Redis backend");
    Arc::new(Served {
        storage,
        _server: server,
    })
}

#[async_trait::async_trait]
impl delayq::Storage for Served {
    async fn add(&self, tasks: Vec<delayq::TaskSpec>) -> delayq::Result<Vec<delayq::AddResult>> {
        self.storage.add(tasks).await
    }
    async fn pop(
        &self,
        topic: &str,
        max: usize,
        auto_finish: bool,
    ) -> delayq::Result<Vec<delayq::Delivery>> {
        self.storage.pop(topic, max, auto_finish).await
    }
    async fn finish(&self, topic: &str, id: &str, receipt: Option<&str>) -> delayq::Result<()> {
        self.storage.finish(topic, id, receipt).await
    }
    async fn release(
        &self,
        topic: &str,
        id: &str,
        options: delayq::ReleaseOptions,
    ) -> delayq::Result<delayq::State> {
        self.storage.release(topic, id, options).await
    }
    async fn touch(&self, topic: &str, id: &str, receipt: Option<&str>) -> delayq::Result<u64> {
        self.storage.touch(topic, id, receipt).await
    }
    async fn cancel(&self, topic: &str, id: &str) -> delayq::Result<()> {
        self.storage.cancel(topic, id).await
    }
    async fn requeue(&self, topic: &str, id: &str) -> delayq::Result<()> {
        self.storage.requeue(topic, id).await
    }
    async fn requeue_all(&self, topic: &str) -> delayq::Result<u64> {
        self.storage.requeue_all(topic).await
    }
    async fn delete(&self, topic: &str, id: &str) -> delayq::Result<()> {
        self.storage.delete(topic, id).await
    }
    async fn get(&self, topic: &str, id: &str) -> delayq::Result<delayq::TaskInfo> {
        self.storage.get(topic, id).await
    }
    async fn list(
        &self,
        topic: &str,
        state: Option<delayq::State>,
        page: u64,
        page_size: u64,
    ) -> delayq::Result<delayq::Page<delayq::TaskInfo>> {
        self.storage.list(topic, state, page, page_size).await
    }
    async fn stats(&self, topic: &str) -> delayq::Result<delayq::TopicStats> {
        self.storage.stats(topic).await
    }
    async fn topics(&self) -> delayq::Result<Vec<(String, delayq::TopicStats)>> {
        self.storage.topics().await
    }
    async fn check_ready(&self) -> delayq::Result<()> {
        self.storage.check_ready().await
    }
    async fn shutdown(&self) -> delayq::Result<()> {
        self.storage.shutdown().await
    }
}
