//! `delayq bench` as a command: it runs, stops by itself and prints its table, each figure
//! beside its `/healthz` ceiling. A smoke test: speed figures are never asserted here.

mod support;

use support::{Server, delayq};

#[test]
fn bench_add_runs_and_prints_a_positive_rate() {
    let server = Server::start();
    let run = server.run(&[
        "bench",
        "add",
        "--duration",
        "1s",
        "--clients",
        "4",
        "--ceiling-time",
        "300ms",
    ]);
    run.assert_code(0);
    for expected in [
        "bench",
        "what is measured",
        "target (docs/design.md §6)",
        "ceiling",
        "GET /healthz, 4 clients",
        "add: ",
        "tasks/s",
        "% of the /healthz ceiling",
        "90 % of the ceiling",
    ] {
        assert!(
            run.stdout.contains(expected),
            "{expected} missing:\n{}",
            run.stdout
        );
    }
    let report = server.json(&[
        "bench",
        "add",
        "--duration",
        "300ms",
        "--clients",
        "2",
        "--batch",
        "10",
        "--ceiling-time",
        "200ms",
        "--threads",
        "2",
    ]);
    let ceiling = &report["results"][0];
    assert_eq!(ceiling["bench"], "ceiling", "{report}");
    assert!(ceiling["figure"].as_f64().unwrap_or(0.0) > 0.0, "{report}");
    let result = &report["results"][1];
    assert_eq!(result["bench"], "add");
    assert!(result["figure"].as_f64().unwrap_or(0.0) > 0.0, "{report}");
    assert!(result["ops"].as_u64().unwrap_or(0) > 0, "{report}");
    assert_eq!(result["ops"].as_u64().unwrap_or(0) % 10, 0, "{report}");
    assert_eq!(result["errors"], 0, "{report}");
    assert_eq!(
        result["ceiling"]["requests_per_s"], ceiling["figure"],
        "{report}"
    );
    assert_eq!(result["ratios"][0]["against"], "the ceiling", "{report}");
    assert!(
        result["ratios"][0]["percent"].as_f64().unwrap_or(0.0) > 0.0,
        "{report}"
    );
}

/// The result line of `bench` in a JSON report.
fn line<'a>(report: &'a serde_json::Value, bench: &str) -> &'a serde_json::Value {
    report["results"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["bench"] == bench))
        .unwrap_or_else(|| panic!("no {bench} line in {report}"))
}

#[test]
fn bench_pop_and_lateness_run_small() {
    let server = Server::start();
    let pop = server.json(&[
        "bench",
        "pop",
        "--workers",
        "2",
        "--tasks",
        "200",
        "--count",
        "7",
        "--ceiling-time",
        "200ms",
    ]);
    for bench in ["pop", "pop (batch)"] {
        let result = line(&pop, bench);
        assert_eq!(result["ops"], 200, "{pop}");
        assert_eq!(result["errors"], 0, "{pop}");
        let against: Vec<&str> = result["ratios"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["against"].as_str().unwrap())
            .collect();
        assert_eq!(against.len(), 2, "{pop}");
        assert!(against.contains(&"half the ceiling"), "{pop}");
    }
    assert_eq!(
        line(&pop, "pop")["ratios"][0]["against"],
        "half the ceiling"
    );
    assert_eq!(
        line(&pop, "pop (batch)")["ratios"][0]["against"],
        "the ceiling"
    );
    let late = server.json(&[
        "bench",
        "lateness",
        "--rate",
        "200",
        "--duration",
        "500ms",
        "--delay-ms",
        "100",
        "--workers",
        "2",
    ]);
    let result = &late["results"][0];
    assert_eq!(result["ops"], 100, "{late}");
    assert!(
        result["notes"][0]
            .as_str()
            .unwrap_or("")
            .contains("HTTP pop"),
        "{late}"
    );
}

#[test]
fn bench_refuses_remote_servers() {
    let run = delayq(&[
        "bench",
        "add",
        "--server",
        "http://10.1.2.3:9280",
        "--duration",
        "1s",
    ]);
    run.assert_code(1);
    assert!(run.stderr.contains("loopback"), "{}", run.stderr);
}

#[test]
fn bench_push_delivers_every_task_to_its_receiver() {
    let server = Server::start();
    let report = server.json(&[
        "bench",
        "push",
        "--rate",
        "200",
        "--duration",
        "500ms",
        "--delay-ms",
        "100",
    ]);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{report}");
    let (rate, late) = (&results[0], &results[1]);
    assert_eq!(rate["bench"], "push");
    assert_eq!(rate["unit"], "deliveries/s");
    assert_eq!(rate["ops"], 100, "every task arrived: {report}");
    assert_eq!(rate["errors"], 0, "{report}");
    assert!(rate["figure"].as_f64().unwrap() > 0.0, "{report}");
    // 200/s is not the target's condition: kept for reference, not judged.
    assert!(rate["met"].is_null(), "{report}");
    assert_eq!(late["unit"], "ms p99");
    assert_eq!(late["latency_ms"]["count"], 100, "{report}");
    assert!(
        rate["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .contains("0 arrived before their due time")),
        "never early: {report}"
    );
    // The bench removes its target.
    assert_eq!(server.json(&["push", "get"])["total"], 0);
}

#[test]
fn bench_dashboard_fills_then_measures_its_pages() {
    let server = Server::start();
    let args = [
        "bench",
        "dashboard",
        "--topics",
        "5",
        "--tasks",
        "300",
        "--batch",
        "70",
        "--samples",
        "3",
    ];
    let report = server.json(&args);
    let fill = line(&report, "dashboard (fill)");
    assert_eq!(fill["ops"], 300, "{report}");
    for (bench, target_ms) in [
        ("dashboard first view", 1_000.0),
        ("dashboard topic view", 1_000.0),
        ("dashboard find by id", 50.0),
    ] {
        let result = line(&report, bench);
        assert_eq!(result["ops"], 3, "{report}");
        assert_eq!(result["target"]["value"], target_ms, "{report}");
        assert!(result["figure"].as_f64().unwrap_or(0.0) > 0.0, "{report}");
    }
    // A second run keeps the tasks (on_duplicate keep): it adds nothing.
    let again = server.json(&args);
    assert_eq!(line(&again, "dashboard (fill)")["ops"], 0, "{again}");
    let stats = server.json(&["stats", "--topic", "dash-0001"]);
    let total = stats.get("total").or_else(|| stats["stats"].get("total"));
    assert_eq!(total, Some(&serde_json::json!(60)), "{stats}");
}
