//! A TCP proxy that injects network faults between a client and a server, for chaos tests
//! between delayq and Redis.
//!
//! [`FaultProxy::start`] listens on a free loopback port and forwards every connection to the
//! upstream address, one task per connection pumping each direction in order. What it does to
//! the bytes is the [`Faults`] in force, which the test changes at any moment
//! ([`FaultProxy::set`]); a change applies to the connections already open and to new ones:
//!
//! - `latency` and `jitter`: each chunk waits `latency` plus a random part of `jitter` before
//!   it is forwarded (a direction's chunks stay in order);
//! - `bytes_per_sec`: a bandwidth limit, per direction of each connection;
//! - `blackhole`: nothing is forwarded and nothing is closed: connections stay open and
//!   silent (half-open) until the blackhole ends, then the held bytes go on, late;
//! - `refuse`: new connections are reset at once;
//! - `lose_replies`: requests reach the server, replies are thrown away and the connection
//!   is reset once no request has come for 50 ms (so that a request the client wrote just
//!   before reaches the server): the write happened and the client cannot know it;
//! - `lose_replies_after`: the same, from the moment a request containing these bytes (a
//!   task id, say) has been forwarded on a connection: exactly "the write happened, its reply
//!   was lost", whatever else the connection carries.
//!
//! Two one-off faults act on connections: [`FaultProxy::cut`] resets every open connection,
//! and [`FaultProxy::reset_next_reply`] lets half of the next reply through and then resets
//! that connection (a reply cut in the middle). Every close the proxy makes is a reset (RST,
//! zero linger), as a dead peer or a middlebox would give.
//!
//! [`random_faults`] is the chaos loop the chaos tests share: one random fault on one random
//! proxy at a time, each for a random while.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The faults a [`FaultProxy`] applies. The default is none: bytes pass as they come.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Faults {
    /// Added to every chunk, each direction.
    pub latency: Duration,
    /// Up to this much more, at random, per chunk.
    pub jitter: Duration,
    /// A bandwidth limit per direction of each connection, in bytes per second.
    pub bytes_per_sec: Option<u64>,
    /// Forward nothing and close nothing, until it ends.
    pub blackhole: bool,
    /// Reset new connections at once.
    pub refuse: bool,
    /// Let requests through, throw the replies away and reset the connection.
    pub lose_replies: bool,
    /// Like `lose_replies`, from the moment a request containing these bytes was forwarded.
    pub lose_replies_after: Option<Vec<u8>>,
}

impl Faults {
    /// No faults.
    pub fn none() -> Self {
        Faults::default()
    }

    /// Latency with jitter.
    pub fn latency(latency: Duration, jitter: Duration) -> Self {
        Faults {
            latency,
            jitter,
            ..Faults::default()
        }
    }

    /// A bandwidth limit.
    pub fn bandwidth(bytes_per_sec: u64) -> Self {
        Faults {
            bytes_per_sec: Some(bytes_per_sec.max(1)),
            ..Faults::default()
        }
    }

    /// A blackhole: connections stay open and silent.
    pub fn blackhole() -> Self {
        Faults {
            blackhole: true,
            ..Faults::default()
        }
    }

    /// New connections refused (reset), open ones untouched.
    pub fn refuse() -> Self {
        Faults {
            refuse: true,
            ..Faults::default()
        }
    }

    /// Requests pass; once a request containing `pattern` has been forwarded, replies are
    /// lost and the connection reset.
    pub fn lose_replies_after(pattern: impl Into<Vec<u8>>) -> Self {
        Faults {
            lose_replies_after: Some(pattern.into()),
            ..Faults::default()
        }
    }

    /// Requests pass, replies are lost and the connection reset.
    pub fn lose_replies() -> Self {
        Faults {
            lose_replies: true,
            ..Faults::default()
        }
    }
}

