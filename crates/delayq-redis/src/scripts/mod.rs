//! The Lua scripts, one per transition, and the shape of their replies.
//!
//! All scripts are the functions of one Redis function library: `lib.lua` (argument layout,
//! record layout, the shared transitions: `load`, `enter`, `fail`, `promote`) runs once, when
//! Redis loads the library, and each script's body becomes a function over its locals, which
//! starts with `lib.lua`'s `begin` (the call's keys and arguments, its counters reset). So a
//! call pays for its own body only, not for defining the prelude again (docs/performance.md,
//! "Redis mode: where the time goes"). The library's name carries a hash of its source, so
//! two delayq versions on one Redis each call their own code. It is loaded on first use and
//! again whenever Redis answers that the function does not exist (a restart without
//! persistence, a cluster node that joined); `FUNCTION LOAD` goes to every primary of a
//! cluster, `FCALL` to the node of its first key.

use std::sync::{Arc, LazyLock};

use delayq::Millis;
use redis::{Cmd, FromRedisValue, RedisError, RedisResult, RedisWrite as _, ToRedisArgs, Value};

use crate::error::BackendError;
use crate::keys::PartitionKeys;

#[cfg(test)]
mod failure_rule;
#[cfg(test)]
mod library;
#[cfg(test)]
mod record_parity;

const LIB: &str = include_str!("lib.lua");

/// A script body and whether it works on a partition (runs `begin` of `lib.lua` first) or
/// on keys of its own (lease, register, meta).
struct Body {
    name: &'static str,
    source: String,
    partition: bool,
}

impl Body {
    fn partition(name: &'static str, source: impl Into<String>) -> Body {
        Body {
            name,
            source: source.into(),
            partition: true,
        }
    }

    fn own_keys(name: &'static str, source: &str) -> Body {
        Body {
            name,
            source: source.to_owned(),
            partition: false,
        }
    }
}

/// One Redis function library: its name and its source.
#[derive(Debug)]
pub(crate) struct Library {
    name: String,
    source: String,
}

impl Library {
    /// The library of `lib.lua` and `bodies`, and one [`Script`] per body, in their order.
    fn build(bodies: Vec<Body>) -> (Arc<Library>, Vec<Script>) {
        let mut code = String::new();
        for b in &bodies {
            code.push_str(b.name);
            code.push('\0');
            code.push_str(&b.source);
            code.push('\0');
        }
        code.push_str(LIB);
        // The source's hash, so that other code never shares the library's or a function's
        // name (function names are global across a Redis's libraries).
        let hash = redis::Script::new(&code).get_hash().to_owned();
        let name = format!("delayq_{}", &hash[..16]);
        let mut source = format!("#!lua name={name}\n{LIB}\n");
        let mut functions = Vec::with_capacity(bodies.len());
        for b in &bodies {
            let function = format!("{name}_{}", b.name);
            source.push_str(&format!(
                "redis.register_function('{function}', function(KEYS, ARGV)\n"
            ));
            if b.partition {
                source.push_str("begin(KEYS, ARGV)\n");
            }
            source.push_str(&b.source);
            source.push_str("\nend)\n");
            functions.push(function);
        }
        let library = Arc::new(Library { name, source });
        let scripts = functions
            .into_iter()
            .map(|function| Script {
                function,
                library: Arc::clone(&library),
            })
            .collect();
        (library, scripts)
    }

    /// Loads the library into Redis (on a cluster: every primary). `REPLACE`, since another
    /// instance may have loaded the same code meanwhile: its name says the code is the same.
    pub async fn load(&self, conn: &mut impl redis::aio::ConnectionLike) -> RedisResult<()> {
        // Once per Redis (and after it lost its functions): worth a line in the log.
        tracing::info!(library = %self.name, "loading the scripts into Redis");
        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg("REPLACE")
            .arg(&self.source)
            .query_async::<Value>(conn)
            .await?;
        Ok(())
    }
}

/// One function of the library.
#[derive(Debug)]
pub(crate) struct Script {
    function: String,
    library: Arc<Library>,
}

