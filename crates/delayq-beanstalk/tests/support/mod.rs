//! Shared pieces of the beanstalk tests: a delayq listener in the test process (in memory,
//! embedded, or on a redis-server of its own), Debian's `beanstalkd` as a child process, and
//! a client that reads whole replies.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use delayq::Queue;
use delayq::storage::embedded::{self, EmbeddedOptions};
use delayq::{StorageContext, SystemClock};
use delayq_beanstalk::{BeanstalkOptions, BeanstalkServer, Control};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Which storage a delayq listener runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Memory,
    Embedded,
    /// A Redis standalone started for the listener (testkit), killed when it stops.
    Redis,
}

/// A delayq beanstalk listener on a loopback port.
pub struct Delayq {
    pub addr: SocketAddr,
    pub queue: Queue,
    pub control: Control,
    task: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
    _redis: Option<delayq_testkit::RedisServer>,
}

impl Delayq {
    pub async fn start(mode: Mode) -> Delayq {
        Delayq::start_with(mode, BeanstalkOptions::default()).await
    }

    pub async fn start_with(mode: Mode, options: BeanstalkOptions) -> Delayq {
        if mode == Mode::Redis {
            return Delayq::start_redis(options).await;
        }
        let dir = (mode == Mode::Embedded).then(|| tempfile::tempdir().unwrap());
        Delayq::start_in(dir, options).await
    }

    /// A listener on the Redis backend (default options: 4 partitions a topic) over a fresh
    /// redis-server of its own.
    async fn start_redis(options: BeanstalkOptions) -> Delayq {
        let server = tokio::task::spawn_blocking(delayq_testkit::RedisServer::start)
            .await
            .unwrap();
        let ctx = StorageContext::new(std::sync::Arc::new(SystemClock::new()));
        let storage =
            delayq_redis::start(ctx.clone(), delayq_redis::RedisOptions::new(server.url()))
                .await
                .expect("start the Redis backend");
        let mut delayq = Delayq::serve(Queue::new(storage, ctx), options).await;
        delayq._redis = Some(server);
        delayq
    }

    /// A listener on the embedded storage in `dir`, or in memory without one.
    pub async fn start_in(dir: Option<tempfile::TempDir>, options: BeanstalkOptions) -> Delayq {
        let ctx = StorageContext::new(std::sync::Arc::new(SystemClock::new()));
        let queue = match &dir {
            None => Queue::memory_with(ctx),
            Some(dir) => {
                let (storage, _) = embedded::start(ctx.clone(), EmbeddedOptions::new(dir.path()))
                    .await
                    .unwrap();
                Queue::new(storage, ctx)
            }
        };
        let mut delayq = Delayq::serve(queue, options).await;
        delayq._dir = dir;
        delayq
    }

    /// A listener over `queue` on a free loopback port.
    async fn serve(queue: Queue, options: BeanstalkOptions) -> Delayq {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = BeanstalkServer::from_tcp(listener, queue.clone(), options);
        let control = server.control();
        let task = tokio::spawn(server.run());
        Delayq {
            addr,
            queue,
            control,
            task,
            _dir: None,
            _redis: None,
        }
    }

    /// Closes the listener (held jobs go back) and stops the queue.
    pub async fn stop(self) {
        let _ = self.stop_keep().await;
    }

    /// Like [`Delayq::stop`], handing back the data directory for a restart.
    pub async fn stop_keep(self) -> Option<tempfile::TempDir> {
        self.control.close();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("the listener closes")
            .unwrap();
        self.queue.shutdown().await.unwrap();
        self._dir
    }
}

/// Debian's beanstalkd 1.12 on a free loopback port, killed on drop.
pub struct Beanstalkd {
    pub addr: SocketAddr,
    child: Child,
}

impl Beanstalkd {
    /// Starts `beanstalkd` (from `BEANSTALKD` or the PATH); panics when it is missing, since
    /// scripts/test installs it.
    pub async fn start() -> Beanstalkd {
        let bin = std::env::var("BEANSTALKD").unwrap_or_else(|_| "beanstalkd".into());
        for _ in 0..20 {
            let port = free_port();
            let child = Command::new(&bin)
                .args(["-l", "127.0.0.1", "-p", &port.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot run {bin} (scripts/test installs it): {e}"));
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let mut b = Beanstalkd { addr, child };
            for _ in 0..100 {
                if TcpStream::connect(addr).await.is_ok() {
                    return b;
                }
                if b.child.try_wait().unwrap().is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let _ = b.child.kill();
        }
        panic!("beanstalkd did not start");
    }
}

impl Drop for Beanstalkd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A raw protocol client.
pub struct Client {
    stream: TcpStream,
    buf: Vec<u8>,
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Got {
    /// A whole reply: its line and, for RESERVED/FOUND/OK, its data.
    Reply(String, Option<Vec<u8>>),
    /// Nothing within the wait.
    Nothing,
    /// The server closed the connection.
    Closed,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        Client {
            stream: TcpStream::connect(addr).await.unwrap(),
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Reads one reply, waiting up to `wait`.
    pub async fn read(&mut self, wait: Duration) -> Got {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(got) = self.parse() {
                return got;
            }
            let mut chunk = [0u8; 8192];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Err(_) => return Got::Nothing,
                Ok(Ok(0)) | Ok(Err(_)) => return Got::Closed,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    fn parse(&mut self) -> Option<Got> {
        let end = self.buf.windows(2).position(|w| w == b"\r\n")?;
        let line = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        let word = line.split(' ').next().unwrap_or("");
        let data_len = match word {
            "RESERVED" | "FOUND" | "OK" => line
                .rsplit(' ')
                .next()
                .and_then(|n| n.parse::<usize>().ok()),
            _ => None,
        };
        match data_len {
            Some(n) => {
                if self.buf.len() < end + 2 + n + 2 {
                    return None;
                }
                let data = self.buf[end + 2..end + 2 + n].to_vec();
                self.buf.drain(..end + 2 + n + 2);
                Some(Got::Reply(line, Some(data)))
            }
            None => {
                self.buf.drain(..end + 2);
                Some(Got::Reply(line, None))
            }
        }
    }

    /// Sends `command` and returns the reply line and data as text (one second's wait).
    pub async fn cmd(&mut self, command: &str) -> String {
        self.send(command.as_bytes()).await;
        self.send(b"\r\n").await;
        show(&self.read(Duration::from_secs(5)).await)
    }
}

/// A reply as one string: `LINE` or `LINE|data`.
pub fn show(got: &Got) -> String {
    match got {
        Got::Reply(line, None) => line.clone(),
        Got::Reply(line, Some(data)) => format!("{line}|{}", String::from_utf8_lossy(data)),
        Got::Nothing => "<nothing>".into(),
        Got::Closed => "<closed>".into(),
    }
}
