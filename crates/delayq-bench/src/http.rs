//! A minimal HTTP/1.1 keep-alive client for the load loops of `delayq bench`.
//!
//! The bench measures the server against the ceiling of its own HTTP stack (`GET /healthz`),
//! and a load generator on the same machine takes its share of the cores: a heavy client
//! lowers every figure. So the loops send pre-serialized request bytes over one
//! [`TcpStream`] per client and read the answer with a small parser (status line,
//! `Content-Length`, body), reusing one buffer per connection; nothing is allocated per
//! request on the way out. Only what this server sends is understood: a `Content-Length` body,
//! one request in flight per connection. The general client is `delayq_client::Client`.

use std::io;
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Why an exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// The TCP connection could not be opened.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The server's address.
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// Reading or writing failed.
    #[error("the connection to {addr} failed: {source}")]
    Io {
        /// The server's address.
        addr: SocketAddr,
        /// The cause.
        source: io::Error,
    },
    /// The server closed the connection before a whole answer.
    #[error("{addr} closed the connection before a whole answer")]
    Closed {
        /// The server's address.
        addr: SocketAddr,
    },
    /// The answer is not HTTP/1.1 as this client reads it.
    #[error("malformed answer: {0}")]
    Malformed(String),
}

/// Where requests go and what every request carries (host, token).
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The server's socket address.
    pub addr: SocketAddr,
    /// The `Host` header.
    host: String,
    /// The `Authorization` header's value, if any.
    auth: Option<String>,
    /// The base URL's path, without its final `/`, put before every request's path.
    prefix: String,
}

impl Endpoint {
    /// Requests to `addr` under the base path `base_path` (`/` or `/delayq/`), sending `token`
    /// as a bearer token when given.
    pub fn new(addr: SocketAddr, token: Option<&str>, base_path: &str) -> Endpoint {
        Endpoint {
            addr,
            host: addr.to_string(),
            auth: token.map(|t| format!("Bearer {t}")),
            prefix: base_path.trim_end_matches('/').to_owned(),
        }
    }

    /// The bytes of a `GET path` request.
    pub fn get(&self, path: &str) -> Vec<u8> {
        let mut out = Vec::new();
        self.head_into(&mut out, "GET", path, None);
        out
    }

    /// The bytes of a `POST path` request with a JSON body.
    pub fn post(&self, path: &str, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.post_into(&mut out, path, body);
        out
    }

    /// Writes a `POST path` request with a JSON body into `out` (cleared first), so a loop can
    /// reuse one buffer for requests that differ.
    pub fn post_into(&self, out: &mut Vec<u8>, path: &str, body: &[u8]) {
        out.clear();
        self.head_into(out, "POST", path, Some(body.len()));
        out.extend_from_slice(body);
    }

    fn head_into(&self, out: &mut Vec<u8>, method: &str, path: &str, body: Option<usize>) {
        use std::io::Write as _;
        // Writing into a Vec cannot fail.
        let _ = write!(
            out,
            "{method} {}{path} HTTP/1.1\r\nHost: {}\r\n",
            self.prefix, self.host
        );
        if let Some(auth) = &self.auth {
            let _ = write!(out, "Authorization: {auth}\r\n");
        }
        if let Some(len) = body {
            let _ = write!(
                out,
                "Content-Type: application/json\r\nContent-Length: {len}\r\n"
            );
        }
        out.extend_from_slice(b"\r\n");
    }
}

/// The head of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    /// The status code.
    pub status: u16,
    /// The length of the head, up to and including the blank line.
    pub len: usize,
    /// The length of the body.
    pub content_length: usize,
}

/// Reads the head of an answer at the start of `buf`: `None` until the blank line that ends
/// it has arrived.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, HttpError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let text = std::str::from_utf8(&buf[..end])
        .map_err(|_| HttpError::Malformed("the head is not UTF-8".into()))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| status_line.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| HttpError::Malformed(format!("status line {status_line:?}")))?;
    let mut content_length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            return Err(HttpError::Malformed(format!("header line {line:?}")));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            content_length = Some(value.parse::<usize>().map_err(|_| {
                HttpError::Malformed(format!("content-length {value:?} is not a number"))
            })?);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError::Malformed(format!(
                "transfer-encoding {value:?}; this client reads content-length bodies only"
            )));
        }
    }
    let content_length = match (content_length, status) {
        (Some(len), _) => len,
        (None, 204 | 304) | (None, 100..=199) => 0,
        (None, _) => {
            return Err(HttpError::Malformed(format!(
                "status {status} without content-length"
            )));
        }
    };
    Ok(Some(Head {
        status,
        len: end + 4,
        content_length,
    }))
}

/// An answer: the status and the body, borrowed from the connection's buffer.
#[derive(Debug)]
pub struct Response<'a> {
    /// The status code.
    pub status: u16,
    /// The body.
    pub body: &'a [u8],
}

