//! Real crashes: a helper process appends from several threads (with snapshots running) and
//! prints what was acknowledged; it is killed with SIGKILL at random moments, over several
//! rounds in one directory. After each kill the log must hold every acknowledged record at
//! its sequence number, nothing twice, nothing invented, in order, and everything recovered
//! after the previous kill.
//!
//! Set `DELAYQ_CRASH_SEED` to replay a failing run.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::Child;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delayq_log::{LogOptions, inspect};
use support::{crash_writer, open};

/// A tiny xorshift generator: the test needs a few random delays, not a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Runs one round: starts the helper, kills it after a random delay, returns its acks.
fn crash_round(
    dir: &std::path::Path,
    policy: &str,
    round: u32,
    rng: &mut Rng,
) -> Vec<(u64, String)> {
    let mut child: Child = crash_writer::spawn(dir, policy, 4, round);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let reader = thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut acks = Vec::new();
        let mut opened = false;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => break,
                // A line cut by the kill has no newline; it was not fully reported.
                Ok(_) if !line.ends_with('\n') => break,
                Ok(_) => {}
            }
            let mut parts = line.trim_end().splitn(3, ' ');
            match parts.next() {
                Some("open") => {
                    opened = true;
                    tx.send(()).unwrap()
                }
                Some("ack") => {
                    let seq: u64 = parts.next().unwrap().parse().unwrap();
                    acks.push((seq, parts.next().unwrap().to_string()));
                }
                // The test harness's header comes before the writer's first line.
                _ if !opened => {}
                other => panic!("unexpected helper output {other:?}"),
            }
        }
        acks
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("the helper opened the log");
    thread::sleep(Duration::from_millis(50 + rng.below(350)));
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "the helper exited on its own: {status}");
    reader.join().unwrap()
}

/// Parses `r<round>-t<thread>-<n>`.
fn parse(payload: &[u8]) -> (u32, u32, u64) {
    let text = std::str::from_utf8(payload).expect("payload is text");
    let mut parts = text.split('-');
    let mut field = |prefix: &str| -> String {
        let part = parts
            .next()
            .unwrap_or_else(|| panic!("invented record {text:?}"));
        part.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("invented record {text:?}"))
            .to_string()
    };
    let round = field("r").parse().unwrap();
    let thread = field("t").parse().unwrap();
    let n = field("").parse().unwrap();
    (round, thread, n)
}

/// Not a test of its own: the body of the crash writer, which the tests here start by running
/// this test binary again ([`crash_writer::spawn`]); without its variable it does nothing.
#[test]
fn crash_writer_child() {
    crash_writer::run_if_child();
}

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    let seed = std::env::var("DELAYQ_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("DELAYQ_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let mut previous: Vec<Vec<u8>> = Vec::new();
    let rounds = ["always"; 10].into_iter().chain(["interval"; 2]);

    for (round, policy) in rounds.enumerate() {
        let round = round as u32;
        let acks = crash_round(dir.path(), policy, round, &mut rng);
        assert!(
            !acks.is_empty(),
            "round {round}: nothing acknowledged before the kill"
        );
        for (seq, payload) in acks {
            assert!(
                acked.insert(seq, payload).is_none(),
                "seq {seq} acknowledged twice"
            );
        }

        let (log, report, replay) = open(dir.path(), LogOptions::default())
            .unwrap_or_else(|e| panic!("round {round} ({policy}): {e}"));
        // The snapshot holds records 1..=covers, the log the ones after, without a gap.
        assert_eq!(replay.snapshot.len() as u64, report.snapshot_covers_seq);
        for (i, (seq, _)) in replay.records.iter().enumerate() {
            assert_eq!(
                *seq,
                report.snapshot_covers_seq + 1 + i as u64,
                "round {round}"
            );
        }
        let recovered = replay.all();

        // Every acknowledged record is there, at its sequence number.
        for (seq, payload) in &acked {
            let got = recovered.get(*seq as usize - 1).map(|r| r.as_slice());
            assert_eq!(
                got,
                Some(payload.as_bytes()),
                "round {round}: acked seq {seq} lost"
            );
        }
        // Nothing invented or duplicated, order kept: each writer thread's records are
        // exactly 0, 1, 2, ... in sequence order.
        let mut next_n: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for record in &recovered {
            let (r, t, n) = parse(record);
            let want = next_n.entry((r, t)).or_insert(0);
            assert_eq!(
                n, *want,
                "round {round}: r{r}-t{t} out of order, duplicated or holed"
            );
            *want += 1;
        }
        // What survived the previous crash survived this one.
        assert_eq!(
            recovered[..previous.len()],
            previous[..],
            "round {round}: earlier records changed"
        );
        previous = recovered;
        println!(
            "round {round} ({policy}): {} records ({} from the snapshot), {} acked so far, torn tail {:?}",
            previous.len(),
            report.snapshot_records,
            acked.len(),
            report.torn_tail.map(|t| t.bytes_cut)
        );
        log.close().unwrap();
    }
    let found = inspect(dir.path()).unwrap();
    assert!(found.is_clean(), "{:?}", found.problems);
}
