//! What the cases of the suite share: the topic they use, task builders and waits.

use delayq::{BuryOptions, Delivery, ErrorKind, NewTask, Refusal};

use crate::Harness;

/// The topic most cases use.
pub(crate) const T: &str = "orders";

pub(crate) fn task(id: &str, delay_ms: u64) -> NewTask {
    NewTask::new(T, id)
        .body(format!("body of {id}"))
        .delay_ms(delay_ms)
}

pub(crate) fn kind<X: std::fmt::Debug>(r: delayq::Result<X>) -> ErrorKind {
    r.expect_err("expected an error").kind()
}

pub(crate) fn ids(got: &[Delivery]) -> Vec<String> {
    got.iter().map(|d| d.id.clone()).collect()
}

/// Asserts `result` is a conflict for the reason `want`.
pub(crate) fn assert_refused<X: std::fmt::Debug>(result: delayq::Result<X>, want: Refusal) {
    match result {
        Err(delayq::Error::Conflict { refusal, .. }) => assert_eq!(refusal, want),
        other => panic!("expected a conflict ({want}), got {other:?}"),
    }
}

/// Waits until `n` tasks of `topic` are READY.
pub(crate) async fn wait_ready(h: &Harness, topic: &str, n: u64) {
    h.eventually(&format!("{n} ready in {topic}"), || async {
        h.queue.stats(topic).await.unwrap().ready == n
    })
    .await;
}

/// Pops one task of `T` and buries it with its receipt.
pub(crate) async fn pop_and_bury(h: &Harness, id: &str) {
    let d = h.pop_ready(T).await;
    assert_eq!(d.id, id);
    h.queue
        .bury(T, id, BuryOptions::default().receipt(d.receipt))
        .await
        .unwrap();
}

/// The tasks a spawned pop returned, waiting for it at most [`crate::EVENTUALLY`].
pub(crate) async fn returned(
    waiter: tokio::task::JoinHandle<delayq::Result<Vec<Delivery>>>,
) -> Vec<Delivery> {
    tokio::time::timeout(crate::EVENTUALLY, waiter)
        .await
        .expect("the pop returned")
        .expect("the pop did not panic")
        .expect("the pop succeeded")
}

/// Waits until a long-poll is parked.
pub(crate) async fn wait_parked(h: &Harness, n: usize) {
    h.eventually(&format!("{n} pop(s) parked"), || async {
        h.queue.context().waiters.parked() == n
    })
    .await;
}
