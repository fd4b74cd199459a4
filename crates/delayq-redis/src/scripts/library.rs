//! The function library on a real redis-server: it loads (no global access at load time, no
//! function over Lua's upvalue limit), a call finds no state of the call before it, a Redis
//! that lost its functions gets them again on the next call, and two versions of the code
//! live side by side.

use delayq_testkit::RedisServer;
use redis::Value;

use super::{
    Body, Header, LIB, Library, Reply, SCRIPTS, Script, ScriptInvocation, bodies,
    is_missing_function,
};
use crate::keys::Keys;
use crate::keys::PartitionKeys;

/// Every upper-case local of `lib.lua`'s top level that a script assigns (`NAME = ...`,
/// `A, NAME = ...`) or whose fields it assigns (`NAME[k] = ...`) is reset by `begin`: under
/// `FCALL` such a local outlives the call, so a local missing there would carry one call's
/// state into the next.
#[test]
fn every_changed_local_is_reset() {
    let top_level: Vec<&str> = LIB
        .lines()
        .filter_map(|l| l.strip_prefix("local "))
        .filter(|l| !l.starts_with("function "))
        .flat_map(|l| l.split('=').next().unwrap_or("").split(','))
        .map(str::trim)
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .collect();
    assert!(top_level.contains(&"READY_N") && top_level.contains(&"TRACED"));
    let begin = &LIB[LIB.find("local function begin(").expect("begin in lib.lua")..];
    let mut sources: Vec<String> = bodies().into_iter().map(|b| b.source).collect();
    sources.push(LIB.replace(begin, ""));
    let mut changed = Vec::new();
    for line in sources.iter().flat_map(|s| s.lines()).map(str::trim) {
        if line.starts_with("local ") || line.starts_with("--") {
            continue;
        }
        let Some((targets, _)) = line.split_once(" = ") else {
            continue;
        };
        for target in targets.split(',') {
            let name = target.trim().split(['[', '.']).next().unwrap_or("");
            if top_level.contains(&name) && !changed.contains(&name) {
                changed.push(name);
            }
        }
    }
    for name in ["READY_N", "WAKE", "HEADS", "TRACED", "MOVED"] {
        assert!(changed.contains(&name), "the scan finds {name}");
    }
    for name in changed {
        assert!(
            begin.contains(&format!("{name} ")) || begin.contains(&format!("{name},")),
            "{name} is changed by a script but not reset by begin() in lib.lua"
        );
    }
}

/// A call of the partition function `s` at time 1 000.
fn call<'s>(s: &'s Script, pk: &PartitionKeys) -> ScriptInvocation<'s> {
    let header = Header {
        now: 1_000,
        upper: 1_000,
        channel: "ch",
        instance: "me",
        topic: "t",
        partition: 0,
        retention_ms: 60_000,
    };
    header.invoke(s, pk)
}

/// A library with two extra partition functions: one that leaves every counter of a reply
/// set, and one that only replies.
fn leaky() -> (std::sync::Arc<Library>, Vec<Script>) {
    let mut b = bodies();
    b.push(Body::partition(
        "dirty",
        "READY_N = 5\nWAKE = 7\nDEAD_N = 1\nEXPIRED_N = 2\nHEADS[SETS[DELAYED]] = 1\n\
         traced('fire', {id = 'x', due = 1, trace = 't'})\nMOVED = 9\nreturn reply(0, {MOVED})",
    ));
    b.push(Body::partition(
        "clean",
        "return reply(0, append_events({MOVED, tostring(HEADS[SETS[DELAYED]])}, {}))",
    ));
    Library::build(b)
}

