//! The job id counter ([`delayq::JobIds`]).
//!
//! Each case takes a [`Harness`] on a fresh backend and panics when the backend breaks the
//! rule.

use crate::Harness;

/// The job id counter starts at 1 on a fresh deployment and never repeats.
pub async fn next_job_id_starts_at_one(h: &Harness) {
    let mut got = Vec::new();
    for _ in 0..5 {
        got.push(h.queue.next_job_id().await.unwrap());
    }
    assert_eq!(got, [1, 2, 3, 4, 5]);
    let q = h.queue.clone();
    let handles: Vec<_> = (0..8)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move { q.next_job_id().await.unwrap() })
        })
        .collect();
    let mut concurrent = Vec::new();
    for handle in handles {
        concurrent.push(handle.await.unwrap());
    }
    concurrent.sort_unstable();
    assert_eq!(
        concurrent,
        (6..=13).collect::<Vec<u64>>(),
        "no number twice"
    );
}
