//! The record format on both sides, on a real redis-server: what `lib.lua`'s `load` then
//! `save` make of a record is byte for byte what `Record::encode` writes, whether the record
//! was in the short form or in the decimal form of the previous release, with a trace
//! context or an expiry or without.

use delayq::{OnExpire, State, TraceContext};
use delayq_testkit::RedisServer;

use crate::keys::Keys;
use crate::record::{self, Record};

/// Loads the record `ARGV[7]` as every script does and saves it back unchanged.
const RESAVE: &str = "save(load(ARGV[7]))\nreturn redis.call('HGET', RECORDS, ARGV[7])";

const CREATED: u64 = 1_795_810_398_845;

fn record(state: State) -> Record {
    let mut r = record::blank(state, CREATED);
    r.due_ms = CREATED + 3_600_000;
    r.seq = (CREATED << 20) | 300;
    r.body = b"a,b\nc".to_vec();
    r
}

/// The decimal form of the release before the short one (eleven fields).
fn decimal(r: &Record) -> Vec<u8> {
    let or_empty = |v: u64| if v == 0 { String::new() } else { v.to_string() };
    let mut out = format!(
        "{},{},{},{},{},{},{},{},{},{},{}\n",
        r.state.code(),
        r.due_ms,
        r.created_at_ms,
        r.updated_at_ms,
        r.ttr_ms,
        r.max_retries,
        or_empty(u64::from(r.retries)),
        or_empty(r.deadline_ms),
        r.receipt,
        r.priority,
        if r.seq == 0 {
            String::new()
        } else {
            format!("{:016x}", r.seq)
        },
    )
    .into_bytes();
    out.extend_from_slice(&r.body);
    out
}

fn table() -> Vec<Record> {
    let mut out = vec![record(State::Delayed)];
    let mut ready = record(State::Ready);
    ready.priority = 0;
    ready.updated_at_ms = CREATED + 5;
    ready.seq = ((CREATED + 3) << 20) | 7;
    out.push(ready);
    let mut active = record(State::Active);
    active.ttr_ms = 60_000;
    active.max_retries = -1;
    active.retries = 2;
    active.updated_at_ms = CREATED + 7_000;
    active.deadline_ms = CREATED + 67_000;
    active.receipt = "00000000000a0001".to_owned();
    active.seq = ((CREATED - 40) << 20) | 0xfffff;
    out.push(active);
    let mut finished = record(State::Finished);
    finished.priority = 99_999;
    finished.max_retries = 0;
    finished.deadline_ms = CREATED + 86_400_000;
    finished.body = Vec::new();
    out.push(finished);
    // Updated and due before created (another instance's clock), no insertion number (a
    // record of the version before them).
    let mut dead = record(State::Dead);
    dead.due_ms = CREATED - 1_000;
    dead.updated_at_ms = CREATED - 3;
    dead.seq = 0;
    out.push(dead);
    // A retention ending at the creation millisecond: an offset of 0, not an empty field.
    let mut cancelled = record(State::Cancelled);
    cancelled.deadline_ms = CREATED;
    out.push(cancelled);
    // A trace context after fields left at their default (a bare traceparent), and after
    // every field, with a tracestate holding commas and a space.
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let mut traced = record(State::Delayed);
    traced.trace = Some(TraceContext::parse(parent, None).unwrap());
    out.push(traced);
    let mut traced = out[2].clone();
    traced.trace = Some(TraceContext::parse(parent, Some("congo=t61rcWkgMzE,rojo=a b")).unwrap());
    out.push(traced.clone());
    // An expiry after fields left at their default (no trace context), and after a trace
    // context, with both policies.
    let mut expiring = record(State::Ready);
    expiring.expiry = Some((CREATED + 7_200_000, OnExpire::Dead));
    out.push(expiring);
    traced.expiry = Some((CREATED + 90_000, OnExpire::Drop));
    out.push(traced.clone());
    // A flow-control key after fields left at their default, and after every field.
    let mut keyed = record(State::Ready);
    keyed.key = Some("merchant-7".to_owned());
    out.push(keyed);
    traced.key = Some("a.b:c@d/e+f=g-1".to_owned());
    out.push(traced);
    out
}

#[tokio::test(flavor = "current_thread")]
async fn the_scripts_write_what_rust_encodes() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let pk = Keys::new("dq").partition("t", 0);
    let (_, scripts) = super::Library::build(vec![super::Body::partition("resave", RESAVE)]);
    let script = &scripts[0];
    for (i, want) in table().iter().enumerate() {
        let id = format!("r{i}");
        // The decimal form never held a trace context, an expiry or a key.
        let forms = if want.trace.is_some() || want.expiry.is_some() || want.key.is_some() {
            vec![want.encode()]
        } else {
            vec![want.encode(), decimal(want)]
        };
        for stored in forms {
            let _: () = redis::cmd("HSET")
                .arg(pk.records())
                .arg(&id)
                .arg(&stored)
                .query_async(&mut conn)
                .await
                .unwrap();
            let mut inv = script.prepare_invoke();
            for key in pk.sets() {
                inv.key(key);
            }
            // `now` 1: no retention has ended.
            inv.arg(1)
                .arg("ch")
                .arg("me")
                .arg("t")
                .arg(0)
                .arg(60_000)
                .arg(&id);
            let saved: Vec<u8> = inv.invoke_async(&mut conn).await.unwrap();
            assert_eq!(
                String::from_utf8_lossy(&saved),
                String::from_utf8_lossy(&want.encode()),
                "from {:?}",
                String::from_utf8_lossy(&stored)
            );
            assert_eq!(Record::parse(saved).as_ref(), Some(want));
        }
    }
}
