//! The engine's state machine checked against a simple model written from docs/design.md §2.
//!
//! Proptest generates sequences of operations (add with each duplicate policy and a priority,
//! pop, finish, release, touch, cancel, requeue, delete, bury, reschedule, kick, kick-job,
//! pause, resume, and time passing) on a handful of ids; after every step the engine's answer
//! (success or error kind) and every task's state, retries, priority and due time must equal
//! the model's, every pop must take exactly the model's next task (priority, due, insertion),
//! and the peeks must show the model's heads. The shard is driven synchronously with an explicit `now`, so
//! the run is exact and deterministic. It lives inside the crate because the shard is the
//! engine's own business, not part of the library's API.

use std::collections::BTreeMap;
use std::sync::Arc;

use delayq_core::validate::{Limits, TaskDefaults, validate_task};
use delayq_core::{
    AddOutcome, Backoff, BuryOptions, MaxRetries, NewTask, OnDuplicate, Pause, ReleaseOptions,
    State,
};
use proptest::prelude::*;

use super::NoJournal;
use super::shard::Shard;
use crate::ErrorKind;
use crate::metrics::Metrics;

const TOPIC: &str = "t";
const RETENTION: u64 = 500;
const START: u64 = 1_000_000;

#[derive(Debug, Clone)]
enum Step {
    Add {
        id: u8,
        delay: u64,
        max_retries: i8,
        backoff: Option<u64>,
        policy: u8,
        priority: u32,
    },
    Bury {
        id: u8,
        receipt: Receipt,
        priority: Option<u32>,
    },
    Reschedule {
        id: u8,
        delay: u64,
    },
    Kick {
        max: u64,
    },
    KickJob {
        id: u8,
    },
    Pause {
        for_ms: Option<u64>,
    },
    Resume,
    Pop {
        count: usize,
    },
    Finish {
        id: u8,
        receipt: Receipt,
    },
    Release {
        id: u8,
        receipt: Receipt,
        delay: Option<u64>,
        priority: Option<u32>,
    },
    Touch {
        id: u8,
        receipt: Receipt,
    },
    Cancel {
        id: u8,
    },
    Requeue {
        id: u8,
    },
    Delete {
        id: u8,
    },
    Advance {
        ms: u64,
    },
}

#[derive(Debug, Clone, Copy)]
enum Receipt {
    Current,
    Stale,
    Omitted,
}

fn step() -> impl Strategy<Value = Step> {
    let id = 0u8..5;
    let receipt = prop_oneof![
        Just(Receipt::Current),
        Just(Receipt::Stale),
        Just(Receipt::Omitted)
    ];
    prop_oneof![
        3 => (id.clone(), prop_oneof![Just(0u64), 0u64..300], -1i8..3, proptest::option::of(1u64..200), 0u8..3, 0u32..3)
            .prop_map(|(id, delay, max_retries, backoff, policy, priority)| Step::Add { id, delay, max_retries, backoff, policy, priority }),
        1 => (id.clone(), receipt.clone(), proptest::option::of(0u32..3))
            .prop_map(|(id, receipt, priority)| Step::Bury { id, receipt, priority }),
        1 => (id.clone(), prop_oneof![Just(0u64), 0u64..300]).prop_map(|(id, delay)| Step::Reschedule { id, delay }),
        1 => (0u64..3).prop_map(|max| Step::Kick { max }),
        1 => id.clone().prop_map(|id| Step::KickJob { id }),
        1 => proptest::option::of(1u64..300).prop_map(|for_ms| Step::Pause { for_ms }),
        1 => Just(Step::Resume),
        3 => (1usize..4).prop_map(|count| Step::Pop { count }),
        2 => (id.clone(), receipt.clone()).prop_map(|(id, receipt)| Step::Finish { id, receipt }),
        2 => (id.clone(), receipt.clone(), proptest::option::of(0u64..200), proptest::option::of(0u32..3))
            .prop_map(|(id, receipt, delay, priority)| Step::Release { id, receipt, delay, priority }),
        1 => (id.clone(), receipt).prop_map(|(id, receipt)| Step::Touch { id, receipt }),
        1 => id.clone().prop_map(|id| Step::Cancel { id }),
        1 => id.clone().prop_map(|id| Step::Requeue { id }),
        1 => id.prop_map(|id| Step::Delete { id }),
        3 => (1u64..400).prop_map(|ms| Step::Advance { ms }),
    ]
}

