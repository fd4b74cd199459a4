//! A PostgreSQL server of the test's own: Debian's postgresql-15 binaries, `initdb` in a
//! temporary directory, `postgres` on a free loopback port with its socket in that directory,
//! fsync off, killed when dropped. Never the machine's own server on 5432.
//!
//! `initdb` refuses to run as root, and so does `postgres`. When the test runs as root, both
//! run as the `postgres` user through `setpriv` (which execs, so the child's pid is the
//! postmaster's and killing it reaches the server), in a directory given to that user.
//!
//! `initdb` costs a second or two; it runs once per machine and user into a template
//! directory (`$TMPDIR/delayq-pg15-template-v1-<uid>`, made whole by a rename), and each
//! server starts from a copy of it. A replica ([`PostgresServer::start_replica_of`],
//! [`PostgresPair`]) starts from a `pg_basebackup` of its primary instead.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::free_port;

/// Where Debian installs PostgreSQL 15's server binaries.
pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The user the server runs as when the test runs as root.
const PG_USER: &str = "postgres";

/// A `postgres` server of our own (see the module doc).
pub struct PostgresServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    /// Whether the binaries run as the postgres user (the test runs as root).
    root: bool,
}

fn is_root() -> bool {
    // `id -u` rather than libc: the workspace forbids unsafe code.
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A command for a PostgreSQL binary, as the postgres user when we are root.
fn pg_command(binary: &str, root: bool) -> Command {
    let path = Path::new(PG_BIN).join(binary);
    if root {
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--reuid",
            PG_USER,
            "--regid",
            PG_USER,
            "--init-groups",
            "--",
        ])
        .arg(path);
        cmd
    } else {
        Command::new(path)
    }
}

fn give_to_postgres(path: &Path, root: bool) {
    if root {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{PG_USER}:{PG_USER}"))
            .arg(path)
            .status()
            .expect("run chown");
        assert!(status.success(), "chown {} to {PG_USER}", path.display());
    }
}

/// A fresh temporary directory for one server.
fn new_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("delayq-pg-test")
        .tempdir()
        .expect("create a temp dir")
}

