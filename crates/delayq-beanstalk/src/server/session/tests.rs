//! [`Session::apply`] without a socket: command lines fed to sessions over an in-memory
//! queue on a manual clock, and the replies checked byte for byte.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use delayq::{ManualClock, Queue, StorageContext};

use super::{Outcome, Request, Session};
use crate::server::BeanstalkOptions;
use crate::server::state::ServerState;

/// 2027-01-15, a clock that moves only when a test moves it.
const START_MS: u64 = 1_800_000_000_000;

fn server() -> (ManualClock, Arc<ServerState>) {
    let clock = ManualClock::new(START_MS);
    let queue = Queue::memory_with(StorageContext::new(Arc::new(clock.clone())));
    let draining = Arc::new(AtomicBool::new(false));
    let state = ServerState::new(queue, BeanstalkOptions::default(), draining);
    (clock, Arc::new(state))
}

/// What a command comes to, as text: a reply's bytes, `<wait>` or `<close>`.
fn text(outcome: Outcome) -> String {
    match outcome {
        Outcome::Reply(reply) => String::from_utf8_lossy(&reply.to_bytes()).into_owned(),
        Outcome::Wait(_) => "<wait>".into(),
        Outcome::Close => "<close>".into(),
    }
}

/// Runs `input`, a command line with its `\r\n` and, for a `put`, the data that follows, as
/// the connection would: parsed and counted, then applied.
async fn outcome(session: &mut Session, input: &str) -> Outcome {
    let (line, data) = input.split_once("\r\n").expect("a line ends with \\r\\n");
    match session.server.parse_line(line.as_bytes()) {
        Ok(command) => {
            let data = data.as_bytes().to_vec();
            session.apply(Request { command, data }).await
        }
        Err(e) => Outcome::Reply(e.into()),
    }
}

async fn exchange(session: &mut Session, input: &str) -> String {
    text(outcome(session, input).await)
}

/// Runs each input of `table` in turn and checks its reply.
async fn script(session: &mut Session, table: &[(&str, &str)]) {
    for (input, want) in table {
        assert_eq!(exchange(session, input).await, *want, "{input:?}");
    }
}

/// Asserts that the YAML document `doc` holds each of `lines`.
fn assert_has(doc: &str, lines: &[&str]) {
    for line in lines {
        assert!(doc.contains(&format!("\n{line}\n")), "{line:?} in {doc}");
    }
}

#[tokio::test]
async fn a_producer_and_a_worker_on_one_connection() {
    let (_, server) = server();
    let mut s = Session::open(server);
    script(
        &mut s,
        &[
            ("put 0 0 60 5\r\nhello\r\n", "INSERTED 1\r\n"),
            // The id is used up even when the body is refused, as in beanstalkd.
            ("put 0 0 60 5\r\nhelloXY", "EXPECTED_CRLF\r\n"),
            ("put 9 0 60 3\r\nbye\r\n", "INSERTED 3\r\n"),
            ("peek 3\r\n", "FOUND 3 3\r\nbye\r\n"),
            ("peek-ready\r\n", "FOUND 1 5\r\nhello\r\n"),
            ("peek-delayed\r\n", "NOT_FOUND\r\n"),
            ("reserve\r\n", "RESERVED 1 5\r\nhello\r\n"),
            ("release 1 20 0\r\n", "RELEASED\r\n"),
            ("release 1 20 0\r\n", "NOT_FOUND\r\n"),
            ("reserve-with-timeout 0\r\n", "RESERVED 3 3\r\nbye\r\n"),
            ("touch 3\r\n", "TOUCHED\r\n"),
            ("bury 3 7\r\n", "BURIED\r\n"),
            ("touch 3\r\n", "NOT_FOUND\r\n"),
            ("peek-buried\r\n", "FOUND 3 3\r\nbye\r\n"),
            // A buried job nobody holds can be deleted, once.
            ("delete 3\r\n", "DELETED\r\n"),
            ("delete 3\r\n", "NOT_FOUND\r\n"),
            ("reserve\r\n", "RESERVED 1 5\r\nhello\r\n"),
            ("delete 1\r\n", "DELETED\r\n"),
            ("reserve-with-timeout 0\r\n", "TIMED_OUT\r\n"),
            ("quit\r\n", "<close>"),
        ],
    )
    .await;
}

#[tokio::test]
async fn tubes_used_and_watched() {
    let (_, server) = server();
    let mut s = Session::open(server);
    script(
        &mut s,
        &[
            ("use jobs\r\n", "USING jobs\r\n"),
            ("list-tube-used\r\n", "USING jobs\r\n"),
            ("put 0 0 60 1\r\nx\r\n", "INSERTED 1\r\n"),
            // `default` is watched, not `jobs`.
            ("reserve-with-timeout 0\r\n", "TIMED_OUT\r\n"),
            ("watch jobs\r\n", "WATCHING 2\r\n"),
            ("watch jobs\r\n", "WATCHING 2\r\n"),
            ("ignore default\r\n", "WATCHING 1\r\n"),
            ("ignore jobs\r\n", "NOT_IGNORED\r\n"),
            ("ignore nothing\r\n", "WATCHING 1\r\n"),
            ("list-tubes-watched\r\n", "OK 11\r\n---\n- jobs\n\r\n"),
            ("list-tubes\r\n", "OK 21\r\n---\n- default\n- jobs\n\r\n"),
            ("reserve-with-timeout 0\r\n", "RESERVED 1 1\r\nx\r\n"),
            ("stats-tube nothing\r\n", "NOT_FOUND\r\n"),
            ("pause-tube nothing 1\r\n", "NOT_FOUND\r\n"),
        ],
    )
    .await;
}

