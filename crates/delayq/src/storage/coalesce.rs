//! Calls that wait to share one round of storage work: a storage backend's concurrent calls on
//! one key (Redis: adds, and consumers' finishes and pops, of one partition, one script a
//! round; PostgreSQL: consumers' calls of one topic, one transaction a round).
//!
//! A call joins the queue of its key. The call that makes a queue of one starts the queue's
//! flusher, a task of its own (a caller that goes away, a client hanging up, must not take the
//! other callers' round with it). The flusher takes the calls at the front of the queue, as
//! many as one round may carry ([`Coalescer::round`]), serves them together, answers each
//! caller from that round's outcome ([`Coalescer::answer`]) and goes on while calls keep
//! arriving. So fifty clients doing one thing each cost storage a few rounds instead of fifty:
//! per call, a round's fixed cost (a script's call and checks, a transaction's commit and
//! fsync) was most of what a backend spent.
//!
//! The calls of a round stay at the front of the queue until they are answered, and the
//! flusher removes the queue in the same critical section that finds it empty: so a queue
//! exists exactly while its flusher runs, and the call that makes a queue of one is the only
//! one that starts a flusher. Calls are served in the order they joined, and nothing is
//! answered earlier than before: only from the outcome of the round that served the call.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::{Error, Outcome, Result};

/// The calls waiting to share a round, by key. `K` is the key (a partition, a topic), `C`
/// what a call asks, `R` what it gets.
#[derive(Debug)]
pub struct Coalescer<K, C, R> {
    queues: Mutex<HashMap<K, Vec<Waiting<C, R>>>>,
}

impl<K, C, R> Default for Coalescer<K, C, R> {
    fn default() -> Self {
        Coalescer {
            queues: Mutex::new(HashMap::new()),
        }
    }
}

/// One call and where its answer goes; `call` is taken when its round starts.
#[derive(Debug)]
struct Waiting<C, R> {
    call: Option<C>,
    reply: oneshot::Sender<Result<R>>,
}

/// The cause of the error a call gets when its flusher stopped without answering it.
#[derive(Debug, thiserror::Error)]
#[error("the task that serves these calls in rounds stopped before answering")]
pub struct FlusherStopped;

impl<K: Eq + Hash + Clone, C, R> Coalescer<K, C, R> {
    /// Queues `call` for `key` and waits for its answer. When the queue was empty, runs
    /// `start(key)`, which must spawn the flusher. `what` names the work in the error of a
    /// flusher that stopped without answering (its outcome is unknown: the round may have
    /// run).
    pub async fn call(&self, key: K, call: C, what: &str, start: impl FnOnce(K)) -> Result<R> {
        let (reply, answer) = oneshot::channel();
        let first = {
            let mut queues = self.queues.lock();
            let queue = queues.entry(key.clone()).or_default();
            queue.push(Waiting {
                call: Some(call),
                reply,
            });
            queue.len() == 1
        };
        if first {
            start(key);
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::Storage {
                op: what.to_owned(),
                outcome: Outcome::Unknown,
                source: Arc::new(FlusherStopped),
            })
        })
    }

    /// The calls of `key`'s next round: from the front of its queue while `fits` accepts
    /// each one after those before it (the first goes whatever `fits` says: a call is never
    /// split). `None` when the queue is gone.
    pub fn round(&self, key: &K, mut fits: impl FnMut(&C) -> bool) -> Option<Vec<C>> {
        let mut queues = self.queues.lock();
        let queue = queues.get_mut(key)?;
        let mut n = 0;
        for w in queue.iter() {
            let Some(call) = w.call.as_ref() else { break };
            if !fits(call) && n > 0 {
                break;
            }
            n += 1;
        }
        Some(
            queue
                .iter_mut()
                .take(n)
                .filter_map(|w| w.call.take())
                .collect(),
        )
    }

    /// Answers the calls of the round at the front of `key`'s queue, one answer each, in
    /// order. Returns whether the queue is then empty, and so gone: the flusher stops.
    pub fn answer(&self, key: &K, answers: Vec<Result<R>>) -> bool {
        let (answered, done) = {
            let mut queues = self.queues.lock();
            match queues.get_mut(key) {
                Some(queue) => {
                    let answered: Vec<Waiting<C, R>> =
                        queue.drain(..answers.len().min(queue.len())).collect();
                    let done = queue.is_empty();
                    if done {
                        queues.remove(key);
                    }
                    (answered, done)
                }
                None => (Vec::new(), true),
            }
        };
        for (w, a) in answered.into_iter().zip(answers) {
            let _ = w.reply.send(a);
        }
        done
    }

    /// Serves `key`'s queue until it is empty, the body of a flusher: each round's calls
    /// (chosen by the `fits` that `fits_round` makes afresh for each round) go to `serve`,
    /// whose answers (one a call, in order) go back to their callers; an error of the whole
    /// round goes to each of its calls. (`serve` returns a future rather than being an
    /// async closure: the future of a flusher must be `Send`, which an async closure's
    /// borrows do not let the compiler prove.)
    pub async fn serve<F, S>(
        &self,
        key: &K,
        mut fits_round: impl FnMut() -> F,
        mut serve: impl FnMut(Vec<C>) -> S,
    ) where
        F: FnMut(&C) -> bool,
        S: Future<Output = Result<Vec<Result<R>>>>,
    {
        loop {
            let Some(round) = self.round(key, fits_round()) else {
                return;
            };
            let n = round.len();
            let answers = match serve(round).await {
                Ok(answers) => answers,
                Err(e) => (0..n).map(|_| Err(e.clone())).collect(),
            };
            if self.answer(key, answers) {
                return;
            }
        }
    }
}

