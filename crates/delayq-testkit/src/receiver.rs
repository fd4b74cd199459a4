//! A webhook receiver for push tests: a real HTTP/1.1 server on a free loopback port that
//! records every request it gets and answers as the test says, including the hostile
//! answers a dispatcher must survive (hang, answer slowly, reset the connection).
//!
//! It is written on a bare socket rather than with an HTTP framework so that a test can make
//! it misbehave at the byte level (a reset mid-request, headers never sent). Keep-alive is
//! supported, so a pooled client reuses its connections as it would with a real target.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Call {
    /// The request path.
    pub path: String,
    /// The headers, names in lower case.
    pub headers: BTreeMap<String, String>,
    /// The body.
    pub body: Vec<u8>,
    /// When the request was complete, epoch ms (system clock).
    pub at_ms: u64,
    /// When the request was complete, monotonic.
    pub at: Instant,
}

impl Call {
    /// A header's value (name in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(&name.to_ascii_lowercase())
            .map(String::as_str)
    }
}

/// How the receiver answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Answer this status with this body and extra headers.
    Status(u16, String, Vec<(String, String)>),
    /// Never answer (keep the connection open).
    Hang,
    /// Wait, then answer this status.
    Slow(Duration, u16),
    /// Close the connection with a TCP reset, no answer.
    Reset,
}

impl Reply {
    /// `200 OK` with an empty body.
    pub fn ok() -> Reply {
        Reply::Status(200, String::new(), Vec::new())
    }

    /// This status with this body.
    pub fn status(code: u16, body: &str) -> Reply {
        Reply::Status(code, body.to_owned(), Vec::new())
    }
}

type Answer = dyn Fn(&Call, usize) -> Reply + Send + Sync;

struct Recorded {
    calls: Mutex<Vec<Call>>,
    changed: Notify,
    answer: Box<Answer>,
}

/// The receiver; stops when dropped.
pub struct Receiver {
    addr: SocketAddr,
    scheme: &'static str,
    shared: Arc<Recorded>,
    task: JoinHandle<()>,
}

impl Receiver {
    /// Starts a receiver answering `200 OK` to everything.
    pub async fn ok() -> Receiver {
        Receiver::start(|_, _| Reply::ok()).await
    }

    /// Starts a receiver that answers each request by `answer(call, n)`, `n` counting the
    /// requests from 0.
    pub async fn start(answer: impl Fn(&Call, usize) -> Reply + Send + Sync + 'static) -> Receiver {
        Receiver::start_with(None, answer).await
    }

    /// Like [`Receiver::start`], speaking HTTPS through `tls` (its URLs are `https://`).
    pub async fn start_tls(
        tls: tokio_rustls::TlsAcceptor,
        answer: impl Fn(&Call, usize) -> Reply + Send + Sync + 'static,
    ) -> Receiver {
        Receiver::start_with(Some(tls), answer).await
    }

    async fn start_with(
        tls: Option<tokio_rustls::TlsAcceptor>,
        answer: impl Fn(&Call, usize) -> Reply + Send + Sync + 'static,
    ) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local addr");
        let shared = Arc::new(Recorded {
            calls: Mutex::new(Vec::new()),
            changed: Notify::new(),
            answer: Box::new(answer),
        });
        let s = Arc::clone(&shared);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                let shared = Arc::clone(&s);
                match tls.clone() {
                    None => {
                        tokio::spawn(serve(stream, shared));
                    }
                    Some(tls) => {
                        tokio::spawn(async move {
                            if let Ok(stream) = tls.accept(stream).await {
                                serve(stream, shared).await;
                            }
                        });
                    }
                }
            }
        });
        Receiver {
            addr,
            scheme,
            shared,
            task,
        }
    }

    /// The receiver's URL for `path` (`/hook`), by address.
    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{path}", self.scheme, self.addr)
    }

    /// The receiver's port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The requests so far.
    pub fn calls(&self) -> Vec<Call> {
        self.shared.calls.lock().expect("calls lock").clone()
    }

    /// Waits until at least `n` requests came, up to `timeout`; returns them all.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Call> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.shared.changed.notified();
            let calls = self.calls();
            if calls.len() >= n {
                return calls;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.calls();
            }
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A connection the receiver serves: plain TCP or TLS over it.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send {
    /// Makes the coming close a TCP reset.
    fn reset_on_close(&self);
}

impl Conn for TcpStream {
    fn reset_on_close(&self) {
        // A zero linger makes the close a reset (as the fault proxy does); the socket is
        // non-blocking here, so the deprecation's concern does not apply.
        #[allow(deprecated)]
        let _ = self.set_linger(Some(Duration::ZERO));
    }
}

impl Conn for tokio_rustls::server::TlsStream<TcpStream> {
    fn reset_on_close(&self) {
        self.get_ref().0.reset_on_close();
    }
}

/// Serves one connection: requests one after the other (keep-alive).
async fn serve<S: Conn>(mut stream: S, shared: Arc<Recorded>) {
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let Some((call, keep_alive)) = read_request(&mut stream, &mut buf).await else {
            return;
        };
        let n = {
            let mut calls = shared.calls.lock().expect("calls lock");
            calls.push(call.clone());
            calls.len() - 1
        };
        shared.changed.notify_waiters();
        let reply = (shared.answer)(&call, n);
        let (code, body, headers) = match reply {
            Reply::Status(code, body, headers) => (code, body, headers),
            Reply::Hang => {
                std::future::pending::<()>().await;
                return;
            }
            Reply::Slow(wait, code) => {
                tokio::time::sleep(wait).await;
                (code, String::new(), Vec::new())
            }
            Reply::Reset => {
                stream.reset_on_close();
                return;
            }
        };
        let mut head = format!("HTTP/1.1 {code} X\r\ncontent-length: {}\r\n", body.len());
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        if !keep_alive {
            head.push_str("connection: close\r\n");
        }
        head.push_str("\r\n");
        head.push_str(&body);
        if stream.write_all(head.as_bytes()).await.is_err() || !keep_alive {
            return;
        }
    }
}

/// Reads one request (headers and a Content-Length body); `None` when the connection ends.
async fn read_request<S: Conn>(stream: &mut S, buf: &mut Vec<u8>) -> Option<(Call, bool)> {
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_owned();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    buf.drain(..end + 4);
    while buf.len() < len {
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body: Vec<u8> = buf.drain(..len).collect();
    let keep_alive = !headers
        .get("connection")
        .is_some_and(|v| v.eq_ignore_ascii_case("close"));
    let at_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Some((
        Call {
            path,
            headers,
            body,
            at_ms,
            at: Instant::now(),
        },
        keep_alive,
    ))
}