/// One task as the model sees it.
#[derive(Debug, Clone)]
struct ModelTask {
    state: State,
    due: u64,
    priority: u32,
    /// Insertion order (a replace is a new insertion).
    seq: u64,
    /// When it last entered DEAD.
    dead_at: u64,
    retries: u32,
    max_retries: i64,
    backoff: Option<u64>,
    ttr: u64,
    /// ACTIVE: ttr deadline; FINISHED/CANCELLED: removal time.
    deadline: u64,
    receipt: Option<String>,
    stale: Option<String>,
}

#[derive(Default)]
struct Model {
    now: u64,
    tasks: BTreeMap<String, ModelTask>,
    seq: u64,
    pause: Pause,
}

type Outcome = Result<(), ErrorKind>;

impl Model {
    fn fail(&mut self, id: &str, delay: Option<u64>) {
        let now = self.now;
        let t = self.tasks.get_mut(id).unwrap();
        t.stale = t.receipt.take();
        if t.max_retries >= 0 && i64::from(t.retries) >= t.max_retries {
            t.state = State::Dead;
            t.dead_at = now;
            return;
        }
        t.retries += 1;
        let wait = delay.or(t.backoff).unwrap_or(0);
        if wait == 0 {
            t.state = State::Ready;
        } else {
            t.state = State::Delayed;
            t.due = now + wait;
        }
    }

    fn end(&mut self, id: &str, state: State) {
        let now = self.now;
        let t = self.tasks.get_mut(id).unwrap();
        t.stale = t.receipt.take().or(t.stale.take());
        t.state = state;
        t.deadline = now + RETENTION;
    }

    /// Applies the passing of time: every timer due at `now`.
    fn advance(&mut self, ms: u64) {
        self.now += ms;
        let now = self.now;
        let ids: Vec<String> = self.tasks.keys().cloned().collect();
        for id in ids {
            let t = &self.tasks[&id];
            match t.state {
                State::Delayed if t.due <= now => {
                    self.tasks.get_mut(&id).unwrap().state = State::Ready
                }
                State::Active if t.deadline <= now => self.fail(&id, None),
                State::Finished | State::Cancelled if t.deadline <= now => {
                    self.tasks.remove(&id);
                }
                _ => {}
            }
        }
    }

    /// The task a pop takes next: READY by (priority, due, insertion).
    fn next_ready(&self) -> Option<&str> {
        self.tasks
            .iter()
            .filter(|(_, t)| t.state == State::Ready)
            .min_by_key(|(_, t)| (t.priority, t.due, t.seq))
            .map(|(id, _)| id.as_str())
    }

    /// The DEAD task kicked next: oldest buried first, then insertion.
    fn next_dead(&self) -> Option<&str> {
        self.tasks
            .iter()
            .filter(|(_, t)| t.state == State::Dead)
            .min_by_key(|(_, t)| (t.dead_at, t.seq))
            .map(|(id, _)| id.as_str())
    }

    /// Checks an operation on an existing ACTIVE task with a receipt choice.
    fn check_active(&self, id: &str, receipt: Receipt) -> Result<(), ErrorKind> {
        let t = self.tasks.get(id).ok_or(ErrorKind::NotFound)?;
        if t.state != State::Active {
            return Err(ErrorKind::Conflict);
        }
        match receipt {
            Receipt::Stale if t.stale.is_some() => Err(ErrorKind::Conflict),
            _ => Ok(()),
        }
    }
}

fn receipt_arg(model: &Model, id: &str, receipt: Receipt) -> Option<String> {
    let t = model.tasks.get(id)?;
    match receipt {
        Receipt::Current => t.receipt.clone(),
        // With no earlier attempt there is nothing stale to pass: pass the current one.
        Receipt::Stale => t.stale.clone().or(t.receipt.clone()),
        Receipt::Omitted => None,
    }
}

/// What the model expects of an operation on an ACTIVE task (finish, release, touch, bury).
fn active_op_want(model: &Model, id: &str, receipt: Receipt, given: &Option<String>) -> Outcome {
    model.check_active(id, receipt).and_then(|_| {
        if receipt_mismatch(model, id, given) {
            Err(ErrorKind::Conflict)
        } else {
            Ok(())
        }
    })
}

/// A receipt that is given and is not the current attempt's.
fn receipt_mismatch(model: &Model, id: &str, given: &Option<String>) -> bool {
    match (given, model.tasks.get(id).and_then(|t| t.receipt.as_ref())) {
        (Some(g), Some(current)) => g != current,
        _ => false,
    }
}

