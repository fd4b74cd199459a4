//! Differential tests: the same command sequences sent to Debian's beanstalkd 1.12 and to
//! delayq's listener (in memory, embedded, and on a redis-server the test starts), the replies
//! compared after normalising what
//! legitimately differs (the values of `stats` keys that describe the process: pid, version,
//! rusage, uptime, id, hostname, os, platform, binlog; ages and times left; the count of
//! connections, which the harness's start-up probe changes). Job ids are not normalised:
//! both servers start from 1 and number puts in order.
//!
//! Hand-written sequences cover every command and error of protocol.txt; generated
//! sequences (a seeded generator, so a failure names its seed) mix them at random over two
//! connections. docs/beanstalk.md lists the differences that remain and why; each is left
//! out of these sequences with a comment naming it.

mod support;

use std::time::Duration;

use support::{Beanstalkd, Client, Delayq, Got, Mode};

/// One step: send bytes on a connection and read one reply (or see that none comes).
#[derive(Debug, Clone)]
struct Step {
    conn: usize,
    send: Vec<u8>,
    wait: Duration,
}

fn c(conn: usize, command: &str) -> Step {
    Step {
        conn,
        send: format!("{command}\r\n").into_bytes(),
        wait: Duration::from_secs(3),
    }
}

fn raw(conn: usize, bytes: &[u8], wait_ms: u64) -> Step {
    Step {
        conn,
        send: bytes.to_vec(),
        wait: Duration::from_millis(wait_ms),
    }
}

const VOLATILE: &[&str] = &[
    "pid",
    "version",
    "rusage-utime",
    "rusage-stime",
    "uptime",
    "id",
    "hostname",
    "os",
    "platform",
    "binlog-oldest-index",
    "binlog-current-index",
    "binlog-records-migrated",
    "binlog-records-written",
    "binlog-max-size",
    "age",
    "time-left",
    "pause-time-left",
    "total-connections",
    "current-connections",
];

fn normalise(got: &Got) -> String {
    match got {
        Got::Reply(line, Some(data)) if line.starts_with("OK ") => {
            let doc = String::from_utf8_lossy(data);
            let lines: Vec<String> = doc
                .lines()
                .map(|l| match l.split_once(": ") {
                    Some((k, _)) if VOLATILE.contains(&k) => format!("{k}: *"),
                    _ => l.to_owned(),
                })
                .collect();
            format!("OK|{}", lines.join("\n"))
        }
        other => support::show(other),
    }
}

async fn transcript(addr: std::net::SocketAddr, steps: &[Step]) -> Vec<String> {
    let conns = steps.iter().map(|s| s.conn).max().unwrap_or(0) + 1;
    let mut clients = Vec::new();
    for _ in 0..conns {
        let mut client = Client::connect(addr).await;
        // An answered command: the server has taken the connection in (its counts include
        // it) before any step runs. Not part of the transcript.
        assert_eq!(client.cmd("list-tube-used").await, "USING default");
        clients.push(client);
    }
    let mut out = Vec::new();
    for step in steps {
        let client = &mut clients[step.conn];
        client.send(&step.send).await;
        out.push(normalise(&client.read(step.wait).await));
    }
    out
}

async fn compare(name: &str, steps: &[Step]) {
    for mode in [Mode::Memory, Mode::Embedded, Mode::Redis] {
        let oracle = Beanstalkd::start().await;
        let want = transcript(oracle.addr, steps).await;
        drop(oracle);
        let delayq = Delayq::start(mode).await;
        let got = transcript(delayq.addr, steps).await;
        delayq.stop().await;
        if want != got {
            let mut report = format!("{name} ({mode:?}) differs from beanstalkd:\n");
            for (i, step) in steps.iter().enumerate() {
                let sent = String::from_utf8_lossy(&step.send);
                let mark = if want.get(i) != got.get(i) {
                    "!!"
                } else {
                    "  "
                };
                report.push_str(&format!(
                    "{mark} [{}] {:?}\n     beanstalkd: {:?}\n     delayq:     {:?}\n",
                    step.conn,
                    sent.chars().take(60).collect::<String>(),
                    want.get(i),
                    got.get(i)
                ));
            }
            panic!("{report}");
        }
    }
}

