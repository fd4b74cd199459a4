//! What the tests of the real listener share: a server run by `delayq_daemon::run` on a
//! socket of its own (the accept loop, timeouts and TLS of `serve`, unlike `support`, which
//! serves the router with `axum::serve`), a client for it, and its metrics.

#![allow(dead_code)]

pub mod pki;

use std::net::SocketAddr;
use std::time::Duration;

use delayq_daemon::config::StorageConfig;
use delayq_daemon::{ServerConfig, ServerError};
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A generous bound for anything that waits on the real clock.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A server run by `delayq_daemon::run` on memory storage, stopped when dropped.
pub struct Running {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The client of [`Running::post`] and [`Running::metric`].
    pub client: reqwest::Client,
    tls: bool,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServerError>>>,
}

/// Starts a server with the default configuration on memory storage, changed by `configure`.
pub async fn start(configure: impl FnOnce(&mut ServerConfig)) -> Running {
    let mut config = ServerConfig::default();
    config.storage = StorageConfig::Memory;
    configure(&mut config);
    let queue = delayq_daemon::build_queue(&config).await.expect("queue");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let tls = config.tls.is_some();
    let task = tokio::spawn(async move {
        delayq_daemon::run(listener, queue, &config, async {
            let _ = stopped.await;
        })
        .await
    });
    Running {
        addr,
        client: reqwest::Client::builder()
            .timeout(PATIENCE)
            .build()
            .unwrap(),
        tls,
        stop: Some(stop),
        task: Some(task),
    }
}

impl Running {
    /// Uses `client` for requests (with TLS: one that trusts the server's CA).
    pub fn with_client(mut self, client: reqwest::Client) -> Self {
        self.client = client;
        self
    }

    /// The URL of `path`: `http://` and the address, or `https://localhost` and the port.
    pub fn url(&self, path: &str) -> String {
        if self.tls {
            format!("https://localhost:{}{path}", self.addr.port())
        } else {
            format!("http://{}{path}", self.addr)
        }
    }

    /// POSTs a JSON value, asserts a 200 and returns the envelope.
    pub async fn post(&self, path: &str, body: Value) -> Value {
        let resp = self
            .client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), 200, "{path}");
        resp.json().await.expect("json")
    }

    /// GETs a path, asserts a 200 and returns the body as text.
    pub async fn get_text(&self, path: &str) -> String {
        let resp = self
            .client
            .get(self.url(path))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), 200, "{path}");
        resp.text().await.expect("text")
    }

    /// The value of a metric series (`name{labels}` exactly), 0 if absent.
    pub async fn metric(&self, series: &str) -> u64 {
        metric_in(&self.get_text("/metrics").await, series)
    }

    /// Stops the server and checks that it stopped cleanly.
    pub async fn stop(mut self) {
        let _ = self.stop.take().expect("running").send(());
        let task = self.task.take().expect("running");
        let result = tokio::time::timeout(PATIENCE, task)
            .await
            .expect("the server stops")
            .expect("the server task did not panic");
        assert!(result.is_ok(), "{result:?}");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The value of a metric series in a `/metrics` text, 0 if absent.
pub fn metric_in(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0, |v| v.trim().parse().expect("a whole number"))
}
