//! A recording HTTP client of a real `delayq serve`, for the tests that check a history
//! (`cli_history`, `cli_redis_chaos`): each call is recorded in a
//! [`delayq_testkit::history::Recorder`] with the outcome the client saw. A 200 is `Ok` with
//! what the envelope's `data` answers; a 5xx with `data.outcome: "unknown"` (or a connection
//! lost after the request was sent) is `Unknown`, since the change may have happened; any
//! other status, and a refused connection, is `Failed`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq_testkit::history::{Answer, Delivery, Op, Outcome, Recorder, TaskKey, TaskState};
use serde_json::{Value, json};

/// The long-poll of a pop: short, so that a round or a run ends promptly.
pub const POP_TIMEOUT_MS: u64 = 200;

/// The answer to one HTTP request.
pub enum Reply {
    /// 200, with the envelope's `data`.
    Ok(Value),
    /// Another status, with the envelope.
    Status(u16, Value),
    /// No answer.
    Transport(reqwest::Error),
}

impl Reply {
    /// The recorded outcome; `answer` reads a success's `data`.
    pub fn outcome(self, answer: impl FnOnce(&Value) -> Answer) -> Outcome {
        match self {
            Reply::Ok(data) => Outcome::Ok(answer(&data)),
            Reply::Status(status, envelope) => {
                let unknown = envelope["data"]["outcome"] == "unknown";
                let text = format!("{status} {}", envelope["message"]);
                if status >= 500 && unknown {
                    Outcome::Unknown(text)
                } else {
                    Outcome::Failed(text)
                }
            }
            // A refused connection sent nothing; anything later may have reached the server.
            Reply::Transport(e) if e.is_connect() => Outcome::Failed(format!("connect: {e}")),
            Reply::Transport(e) => Outcome::Unknown(format!("{e}")),
        }
    }
}

/// One HTTP client of the load, recording everything it does.
pub struct Client {
    pub n: usize,
    pub http: reqwest::Client,
    pub rec: Arc<Recorder>,
    pub urls: Arc<Vec<String>>,
    pub rng: Rng,
    pub next_id: u64,
}

impl Client {
    /// One of the servers, at random.
    pub fn url(&mut self) -> String {
        let i = self.rng.below(self.urls.len() as u64) as usize;
        self.urls[i].clone()
    }