/// The hand-written sequences: every command and every error.
fn hand_written() -> Vec<(&'static str, Vec<Step>)> {
    let long_tube = "t".repeat(200);
    vec![
        (
            "unknown command",
            vec![c(0, "bogus"), c(0, ""), c(0, "PUT 1 0 1 1"), c(0, "stats")],
        ),
        (
            "put and peek",
            vec![
                raw(0, b"put 0 0 10 5\r\nhello\r\n", 3000),
                c(0, "peek 1"),
                c(0, "peek 2"),
                c(0, "peek-ready"),
                c(0, "peek-delayed"),
                c(0, "peek-buried"),
                c(0, "peek x"),
                c(0, "peek 1 "),
            ],
        ),
        (
            "put errors",
            vec![
                raw(0, b"put 1 0 1 2\r\nabcd\r\n", 3000),
                raw(0, b"", 300),
                c(0, "put 1 0 1"),
                c(0, "put -1 0 1 1"),
                c(0, "put 4294967296 0 1 1"),
                c(0, "put 1 0 1 1 x"),
                raw(0, b"put 1 0 1 65536\r\n", 300),
                raw(0, &[b'x'; 65538], 3000),
                raw(0, b"put 1 0 1 70000 junk\r\n", 300),
                raw(0, &[b'y'; 70002], 3000),
                raw(0, b"put 4294967295 0 0 0\r\n\r\n", 3000),
                c(0, "stats-job 1"),
                c(0, "stats"),
            ],
        ),
        (
            "binary body",
            vec![
                raw(0, b"put 1 0 5 6\r\na\r\n\0\xffb\r\n", 3000),
                c(0, "reserve-with-timeout 0"),
                c(0, "delete 1"),
            ],
        ),
        (
            "too long line",
            vec![
                raw(0, format!("use {}\r\n", "x".repeat(300)).as_bytes(), 3000),
                c(0, "list-tube-used"),
                raw(0, format!("{}\r\n", "z".repeat(222)).as_bytes(), 3000),
                c(0, &format!("use {long_tube}")),
                c(0, &format!("use {long_tube}x")),
            ],
        ),
        (
            "two commands in one packet",
            vec![
                raw(0, b"use a\r\nuse b\r\n", 3000),
                raw(0, b"", 3000),
                c(0, "list-tube-used"),
            ],
        ),
        (
            "reserve, release, bury, kick",
            vec![
                raw(0, b"put 5 0 100 1\r\na\r\n", 3000),
                raw(0, b"put 5 0 100 1\r\nb\r\n", 3000),
                c(0, "reserve"),
                c(0, "stats-job 1"),
                c(1, "release 1 5 0"),
                c(1, "bury 1 5"),
                c(1, "touch 1"),
                c(0, "touch 1"),
                c(0, "bury 1 7"),
                c(0, "stats-job 1"),
                c(0, "peek-buried"),
                c(0, "release 1 1 0"),
                c(0, "kick 10"),
                c(0, "stats-job 1"),
                c(0, "reserve-with-timeout 0"),
                c(0, "release 1 9 0"),
                c(0, "stats-tube default"),
                c(0, "release x 1 0"),
                c(0, "release 1 1"),
                c(0, "bury 1"),
                c(0, "touch"),
                c(0, "touch x"),
                c(0, "kick"),
                c(0, "kick x"),
                c(0, "kick 5 junk"),
            ],
        ),
        (
            "kick-job",
            vec![
                raw(0, b"put 0 0 100 1\r\na\r\n", 3000),
                raw(0, b"put 0 100 100 1\r\nb\r\n", 3000),
                c(0, "kick-job 1"),
                c(0, "kick-job 2"),
                c(0, "stats-job 2"),
                c(0, "kick-job 99"),
                c(0, "kick-job x"),
                c(0, "reserve-with-timeout 0"),
                c(0, "bury 1 0"),
                c(0, "kick-job 1"),
                c(0, "stats-job 1"),
            ],
        ),
        (
            "delayed jobs",
            vec![
                raw(0, b"put 0 100 10 1\r\nd\r\n", 3000),
                c(0, "peek-delayed"),
                c(0, "peek-ready"),
                c(0, "stats-tube default"),
                c(0, "reserve-with-timeout 0"),
                c(0, "kick 5"),
                c(0, "peek-ready"),
            ],
        ),
        (
            "delete",
            vec![
                raw(0, b"put 0 0 100 1\r\na\r\n", 3000),
                raw(0, b"put 0 0 100 1\r\nb\r\n", 3000),
                c(0, "reserve-with-timeout 0"),
                c(1, "delete 1"),
                c(0, "delete 2"),
                c(0, "delete 1"),
                c(0, "delete 1"),
                c(0, "delete"),
                c(0, "delete x"),
                c(0, "delete 1 "),
                c(0, "stats-tube default"),
            ],
        ),
        (
            "tubes",
            vec![
                c(0, "use foo"),
                raw(0, b"put 0 0 100 1\r\nf\r\n", 3000),
                c(0, "list-tubes"),
                c(1, "watch foo"),
                c(1, "watch bar"),
                c(1, "watch foo"),
                c(1, "list-tubes-watched"),
                c(1, "ignore default"),
                c(1, "list-tubes-watched"),
                c(1, "ignore nothere"),
                c(1, "ignore foo"),
                c(1, "ignore bar"),
                c(1, "list-tubes"),
                c(1, "stats-tube foo"),
                c(1, "stats-tube bar"),
                c(1, "stats-tube nothere"),
                c(1, "stats-tube -x"),
                c(0, "use default"),
                c(0, "list-tubes"),
                c(0, "use $a+b/c;d.e_f(g)"),
                c(0, "use -foo"),
                c(0, "use a b"),
                c(0, "watch "),
                c(0, "list-tube-used"),
            ],
        ),
        (
            "multi tube reserve",
            vec![
                c(0, "use a"),
                raw(0, b"put 9 0 100 1\r\na\r\n", 3000),
                c(0, "use b"),
                raw(0, b"put 3 0 100 1\r\nb\r\n", 3000),
                c(1, "watch a"),
                c(1, "watch b"),
                c(1, "reserve-with-timeout 0"),
                c(1, "reserve-with-timeout 0"),
                c(1, "reserve-with-timeout 0"),
            ],
        ),
        (
            "pause",
            vec![
                c(0, "pause-tube default 0"),
                c(0, "pause-tube nothere 10"),
                c(0, "pause-tube default"),
                c(0, "pause-tube -x 1"),
                c(0, "pause-tube default 100"),
                raw(0, b"put 0 0 100 1\r\np\r\n", 3000),
                c(0, "reserve-with-timeout 0"),
                c(0, "stats-tube default"),
                c(0, "peek-ready"),
            ],
        ),
        (
            "reserve timeouts",
            vec![
                c(0, "reserve-with-timeout 0"),
                c(0, "reserve-with-timeout 1"),
                c(0, "reserve-with-timeout x"),
                c(0, "reserve "),
                c(0, "reserve-with-timeout"),
                c(0, "reserve-job x"),
                c(0, "reserve-job 5"),
            ],
        ),
        (
            "reserve-job of ready, delayed, buried and paused jobs",
            vec![
                raw(0, b"put 5 0 100 1\r\na\r\n", 3000),
                raw(0, b"put 6 0 100 1\r\nb\r\n", 3000),
                raw(0, b"put 7 100 100 1\r\nc\r\n", 3000),
                c(0, "reserve-job 2"),
                c(1, "reserve-job 2"),
                c(1, "reserve-job 3"),
                c(1, "stats-job 3"),
                c(0, "bury 2 9"),
                c(1, "reserve-job 2"),
                c(1, "stats-job 2"),
                c(1, "release 2 9 0"),
                c(0, "pause-tube default 100"),
                c(0, "reserve-job 1"),
                c(0, "stats-tube default"),
                c(0, "delete 1"),
                c(0, "reserve-job 1"),
                c(1, "reserve-job 99"),
                c(1, "reserve-job 0"),
                c(1, "reserve-job -1"),
                c(0, "stats"),
            ],
        ),
        (
            "deadline soon",
            vec![
                raw(0, b"put 0 0 1 1\r\na\r\n", 3000),
                c(0, "reserve-with-timeout 0"),
                c(0, "reserve-with-timeout 5"),
            ],
        ),
        (
            "quit releases",
            vec![
                raw(0, b"put 0 0 100 1\r\na\r\n", 3000),
                c(1, "reserve-with-timeout 0"),
                raw(1, b"quit\r\n", 1000),
                c(0, "reserve-with-timeout 1"),
            ],
        ),
        (
            "stats counters",
            vec![
                raw(0, b"put 1 0 100 1\r\na\r\n", 3000),
                raw(0, b"put 2000 0 100 1\r\nb\r\n", 3000),
                c(0, "peek 1"),
                c(0, "reserve-with-timeout 0"),
                c(0, "stats"),
                c(0, "stats-tube default"),
                c(0, "stats "),
                c(0, "list-tubes "),
                c(0, "stats-job"),
                c(0, "stats-job x"),
            ],
        ),
        (
            "quit",
            vec![raw(0, b"quitx\r\n", 1000), raw(0, b"stats\r\n", 1000)],
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_written_sequences_match_beanstalkd() {
    let cases = hand_written();
    println!("{} hand-written sequences", cases.len());
    for (name, steps) in cases {
        compare(name, &steps).await;
    }
}

/// A small seeded generator (xorshift64*), so a failing sequence can be replayed by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn random_sequence(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let tubes = ["default", "a", "b"];
    let mut steps = Vec::new();
    let mut puts = 0u64;
    for _ in 0..len {
        let conn = rng.below(2) as usize;
        let tube = tubes[rng.below(3) as usize];
        let id = rng.below(puts + 2);
        let step = match rng.below(20) {
            0..=4 => {
                puts += 1;
                // Distinct priorities: beanstalkd breaks ties by job id, delayq by due then
                // insertion, which differ after a release (docs/beanstalk.md).
                let pri = puts * 10 + rng.below(5);
                // Equal delays often: jobs due in the same millisecond come out in put order.
                let delay = if rng.below(5) == 0 {
                    100 + rng.below(2)
                } else {
                    0
                };
                let body = format!("job-{puts}-{}", rng.below(1000));
                raw(
                    conn,
                    format!("put {pri} {delay} 100 {}\r\n{body}\r\n", body.len()).as_bytes(),
                    3000,
                )
            }
            5 | 6 => c(conn, "reserve-with-timeout 0"),
            7 => c(conn, &format!("delete {id}")),
            8 => c(
                conn,
                &format!("release {id} {} 0", 1000 + rng.below(1000) * 10 + puts),
            ),
            9 => c(conn, &format!("bury {id} {}", rng.below(100))),
            10 => c(conn, &format!("kick {}", rng.below(3))),
            11 => c(conn, &format!("kick-job {id}")),
            12 => c(conn, &format!("peek {id}")),
            13 => c(
                conn,
                ["peek-ready", "peek-delayed", "peek-buried"][rng.below(3) as usize],
            ),
            14 => c(conn, &format!("use {tube}")),
            15 => c(conn, &format!("watch {tube}")),
            16 => c(conn, &format!("ignore {tube}")),
            17 => c(conn, &format!("stats-job {id}")),
            18 => c(conn, &format!("stats-tube {tube}")),
            19 if rng.below(2) == 0 => c(conn, &format!("reserve-job {id}")),
            _ => c(
                conn,
                [
                    "list-tubes",
                    "list-tubes-watched",
                    "list-tube-used",
                    "touch 1",
                ][rng.below(4) as usize],
            ),
        };
        steps.push(step);
    }
    steps
}

/// How many generated sequences run (DELAYQ_BEANSTALK_RANDOM overrides), 40 steps each.
fn random_count() -> u64 {
    std::env::var("DELAYQ_BEANSTALK_RANDOM")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_sequences_match_beanstalkd() {
    let count = random_count();
    println!("{count} generated sequences of 40 steps");
    for seed in 1..=count {
        compare(&format!("seed {seed}"), &random_sequence(seed, 40)).await;
    }
}