#[tokio::test(flavor = "current_thread")]
async fn a_call_starts_from_nothing_the_call_before_left() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (_, scripts) = leaky();
    let pk = Keys::new("dq").partition("t", 0);
    let n = scripts.len();
    let (dirty, clean) = (&scripts[n - 2], &scripts[n - 1]);
    let v: Value = call(dirty, &pk).invoke_async(&mut conn).await.unwrap();
    let r = Reply::parse(v, "dirty").unwrap();
    assert_eq!((r.ready, r.wake, r.dead, r.expired), (5, Some(7), 1, 2));
    let v: Value = call(clean, &pk).invoke_async(&mut conn).await.unwrap();
    let r = Reply::parse(v, "clean").unwrap();
    assert_eq!((r.ready, r.wake, r.dead, r.expired), (0, None, 0, 0));
    // MOVED back at 0, no timer head remembered, no promotions, no traced event.
    assert_eq!(
        r.payload,
        vec![
            Value::Int(0),
            Value::BulkString(b"nil".to_vec()),
            Value::Int(0)
        ]
    );
}

/// The functions Redis has, by library name.
async fn libraries(conn: &mut impl redis::aio::ConnectionLike) -> Vec<String> {
    let listed: Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(conn)
        .await
        .unwrap();
    let text = format!("{listed:?}");
    let mut names: Vec<String> = text
        .split("delayq_")
        .skip(1)
        .map(|s| format!("delayq_{}", &s[..16]))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[tokio::test(flavor = "current_thread")]
async fn a_redis_without_the_functions_gets_them_on_the_next_call() {
    let mut server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_connection_manager().await.unwrap();
    let pk = Keys::new("dq").partition("t", 0);
    let stats = || call(&SCRIPTS.stats, &pk);
    // What Redis answers before the library is loaded is what the reload looks for.
    let err = redis::cmd("FCALL")
        .arg(&SCRIPTS.stats.function)
        .arg(0)
        .query_async::<Value>(&mut conn)
        .await
        .unwrap_err();
    assert!(is_missing_function(&err), "{err:?}");
    assert!(crate::error::outcome_of(&err) == delayq::Outcome::NotApplied);
    assert_eq!(libraries(&mut conn).await, Vec::<String>::new());
    let counts: Vec<i64> = stats().invoke_async(&mut conn).await.unwrap();
    assert_eq!(counts.len(), 13);
    assert_eq!(
        libraries(&mut conn).await,
        vec![SCRIPTS.add.library.name.clone()]
    );
    // A restart without persistence: Redis has no functions any more.
    server.restart();
    let mut counted = None;
    for _ in 0..50 {
        match stats().invoke_async::<Vec<i64>>(&mut conn).await {
            Ok(c) => {
                counted = Some(c);
                break;
            }
            // The connection manager reconnects after the first failure.
            Err(e) => {
                assert!(!is_missing_function(&e), "reloaded, not refused: {e:?}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(counted.map(|c| c.len()), Some(13));
    // Dropped by hand: loaded again too.
    let _: Value = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    let counts: Vec<i64> = stats().invoke_async(&mut conn).await.unwrap();
    assert_eq!(counts.len(), 13);
}

#[tokio::test(flavor = "current_thread")]
async fn two_versions_of_the_code_live_side_by_side() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let (other, scripts) = leaky();
    assert_ne!(other.name, SCRIPTS.add.library.name);
    other.load(&mut conn).await.unwrap();
    SCRIPTS.add.library.load(&mut conn).await.unwrap();
    // Loading again (another instance, the same code) is no error.
    SCRIPTS.add.library.load(&mut conn).await.unwrap();
    let mut want = vec![other.name.clone(), SCRIPTS.add.library.name.clone()];
    want.sort();
    assert_eq!(libraries(&mut conn).await, want);
    // Each version's function runs its own code.
    let clean = &scripts[scripts.len() - 1];
    let pk = Keys::new("dq").partition("t", 0);
    for s in [clean, &SCRIPTS.stats] {
        let v: Value = call(s, &pk).invoke_async(&mut conn).await.unwrap();
        let Value::Array(items) = v else {
            panic!("an array: {v:?}")
        };
        // clean: the reply head and its payload; stats: thirteen values.
        assert_eq!(items.len(), if std::ptr::eq(s, clean) { 9 } else { 13 });
    }
}