/// The initdb'd template directory, made once (see the module doc).
fn template(root: bool) -> PathBuf {
    let uid = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    let base = std::env::temp_dir();
    let template = base.join(format!("delayq-pg15-template-v1-{uid}"));
    if template.join("PG_VERSION").exists() {
        return template;
    }
    let work = tempfile::Builder::new()
        .prefix("delayq-pg15-initdb")
        .tempdir_in(&base)
        .expect("create a temp dir for initdb");
    give_to_postgres(work.path(), root);
    let data = work.path().join("data");
    let out = pg_command("initdb", root)
        .arg("-D")
        .arg(&data)
        .args([
            "--auth=trust",
            "--username=postgres",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        ])
        .output()
        .unwrap_or_else(|e| panic!("run {PG_BIN}/initdb (is postgresql-15 installed?): {e}"));
    assert!(
        out.status.success(),
        "initdb failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Another test may have made it meanwhile: then ours is dropped with the temp dir.
    let _ = std::fs::rename(&data, &template);
    template
}

impl PostgresServer {
    /// Starts a server on a free loopback port. Panics with the server's log when it does not
    /// come up.
    pub fn start() -> Self {
        let root = is_root();
        let template = template(root);
        let dir = new_dir();
        let status = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(dir.path().join("data"))
            .status()
            .expect("run cp");
        assert!(status.success(), "copy the initdb template");
        Self::launch(dir, root)
    }

    /// Starts a streaming replica of `primary`: its data directory is a `pg_basebackup -R` of
    /// the primary's (which writes `primary_conninfo` and `standby.signal`), so it follows
    /// the primary's WAL from the moment it starts. It accepts reads (hot standby) and
    /// refuses writes until [`PostgresServer::promote`].
    pub fn start_replica_of(primary: &PostgresServer) -> Self {
        Self::start_replica_streaming_from(primary, primary.port)
    }

    /// A replica of `primary` that streams its WAL from `port` on the loopback instead of
    /// the primary's own port: a [`crate::FaultProxy`] in front of the primary, so that a
    /// test can make the replica fall behind.
    pub fn start_replica_streaming_from(primary: &PostgresServer, port: u16) -> Self {
        let root = is_root();
        let dir = new_dir();
        give_to_postgres(dir.path(), root);
        let out = pg_command("pg_basebackup", root)
            .args(["-h", "127.0.0.1", "-U", "postgres", "-p"])
            .arg(primary.port.to_string())
            .arg("-D")
            .arg(dir.path().join("data"))
            .args(["-R", "-X", "stream", "--checkpoint=fast", "--no-sync"])
            .output()
            .expect("run pg_basebackup");
        assert!(
            out.status.success(),
            "pg_basebackup failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // `pg_basebackup -R` wrote the primary's port into primary_conninfo.
        let auto = dir.path().join("data").join("postgresql.auto.conf");
        let text = std::fs::read_to_string(&auto).expect("read postgresql.auto.conf");
        let from = format!("port={}", primary.port);
        assert!(
            text.contains(&from),
            "primary_conninfo names {from}: {text}"
        );
        std::fs::write(&auto, text.replace(&from, &format!("port={port}")))
            .expect("write postgresql.auto.conf");
        // A standby whose primary is gone retries the WAL source every
        // `wal_retrieve_retry_interval` (5 s), and a promotion waits for that retry.
        let conf = dir.path().join("data").join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf).expect("read postgresql.conf");
        text.push_str("\nwal_retrieve_retry_interval = '100ms'\n");
        std::fs::write(&conf, text).expect("write postgresql.conf");
        Self::launch(dir, root)
    }

    /// Starts `postgres` over the data directory in `dir` on a free port.
    fn launch(dir: TempDir, root: bool) -> Self {
        give_to_postgres(dir.path(), root);
        let mut server = PostgresServer {
            child: None,
            port: 0,
            dir,
            root,
        };
        for _ in 0..10 {
            server.port = free_port();
            if server.spawn(root) {
                return server;
            }
        }
        panic!(
            "could not start postgres on a free port; its log:\n{}",
            server.log()
        );
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// Runs `sql` with `psql` as the superuser and returns what it printed (unaligned,
    /// tuples only: one row a line, columns separated by `|`). Panics when psql fails.
    pub fn psql(&self, sql: &str) -> String {
        self.try_psql(sql)
            .unwrap_or_else(|e| panic!("psql on {}: {sql}: {e}", self.port))
    }

    /// Runs `sql` with `psql`; the error is what psql wrote.
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        let out = Command::new(Path::new(PG_BIN).join("psql"))
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
            .args(["-U", "postgres", "-d", "postgres", "-p"])
            .arg(self.port.to_string())
            .arg("-c")
            .arg(sql)
            .output()
            .map_err(|e| format!("run psql: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Promotes a replica to a primary (`pg_ctl promote`, waiting until it accepts writes).
    pub fn promote(&self) {
        let out = pg_command("pg_ctl", self.root)
            .args(["promote", "-w", "-t", "30", "-D"])
            .arg(self.dir.path().join("data"))
            .output()
            .expect("run pg_ctl promote");
        assert!(
            out.status.success(),
            "pg_ctl promote failed: {}{}\nthe server's log:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    fn spawn(&mut self, root: bool) -> bool {
        let log = File::create(self.dir.path().join("postgres.log")).expect("create the log");
        let child = pg_command("postgres", root)
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .arg("-k")
            .arg(self.dir.path())
            .arg("-p")
            .arg(self.port.to_string())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "full_page_writes=off",
                "-c",
                "max_connections=200",
                "-c",
                "logging_collector=off",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("run postgres (is postgresql-15 installed?)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                eprintln!("postgres on {} exited: {status}", self.port);
                return false;
            }
            if self.is_ready() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    /// Whether the server accepts connections (`pg_isready`).
    fn is_ready(&self) -> bool {
        Command::new(Path::new(PG_BIN).join("pg_isready"))
            .args([
                "-q",
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-p",
            ])
            .arg(self.port.to_string())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL of the `postgres` database as the `postgres` superuser.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The directory of its Unix socket (`psql -h`).
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id of the postmaster, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Kills the server at once (SIGKILL of the postmaster; its backends exit when they see
    /// it gone).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server with an immediate shutdown (SIGQUIT: the postmaster stops its
    /// backends), then SIGKILL if it is still there after 5 s.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .arg("-QUIT")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl PostgresServer {
    /// Starts the server again, on its data directory and port, after [`PostgresServer::stop`]
    /// (an immediate shutdown): it recovers from its WAL as after a crash. Panics with its log
    /// when it does not come up. (After [`PostgresServer::kill`] its backends may still hold
    /// the shared memory for a moment, and a new postmaster refuses to start then.)
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart: the server still runs");
        let root = self.root;
        assert!(
            self.spawn(root),
            "postgres did not come back on {}; its log:\n{}",
            self.port,
            self.log()
        );
    }

    /// Writes `contents` to `name` in the server's data directory, readable by the server
    /// alone (mode 0600, owned by the server's user): how a test hands it a TLS key, a
    /// certificate or a `pg_hba.conf`, which then take effect on `SELECT pg_reload_conf()`.
    pub fn write_data_file(&self, name: &str, contents: &[u8]) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = self.dir.path().join("data").join(name);
        std::fs::write(&path, contents).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", path.display()));
        give_to_postgres(&path, is_root());
        path
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A primary and its synchronous streaming replica, for failover tests.
///
/// The replica is a `pg_basebackup -R` of the primary; then the primary is told to wait for
/// it on every commit (`synchronous_standby_names = '*'` and the `synchronous_commit` asked
/// for, by `ALTER SYSTEM`, so the replica's copy of the configuration has neither and, once
/// promoted, commits without waiting for a standby it no longer has). [`PostgresPair::url`]
/// names both servers with `target_session_attrs=read-write`, so a client connects to
/// whichever of them accepts writes.
pub struct PostgresPair {
    primary: PostgresServer,
    replica: PostgresServer,
}

impl PostgresPair {
    /// Starts the pair with `synchronous_commit` (`on`, `remote_write` or `remote_apply`
    /// wait for the replica; `local` and `off` do not, to show what is lost then) and waits
    /// until the replica streams as the synchronous standby.
    pub fn start(synchronous_commit: &str) -> Self {
        let primary = PostgresServer::start();
        let port = primary.port;
        Self::with_primary(primary, synchronous_commit, port)
    }

    /// The same over a primary already started, the replica streaming from `port` (the
    /// primary's, or a proxy's in front of it; see
    /// [`PostgresServer::start_replica_streaming_from`]).
    pub fn with_primary(primary: PostgresServer, synchronous_commit: &str, port: u16) -> Self {
        assert!(
            matches!(
                synchronous_commit,
                "on" | "remote_write" | "remote_apply" | "local" | "off"
            ),
            "synchronous_commit {synchronous_commit:?} is not a setting"
        );
        let replica = PostgresServer::start_replica_streaming_from(&primary, port);
        primary.psql("ALTER SYSTEM SET synchronous_standby_names = '*'");
        primary.psql(&format!(
            "ALTER SYSTEM SET synchronous_commit = '{synchronous_commit}'"
        ));
        primary.psql("SELECT pg_reload_conf()");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let state = primary.psql("SELECT sync_state FROM pg_stat_replication");
            if state == "sync" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the replica does not stream synchronously ({state:?}); its log:\n{}",
                replica.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        PostgresPair { primary, replica }
    }

    /// The primary (until a failover, the one that accepts writes).
    pub fn primary(&self) -> &PostgresServer {
        &self.primary
    }

    /// The replica.
    pub fn replica(&self) -> &PostgresServer {
        &self.replica
    }

    /// A URL naming both servers, primary first, that connects to the one accepting writes.
    pub fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
            self.primary.port, self.replica.port
        )
    }

    /// SIGKILLs the primary: its postmaster at once, its backends as they notice (within
    /// moments); commits waiting for the replica's confirmation are never acknowledged.
    pub fn kill_primary(&mut self) {
        self.primary.kill();
    }

    /// Promotes the replica to a primary and waits until it accepts writes.
    pub fn promote_replica(&self) {
        self.replica.promote();
    }

    /// Fails over as a cluster manager would when the primary dies: SIGKILL of the primary,
    /// then the replica promoted. Killing first means no moment with two servers accepting
    /// writes (a client that still reached the old primary could read a state the new one
    /// has moved on from).
    pub fn fail_over(&mut self) {
        self.kill_primary();
        self.promote_replica();
    }
}
