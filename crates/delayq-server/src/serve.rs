//! Serving the app on a bound socket: the listener (the connection cap, the timeouts for slow
//! clients, a graceful stop) and HTTPS, in `listener.rs` and `tls.rs`.
//!
//! These stay with the app rather than the composition root because they are HTTP through
//! and through (hyper connections, request bodies, the envelope of a plain-HTTP request on the
//! TLS port) and because the tests of the app serve it on a real socket with them. The root
//! (`delayq-daemon`) binds the socket, builds the acceptor and decides when to stop.

mod listener;
mod tls;

pub use tls::{TlsError, acceptor as https_acceptor, beanstalk_acceptor};

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::app::{AppState, app};

/// Serves the app of `state` on `listener` (HTTPS with `tls`) until `stop` turns true (or its
/// sender is dropped), then waits for the requests in flight and returns. Call
/// [`AppState::begin_drain`] first so that long-polls answer at once.
pub async fn serve_app(
    listener: TcpListener,
    state: AppState,
    tls: Option<TlsAcceptor>,
    stop: watch::Receiver<bool>,
) {
    let router = app(state.clone());
    let http = *state.http();
    listener::serve(listener, router, state, http, tls, stop).await;
}
