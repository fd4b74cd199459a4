//! The loop of one connection (mini-redis's `Handler`): read a frame from the
//! [`Connection`], run it on the [`Session`], write the reply; then give back what the
//! connection held.
//!
//! A `put` line is followed by its body, read here before the command runs (a connection that
//! ends inside a body adds nothing); a too-big job's body is skipped before `JOB_TOO_BIG` is
//! answered, as beanstalkd does. A `reserve` that has to wait sends the replies pending so far,
//! then waits while the connection keeps reading: a client that goes away ends the wait at
//! once, and commands it sends meanwhile wait their turn.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;

use super::cmd::Wait;
use super::connection::Connection;
use super::session::{Outcome, Request, Session};
use super::state::ServerState;
use crate::proto::{Command, LineEvent, ParseError, Reply};

/// Serves one connection until it closes, `quit`, or the listener closes; then gives back
/// the jobs it holds.
pub(crate) async fn run<R, W>(server: Arc<ServerState>, r: R, w: W, close: watch::Receiver<bool>)
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let mut conn = Connection::new(r, w, &server.options, close);
    let mut session = Session::open(server);
    if let Err(e) = serve(&mut conn, &mut session).await {
        tracing::debug!(error = %e, "beanstalk connection ended");
    }
    session.close().await;
    conn.shutdown().await;
}

async fn serve<R, W>(conn: &mut Connection<R, W>, session: &mut Session) -> std::io::Result<()>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    while let Some(frame) = conn.read_frame().await? {
        let outcome = match frame {
            LineEvent::TooLong => Outcome::Reply(Reply::BadFormat),
            LineEvent::Line(line) => match line_outcome(conn, session, &line).await? {
                Some(outcome) => outcome,
                // The connection ended inside a body: what earlier commands answered still
                // goes out (a client may close only its sending side).
                None => return conn.flush().await,
            },
        };
        match outcome {
            Outcome::Reply(reply) => conn.write_reply(&reply),
            Outcome::Wait(wait) => match wait_for_job(conn, session, wait).await? {
                Some(reply) => conn.write_reply(&reply),
                None => return conn.flush().await,
            },
            Outcome::Close => return conn.flush().await,
        }
    }
    Ok(())
}

/// Sends what earlier commands answered, then waits for a job while reading the
/// connection; `None` when the connection is to end (the client went away, the listener or
/// the queue closes).
async fn wait_for_job<R, W>(
    conn: &mut Connection<R, W>,
    session: &mut Session,
    wait: Wait,
) -> std::io::Result<Option<Reply>>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    conn.flush().await?;
    session.waiting(1);
    let end = conn.read_while(session.wait_for_job(&wait)).await;
    session.waiting(-1);
    Ok(match end {
        Some(end) => session.end_wait(end).await,
        None => None,
    })
}

/// Parses (and counts) a command line, reads what follows it, and runs it; `None` when the
/// connection ends before the data that follows the line.
async fn line_outcome<R, W>(
    conn: &mut Connection<R, W>,
    session: &mut Session,
    line: &[u8],
) -> std::io::Result<Option<Outcome>>
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let command = match session.server.parse_line(line) {
        Ok(command) => command,
        // beanstalkd answers once the body has been skipped.
        Err(ParseError::JobTooBig { skip }) => {
            let skipped = conn.skip_data(skip).await?;
            return Ok(skipped.then_some(Outcome::Reply(Reply::JobTooBig)));
        }
        Err(e) => return Ok(Some(Outcome::Reply(e.into()))),
    };
    let data = match &command {
        Command::Put { bytes, .. } => match conn.read_data(*bytes as usize + 2).await? {
            Some(data) => data,
            None => return Ok(None),
        },
        _ => Vec::new(),
    };
    Ok(Some(session.apply(Request { command, data }).await))
}
