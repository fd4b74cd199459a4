//! The endpoints of the API, each declared once.
//!
//! One entry of the table below gives an endpoint's method, path, operation name, request and
//! response `data` types, and what OpenAPI says of it (tag, summary, the answers it may give).
//! Everything else is derived from it: the server registers its routes from [`for_each_endpoint`](crate::for_each_endpoint)
//! (its only per-endpoint code is the handler), the OpenAPI paths come from [`describe`], the
//! client's one generic call reads [`Endpoint`], and the tests list the routes from [`ROUTES`].
//! Adding an endpoint is adding an entry here and its handler in the server.
//!
//! A request crosses the wire as a JSON body for `POST` and as a query string otherwise
//! ([`Endpoint::path`] adds the path parameters, if any).

use std::borrow::Cow;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::openapi::path::{Operation, PathsBuilder};
use utoipa::openapi::{RefOr, schema::Schema};

use crate::flow::{LimitsDeleted, LimitsList, LimitsQuery, LimitsRequest, LimitsView};
use crate::push::{PushDeleted, PushList, PushQuery, PushTarget, TargetView};
use crate::{
    AckRequest, AddRequest, AddResponse, BuryRequest, Envelope, ErrorData, FinishBatchData,
    FinishRequest, GetQuery, Health, NoData, PauseData, PauseRequest, PopData, PopRequest,
    PutScheduleData, ReleaseData, ReleaseRequest, RequeueData, RequeueRequest, RescheduleRequest,
    ScheduleKey, ScheduleList, ScheduleQuery, ScheduleRequest, ScheduleView, SchedulesQuery,
    StatsData, StatsQuery, TaskKey, TaskPage, TaskView, TasksQuery, TopicList, TopicRequest,
    TouchData,
};

/// The HTTP method of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`: the request is a query string.
    Get,
    /// `POST`: the request is a JSON body.
    Post,
    /// `DELETE`: the request is a query string.
    Delete,
}

impl Method {
    /// The method's name on the wire (`POST`).
    pub const fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }

    /// Whether the request travels as a JSON body (else as a query string).
    pub const fn has_body(self) -> bool {
        matches!(self, Method::Post)
    }
}

/// One endpoint of the API. Implemented by the zero-sized types of the table below.
pub trait Endpoint {
    /// The HTTP method.
    const METHOD: Method;
    /// The path as OpenAPI writes it, `{name}` for a path parameter.
    const PATH: &'static str;
    /// The path as the server's router matches it (differs from [`Endpoint::PATH`] only for
    /// path parameters that may hold `/`).
    const ROUTE: &'static str;
    /// The operation's name (its OpenAPI `operationId`).
    const NAME: &'static str;
    /// What it does, in words, for error messages (`adding a task`).
    const DOING: &'static str;
    /// Whether it answers without a token (`/healthz`, `/readyz`).
    const OPEN: bool;
    /// The JSON body (POST) or the query (GET, DELETE).
    type Request: Serialize + DeserializeOwned;
    /// The `data` of a success.
    type Response: Serialize + DeserializeOwned;

    /// The path of one request, with its path parameters filled in.
    fn path(request: &Self::Request) -> Cow<'static, str>;

    /// The OpenAPI operation of this endpoint (tagged) and the schemas it refers to.
    fn operation(schemas: &mut Vec<(String, RefOr<Schema>)>) -> Operation;
}

/// The request of an endpoint that takes none: an empty query.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NoParams {}

/// `GET` and `DELETE /schedules/{topic}/{name}`: the schedule in the path, the rest in the
/// query.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScheduleAt {
    /// The schedule, written in the path.
    #[serde(skip)]
    pub key: ScheduleKey,
    /// The query parameters.
    #[serde(flatten)]
    pub query: ScheduleQuery,
}

/// An endpoint as data: what the route list of a test or a log needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The HTTP method.
    pub method: Method,
    /// The path as OpenAPI writes it.
    pub path: &'static str,
    /// The operation's name.
    pub name: &'static str,
}

