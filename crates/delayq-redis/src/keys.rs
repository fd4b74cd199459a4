//! The key layout, and the stable hashes that place tasks in partitions and partitions in
//! lease buckets.
//!
//! Every key of one (topic, partition) shares the hash tag `{<topic>#<p>}`, so a Lua script
//! over them touches one Redis Cluster slot, and a busy topic spreads over many slots:
//!
//! | key                                   | type   | holds                                     |
//! |---------------------------------------|--------|-------------------------------------------|
//! | `dq:{t#p}:records`                    | hash   | task id → packed record (header + body)   |
//! | `dq:{t#p}:extras`                     | hash   | task id → backoff, last error, history    |
//! | `dq:{t#p}:delayed` … `:dead`          | zset   | the tasks in each state (see below)       |
//! | `dq:{t#p}:deadlines`                  | zset   | ACTIVE tasks scored by ttr deadline       |
//! | `dq:{t#p}:finished:expiry`, `:cancelled:expiry` | zset | retained records by end of retention |
//! | `dq:{t#p}:info`                       | hash   | index format `v`, insertion counter `seq`, `pause`, `expired` count |
//! | `dq:{t#p}:expiries`                   | zset   | DELAYED/READY tasks with an expiry, scored by it |
//! | `dq:{t#p}:held`, `:key-order`, `:key-active` | zset, zset, hash | keyed READY tasks held back by `max_active_per_key`, keyed READY tasks in their key's order, ACTIVE tasks per key |
//! | `dq:{t#p}:blocked`                    | zset   | keys the topic's permits hold back, until when |
//! | `dq:{t#p}:fence`                      | string | the highest lease token seen (fencing)    |
//! | `dq:{t#flow}:permits`                 | zset   | a topic of several partitions with flow limits: receipt → until when its slot is held |
//! | `dq:{t#flow}:permit-keys`, `:key-active`, `:info`, `:blocks` | hash | receipt → key, key → permits, the limits and the rate, key → partitions holding it back |
//! | `dq:topics`                           | hash   | topic → partition count (the registry)    |
//! | `dq:{lease}:bucket:<b>`               | string | `<instance>:<token>`, `PX` lease time     |
//! | `dq:{lease}:instances`                | zset   | live instances scored by heartbeat expiry |
//! | `dq:{lease}:token`                    | string | the fencing token counter                 |
//! | `dq:jobs`                             | string | the beanstalk job id counter (`INCR`)     |
//! | `dq:meta:<namespace>`                 | hash   | the settings store: key → value           |
//! | `<base>:wait`, `{<base>}:wait`        | string | with `wait_replicas`: the write each `WAIT` follows (`pipeline.rs`) |
//! | `dq:events` (channel)                 | pubsub | ready / wake / new-topic events           |
//!
//! DELAYED, ACTIVE, FINISHED and CANCELLED hold task ids scored by due. READY and DEAD carry
//! the order of rule 11 and of beanstalkd's kick in their members (`scripts/lib.lua` says
//! how): READY is scored by priority with members `due|insertion|id` (fixed-width hex), DEAD
//! by the time the task went DEAD with members `insertion|id` (the insertion number is the
//! adding instance's clock millisecond shifted left by 20 bits plus a counter). `ready_member` and
//! `dead_member` read them.

use delayq_core::hash::fnv1a;

/// How many lease buckets the partitions of all topics are spread over. Fixed: every
/// instance must agree on it.
pub const LEASE_BUCKETS: u32 = 64;

/// The partition of a task: a stable hash of its id. Part of the data layout: it must never
/// change between releases.
pub fn partition_of(id: &str, partitions: u32) -> u32 {
    (fnv1a(&[id.as_bytes()]) % u64::from(partitions.max(1))) as u32
}

/// The lease bucket of a (topic, partition). Part of the protocol between instances.
pub fn bucket_of(topic: &str, partition: u32) -> u32 {
    let p = partition.to_string();
    (fnv1a(&[topic.as_bytes(), b"#", p.as_bytes()]) % u64::from(LEASE_BUCKETS)) as u32
}

