//! A full disk under the real `delayq serve` (embedded, `--fsync always`), for real: the data
//! directory lives on a 16 MiB tmpfs the test mounts for itself ([`SmallFs`]), which a
//! filler file then fills to the last page.
//!
//! What DESIGN §5 promises: a change is refused with a 503 whose message names the log file
//! (relative to the data directory) and says the write will resume; nothing acknowledged is
//! lost; reads go on being served; once the filler is removed the server takes changes again
//! by itself, without a restart; and a restart afterwards finds every acknowledged task.
//! Every add and get goes into a [`Recorder`], and the history checker finds nothing.

mod support;

use std::time::{Duration, Instant};

use delayq_testkit::SmallFs;
use delayq_testkit::history::{Answer, CheckOptions, Op, Outcome, Recorder, TaskKey, TaskState};
use serde_json::{Value, json};
use support::Server;

const TOPIC: &str = "disk";

/// One HTTP answer: the status and the envelope.
struct Reply {
    status: u16,
    envelope: Value,
}

impl Reply {
    fn message(&self) -> &str {
        self.envelope["message"].as_str().unwrap_or_default()
    }

    fn outcome_unknown(&self) -> bool {
        self.envelope["data"]["outcome"] == "unknown"
    }

    /// The outcome the history records for an add or a finish-like call.
    fn recorded(&self, ok: Answer) -> Outcome {
        match self.status {
            200 => Outcome::Ok(ok),
            s if s >= 500 && self.outcome_unknown() => {
                Outcome::Unknown(format!("{s} {}", self.message()))
            }
            s => Outcome::Failed(format!("{s} {}", self.message())),
        }
    }
}

struct Client {
    http: reqwest::Client,
    url: String,
    rec: Recorder,
}

