//! Adding a batch of tasks.
//!
//! The tasks are grouped by (topic, partition), keeping their order inside each group, and
//! each group is cut into chunks of at most [`ADD_CHUNK`] tasks and [`ADD_CHUNK_BYTES`] of
//! body, so Redis serves other clients between them. Each chunk is one `add` script (the
//! records are packed here by [`Record::encode`]; the script decides duplicates atomically),
//! and all chunks go in one pipeline. Each script is atomic; a connection that breaks in the
//! middle of the pipeline fails the call while some chunks may have been applied.
//!
//! # Concurrent adds share a script
//!
//! A call whose tasks all go to one partition (a single add over HTTP, the usual case) joins
//! that partition's queue of adds ([`delayq::storage::coalesce`]): everything queued (up to a chunk's
//! limits) runs as **one** add script, and each caller gets its own results. Nothing is
//! acknowledged earlier than before: a caller gets its results only from the reply of the
//! script that ran its tasks (and, with `wait_replicas`, after the `WAIT` that follows it).
//! Order is kept: calls run in the order they joined the queue, and inside one script in that
//! order too, so two adds of one id race exactly as they would one after the other.

use std::collections::HashMap;
use std::sync::Arc;

use delayq::storage::coalesce::Coalescer;
use delayq::{AddOutcome, AddResult, Error, Millis, OnDuplicate, Result, TaskSpec};

use super::{InstanceState, Slot};
use crate::error::{BackendError, maybe_applied};
use crate::keys::{PartitionKeys, partition_of};
use crate::record::Record;
use crate::scripts::{Reply, SCRIPTS, ScriptInvocation, int};

/// Most tasks one add script handles (bigger batches become several scripts in one pipeline,
/// so Redis serves other clients between them).
const ADD_CHUNK: usize = 500;
/// Most body bytes one add script carries.
const ADD_CHUNK_BYTES: usize = 1 << 20;

/// The tasks (indexes into the batch) one add script adds to one partition.
struct Chunk<'t> {
    topic: &'t str,
    partition: u32,
    members: Vec<usize>,
}

/// Concurrent adds to one partition, sharing a script: each call's tasks, and its results.
pub(crate) type Adds = Coalescer<Slot, Vec<TaskSpec>, Vec<AddResult>>;

const WHAT: &str = "adding tasks";

impl InstanceState {
    /// Adds a batch: one result per task, in order.
    pub(super) async fn add(self: &Arc<Self>, tasks: Vec<TaskSpec>) -> Result<Vec<AddResult>> {
        self.check_open()?;
        let mut parts_of: HashMap<&str, u32> = HashMap::new();
        for t in &tasks {
            if !parts_of.contains_key(t.topic.as_str()) {
                let n = self
                    .partitions(&t.topic, true)
                    .await?
                    .ok_or_else(|| BackendError::protocol(WHAT, "topic not registered"))?;
                parts_of.insert(&t.topic, n);
            }
        }
        let chunks = chunks(&tasks, &parts_of);
        if let [one] = chunks.as_slice() {
            let slot = (one.topic.to_owned(), one.partition);
            drop(chunks);
            return self.add_shared(slot, tasks).await;
        }
        self.add_chunks(&tasks, &chunks).await
    }

    /// Adds the tasks of a call that all go to the partition `slot`, in one script with the
    /// other calls queued for it.
    async fn add_shared(
        self: &Arc<Self>,
        slot: Slot,
        tasks: Vec<TaskSpec>,
    ) -> Result<Vec<AddResult>> {
        let state = Arc::clone(self);
        self.adds
            .call(slot, tasks, WHAT, move |slot| {
                tokio::spawn(state.flush_adds(slot));
            })
            .await
    }