/// The names of the keys that are not per partition.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_owned(),
        }
    }

    pub fn registry(&self) -> String {
        format!("{}:topics", self.prefix)
    }

    pub fn channel(&self) -> String {
        format!("{}:events", self.prefix)
    }

    pub fn lease_instances(&self) -> String {
        format!("{}:{{lease}}:instances", self.prefix)
    }

    pub fn lease_token(&self) -> String {
        format!("{}:{{lease}}:token", self.prefix)
    }

    pub fn job_ids(&self) -> String {
        format!("{}:jobs", self.prefix)
    }

    pub fn meta(&self, namespace: &str) -> String {
        format!("{}:meta:{namespace}", self.prefix)
    }

    pub fn lease_bucket(&self, bucket: u32) -> String {
        format!("{}:{{lease}}:bucket:{bucket}", self.prefix)
    }

    pub fn partition(&self, topic: &str, partition: u32) -> PartitionKeys {
        PartitionKeys {
            base: format!("{}:{{{topic}#{partition}}}:", self.prefix),
        }
    }

    /// The keys of the permits of `topic` (its flow limits when it has several partitions):
    /// a hash tag of their own, which no partition's (a number after `#`) can be.
    pub fn permits(&self, topic: &str) -> PermitKeys {
        PermitKeys {
            base: format!("{}:{{{topic}#flow}}:", self.prefix),
        }
    }
}

/// The keys of one topic's permits (`permit_*` in `scripts/lib.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PermitKeys {
    /// The common beginning, hash tag included.
    pub base: String,
}

impl PermitKeys {
    /// The keys every permit script declares, in the order it expects them as `KEYS`.
    pub fn all(&self) -> impl Iterator<Item = String> + '_ {
        ["permits", "permit-keys", "key-active", "info", "blocks"]
            .iter()
            .map(|s| format!("{}{s}", self.base))
    }
}

/// The keys of one (topic, partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PartitionKeys {
    /// The common beginning, hash tag included.
    pub base: String,
}

/// The suffixes of the keys every partition script declares, in `KEYS` order.
const SETS: [&str; 17] = [
    "delayed",
    "ready",
    "active",
    "finished",
    "cancelled",
    "dead",
    "deadlines",
    "finished:expiry",
    "cancelled:expiry",
    "records",
    "extras",
    "info",
    "expiries",
    "held",
    "key-order",
    "key-active",
    "blocked",
];

impl PartitionKeys {
    /// The keys every partition script declares, in the order it expects them as `KEYS`.
    #[cfg(test)]
    pub fn sets(&self) -> impl Iterator<Item = String> + '_ {
        SETS.iter().map(|s| format!("{}{s}", self.base))
    }

    /// Writes [`PartitionKeys::sets`] as arguments of `out`, each made in place (every
    /// partition script call sends all 17).
    pub fn write_sets(&self, out: &mut impl redis::RedisWrite) {
        use std::io::Write as _;
        for s in SETS {
            let mut w = out.writer_for_next_arg();
            // Writing to an argument's buffer cannot fail.
            let _ = w.write_all(self.base.as_bytes());
            let _ = w.write_all(s.as_bytes());
        }
    }

    /// The set of the tasks in `state`, scored by due.
    pub fn state_set(&self, state: delayq::State) -> String {
        format!("{}{}", self.base, SETS[state as usize])
    }

    /// READY tasks held back by their key's `max_active_per_key` (members as in READY).
    pub fn held(&self) -> String {
        format!("{}held", self.base)
    }

    pub fn fence(&self) -> String {
        format!("{}fence", self.base)
    }

    pub fn records(&self) -> String {
        format!("{}records", self.base)
    }

    pub fn extras(&self) -> String {
        format!("{}extras", self.base)
    }

    #[cfg(test)]
    pub fn info(&self) -> String {
        format!("{}info", self.base)
    }
}

/// The width in hex digits of the due in READY members.
const WIDTH: usize = 12;
/// The width in hex digits of the insertion number in READY and DEAD members.
const SEQ_WIDTH: usize = 16;