/// A consumer's call that a backend serves in rounds with others of the same topic (or
/// partition): a finish (`held`), a pop (`max` > 0), or both (ack and take the next). A
/// round serves its finishes first, in the order the calls came, then its pops in that
/// order: an order in which the concurrent calls could have come.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerCall {
    /// The task to finish and its receipt (`None`: any holder).
    pub held: Option<(String, Option<String>)>,
    /// How many tasks to pop (0: none).
    pub max: usize,
    /// Whether the popped tasks are finished at once.
    pub auto_finish: bool,
}

impl ConsumerCall {
    /// A pop of up to `max` tasks.
    pub fn pop(max: usize, auto_finish: bool) -> Self {
        ConsumerCall {
            held: None,
            max,
            auto_finish,
        }
    }

    /// A finish of task `id` with `receipt`, then (`max` > 0) a pop.
    pub fn finish_then_pop(id: &str, receipt: Option<&str>, max: usize, auto_finish: bool) -> Self {
        ConsumerCall {
            held: Some((id.to_owned(), receipt.map(str::to_owned))),
            max,
            auto_finish,
        }
    }

    /// A finish of task `id` with `receipt`, popping nothing.
    pub fn finish(id: &str, receipt: Option<&str>) -> Self {
        ConsumerCall::finish_then_pop(id, receipt, 0, false)
    }

    /// The `fits` of one round ([`Coalescer::round`]): calls while they hand out at most
    /// `tasks` tasks in all and number at most `calls`.
    pub fn fits_round(tasks: usize, calls: usize) -> impl FnMut(&ConsumerCall) -> bool {
        let (mut t, mut n) = (0, 0);
        move |c| {
            t += c.max;
            n += 1;
            t <= tasks && n <= calls
        }
    }