impl Script {
    /// A call of this function with no keys or arguments yet.
    pub fn prepare_invoke(&self) -> ScriptInvocation<'_> {
        ScriptInvocation {
            script: self,
            keys: Cmd::new(),
            args: Cmd::new(),
        }
    }
}

/// A call of a [`Script`]: its keys and arguments.
///
/// Each list is kept as a [`Cmd`] is, all its bytes in one buffer: as a `Vec<Vec<u8>>` every
/// key and argument was an allocation of its own, about thirty for one add (the partition's
/// 17 keys, the header, the task's fields), copied once more into the `FCALL`.
pub(crate) struct ScriptInvocation<'s> {
    script: &'s Script,
    keys: Cmd,
    args: Cmd,
}

impl ScriptInvocation<'_> {
    /// Adds a key (`KEYS[i]` in the script).
    pub fn key<T: ToRedisArgs>(&mut self, key: T) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds the keys every partition script declares, in `KEYS` order.
    pub fn partition_keys(&mut self, pk: &PartitionKeys) -> &mut Self {
        pk.write_sets(&mut self.keys);
        self
    }

    /// Adds an argument (`ARGV[i]` in the script).
    pub fn arg<T: ToRedisArgs>(&mut self, arg: T) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Adds an argument (`ARGV[i]`) formatted straight into the call's buffer, with no
    /// `String` made first: `inv.arg_fmt(format_args!("{seq:016x}"))`.
    pub fn arg_fmt(&mut self, arg: std::fmt::Arguments<'_>) -> &mut Self {
        use std::io::Write as _;
        // Writing to a `Cmd`'s own buffer cannot fail.
        let _ = self.args.writer_for_next_arg().write_fmt(arg);
        self
    }

    /// The `FCALL` of this call (for a pipeline).
    pub fn cmd(&self) -> Cmd {
        let (keys, args) = (self.keys.args_iter(), self.args.args_iter());
        let bytes: usize = keys.clone().chain(args.clone()).map(arg_len).sum();
        let mut cmd = Cmd::with_capacity(
            3 + keys.len() + args.len(),
            self.script.function.len() + bytes + 32,
        );
        cmd.arg("FCALL").arg(&self.script.function).arg(keys.len());
        for a in keys.chain(args) {
            if let redis::Arg::Simple(bytes) = a {
                cmd.arg(bytes);
            }
        }
        cmd
    }

    /// Runs the call, loading the library first when Redis does not have the function.
    pub async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
    ) -> RedisResult<T> {
        let cmd = self.cmd();
        match cmd.query_async(conn).await {
            Err(e) if is_missing_function(&e) => {
                self.script.library.load(conn).await?;
                cmd.query_async(conn).await
            }
            other => other,
        }
    }
}

/// The bytes of one argument of a [`Cmd`] (the invocations hold no cursor argument).
fn arg_len(a: redis::Arg<&[u8]>) -> usize {
    match a {
        redis::Arg::Simple(bytes) => bytes.len(),
        _ => 0,
    }
}

/// Whether Redis refused a call because it does not have the function (it ran nothing).
pub(crate) fn is_missing_function(e: &RedisError) -> bool {
    e.code() == Some("ERR") && e.detail() == Some(MISSING_FUNCTION)
}

/// What Redis answers (after `ERR`) to an `FCALL` of a function it does not have.
pub(crate) const MISSING_FUNCTION: &str = "Function not found";

/// All scripts, loaded once per process.
pub(crate) struct Scripts {
    pub add: Script,
    pub pop: Script,
    /// Several consumers' finishes and pops of one partition in one script.
    pub consume: Script,
    pub release: Script,
    pub touch: Script,
    pub cancel: Script,
    pub requeue: Script,
    pub delete: Script,
    pub tick: Script,
    pub stats: Script,
    pub bury: Script,
    pub reschedule: Script,
    pub kick: Script,
    pub take: Script,
    pub pause: Script,
    pub limits: Script,
    pub peek: Script,
    /// Hands out what a topic's permits granted (topic-wide limits).
    pub flow_take: Script,
    /// Lifts the holds of keys that have free permits again.
    pub flow_unblock: Script,
    pub lease: Script,
    pub register: Script,
    pub meta: Script,
    /// The permits of a topic of several partitions with flow limits (`permit_*`).
    pub permit_grant: Script,
    pub permit_release: Script,
    pub permit_hold: Script,
    pub permit_limits: Script,
    pub permit_stats: Script,
}

