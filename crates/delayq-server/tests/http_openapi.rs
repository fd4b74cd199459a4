//! The OpenAPI document is snapshot-tested: `tests/snapshots/openapi.json` is the reviewed
//! description of the API, and this test fails when the generated one differs. After an
//! intended change, run with `UPDATE_SNAPSHOTS=1` to rewrite the snapshot, and review the diff.

mod support;

use std::path::PathBuf;

use support::server;

fn snapshot_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/openapi.json")
}

#[test]
fn openapi_document_matches_the_snapshot() {
    let doc = delayq_server::openapi::document();
    let generated = doc.to_pretty_json().expect("the document serializes") + "\n";
    let path = snapshot_path();
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &generated).expect("write the snapshot");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != generated {
        let first_difference = committed
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .map_or(
                committed.lines().count().min(generated.lines().count()),
                |i| i,
            );
        panic!(
            "the OpenAPI document differs from {} from line {}; if the change is intended, \
             rerun with UPDATE_SNAPSHOTS=1 and review the diff.\ncommitted: {:?}\ngenerated: {:?}",
            path.display(),
            first_difference + 1,
            committed.lines().nth(first_difference),
            generated.lines().nth(first_difference),
        );
    }
}

#[test]
fn the_document_describes_every_route_and_the_envelope() {
    let doc: serde_json::Value =
        serde_json::from_str(&delayq_server::openapi::document().to_json().unwrap()).unwrap();
    let routes = delayq_api::endpoint::ROUTES;
    assert!(routes.len() >= 30, "the table lists every endpoint");
    for route in routes {
        let method = route.method.name().to_ascii_lowercase();
        let operation = &doc["paths"][route.path][&method];
        assert!(
            operation.is_object(),
            "{method} {} is described",
            route.path
        );
        assert_eq!(
            operation["operationId"], route.name,
            "{method} {}",
            route.path
        );
    }
    let distinct: std::collections::BTreeSet<_> = routes.iter().map(|r| r.path).collect();
    assert_eq!(doc["paths"].as_object().unwrap().len(), distinct.len());
    let schemas = &doc["components"]["schemas"];
    for schema in [
        "AddTaskRequest",
        "TaskView",
        "TaskDelivery",
        "StatsView",
        "Backoff",
        "PushTarget",
        "TargetView",
        "PushFigures",
    ] {
        assert!(schemas[schema].is_object(), "schema {schema}");
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
}

#[tokio::test]
async fn the_served_document_is_the_generated_one() {
    let s = server().start().await;
    let served = s.get("/openapi.json").await;
    let generated: serde_json::Value =
        serde_json::from_str(&delayq_server::openapi::document().to_json().unwrap()).unwrap();
    assert_eq!(served.json, generated);
}

/// Every endpoint of the table is routed at its method: whatever it answers to an empty
/// request, it is not "no route" (404) nor "method not allowed" (405).
#[tokio::test]
async fn every_endpoint_of_the_table_is_served() {
    let s = server().start().await;
    for route in delayq_api::endpoint::ROUTES {
        let path = route.path.replace("{topic}", "t").replace("{name}", "n");
        let method = reqwest::Method::from_bytes(route.method.name().as_bytes()).unwrap();
        let reply = s.request(method, &path).await;
        let what = format!(
            "{} {}: {} {}",
            route.method.name(),
            route.path,
            reply.status,
            reply.text
        );
        assert_ne!(reply.status, 405, "{what}");
        assert!(!reply.message().starts_with("no route"), "{what}");
    }
}
