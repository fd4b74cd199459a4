//! `delayq beanstalkd`: beanstalkd's own command line, run as delayq.
//!
//! Init scripts and the test harnesses of beanstalkd clients start `beanstalkd -l ADDR -p
//! PORT [-b DIR] ...`; this command accepts those flags and runs `delayq serve` with the
//! equivalent settings, so such a script starts delayq instead. The flags map as follows
//! (docs/beanstalk.md has the table for users):
//!
//! - `-l ADDR` (default `127.0.0.1`, where beanstalkd listens on every address: delayq does
//!   not open a port to the network unless asked, docs/design.md §5) and `-p PORT` (default
//!   11300) → `--beanstalk-listen ADDR:PORT`; `-l unix:PATH` → `--beanstalk-listen
//!   unix:PATH` (the port is then ignored, as by beanstalkd).
//! - `-b DIR` → the embedded backend in `DIR` (`--storage embedded --data-dir DIR`); without
//!   it, the in-memory backend, like beanstalkd without a binlog.
//! - `-f MS` → `--fsync interval --fsync-interval-ms MS` (`-f 0`: `--fsync always`); `-F`,
//!   and beanstalkd's default when neither is given, → `--fsync never`.
//! - `-z BYTES` → `--beanstalk-max-job-size BYTES` (and the task body limit raised to fit).
//! - `-V` (more logging in beanstalkd) is accepted; delayq's log level comes from `RUST_LOG`.
//!
//! delayq's own HTTP API listens on `--http-listen` (default `127.0.0.1:0`, a free port, so
//! several drop-in servers never collide), and `--redis URL` selects Redis storage instead.

use std::path::PathBuf;

use clap::{ArgAction, Args};

/// beanstalkd's flags.
#[derive(Debug, Clone, Args)]
#[command(disable_version_flag = true)]
pub struct BeanstalkdArgs {
    /// Listen on this address (an IP address, or unix:PATH for a Unix socket).
    #[arg(short = 'l', value_name = "ADDR", default_value = "127.0.0.1")]
    pub listen: String,
    /// Listen on this port.
    #[arg(short = 'p', value_name = "PORT", default_value_t = 11300)]
    pub port: u16,
    /// Keep the jobs in this directory (delayq's embedded storage); without it they live in
    /// memory only.
    #[arg(short = 'b', value_name = "DIR")]
    pub binlog_dir: Option<PathBuf>,
    /// Flush to disk at most every MS milliseconds (0: after every write).
    #[arg(short = 'f', value_name = "MS", conflicts_with = "never_fsync")]
    pub fsync_ms: Option<u64>,
    /// Never flush to disk explicitly (beanstalkd's default).
    #[arg(short = 'F')]
    pub never_fsync: bool,
    /// The largest job body, in bytes.
    #[arg(short = 'z', value_name = "BYTES")]
    pub max_job_size: Option<u32>,
    /// Accepted for beanstalkd's sake; the log level comes from RUST_LOG.
    #[arg(short = 'V', action = ArgAction::Count)]
    pub verbose: u8,
    /// Where delayq's HTTP API listens (a free loopback port by default).
    #[arg(
        long = "http-listen",
        value_name = "ADDR",
        default_value = "127.0.0.1:0"
    )]
    pub http_listen: String,
    /// Store the jobs in Redis instead (`redis://...`), like `delayq serve --redis`.
    #[arg(long = "redis", value_name = "URL", conflicts_with = "binlog_dir")]
    pub redis: Option<String>,
}