/// The bodies of the library, in the order of [`Scripts`]' fields.
fn bodies() -> Vec<Body> {
    vec![
        Body::partition("add", include_str!("add.lua")),
        Body::partition("pop", include_str!("pop.lua")),
        Body::partition("consume", include_str!("consume.lua")),
        Body::partition("release", include_str!("release.lua")),
        Body::partition("touch", include_str!("touch.lua")),
        Body::partition("cancel", include_str!("cancel.lua")),
        Body::partition("requeue", include_str!("requeue.lua")),
        Body::partition("delete", include_str!("delete.lua")),
        Body::partition("tick", include_str!("tick.lua")),
        Body::partition("stats", include_str!("stats.lua")),
        Body::partition("bury", include_str!("bury.lua")),
        Body::partition("reschedule", include_str!("reschedule.lua")),
        Body::partition("kick", include_str!("kick.lua")),
        Body::partition("take", include_str!("take.lua")),
        Body::partition("pause", include_str!("pause.lua")),
        Body::partition("limits", include_str!("limits.lua")),
        Body::partition("peek", include_str!("peek.lua")),
        Body::partition("flow_take", include_str!("flow_take.lua")),
        Body::partition("flow_unblock", include_str!("flow_unblock.lua")),
        Body::own_keys("lease", include_str!("lease.lua")),
        Body::own_keys("register", include_str!("register.lua")),
        Body::own_keys("meta", include_str!("meta.lua")),
        Body::own_keys("permit_grant", include_str!("permit_grant.lua")),
        Body::own_keys("permit_release", include_str!("permit_release.lua")),
        Body::own_keys("permit_hold", include_str!("permit_hold.lua")),
        Body::own_keys("permit_limits", include_str!("permit_limits.lua")),
        Body::own_keys("permit_stats", include_str!("permit_stats.lua")),
    ]
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    let (_, scripts) = Library::build(bodies());
    let mut s = scripts.into_iter();
    let mut next = || s.next().expect("one script per body");
    Scripts {
        add: next(),
        pop: next(),
        consume: next(),
        release: next(),
        touch: next(),
        cancel: next(),
        requeue: next(),
        delete: next(),
        tick: next(),
        stats: next(),
        bury: next(),
        reschedule: next(),
        kick: next(),
        take: next(),
        pause: next(),
        limits: next(),
        peek: next(),
        flow_take: next(),
        flow_unblock: next(),
        lease: next(),
        register: next(),
        meta: next(),
        permit_grant: next(),
        permit_release: next(),
        permit_hold: next(),
        permit_limits: next(),
        permit_stats: next(),
    }
});

/// The arguments every partition script starts with: `ARGV[1..=6]` of `lib.lua`.
pub(crate) struct Header<'a> {
    /// The queue's clock (scripts never read Redis's `TIME`): its lower bound.
    pub now: Millis,
    /// The clock's upper bound (`Clock::upper_ms`), where ttr, release-delay and backoff
    /// windows start; `now` for an exact clock.
    pub upper: Millis,
    /// The events channel the script publishes on.
    pub channel: &'a str,
    /// The calling instance: the origin of the events.
    pub instance: &'a str,
    /// The topic of the partition, named in the events.
    pub topic: &'a str,
    /// The partition, named in the events.
    pub partition: u32,
    /// How long FINISHED and CANCELLED records are kept.
    pub retention_ms: u64,
}

impl Header<'_> {
    /// An invocation of the partition script `script` over the keys of `pk` (`KEYS[1..=16]`)
    /// with this header; the script's own keys and arguments are added after it.
    pub fn invoke<'s>(&self, script: &'s Script, pk: &PartitionKeys) -> ScriptInvocation<'s> {
        let mut inv = script.prepare_invoke();
        inv.partition_keys(pk)
            .arg(clock_arg(self.now, self.upper))
            .arg(self.channel)
            .arg(self.instance)
            .arg(self.topic)
            .arg(self.partition)
            .arg(self.retention_ms);
        inv
    }
}

