//! TLS to PostgreSQL with libpq's `sslmode` and `sslrootcert` (docs/postgres.md): a server of
//! the test's own with a certificate from a test CA, and a `pg_hba.conf` that lets in TLS
//! connections only, so every connection of the backend (the pool, the LISTEN connection,
//! the clock's) must have come over TLS for the backend to work at all.

use std::sync::Arc;
use std::time::{Duration, Instant};

use delayq::{NewTask, PopOptions, Queue, StorageContext, SystemClock};
use delayq_postgres::{PostgresClockOptions, PostgresOptions};
use delayq_testkit::PostgresServer;
use delayq_testkit::pki::{self, Pki};

/// A server speaking TLS with `pki`'s certificate, refusing connections without it. Returns
/// the CA's file (outside the data directory) and a directory to keep it in.
fn tls_server(pki: &Pki) -> (PostgresServer, tempfile::TempDir, String) {
    let pg = PostgresServer::start();
    let cert = pg.write_data_file("server.crt", pki.cert.as_bytes());
    let key = pg.write_data_file("server.key", pki.key.as_bytes());
    // Unix-socket connections (the test's own set-up) stay trusted; TCP needs TLS.
    pg.write_data_file(
        "pg_hba.conf",
        b"local all all trust\nhostssl all all 127.0.0.1/32 trust\n",
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &pki.ca).expect("write the CA");
    // One statement a call: ALTER SYSTEM refuses to run in psql's multi-statement transaction.
    for sql in [
        "ALTER SYSTEM SET ssl = on".to_owned(),
        format!("ALTER SYSTEM SET ssl_cert_file = '{}'", cert.display()),
        format!("ALTER SYSTEM SET ssl_key_file = '{}'", key.display()),
        "SELECT pg_reload_conf()".to_owned(),
    ] {
        psql(&pg, &sql);
    }
    // The reload is asynchronous: wait until a new session sees TLS on.
    let deadline = Instant::now() + Duration::from_secs(20);
    while psql(&pg, "SHOW ssl").trim() != "on" {
        assert!(Instant::now() < deadline, "the server never turned TLS on");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ca = ca.display().to_string();
    (pg, dir, ca)
}

/// Runs `sql` through psql over the server's Unix socket, as the superuser; its output.
fn psql(pg: &PostgresServer, sql: &str) -> String {
    let out = std::process::Command::new(format!("{}/psql", delayq_testkit::PG_BIN))
        .args([
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-U",
            "postgres",
            "-h",
        ])
        .arg(pg.socket_dir())
        .arg("-p")
        .arg(pg.port().to_string())
        .arg("-d")
        .arg("postgres")
        .arg("-c")
        .arg(sql)
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn url(pg: &PostgresServer, params: &str) -> String {
    format!("{}?{params}", pg.url())
}

async fn start(url: String) -> delayq::Result<Queue> {
    let ctx = StorageContext::new(Arc::new(SystemClock::new()));
    let storage = delayq_postgres::start(ctx.clone(), PostgresOptions::new(url)).await?;
    Ok(Queue::new(Arc::new(storage), ctx))
}

/// The whole error, causes included.
fn text(e: &delayq::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_full_serves_every_connection_over_tls() {
    let pki = pki::generate_for(&["localhost", "127.0.0.1"]);
    let (pg, _dir, ca) = tls_server(&pki);
    let url = url(&pg, &format!("sslmode=verify-full&sslrootcert={ca}"));
    let queue = start(url.clone()).await.expect("start over TLS");

    // A long-poll parked before the add wakes through the LISTEN connection.
    let waiter = {
        let queue = queue.clone();
        tokio::spawn(async move {
            queue
                .pop("orders", PopOptions::default().timeout_ms(20_000))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    queue.add(NewTask::new("orders", "o-1")).await.expect("add");
    let got = waiter.await.expect("join").expect("pop");
    assert_eq!(got.first().map(|d| d.id.as_str()), Some("o-1"));

    // The database's clock probes over TLS too.
    let clock = delayq_postgres::clock::new_clock(PostgresClockOptions::default());
    delayq_postgres::clock::connect(&clock, &PostgresOptions::new(url)).expect("clock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while clock.bounds_ns().is_none() {
        assert!(
            Instant::now() < deadline,
            "the clock never read the database's time"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The server saw only TLS sessions from delayq.
    let plain = psql(
        &pg,
        "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
         WHERE a.application_name = 'delayq' AND NOT s.ssl",
    );
    let tls = psql(
        &pg,
        "SELECT count(*) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
         WHERE a.application_name = 'delayq' AND s.ssl",
    );
    assert_eq!(plain.trim(), "0");
    assert!(
        tls.trim().parse::<u32>().unwrap() >= 2,
        "TLS sessions: {tls}"
    );
    queue.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_passes_verify_ca_only() {
    let pki = pki::generate_for(&["db.example.internal"]);
    let (pg, _dir, ca) = tls_server(&pki);

    let err = start(url(&pg, &format!("sslmode=verify-full&sslrootcert={ca}")))
        .await
        .expect_err("verify-full must refuse a certificate for another name");
    let msg = text(&err);
    assert!(msg.contains("certificate"), "{msg}");

    let queue = start(url(&pg, &format!("sslmode=verify-ca&sslrootcert={ca}")))
        .await
        .expect("verify-ca checks the chain, not the name");
    queue.add(NewTask::new("t", "a")).await.expect("add");
    queue.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_of_another_ca_is_refused_and_require_does_not_check() {
    let pki = pki::generate_for(&["localhost", "127.0.0.1"]);
    let (pg, dir, _ca) = tls_server(&pki);
    let other = pki::generate_for(&["localhost", "127.0.0.1"]);
    let other_ca = dir.path().join("other-ca.pem");
    std::fs::write(&other_ca, &other.ca).unwrap();
    let other_ca = other_ca.display().to_string();

    for mode in ["verify-ca", "verify-full", "require"] {
        // `require` with a root file verifies the chain, as libpq does.
        let err = start(url(&pg, &format!("sslmode={mode}&sslrootcert={other_ca}")))
            .await
            .err()
            .unwrap_or_else(|| panic!("{mode} with another CA must be refused"));
        assert!(text(&err).contains("certificate"), "{mode}: {}", text(&err));
    }

    // `require` without a root file encrypts and checks nothing (libpq's meaning).
    let queue = start(url(&pg, "sslmode=require"))
        .await
        .expect("require without sslrootcert");
    queue.add(NewTask::new("t", "a")).await.expect("add");
    queue.shutdown().await.unwrap();

    // Without TLS the server's pg_hba.conf refuses: the other cases did use TLS.
    let err = start(url(&pg, "sslmode=disable"))
        .await
        .expect_err("a plain connection must be refused");
    assert!(text(&err).contains("pg_hba.conf"), "{}", text(&err));
}
