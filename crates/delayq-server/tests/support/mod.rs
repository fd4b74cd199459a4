//! What the HTTP tests share: a server on a real socket (127.0.0.1:0, served in-process with
//! `axum::serve`), a reqwest client, and helpers that read the envelope.
//!
//! Time: a test that depends on time runs the queue on a [`ManualClock`] and moves it; a test
//! that needs the real clock only uses generous bounds (seconds), never asserts on speed.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use delayq::{Clock, ManualClock, Queue, StorageContext, SystemClock};
use delayq_daemon::ServerConfig;
use delayq_daemon::config::StorageConfig;
use delayq_server::config::TokenConfig;
use delayq_server::{AppState, Services, app};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// The token of the test servers that have auth on; it may use every topic.
pub const ADMIN: &str = "admin-token-0123456789";
/// With [`Builder::with_writer_and_reader`]: a token that may write.
pub const WRITER: &str = "writer-token-0123456789";
/// With [`Builder::with_writer_and_reader`]: a read-only token.
pub const READER: &str = "reader-token-0123456789";
/// A token limited to the topics `orders` and `orders-2`.
pub const ORDERS_ONLY: &str = "orders-token-0123456789";

/// A generous bound for anything that waits on the real clock.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A delayq server running on a socket of its own.
pub struct Server {
    /// Where it listens.
    pub addr: SocketAddr,
    /// The queue behind it.
    pub queue: Queue,
    /// The handler state (long-poll counts, drain).
    pub state: AppState,
    /// The manual clock, when the server runs on one.
    pub clock: Option<ManualClock>,
    /// The token sent with every request, if any.
    pub token: Option<String>,
    client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
}

/// A parsed response: status and envelope.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The body as JSON (`Value::Null` if it was not JSON).
    pub json: Value,
    /// The body as text.
    pub text: String,
    /// The Content-Type header.
    pub content_type: String,
}

impl Reply {
    /// The envelope's `code`.
    pub fn code(&self) -> i64 {
        self.json["code"].as_i64().unwrap_or(-1)
    }

    /// The envelope's `message`.
    pub fn message(&self) -> &str {
        self.json["message"].as_str().unwrap_or("")
    }

    /// The envelope's `data`.
    pub fn data(&self) -> &Value {
        &self.json["data"]
    }

    /// Asserts a 200 with `code` 0 and message `ok`; returns `data`.
    #[track_caller]
    pub fn ok(&self) -> &Value {
        assert_eq!(
            self.status, 200,
            "expected 200, got {}: {}",
            self.status, self.text
        );
        assert_eq!(self.code(), 0, "{}", self.text);
        assert_eq!(self.message(), "ok", "{}", self.text);
        self.data()
    }

    /// Asserts an error envelope with a matching status and code.
    #[track_caller]
    pub fn err(&self, status: u16) -> &Self {
        assert_eq!(self.status, status, "expected {status}: {}", self.text);
        assert_eq!(self.code(), i64::from(status), "{}", self.text);
        self
    }
}

/// How to build a test server.
pub struct Builder {
    config: ServerConfig,
    clock: Option<ManualClock>,
    token: Option<String>,
    push: bool,
}

impl Builder {
    /// Changes the configuration.
    pub fn config(mut self, f: impl FnOnce(&mut ServerConfig)) -> Self {
        f(&mut self.config);
        self
    }

    /// Runs the queue on a manual clock standing at `now_ms`.
    pub fn manual_clock(mut self, now_ms: u64) -> Self {
        self.clock = Some(ManualClock::new(now_ms));
        self
    }

    /// Turns auth on with [`ADMIN`] and [`ORDERS_ONLY`]; requests send [`ADMIN`].
    pub fn with_auth(mut self) -> Self {
        self.config.tokens = vec![
            TokenConfig::new(ADMIN),
            TokenConfig::for_topics(ORDERS_ONLY, vec!["orders".into(), "orders-2".into()]),
        ];
        self.token = Some(ADMIN.into());
        self
    }

    /// Turns auth on with [`WRITER`] and the read-only [`READER`]; requests send [`WRITER`].
    pub fn with_writer_and_reader(mut self) -> Self {
        self.config.tokens = vec![
            TokenConfig::new(WRITER),
            TokenConfig::new(READER).read_only(),
        ];
        self.token = Some(WRITER.into());
        self
    }

    /// Runs the push dispatcher with the configuration's push settings, as `serve` does.
    pub fn with_push(mut self) -> Self {
        self.push = true;
        self
    }

    /// Runs on `storage` (embedded in a directory, or Redis) instead of memory, opened as
    /// `delayq serve` opens it (on the system clock).
    pub fn storage(mut self, storage: StorageConfig) -> Self {
        self.config.storage = storage;
        self
    }

