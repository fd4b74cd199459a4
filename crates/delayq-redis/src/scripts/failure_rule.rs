//! The failure rule exists twice: in the core (`lifecycle::after_failure`,
//! `Backoff::delay_for`, `scheduled_state`) and in `lib.lua` (`fail`, `backoff_delay`), which
//! must decide inside Redis. This test runs one table of failed attempts through both, the Lua
//! through the real release and tick scripts on a real redis-server, and demands the same
//! outcome: the refusal, or the next state, due, retries, last error and history.

use delayq::core::lifecycle::{self, AfterFailure, Op, Refusal};
use delayq::{Attempt, Backoff, MaxRetries, Millis, State, TaskDefaults};
use delayq_testkit::RedisServer;
use redis::aio::MultiplexedConnection;

use super::{Header, Reply, SCRIPTS, Status};
use crate::keys::{Keys, PartitionKeys};
use crate::record::{self, Record};

/// The queue's clock during every attempt.
const NOW: Millis = 1_800_000_000_000;
/// The failed task's due (kept by an immediate redelivery and by DEAD).
const DUE: Millis = NOW - 60_000;
/// When the failed attempt started (the record's `updated`).
const STARTED: Millis = NOW - 5_000;
/// The bound of the history: `HISTORY` in lib.lua must equal it.
const HISTORY: usize = delayq_core::HISTORY_LEN;

/// One failed attempt: the task before it, and what the consumer said.
#[derive(Debug, Clone)]
struct Case {
    state: State,
    retries: u32,
    max: MaxRetries,
    backoff: Option<Backoff>,
    /// The consumer's `delay_ms` on release.
    delay: Option<u64>,
    /// The consumer's error text on release.
    error: Option<&'static str>,
    /// The receipt the consumer gives (the task's is `current`).
    receipt: Option<&'static str>,
    /// The last error of an earlier attempt.
    old_error: Option<&'static str>,
    /// How many earlier attempts the history holds.
    history: usize,
}

/// Where the attempt left the task.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Refused(Refusal),
    Moved {
        state: State,
        due_ms: Millis,
        retries: u32,
        last_error: Option<String>,
        history: Vec<Attempt>,
    },
}

fn base(max: MaxRetries, retries: u32) -> Case {
    Case {
        state: State::Active,
        retries,
        max,
        backoff: None,
        delay: None,
        error: None,
        receipt: None,
        old_error: None,
        history: 0,
    }
}

fn with_backoff(max: MaxRetries, retries: u32, backoff: Backoff) -> Case {
    Case {
        backoff: Some(backoff),
        ..base(max, retries)
    }
}

fn earlier_attempts(n: usize) -> Vec<Attempt> {
    (0..n as u64)
        .map(|i| Attempt {
            started_at_ms: 1_000 + i,
            ended_at_ms: 2_000 + i,
            outcome: "released".to_owned(),
            error: (i % 2 == 0).then(|| format!("error {i}")),
        })
        .collect()
}

fn cases() -> Vec<Case> {
    use MaxRetries::{Limited, Unlimited};
    let default = TaskDefaults::default().max_retries;
    let exp = |base_ms, max_ms| Backoff::Exponential { base_ms, max_ms };
    let schedule = Backoff::Schedule {
        ms: vec![100, 2_000, 30_000],
    };
    let mut cases = Vec::new();
    // Only ACTIVE tasks fail; a stale receipt is refused before anything changes.
    for state in State::ALL.into_iter().filter(|&s| s != State::Active) {
        cases.push(Case {
            state,
            ..base(default, 0)
        });
    }
    cases.push(Case {
        receipt: Some("stale"),
        ..base(default, 0)
    });
    cases.push(Case {
        receipt: Some("current"),
        ..base(default, 0)
    });
    // max_retries: 0 (one attempt only), the default, -1 (no limit), the largest.
    for retries in [0, 1, 5] {
        cases.push(base(Limited(0), retries));
    }
    for retries in [0, 2, 3, 4, 1_000] {
        cases.push(base(default, retries));
    }
    for retries in [0, 1_000, u32::MAX - 1] {
        cases.push(base(Unlimited, retries));
    }
    cases.push(base(Limited(u32::MAX), u32::MAX - 1));
    cases.push(base(Limited(u32::MAX), u32::MAX));
    // Each backoff kind, around its edges.
    for ms in [0, 1, 500] {
        cases.push(with_backoff(Unlimited, 0, Backoff::Fixed { ms }));
    }
    for retries in [0, 1, 2, 3, 4, 10, 62, 63, 64, 1_000, u32::MAX - 1] {
        cases.push(with_backoff(Unlimited, retries, exp(100, 1_000)));
        // Overflow of base * 2^n: saturates, then the cap applies.
        cases.push(with_backoff(Unlimited, retries, exp(3_000_000, 3_600_000)));
    }
    cases.push(with_backoff(Unlimited, 3, exp(0, 1_000)));
    cases.push(with_backoff(Unlimited, 3, exp(100, 0)));
    for retries in [0, 1, 2, 3, 4, 100] {
        // Past its end, a schedule repeats its last entry.
        cases.push(with_backoff(Unlimited, retries, schedule.clone()));
    }
    cases.push(with_backoff(Unlimited, 2, Backoff::Schedule { ms: vec![] }));
    cases.push(with_backoff(default, 3, Backoff::Fixed { ms: 500 }));
    // The consumer's delay wins over the backoff; 0 is an immediate redelivery.
    for delay in [0, 1, 250, 2_592_000_000] {
        cases.push(Case {
            delay: Some(delay),
            ..with_backoff(default, 1, exp(100, 1_000))
        });
        cases.push(Case {
            delay: Some(delay),
            ..base(Limited(1), 1)
        });
    }
    // Error texts as they are stored: JSON-escaped in Redis, the same text read back.
    for error in [
        "boom",
        "",
        "quote \" backslash \\ slash / newline \n tab \t",
        "façade ✓ 🚀",
    ] {
        cases.push(Case {
            error: Some(error),
            ..base(default, 1)
        });
    }
    cases.push(Case {
        old_error: Some("earlier"),
        ..base(default, 1)
    });
    cases.push(Case {
        old_error: Some("earlier"),
        error: Some("later"),
        ..base(default, 3)
    });
    // The history is bounded: the oldest attempt goes.
    for history in [1, HISTORY - 1, HISTORY] {
        cases.push(Case {
            history,
            error: Some("again"),
            ..base(Unlimited, 7)
        });
    }
    cases
}

