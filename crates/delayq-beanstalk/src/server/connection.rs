//! One client's byte stream: command lines and job bodies in, replies out, with the
//! listener's timeouts. Nothing here knows about jobs (mini-redis's `Connection`).
//!
//! [`Connection::read_frame`] hands out command lines as a [`LineReader`] cuts them; a `put`'s
//! body follows its line and is read with [`Connection::read_data`] (it may hold any bytes,
//! `\r\n` included). Replies are gathered with [`Connection::write_reply`] and sent by
//! [`Connection::flush`], which [`Connection::read_frame`] calls before it waits for more
//! input: the replies of a batch of pipelined commands go out together.
//!
//! Hostile clients are held to the listener's timeouts (beanstalkd has none): a command line
//! must be complete within `read_timeout_ms` of its first byte, a job body within
//! `read_timeout_ms` of the end of its `put` line, and a reply must be taken by the client
//! within `read_timeout_ms`; else the connection is cut (its reads and writes answer
//! `TimedOut`). With `idle_timeout_ms` set, a connection that sends nothing for that long
//! between commands is cut too. [`Connection::read_while`] keeps reading while a command
//! waits (a `reserve`), so that a client that goes away is noticed at once.

use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use super::BeanstalkOptions;
use crate::proto::{LineEvent, LineReader, Reply};

/// How much a connection reads at once.
const READ_CHUNK: usize = 16 * 1024;

/// A client's connection, read through `r` and written through `w`.
pub(crate) struct Connection<R, W> {
    r: R,
    w: W,
    lines: LineReader,
    /// Replies not sent yet.
    out: Vec<u8>,
    buf: Vec<u8>,
    /// Set when the listener closes: reads end as if the client had gone.
    close: watch::Receiver<bool>,
    /// When the first byte of the unfinished command line in `lines` arrived.
    partial_since: Option<Instant>,
    read_timeout_ms: u64,
    idle_timeout_ms: u64,
}

/// The error a cut connection ends with.
fn cut(what: &str, limit: &str, ms: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what} took longer than {limit} ({ms} ms); connection closed"),
    )
}