    /// Sends a request and reads the envelope.
    pub async fn send(&mut self, request: reqwest::RequestBuilder) -> Reply {
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => return Reply::Transport(e),
        };
        let status = response.status().as_u16();
        let text = match response.text().await {
            Ok(t) => t,
            Err(e) => return Reply::Transport(e),
        };
        let envelope: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("status {status}, a body that is not JSON ({e}): {text}"));
        if status == 200 {
            Reply::Ok(envelope["data"].clone())
        } else {
            Reply::Status(status, envelope)
        }
    }

    /// POSTs a JSON body to a random server.
    pub async fn post(&mut self, path: &str, body: Value) -> Reply {
        let url = format!("{}{path}", self.url());
        let request = self
            .http
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string());
        let reply = self.send(request).await;
        if matches!(reply, Reply::Transport(_)) {
            // The server is down: do not spin.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        reply
    }

    /// Adds a task with a random delay (under 1.5 s) and ttr (1–3 s).
    pub async fn add(&mut self, key: TaskKey) {
        let delay_ms = self.rng.below(1500);
        let ttr_ms = 1000 + self.rng.below(2000);
        self.add_with(key, delay_ms, ttr_ms).await;
    }

    /// Adds a task with this delay and ttr.
    pub async fn add_with(&mut self, key: TaskKey, delay_ms: u64, ttr_ms: u64) {
        let body = json!({"topic": key.topic, "id": key.id, "body": "x",
            "delay_ms": delay_ms, "ttr_ms": ttr_ms});
        let call = self.rec.invoke(
            self.n,
            Op::Add {
                key,
                delay_ms: Some(delay_ms),
                due_ms: None,
                ttr_ms: Some(ttr_ms),
            },
        );
        let reply = self.post("/add", body).await;
        let outcome = reply.outcome(|data| Answer::Added {
            existed: data["existed"].as_bool().expect("add answers existed"),
        });
        self.rec.complete(call, outcome);
    }

    /// Pops one task (`count` not given, `data` a task or null), or up to `count` (`data` a
    /// list).
    pub async fn pop(&mut self, topic: &str, count: Option<u64>) -> Vec<Delivery> {
        let call = self.rec.invoke(
            self.n,
            Op::Pop {
                topic: topic.into(),
            },
        );
        let mut body = json!({"topic": topic, "timeout_ms": POP_TIMEOUT_MS});
        if let Some(count) = count {
            body["count"] = json!(count);
        }
        let reply = self.post("/pop", body).await;
        let outcome = reply.outcome(|data| match data.as_array() {
            Some(list) => Answer::Delivered(list.iter().filter_map(delivery).collect()),
            None => Answer::Delivered(delivery(data).into_iter().collect()),
        });
        let delivered = match &outcome {
            Outcome::Ok(Answer::Delivered(ds)) => ds.clone(),
            _ => Vec::new(),
        };
        self.rec.complete(call, outcome);
        delivered
    }

    /// Finishes, touches or releases a delivery with its receipt.
    pub async fn ack(&mut self, kind: &str, d: &Delivery, delay_ms: Option<u64>) {
        let (key, receipt) = (d.key.clone(), Some(d.receipt.clone()));
        let mut body = json!({"topic": key.topic, "id": key.id, "receipt": d.receipt});
        let op = match kind {
            "finish" => Op::Finish { key, receipt },
            "touch" => Op::Touch { key, receipt },
            "release" => {
                body["delay_ms"] = json!(delay_ms);
                Op::Release {
                    key,
                    receipt,
                    delay_ms,
                }
            }
            other => unreachable!("{other}"),
        };
        let call = self.rec.invoke(self.n, op);
        let reply = self.post(&format!("/{kind}"), body).await;
        self.rec.complete(call, reply.outcome(|_| Answer::Done));
    }

    /// Cancels a task.
    pub async fn cancel(&mut self, key: TaskKey) {
        self.on_task("/cancel", Op::Cancel { key: key.clone() }, &key)
            .await;
    }

    /// Deletes a task.
    pub async fn delete(&mut self, key: TaskKey) {
        self.on_task("/delete", Op::Delete { key: key.clone() }, &key)
            .await;
    }

    /// Requeues a task.
    pub async fn requeue(&mut self, key: TaskKey) {
        self.on_task("/requeue", Op::Requeue { key: key.clone() }, &key)
            .await;
    }

    /// A request on one task whose answer is plain done.
    pub async fn on_task(&mut self, path: &str, op: Op, key: &TaskKey) {
        let call = self.rec.invoke(self.n, op);
        let reply = self
            .post(path, json!({"topic": key.topic, "id": key.id}))
            .await;
        self.rec.complete(call, reply.outcome(|_| Answer::Done));
    }

    /// Reads a task back; the answer, `None` when the read failed.
    pub async fn get(&mut self, key: TaskKey) -> Option<Answer> {
        let url = format!("{}/get", self.url());
        let request = self
            .http
            .get(url)
            .query(&[("topic", &key.topic), ("id", &key.id)]);
        let call = self.rec.invoke(self.n, Op::Get { key });
        let reply = match self.send(request).await {
            // A get of no record is an answer, not a failure.
            Reply::Status(404, _) => Reply::Ok(Value::Null),
            other => other,
        };
        let outcome = reply.outcome(|data| {
            if data.is_null() {
                return Answer::Missing;
            }
            let name = data["state_name"].as_str().expect("get answers state_name");
            let state =
                TaskState::from_name(name).unwrap_or_else(|| panic!("unknown state_name {name:?}"));
            Answer::Found { state }
        });
        let answer = match &outcome {
            Outcome::Ok(a) => Some(a.clone()),
            _ => None,
        };
        self.rec.complete(call, outcome);
        answer
    }

    /// Pops and finishes until no topic has a delayed, ready or active task, or 30 s pass
    /// without a delivery (a long run leaves a backlog of tens of thousands). Returns the last counters of the topics that were still busy, if any: the caller reads
    /// every task back, and the checker then names the unsettled ones with their events (or
    /// there are none, and the counters are wrong).
    pub async fn drain(&mut self, topics: &[&str]) -> Vec<Value> {
        let mut last_progress = Instant::now();
        let mut busy_stats = Vec::new();
        while last_progress.elapsed() < Duration::from_secs(30) {
            busy_stats.clear();
            for &topic in topics {
                for d in self.pop(topic, Some(100)).await {
                    last_progress = Instant::now();
                    self.ack("finish", &d, None).await;
                }
            }
            let mut busy = 0;
            for &topic in topics {
                let url = format!("{}/stats", self.url());
                let request = self.http.get(url).query(&[("topic", topic)]);
                match self.send(request).await {
                    Reply::Ok(s) => {
                        let before = busy;
                        for field in ["delayed", "ready", "active"] {
                            busy += s[field].as_u64().expect("stats counters");
                        }
                        if busy > before {
                            busy_stats.push(s);
                        }
                    }
                    _ => busy += 1,
                }
            }
            if busy == 0 {
                return Vec::new();
            }
        }
        busy_stats
    }
}

/// The delivery in a pop's `data` (`null` when none).
pub fn delivery(data: &Value) -> Option<Delivery> {
    if data.is_null() {
        return None;
    }
    let text = |f: &str| {
        data[f]
            .as_str()
            .unwrap_or_else(|| panic!("a delivery without {f}: {data}"))
            .to_owned()
    };
    let number = |f: &str| {
        data[f]
            .as_u64()
            .unwrap_or_else(|| panic!("a delivery without {f}: {data}"))
    };
    Some(Delivery {
        key: TaskKey::new(text("topic"), text("id")),
        due_ms: number("due_ms"),
        ttr_ms: number("ttr_ms"),
        receipt: text("receipt"),
        retries: u32::try_from(number("retries")).expect("retries fit u32"),
    })
}

/// A small pseudo-random generator (splitmix64): the choices of a run follow from its seed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