/// Builds the `#[utoipa::path]` attribute of one entry from its parts, one part a step (an
/// attribute cannot hold a macro call, so the tokens are gathered first).
macro_rules! utoipa_path {
    (@input [$($acc:tt)*] body ($($req:tt)+) $($rest:tt)*) => {
        utoipa_path!(@auth [$($acc)* request_body = $($req)+,] $($rest)*);
    };
    (@input [$($acc:tt)*] query ($($req:tt)+) $($rest:tt)*) => {
        utoipa_path!(@auth [$($acc)* params($($req)+),] $($rest)*);
    };
    (@input [$($acc:tt)*] none ($($req:tt)+) $($rest:tt)*) => {
        utoipa_path!(@auth [$($acc)*] $($rest)*);
    };
    (@input [$($acc:tt)*] params ($($p:tt)+) ($($req:tt)+) $($rest:tt)*) => {
        utoipa_path!(@auth [$($acc)* params($($p)+),] $($rest)*);
    };
    (@auth [$($acc:tt)*] bearer $($rest:tt)*) => {
        utoipa_path!(@ok [$($acc)* security(("bearer" = [])),] $($rest)*);
    };
    (@auth [$($acc:tt)*] none $($rest:tt)*) => {
        utoipa_path!(@ok [$($acc)*] $($rest)*);
    };
    (@ok [$($acc:tt)*] envelope ($($resp:tt)+) $($rest:tt)*) => {
        utoipa_path!(@emit [$($acc)*] (body = Envelope<$($resp)+>) $($rest)*);
    };
    (@ok [$($acc:tt)*] text ($($resp:tt)+) $($rest:tt)*) => {
        utoipa_path!(@emit [$($acc)*] (body = String, content_type = "text/plain") $($rest)*);
    };
    (@ok [$($acc:tt)*] object ($($resp:tt)+) $($rest:tt)*) => {
        utoipa_path!(@emit [$($acc)*] (body = Object) $($rest)*);
    };
    (@emit [$($acc:tt)*] ($($body:tt)+) $ty:ident [$($doc:literal)*] $ok:literal
        [$($status:literal : $desc:literal),*]) => {
        #[allow(non_snake_case)]
        pub mod $ty {
            #[allow(unused_imports)]
            use super::super::*;

            #[allow(dead_code)]
            $(#[doc = $doc])*
            #[utoipa::path(
                $($acc)*
                responses(
                    (status = 200, description = $ok, $($body)+),
                    $((status = $status, description = $desc, body = Envelope<Option<ErrorData>>),)*
                ),
            )]
            pub fn describe() {}
        }
    };
}

