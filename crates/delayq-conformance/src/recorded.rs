//! A recorded load over [`Queue`]s for chaos and failover tests of the shared backends
//! (Redis, PostgreSQL): clients that add, pop, finish, release, touch, cancel and read through
//! random instances over one storage, each call recorded in a [`Recorder`] with its outcome
//! as the library reported it (an error whose outcome is unknown is recorded as unknown), for
//! the history checker of `delayq-testkit`.
//!
//! [`Load`] runs four such clients until stopped, then drains the topics, reads every task
//! back and checks the whole history with every task settled. [`Chaos`] puts random network
//! faults on the instances' proxies meanwhile.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use delayq::{AddOutcome, ErrorKind, NewTask, Outcome as LibOutcome, PopOptions, Queue};
use delayq_testkit::history::{
    Answer, CheckOptions, Delivery, History, Op, Outcome, Recorder, TaskKey, TaskState,
};
use delayq_testkit::{FaultProxy, random_faults};

/// The topics of the load.
pub const TOPICS: [&str; 2] = ["chaos-a", "chaos-b"];

/// A small deterministic random source (xorshift), seeded per run.
pub struct Rng(pub u64);

impl Rng {
    /// A number below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// The seed of a run: `DELAYQ_CHAOS_SEED`, else the time (odd, as xorshift needs).
pub fn seed() -> u64 {
    std::env::var("DELAYQ_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
        | 1
}

/// The recorded outcome of a library call.
pub fn outcome<T>(result: &delayq::Result<T>, answer: impl FnOnce(&T) -> Answer) -> Outcome {
    match result {
        Ok(value) => Outcome::Ok(answer(value)),
        Err(e) if e.outcome() == LibOutcome::Unknown => Outcome::Unknown(e.to_string()),
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// The checker's name of a task state.
pub fn state(s: delayq::State) -> TaskState {
    TaskState::from_name(s.name()).unwrap_or_else(|| panic!("state {s:?}"))
}

/// A client of the load: calls through a random queue and records everything.
pub struct Client {
    /// Its number in the history.
    pub n: usize,
    /// Where it records.
    pub rec: Arc<Recorder>,
    /// The queues it calls, one at random a call (instances over one storage).
    pub queues: Arc<Vec<Queue>>,
    /// Its random source.
    pub rng: Rng,
    /// The tasks it added (acknowledged or not).
    pub added: Vec<TaskKey>,
}

impl Client {
    /// A client numbered `n` over `queues`, recording in `rec`.
    pub fn new(n: usize, rec: Arc<Recorder>, queues: Arc<Vec<Queue>>, seed: u64) -> Client {
        Client {
            n,
            rec,
            queues,
            rng: Rng(seed | 1),
            added: Vec::new(),
        }
    }

    fn queue(&mut self) -> Queue {
        let i = self.rng.below(self.queues.len() as u64) as usize;
        self.queues[i].clone()
    }

    /// Adds a task due after `delay_ms`.
    pub async fn add(&mut self, key: TaskKey, delay_ms: u64, ttr_ms: u64) {
        let q = self.queue();
        let call = self.rec.invoke(
            self.n,
            Op::Add {
                key: key.clone(),
                delay_ms: Some(delay_ms),
                due_ms: None,
                ttr_ms: Some(ttr_ms),
            },
        );
        let task = NewTask::new(&key.topic, &key.id)
            .delay_ms(delay_ms)
            .ttr_ms(ttr_ms)
            .body("chaos");
        let result = q.add(task).await;
        self.rec.complete(
            call,
            outcome(&result, |o| Answer::Added {
                existed: *o == AddOutcome::Existed,
            }),
        );
        self.added.push(key);
    }

    /// Pops up to `count` tasks of `topic`, long-polling `timeout_ms`; nothing when the pop failed.
    pub async fn pop(&mut self, topic: &str, count: usize, timeout_ms: u64) -> Vec<Delivery> {
        let q = self.queue();
        let call = self.rec.invoke(
            self.n,
            Op::Pop {
                topic: topic.to_owned(),
            },
        );
        let result = q
            .pop(
                topic,
                PopOptions::default().count(count).timeout_ms(timeout_ms),
            )
            .await;
        let deliveries: Vec<Delivery> = match &result {
            Ok(ds) => ds
                .iter()
                .map(|d| Delivery {
                    key: TaskKey::new(&d.topic, &d.id),
                    due_ms: d.due_ms,
                    ttr_ms: d.ttr_ms,
                    receipt: d.receipt.clone(),
                    retries: d.retries,
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        self.rec.complete(
            call,
            outcome(&result, |_| Answer::Delivered(deliveries.clone())),
        );
        deliveries
    }

    /// Finishes a delivery with its receipt.
    pub async fn finish(&mut self, d: &Delivery) {
        let q = self.queue();
        let call = self.rec.invoke(
            self.n,
            Op::Finish {
                key: d.key.clone(),
                receipt: Some(d.receipt.clone()),
            },
        );
        let result = q.finish(&d.key.topic, &d.key.id, Some(&d.receipt)).await;
        self.rec.complete(call, outcome(&result, |_| Answer::Done));
    }

    /// Releases a delivery with its receipt, ready again after `delay_ms`.
    pub async fn release(&mut self, d: &Delivery, delay_ms: u64) {
        let q = self.queue();
        let call = self.rec.invoke(
            self.n,
            Op::Release {
                key: d.key.clone(),
                receipt: Some(d.receipt.clone()),
                delay_ms: Some(delay_ms),
            },
        );
        let options = delayq::ReleaseOptions::default()
            .receipt(d.receipt.clone())
            .delay_ms(delay_ms);
        let result = q.release(&d.key.topic, &d.key.id, options).await;
        self.rec.complete(call, outcome(&result, |_| Answer::Done));
    }

    /// Restarts a delivery's ttr.
    pub async fn touch(&mut self, d: &Delivery) {
        let q = self.queue();
        let call = self.rec.invoke(
            self.n,
            Op::Touch {
                key: d.key.clone(),
                receipt: Some(d.receipt.clone()),
            },
        );
        let result = q.touch(&d.key.topic, &d.key.id, Some(&d.receipt)).await;
        self.rec.complete(call, outcome(&result, |_| Answer::Done));
    }

    /// Cancels a task.
    pub async fn cancel(&mut self, key: TaskKey) {
        let q = self.queue();
        let call = self.rec.invoke(self.n, Op::Cancel { key: key.clone() });
        let result = q.cancel(&key.topic, &key.id).await;
        self.rec.complete(call, outcome(&result, |_| Answer::Done));
    }

    /// Reads a task back; `None` when the read failed.
    pub async fn get(&mut self, key: TaskKey) -> Option<Answer> {
        let q = self.queue();
        let call = self.rec.invoke(self.n, Op::Get { key: key.clone() });
        let result = match q.get(&key.topic, &key.id).await {
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Ok(info) => Ok(Some(state(info.state))),
            Err(e) => Err(e),
        };
        let recorded = outcome(&result, |found| match found {
            Some(state) => Answer::Found { state: *state },
            None => Answer::Missing,
        });
        let answer = match &recorded {
            Outcome::Ok(a) => Some(a.clone()),
            _ => None,
        };
        self.rec.complete(call, recorded);
        answer
    }

    /// The mixed load, until `stop`.
    pub async fn load(&mut self, stop: &AtomicBool, next_id: &AtomicU64) {
        while !stop.load(Ordering::Relaxed) {
            let topic = TOPICS[self.rng.below(2) as usize];
            let roll = self.rng.below(100);
            if roll < 35 {
                let id = format!("t{}", next_id.fetch_add(1, Ordering::Relaxed));
                let delay = self.rng.below(1_500);
                let ttr = 1_000 + self.rng.below(2_000);
                self.add(TaskKey::new(topic, id), delay, ttr).await;
            } else if roll < 75 {
                for d in self.pop(topic, 4, 200).await {
                    match self.rng.below(10) {
                        0..=4 => self.finish(&d).await,
                        5..=6 => {
                            let delay = self.rng.below(500);
                            self.release(&d, delay).await;
                        }
                        7 => {
                            self.touch(&d).await;
                            self.finish(&d).await;
                        }
                        // Abandoned: its ttr runs out and it comes back.
                        _ => {}
                    }
                }
            } else if roll < 85 && !self.added.is_empty() {
                let i = self.rng.below(self.added.len() as u64) as usize;
                let key = self.added[i].clone();
                self.cancel(key).await;
            } else if !self.added.is_empty() {
                let i = self.rng.below(self.added.len() as u64) as usize;
                let key = self.added[i].clone();
                self.get(key).await;
            }
        }
    }

    /// Reads every one of `keys` back (recorded), trying each for up to 5 s while the read
    /// fails; panics when one cannot be read.
    pub async fn read_back(&mut self, keys: &[TaskKey]) {
        for key in keys {
            let mut tries = 0;
            while self.get(key.clone()).await.is_none() {
                tries += 1;
                assert!(tries < 50, "cannot read {key} back");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Pops and finishes until the topics hold nothing delayed, ready or active, for at most
    /// `limit`. Returns whether they emptied.
    pub async fn drain(&mut self, limit: Duration) -> bool {
        let started = Instant::now();
        while started.elapsed() < limit {
            let mut busy = false;
            for topic in TOPICS {
                for d in self.pop(topic, 50, 300).await {
                    self.finish(&d).await;
                }
                let q = self.queue();
                if let Ok(stats) = q.stats(topic).await
                    && stats.delayed + stats.ready + stats.active > 0
                {
                    busy = true;
                }
            }
            if !busy {
                return true;
            }
        }
        false
    }
}

/// Checks `history` with the default options (`settled`: every acknowledged add must be
/// settled); panics with the violations.
pub fn check(history: &History, settled: bool) {
    let options = CheckOptions {
        require_settled: settled,
        ..CheckOptions::default()
    };
    let violations = history.check(&options);
    assert!(violations.is_empty(), "{violations:#?}");
}

/// How long a random-fault run lasts: `DELAYQ_CHAOS_SECS`, 20 s by default.
pub fn chaos_secs() -> u64 {
    std::env::var("DELAYQ_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

/// Four clients of the mixed load over `queues`, all recorded in one history.
pub struct Load {
    /// Where the clients record.
    pub rec: Arc<Recorder>,
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<Client>>,
}

impl Load {
    /// Starts the four clients.
    pub fn start(queues: Arc<Vec<Queue>>, seed: u64) -> Load {
        let rec = Arc::new(Recorder::new());
        let stop = Arc::new(AtomicBool::new(false));
        let next_id = Arc::new(AtomicU64::new(0));
        let mut clients = Vec::new();
        for n in 0..4 {
            let mut client = Client::new(
                n,
                Arc::clone(&rec),
                Arc::clone(&queues),
                seed.wrapping_mul(n as u64 + 3),
            );
            let stop = Arc::clone(&stop);
            let next_id = Arc::clone(&next_id);
            clients.push(tokio::spawn(async move {
                client.load(&stop, &next_id).await;
                client
            }));
        }
        Load { rec, stop, clients }
    }

    /// Stops the load (the faults must have ended), drains the topics, reads every task
    /// back and checks the whole history, every task settled.
    pub async fn stop_and_check(self, report: &str) {
        self.stop.store(true, Ordering::Relaxed);
        let mut added = Vec::new();
        let mut last = None;
        for c in self.clients {
            let c = c.await.expect("a client");
            added.extend(c.added.iter().cloned());
            last = Some(c);
        }
        let mut drainer = last.expect("a client");
        drainer.n = 99;
        let drained = drainer.drain(Duration::from_secs(40)).await;
        drainer.read_back(&added).await;
        let history = self.rec.history();
        eprintln!("{report}; history {:?}", history.counts());
        assert!(drained, "the topics did not drain once the faults ended");
        check(&history, true);
    }
}

/// The testkit's random faults ([`random_faults`]) on a set of proxies, repeatable by seed.
pub struct Chaos<'a> {
    proxies: Vec<&'a FaultProxy>,
    /// The random source of the faults (also for a test's own choices in between).
    pub rng: Rng,
    injected: BTreeMap<&'static str, u32>,
}

impl<'a> Chaos<'a> {
    /// Chaos on `proxies`, its choices seeded by `seed`.
    pub fn new(proxies: Vec<&'a FaultProxy>, seed: u64) -> Self {
        Chaos {
            proxies,
            rng: Rng(seed | 1),
            injected: BTreeMap::new(),
        }
    }

    /// Puts one random fault after another on random proxies for `span`.
    pub async fn run_for(&mut self, span: Duration) {
        let until = Instant::now() + span;
        random_faults(&self.proxies, until, &mut self.rng.0, &mut self.injected).await;
    }

    /// Ends every fault and says what was done: the faults injected by kind and the
    /// connections the proxies reset.
    pub fn heal(&self) -> String {
        for proxy in &self.proxies {
            proxy.heal();
        }
        let resets: u64 = self.proxies.iter().map(|p| p.resets()).sum();
        format!("faults injected {:?}; proxy resets {resets}", self.injected)
    }
}

/// Adds each of `ids` to `topic` through `writer` with `fault` in force (set with the id just
/// before the add, `heal` called after it): a fault that loses the add's reply. Then reads
/// each back through `reader`. Every add must fail with a retryable error, and one that says
/// nothing was applied must have left nothing (the failure's contract); panics otherwise.
/// Returns how many failed with an unknown outcome and were written, and a line per attempt
/// for a report.
pub async fn adds_with_lost_replies(
    writer: &Queue,
    reader: &Queue,
    topic: &str,
    ids: &[String],
    mut fault: impl FnMut(&str),
    mut heal: impl FnMut(),
) -> (usize, Vec<String>) {
    let mut unknown_and_written = 0;
    let mut attempts = Vec::new();
    for id in ids {
        fault(id);
        let err = writer
            .add(NewTask::new(topic, id).delay_ms(60_000))
            .await
            .expect_err("the reply is lost");
        heal();
        assert!(err.is_retryable(), "{err}");
        let found = reader.get(topic, id).await;
        match (err.outcome(), &found) {
            (LibOutcome::NotApplied, Ok(_)) => {
                panic!("{id}: a failure that says nothing happened, yet the task is there: {err}")
            }
            (LibOutcome::Unknown, Ok(info)) => {
                assert_eq!(info.state, delayq::State::Delayed);
                unknown_and_written += 1;
            }
            _ => {}
        }
        attempts.push(format!("{id}: {err} / found: {found:?}"));
        // Let the connection come back before the next try.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    (unknown_and_written, attempts)
}