/// The (due, insertion number, id) of a member of a READY set; `None` if it is not one.
pub(crate) fn ready_member(member: &str) -> Option<(u64, u64, &str)> {
    let due = u64::from_str_radix(member.get(..WIDTH)?, 16).ok()?;
    let seq = u64::from_str_radix(member.get(WIDTH..WIDTH + SEQ_WIDTH)?, 16).ok()?;
    Some((due, seq, member.get(WIDTH + SEQ_WIDTH..)?))
}

/// The (insertion number, id) of a member of a DEAD set; `None` if it is not one.
pub(crate) fn dead_member(member: &str) -> Option<(u64, &str)> {
    let seq = u64::from_str_radix(member.get(..SEQ_WIDTH)?, 16).ok()?;
    Some((seq, member.get(SEQ_WIDTH..)?))
}

/// The member and score of a task in the set of `state`, as `lib.lua`'s `member` makes them
/// (for tests that write a partition by hand).
#[cfg(test)]
pub(crate) fn member_of(
    state: delayq::State,
    id: &str,
    record: &crate::record::Record,
) -> (String, f64) {
    let clamp = |n: u64| n.min((1 << 48) - 1);
    match state {
        delayq::State::Ready => (
            format!("{:012x}{:016x}{id}", clamp(record.due_ms), record.seq),
            f64::from(record.priority),
        ),
        delayq::State::Dead => (
            format!("{:016x}{id}", record.seq),
            record.updated_at_ms as f64,
        ),
        _ => (id.to_owned(), record.due_ms as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable() {
        // Fixed values (checked against an independent FNV-1a): data in Redis and the lease
        // protocol depend on them staying the same across releases.
        let table = [
            ("order-1", 8, 5),
            ("order-2", 8, 4),
            ("", 8, 5),
            ("x", 1, 0),
            ("payment-77", 32, 10),
        ];
        for (id, n, want) in table {
            assert_eq!(partition_of(id, n), want, "{id} % {n}");
        }
        let table = [("orders", 0, 55), ("orders", 1, 4), ("payments", 7, 24)];
        for (topic, p, want) in table {
            assert_eq!(bucket_of(topic, p), want, "{topic}#{p}");
        }
    }

    #[test]
    fn partitions_spread_evenly() {
        let mut counts = [0u32; 8];
        for i in 0..80_000 {
            counts[partition_of(&format!("task-{i}"), 8) as usize] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn every_partition_key_shares_one_hash_tag() {
        let keys = Keys::new("dq");
        let pk = keys.partition("orders", 7);
        assert_eq!(pk.records(), "dq:{orders#7}:records");
        assert_eq!(pk.fence(), "dq:{orders#7}:fence");
        let sets: Vec<String> = pk.sets().collect();
        assert_eq!(sets[0], "dq:{orders#7}:delayed");
        assert_eq!(sets[8], "dq:{orders#7}:cancelled:expiry");
        assert_eq!(sets[10], "dq:{orders#7}:extras");
        assert_eq!(sets[11], "dq:{orders#7}:info");
        assert_eq!(sets[12], "dq:{orders#7}:expiries");
        assert_eq!(sets[16], "dq:{orders#7}:blocked");
        let permits: Vec<String> = keys.permits("orders").all().collect();
        assert_eq!(permits[0], "dq:{orders#flow}:permits");
        assert!(permits.iter().all(|k| k.contains("{orders#flow}")));
        assert_eq!(pk.state_set(delayq::State::Dead), "dq:{orders#7}:dead");
        assert!(sets.iter().all(|k| k.contains("{orders#7}")));
        assert_eq!(keys.lease_bucket(3), "dq:{lease}:bucket:3");
        assert_eq!(keys.job_ids(), "dq:jobs");
        assert_eq!(keys.meta("push"), "dq:meta:push");
    }

    #[test]
    fn members_read_back() {
        assert_eq!(
            ready_member("0000000007d000000000000000a5order-1"),
            Some((2_000, 0xa5, "order-1"))
        );
        assert_eq!(dead_member("00000000000000a5x"), Some((0xa5, "x")));
        assert_eq!(ready_member("short"), None);
        assert_eq!(dead_member("zzzzzzzzzzzzzzzzx"), None);
    }
}