    /// Starts the server.
    pub async fn start(self) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        self.start_on(listener).await
    }

    /// Starts the server on `listener` (a test that restarts a server on the same port).
    pub async fn start_on(self, listener: tokio::net::TcpListener) -> Server {
        let clock: Arc<dyn Clock> = match &self.clock {
            Some(c) => Arc::new(c.clone()),
            None => Arc::new(SystemClock::new()),
        };
        let ctx = StorageContext::new(clock)
            .with_limits(self.config.limits.clone())
            .with_defaults(self.config.defaults);
        let queue = match self.config.storage {
            StorageConfig::Memory => Queue::memory_with(ctx),
            _ => delayq_daemon::build_queue(&self.config)
                .await
                .expect("open the storage"),
        };
        let mut services = Services::new(&queue);
        if self.push {
            let push = delayq_push::Push::new(queue.clone(), self.config.push.options())
                .expect("the push dispatcher starts");
            push.start().await;
            services = services.with_push(Arc::new(delayq_daemon::PushDispatcher(push)));
        }
        let state = AppState::with_services(queue.clone(), &self.config.app(), services);
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let router = app(state.clone());
        tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .expect("serve");
        });
        Server {
            addr,
            queue,
            state,
            clock: self.clock,
            token: self.token,
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(120))
                .build()
                .unwrap(),
            stop: Some(stop),
        }
    }
}

/// A builder with the default configuration (memory storage, system clock, no auth).
pub fn server() -> Builder {
    let mut config = ServerConfig::default();
    config.storage = StorageConfig::Memory;
    Builder {
        config,
        clock: None,
        token: None,
        push: false,
    }
}

impl Server {
    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The manual clock.
    #[track_caller]
    pub fn clock(&self) -> &ManualClock {
        self.clock
            .as_ref()
            .expect("this server runs on the system clock")
    }

    /// POSTs a JSON value.
    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.post_raw(
            path,
            body.to_string(),
            "application/json",
            self.token.as_deref(),
        )
        .await
    }

    /// POSTs raw bytes with a content type and an optional token.
    pub async fn post_raw(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
        content_type: &str,
        token: Option<&str>,
    ) -> Reply {
        let mut req = self
            .client
            .post(self.url(path))
            .header("content-type", content_type)
            .body(body);
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        read(req.send().await.expect("request")).await
    }

    /// POSTs a JSON value with extra request headers; returns the reply and its headers.
    pub async fn post_with_headers(
        &self,
        path: &str,
        body: Value,
        headers: &[(&str, &str)],
    ) -> (Reply, reqwest::header::HeaderMap) {
        let mut req = self.client.post(self.url(path)).json(&body);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        let resp = req.send().await.expect("request");
        let headers = resp.headers().clone();
        (read(resp).await, headers)
    }

    /// GETs a path (with its query string).
    pub async fn get(&self, path: &str) -> Reply {
        self.get_as(path, self.token.as_deref()).await
    }

    /// GETs a path with an explicit token.
    pub async fn get_as(&self, path: &str, token: Option<&str>) -> Reply {
        let mut req = self.client.get(self.url(path));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        read(req.send().await.expect("request")).await
    }

    /// Sends any method.
    pub async fn request(&self, method: reqwest::Method, path: &str) -> Reply {
        let mut req = self.client.request(method, self.url(path));
        if let Some(token) = &self.token {
            req = req.bearer_auth(token);
        }
        read(req.send().await.expect("request")).await
    }

    /// Adds a task and asserts success.
    pub async fn add(&self, topic: &str, id: &str, extra: Value) -> Value {
        let mut body = json!({"topic": topic, "id": id});
        if let (Some(obj), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            obj.extend(extra.clone());
        }
        self.post("/add", body).await.ok().clone()
    }

    /// Pops without waiting; returns `data` (a task or null).
    pub async fn pop_now(&self, topic: &str) -> Value {
        self.post("/pop", json!({"topic": topic, "timeout_ms": 0}))
            .await
            .ok()
            .clone()
    }

    /// Pops, waiting for a task. On a manual clock the wait is open-ended on the queue's side
    /// (the clock does not move by itself), bounded here by [`PATIENCE`] of real time.
    pub async fn pop_wait(&self, topic: &str) -> Value {
        let reply = tokio::time::timeout(
            PATIENCE,
            self.post("/pop", json!({"topic": topic, "timeout_ms": 60_000})),
        )
        .await
        .expect("a task became ready in time");
        let data = reply.ok().clone();
        assert!(!data.is_null(), "the pop timed out without a task");
        data
    }

    /// The task's view from `/get`.
    pub async fn get_task(&self, topic: &str, id: &str) -> Reply {
        self.get(&format!("/get?topic={topic}&id={id}")).await
    }

    /// Waits (real time, bounded) until `check` holds.
    pub async fn eventually(&self, what: &str, mut check: impl AsyncFnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        while !check().await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting: {what}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

async fn read(resp: reqwest::Response) -> Reply {
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let text = resp.text().await.expect("body");
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        json,
        text,
        content_type,
    }
}
