//! `delayq bench memory`: the server's resident memory per delayed task (docs/design.md §6:
//! at most 150 B beyond a 100-byte body, at 1M and at 10M tasks, in one topic and in many).
//!
//! The bench runs beside a server of the same machine whose process id it is given
//! (`--pid`): it first adds one task to each of the `--topics` topics (so that creating a
//! topic is not counted), waits for the server to settle and reads the server's `VmRSS` from
//! `/proc/<pid>/status`; then it adds `--tasks` DELAYED tasks in batches (`--batch` a request,
//! a few requests in flight, task `i` in topic `i % topics`, due in `--delay`), waits again and
//! reads `VmRSS` once more. The figure is the growth divided by the tasks, less the body: what
//! a delayed task costs the server as the operating system counts it, allocator slack, index
//! structures and the log's buffers included. Ids are `t` and 12 digits (13 bytes), the width
//! the add bench uses for its sequence numbers.
//!
//! RSS only grows by pages touched, so it is a figure of the server as it runs, not an
//! estimate from the sizes of its structures (`cargo bench -p delayq --bench embedded` counts
//! the bytes requested from the allocator instead).

use std::time::{Duration, Instant};

use clap::Args;
use delayq_client::{Client, NewTask};

use super::{BenchResult, MAX_TASKS, Target};
use crate::BenchError;
use crate::duration::{format_duration, parse_duration};

/// docs/design.md §6: resident memory per delayed task beyond its 100-byte body.
pub const TARGET: Target = Target {
    op: "<=",
    value: 150.0,
    unit: "B/task",
    condition: "RSS of the server beyond a 100-byte body, 1M and 10M delayed tasks",
};

/// Batch requests in flight while filling.
const FILL_CONCURRENCY: u64 = 4;

/// How long the server is left alone before each reading, so that memory freed by the
/// requests just answered is given back (mimalloc returns freed pages after a short delay).
const SETTLE: Duration = Duration::from_secs(3);

/// The flags of `delayq bench memory`.
#[derive(Debug, Clone, Args)]
pub struct MemoryBench {
    /// The process id of the server (on this machine): its `/proc/<pid>/status` is read.
    #[arg(long)]
    pub pid: u32,
    /// Delayed tasks to add.
    #[arg(long, default_value_t = 1_000_000)]
    pub tasks: u64,
    /// Topics the tasks are spread over.
    #[arg(long, default_value_t = 8)]
    pub topics: u64,
    /// Bytes of body per task.
    #[arg(long, default_value_t = 100)]
    pub body_bytes: usize,
    /// Tasks per request.
    #[arg(long, default_value_t = 1_000)]
    pub batch: usize,
    /// How far in the future the tasks are due (they must stay DELAYED while measured).
    #[arg(long, value_parser = parse_duration, default_value = "1h", value_name = "DURATION")]
    pub delay: u64,
    /// Give the tasks flow-control keys, this many distinct ones in turn (`k-<n>`); 0 adds
    /// plain tasks. A keyed task keeps its key beside its record, so this measures what keys
    /// cost (the target is for plain tasks).
    #[arg(long, default_value_t = 0)]
    pub keys: u64,
}

impl MemoryBench {
    /// Checks the bounds of every setting.
    pub fn validate(&self) -> Result<MemoryBench, BenchError> {
        let check = |ok: bool, what: &str| super::require("memory", ok, what);
        super::in_range("memory", "--tasks", self.tasks, 1..=MAX_TASKS)?;
        super::in_range("memory", "--topics", self.topics, 1..=10_000)?;
        super::in_range("memory", "--batch", self.batch, 1..=10_000)?;
        super::in_range("memory", "--keys", self.keys, 0..=MAX_TASKS)?;
        super::body_bytes("memory", self.body_bytes)?;
        check(
            self.delay >= 60_000,
            "--delay must be at least 1m (the tasks must stay delayed while measured)",
        )?;
        check(
            rss_bytes(self.pid).is_ok(),
            "--pid must be the process id of a server on this machine (/proc/<pid>/status readable)",
        )?;
        Ok(self.clone())
    }
}