/// What the core's rule says, `outcome` naming how the attempt ended.
fn core_outcome(case: &Case, outcome: &str) -> Outcome {
    if let Err(refusal) = lifecycle::check_op(case.state, Op::Release)
        .and_then(|()| lifecycle::check_receipt("current", case.receipt))
    {
        return Outcome::Refused(refusal);
    }
    let (state, due_ms, retries) = match lifecycle::after_failure(
        case.max,
        case.backoff.as_ref(),
        case.retries,
        NOW,
        case.delay,
    ) {
        AfterFailure::Retry { retries, due_ms } => {
            let state = lifecycle::scheduled_state(due_ms, NOW);
            // An immediate redelivery keeps its original due, so it goes to the front.
            let due = if state == State::Ready { DUE } else { due_ms };
            (state, due, retries)
        }
        AfterFailure::Dead => (State::Dead, DUE, case.retries),
    };
    let mut history = earlier_attempts(case.history);
    history.push(Attempt {
        started_at_ms: STARTED,
        ended_at_ms: NOW,
        outcome: outcome.to_owned(),
        error: case.error.map(str::to_owned),
    });
    if history.len() > HISTORY {
        history.remove(0);
    }
    Outcome::Moved {
        state,
        due_ms,
        retries,
        last_error: case.error.or(case.old_error).map(str::to_owned),
        history,
    }
}

/// Writes the task of `case` into Redis as the scripts would have left it.
async fn seed(conn: &mut MultiplexedConnection, pk: &PartitionKeys, case: &Case, deadline: Millis) {
    let active = case.state == State::Active;
    let record = Record {
        state: case.state,
        due_ms: DUE,
        created_at_ms: DUE - 1_000,
        updated_at_ms: STARTED,
        ttr_ms: 30_000,
        max_retries: case.max.as_i64(),
        retries: case.retries,
        deadline_ms: if case.state.is_terminal() || active {
            deadline
        } else {
            0
        },
        receipt: if active {
            "current".to_owned()
        } else {
            String::new()
        },
        priority: 7,
        seq: 3,
        trace: None,
        expiry: None,
        key: None,
        body: b"body".to_vec(),
    };
    let (member, score) = crate::keys::member_of(case.state, "t", &record);
    let mut pipe = redis::pipe();
    // A partition of this version: no upgrade of its members.
    pipe.hset(pk.info(), "v", "2");
    pipe.hset(pk.records(), "t", record.encode())
        .zadd(pk.state_set(case.state), member, score);
    if active {
        pipe.zadd(format!("{}deadlines", pk.base), "t", deadline);
    }
    if case.backoff.is_some() || case.old_error.is_some() || case.history > 0 {
        let backoff = case
            .backoff
            .as_ref()
            .map(|b| serde_json::to_string(b).unwrap());
        let error = case.old_error.map(|e| serde_json::to_string(e).unwrap());
        let history: Vec<String> = earlier_attempts(case.history)
            .iter()
            .map(|a| serde_json::to_string(a).unwrap())
            .collect();
        let extras = format!(
            "{}\0{}\0{}",
            backoff.unwrap_or_default(),
            error.unwrap_or_default(),
            history.join("\n")
        );
        pipe.hset(pk.extras(), "t", extras);
    }
    pipe.exec_async(conn).await.unwrap();
}

