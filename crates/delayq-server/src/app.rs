//! The router: every endpoint of docs/design.md §3, and the layers around them.
//!
//! [`app`] is separate from any `main` so tests can serve it on a socket of their own (as in
//! axum's testing example). From the outside in, a request passes: the request metrics, a
//! tracing span (requests are logged at DEBUG), a panic catcher (a panic becomes a 500
//! envelope, never a dropped connection), the request body limit, and, except for `/healthz`
//! and `/readyz`, bearer auth. Unknown paths (404) and
//! wrong methods (405) answer in the envelope too.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{Method, Uri};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use delayq::{Limits, Queue};
use delayq::{Scheduler, SchedulerOptions};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::auth::{self, Auth};
use crate::config::{AppConfig, HttpLimits};
use crate::error::AppError;
use crate::handlers::Handle;
use crate::history::History;
use crate::metrics::{self, HttpMetrics};
use crate::push::PushControl;

/// What every handler shares: the queue, its services and the server's settings. Cheap to
/// clone.
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    queue: Queue,
    http: HttpLimits,
    auth: Auth,
    metrics: HttpMetrics,
    long_polls: Arc<Semaphore>,
    open_long_polls: AtomicUsize,
    draining: watch::Sender<bool>,
    dashboard: crate::dashboard::Options,
    services: Services,
}

/// The services over the queue that the app reads and controls; the composition root
/// (`delayq-daemon`) builds and runs them, and hands them over here.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Services {
    /// The scheduler of the queue's recurring schedules.
    pub scheduler: Scheduler,
    /// The dashboard's activity history, filled by a sampler the root runs.
    pub history: History,
    /// The push dispatcher (docs/push.md); `/push` answers 503 without one.
    pub push: Option<Arc<dyn PushControl>>,
}

impl Services {
    /// A scheduler over `queue` (not started), an empty history, no push dispatcher.
    pub fn new(queue: &Queue) -> Self {
        Services {
            scheduler: Scheduler::new(queue.clone(), SchedulerOptions::default()),
            history: History::new(),
            push: None,
        }
    }

    /// The same services with `push` as the dispatcher.
    pub fn with_push(mut self, push: Arc<dyn PushControl>) -> Self {
        self.push = Some(push);
        self
    }
}

impl AppState {
    /// State over `queue` with the HTTP limits and tokens of `config`, and the default
    /// [`Services`]: no push dispatcher, a scheduler and a history nobody runs. The queue's own
    /// limits and defaults are those it was built with.
    pub fn new(queue: Queue, config: &AppConfig) -> Self {
        let services = Services::new(&queue);
        AppState::with_services(queue, config, services)
    }

    /// State over `queue` and the `services` the composition root built over it.
    pub fn with_services(queue: Queue, config: &AppConfig, services: Services) -> Self {
        AppState {
            inner: Arc::new(Inner {
                queue,
                http: config.http,
                auth: Auth::new(config.tokens.clone()),
                metrics: HttpMetrics::default(),
                long_polls: Arc::new(Semaphore::new(config.http.max_long_polls)),
                open_long_polls: AtomicUsize::new(0),
                draining: watch::Sender::new(false),
                dashboard: config.dashboard,
                services,
            }),
        }
    }

    /// The push dispatcher, if the server runs one.
    pub fn push(&self) -> Option<&dyn PushControl> {
        self.inner.services.push.as_deref()
    }

    /// Whether `topic` is delivered by the push dispatcher, so clients may not pop it.
    pub fn is_pushed(&self, topic: &str) -> bool {
        self.push().is_some_and(|p| p.has_target(topic))
    }

    /// The queue.
    pub fn queue(&self) -> &Queue {
        &self.inner.queue
    }

    /// The scheduler of the queue's recurring schedules (its loop is run by the root).
    pub fn scheduler(&self) -> &Scheduler {
        &self.inner.services.scheduler
    }

    /// The queue's input limits.
    pub fn limits(&self) -> &Limits {
        &self.inner.queue.context().limits
    }

    /// The HTTP layer's limits.
    pub fn http(&self) -> &HttpLimits {
        &self.inner.http
    }

    /// The configured tokens.
    pub fn auth(&self) -> &Auth {
        &self.inner.auth
    }

    /// How the web dashboard is served (docs/dashboard.md).
    pub fn dashboard(&self) -> &crate::dashboard::Options {
        &self.inner.dashboard
    }

    /// The HTTP layer's metrics.
    pub fn metrics(&self) -> &HttpMetrics {
        &self.inner.metrics
    }

    /// The activity history (rates and lateness over the last hour, the instances) the
    /// dashboard shows. Empty until a sampler runs ([`History::spawn_sampler`]; the root
    /// starts one).
    pub fn history(&self) -> &History {
        &self.inner.services.history
    }