    /// Runs the queued adds of one partition, a script per round (at most a chunk's tasks and
    /// bytes), until its queue is empty.
    async fn flush_adds(self: Arc<Self>, slot: Slot) {
        let fits = || {
            let (mut n, mut bytes) = (0, 0);
            move |tasks: &Vec<TaskSpec>| {
                n += tasks.len();
                bytes += tasks.iter().map(|t| t.body.len()).sum::<usize>();
                n <= ADD_CHUNK && bytes <= ADD_CHUNK_BYTES
            }
        };
        let (this, slot) = (&self, &slot);
        self.adds
            .serve(slot, fits, move |round| async move {
                let counts: Vec<usize> = round.iter().map(Vec::len).collect();
                let tasks: Vec<TaskSpec> = round.into_iter().flatten().collect();
                let chunk = Chunk {
                    topic: &slot.0,
                    partition: slot.1,
                    members: (0..tasks.len()).collect(),
                };
                let mut results = this
                    .add_chunks(&tasks, std::slice::from_ref(&chunk))
                    .await?
                    .into_iter();
                Ok(counts
                    .iter()
                    .map(|&k| Ok(results.by_ref().take(k).collect()))
                    .collect())
            })
            .await
    }

    /// Adds the tasks as `chunks` (indexes into `tasks`), one script each in one pipeline.
    async fn add_chunks(&self, tasks: &[TaskSpec], chunks: &[Chunk<'_>]) -> Result<Vec<AddResult>> {
        let now = self.ctx.clock.now_ms();
        let keys: Vec<PartitionKeys> = chunks
            .iter()
            .map(|c| self.keys.partition(c.topic, c.partition))
            .collect();
        let invs: Vec<ScriptInvocation<'_>> = chunks
            .iter()
            .zip(&keys)
            .map(|(c, pk)| self.add_invocation(pk, c, tasks, now))
            .collect();
        // With several scripts, some may have run before the one that failed.
        let mark = self.redis.mark();
        let replies = self.redis.run_scripts(WHAT, &invs).await.map_err(|e| {
            if invs.len() > 1 {
                maybe_applied(e)
            } else {
                Error::from(e)
            }
        })?;
        let mut results: Vec<Option<AddResult>> = (0..tasks.len()).map(|_| None).collect();
        for (c, result) in chunks.iter().zip(replies) {
            match result.and_then(|v| Reply::parse(v, WHAT)) {
                Ok(reply) => {
                    self.effects(c.topic, c.partition, &reply);
                    // A replaced ACTIVE task gives its permit back (topic-wide limits).
                    self.free_permits(c.topic, &reply.freed).await;
                    for (k, &i) in c.members.iter().enumerate() {
                        results[i] = Some(outcome(&tasks[i], reply.payload.get(k).and_then(int)));
                    }
                }
                Err(e) => {
                    let e = Error::from(e);
                    for &i in &c.members {
                        results[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        if results.iter().any(|r| matches!(r, Some(Ok(_)))) {
            let bases = keys.iter().map(|pk| pk.base.as_str());
            self.redis
                .replicated(WHAT, bases, mark)
                .await
                .map_err(maybe_applied)?;
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every task is in one chunk"))
            .collect())
    }

    /// The add script of one chunk: the count, then nine values per task (`add.lua`).
    fn add_invocation<'s>(
        &self,
        pk: &PartitionKeys,
        chunk: &Chunk<'_>,
        tasks: &[TaskSpec],
        now: Millis,
    ) -> ScriptInvocation<'s> {
        let mut inv = self.invocation(&SCRIPTS.add, pk, chunk.topic, chunk.partition, now);
        inv.arg(chunk.members.len());
        for &i in &chunk.members {
            let t = &tasks[i];
            let seq = self.next_seq(now);
            let backoff = t
                .backoff
                .as_ref()
                .and_then(|b| serde_json::to_string(b).ok())
                .unwrap_or_default();
            inv.arg(&t.id)
                .arg(t.due_ms)
                .arg(Record::new(t, now, seq).encode())
                .arg(backoff)
                .arg(policy_code(t.on_duplicate))
                .arg(t.priority)
                .arg_fmt(format_args!("{seq:016x}"));
            match t.expires_at_ms {
                Some(at) => inv.arg(at),
                None => inv.arg(""),
            };
            inv.arg(t.key.as_deref().unwrap_or(""));
        }
        inv
    }
}

/// Groups the tasks by (topic, partition), keeping their order inside each group, and cuts
/// the groups into chunks.
fn chunks<'t>(tasks: &'t [TaskSpec], parts_of: &HashMap<&str, u32>) -> Vec<Chunk<'t>> {
    let mut group_of: HashMap<(&str, u32), usize> = HashMap::new();
    let mut groups: Vec<((&str, u32), Vec<usize>)> = Vec::new();
    for (i, t) in tasks.iter().enumerate() {
        let key = (
            t.topic.as_str(),
            partition_of(&t.id, parts_of[t.topic.as_str()]),
        );
        let g = *group_of.entry(key).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[g].1.push(i);
    }
    let mut chunks = Vec::new();
    for ((topic, partition), members) in groups {
        let mut chunk = Vec::new();
        let mut bytes = 0;
        for i in members {
            if chunk.len() == ADD_CHUNK || bytes >= ADD_CHUNK_BYTES {
                chunks.push(Chunk {
                    topic,
                    partition,
                    members: std::mem::take(&mut chunk),
                });
                bytes = 0;
            }
            bytes += tasks[i].body.len();
            chunk.push(i);
        }
        chunks.push(Chunk {
            topic,
            partition,
            members: chunk,
        });
    }
    chunks
}

/// The duplicate policy as `add.lua` reads it.
fn policy_code(policy: OnDuplicate) -> &'static str {
    match policy {
        OnDuplicate::Reject => "0",
        OnDuplicate::Replace => "1",
        OnDuplicate::Keep => "2",
    }
}

/// A task's result from its code in the add script's reply.
fn outcome(t: &TaskSpec, code: Option<i64>) -> AddResult {
    match code {
        Some(0) => Ok(AddOutcome::Added),
        Some(1) => Ok(AddOutcome::Replaced),
        Some(2) => Ok(AddOutcome::Existed),
        Some(3) => Err(Error::Duplicate {
            topic: t.topic.clone(),
            id: t.id.clone(),
        }),
        other => Err(BackendError::protocol("adding tasks", format!("add code {other:?}")).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(topic: &str, id: &str, body_len: usize) -> TaskSpec {
        delayq::core::validate::validate_task(
            delayq::NewTask::new(topic, id).body("x".repeat(body_len)),
            &delayq::Limits::default(),
            &delayq::TaskDefaults::default(),
            1_000,
        )
        .unwrap()
    }

    #[test]
    fn chunks_group_by_partition_in_order_and_stay_bounded() {
        let mut tasks: Vec<TaskSpec> = (0..1_200).map(|i| spec("a", &format!("t{i}"), 1)).collect();
        tasks.push(spec("b", "t0", 1));
        // Bodies of 400 KiB: a chunk is closed once it carries 1 MiB or more.
        tasks.extend((0..4).map(|i| spec("c", &format!("big{i}"), 400 << 10)));
        let parts_of = HashMap::from([("a", 1), ("b", 4), ("c", 1)]);
        let chunks = chunks(&tasks, &parts_of);
        let shape: Vec<(&str, u32, usize)> = chunks
            .iter()
            .map(|c| (c.topic, c.partition, c.members.len()))
            .collect();
        let b = partition_of("t0", 4);
        assert_eq!(
            shape,
            [
                ("a", 0, 500),
                ("a", 0, 500),
                ("a", 0, 200),
                ("b", b, 1),
                ("c", 0, 3),
                ("c", 0, 1)
            ]
        );
        let order: Vec<usize> = chunks.iter().flat_map(|c| c.members.clone()).collect();
        assert_eq!(order, (0..tasks.len()).collect::<Vec<_>>());
    }

    #[test]
    fn policies_and_outcomes_match_add_lua() {
        assert_eq!(
            [OnDuplicate::Reject, OnDuplicate::Replace, OnDuplicate::Keep].map(policy_code),
            ["0", "1", "2"]
        );
        let t = spec("a", "i", 1);
        assert!(matches!(outcome(&t, Some(0)), Ok(AddOutcome::Added)));
        assert!(matches!(outcome(&t, Some(1)), Ok(AddOutcome::Replaced)));
        assert!(matches!(outcome(&t, Some(2)), Ok(AddOutcome::Existed)));
        assert!(matches!(outcome(&t, Some(3)), Err(Error::Duplicate { .. })));
        assert!(outcome(&t, Some(4)).is_err());
        assert!(outcome(&t, None).is_err());
    }
}
