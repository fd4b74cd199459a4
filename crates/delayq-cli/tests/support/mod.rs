//! What the CLI tests share: a real `delayq serve` child process on a free loopback port, and
//! a way to run the real `delayq` binary against it.
//!
//! The server runs with `--storage memory`, so each test gets an empty queue and leaves
//! nothing behind; it is killed when the [`Server`] is dropped, also when a test panics.

#![allow(dead_code)]

pub mod http_history;
pub mod otlp;

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The `delayq` binary under test.
pub const DELAYQ: &str = env!("CARGO_BIN_EXE_delayq");

/// How long a server may take to answer `/healthz` after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(15);

/// A running `delayq serve`, killed on drop.
pub struct Server {
    child: Child,
    /// The base URL, `http://127.0.0.1:<port>`.
    pub url: String,
}

impl Server {
    /// Starts `delayq serve --storage memory` on a free port and waits until `/healthz`
    /// answers 200.
    pub fn start() -> Server {
        Server::start_with(&["--storage", "memory"])
    }

    /// Starts `delayq serve <args>` on a free port and waits until `/healthz` answers 200.
    pub fn start_with(args: &[&str]) -> Server {
        Server::start_with_env(args, &[])
    }

    /// Starts `delayq serve <args>` with the extra environment `env` (e.g. the test build's
    /// `DELAYQ_TEST_WALL_SKEW_MS`) and waits until `/healthz` answers 200.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Server {
        Server::spawn(DELAYQ, free_port(), args, Stdio::piped(), env)
    }

    /// Starts `delayq serve <args>` with the extra environment `env`, its standard error
    /// appended to `log`, and waits until `/healthz` answers 200.
    pub fn start_logged(args: &[&str], env: &[(&str, &str)], log: &Path) -> Server {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the server's log file");
        Server::spawn(DELAYQ, free_port(), args, Stdio::from(file), env)
    }

    /// Starts `<bin> serve <args>` on `port` (again, after a kill) with its standard error
    /// appended to `log`, and waits until `/healthz` answers 200. Long runs use this: a piped
    /// standard error nobody reads would fill up and stall the server.
    pub fn start_at(bin: &str, port: u16, args: &[&str], log: &Path) -> Server {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open the server's log file");
        Server::spawn(bin, port, args, Stdio::from(file), &[])
    }

    fn spawn(bin: &str, port: u16, args: &[&str], stderr: Stdio, env: &[(&str, &str)]) -> Server {
        let listen = format!("127.0.0.1:{port}");
        let child = Command::new(bin)
            .args(["serve", "--listen", &listen])
            .args(args)
            .env_remove("DELAYQ_SERVER")
            .env_remove("DELAYQ_TOKEN")
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start delayq serve");
        let mut server = Server {
            child,
            url: format!("http://{listen}"),
        };
        server.wait_healthy(&listen);
        server
    }

    /// Sends SIGTERM (through `kill`, no unsafe code) and waits up to `limit` for the server to
    /// exit; returns its exit status.
    pub fn terminate(&mut self, limit: Duration) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM {pid}");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the server") {
                return status;
            }
            assert!(
                start.elapsed() < limit,
                "delayq serve did not exit within {limit:?} of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server with SIGKILL: no graceful shutdown, no lease release.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn wait_healthy(&mut self, addr: &str) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the server") {
                let mut stderr = String::new();
                if let Some(mut pipe) = self.child.stderr.take() {
                    let _ = pipe.read_to_string(&mut stderr);
                }
                panic!("delayq serve exited with {status} before it was healthy:\n{stderr}");
            }
            if healthz(addr) {
                return;
            }
            assert!(
                start.elapsed() < START_TIMEOUT,
                "delayq serve did not answer /healthz on {addr} within {START_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs `delayq <args> --server <url>`.
    pub fn run(&self, args: &[&str]) -> Run {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(["--server", &self.url]);
        delayq(&all)
    }

    /// Runs `delayq <args> --server <url> --json` and parses standard output, asserting
    /// success.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all: Vec<&str> = args.to_vec();
        all.push("--json");
        let run = self.run(&all);
        run.assert_code(0);
        serde_json::from_str(&run.stdout)
            .unwrap_or_else(|err| panic!("stdout of {args:?} is not JSON ({err}):\n{}", run.stdout))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The result of one run of the binary.
#[derive(Debug)]
pub struct Run {
    /// The exit code (`-1` if killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Asserts the exit code, showing both outputs when it differs.
    pub fn assert_code(&self, code: i32) -> &Run {
        assert_eq!(
            self.code, code,
            "exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// Runs the binary with `args`, with no `DELAYQ_*` variables from the environment.
pub fn delayq(args: &[&str]) -> Run {
    let output: Output = Command::new(DELAYQ)
        .args(args)
        .env_remove("DELAYQ_SERVER")
        .env_remove("DELAYQ_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run delayq");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// Whether `GET /healthz` answers 200.
fn healthz(addr: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// Writes `text` to `dir/name` and returns the path as a string.
pub fn write_file(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a test file");
    path.to_string_lossy().into_owned()
}
