//! Concurrent consumers of one topic on one instance, for the backends that serve them in
//! rounds (`delayq::storage::coalesce`: Redis runs one `consume` script a round, PostgreSQL
//! one transaction). Not part of [`crate::suite!`]: what a round is, and how to count them, is
//! the backend's; its test passes a counter.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use delayq::{Delivery, ErrorKind, Held, NewTask, PopOptions, Queue, State};
use futures_util::future::join_all;

/// Runs 100 concurrent pops, then 100 concurrent acks-and-next (every tenth with a stale
/// receipt), then concurrent finishes (each task taken last twice, and the stale ones' tasks
/// with their right receipts) on topic `jobs` of `q`, which must be empty. `rounds` reads how
/// many rounds the backend ran so far (`what` names them in messages, "scripts"); each batch
/// of calls must run fewer rounds than calls. Every caller must get its own outcome as if the
/// calls ran one after the other: no task handed out twice, a stale receipt refused and its
/// ack-and-next popping nothing, a finish of a task finished already refused, every task
/// finished once, and the counts adding up.
pub async fn share_rounds_and_keep_their_own_outcomes<R, F>(q: &Queue, what: &str, rounds: R)
where
    R: Fn() -> F,
    F: Future<Output = u64>,
{
    let n = 100;
    let tasks: Vec<NewTask> = (0..3 * n)
        .map(|k| NewTask::new("jobs", format!("j-{k}")).ttr_ms(600_000))
        .collect();
    q.add_batch(tasks).await.unwrap();
    let mut seen = HashSet::new();

    // n concurrent pops of one task each.
    let pops: Vec<_> = (0..n)
        .map(|_| q.pop("jobs", PopOptions::default()))
        .collect();
    let mut held = Vec::new();
    for got in counted(&rounds, what, pops).await {
        let got = got.unwrap();
        assert_eq!(got.len(), 1, "a pop came back empty with tasks ready");
        let d = got.into_iter().next().unwrap();
        assert!(seen.insert(d.id.clone()), "{} handed out twice", d.id);
        held.push(d);
    }

    // n concurrent acks-and-next: every tenth with a stale receipt (refused, pops nothing),
    // the rest each finish their task and take a new one.
    let stale = |k: usize| k.is_multiple_of(10);
    let calls: Vec<_> = held
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let receipt = if stale(k) {
                "ffffffffffffffff"
            } else {
                d.receipt.as_str()
            };
            let held = Held {
                topic: "jobs",
                id: &d.id,
                receipt: Some(receipt),
            };
            q.finish_then_pop(held, "jobs", PopOptions::default())
        })
        .collect();
    let mut next: Vec<Delivery> = Vec::new();
    for (k, outcome) in counted(&rounds, what, calls).await.into_iter().enumerate() {
        let id = &held[k].id;
        if stale(k) {
            let err = outcome.expect_err("a stale receipt is refused");
            assert_eq!(err.kind(), ErrorKind::Conflict, "{id}: {err}");
            assert_eq!(q.get("jobs", id).await.unwrap().state, State::Active);
            continue;
        }
        let got = outcome.unwrap().unwrap();
        assert_eq!(
            got.len(),
            1,
            "{id}'s ack-and-next took nothing with tasks ready"
        );
        assert!(
            seen.insert(got[0].id.clone()),
            "{} handed out twice",
            got[0].id
        );
        assert_eq!(q.get("jobs", id).await.unwrap().state, State::Finished);
        next.extend(got);
    }
    // The refused calls popped nothing: what is ACTIVE is what the callers hold.
    assert_eq!(q.stats("jobs").await.unwrap().active, n as u64);

    // Concurrent finishes: each task taken last, twice (one is done, the other finds it
    // FINISHED), and the stale ones' tasks with their right receipts.
    let twice = next
        .iter()
        .chain(&next)
        .map(|d| (d.id.as_str(), d.receipt.as_str()));
    let stale_held = held
        .iter()
        .enumerate()
        .filter(|&(k, _)| stale(k))
        .map(|(_, d)| (d.id.as_str(), d.receipt.as_str()));
    let finishes: Vec<(&str, &str)> = twice.chain(stale_held).collect();
    let calls: Vec<_> = finishes
        .iter()
        .map(|&(id, receipt)| q.finish("jobs", id, Some(receipt)))
        .collect();
    let outcomes = counted(&rounds, what, calls).await;
    let mut done: HashMap<&str, usize> = HashMap::new();
    for (&(id, _), outcome) in finishes.iter().zip(&outcomes) {
        match outcome {
            Ok(()) => *done.entry(id).or_insert(0) += 1,
            Err(e) => assert_eq!(e.conflicting_state(), Some(State::Finished), "{id}: {e}"),
        }
    }
    assert_eq!(done.len(), next.len() + n / 10, "every task finished");
    assert!(
        done.values().all(|&times| times == 1),
        "a task finished twice: {done:?}"
    );
    let stats = q.stats("jobs").await.unwrap();
    let finished = (n - n / 10) + next.len() + n / 10;
    assert_eq!(
        (stats.finished, stats.active, stats.ready),
        (finished as u64, 0, (3 * n - finished) as u64)
    );
}

/// Runs the calls `work` at once: their outcomes, in order, once `rounds` says they ran
/// fewer rounds than calls.
async fn counted<R, F, W>(rounds: &R, what: &str, work: Vec<W>) -> Vec<W::Output>
where
    R: Fn() -> F,
    F: Future<Output = u64>,
    W: Future,
{
    let calls = work.len();
    let before = rounds().await;
    let out = join_all(work).await;
    let ran = rounds().await - before;
    eprintln!("{calls} concurrent calls ran {ran} {what}");
    assert!(
        ran < calls as u64,
        "{calls} concurrent calls ran {ran} {what}"
    );
    out
}
