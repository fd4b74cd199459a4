//! A table of small histories, each valid or breaking exactly one promise, so that every
//! check is shown able to fail (and not to fail on what the server may do).

use super::*;

const T: &str = "q";

fn key() -> TaskKey {
    TaskKey::new(T, "t")
}

/// An event of client 0 from `inv` to `done` (milliseconds).
fn ev(op: Op, inv: u64, done: u64, outcome: Outcome) -> Event {
    Event {
        client: 0,
        op,
        invoked_us: inv * 1000,
        completed_us: done * 1000,
        outcome,
    }
}

fn add(delay_ms: u64, inv: u64, done: u64) -> Event {
    ev(
        Op::Add {
            key: key(),
            delay_ms: Some(delay_ms),
            due_ms: None,
            ttr_ms: Some(1000),
        },
        inv,
        done,
        Outcome::Ok(Answer::Added { existed: false }),
    )
}

/// An add (no ttr given) with this outcome.
fn add_then(delay_ms: u64, inv: u64, done: u64, outcome: Outcome) -> Event {
    ev(
        Op::Add {
            key: key(),
            delay_ms: Some(delay_ms),
            due_ms: None,
            ttr_ms: None,
        },
        inv,
        done,
        outcome,
    )
}

fn pop(inv: u64, done: u64, due_ms: u64, receipt: &str) -> Event {
    ev(
        Op::Pop { topic: T.into() },
        inv,
        done,
        Outcome::Ok(Answer::Delivered(vec![Delivery {
            key: key(),
            due_ms,
            ttr_ms: 1000,
            receipt: receipt.into(),
            retries: 0,
        }])),
    )
}

fn with_receipt(kind: &str, receipt: &str, inv: u64, done: u64, outcome: Outcome) -> Event {
    let (key, receipt) = (key(), Some(receipt.to_owned()));
    let op = match kind {
        "finish" => Op::Finish { key, receipt },
        "touch" => Op::Touch { key, receipt },
        "release" => Op::Release {
            key,
            receipt,
            delay_ms: Some(500),
        },
        _ => unreachable!("{kind}"),
    };
    ev(op, inv, done, outcome)
}

fn on_task(kind: &str, inv: u64, done: u64, outcome: Outcome) -> Event {
    let key = key();
    let op = match kind {
        "cancel" => Op::Cancel { key },
        "delete" => Op::Delete { key },
        "get" => Op::Get { key },
        _ => unreachable!("{kind}"),
    };
    ev(op, inv, done, outcome)
}

fn ok() -> Outcome {
    Outcome::Ok(Answer::Done)
}

fn unknown() -> Outcome {
    Outcome::Unknown("timed out".into())
}

fn found(state: TaskState) -> Outcome {
    Outcome::Ok(Answer::Found { state })
}

fn missing() -> Outcome {
    Outcome::Ok(Answer::Missing)
}