impl<R, W> Connection<R, W>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    /// A connection with the timeouts of `options`, ending when `close` turns true.
    pub fn new(r: R, w: W, options: &BeanstalkOptions, close: watch::Receiver<bool>) -> Self {
        Connection {
            r,
            w,
            lines: LineReader::new(),
            out: Vec::with_capacity(256),
            buf: vec![0u8; READ_CHUNK],
            close,
            partial_since: None,
            read_timeout_ms: options.read_timeout_ms,
            idle_timeout_ms: options.idle_timeout_ms,
        }
    }

    /// The next command line (or a line too long); `None` when the client closed the
    /// connection or the listener closes. Sends the replies written so far before it waits.
    pub async fn read_frame(&mut self) -> std::io::Result<Option<LineEvent>> {
        loop {
            if let Some(event) = self.lines.next_event() {
                // What is left after a line arrived with it: its clock starts now.
                self.partial_since = Some(Instant::now());
                return Ok(Some(event));
            }
            self.flush().await?;
            let deadline = self.read_deadline();
            let sleep = async {
                match deadline {
                    Some((at, _)) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            let n = tokio::select! {
                n = self.r.read(&mut self.buf) => n?,
                _ = self.close.wait_for(|c| *c) => return Ok(None),
                () = sleep => {
                    let (what, limit, ms) = deadline.map(|(_, l)| l).unwrap_or_default();
                    return Err(cut(what, limit, ms));
                }
            };
            if n == 0 {
                return Ok(None);
            }
            if self.lines.buffered() == 0 {
                self.partial_since = Some(Instant::now());
            }
            self.lines.feed(&self.buf[..n]);
        }
    }

    /// When the next read must have come, and what is cut then: an unfinished line must be
    /// completed in time; between commands, only an idle limit applies, when one is set.
    fn read_deadline(&mut self) -> Option<(Instant, (&'static str, &'static str, u64))> {
        if self.lines.buffered() > 0 {
            let since = *self.partial_since.get_or_insert_with(Instant::now);
            let ms = self.read_timeout_ms;
            let limit = ("a command line", "read_timeout_ms", ms);
            return Some((since + Duration::from_millis(ms), limit));
        }
        self.partial_since = None;
        let ms = self.idle_timeout_ms;
        (ms > 0).then(|| {
            let limit = ("an idle connection", "idle_timeout_ms", ms);
            (Instant::now() + Duration::from_millis(ms), limit)
        })
    }

    /// Reads the `n` bytes that follow the current line (a job body and its `\r\n`); `None`
    /// when the connection ends first. Bytes read past them stay for the next command.
    pub async fn read_data(&mut self, n: usize) -> std::io::Result<Option<Vec<u8>>> {
        let mut data = self.lines.take(n);
        let filled = self.fill_after_line(n - data.len(), |got| data.extend_from_slice(got));
        Ok(filled.await?.then_some(data))
    }

    /// Skips the `n` bytes that follow the current line (a refused job's body) without
    /// keeping them; false when the connection ends first.
    pub async fn skip_data(&mut self, n: u64) -> std::io::Result<bool> {
        let held = usize::try_from(n).unwrap_or(usize::MAX);
        let taken = self.lines.take(held).len();
        self.fill_after_line(held - taken, |_| {}).await
    }

    /// Reads `missing` more bytes after the current line, handing them to `sink` and keeping
    /// what comes past them; false when the connection ends first.
    async fn fill_after_line(
        &mut self,
        mut missing: usize,
        mut sink: impl FnMut(&[u8]),
    ) -> std::io::Result<bool> {
        let ms = self.read_timeout_ms;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
        while missing > 0 {
            let got = tokio::select! {
                got = self.r.read(&mut self.buf) => got?,
                _ = self.close.wait_for(|c| *c) => return Ok(false),
                () = tokio::time::sleep_until(deadline) => {
                    return Err(cut("a job body", "read_timeout_ms", ms));
                }
            };
            if got == 0 {
                return Ok(false);
            }
            let want = missing.min(got);
            sink(&self.buf[..want]);
            self.lines.feed(&self.buf[want..got]);
            missing -= want;
        }
        Ok(true)
    }

    /// Runs `work` (a waiting command) while reading what the client sends meanwhile, which
    /// waits its turn as in beanstalkd; `None` when the client goes away or the listener
    /// closes first, which ends the wait at once.
    pub async fn read_while<F: Future>(&mut self, work: F) -> Option<F::Output> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Some(out),
                n = self.r.read(&mut self.buf) => match n {
                    Ok(0) | Err(_) => return None,
                    Ok(n) => self.lines.feed(&self.buf[..n]),
                },
                _ = self.close.wait_for(|c| *c) => return None,
            }
        }
    }

    /// Adds a reply to those [`Connection::flush`] sends.
    pub fn write_reply(&mut self, reply: &Reply) {
        reply.encode(&mut self.out);
    }

    /// Sends the replies written so far.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        if !self.out.is_empty() {
            // A client that does not read its replies must not hold the connection forever.
            let ms = self.read_timeout_ms;
            tokio::time::timeout(Duration::from_millis(ms), self.w.write_all(&self.out))
                .await
                .map_err(|_| cut("a reply the client did not read", "read_timeout_ms", ms))??;
            self.out.clear();
        }
        Ok(())
    }

    /// Closes the writing side, waiting at most the read timeout for the client.
    pub async fn shutdown(&mut self) {
        let ms = self.read_timeout_ms;
        let _ = tokio::time::timeout(Duration::from_millis(ms), self.w.shutdown()).await;
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};

    use super::*;

    type Conn = Connection<ReadHalf<DuplexStream>, WriteHalf<DuplexStream>>;

    /// A connection over an in-memory pipe, the client's end, and the listener's close switch.
    fn connection(options: BeanstalkOptions) -> (Conn, DuplexStream, watch::Sender<bool>) {
        let (ours, client) = tokio::io::duplex(64 * 1024);
        let (r, w) = tokio::io::split(ours);
        let close = watch::Sender::new(false);
        let conn = Connection::new(r, w, &options, close.subscribe());
        (conn, client, close)
    }

    fn line(s: &str) -> Option<LineEvent> {
        Some(LineEvent::Line(s.as_bytes().to_vec()))
    }

    #[tokio::test]
    async fn lines_and_bodies_across_reads() {
        let (mut conn, mut client, _close) = connection(BeanstalkOptions::default());
        client.write_all(b"put 0 0 60 5\r\nhel").await.unwrap();
        assert_eq!(conn.read_frame().await.unwrap(), line("put 0 0 60 5"));
        client
            .write_all(b"lo\r\nstats\r\nput 0 0 60 9")
            .await
            .unwrap();
        assert_eq!(conn.read_data(7).await.unwrap().unwrap(), b"hello\r\n");
        assert_eq!(conn.read_frame().await.unwrap(), line("stats"));
        client
            .write_all(b"\r\n123456789\r\nquit\r\n")
            .await
            .unwrap();
        assert_eq!(conn.read_frame().await.unwrap(), line("put 0 0 60 9"));
        // A refused body is skipped; what follows it stays.
        assert!(conn.skip_data(11).await.unwrap());
        assert_eq!(conn.read_frame().await.unwrap(), line("quit"));
        // The client closes inside a body.
        client.write_all(b"half").await.unwrap();
        drop(client);
        assert_eq!(conn.read_data(10).await.unwrap(), None);
        assert_eq!(conn.read_frame().await.unwrap(), None);
    }

    #[tokio::test]
    async fn replies_go_out_together_before_a_read_waits() {
        let (mut conn, mut client, _close) = connection(BeanstalkOptions::default());
        conn.write_reply(&Reply::Deleted);
        conn.write_reply(&Reply::Watching(2));
        client.write_all(b"stats\r\n").await.unwrap();
        // A line already here is handed out without sending anything.
        assert_eq!(conn.read_frame().await.unwrap(), line("stats"));
        client.write_all(b"quit\r\n").await.unwrap();
        assert_eq!(conn.read_frame().await.unwrap(), line("quit"));
        // With nothing left to hand out, it sends the replies and waits.
        let waiting = tokio::time::timeout(Duration::from_millis(50), conn.read_frame()).await;
        assert!(waiting.is_err(), "{waiting:?}");
        drop(conn);
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"DELETED\r\nWATCHING 2\r\n");
    }

    #[tokio::test]
    async fn a_slow_line_or_body_is_cut() {
        let options = BeanstalkOptions::default().read_timeout_ms(50);
        let (mut conn, mut client, _close) = connection(options.clone());
        client.write_all(b"stat").await.unwrap();
        let e = conn.read_frame().await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        let (mut conn, mut client, _close) = connection(options);
        client.write_all(b"put 0 0 60 5\r\nhe").await.unwrap();
        assert_eq!(conn.read_frame().await.unwrap(), line("put 0 0 60 5"));
        let e = conn.read_data(7).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    }

    #[tokio::test]
    async fn a_wait_keeps_reading_and_ends_when_the_client_goes() {
        let (mut conn, mut client, _close) = connection(BeanstalkOptions::default());
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<u8>();
        client.write_all(b"delete 1\r\n").await.unwrap();
        let waited = conn.read_while(async { done_rx.await.unwrap() });
        let (waited, ()) = tokio::join!(waited, async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            done_tx.send(7).unwrap();
        });
        assert_eq!(waited, Some(7));
        // What came meanwhile waits its turn.
        assert_eq!(conn.read_frame().await.unwrap(), line("delete 1"));
        drop(client);
        assert_eq!(conn.read_while(std::future::pending::<()>()).await, None);
        // The listener's close ends a read too.
        let (mut conn, _client, close) = connection(BeanstalkOptions::default());
        close.send_replace(true);
        assert_eq!(conn.read_frame().await.unwrap(), None);
    }
}
