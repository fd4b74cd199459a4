//! Job ids and the delayq tasks they name.
//!
//! A job put over this protocol is a task of topic = its tube and id = its job id in decimal
//! (`17`), the number taken from the storage's job-id counter (one per data directory, or per
//! Redis deployment), so HTTP's `/get?topic=T&id=17` shows the same task.
//!
//! A task added over HTTP may have any id. One whose id is a job id in canonical decimal
//! (`1` to 2^64−1, no sign, no leading zero) shows with that number. Any other (`order-17`,
//! `007`) gets an **alias**: a fresh number from the same counter, so it can never collide with
//! a later `put`, assigned the first time this server shows the task to a beanstalk client and
//! kept in process memory. Commands naming the alias reach the task; after a restart the task
//! gets a new alias. docs/beanstalk.md describes this for users.
//!
//! beanstalkd job ids name no tube, but a delayq id is unique only inside its topic. To find
//! the task of a job id, the listener looks first at the topic it remembers for that id (jobs
//! put or shown here), then asks the storage which topics hold that id (`locate`), and takes
//! the first one whose task is live (not finished or cancelled).

use std::collections::HashMap;

use delayq::{ErrorKind, Queue, State, TaskInfo};
use parking_lot::Mutex;

/// A task named by a job id: its topic and its delayq id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct JobRef {
    /// The topic (tube).
    pub topic: String,
    /// The task's id in delayq.
    pub task_id: String,
}

/// The job id a task id stands for, if it is a job id in canonical decimal (1 or more, no
/// sign, no leading zero).
pub fn parse_task_id(id: &str) -> Option<u64> {
    if id.starts_with('0') || id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

/// The task id of a job put over this protocol.
pub fn format_job_id(id: u64) -> String {
    id.to_string()
}

#[derive(Debug, Default)]
struct Inner {
    /// The topic of job ids seen here.
    topic_of: HashMap<u64, String>,
    /// Aliases of tasks whose ids are not job ids.
    aliases: HashMap<u64, JobRef>,
    alias_of: HashMap<JobRef, u64>,
    /// `kick` counts of `stats-job` (the storage does not count kicks).
    kicks: HashMap<u64, u64>,
    /// The delay of the last put or release, in seconds, as `stats-job` shows it (the storage
    /// forgets it once a kick makes the task ready).
    delays: HashMap<u64, u64>,
}

/// The job-id side of the listener.
#[derive(Debug, Default)]
pub(crate) struct Jobs {
    inner: Mutex<Inner>,
}

/// Whether a task is a job a beanstalk client can see.
fn is_live(state: State) -> bool {
    !state.is_terminal()
}

impl Jobs {
    /// Remembers the topic of a job put here.
    pub fn note(&self, id: u64, topic: &str) {
        self.inner.lock().topic_of.insert(id, topic.to_owned());
    }

    /// Forgets a job that is gone.
    pub fn forget(&self, id: u64) {
        let mut inner = self.inner.lock();
        inner.topic_of.remove(&id);
        inner.kicks.remove(&id);
        inner.delays.remove(&id);
        if let Some(r) = inner.aliases.remove(&id) {
            inner.alias_of.remove(&r);
        }
    }

    /// Counts a kick of job `id`.
    pub fn count_kick(&self, id: u64) {
        *self.inner.lock().kicks.entry(id).or_default() += 1;
    }

    /// Notes the delay a put or release gave job `id`.
    pub fn note_delay(&self, id: u64, secs: u64) {
        self.inner.lock().delays.insert(id, secs);
    }

    /// The delay noted for job `id`.
    pub fn delay(&self, id: u64) -> Option<u64> {
        self.inner.lock().delays.get(&id).copied()
    }

    /// The kicks of job `id` counted here.
    pub fn kicks(&self, id: u64) -> u64 {
        self.inner.lock().kicks.get(&id).copied().unwrap_or(0)
    }

    /// The job id a beanstalk client sees for the task (`topic`, `task_id`): its number, or
    /// an alias (see the module doc).
    pub async fn job_id(&self, queue: &Queue, topic: &str, task_id: &str) -> delayq::Result<u64> {
        if let Some(id) = parse_task_id(task_id) {
            self.inner
                .lock()
                .topic_of
                .entry(id)
                .or_insert_with(|| topic.to_owned());
            return Ok(id);
        }
        let key = JobRef {
            topic: topic.to_owned(),
            task_id: task_id.to_owned(),
        };
        if let Some(&alias) = self.inner.lock().alias_of.get(&key) {
            return Ok(alias);
        }
        let fresh = queue.next_job_id().await?;
        let mut inner = self.inner.lock();
        // Another session may have named it meanwhile: keep the first alias.
        if let Some(&alias) = inner.alias_of.get(&key) {
            return Ok(alias);
        }
        inner.alias_of.insert(key.clone(), fresh);
        inner.topic_of.insert(fresh, topic.to_owned());
        inner.aliases.insert(fresh, key);
        Ok(fresh)
    }

    /// The live task job `id` names, with its view; `None` when there is none.
    pub async fn find(&self, queue: &Queue, id: u64) -> delayq::Result<Option<(JobRef, TaskInfo)>> {
        let (alias, known) = {
            let inner = self.inner.lock();
            (
                inner.aliases.get(&id).cloned(),
                inner.topic_of.get(&id).cloned(),
            )
        };
        if let Some(r) = alias {
            return Ok(get_live(queue, &r.topic, &r.task_id)
                .await?
                .map(|info| (r, info)));
        }
        let task_id = format_job_id(id);
        if let Some(topic) = &known
            && let Some(info) = get_live(queue, topic, &task_id).await?
        {
            return Ok(Some((
                JobRef {
                    topic: topic.clone(),
                    task_id,
                },
                info,
            )));
        }
        for topic in locate(queue, &task_id).await? {
            if Some(&topic) == known.as_ref() {
                continue;
            }
            if let Some(info) = get_live(queue, &topic, &task_id).await? {
                self.note(id, &topic);
                return Ok(Some((JobRef { topic, task_id }, info)));
            }
        }
        Ok(None)
    }
}

/// The topics holding `task_id`: the storage's `locate`, or, on a backend that does not offer
/// it yet, a look into every topic.
async fn locate(queue: &Queue, task_id: &str) -> delayq::Result<Vec<String>> {
    match queue.locate(task_id).await {
        Ok(topics) => Ok(topics),
        Err(e) if e.kind() == ErrorKind::Invalid => {
            let topics = queue.topics().await?;
            Ok(topics.into_iter().map(|(name, _)| name).collect())
        }
        Err(e) => Err(e),
    }
}

async fn get_live(queue: &Queue, topic: &str, task_id: &str) -> delayq::Result<Option<TaskInfo>> {
    match queue.get(topic, task_id).await {
        Ok(info) if is_live(info.state) => Ok(Some(info)),
        Ok(_) => Ok(None),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Invalid) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_job_ids() {
        let table: &[(&str, Option<u64>)] = &[
            ("1", Some(1)),
            ("17", Some(17)),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("0", None),
            ("007", None),
            ("+7", None),
            ("-7", None),
            ("order-17", None),
            ("", None),
        ];
        for (id, want) in table {
            assert_eq!(parse_task_id(id), *want, "{id:?}");
        }
    }
}