/// `VmRSS` of process `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> Result<u64, BenchError> {
    let path = format!("/proc/{pid}/status");
    let text = std::fs::read_to_string(&path).map_err(|err| BenchError::Bench {
        bench: "memory",
        reason: format!("cannot read {path}: {err}"),
    })?;
    parse_vm_rss(&text).ok_or_else(|| BenchError::Bench {
        bench: "memory",
        reason: format!("{path} has no VmRSS line"),
    })
}

/// The CPU time process `pid` has used so far, in user and in kernel mode, from
/// `/proc/<pid>/stat`. Beside a wall-clock time it tells work from waiting (the library
/// bench prints it for each restart).
pub fn cpu_time(pid: u32) -> Result<(Duration, Duration), BenchError> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path).map_err(|err| BenchError::Bench {
        bench: "memory",
        reason: format!("cannot read {path}: {err}"),
    })?;
    parse_cpu_time(&text).ok_or_else(|| BenchError::Bench {
        bench: "memory",
        reason: format!("{path} has no utime and stime fields"),
    })
}

/// The CPU seconds process `pid` has used so far, user and kernel mode together
/// ([`cpu_time`]).
pub fn cpu_seconds(pid: u32) -> Result<f64, BenchError> {
    let (user, system) = cpu_time(pid)?;
    Ok((user + system).as_secs_f64())
}

/// `utime` and `stime` of a `/proc/<pid>/stat` line, fields 14 and 15, in clock ticks of
/// 1/100 s (Linux's `USER_HZ` on every architecture delayq builds for).
fn parse_cpu_time(stat: &str) -> Option<(Duration, Duration)> {
    // The command name, in parentheses, may hold spaces: count fields after its end, where
    // field 3 comes first.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace().skip(14 - 3);
    let mut ticks = || -> Option<Duration> {
        let t: u64 = fields.next()?.parse().ok()?;
        Some(Duration::from_millis(t * 10))
    };
    Some((ticks()?, ticks()?))
}

/// The `VmRSS:   123456 kB` line of a `/proc/<pid>/status`, in bytes.
fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut words = line["VmRSS:".len()..].split_whitespace();
    let kib: u64 = words.next()?.parse().ok()?;
    (words.next()? == "kB").then_some(kib * 1024)
}

fn topic(run: &str, i: u64, topics: u64) -> String {
    format!("mem-{run}-{}", i % topics)
}

/// Adds tasks `from..to` in batches, a few requests in flight; returns how many were added.
async fn fill(
    client: &Client,
    bench: &MemoryBench,
    run: &str,
    from: u64,
    to: u64,
) -> Result<u64, BenchError> {
    let body = "x".repeat(bench.body_bytes);
    let (run, topics, delay, keys) = (run.to_owned(), bench.topics, bench.delay, bench.keys);
    let task = move |i: u64| {
        let task = NewTask::new(topic(&run, i, topics), format!("t{i:012}"))
            .body(body.as_str())
            .delay_ms(delay);
        match keys {
            0 => task,
            n => task.key(format!("k-{}", i % n)),
        }
    };
    let batches = (bench.batch as u64, FILL_CONCURRENCY);
    let added = super::add_in_batches(client, "memory", (from, to), batches, task, |item| {
        item.is_ok()
    })
    .await?;
    if added < to - from {
        return Err(BenchError::Bench {
            bench: "memory",
            reason: format!("the server accepted only {added} of {} tasks", to - from),
        });
    }
    Ok(added)
}