#[tokio::test]
async fn lines_that_are_no_command_are_answered_and_puts_among_them_counted() {
    let (_, server) = server();
    let mut s = Session::open(Arc::clone(&server));
    script(
        &mut s,
        &[
            ("bogus\r\n", "UNKNOWN_COMMAND\r\n"),
            ("put 0 0 60 65536\r\n", "JOB_TOO_BIG\r\n"),
            ("put 0 0 60 x\r\n", "BAD_FORMAT\r\n"),
            ("put 0 0 60 1 \r\n", "BAD_FORMAT\r\n"),
            ("delete x\r\n", "BAD_FORMAT\r\n"),
            ("reserve-job 99\r\n", "NOT_FOUND\r\n"),
            ("kick-job 99\r\n", "NOT_FOUND\r\n"),
        ],
    )
    .await;
    let cmd = server.counters.commands();
    // The too-big put and the one with trailing bytes; not the one without numbers.
    assert_eq!(cmd.put, 2);
    // A kick-job counts as a kick; reserve-job is not counted (beanstalkd 1.12).
    assert_eq!(cmd.kick, 1);
    assert_eq!((cmd.reserve, cmd.reserve_with_timeout), (0, 0));
    assert_eq!(cmd.delete, 0);
}

#[tokio::test]
async fn kicks_are_counted_per_job() {
    let (_, server) = server();
    let mut s = Session::open(server);
    script(
        &mut s,
        &[
            ("put 0 0 60 1\r\na\r\n", "INSERTED 1\r\n"),
            ("put 0 100 60 1\r\nb\r\n", "INSERTED 2\r\n"),
            ("reserve\r\n", "RESERVED 1 1\r\na\r\n"),
            ("bury 1 0\r\n", "BURIED\r\n"),
            // Buried jobs first; the delayed one stays.
            ("kick 5\r\n", "KICKED 1\r\n"),
            ("kick-job 2\r\n", "KICKED\r\n"),
            ("kick-job 2\r\n", "NOT_FOUND\r\n"),
            ("kick 5\r\n", "KICKED 0\r\n"),
        ],
    )
    .await;
    let doc = exchange(&mut s, "stats-job 1\r\n").await;
    assert_has(
        &doc,
        &["state: ready", "kicks: 1", "buries: 1", "reserves: 1"],
    );
    let doc = exchange(&mut s, "stats-job 2\r\n").await;
    assert_has(&doc, &["state: ready", "kicks: 1", "delay: 100"]);
}

#[tokio::test]
async fn times_follow_the_queues_clock() {
    let (clock, server) = server();
    let mut s = Session::open(server);
    script(
        &mut s,
        &[
            ("put 0 10 3 1\r\na\r\n", "INSERTED 1\r\n"),
            ("put 0 0 3 1\r\nb\r\n", "INSERTED 2\r\n"),
            ("peek-delayed\r\n", "FOUND 1 1\r\na\r\n"),
        ],
    )
    .await;
    clock.advance(4_000);
    assert_has(
        &exchange(&mut s, "stats-job 1\r\n").await,
        &["state: delayed", "delay: 10", "time-left: 6", "age: 4"],
    );
    script(&mut s, &[("reserve\r\n", "RESERVED 2 1\r\nb\r\n")]).await;
    assert_has(
        &exchange(&mut s, "stats-job 2\r\n").await,
        &["state: reserved", "ttr: 3", "time-left: 3"],
    );
    // Two seconds of the ttr left: no ready job, and not yet inside the safety margin.
    clock.advance(1_000);
    assert_eq!(
        exchange(&mut s, "reserve-with-timeout 5\r\n").await,
        "<wait>"
    );
    // One second left: beanstalkd's safety margin.
    clock.advance(1_000);
    script(
        &mut s,
        &[
            ("reserve\r\n", "DEADLINE_SOON\r\n"),
            ("touch 2\r\n", "TOUCHED\r\n"),
        ],
    )
    .await;
    assert_has(
        &exchange(&mut s, "stats-job 2\r\n").await,
        &["time-left: 3"],
    );
    // Past the ttr the job is no longer this connection's.
    clock.advance(3_000);
    script(&mut s, &[("release 2 0 0\r\n", "NOT_FOUND\r\n")]).await;
}