/// One keep-alive connection, one request in flight.
#[derive(Debug)]
pub struct Conn {
    stream: TcpStream,
    addr: SocketAddr,
    buf: Vec<u8>,
}

impl Conn {
    /// Opens a connection (with `TCP_NODELAY`, as requests are small and awaited).
    pub async fn connect(addr: SocketAddr) -> Result<Conn, HttpError> {
        let connect = |source| HttpError::Connect { addr, source };
        let stream = TcpStream::connect(addr).await.map_err(connect)?;
        stream.set_nodelay(true).map_err(connect)?;
        Ok(Conn {
            stream,
            addr,
            buf: Vec::with_capacity(16 * 1024),
        })
    }

    /// Sends one request and reads its answer.
    pub async fn exchange(&mut self, request: &[u8]) -> Result<Response<'_>, HttpError> {
        let addr = self.addr;
        let io = |source| HttpError::Io { addr, source };
        self.stream.write_all(request).await.map_err(io)?;
        self.buf.clear();
        let head = loop {
            if let Some(head) = parse_head(&self.buf)? {
                break head;
            }
            self.read_more().await?;
        };
        let total = head.len + head.content_length;
        while self.buf.len() < total {
            self.read_more().await?;
        }
        if self.buf.len() > total {
            return Err(HttpError::Malformed(format!(
                "{} bytes after the answer, none were asked for",
                self.buf.len() - total
            )));
        }
        Ok(Response {
            status: head.status,
            body: &self.buf[head.len..total],
        })
    }

    async fn read_more(&mut self) -> Result<(), HttpError> {
        if self.buf.capacity() - self.buf.len() < 4096 {
            self.buf.reserve(16 * 1024);
        }
        let addr = self.addr;
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) => Err(HttpError::Closed { addr }),
            Ok(_) => Ok(()),
            Err(source) => Err(HttpError::Io { addr, source }),
        }
    }
}

/// Writes `value` as decimal digits into `slot`, zero-padded on the left: a fixed-width
/// number inside pre-serialized bytes, so the `Content-Length` stays right. Digits beyond
/// the slot's width are dropped (the caller sizes the slot for its counts).
pub fn write_digits(slot: &mut [u8], mut value: u64) {
    for byte in slot.iter_mut().rev() {
        *byte = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_read_when_whole() {
        let answer =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nContent-Length: 5\r\n\r\nhello";
        let head = parse_head(answer).unwrap().unwrap();
        assert_eq!(
            head,
            Head {
                status: 200,
                len: answer.len() - 5,
                content_length: 5
            }
        );
        assert_eq!(&answer[head.len..head.len + head.content_length], b"hello");
        // Not yet whole: wait for more.
        assert!(parse_head(&answer[..20]).unwrap().is_none());
        let no_content = parse_head(b"HTTP/1.1 204 No Content\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!((no_content.status, no_content.content_length), (204, 0));
    }

    #[test]
    fn what_this_client_cannot_read_is_an_error() {
        let table: [&[u8]; 5] = [
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n",
            b"SPDY 200 OK\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        ];
        for answer in table {
            assert!(
                parse_head(answer).is_err(),
                "{}",
                String::from_utf8_lossy(answer)
            );
        }
    }

    #[test]
    fn requests_are_whole_http() {
        let end = Endpoint::new("127.0.0.1:9280".parse().unwrap(), Some("s3cret"), "/");
        let get = String::from_utf8(end.get("/healthz")).unwrap();
        assert_eq!(
            get,
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:9280\r\nAuthorization: Bearer s3cret\r\n\r\n"
        );
        let post = String::from_utf8(end.post("/add", b"{}")).unwrap();
        assert!(post.starts_with("POST /add HTTP/1.1\r\n"), "{post}");
        assert!(post.ends_with("Content-Length: 2\r\n\r\n{}"), "{post}");
        let under = Endpoint::new("127.0.0.1:9280".parse().unwrap(), None, "/q/");
        assert!(
            under
                .get("/healthz")
                .starts_with(b"GET /q/healthz HTTP/1.1\r\n")
        );
        let mut slot = *b"xxxxx";
        write_digits(&mut slot, 42);
        assert_eq!(&slot, b"00042");
    }

    #[tokio::test]
    async fn a_connection_carries_many_exchanges() {
        // A server that answers every request with the same bytes, split in two writes, so
        // the reader must put an answer together.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            loop {
                let mut seen = Vec::new();
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = socket.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                }
                socket
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello")
                    .await
                    .unwrap();
                socket.flush().await.unwrap();
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                socket.write_all(b" world").await.unwrap();
            }
        });
        let end = Endpoint::new(addr, None, "/");
        let request = end.get("/healthz");
        let mut conn = Conn::connect(addr).await.unwrap();
        for _ in 0..3 {
            let answer = conn.exchange(&request).await.unwrap();
            assert_eq!((answer.status, answer.body), (200, &b"hello world"[..]));
        }
    }
}