/// The proxy's faults and counters, shared by its tasks and the test.
struct ProxyState {
    upstream: SocketAddr,
    faults: Mutex<Faults>,
    /// Bumped on every change of `faults`, to wake pumps held by a blackhole.
    changed: watch::Sender<u64>,
    /// Bumped by `cut`: every connection open at that moment is reset.
    cut: watch::Sender<u64>,
    reset_next_reply: AtomicBool,
    rng: AtomicU64,
    accepted: AtomicU64,
    resets: AtomicU64,
}

impl ProxyState {
    fn faults(&self) -> Faults {
        self.faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A random number below `n` (xorshift; the proxy needs no better).
    fn below(&self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let mut x = self.rng.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.store(x, Ordering::Relaxed);
        x % n
    }
}

/// A fault-injecting TCP proxy on a loopback port. Stops when dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<ProxyState>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` on a free loopback port. Call it inside a tokio runtime.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let seed = u64::from(addr.port()).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let shared = Arc::new(ProxyState {
            upstream,
            faults: Mutex::new(Faults::none()),
            changed: watch::channel(0).0,
            cut: watch::channel(0).0,
            reset_next_reply: AtomicBool::new(false),
            rng: AtomicU64::new(seed),
            accepted: AtomicU64::new(0),
            resets: AtomicU64::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        FaultProxy {
            addr,
            shared,
            accept,
        }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The faults in force.
    pub fn faults(&self) -> Faults {
        self.shared.faults()
    }

    /// Puts `faults` in force, for open and new connections.
    pub fn set(&self, faults: Faults) {
        *self
            .shared
            .faults
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = faults;
        self.shared.changed.send_modify(|n| *n += 1);
    }

    /// Ends every fault: bytes pass as they come again (held bytes go on).
    pub fn heal(&self) {
        self.shared.reset_next_reply.store(false, Ordering::Release);
        self.set(Faults::none());
    }

    /// Resets every connection open now.
    pub fn cut(&self) {
        self.shared.cut.send_modify(|n| *n += 1);
    }

    /// Lets half of the next reply (server to client chunk) of any connection through, then
    /// resets that connection.
    pub fn reset_next_reply(&self) {
        self.shared.reset_next_reply.store(true, Ordering::Release);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.shared.accepted.load(Ordering::Relaxed)
    }

    /// Connections the proxy reset so far (refused, cut, lost replies, replies cut).
    pub fn resets(&self) -> u64 {
        self.shared.resets.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<ProxyState>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        shared.accepted.fetch_add(1, Ordering::Relaxed);
        // Every close the proxy makes is a reset.
        #[allow(deprecated)]
        let _ = client.set_linger(Some(Duration::ZERO));
        if shared.faults().refuse {
            shared.resets.fetch_add(1, Ordering::Relaxed);
            drop(client);
            continue;
        }
        tokio::spawn(connection(client, Arc::clone(&shared)));
    }
}

/// How a direction of a connection ended.
enum End {
    /// The sender closed its side.
    Eof,
    /// The proxy resets the connection.
    Reset,
}