#[tokio::test]
async fn a_waiting_reserve_ends_with_a_job_or_its_timeout() {
    let (clock, server) = server();
    let mut worker = Session::open(Arc::clone(&server));
    let mut producer = Session::open(server);
    let Outcome::Wait(wait) = outcome(&mut worker, "reserve-with-timeout 2\r\n").await else {
        panic!("an empty tube makes a reserve wait");
    };
    // Nothing comes: the clock runs out the timeout.
    let ticks = async {
        loop {
            tokio::time::sleep(Duration::from_millis(5)).await;
            clock.advance(250);
        }
    };
    let end = tokio::select! {
        end = worker.wait_for_job(&wait) => end,
        () = ticks => unreachable!("the ticks never end"),
    };
    assert_eq!(text_of_end(&mut worker, end).await, "TIMED_OUT\r\n");
    // A put while it waits ends the wait with that job.
    let Outcome::Wait(wait) = outcome(&mut worker, "reserve\r\n").await else {
        panic!("an empty tube makes a reserve wait");
    };
    let (end, put) = tokio::join!(
        worker.wait_for_job(&wait),
        exchange(&mut producer, "put 0 0 60 2\r\nhi\r\n")
    );
    assert_eq!(put, "INSERTED 1\r\n");
    assert_eq!(
        text_of_end(&mut worker, end).await,
        "RESERVED 1 2\r\nhi\r\n"
    );
}

async fn text_of_end(session: &mut Session, end: crate::server::cmd::WaitEnd) -> String {
    match session.end_wait(end).await {
        Some(reply) => text(Outcome::Reply(reply)),
        None => "<close>".into(),
    }
}

#[tokio::test]
async fn a_closing_connection_gives_its_jobs_back() {
    let (_, server) = server();
    let mut a = Session::open(Arc::clone(&server));
    let mut b = Session::open(Arc::clone(&server));
    script(
        &mut a,
        &[
            ("put 0 0 60 1\r\nx\r\n", "INSERTED 1\r\n"),
            ("reserve\r\n", "RESERVED 1 1\r\nx\r\n"),
        ],
    )
    .await;
    // Held by a: b neither takes nor deletes it.
    script(
        &mut b,
        &[
            ("reserve-with-timeout 0\r\n", "TIMED_OUT\r\n"),
            ("delete 1\r\n", "NOT_FOUND\r\n"),
        ],
    )
    .await;
    assert_has(
        &exchange(&mut b, "stats\r\n").await,
        &[
            "current-connections: 2",
            "current-producers: 1",
            "current-workers: 2",
            "total-jobs: 1",
        ],
    );
    a.close().await;
    script(
        &mut b,
        &[("reserve-with-timeout 0\r\n", "RESERVED 1 1\r\nx\r\n")],
    )
    .await;
    assert_has(
        &exchange(&mut b, "stats\r\n").await,
        &[
            "current-connections: 1",
            "current-producers: 0",
            "cmd-reserve-with-timeout: 2",
            "cmd-stats: 2",
        ],
    );
}

#[tokio::test]
async fn tube_stats_and_pauses() {
    let (clock, server) = server();
    let mut s = Session::open(server);
    script(
        &mut s,
        &[
            ("put 10 0 60 1\r\na\r\n", "INSERTED 1\r\n"),
            ("put 5000 0 60 1\r\nb\r\n", "INSERTED 2\r\n"),
            ("delete 2\r\n", "DELETED\r\n"),
            ("pause-tube default 10\r\n", "PAUSED\r\n"),
            // A paused tube hands out nothing.
            ("reserve-with-timeout 0\r\n", "TIMED_OUT\r\n"),
        ],
    )
    .await;
    let doc = exchange(&mut s, "stats-tube default\r\n").await;
    assert!(doc.starts_with("OK "), "{doc}");
    assert_has(
        &doc,
        &[
            "name: default",
            "current-jobs-urgent: 1",
            "current-jobs-ready: 1",
            "total-jobs: 2",
            "current-using: 1",
            "current-watching: 1",
            "cmd-delete: 1",
            "cmd-pause-tube: 1",
            "pause: 10",
            "pause-time-left: 10",
        ],
    );
    clock.advance(4_000);
    let doc = exchange(&mut s, "stats-tube default\r\n").await;
    assert_has(&doc, &["pause-time-left: 6"]);
    clock.advance(6_000);
    assert_has(
        &exchange(&mut s, "stats-tube default\r\n").await,
        &["pause: 0", "pause-time-left: 0"],
    );
    script(&mut s, &[("reserve\r\n", "RESERVED 1 1\r\na\r\n")]).await;
}

#[tokio::test]
async fn drain_mode_refuses_puts_only() {
    let (_, server) = server();
    let mut s = Session::open(Arc::clone(&server));
    script(&mut s, &[("put 0 0 60 1\r\na\r\n", "INSERTED 1\r\n")]).await;
    server.draining.store(true, Ordering::Release);
    script(
        &mut s,
        &[
            ("put 0 0 60 1\r\nb\r\n", "DRAINING\r\n"),
            ("reserve\r\n", "RESERVED 1 1\r\na\r\n"),
            ("delete 1\r\n", "DELETED\r\n"),
        ],
    )
    .await;
    assert_has(&exchange(&mut s, "stats\r\n").await, &["draining: true"]);
}