/// Declares the endpoints: a type per endpoint implementing [`Endpoint`], its OpenAPI
/// description, [`ROUTES`], [`describe`] and [`for_each_endpoint`](crate::for_each_endpoint). `$d` is a `$`, so that the
/// macro can write a macro.
macro_rules! endpoints {
    ($d:tt $(
        $(#[doc = $doc:literal])*
        $ty:ident = $method:ident $path:literal {
            name: $name:literal,
            doing: $doing:literal,
            tag: $tag:literal,
            $(route: $route:literal,)?
            $(path: |$req_var:ident| $path_expr:expr,)?
            auth: $auth:ident,
            input: $input:ident $(($($params:tt)+))?,
            request: ($($req:tt)+),
            output: $output:ident,
            response: ($($resp:tt)+),
            ok: $ok:literal,
            errors: [$($status:literal : $desc:literal),* $(,)?] $(,)?
        }
    )*) => {
        $(
            $(#[doc = $doc])*
            #[derive(Debug, Clone, Copy, Default)]
            pub struct $ty;

            impl Endpoint for $ty {
                const METHOD: Method = method!($method);
                const PATH: &'static str = $path;
                const ROUTE: &'static str = first!($($route,)? $path);
                const NAME: &'static str = $name;
                const DOING: &'static str = $doing;
                const OPEN: bool = open!($auth);
                type Request = $($req)+;
                type Response = $($resp)+;

                fn path(_request: &Self::Request) -> Cow<'static, str> {
                    $(let $req_var = _request; return $path_expr;)?
                    #[allow(unreachable_code)]
                    Cow::Borrowed($path)
                }

                fn operation(schemas: &mut Vec<(String, RefOr<Schema>)>) -> Operation {
                    <openapi::$ty::__path_describe as utoipa::__dev::SchemaReferences>::schemas(schemas);
                    let mut operation = <openapi::$ty::__path_describe as utoipa::Path>::operation();
                    operation.tags = Some(vec![$tag.to_owned()]);
                    operation
                }
            }
        )*

        /// The `#[utoipa::path]` descriptions of the endpoints, on functions that only carry
        /// them (their summaries are the docs of the entries).
        mod openapi {
            $(
                utoipa_path!(@input [$method, path = $path, operation_id = $name,]
                    $input $(($($params)+))? ($($req)+)
                    $auth
                    $output ($($resp)+)
                    $ty [$($doc)*] $ok [$($status : $desc),*]);
            )*
        }

        /// Every endpoint, in the order of the table.
        pub const ROUTES: &[Route] = &[
            $(Route { method: method!($method), path: $path, name: $name },)*
        ];

        /// The OpenAPI paths of every endpoint, and the schemas they refer to.
        pub fn describe() -> (PathsBuilder, Vec<(String, RefOr<Schema>)>) {
            let mut schemas = Vec::new();
            let mut paths = PathsBuilder::new();
            $(
                let operation = <$ty as Endpoint>::operation(&mut schemas);
                paths = paths.path(
                    $path,
                    utoipa::openapi::path::PathItem::new(http_method!($method), operation),
                );
            )*
            (paths, schemas)
        }

        /// Calls `$m!` with the path of every endpoint type, comma-separated, in the order of
        /// the table: how the server registers a route for each.
        #[macro_export]
        macro_rules! for_each_endpoint {
            ($d m:ident) => {
                $d m!($($crate::endpoint::$ty),*)
            };
        }
    };
}

macro_rules! method {
    (get) => {
        Method::Get
    };
    (post) => {
        Method::Post
    };
    (delete) => {
        Method::Delete
    };
}

macro_rules! http_method {
    (get) => {
        utoipa::openapi::path::HttpMethod::Get
    };
    (post) => {
        utoipa::openapi::path::HttpMethod::Post
    };
    (delete) => {
        utoipa::openapi::path::HttpMethod::Delete
    };
}

macro_rules! open {
    (bearer) => {
        false
    };
    (none) => {
        true
    };
}

macro_rules! first {
    ($first:literal, $($rest:literal),*) => {
        $first
    };
    ($only:literal) => {
        $only
    };
}

endpoints! { $
    /// Adds one task or a batch.
    Add = post "/add" {
        name: "add",
        doing: "adding a task",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (AddRequest),
        output: envelope,
        response: (AddResponse),
        ok: "Added (or kept/replaced); for a batch, one result per task in order",
        errors: [
            400: "A field is missing or invalid (named in the message)",
            409: "The task exists and on_duplicate is reject",
            413: "The request or the batch is too large",
        ],
    }

    /// Takes ready tasks, waiting up to `timeout_ms` for the first.
    Pop = post "/pop" {
        name: "pop",
        doing: "popping tasks",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (PopRequest),
        output: envelope,
        response: (Option<PopData>),
        ok: "The task, or null on timeout; a list when count is given",
        errors: [
            400: "A field is missing or invalid",
            409: "The topic has a push target: delayq delivers it itself",
            503: "Too many open long-polls, or shutting down; retry later",
        ],
    }

    /// ACTIVE → FINISHED, for one task or a batch `{"tasks": [{topic, id, receipt?}, ...]}`.
    Finish = post "/finish" {
        name: "finish",
        doing: "finishing a task",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (FinishRequest),
        output: envelope,
        response: (Option<FinishBatchData>),
        ok: "Finished; data is null for one task, for a batch one result per task in order (code 0, or the status the task alone would have got)",
        errors: [
            400: "A field is missing or invalid (named in the message)",
            404: "No such task",
            409: "Not ACTIVE, or a stale receipt",
            413: "The request or the batch is too large",
        ],
    }

    /// ACTIVE → READY, DELAYED or DEAD: the attempt failed.
    Release = post "/release" {
        name: "release",
        doing: "releasing a task",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (ReleaseRequest),
        output: envelope,
        response: (ReleaseData),
        ok: "Released; data is the new state",
        errors: [
            404: "No such task",
            409: "Not ACTIVE, or a stale receipt",
        ],
    }

    /// ACTIVE: restarts the ttr.
    Touch = post "/touch" {
        name: "touch",
        doing: "touching a task",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (AckRequest),
        output: envelope,
        response: (TouchData),
        ok: "The ttr restarted; data has the new deadline",
        errors: [
            404: "No such task",
            409: "Not ACTIVE, or a stale receipt",
        ],
    }

    /// DELAYED, READY or ACTIVE → CANCELLED. After success the task is never delivered again.
    Cancel = post "/cancel" {
        name: "cancel",
        doing: "cancelling a task",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (TaskKey),
        output: envelope,
        response: (Option<NoData>),
        ok: "Cancelled; data is null",
        errors: [
            404: "No such task",
            409: "Already finished, cancelled or dead",
        ],
    }

    /// DEAD → READY with retries reset: one task (`id`) or all of the topic (`all: true`).
    Requeue = post "/requeue" {
        name: "requeue",
        doing: "requeueing a task",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (RequeueRequest),
        output: envelope,
        response: (RequeueData),
        ok: "Requeued; data says how many",
        errors: [
            400: "Neither or both of id and all",
            404: "No such task",
            409: "The task is not dead",
        ],
    }

    /// Removes a task's record, whatever its state.
    Delete = post "/delete" {
        name: "delete",
        doing: "deleting a task",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (TaskKey),
        output: envelope,
        response: (Option<NoData>),
        ok: "Deleted; data is null",
        errors: [
            404: "No such task",
        ],
    }

    /// ACTIVE → DEAD with the reason "buried" (or the `error` given), optionally with a new
    /// priority. A kick or a requeue brings it back.
    Bury = post "/bury" {
        name: "bury",
        doing: "burying a task",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (BuryRequest),
        output: envelope,
        response: (Option<NoData>),
        ok: "Buried; data is null",
        errors: [
            400: "A field is missing or invalid (named in the message)",
            404: "No such task",
            409: "Not ACTIVE, or a stale receipt",
        ],
    }

    /// DELAYED or READY → a new due: `delay_ms` from now, `run_at_ms`, or now when neither is
    /// given; never earlier than now. Body, id, priority and retries are kept.
    Reschedule = post "/reschedule" {
        name: "reschedule",
        doing: "rescheduling a task",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (RescheduleRequest),
        output: envelope,
        response: (ReleaseData),
        ok: "Rescheduled; data is the new state (delayed, or ready when due now)",
        errors: [
            400: "A field is missing or invalid, or both delay_ms and run_at_ms",
            404: "No such task",
            409: "Not DELAYED or READY (an ACTIVE task cannot be rescheduled)",
        ],
    }

    /// Pauses a topic: it keeps accepting adds and promoting due tasks, but hands nothing out
    /// until `POST /resume` or until `for_ms` has passed. Pausing a paused topic sets the new end.
    Pause = post "/pause" {
        name: "pause",
        doing: "pausing a topic",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (PauseRequest),
        output: envelope,
        response: (PauseData),
        ok: "Paused; data is the pause as it now stands",
        errors: [
            400: "A field is missing or invalid (named in the message)",
        ],
    }

    /// Ends a topic's pause (nothing when it is not paused); waiting pops get its ready tasks.
    Resume = post "/resume" {
        name: "resume",
        doing: "resuming a topic",
        tag: "tasks",
        auth: bearer,
        input: body,
        request: (TopicRequest),
        output: envelope,
        response: (PauseData),
        ok: "Resumed; data is the pause as it now stands",
        errors: [
            400: "A field is missing or invalid (named in the message)",
        ],
    }

    /// One task, with its state as a code and a name.
    GetTask = get "/get" {
        name: "get_task",
        doing: "getting a task",
        tag: "inspect",
        auth: bearer,
        input: query,
        request: (GetQuery),
        output: envelope,
        response: (TaskView),
        ok: "The task",
        errors: [
            404: "No such task",
        ],
    }

    /// A page of a topic's tasks (optionally of one state), by due time.
    ListTasks = get "/tasks" {
        name: "list_tasks",
        doing: "listing tasks",
        tag: "inspect",
        auth: bearer,
        input: query,
        request: (TasksQuery),
        output: envelope,
        response: (TaskPage),
        ok: "One page of tasks",
        errors: [
            400: "A bad state, a page of 0 or a page_size of 0 (one over the maximum is clamped)",
        ],
    }

    /// The counters of one topic (`{topic, stats, ...counters}`), or, without `topic`, of every
    /// topic the caller may see (`{topics: {name: counters}, name: counters, ...}`): seqdelay's
    /// shape with delayq's beside it.
    Stats = get "/stats" {
        name: "stats",
        doing: "reading stats",
        tag: "inspect",
        auth: bearer,
        input: query,
        request: (StatsQuery),
        output: envelope,
        response: (StatsData),
        ok: "With topic: TopicStatsData. Without: AllStats",
        errors: [],
    }

    /// Every topic with records (that the caller may see), with its counters.
    Topics = get "/topics" {
        name: "topics",
        doing: "listing topics",
        tag: "inspect",
        auth: bearer,
        input: none,
        request: (NoParams),
        output: envelope,
        response: (TopicList),
        ok: "The topics by name",
        errors: [],
    }

    /// Creates a schedule, or gives the one with the same topic and name a new definition.
    /// Changing its times starts the new series after now; pausing cancels the pending occurrence.
    PutSchedule = post "/schedules" {
        name: "put_schedule",
        doing: "writing a schedule",
        tag: "schedules",
        auth: bearer,
        input: body,
        request: (ScheduleRequest),
        output: envelope,
        response: (PutScheduleData),
        ok: "Created, updated or unchanged; data is the schedule with its next 10 occurrences",
        errors: [
            400: "A bad cron expression, unknown time zone, every_ms below the minimum, bad name or other field (named in the message)",
        ],
    }

    /// Every schedule (of one topic), by topic and name, each with its next occurrence. A token
    /// limited to topics sees only its topics' schedules.
    ListSchedules = get "/schedules" {
        name: "list_schedules",
        doing: "listing schedules",
        tag: "schedules",
        auth: bearer,
        input: query,
        request: (SchedulesQuery),
        output: envelope,
        response: (ScheduleList),
        ok: "The schedules",
        errors: [],
    }

    /// One schedule with its next occurrences (`next`, default 10).
    GetSchedule = get "/schedules/{topic}/{name}" {
        name: "get_schedule",
        doing: "getting a schedule",
        tag: "schedules",
        route: "/schedules/{*path}",
        path: |at| schedule_path(at),
        auth: bearer,
        input: params(
            ("topic" = String, Path, description = "The topic (may hold /)"),
            ("name" = String, Path, description = "The schedule's name"),
            ScheduleQuery,
        ),
        request: (ScheduleAt),
        output: envelope,
        response: (ScheduleView),
        ok: "The schedule",
        errors: [
            404: "No such schedule",
        ],
    }

    /// Deletes a schedule and cancels its pending occurrence (`DELETE /schedules/{topic}/{name}`).
    DeleteScheduleAt = delete "/schedules/{topic}/{name}" {
        name: "delete_schedule_at",
        doing: "deleting a schedule",
        tag: "schedules",
        route: "/schedules/{*path}",
        path: |at| schedule_path(at),
        auth: bearer,
        input: params(
            ("topic" = String, Path, description = "The topic (may hold /)"),
            ("name" = String, Path, description = "The schedule's name"),
        ),
        request: (ScheduleAt),
        output: envelope,
        response: (Option<NoData>),
        ok: "Deleted; data is null",
        errors: [
            404: "No such schedule",
        ],
    }

    /// Deletes a schedule and cancels its pending occurrence (the JSON form of `DELETE`).
    DeleteSchedule = post "/schedules/delete" {
        name: "delete_schedule",
        doing: "deleting a schedule",
        tag: "schedules",
        auth: bearer,
        input: body,
        request: (ScheduleKey),
        output: envelope,
        response: (Option<NoData>),
        ok: "Deleted; data is null",
        errors: [
            404: "No such schedule",
        ],
    }

    /// Pauses a schedule: its pending occurrence is cancelled and none is added until it is
    /// resumed.
    PauseSchedule = post "/schedules/pause" {
        name: "pause_schedule",
        doing: "pausing a schedule",
        tag: "schedules",
        auth: bearer,
        input: body,
        request: (ScheduleKey),
        output: envelope,
        response: (ScheduleView),
        ok: "Paused; data is the schedule",
        errors: [
            404: "No such schedule",
        ],
    }

    /// Resumes a paused schedule with the first occurrence after now; those that fell in the
    /// pause are skipped.
    ResumeSchedule = post "/schedules/resume" {
        name: "resume_schedule",
        doing: "resuming a schedule",
        tag: "schedules",
        auth: bearer,
        input: body,
        request: (ScheduleKey),
        output: envelope,
        response: (ScheduleView),
        ok: "Resumed; data is the schedule",
        errors: [
            404: "No such schedule",
        ],
    }

    /// Liveness: 200 while the process runs.
    Healthz = get "/healthz" {
        name: "healthz",
        doing: "checking the server's health",
        tag: "ops",
        auth: none,
        input: none,
        request: (NoParams),
        output: envelope,
        response: (Health),
        ok: "Alive",
        errors: [],
    }

    /// Readiness: 200 when the storage is reachable, 503 when it is not or the server is
    /// shutting down.
    Readyz = get "/readyz" {
        name: "readyz",
        doing: "checking the server's readiness",
        tag: "ops",
        auth: none,
        input: none,
        request: (NoParams),
        output: envelope,
        response: (Health),
        ok: "Ready",
        errors: [
            503: "Storage unreachable or shutting down",
        ],
    }

    /// The server's metrics in the Prometheus text format.
    Metrics = get "/metrics" {
        name: "metrics",
        doing: "reading metrics",
        tag: "ops",
        auth: bearer,
        input: none,
        request: (NoParams),
        output: text,
        response: (String),
        ok: "Prometheus text format 0.0.4",
        errors: [
            403: "The token is limited to topics",
        ],
    }

    /// This API described in OpenAPI 3.
    OpenApiDocument = get "/openapi.json" {
        name: "openapi",
        doing: "reading the API description",
        tag: "ops",
        auth: bearer,
        input: none,
        request: (NoParams),
        output: object,
        response: (serde_json::Value),
        ok: "The OpenAPI document",
        errors: [],
    }

    /// Sets the flow limits of a topic, replacing the ones it had (docs/flow-control.md): every
    /// consumer of every instance obeys them from its next pop.
    LimitsSet = post "/limits" {
        name: "set_limits",
        doing: "setting flow limits",
        tag: "flow",
        auth: bearer,
        input: body,
        request: (LimitsRequest),
        output: envelope,
        response: (LimitsView),
        ok: "Set; data is the limits as GET shows them",
        errors: [
            400: "A field is missing or invalid (named in the message), or no limit given",
            403: "A read-only token, or a topic the token may not use",
        ],
    }

    /// The limits of one topic, or of every topic with limits the caller may see.
    LimitsGet = get "/limits" {
        name: "get_limits",
        doing: "reading flow limits",
        tag: "flow",
        auth: bearer,
        input: query,
        request: (LimitsQuery),
        output: envelope,
        response: (LimitsList),
        ok: "The limits (one, or none, with topic)",
        errors: [],
    }

    /// Removes a topic's limits: its tasks then go to consumers as fast as they take them.
    LimitsDelete = delete "/limits" {
        name: "delete_limits",
        doing: "deleting flow limits",
        tag: "flow",
        auth: bearer,
        input: query,
        request: (LimitsQuery),
        output: envelope,
        response: (LimitsDeleted),
        ok: "Removed, or there were none (deleted: false)",
        errors: [
            400: "No topic given, or an invalid one",
            403: "A read-only token, or a topic the token may not use",
        ],
    }

    /// Sets the push target of a topic; from then on delayq delivers the topic's tasks itself.
    PushSet = post "/push" {
        name: "set_push",
        doing: "setting a push target",
        tag: "push",
        auth: bearer,
        input: body,
        request: (PushTarget),
        output: envelope,
        response: (TargetView),
        ok: "Set; data is the target as GET shows it",
        errors: [
            400: "A field is missing or invalid (named in the message)",
            403: "A read-only token, or a topic the token may not use",
        ],
    }

    /// The target of one topic, or every target the caller may see.
    PushGet = get "/push" {
        name: "get_push",
        doing: "reading push targets",
        tag: "push",
        auth: bearer,
        input: query,
        request: (PushQuery),
        output: envelope,
        response: (PushList),
        ok: "The targets (one, or none, with topic)",
        errors: [],
    }

    /// Removes a topic's target: its tasks then wait for ordinary consumers again.
    PushDelete = delete "/push" {
        name: "delete_push",
        doing: "deleting a push target",
        tag: "push",
        auth: bearer,
        input: query,
        request: (PushQuery),
        output: envelope,
        response: (PushDeleted),
        ok: "Removed, or there was none (deleted: false)",
        errors: [
            400: "No topic given, or an invalid one",
            403: "A read-only token, or a topic the token may not use",
        ],
    }
}

/// The path of `/schedules/{topic}/{name}` for one schedule.
fn schedule_path(at: &ScheduleAt) -> Cow<'static, str> {
    Cow::Owned(format!("/schedules/{}/{}", at.key.topic, at.key.name))
}

#[cfg(test)]
mod tests {
    use super::ROUTES;

    /// OpenAPI requires every `operationId` to be unique; generators name client methods by it.
    #[test]
    fn every_operation_name_is_used_once() {
        let mut names: Vec<&str> = ROUTES.iter().map(|r| r.name).collect();
        names.sort_unstable();
        let repeated: Vec<&&str> = names
            .windows(2)
            .filter(|w| w[0] == w[1])
            .map(|w| &w[0])
            .collect();
        assert!(
            repeated.is_empty(),
            "operation names used twice: {repeated:?}"
        );
    }
}