async fn connection(client: TcpStream, shared: Arc<ProxyState>) {
    let mut cut = shared.cut.subscribe();
    cut.borrow_and_update();
    let Ok(server) = TcpStream::connect(shared.upstream).await else {
        shared.resets.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let link = Link::default();
    let requests = pump(client_read, server_write, &shared, &link, false);
    let replies = pump(server_read, client_write, &shared, &link, true);
    let end = tokio::select! {
        end = requests => end,
        end = replies => end,
        _ = cut.changed() => End::Reset,
    };
    if matches!(end, End::Reset) {
        shared.resets.fetch_add(1, Ordering::Relaxed);
    }
    // Dropping the halves closes both sockets; the client's zero linger makes it a reset.
}

/// What the two directions of a connection tell each other.
#[derive(Default)]
struct Link {
    /// Request chunks forwarded so far.
    forwarded_requests: AtomicU64,
    /// A request matching `lose_replies_after` went through: replies are lost from now on.
    lose_replies: AtomicBool,
}

/// Forwards one direction until it ends, applying the faults in force to each chunk.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    shared: &ProxyState,
    link: &Link,
    replies: bool,
) -> End {
    let mut buf = vec![0u8; 16 << 10];
    let mut changed = shared.changed.subscribe();
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) => {
                let _ = to.shutdown().await;
                return End::Eof;
            }
            Ok(n) => n,
            Err(_) => return End::Reset,
        };
        let mut faults = shared.faults();
        while faults.blackhole {
            if changed.changed().await.is_err() {
                return End::Reset;
            }
            faults = shared.faults();
        }
        if replies && (faults.lose_replies || link.lose_replies.load(Ordering::Acquire)) {
            // The reply is lost. Reset once the client has stopped writing, so that the
            // requests it sent with this one reach the server first.
            loop {
                let before = link.forwarded_requests.load(Ordering::Acquire);
                tokio::time::sleep(Duration::from_millis(50)).await;
                if link.forwarded_requests.load(Ordering::Acquire) == before {
                    return End::Reset;
                }
            }
        }
        let mut chunk = &buf[..n];
        let mut reset_after = false;
        if replies && shared.reset_next_reply.swap(false, Ordering::AcqRel) {
            chunk = &chunk[..n / 2];
            reset_after = true;
        }
        let jitter = shared.below(faults.jitter.as_micros() as u64);
        let mut wait = faults.latency + Duration::from_micros(jitter);
        if let Some(rate) = faults.bytes_per_sec {
            wait += Duration::from_micros(chunk.len() as u64 * 1_000_000 / rate.max(1));
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        if to.write_all(chunk).await.is_err() {
            return End::Reset;
        }
        if !replies {
            if let Some(pattern) = &faults.lose_replies_after
                && !pattern.is_empty()
                && chunk.windows(pattern.len()).any(|w| w == &pattern[..])
            {
                link.lose_replies.store(true, Ordering::Release);
            }
            link.forwarded_requests.fetch_add(1, Ordering::AcqRel);
        }
        if reset_after {
            return End::Reset;
        }
    }
}

/// Until `until`: puts a random fault on a random proxy of `proxies` for 0.2–1.5 s, heals
/// it, waits up to 0.5 s, and again. The faults: latency (20–120 ms) with jitter (up to
/// 150 ms), a bandwidth limit (2–22 kB/s), a blackhole, refused connections, lost replies, a
/// cut of every open connection, a reply reset in the middle, or nothing. `rng` is the state
/// of a xorshift generator (not 0), so a seed repeats the choices; `injected` counts the
/// faults by name.
pub async fn random_faults(
    proxies: &[&FaultProxy],
    until: Instant,
    rng: &mut u64,
    injected: &mut BTreeMap<&'static str, u32>,
) {
    let mut below = |n: u64| {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng % n.max(1)
    };
    while Instant::now() < until {
        let proxy = proxies[below(proxies.len() as u64) as usize];
        let (name, faults) = match below(8) {
            0 => {
                let latency = Duration::from_millis(20 + below(100));
                let jitter = Duration::from_millis(below(150));
                ("latency", Faults::latency(latency, jitter))
            }
            1 => ("bandwidth", Faults::bandwidth(2_000 + below(20_000))),
            2 => ("blackhole", Faults::blackhole()),
            3 => ("refuse", Faults::refuse()),
            4 => ("lose_replies", Faults::lose_replies()),
            5 => {
                proxy.cut();
                ("cut", Faults::none())
            }
            6 => {
                proxy.reset_next_reply();
                ("reset_mid_reply", Faults::none())
            }
            _ => ("quiet", Faults::none()),
        };
        *injected.entry(name).or_insert(0) += 1;
        proxy.set(faults);
        tokio::time::sleep(Duration::from_millis(200 + below(1_300))).await;
        proxy.heal();
        tokio::time::sleep(Duration::from_millis(below(500))).await;
    }
}