/// What the scripts did: the refusal, or the task as read back.
async fn read_outcome(
    conn: &mut MultiplexedConnection,
    pk: &PartitionKeys,
    reply: Reply,
) -> Outcome {
    match reply.status {
        Status::Ok => {}
        Status::WrongState(code) => {
            let state = State::from_code(code).unwrap();
            return Outcome::Refused(Refusal::WrongState {
                state,
                op: Op::Release,
            });
        }
        Status::StaleReceipt => return Outcome::Refused(Refusal::StaleReceipt),
        Status::NotFound | Status::Fenced(_) | Status::PastExpiry(_) | Status::NeedsPermit => {
            panic!("unexpected {:?}", reply.status)
        }
    }
    let (raw, extras): (String, Option<String>) = redis::pipe()
        .hget(pk.records(), "t")
        .hget(pk.extras(), "t")
        .query_async(conn)
        .await
        .unwrap();
    let record = Record::parse(raw).unwrap();
    let (member, want) = crate::keys::member_of(record.state, "t", &record);
    assert_eq!(
        (record.priority, record.seq),
        (7, 3),
        "priority and insertion kept"
    );
    let info = record::task_info("t", "t", record, extras.as_deref(), "test").unwrap();
    // The task is in its state's set, under its member and score, and no longer among the
    // ACTIVE.
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(pk.state_set(info.state))
        .arg(member)
        .query_async(conn)
        .await
        .unwrap();
    assert_eq!(score, Some(want), "{info:?}");
    let active: Option<f64> = redis::cmd("ZSCORE")
        .arg(format!("{}deadlines", pk.base))
        .arg("t")
        .query_async(conn)
        .await
        .unwrap();
    assert_eq!(active, None);
    Outcome::Moved {
        state: info.state,
        due_ms: info.due_ms,
        retries: info.retries,
        last_error: info.last_error,
        history: info.history,
    }
}

/// A release of the task of `case` by the release script.
async fn lua_release(
    conn: &mut MultiplexedConnection,
    pk: &PartitionKeys,
    case: &Case,
    h: &Header<'_>,
) -> Outcome {
    seed(conn, pk, case, NOW + 10_000).await;
    let mut inv = h.invoke(&SCRIPTS.release, pk);
    inv.arg("t")
        .arg(case.receipt.unwrap_or(""))
        .arg(case.delay.map(|d| d.to_string()).unwrap_or_default())
        .arg(if case.error.is_some() { "1" } else { "0" })
        .arg(case.error.unwrap_or(""))
        .arg("");
    let reply = Reply::parse(inv.invoke_async(conn).await.unwrap(), "release").unwrap();
    read_outcome(conn, pk, reply).await
}

/// The expiry of the task's ttr, found by the promoter's tick script.
async fn lua_ttr_expiry(
    conn: &mut MultiplexedConnection,
    pk: &PartitionKeys,
    case: &Case,
    h: &Header<'_>,
) -> Outcome {
    seed(conn, pk, case, NOW).await;
    let mut inv = h.invoke(&SCRIPTS.tick, pk);
    inv.key(pk.fence()).arg(1).arg(100);
    let reply = Reply::parse(inv.invoke_async(conn).await.unwrap(), "tick").unwrap();
    read_outcome(conn, pk, reply).await
}

#[tokio::test]
async fn the_scripts_decide_a_failure_as_the_core_does() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys = Keys::new("dq");
    let cases = cases();
    let mut ttr_cases = 0;
    for (i, case) in cases.iter().enumerate() {
        let topic = format!("case{i}");
        let h = Header {
            now: NOW,
            upper: NOW,
            channel: "dq:events",
            instance: "test",
            topic: &topic,
            partition: 0,
            retention_ms: 60_000,
        };
        let pk = keys.partition(&topic, 0);
        let lua = lua_release(&mut conn, &pk, case, &h).await;
        assert_eq!(
            lua,
            core_outcome(case, "released"),
            "release, case {i}: {case:?}"
        );
        // A ttr expiry is the same failure without a consumer: no receipt, delay or error.
        let consumer = case.receipt.is_some() || case.delay.is_some() || case.error.is_some();
        if case.state == State::Active && !consumer {
            let pk = keys.partition(&topic, 1);
            let h = Header { partition: 1, ..h };
            let lua = lua_ttr_expiry(&mut conn, &pk, case, &h).await;
            assert_eq!(
                lua,
                core_outcome(case, "ttr_expired"),
                "ttr, case {i}: {case:?}"
            );
            ttr_cases += 1;
        }
    }
    // Every kind of outcome was reached, both ways.
    let outcomes: Vec<Outcome> = cases.iter().map(|c| core_outcome(c, "released")).collect();
    for state in [State::Ready, State::Delayed, State::Dead] {
        assert!(
            outcomes
                .iter()
                .any(|o| matches!(o, Outcome::Moved { state: s, .. } if *s == state)),
            "no case ends {state:?}"
        );
    }
    assert!(
        outcomes
            .iter()
            .any(|o| matches!(o, Outcome::Refused(Refusal::StaleReceipt)))
    );
    assert!(ttr_cases > 20, "{ttr_cases} ttr cases");
}