/// The clock's bounds as a script's first argument: `lower:upper` only when they differ, so
/// an exact clock sends a plain number.
pub(crate) fn clock_arg(now: Millis, upper: Millis) -> String {
    if upper > now {
        format!("{now}:{upper}")
    } else {
        now.to_string()
    }
}

/// What a transition script reports besides its own result (see `reply` in `lib.lua`).
#[derive(Debug)]
pub(crate) struct Reply {
    /// 0 ok, or one of the refusals of [`Status`].
    pub status: Status,
    /// Tasks the script made READY (consumers to wake).
    pub ready: u64,
    /// The earliest timer the script set that may be earlier than the promoter's sleep.
    pub wake: Option<Millis>,
    /// Tasks that went DEAD.
    pub dead: u64,
    /// Tasks whose expiry the script applied (DEAD or deleted).
    pub expired: u64,
    /// The receipts of tasks that left ACTIVE in a partition whose limits are topic-wide:
    /// their permits are to be given back.
    pub freed: Vec<String>,
    /// The script's own values.
    pub payload: Vec<Value>,
}

/// How a transition script ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    NotFound,
    /// The task is in this state (code), which the operation does not apply to.
    WrongState(u8),
    StaleReceipt,
    /// A newer lease holder has worked on the partition; the token is the newer one.
    Fenced(u64),
    /// A new due at or after the task's expiry (reschedule); the expiry.
    PastExpiry(u64),
    /// A touch of a task of a topic with topic-wide limits whose permit must be held longer
    /// first (the payload says the receipt, key and ttr).
    NeedsPermit,
}

impl Status {
    /// A script's status code and the value after it (the state, token or expiry that some
    /// refusals carry); `None` for a code no script gives.
    pub fn from_codes(status: i64, first: i64) -> Option<Status> {
        Some(match status {
            0 => Status::Ok,
            -1 => Status::NotFound,
            -2 => Status::WrongState(u8::try_from(first).unwrap_or(u8::MAX)),
            -3 => Status::StaleReceipt,
            -4 => Status::Fenced(u64::try_from(first).unwrap_or(0)),
            -5 => Status::PastExpiry(u64::try_from(first).unwrap_or(0)),
            -6 => Status::NeedsPermit,
            _ => return None,
        })
    }
}

impl Reply {
    pub fn parse(value: Value, op: &str) -> Result<Reply, BackendError> {
        let Value::Array(items) = value else {
            return Err(BackendError::protocol(
                op,
                format!("not an array: {value:?}"),
            ));
        };
        if items.len() < 6 {
            return Err(BackendError::protocol(op, "fewer than 6 values"));
        }
        let mut items = items.into_iter();
        let mut next_int = |what: &str| -> Result<i64, BackendError> {
            let v = items.next().unwrap_or(Value::Nil);
            int(&v).ok_or_else(|| BackendError::protocol(op, format!("{what} is {v:?}")))
        };
        let status = next_int("status")?;
        let ready = next_int("ready count")?;
        let wake = next_int("wake time")?;
        let dead = next_int("dead count")?;
        let expired = next_int("expired count")?;
        let freed_n = usize::try_from(next_int("freed count")?)
            .map_err(|_| BackendError::protocol(op, "a negative freed count"))?;
        let freed = items
            .by_ref()
            .take(freed_n)
            .map(|v| text(&v))
            .collect::<Option<Vec<String>>>()
            .filter(|f| f.len() == freed_n)
            .ok_or_else(|| BackendError::protocol(op, "bad freed receipts"))?;
        let payload: Vec<Value> = items.collect();
        let first = payload.first().and_then(int).unwrap_or(0);
        let status = Status::from_codes(status, first)
            .ok_or_else(|| BackendError::protocol(op, format!("status {status}")))?;
        Ok(Reply {
            status,
            ready: u64::try_from(ready).unwrap_or(0),
            wake: u64::try_from(wake).ok(),
            dead: u64::try_from(dead).unwrap_or(0),
            expired: u64::try_from(expired).unwrap_or(0),
            freed,
            payload,
        })
    }
}