/// Runs `delayq bench memory`.
pub async fn run(client: &Client, bench: &MemoryBench) -> Result<Vec<BenchResult>, BenchError> {
    let run = super::run_id();
    // One task per topic first: the topics' own structures are not a task's cost.
    let warm = bench.topics;
    fill(client, bench, &run, 0, warm).await?;
    tokio::time::sleep(SETTLE).await;
    let before = rss_bytes(bench.pid)?;
    let started = Instant::now();
    let added = fill(client, bench, &run, warm, warm + bench.tasks).await?;
    let fill_s = started.elapsed().as_secs_f64();
    tokio::time::sleep(SETTLE).await;
    let after = rss_bytes(bench.pid)?;
    let per_task = after.saturating_sub(before) as f64 / added as f64;
    let beyond = per_task - bench.body_bytes as f64;
    let mut result = BenchResult::new(
        "memory",
        format!(
            "server VmRSS growth per delayed task beyond its {}-byte body: {} {}tasks over {} \
             topic{}, due in {}, {} a request",
            bench.body_bytes,
            added,
            match bench.keys {
                0 => String::new(),
                n => format!("keyed ({n} keys) "),
            },
            bench.topics,
            if bench.topics == 1 { "" } else { "s" },
            format_duration(bench.delay),
            bench.batch
        ),
        beyond,
        "B/task",
        Some(TARGET),
    );
    result.ops = added;
    result.notes.push(format!(
        "VmRSS {:.1} MiB before, {:.1} MiB after ({per_task:.1} B a task with its body); \
         filled in {fill_s:.1} s",
        before as f64 / 1_048_576.0,
        after as f64 / 1_048_576.0,
    ));
    if added < 1_000_000 {
        result.not_comparable(format!("{added} tasks, not 1M or 10M"));
    }
    if bench.keys > 0 {
        result.not_comparable("keyed tasks (the target is for plain ones)".to_owned());
    }
    if bench.body_bytes != 100 {
        result.not_comparable(format!("{}-byte bodies, not 100", bench.body_bytes));
    }
    Ok(vec![result])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vm_rss_is_read_in_bytes() {
        let status = "Name:\tdelayq\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads:\t4\n";
        assert_eq!(parse_vm_rss(status), Some(12_345 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\tlots kB\n"), None);
        assert_eq!(parse_vm_rss("VmRSS:\t12 MB\n"), None);
    }

    #[test]
    fn cpu_time_is_fields_14_and_15_after_a_name_with_spaces() {
        let line = "4242 (a b) c) S 1 2 3 4 5 6 7 8 9 10 150 25 0 0 20 0 1\n";
        assert_eq!(
            parse_cpu_time(line),
            Some((Duration::from_millis(1500), Duration::from_millis(250)))
        );
        assert_eq!(parse_cpu_time("4242 (x) S 1 2 3\n"), None, "too few fields");
        assert_eq!(parse_cpu_time("no name at all"), None);
        assert_eq!(
            parse_cpu_time("1 (x) S 1 2 3 4 5 6 7 8 9 10 many 25\n"),
            None,
            "not a number"
        );
    }

    #[test]
    fn this_process_has_a_resident_size() {
        let rss = rss_bytes(std::process::id()).unwrap();
        assert!(rss > 0);
        assert!(rss_bytes(u32::MAX).is_err());
    }

    #[test]
    fn settings_are_checked() {
        let ok = MemoryBench {
            pid: std::process::id(),
            tasks: 10,
            topics: 2,
            body_bytes: 100,
            batch: 5,
            delay: 3_600_000,
            keys: 0,
        };
        assert!(ok.validate().is_ok());
        for (bad, flag) in [
            (
                MemoryBench {
                    tasks: 0,
                    ..ok.clone()
                },
                "--tasks",
            ),
            (
                MemoryBench {
                    topics: 0,
                    ..ok.clone()
                },
                "--topics",
            ),
            (
                MemoryBench {
                    batch: 0,
                    ..ok.clone()
                },
                "--batch",
            ),
            (
                MemoryBench {
                    delay: 1_000,
                    ..ok.clone()
                },
                "--delay",
            ),
            (
                MemoryBench {
                    pid: u32::MAX,
                    ..ok.clone()
                },
                "--pid",
            ),
            (
                MemoryBench {
                    keys: MAX_TASKS + 1,
                    ..ok.clone()
                },
                "--keys",
            ),
        ] {
            let err = bad.validate().unwrap_err().to_string();
            assert!(err.contains(flag), "{flag}: {err}");
        }
    }
}