impl Client {
    async fn send(&self, request: reqwest::RequestBuilder) -> Reply {
        let response = request.send().await.expect("the server answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        let envelope = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("status {status}, not JSON ({e}): {text}"));
        Reply { status, envelope }
    }

    async fn post(&self, path: &str, body: Value) -> Reply {
        let request = self
            .http
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(body.to_string());
        self.send(request).await
    }

    /// Adds task `id` (due in an hour, a 1 KiB body), recording it.
    async fn add(&self, id: &str) -> Reply {
        let key = TaskKey::new(TOPIC, id);
        let call = self.rec.invoke(
            0,
            Op::Add {
                key,
                delay_ms: Some(3_600_000),
                due_ms: None,
                ttr_ms: None,
            },
        );
        let body =
            json!({"topic": TOPIC, "id": id, "delay_ms": 3_600_000, "body": "x".repeat(1024)});
        let reply = self.post("/add", body).await;
        self.rec
            .complete(call, reply.recorded(Answer::Added { existed: false }));
        reply
    }

    /// Reads task `id` back, recording it; returns its state name, or `None` when missing.
    async fn get(&self, id: &str) -> Option<String> {
        let call = self.rec.invoke(
            0,
            Op::Get {
                key: TaskKey::new(TOPIC, id),
            },
        );
        let request = self
            .http
            .get(format!("{}/get", self.url))
            .query(&[("topic", TOPIC), ("id", id)]);
        let reply = self.send(request).await;
        let (outcome, state) = match reply.status {
            200 => {
                let name = reply.envelope["data"]["state_name"]
                    .as_str()
                    .expect("state_name")
                    .to_owned();
                let state = TaskState::from_name(&name).expect("a known state");
                (Outcome::Ok(Answer::Found { state }), Some(name))
            }
            404 => (Outcome::Ok(Answer::Missing), None),
            s => panic!(
                "a read failed while the disk was full: {s} {}",
                reply.message()
            ),
        };
        self.rec.complete(call, outcome);
        state
    }

    async fn status_of(&self, path: &str) -> u16 {
        let request = self.http.get(format!("{}{path}", self.url));
        let response = request.send().await.expect("the server answers");
        response.status().as_u16()
    }
}

/// Asserts the 503 of a refused change: names the segment file relative to the data
/// directory (never the server's absolute path) and says why.
fn assert_refused_for_space(reply: &Reply, data_dir: &str) {
    assert_eq!(reply.status, 503, "{}", reply.envelope);
    let message = reply.message();
    assert!(
        message.contains("shard-") && message.contains(".seg"),
        "the message names the file: {message}"
    );
    assert!(
        message.contains("No space left on device"),
        "the message says why: {message}"
    );
    assert!(
        message.contains("resume by themselves"),
        "the message says it passes: {message}"
    );
    assert!(
        !message.contains(data_dir),
        "no absolute server path: {message}"
    );
}

#[test]
fn a_full_disk_refuses_changes_with_503_serves_reads_and_recovers_by_itself() {
    let fs = SmallFs::mount(16 << 20).unwrap_or_else(|e| panic!("{e}"));
    let data = fs.path().join("data");
    let data_dir = data.to_string_lossy().into_owned();
    let args = ["--data-dir", &data_dir, "--fsync", "always"];
    let mut server = Server::start_with(&args);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut client = Client {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .expect("an HTTP client"),
        url: server.url.clone(),
        rec: Recorder::new(),
    };
    let mut acked: Vec<String> = Vec::new();

    runtime.block_on(async {
        for i in 0..50 {
            let id = format!("before-{i}");
            let reply = client.add(&id).await;
            assert_eq!(reply.status, 200, "{}", reply.envelope);
            acked.push(id);
        }

        // Fill the disk to the last page; adds go on until one needs a page it cannot have.
        let filled = fs.fill().expect("fill the file system");
        assert!(filled > 0, "the file system had no room to fill");
        let mut refused = None;
        for i in 0..5_000 {
            let id = format!("filling-{i}");
            let reply = client.add(&id).await;
            if reply.status == 200 {
                acked.push(id);
            } else {
                refused = Some(reply);
                break;
            }
        }
        let refused = refused.expect("an add was refused once the disk was full");
        assert_refused_for_space(&refused, &data_dir);

        // While the disk stays full: changes are refused before they apply anything...
        for i in 0..5 {
            let reply = client.add(&format!("while-full-{i}")).await;
            assert_refused_for_space(&reply, &data_dir);
            assert!(
                !reply.outcome_unknown(),
                "refused up front: {}",
                reply.envelope
            );
        }
        let pop = client
            .post("/pop", json!({"topic": TOPIC, "timeout_ms": 0}))
            .await;
        assert_refused_for_space(&pop, &data_dir);
        // ... reads are served, the process is alive and says it is not ready.
        for id in &acked {
            assert_eq!(client.get(id).await.as_deref(), Some("delayed"), "{id}");
        }
        assert_eq!(client.status_of("/stats").await, 200);
        assert_eq!(client.status_of("/tasks?topic=disk").await, 200);
        assert_eq!(client.status_of("/healthz").await, 200);
        assert_eq!(client.status_of("/readyz").await, 503);

        // Space returns: the server takes changes again by itself.
        fs.free().expect("remove the filler");
        let started = Instant::now();
        let mut n = 0;
        loop {
            let id = format!("after-{n}");
            n += 1;
            let reply = client.add(&id).await;
            if reply.status == 200 {
                acked.push(id);
                break;
            }
            assert_refused_for_space(&reply, &data_dir);
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "still refusing 20 s after space was freed: {}",
                reply.envelope
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for i in 0..20 {
            let id = format!("resumed-{i}");
            let reply = client.add(&id).await;
            assert_eq!(reply.status, 200, "{}", reply.envelope);
            acked.push(id);
        }
        assert_eq!(client.status_of("/readyz").await, 200);
        for id in &acked {
            assert_eq!(client.get(id).await.as_deref(), Some("delayed"), "{id}");
        }
    });

    // A graceful stop and a restart on the same data: every acknowledged task is there.
    let status = server.terminate(Duration::from_secs(20));
    assert!(status.success(), "delayq serve exited with {status}");
    let server = Server::start_with(&args);
    client.url = server.url.clone();
    runtime.block_on(async {
        for id in &acked {
            assert_eq!(client.get(id).await.as_deref(), Some("delayed"), "{id}");
        }
    });
    let violations = client.rec.history().check(&CheckOptions::default());
    assert!(violations.is_empty(), "{violations:#?}");
    drop(server);
    drop(fs);
}