impl BeanstalkdArgs {
    /// The `delayq serve` arguments (after `serve`) with the same meaning.
    pub fn serve_args(&self) -> Vec<String> {
        let listen = match self.listen.strip_prefix("unix:") {
            Some(_) => self.listen.clone(),
            // An IPv6 address needs brackets before its port.
            None if self.listen.contains(':') && !self.listen.starts_with('[') => {
                format!("[{}]:{}", self.listen, self.port)
            }
            None => format!("{}:{}", self.listen, self.port),
        };
        let mut args: Vec<String> = vec![
            "--beanstalk-listen".into(),
            listen,
            "--listen".into(),
            self.http_listen.clone(),
        ];
        match (&self.redis, &self.binlog_dir) {
            (Some(url), _) => args.extend(["--redis".into(), url.clone()]),
            (None, Some(dir)) => {
                args.extend([
                    "--storage".into(),
                    "embedded".into(),
                    "--data-dir".into(),
                    dir.display().to_string(),
                ]);
                match self.fsync_ms {
                    Some(0) => args.extend(["--fsync".into(), "always".into()]),
                    Some(ms) => args.extend([
                        "--fsync".into(),
                        "interval".into(),
                        "--fsync-interval-ms".into(),
                        ms.to_string(),
                    ]),
                    None => args.extend(["--fsync".into(), "never".into()]),
                }
            }
            (None, None) => args.extend(["--storage".into(), "memory".into()]),
        }
        if let Some(z) = self.max_job_size {
            args.extend(["--beanstalk-max-job-size".into(), z.to_string()]);
            let default_body = delayq::Limits::default().max_body_bytes;
            if z as usize > default_body {
                // The body limit must hold the job size, and a request the body.
                args.extend([
                    "--max-body-bytes".into(),
                    z.to_string(),
                    "--max-request-bytes".into(),
                    (u64::from(z) + (1 << 20)).to_string(),
                ]);
            }
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: BeanstalkdArgs,
    }

    fn serve_args(argv: &[&str]) -> String {
        let cli =
            Cli::try_parse_from(std::iter::once("beanstalkd").chain(argv.iter().copied())).unwrap();
        cli.args.serve_args().join(" ")
    }

    #[test]
    fn flags_map_to_serve_settings() {
        let table: &[(&[&str], &str)] = &[
            (
                &[],
                "--beanstalk-listen 127.0.0.1:11300 --listen 127.0.0.1:0 --storage memory",
            ),
            (
                &["-l", "0.0.0.0", "-p", "11301", "-b", "/var/lib/q"],
                "--beanstalk-listen 0.0.0.0:11301 --listen 127.0.0.1:0 --storage embedded \
                 --data-dir /var/lib/q --fsync never",
            ),
            (
                &["-b", "d", "-f", "0"],
                "--beanstalk-listen 127.0.0.1:11300 --listen 127.0.0.1:0 --storage embedded \
                 --data-dir d --fsync always",
            ),
            (
                &["-b", "d", "-f", "50", "-V", "-V"],
                "--beanstalk-listen 127.0.0.1:11300 --listen 127.0.0.1:0 --storage embedded \
                 --data-dir d --fsync interval --fsync-interval-ms 50",
            ),
            (
                &["-l", "unix:/tmp/b.sock", "-z", "100"],
                "--beanstalk-listen unix:/tmp/b.sock --listen 127.0.0.1:0 --storage memory \
                 --beanstalk-max-job-size 100",
            ),
            (
                &["-l", "::1", "-z", "2000000"],
                "--beanstalk-listen [::1]:11300 --listen 127.0.0.1:0 --storage memory \
                 --beanstalk-max-job-size 2000000 --max-body-bytes 2000000 \
                 --max-request-bytes 3048576",
            ),
            (
                &["--redis", "redis://127.0.0.1:7000"],
                "--beanstalk-listen 127.0.0.1:11300 --listen 127.0.0.1:0 \
                 --redis redis://127.0.0.1:7000",
            ),
        ];
        for (argv, want) in table {
            assert_eq!(serve_args(argv), *want, "{argv:?}");
        }
    }

    #[test]
    fn contradictions_are_refused() {
        let parse = |argv: &[&str]| {
            Cli::try_parse_from(std::iter::once("beanstalkd").chain(argv.iter().copied()))
        };
        assert!(parse(&["-f", "10", "-F"]).is_err());
        assert!(parse(&["-b", "d", "--redis", "redis://x"]).is_err());
        assert!(parse(&["-p", "70000"]).is_err());
    }
}
