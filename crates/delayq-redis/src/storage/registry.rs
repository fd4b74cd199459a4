//! The topics' partition counts, and the fencing reports for the lease keeper.
//!
//! A topic's partition count is recorded in the registry hash on the topic's first add (by
//! the `register` script, which also announces the new topic to the other instances) and
//! never changes: every instance reads it from there, caches it, and refuses to work on a
//! topic whose recorded count differs from its own configuration. Reads of a topic never
//! added to find no count and answer as for an empty topic, without recording anything.
//!
//! When a promoter's tick is refused because a newer lease holder fenced the partition off,
//! [`Fencing`] carries the news to the lease keeper, which gives the bucket up and takes it
//! again with a token above the fence.

use std::collections::HashMap;

use parking_lot::{Mutex, RwLock};

use super::InstanceState;
use crate::error::BackendError;
use crate::promoter::Event;
use crate::scripts::SCRIPTS;

/// The partition counts of the topics seen, as recorded in Redis.
#[derive(Default)]
pub(crate) struct Topics(RwLock<HashMap<String, u32>>);

impl InstanceState {
    /// The partition count of `topic`: cached, else read from the registry, else (when
    /// `create`) recorded there now. `None` for a topic never added to.
    pub async fn partitions(&self, topic: &str, create: bool) -> Result<Option<u32>, BackendError> {
        if let Some(&n) = self.topics.0.read().get(topic) {
            return Ok(Some(n));
        }
        let configured = self.options.partitions_for(topic);
        let registry = self.keys.registry();
        let mut conn = self.redis.conn();
        let op = format!("reading the partition count of topic {topic:?}");
        let recorded: Option<u32> = if create {
            let mut inv = SCRIPTS.register.prepare_invoke();
            inv.key(&registry)
                .arg(topic)
                .arg(configured)
                .arg(&self.channel)
                .arg(&self.instance);
            Some(self.redis.io(&op, inv.invoke_async(&mut conn)).await?)
        } else {
            let mut hget = redis::cmd("HGET");
            hget.arg(&registry).arg(topic);
            self.redis.io(&op, hget.query_async(&mut conn)).await?
        };
        let Some(recorded) = recorded else {
            return Ok(None);
        };
        if recorded != configured {
            return Err(BackendError::PartitionMismatch {
                topic: topic.to_owned(),
                recorded,
                configured,
            });
        }
        self.topics.0.write().insert(topic.to_owned(), recorded);
        let _ = self.promoter.send(Event::Topic(topic.to_owned(), recorded));
        Ok(Some(recorded))
    }
}

/// Buckets whose tick was fenced off, and the highest fence seen, for the lease keeper.
#[derive(Default)]
pub(crate) struct Fencing(Mutex<(u64, Vec<u32>)>);

impl Fencing {
    /// Tells the lease keeper that a bucket's tick was refused by a fence of `token`.
    pub fn report(&self, token: u64, buckets: &[u32]) {
        let mut fenced = self.0.lock();
        fenced.0 = fenced.0.max(token);
        for b in buckets {
            if !fenced.1.contains(b) {
                fenced.1.push(*b);
            }
        }
    }

    /// Takes what [`Fencing::report`] reported since the last call: the highest fence and
    /// the buckets.
    pub fn take(&self) -> (u64, Vec<u32>) {
        std::mem::take(&mut *self.0.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fencing_reports_add_up_until_taken() {
        let fencing = Fencing::default();
        fencing.report(7, &[3, 1]);
        fencing.report(5, &[1, 9]);
        assert_eq!(fencing.take(), (7, vec![3, 1, 9]));
        assert_eq!(fencing.take(), (0, vec![]));
    }
}