/// What a run's promotions leave for the instance to record (`append_events` in `lib.lua`):
/// the due times of the promoted tasks, and the events of traced tasks.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Events {
    /// The due of each task made READY by its due.
    pub dues: Vec<Millis>,
    /// Fires and DEADs of tasks that carry a trace context, for their spans.
    pub traced: Vec<Traced>,
}

/// One event of a traced task.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Traced {
    /// `None`: it fired (became READY by its due); else why it went DEAD by itself
    /// (`ttr_expired`: its last attempt's ttr passed; `expired`: its expiry passed).
    pub dead: Option<&'static str>,
    pub id: String,
    pub due: Millis,
    pub trace: delayq::TraceContext,
}

impl Events {
    /// Reads the tail of a payload that `append_events` wrote.
    pub fn parse(rest: &[Value]) -> Option<Events> {
        let n = rest
            .first()
            .and_then(int)
            .and_then(|n| usize::try_from(n).ok())?;
        let dues = rest
            .get(1..1 + n)?
            .iter()
            .map(|v| int(v).and_then(|d| u64::try_from(d).ok()))
            .collect::<Option<Vec<_>>>()?;
        let traced = rest[1 + n..]
            .chunks(4)
            .map(|e| {
                let [kind, id, due, trace] = e else {
                    return None;
                };
                Some(Traced {
                    dead: match text(kind)?.as_str() {
                        "fire" => None,
                        "dead" => Some("ttr_expired"),
                        "expired" => Some("expired"),
                        _ => return None,
                    },
                    id: text(id)?,
                    due: u64::try_from(int(due)?).ok()?,
                    trace: crate::record::parse_trace_text(&text(trace)?)?,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Events { dues, traced })
    }
}

/// An integer reply, or a bulk string holding one.
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Double(d) => Some(*d as i64),
        _ => None,
    }
}

/// A reply as raw bytes (a task body).
pub(crate) fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

/// A string reply.
pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// Members and scores of a `WITHSCORES` reply (flat in RESP2, pairs in RESP3).
pub(crate) fn scored(value: &Value) -> Vec<(String, f64)> {
    let Value::Array(items) = value else {
        return Vec::new();
    };
    let score = |v: &Value| match v {
        Value::Double(d) => Some(*d),
        other => text(other)?.parse().ok(),
    };
    if items.iter().all(|v| matches!(v, Value::Array(_))) {
        items
            .iter()
            .filter_map(|pair| match pair {
                Value::Array(p) if p.len() == 2 => Some((text(&p[0])?, score(&p[1])?)),
                _ => None,
            })
            .collect()
    } else {
        items
            .chunks_exact(2)
            .filter_map(|p| Some((text(&p[0])?, score(&p[1])?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// An invocation's `FCALL`: the function, the count of keys, the keys (the partition's
    /// in `KEYS` order), then the arguments, each byte for byte as given.
    #[test]
    fn an_invocation_is_one_fcall_of_its_keys_then_its_arguments() {
        let pk = crate::keys::Keys::new("dq").partition("orders", 3);
        let mut inv = SCRIPTS.add.prepare_invoke();
        inv.partition_keys(&pk)
            .key("dq:{orders#3}:extra-key")
            .arg(17u64)
            .arg("")
            .arg(&b"a\nbody"[..])
            .arg_fmt(format_args!("{:016x}", 255u64))
            .arg(-4i64);
        let got: Vec<Vec<u8>> = inv
            .cmd()
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                _ => panic!("a cursor argument"),
            })
            .collect();
        let mut want: Vec<Vec<u8>> = vec![
            b"FCALL".to_vec(),
            SCRIPTS.add.function.as_bytes().to_vec(),
            b"18".to_vec(),
        ];
        want.extend(pk.sets().map(String::into_bytes));
        want.push(b"dq:{orders#3}:extra-key".to_vec());
        for arg in [&b"17"[..], b"", b"a\nbody", b"00000000000000ff", b"-4"] {
            want.push(arg.to_vec());
        }
        assert_eq!(got, want);
    }

    #[test]
    fn replies_parse() {
        /// A reply, then the status, ready count, wake time, expired count and freed receipts
        /// it parses to.
        type Row = (
            Vec<Value>,
            Status,
            u64,
            Option<Millis>,
            u64,
            Vec<&'static str>,
        );
        let i = Value::Int;
        let table: [Row; 8] = [
            (
                vec![i(0), i(2), i(-1), i(0), i(0), i(0)],
                Status::Ok,
                2,
                None,
                0,
                vec![],
            ),
            (
                vec![i(0), i(0), i(99), i(1), i(3), i(0)],
                Status::Ok,
                0,
                Some(99),
                3,
                vec![],
            ),
            (
                vec![i(0), i(0), i(-1), i(0), i(0), i(2), bulk("r1"), bulk("r2")],
                Status::Ok,
                0,
                None,
                0,
                vec!["r1", "r2"],
            ),
            (
                vec![i(-2), i(0), i(-1), i(0), i(0), i(0), i(3)],
                Status::WrongState(3),
                0,
                None,
                0,
                vec![],
            ),
            (
                vec![i(-3), i(0), i(-1), i(0), i(0), i(0), i(0)],
                Status::StaleReceipt,
                0,
                None,
                0,
                vec![],
            ),
            (
                vec![i(-4), i(0), i(-1), i(0), i(0), i(0), bulk("7")],
                Status::Fenced(7),
                0,
                None,
                0,
                vec![],
            ),
            (
                vec![i(-5), i(0), i(-1), i(0), i(0), i(0), i(1_800_000_000_000)],
                Status::PastExpiry(1_800_000_000_000),
                0,
                None,
                0,
                vec![],
            ),
            (
                vec![
                    i(-6),
                    i(0),
                    i(-1),
                    i(0),
                    i(0),
                    i(0),
                    bulk("r"),
                    bulk(""),
                    i(30),
                ],
                Status::NeedsPermit,
                0,
                None,
                0,
                vec![],
            ),
        ];
        for (items, status, ready, wake, expired, freed) in table {
            let r = Reply::parse(Value::Array(items), "testing").unwrap();
            assert_eq!(
                (r.status, r.ready, r.wake, r.expired, r.freed),
                (
                    status,
                    ready,
                    wake,
                    expired,
                    freed.into_iter().map(String::from).collect()
                )
            );
        }
        assert!(Reply::parse(Value::Int(1), "testing").is_err());
        assert!(Reply::parse(Value::Array(vec![Value::Int(5); 5]), "testing").is_err());
        assert!(Reply::parse(Value::Array(vec![Value::Int(0); 4]), "testing").is_err());
        // More freed receipts announced than given.
        let short = vec![i(0), i(0), i(-1), i(0), i(0), i(2), bulk("r1")];
        assert!(Reply::parse(Value::Array(short), "testing").is_err());
    }

    #[test]
    fn scored_reads_both_protocols() {
        let resp2 = Value::Array(vec![bulk("a"), bulk("1"), bulk("b"), bulk("2.5")]);
        let resp3 = Value::Array(vec![
            Value::Array(vec![bulk("a"), Value::Double(1.0)]),
            Value::Array(vec![bulk("b"), Value::Double(2.5)]),
        ]);
        let want = vec![("a".to_owned(), 1.0), ("b".to_owned(), 2.5)];
        assert_eq!(scored(&resp2), want);
        assert_eq!(scored(&resp3), want);
        assert_eq!(scored(&Value::Nil), vec![]);
    }

    #[test]
    fn ints_from_any_encoding() {
        assert_eq!(int(&bulk("1800000000000")), Some(1_800_000_000_000));
        assert_eq!(int(&Value::Int(-1)), Some(-1));
        assert_eq!(int(&bulk("x")), None);
        assert_eq!(int(&Value::Nil), None);
    }
}