    /// Starts a graceful shutdown: open long-polls return at once with no task, new ones do not
    /// wait, and `/readyz` answers 503. Requests keep being served until the server stops.
    pub fn begin_drain(&self) {
        self.inner.draining.send_replace(true);
    }

    /// Whether [`AppState::begin_drain`] was called.
    pub fn is_draining(&self) -> bool {
        *self.inner.draining.borrow()
    }

    /// Completes when a drain begins.
    pub async fn drained(&self) {
        let mut rx = self.inner.draining.subscribe();
        // The sender lives in `self`, so this only ends when the drain begins.
        let _ = rx.wait_for(|draining| *draining).await;
    }

    /// Takes one of the long-poll slots, or refuses with 503 when all are taken.
    pub fn begin_long_poll(&self) -> Result<LongPoll, AppError> {
        let permit = Arc::clone(&self.inner.long_polls)
            .try_acquire_owned()
            .map_err(|_| AppError::TooManyLongPolls {
                limit: self.inner.http.max_long_polls,
            })?;
        self.inner.open_long_polls.fetch_add(1, Ordering::Relaxed);
        Ok(LongPoll {
            _permit: permit,
            state: self.clone(),
        })
    }

    /// How many long-polls are open now.
    pub fn open_long_polls(&self) -> usize {
        self.inner.open_long_polls.load(Ordering::Relaxed)
    }
}

/// A taken long-poll slot; dropping it (the pop ended, or the client went away) frees it.
#[derive(Debug)]
pub struct LongPoll {
    _permit: OwnedSemaphorePermit,
    state: AppState,
}

impl Drop for LongPoll {
    fn drop(&mut self) {
        self.state
            .inner
            .open_long_polls
            .fetch_sub(1, Ordering::Relaxed);
    }
}

/// The router with every endpoint of docs/design.md §3 over `state`.
pub fn app(state: AppState) -> Router {
    let (protected, open) = endpoints();
    let protected = protected.route_layer(middleware::from_fn_with_state(
        state.clone(),
        auth::require_auth,
    ));
    let body_limit = state.http().max_request_bytes;
    Router::new()
        .merge(protected)
        .merge(open)
        .merge(crate::dashboard::routes(&state))
        .fallback(route_not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(CatchPanicLayer::custom(panic_response))
        // Failures are logged once, by `error::log_failures`; the default would log every 503
        // as an error.
        .layer(TraceLayer::new_for_http().on_failure(()))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            metrics::track_requests,
        ))
        .layer(middleware::from_fn(crate::error::log_failures))
        .layer(middleware::from_fn(trace_context))
        .with_state(state)
}

/// Serves a request with its W3C trace context (the `traceparent` header) as the current
/// one: delayq's spans of the request (finish, release, bury) are children of the caller's
/// span, and log lines about it carry its trace id. A malformed header is left to the
/// handlers that read it (an add refuses it); here it is only not continued.
async fn trace_context(request: Request, next: middleware::Next) -> Response {
    let trace = crate::handlers::add::header_trace(request.headers())
        .ok()
        .flatten();
    delayq::spans::within(trace.as_ref(), next.run(request)).await
}

/// Every endpoint of the table at its handler: those that need a token, and the open ones.
fn endpoints() -> (Router<AppState>, Router<AppState>) {
    let mut routes = Routes::default();
    macro_rules! register {
        ($($endpoint:path),*) => {
            $(routes.add::<$endpoint>();)*
        };
    }
    delayq_api::for_each_endpoint!(register);
    (routes.protected, routes.open)
}

#[derive(Default)]
struct Routes {
    protected: Router<AppState>,
    open: Router<AppState>,
}

impl Routes {
    fn add<E: Handle>(&mut self) {
        let router = if E::OPEN {
            &mut self.open
        } else {
            &mut self.protected
        };
        *router = std::mem::take(router).route(E::ROUTE, E::handler());
    }
}

async fn route_not_found(method: Method, uri: Uri) -> AppError {
    AppError::RouteNotFound {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

async fn method_not_allowed(method: Method, uri: Uri) -> AppError {
    AppError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

fn panic_response(panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    let detail = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("a handler panicked");
    tracing::error!(panic = detail, "a request handler panicked");
    AppError::Internal("the request handler failed unexpectedly".into()).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;

    #[tokio::test]
    async fn a_panic_becomes_a_500_envelope() {
        let resp = panic_response(Box::new("boom"));
        assert_eq!(resp.status(), 500);
        let body = to_bytes(resp.into_body(), 1 << 16).await.unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["code"], 500);
        assert!(json["message"].as_str().unwrap().contains("internal error"));
    }
}
