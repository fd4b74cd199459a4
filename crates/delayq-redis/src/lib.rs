//! The Redis backend of delayq: state in Redis, any number of stateless instances.
//!
//! ```no_run
//! # async fn demo() -> delayq::Result<()> {
//! use std::sync::Arc;
//! use delayq::{Queue, StorageContext, SystemClock};
//! use delayq_redis::RedisOptions;
//!
//! let ctx = StorageContext::new(Arc::new(SystemClock::new()));
//! let storage = delayq_redis::start(ctx.clone(), RedisOptions::new("redis://127.0.0.1:6379")).await?;
//! let queue = Queue::new(storage, ctx);
//! # Ok(()) }
//! ```
//!
//! # Key layout
//!
//! A topic is split into partitions (a stable hash of the task id modulo the topic's
//! partition count, which is recorded in the registry hash `dq:topics` on the topic's first
//! use and never changes: an instance configured otherwise gets an error naming both
//! values). All keys of one (topic, partition) share the hash tag `{<topic>#<p>}`, so each
//! script touches one Redis Cluster slot and a busy topic spreads over many slots. Per
//! partition there is a hash of packed records (task id → a short header and the body), a
//! hash of extras that only failing tasks or tasks with a backoff have (backoff, last error,
//! bounded history), one sorted set per state (the sizes are the counters, so `stats` is
//! O(partitions) and never scans), the ACTIVE tasks by ttr deadline, the FINISHED /
//! CANCELLED records by the end of their retention, and an `info` hash (index format,
//! pause). READY is scored by priority with members `due|insertion|id`, which gives pop the
//! order of rule 11 (priority, due, insertion); DEAD is scored by when the task went DEAD
//! (kick's oldest-buried-first); the others hold ids scored by due. See [`keys`] for the
//! table and `docs/storage.md` for what the order means across partitions.
//!
//! Records are packed into one hash per partition rather than one hash per task because a
//! 100-byte body pushes a per-task hash out of Redis's compact listpack encoding (about
//! 670 bytes per delayed task beyond the body, measured), while a hash field costs a dict
//! entry and two strings.
//!
//! # Scripts
//!
//! Every transition is one Lua script over the keys of one partition, in one round trip,
//! checking the state (and the receipt) inside the script: add (a batch of one partition),
//! consume (finishes and pops of one partition, several consumers' calls at once), pop (of
//! a partition in a plan across several), release, touch, cancel, requeue (one or all),
//! delete, bury, reschedule, kick (one or several), pause/resume, peek, the promoter's tick,
//! and stats. Concurrent adds, and concurrent consumer calls, to one partition share a
//! script (`delayq::storage::coalesce`). Pop over several
//! partitions or topics, peek and kick plan across partitions from the `peek` script's view
//! of each; pause is stored in every partition so that pop refuses in the same atomic step.
//! Task time comes from the queue's clock as an argument, never from Redis's `TIME`, so tests
//! with a manual clock are exact. A failed attempt (release, ttr expiry) is decided in Lua
//! exactly as `delayq_core::lifecycle::after_failure` decides it (a table test in
//! `src/scripts/failure_rule.rs` holds the two equal). A FINISHED or
//! CANCELLED record is gone at the end of its retention by the queue's clock: scripts, reads
//! and counters treat it as absent from that instant, and the promoter's tick removes it.
//! (A record field cannot carry a `PEXPIRE` of its own; expiry by the queue's clock is also
//! what keeps manual-clock tests exact.) The scripts live in `src/scripts/*.lua`; `lib.lua`
//! documents the arguments and the record format, which `src/record.rs` encodes and parses.
//! `src/storage/` holds the Rust side, one module per job (see its module doc).
//!
//! # Promotion and leases
//!
//! Moving due tasks to READY, redelivering tasks whose ttr passed and removing expired
//! records is done by whichever instance holds the partition's lease. Partitions are grouped
//! into 64 lease buckets; each instance runs one `lease` script every third of the lease time
//! (heartbeat, renew its buckets up to its fair share `ceil(64 / live instances)`, give up the
//! rest, take free ones, each new lease with a fencing token from a counter). A dead
//! instance's leases run out after the lease time (1 s by default) and the others take them
//! over. The tick script refuses a token older than the newest one the partition has seen,
//! so a holder that lost its lease without noticing cannot act on it. The holder sleeps
//! until the earliest timer of its partitions and is woken early by an event when a script
//! sets an earlier one; it never polls. See `src/lease.rs` and `src/promoter.rs`.
//!
//! # Wake-ups
//!
//! Long-polls are parked in the queue's waiters, not on Redis connections. Scripts that make
//! tasks ready publish it on one events channel, which every instance subscribes to once;
//! the instance wakes its parked consumers of that topic. See `src/events.rs`.
//!
//! # The clock
//!
//! The task scripts never read `TIME` (only the lease script does, for liveness, which must
//! be judged by one clock shared by all instances); a server's queue clock is a [`RedisClock`]: it
//! follows Redis's `TIME`, read once a second with its round trip bounded, so all instances
//! judge due times by one reference whatever their machines' clocks say, and it refuses (503)
//! when it cannot bound that reference. See `src/clock.rs` and `docs/clock.md`.
//!
//! # Faults
//!
//! A request that cannot reach Redis, or gets no answer within the timeouts, fails with
//! [`delayq::Error::Unavailable`] (HTTP 503) naming the operation and Redis's address; the
//! connection is re-established in the background with backoff. When Redis is back the
//! promoter looks at every partition it holds, so tasks that came due meanwhile fire at once.
//! Pop also promotes what is due in the partitions it takes from, so due tasks are never
//! held back by a promoter that lags.
//!
//! # Durability
//!
//! An acknowledged change is as durable as Redis makes it (see above for replication):
//! with `appendonly yes` and
//! `appendfsync always` nothing acknowledged is lost when Redis restarts (tested); with
//! `everysec`, up to a second. A batch add is one pipeline of scripts, one per (partition,
//! chunk of 500 tasks): each script is atomic, but if the connection breaks in the middle
//! of the pipeline the call fails as `Unavailable` while some chunks may have been applied
//! (adding them again with `on_duplicate: keep` is safe).
//!
//! # Deployments
//!
//! The URL chooses the deployment: `redis://` / `rediss://` (one server),
//! `redis+sentinel://h:p[,h:p...]/<master-name>[/db]` (the master the sentinels name,
//! followed across failovers without a restart) or `redis+cluster://h:p[,h:p...]` (a Redis
//! Cluster: every script runs on one slot, whole-topic reads are one request per partition,
//! never a cross-slot command; the registry hash and the lease keys each live in a slot of
//! their own and are touched by commands of their own). See `src/conn.rs`.
//!
//! # Acknowledged means replicated, when asked
//!
//! [`RedisOptions::wait_replicas`] makes every acknowledged write (add, finish, release,
//! touch, cancel, requeue, delete) wait for `WAIT n timeout` (in a cluster, on the master
//! of each slot written) and fail with [`delayq::Error::Unavailable`] naming the count when
//! fewer replicas confirm. Without it, Redis's asynchronous replication may lose writes
//! acknowledged just before a failover. With it, each write costs the replication delay,
//! `WAIT` holds up the other requests on the same connection, and a master with fewer live
//! replicas than asked (just after a failover) refuses writes to its slots until a replica
//! is back; a refused write stays applied on the master (`WAIT` does not roll back) and may
//! or may not survive. Each `WAIT` rides behind a small write of its own, so that it covers
//! the write it confirms even over a connection replaced in between, and a write made before
//! a Sentinel move to another master is refused (`storage/pipeline.rs`, `Redis::replicated`).

pub mod clock;
mod conn;
pub mod error;
mod events;
pub mod keys;
mod lease;
pub mod options;
mod promoter;
mod record;
mod scripts;
mod storage;

pub use clock::{RedisClock, RedisClockOptions};
pub use error::BackendError;
pub use keys::{bucket_of, partition_of};
pub use options::{CLUSTER_PARTITIONS, RedisOptions};
pub use storage::{RedisStorage, start};