    /// What a round of `calls` on `topic` does, for its errors: a lone call's own words, else
    /// how many calls shared one `round` ("script", "transaction").
    pub fn describe(topic: &str, calls: &[ConsumerCall], round: &str) -> String {
        match calls {
            [
                ConsumerCall {
                    held: Some((id, _)),
                    max: 0,
                    ..
                },
            ] => format!("finishing task {id:?} of topic {topic:?}"),
            [
                ConsumerCall {
                    held: Some((id, _)),
                    ..
                },
            ] => format!("finishing task {id:?} of topic {topic:?} and popping"),
            [ConsumerCall { held: None, .. }] => format!("popping tasks of topic {topic:?}"),
            _ => format!(
                "finishing and popping tasks of topic {topic:?} ({} consumers' calls in one \
                 {round})",
                calls.len()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot() -> (String, u32) {
        ("t".to_owned(), 0)
    }

    type Of<C, R> = Coalescer<(String, u32), C, R>;

    #[tokio::test(flavor = "current_thread")]
    async fn calls_are_served_in_rounds_in_order_and_the_queue_goes_with_the_last() {
        let c: std::sync::Arc<Of<usize, usize>> = Default::default();
        let started = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut callers = Vec::new();
        for i in 0..5 {
            let (c, started) = (c.clone(), started.clone());
            callers.push(tokio::spawn(async move {
                c.call(slot(), i, "testing", |_| {
                    started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                })
                .await
            }));
        }
        // Let every caller queue up.
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 1);
        // Rounds of at most 3 by weight: [0, 1, 2] (0 + 1 + 2 = 3), then [3] alone (3 > 3
        // with 3 + 4), then [4].
        let mut rounds = Vec::new();
        loop {
            let mut sum = 0;
            let round = c
                .round(&slot(), |&x| {
                    sum += x;
                    sum <= 3
                })
                .expect("the queue lives while calls wait");
            let answers = round.iter().map(|x| Ok(x * 10)).collect();
            rounds.push(round);
            if c.answer(&slot(), answers) {
                break;
            }
        }
        assert_eq!(rounds, vec![vec![0, 1, 2], vec![3], vec![4]]);
        assert!(c.round(&slot(), |_| true).is_none());
        for (i, caller) in callers.into_iter().enumerate() {
            assert_eq!(caller.await.unwrap().unwrap(), i * 10);
        }
        // A new call after the queue went starts a new flusher.
        let c2 = c.clone();
        let again = tokio::spawn(async move { c2.call(slot(), 7, "testing", |_| {}).await });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let round = c.round(&slot(), |_| true).unwrap();
        assert!(c.answer(&slot(), vec![Ok(round[0] + 1)]));
        assert_eq!(again.await.unwrap().unwrap(), 8);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_call_whose_round_is_dropped_unanswered_gets_an_error() {
        let c: std::sync::Arc<Of<u8, u8>> = Default::default();
        let c2 = c.clone();
        let caller = tokio::spawn(async move { c2.call(slot(), 1, "testing", |_| {}).await });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        let _ = c.round(&slot(), |_| true);
        // The flusher "stops": the queue is dropped with the caller's sender in it.
        c.queues.lock().clear();
        let err = caller.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("stopped"), "{err}");
        assert!(err.is_outcome_unknown(), "the round may have run: {err}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn serve_answers_each_round_and_fails_every_call_of_a_failed_round() {
        let c: std::sync::Arc<Of<usize, usize>> = Default::default();
        let mut callers = Vec::new();
        for i in 0..5 {
            let c = c.clone();
            callers.push(tokio::spawn(async move {
                c.call(slot(), i, "testing", |_| {}).await
            }));
        }
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        // Rounds of two: [0, 1] fails, [2, 3] and [4] are answered call by call.
        let fits = || {
            let mut n = 0;
            move |_: &usize| {
                n += 1;
                n <= 2
            }
        };
        let rounds = std::sync::Mutex::new(Vec::new());
        c.serve(&slot(), fits, |round: Vec<usize>| {
            rounds.lock().unwrap().push(round.clone());
            async move {
                if round.contains(&0) {
                    return Err(Error::ShuttingDown);
                }
                Ok(round.iter().map(|x| Ok(x * 10)).collect())
            }
        })
        .await;
        assert_eq!(
            rounds.into_inner().unwrap(),
            vec![vec![0, 1], vec![2, 3], vec![4]]
        );
        let mut answers = Vec::new();
        for caller in callers {
            answers.push(caller.await.unwrap().map_err(|e| e.kind()));
        }
        let failed = Err(crate::ErrorKind::ShuttingDown);
        assert_eq!(answers, vec![failed, failed, Ok(20), Ok(30), Ok(40)]);
        assert!(c.round(&slot(), |_| true).is_none(), "the queue is gone");
    }

    #[test]
    fn errors_name_a_lone_consumer_call_as_it_would_be_named_alone() {
        let describe = |calls: &[ConsumerCall]| ConsumerCall::describe("t", calls, "script");
        assert_eq!(
            describe(&[ConsumerCall::finish("x", None)]),
            "finishing task \"x\" of topic \"t\""
        );
        assert_eq!(
            describe(&[ConsumerCall::finish_then_pop("x", None, 1, false)]),
            "finishing task \"x\" of topic \"t\" and popping"
        );
        assert_eq!(
            describe(&[ConsumerCall::pop(1, false)]),
            "popping tasks of topic \"t\""
        );
        let two = describe(&[ConsumerCall::pop(1, false), ConsumerCall::finish("x", None)]);
        assert!(two.contains("2 consumers' calls in one script"), "{two}");
    }

    #[test]
    fn a_consumer_round_is_bounded_by_its_tasks_and_its_calls() {
        let take = |calls: &[ConsumerCall], tasks, n| {
            let mut fits = ConsumerCall::fits_round(tasks, n);
            calls.iter().take_while(|c| fits(c)).count()
        };
        let pops: Vec<ConsumerCall> = (0..5).map(|_| ConsumerCall::pop(3, false)).collect();
        assert_eq!(take(&pops, 9, 100), 3);
        assert_eq!(take(&pops, 100, 2), 2);
        // Finishes hand out nothing: only the count of calls bounds them.
        let finishes: Vec<ConsumerCall> = (0..5).map(|_| ConsumerCall::finish("x", None)).collect();
        assert_eq!(take(&finishes, 0, 4), 4);
    }
}