#[test]
fn each_check_fails_on_its_violation_and_only_there() {
    use Invariant::*;
    let settled = CheckOptions {
        retention_ms: 10_000,
        require_settled: true,
        clock_slack_ms: 0,
    };
    let loose = CheckOptions {
        retention_ms: 10_000,
        require_settled: false,
        clock_slack_ms: 0,
    };
    let slack = CheckOptions {
        clock_slack_ms: 1,
        ..loose
    };
    let table: Vec<(&str, Vec<Event>, CheckOptions, Vec<Invariant>)> = vec![
        (
            "add, pop at due, finish, found finished",
            vec![
                add(100, 1000, 1001),
                pop(1050, 1100, 1100, "r1"),
                with_receipt("finish", "r1", 1200, 1201, ok()),
                on_task("get", 1300, 1301, found(TaskState::Finished)),
            ],
            settled,
            vec![],
        ),
        (
            "an acknowledged add missing at a later get",
            vec![add(100, 1000, 1001), on_task("get", 1300, 1301, missing())],
            loose,
            vec![AckedAddLost],
        ),
        (
            "an add whose outcome is unknown may be missing",
            vec![
                add_then(100, 1000, 1001, unknown()),
                on_task("get", 1300, 1301, missing()),
            ],
            loose,
            vec![],
        ),
        (
            "missing after a delete",
            vec![
                add(100, 1000, 1001),
                on_task("delete", 1100, 1101, ok()),
                on_task("get", 1300, 1301, missing()),
            ],
            loose,
            vec![],
        ),
        (
            "missing after a cancel and the retention",
            vec![
                add(100, 1000, 1001),
                on_task("cancel", 1100, 1101, ok()),
                on_task("get", 11_100, 11_101, missing()),
            ],
            loose,
            vec![],
        ),
        (
            "missing after a cancel, before the retention ran out",
            vec![
                add(100, 1000, 1001),
                on_task("cancel", 1100, 1101, ok()),
                on_task("get", 5000, 5001, missing()),
            ],
            loose,
            vec![AckedAddLost],
        ),
        (
            "an add that failed for certain, yet found",
            vec![
                add_then(100, 1000, 1001, Outcome::Failed("409 exists".into())),
                on_task("get", 1300, 1301, found(TaskState::Delayed)),
            ],
            loose,
            vec![FailedButApplied],
        ),
        (
            "an add that failed for certain, yet delivered",
            vec![
                add_then(0, 1000, 1001, Outcome::Failed("409 exists".into())),
                pop(1050, 1100, 1000, "r1"),
            ],
            loose,
            vec![FailedButApplied],
        ),
        (
            "a failed add, then an acknowledged one, found",
            vec![
                add_then(100, 900, 901, Outcome::Failed("503 unavailable".into())),
                add(100, 1000, 1001),
                on_task("get", 1300, 1301, found(TaskState::Delayed)),
            ],
            loose,
            vec![],
        ),
        (
            "delivered before its own due_ms",
            vec![add(0, 1000, 1001), pop(1050, 1099, 1100, "r1")],
            loose,
            vec![Early],
        ),
        (
            "delivered before the add's invocation plus its delay (due_ms reported early)",
            vec![add(100, 1000, 1001), pop(1050, 1080, 1050, "r1")],
            loose,
            vec![Early],
        ),
        (
            "delivered before a release's invocation plus its delay",
            vec![
                add(100, 1000, 1001),
                pop(1050, 1100, 1100, "r1"),
                with_receipt("release", "r1", 1200, 1201, ok()),
                pop(1300, 1310, 1300, "r2"),
            ],
            loose,
            vec![Early],
        ),
        (
            "released out of retries (dead), requeued, delivered before the release's delay",
            vec![
                add(100, 1000, 1001),
                pop(1050, 1100, 1100, "r1"),
                with_receipt("release", "r1", 1200, 1201, ok()),
                ev(Op::Requeue { key: key() }, 1250, 1251, ok()),
                pop(1300, 1310, 1300, "r2"),
            ],
            loose,
            vec![],
        ),
        (
            "redelivered after release's delay",
            vec![
                add(100, 1000, 1001),
                pop(1050, 1100, 1100, "r1"),
                with_receipt("release", "r1", 1200, 1201, ok()),
                pop(1600, 1710, 1700, "r2"),
            ],
            loose,
            vec![],
        ),
        (
            "a second holder inside the first ttr",
            vec![
                add(0, 1000, 1001),
                pop(1100, 1101, 1000, "r1"),
                pop(1500, 1501, 1000, "r2"),
            ],
            loose,
            vec![SecondHolder],
        ),
        (
            "a second holder 1 ms before the first ttr ran out",
            vec![
                add(0, 1000, 1001),
                pop(1100, 1101, 1000, "r1"),
                pop(2099, 2099, 1000, "r2"),
            ],
            loose,
            vec![SecondHolder],
        ),
        (
            "the same, with a server clock that may lag by 1 ms",
            vec![
                add(0, 1000, 1001),
                pop(1100, 1101, 1000, "r1"),
                pop(2099, 2099, 1000, "r2"),
            ],
            slack,
            vec![],
        ),
        (
            "a second holder after the first ttr ran out",
            vec![
                add(0, 1000, 1001),
                pop(1100, 1101, 1000, "r1"),
                pop(2100, 2101, 1000, "r2"),
            ],
            loose,
            vec![],
        ),
        (
            "a second holder after an unknown release",
            vec![
                add(0, 1000, 1001),
                pop(1100, 1101, 1000, "r1"),
                with_receipt("release", "r1", 1200, 1400, unknown()),
                pop(1500, 1501, 1000, "r2"),
            ],
            loose,
            vec![],
        ),
        (
            "a second holder inside a ttr restarted by a touch",
            vec![
                add(0, 1000, 1001),
                pop(1100, 1101, 1000, "r1"),
                with_receipt("touch", "r1", 1900, 1901, ok()),
                pop(2200, 2201, 1000, "r2"),
            ],
            loose,
            vec![SecondHolder],
        ),
        (
            "delivered by a pop invoked after an acknowledged cancel",
            vec![
                add(0, 1000, 1001),
                on_task("cancel", 1050, 1051, ok()),
                pop(1100, 1101, 1000, "r1"),
            ],
            loose,
            vec![DeliveredAfterFinal],
        ),
        (
            "delivered after a finish (which gave r1 back: no second holder)",
            vec![
                add(0, 1000, 1001),
                pop(1100, 1101, 1000, "r1"),
                with_receipt("finish", "r1", 1200, 1201, ok()),
                pop(1300, 1301, 1000, "r2"),
            ],
            loose,
            vec![DeliveredAfterFinal],
        ),
        (
            "delivered after a cancel whose outcome is unknown",
            vec![
                add(0, 1000, 1001),
                on_task("cancel", 1050, 1051, unknown()),
                pop(1100, 1101, 1000, "r1"),
            ],
            loose,
            vec![],
        ),
        (
            "a pop concurrent with the cancel",
            vec![
                add(0, 1000, 1001),
                pop(1040, 1060, 1000, "r1"),
                on_task("cancel", 1050, 1051, ok()),
            ],
            loose,
            vec![],
        ),
        (
            "still ready at the last get",
            vec![
                add(0, 1000, 1001),
                on_task("get", 1300, 1301, found(TaskState::Ready)),
            ],
            settled,
            vec![NotSettled],
        ),
        (
            "dead at the last get",
            vec![
                add(0, 1000, 1001),
                on_task("get", 1300, 1301, found(TaskState::Active)),
                on_task("get", 1400, 1401, found(TaskState::Dead)),
            ],
            settled,
            vec![],
        ),
    ];
    for (name, events, options, expected) in table {
        let history = History::new(events);
        let found: Vec<Invariant> = history
            .check(&options)
            .iter()
            .map(|v| v.invariant)
            .collect();
        assert_eq!(found, expected, "{name}:\n{:#?}", history.check(&options));
    }
}

