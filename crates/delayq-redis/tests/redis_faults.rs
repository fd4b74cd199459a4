//! Redis going away and coming back: requests fail with `Unavailable` (HTTP 503) naming the
//! operation, nothing panics, and once Redis is back (append-only file, fsync always) every
//! acknowledged task is there and the ones that came due meanwhile fire at once.

mod support;

use std::time::{Duration, Instant};

use delayq::{Clock, ErrorKind, NewTask, OnDuplicate, Outcome, PopOptions, State, SystemClock};
use support::{Instance, RedisServer, eventually, options};

/// Runs `op` and checks it fails as Unavailable within a bound, with a useful message.
async fn assert_unavailable<T: std::fmt::Debug>(
    what: &str,
    server: &RedisServer,
    op: impl std::future::Future<Output = delayq::Result<T>>,
) {
    let started = Instant::now();
    let err = op.await.expect_err(what);
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{what}: {err}");
    assert!(err.is_retryable());
    let text = err.to_string();
    eprintln!("{what} while Redis is down ({took:?}): {text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", server.port())),
        "{what}: the message names Redis: {text}"
    );
    assert!(took < Duration::from_secs(10), "{what} took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_gives_unavailable_and_recovery_loses_nothing() {
    let mut server = RedisServer::start_with_aof();
    let i = Instance::system(options(&server)).await;
    let q = &i.queue;
    let clock = SystemClock::new();
    let due = clock.now_ms() + 1_000;
    let tasks = (0..500)
        .map(|n| {
            NewTask::new("t", format!("k{n}"))
                .run_at_ms(due)
                .body("x".repeat(100))
        })
        .collect();
    for r in q.add_batch(tasks).await.unwrap() {
        r.unwrap();
    }
    q.add(NewTask::new("t", "now")).await.unwrap();
    // A consumer holds one task across the outage.
    let held = q.pop_one("t", 0).await.unwrap().unwrap();
    assert_eq!(held.id, "now");

    server.kill();
    assert_unavailable("add", &server, q.add(NewTask::new("t", "lost"))).await;
    assert_unavailable("pop", &server, q.pop("t", PopOptions::default())).await;
    assert_unavailable("get", &server, q.get("t", "k1")).await;
    assert_unavailable("stats", &server, q.stats("t")).await;
    assert_unavailable("finish", &server, q.finish("t", "now", None)).await;
    assert_unavailable("ready", &server, q.check_ready()).await;
    // Stay down past the due time.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(clock.now_ms() > due);

    server.restart();
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.check_ready().await.is_ok()
        })
        .await,
        "the backend reconnects by itself"
    );
    // Everything acknowledged is there; what came due meanwhile fires at once.
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.stats("t")
                .await
                .is_ok_and(|s| s.ready == 500 && s.active == 1 && s.total == 501)
        })
        .await,
        "{:?}",
        q.stats("t").await
    );
    q.finish("t", "now", Some(&held.receipt)).await.unwrap();
    let got = q
        .pop("t", PopOptions::default().count(1_000))
        .await
        .unwrap();
    assert_eq!(got.len(), 500);
    assert!(
        q.get("t", "lost")
            .await
            .is_err_and(|e| e.kind() == ErrorKind::NotFound)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_long_poll_survives_an_outage() {
    let mut server = RedisServer::start_with_aof();
    let a = Instance::system(options(&server)).await;
    let clock = SystemClock::new();
    a.queue
        .add(NewTask::new("t", "late").run_at_ms(clock.now_ms() + 1_500))
        .await
        .unwrap();
    let waiter = {
        let q = a.queue.clone();
        tokio::spawn(async move { q.pop("t", PopOptions::default().timeout_ms(30_000)).await })
    };
    assert!(
        eventually(Duration::from_secs(5), || async {
            a.queue.context().waiters.parked() == 1
        })
        .await
    );
    // A pop parks before its first look at Redis; let that look finish (an outage during the
    // first look is reported to the caller at once, by design).
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    server.restart();
    // The event of the promotion is published after the subscription is back, or the
    // resubscription wakes the parked consumer to look again: either way it gets the task.
    let got = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the parked pop returns")
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id, "late");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_while_redis_is_down_then_it_comes_up() {
    let mut server = RedisServer::start_with_aof();
    server.kill();
    let i = Instance::system(options(&server)).await;
    assert_unavailable("ready", &server, i.queue.check_ready()).await;
    assert_unavailable("add", &server, i.queue.add(NewTask::new("t", "a"))).await;
    server.restart();
    assert!(
        eventually(Duration::from_secs(10), || async {
            i.queue.check_ready().await.is_ok()
        })
        .await
    );
    i.queue
        .add(NewTask::new("t", "a").delay_ms(200))
        .await
        .unwrap();
    // Promoted by this instance's promoter once its leases are in place.
    assert!(
        eventually(Duration::from_secs(10), || async {
            i.queue
                .get("t", "a")
                .await
                .is_ok_and(|t| t.state == State::Ready)
        })
        .await
    );
}

/// Sends `signal` (`STOP`, `CONT`) to the redis-server.
fn signal(server: &RedisServer, signal: &str) {
    let pid = server.pid().expect("redis-server runs").to_string();
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_lost_after_the_write_is_outcome_unknown_and_a_refusal_is_not_applied() {
    let mut server = RedisServer::start();
    let short = options(&server).response_timeout(Duration::from_millis(300));
    let i = Instance::system(short).await;
    let q = &i.queue;
    // The topic's partition count is known, so the add below is one script.
    q.add(NewTask::new("t", "first")).await.unwrap();

    // Redis is stopped, not gone: the script is sent and queued, and runs once Redis goes on.
    signal(&server, "STOP");
    let err = q
        .add(NewTask::new("t", "maybe"))
        .await
        .expect_err("no reply while Redis is stopped");
    signal(&server, "CONT");
    eprintln!("add while Redis is stopped: {err}");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert_eq!(err.outcome(), Outcome::Unknown, "{err}");
    assert!(
        err.to_string().contains("may or may not have taken effect"),
        "{err}"
    );
    // And it did take effect: the answer was right not to say it did not.
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.get("t", "maybe").await.is_ok()
        })
        .await,
        "the add sent before the timeout ran when Redis went on"
    );
    // Adding again with keep is the safe retry.
    let again = q
        .add(NewTask::new("t", "maybe").on_duplicate(OnDuplicate::Keep))
        .await
        .unwrap();
    assert_eq!(again, delayq::AddOutcome::Existed);

    // Gone: once the connection is refused, nothing was sent, and the error says so.
    server.kill();
    let mut refused = None;
    for _ in 0..50 {
        let err = q
            .add(NewTask::new("t", "never"))
            .await
            .expect_err("Redis is down");
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        if err.outcome() == Outcome::NotApplied {
            refused = Some(err);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = refused.expect("a refused connection is reported as not applied");
    eprintln!("add while Redis is down: {refused}");
}

/// A Redis restarted without persistence has lost the scripts (the function library) with
/// the data: the next calls load them again, and adds, pops, finishes, a new topic's
/// registration and the promoter's ticks work on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_without_persistence_loads_the_scripts_again() {
    let mut server = RedisServer::start();
    let i = Instance::system(options(&server)).await;
    let q = &i.queue;
    q.add(NewTask::new("t", "before")).await.unwrap();
    let functions = |server: &RedisServer| server.command("FUNCTION LIST").unwrap_or_default();
    assert!(functions(&server).contains("delayq_"));
    server.restart();
    assert!(!functions(&server).contains("delayq_"), "a fresh Redis");
    assert!(
        eventually(Duration::from_secs(10), || async {
            q.add(NewTask::new("t", "after")).await.is_ok()
        })
        .await,
        "adds work again"
    );
    assert!(functions(&server).contains("delayq_"));
    let got = q.pop_one("t", 0).await.unwrap().expect("the task");
    assert_eq!(got.id, "after");
    q.finish("t", "after", Some(&got.receipt)).await.unwrap();
    assert!(
        q.get("t", "before")
            .await
            .is_err_and(|e| e.kind() == ErrorKind::NotFound)
    );
    // A topic first used now is registered, and its task promoted by a tick when due.
    q.add(NewTask::new("u", "later").delay_ms(300))
        .await
        .unwrap();
    let got = q.pop_one("u", 10_000).await.unwrap().expect("the task");
    assert_eq!(got.id, "later");
}