fn run(steps: Vec<Step>) {
    let mut defaults = TaskDefaults::default();
    defaults.retention_ms = RETENTION;
    let mut shard = Shard::new(
        START,
        7,
        defaults,
        4_096,
        Arc::new(Metrics::default()),
        NoJournal,
    );
    let mut model = Model {
        now: START,
        ..Model::default()
    };
    for (n, step) in steps.into_iter().enumerate() {
        let now = model.now;
        let (got, want): (Outcome, Outcome) = match step.clone() {
            Step::Add {
                id,
                delay,
                max_retries,
                backoff,
                policy,
                priority,
            } => {
                let id = format!("id{id}");
                let policy =
                    [OnDuplicate::Reject, OnDuplicate::Replace, OnDuplicate::Keep][policy as usize];
                let mut task = NewTask::new(TOPIC, id.clone())
                    .delay_ms(delay)
                    .ttr_ms(100)
                    .max_retries(MaxRetries::try_from(i64::from(max_retries)).unwrap())
                    .priority(priority)
                    .on_duplicate(policy);
                if let Some(ms) = backoff {
                    task = task.backoff(Backoff::Fixed { ms });
                }
                let spec = validate_task(task, &Limits::default(), &defaults, now).unwrap();
                let got = shard.add(spec, now);
                let exists = model.tasks.contains_key(&id);
                let want = match (exists, policy) {
                    (true, OnDuplicate::Reject) => Err(ErrorKind::Duplicate),
                    (true, OnDuplicate::Keep) => Ok(AddOutcome::Existed),
                    (exists, _) => {
                        let stale = model
                            .tasks
                            .get(&id)
                            .and_then(|t| t.receipt.clone().or(t.stale.clone()));
                        model.tasks.insert(
                            id.clone(),
                            ModelTask {
                                state: if delay == 0 {
                                    State::Ready
                                } else {
                                    State::Delayed
                                },
                                due: now + delay,
                                priority,
                                seq: {
                                    model.seq += 1;
                                    model.seq
                                },
                                dead_at: 0,
                                retries: 0,
                                max_retries: i64::from(max_retries),
                                backoff,
                                ttr: 100,
                                deadline: 0,
                                receipt: None,
                                stale,
                            },
                        );
                        Ok(if exists {
                            AddOutcome::Replaced
                        } else {
                            AddOutcome::Added
                        })
                    }
                };
                let got = got.map_err(|e| e.kind());
                assert_eq!(got, want, "step {n}: {step:?}");
                (Ok(()), Ok(()))
            }
            Step::Pop { count } => {
                let got = shard.pop(TOPIC, count, false, now);
                let ready = model
                    .tasks
                    .values()
                    .filter(|t| t.state == State::Ready)
                    .count();
                let ready = if model.pause.holds(now) { 0 } else { ready };
                assert_eq!(got.len(), ready.min(count), "step {n}: pop count");
                for d in got {
                    // Exactly the model's next: priority, then due, then insertion.
                    let want = model.next_ready().map(str::to_owned);
                    assert_eq!(Some(&d.id), want.as_ref(), "step {n}: pop order");
                    let t = model
                        .tasks
                        .get_mut(&d.id)
                        .expect("popped a task the model has");
                    assert_eq!(d.retries, t.retries);
                    assert_eq!(d.priority, t.priority);
                    t.state = State::Active;
                    t.deadline = now + t.ttr;
                    t.stale = t.receipt.take().or(t.stale.take());
                    t.receipt = Some(d.receipt);
                }
                (Ok(()), Ok(()))
            }
            Step::Finish { id, receipt } => {
                let id = format!("id{id}");
                let r = receipt_arg(&model, &id, receipt);
                let got = shard
                    .finish(TOPIC, &id, r.as_deref(), now)
                    .map_err(|e| e.kind());
                let want = active_op_want(&model, &id, receipt, &r);
                if want.is_ok() {
                    model.end(&id, State::Finished);
                }
                (got, want)
            }
            Step::Release {
                id,
                receipt,
                delay,
                priority,
            } => {
                let id = format!("id{id}");
                let r = receipt_arg(&model, &id, receipt);
                let mut options = ReleaseOptions::default();
                options.receipt = r.clone();
                options.delay_ms = delay;
                options.priority = priority;
                let got = shard
                    .release(TOPIC, &id, options, now)
                    .map(|_| ())
                    .map_err(|e| e.kind());
                let want = active_op_want(&model, &id, receipt, &r);
                if want.is_ok() {
                    if let Some(p) = priority {
                        model.tasks.get_mut(&id).unwrap().priority = p;
                    }
                    model.fail(&id, delay);
                }
                (got, want)
            }
            Step::Touch { id, receipt } => {
                let id = format!("id{id}");
                let r = receipt_arg(&model, &id, receipt);
                let got = shard
                    .touch(TOPIC, &id, r.as_deref(), now)
                    .map(|_| ())
                    .map_err(|e| e.kind());
                let want = active_op_want(&model, &id, receipt, &r);
                if want.is_ok() {
                    let t = model.tasks.get_mut(&id).unwrap();
                    t.deadline = now + t.ttr;
                }
                (got, want)
            }
            Step::Cancel { id } => {
                let id = format!("id{id}");
                let got = shard.cancel(TOPIC, &id, now).map_err(|e| e.kind());
                let want = match model.tasks.get(&id).map(|t| t.state) {
                    None => Err(ErrorKind::NotFound),
                    Some(State::Delayed | State::Ready | State::Active) => Ok(()),
                    Some(_) => Err(ErrorKind::Conflict),
                };
                if want.is_ok() {
                    model.end(&id, State::Cancelled);
                }
                (got, want)
            }
            Step::Requeue { id } => {
                let id = format!("id{id}");
                let got = shard.requeue(TOPIC, &id, now).map_err(|e| e.kind());
                let want = match model.tasks.get(&id).map(|t| t.state) {
                    None => Err(ErrorKind::NotFound),
                    Some(State::Dead) => Ok(()),
                    Some(_) => Err(ErrorKind::Conflict),
                };
                if want.is_ok() {
                    let t = model.tasks.get_mut(&id).unwrap();
                    t.state = State::Ready;
                    t.retries = 0;
                }
                (got, want)
            }
            Step::Delete { id } => {
                let id = format!("id{id}");
                let got = shard.delete(TOPIC, &id).map_err(|e| e.kind());
                let want = if model.tasks.remove(&id).is_some() {
                    Ok(())
                } else {
                    Err(ErrorKind::NotFound)
                };
                (got, want)
            }
            Step::Bury {
                id,
                receipt,
                priority,
            } => {
                let id = format!("id{id}");
                let r = receipt_arg(&model, &id, receipt);
                let mut options = BuryOptions::default();
                options.receipt = r.clone();
                options.priority = priority;
                let got = shard.bury(TOPIC, &id, options, now).map_err(|e| e.kind());
                let want = active_op_want(&model, &id, receipt, &r);
                if want.is_ok() {
                    let t = model.tasks.get_mut(&id).unwrap();
                    t.stale = t.receipt.take();
                    t.state = State::Dead;
                    t.dead_at = now;
                    if let Some(p) = priority {
                        t.priority = p;
                    }
                    let info = shard.get(TOPIC, &id).unwrap();
                    assert_eq!(info.last_error.as_deref(), Some("buried"));
                }
                (got, want)
            }
            Step::Reschedule { id, delay } => {
                let id = format!("id{id}");
                let got = shard
                    .reschedule(TOPIC, &id, now + delay, now)
                    .map_err(|e| e.kind());
                let want = match model.tasks.get(&id).map(|t| t.state) {
                    None => Err(ErrorKind::NotFound),
                    Some(State::Delayed | State::Ready) => Ok(if delay == 0 {
                        State::Ready
                    } else {
                        State::Delayed
                    }),
                    Some(_) => Err(ErrorKind::Conflict),
                };
                if let Ok(state) = want {
                    let t = model.tasks.get_mut(&id).unwrap();
                    t.state = state;
                    t.due = now + delay;
                }
                (got.map(|_| ()), want.map(|_| ()))
            }
            Step::Kick { max } => {
                let got = shard.kick(TOPIC, max, now);
                let dead = model
                    .tasks
                    .values()
                    .filter(|t| t.state == State::Dead)
                    .count() as u64;
                let mut moved = 0;
                if dead > 0 {
                    while moved < max {
                        let Some(id) = model.next_dead().map(str::to_owned) else {
                            break;
                        };
                        let t = model.tasks.get_mut(&id).unwrap();
                        t.state = State::Ready;
                        t.retries = 0;
                        moved += 1;
                    }
                } else {
                    // Earliest due first; ties may go either way, so the model moves the
                    // tasks the engine says it moved after checking they are the earliest.
                    let mut dues: Vec<u64> = model
                        .tasks
                        .values()
                        .filter(|t| t.state == State::Delayed)
                        .map(|t| t.due)
                        .collect();
                    dues.sort_unstable();
                    let take = dues.len().min(max as usize);
                    let cutoff = dues.get(take.wrapping_sub(1)).copied();
                    for (id, t) in model.tasks.iter_mut() {
                        if t.state != State::Delayed {
                            continue;
                        }
                        let now_state = shard.get(TOPIC, id).unwrap().state;
                        if now_state == State::Ready {
                            assert!(Some(t.due) <= cutoff, "step {n}: kicked a later task");
                            t.state = State::Ready;
                            t.due = now;
                            moved += 1;
                        }
                    }
                    assert_eq!(moved, take as u64, "step {n}: kicked delayed");
                }
                assert_eq!(got, moved, "step {n}: kick count");
                (Ok(()), Ok(()))
            }
            Step::KickJob { id } => {
                let id = format!("id{id}");
                let got = shard.kick_job(TOPIC, &id, now).map_err(|e| e.kind());
                let want = match model.tasks.get(&id).map(|t| t.state) {
                    None => Err(ErrorKind::NotFound),
                    Some(State::Dead | State::Delayed) => Ok(()),
                    Some(_) => Err(ErrorKind::Conflict),
                };
                if want.is_ok() {
                    let t = model.tasks.get_mut(&id).unwrap();
                    if t.state == State::Dead {
                        t.retries = 0;
                    } else {
                        t.due = now;
                    }
                    t.state = State::Ready;
                }
                (got, want)
            }
            Step::Pause { for_ms } => {
                let until = for_ms.map(|ms| now + ms);
                shard.pause(TOPIC, until);
                model.pause = Pause {
                    paused: true,
                    until_ms: until,
                };
                (Ok(()), Ok(()))
            }
            Step::Resume => {
                let was = shard.resume(TOPIC, now);
                assert_eq!(was, model.pause.holds(now), "step {n}: resume");
                model.pause = Pause::default();
                (Ok(()), Ok(()))
            }
            Step::Advance { ms } => {
                model.advance(ms);
                while shard.fire(model.now, 1_024) >= 1_024 {}
                (Ok(()), Ok(()))
            }
        };
        assert_eq!(got, want, "step {n}: {step:?}");
        // Every task's observable state equals the model's.
        for (id, t) in &model.tasks {
            let info = shard
                .get(TOPIC, id)
                .unwrap_or_else(|e| panic!("step {n}: {id} missing: {e}"));
            assert_eq!(
                (info.state, info.retries, info.priority),
                (t.state, t.retries, t.priority),
                "step {n}: {id} after {step:?}"
            );
            if matches!(t.state, State::Delayed | State::Ready) {
                assert_eq!(info.due_ms, t.due, "step {n}: {id} due");
            }
            if t.state == State::Delayed {
                assert!(t.due > model.now, "never early: {id} delayed past its due");
            }
        }
        let stats = shard.stats(TOPIC, model.now);
        assert_eq!(stats.pause, model.pause.at(model.now), "step {n}: pause");
        assert_eq!(stats.total as usize, model.tasks.len(), "step {n}: total");
        // The peeks show the model's heads.
        let peek = |state| shard.peek(TOPIC, state).map(|i| i.id);
        assert_eq!(
            peek(State::Ready).as_deref(),
            model.next_ready(),
            "step {n}: peek ready"
        );
        assert_eq!(
            peek(State::Dead).as_deref(),
            model.next_dead(),
            "step {n}: peek dead"
        );
        let earliest = model
            .tasks
            .values()
            .filter(|t| t.state == State::Delayed)
            .map(|t| t.due)
            .min();
        assert_eq!(
            shard.peek(TOPIC, State::Delayed).map(|i| i.due_ms),
            earliest,
            "step {n}: peek delayed"
        );
        for state in State::ALL {
            let want = model.tasks.values().filter(|t| t.state == state).count() as u64;
            assert_eq!(stats.count(state), want, "step {n}: count of {state}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
    #[test]
    fn engine_matches_model(steps in proptest::collection::vec(step(), 1..120)) {
        run(steps);
    }
}
