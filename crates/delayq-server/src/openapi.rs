//! `GET /openapi.json`: the API described in OpenAPI 3: its paths come from the endpoint table
//! of the contract crate ([`delayq_api::endpoint::describe`]), its schemas from the `ToSchema`
//! derives of the same crate; this file adds the title, the tags and the bearer scheme.
//!
//! The document is snapshot-tested (`tests/http_openapi.rs` against
//! `tests/snapshots/openapi.json`), so any change to the API shows up in review. Set
//! `UPDATE_SNAPSHOTS=1` to rewrite the snapshot after an intended change.

use std::sync::OnceLock;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The API description.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "delayq",
        description = "A millisecond-precise delay queue. Every response is the envelope \
            {\"code\": 0 | <http status>, \"message\": \"...\", \"data\": ...}; the HTTP status \
            matches code. POST bodies are JSON whatever their Content-Type; unknown fields are \
            ignored; a missing or invalid field is a 400 naming it."
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "tasks", description = "Add, take and settle tasks"),
        (name = "inspect", description = "Read tasks and counters"),
        (name = "schedules", description = "Recurring schedules: each occurrence an ordinary task"),
        (name = "ops", description = "Health, readiness, metrics and this description"),
        (name = "push", description = "Push targets: delayq POSTs a topic's tasks to a URL"),
        (name = "flow", description = "Flow limits: concurrency and rate per topic and per key"),
    )
)]
pub struct ApiDoc;

/// Declares the optional bearer-token scheme the paths refer to.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "Required only when the server is configured with tokens. A token may \
                         be limited to some topics (403 for others).",
                    ))
                    .build(),
            ),
        );
    }
}

/// The OpenAPI document, built once.
pub fn document() -> utoipa::openapi::OpenApi {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(build).clone()
}

fn build() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    let (paths, schemas) = delayq_api::endpoint::describe();
    doc.paths = paths.build();
    doc.components
        .get_or_insert_with(Default::default)
        .schemas
        .extend(schemas);
    doc
}