#[test]
fn recorder_keeps_calls_in_flight_unknown() {
    let rec = Recorder::new();
    let done = rec.invoke(1, Op::Get { key: key() });
    let _pending = rec.invoke(2, Op::Cancel { key: key() });
    rec.complete(done, missing());
    let h = rec.history();
    assert_eq!(h.events.len(), 2);
    assert_eq!(h.events[0].outcome, missing());
    assert!(h.events[0].completed_us >= h.events[0].invoked_us);
    assert_eq!(h.events[1].completed_us, IN_FLIGHT);
    assert!(matches!(h.events[1].outcome, Outcome::Unknown(_)));
    let counts = h.counts();
    assert_eq!((counts.total, counts.ok, counts.unknown), (2, 1, 1));
}

#[test]
fn a_violation_shows_its_events() {
    let history = History::new(vec![
        add(100, 1000, 1001),
        on_task("get", 1300, 1301, missing()),
    ]);
    let text = history.check(&CheckOptions::default())[0].to_string();
    assert!(text.starts_with("AckedAddLost on q/t"), "{text}");
    assert!(text.contains("add q/t delay_ms=Some(100)"), "{text}");
    assert!(
        text.contains("[1300.000 .. 1301.000] get q/t -> ok missing"),
        "{text}"
    );
}
