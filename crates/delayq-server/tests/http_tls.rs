//! HTTPS on the real listener: a CA and a server certificate generated at test time (rcgen),
//! a real TLS client (reqwest over rustls) that trusts only that CA, and the failures: plain
//! HTTP to the TLS port, a stalled handshake, and certificate or key files that cannot be
//! used.

mod listener;

use std::path::Path;
use std::time::Duration;

use delayq_daemon::config::{StorageConfig, TlsConfig, TokenConfig};
use delayq_daemon::{ServerConfig, ServerError};
use listener::pki::{Pki, generate, https_client, write};
use listener::{PATIENCE, Running, start};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// A server with TLS from `pki`'s files in `dir`, and a client that trusts its CA.
async fn start_tls(pki: &Pki, dir: &Path, configure: impl FnOnce(&mut ServerConfig)) -> Running {
    let tls = TlsConfig::new(
        write(dir, "cert.pem", &pki.cert),
        write(dir, "key.pem", &pki.key),
    );
    start(|c| {
        c.tls = Some(tls);
        configure(c);
    })
    .await
    .with_client(https_client(&pki.ca))
}

#[tokio::test]
async fn requests_succeed_over_https_and_plain_http_is_refused_cleanly() {
    let pki = generate();
    let dir = tempfile::tempdir().unwrap();
    let server = start_tls(&pki, dir.path(), |_| {}).await;
    let port = server.addr.port();

    // Over HTTPS, by name and by address (both are in the certificate).
    let added = server
        .post("/add", json!({"topic": "tls", "id": "a"}))
        .await;
    assert_eq!(added["code"], 0, "{added}");
    let by_address = server
        .client
        .post(format!("https://127.0.0.1:{port}/pop"))
        .json(&json!({"topic": "tls", "timeout_ms": 0}))
        .send()
        .await
        .expect("https by address");
    let popped: Value = by_address.json().await.unwrap();
    assert_eq!(popped["data"]["id"], "a", "{popped}");
    let got: Value = serde_json::from_str(&server.get_text("/get?topic=tls&id=a").await).unwrap();
    assert_eq!(got["data"]["state_name"], "active", "{got}");

    // A client that does not trust the CA cannot talk to it: this is real TLS.
    let untrusting = reqwest::Client::builder().use_rustls_tls().build().unwrap();
    let err = untrusting
        .get(server.url("/healthz"))
        .send()
        .await
        .expect_err("an unknown CA is refused");
    assert!(err.is_connect(), "{err:?}");

    // Plain HTTP to the TLS port: one plain 400 that says what to do, then the close.
    let resp = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await
        .expect("a plain-HTTP answer");
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("https://"),
        "{body}"
    );
    // Bytes that are neither TLS nor HTTP: the connection is closed, nothing else happens.
    let mut junk = TcpStream::connect(server.addr).await.unwrap();
    junk.write_all(b"\x00\x01\x02\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(PATIENCE, junk.read_to_end(&mut buf))
        .await
        .expect("closed in time")
        .ok();

    // The server is unharmed.
    server.get_text("/healthz").await;
    server.stop().await;
}

#[tokio::test]
async fn a_stalled_handshake_is_cut_after_the_header_read_timeout() {
    let pki = generate();
    let dir = tempfile::tempdir().unwrap();
    let limit = Duration::from_millis(500);
    let server = start_tls(&pki, dir.path(), |c| c.http.header_read_timeout_ms = 500).await;
    // One says nothing; one starts a TLS record and stops.
    for first in [&b""[..], &b"\x16\x03\x01"[..]] {
        let started = Instant::now();
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream.write_all(first).await.unwrap();
        let mut buf = Vec::new();
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut buf))
            .await
            .expect("cut in time")
            .ok();
        let lived = started.elapsed();
        assert!(lived >= limit, "cut after {lived:?}");
    }
    let cut = "delayq_http_connections_cut_total{reason=\"tls_handshake\"}";
    assert_eq!(server.metric(cut).await, 2);
    server.stop().await;
}

#[tokio::test]
async fn files_that_cannot_be_used_stop_the_start_naming_the_file() {
    let pki = generate();
    let other = generate();
    let dir = tempfile::tempdir().unwrap();
    let cert = write(dir.path(), "cert.pem", &pki.cert);
    let key = write(dir.path(), "key.pem", &pki.key);
    let missing = dir.path().join("missing.pem");
    let garbage = write(dir.path(), "garbage.pem", "not a certificate\n");
    let broken = write(
        dir.path(),
        "broken.pem",
        "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
    );
    let other_key = write(dir.path(), "other-key.pem", &other.key);
    let table: [(TlsConfig, &Path, &str); 6] = [
        (TlsConfig::new(&missing, &key), &missing, "certificate"),
        (TlsConfig::new(&cert, &missing), &missing, "key"),
        (
            TlsConfig::new(&garbage, &key),
            &garbage,
            "no PEM certificate",
        ),
        (TlsConfig::new(&broken, &key), &broken, "not valid PEM"),
        // A certificate where the key should be.
        (TlsConfig::new(&cert, &cert), &cert, "no PEM private key"),
        (
            TlsConfig::new(&cert, &other_key),
            &other_key,
            "does not fit",
        ),
    ];
    for (tls, file, reason) in table {
        let mut config = ServerConfig::default();
        config.storage = StorageConfig::Memory;
        config.tls = Some(tls.clone());
        let queue = delayq_daemon::build_queue(&config).await.unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let err = delayq_daemon::run(listener, queue.clone(), &config, std::future::pending())
            .await
            .expect_err("the start fails");
        let msg = err.to_string();
        assert!(matches!(err, ServerError::Tls { .. }), "{tls:?}: {err:?}");
        assert!(
            msg.contains(&file.display().to_string()) && msg.contains(reason),
            "{tls:?}: {msg}"
        );
        assert!(queue.is_closing(), "the storage is shut down");
    }
}

/// The dashboard is served on the same TLS listener, and its session cookie is then `Secure`.
#[tokio::test]
async fn the_dashboard_is_served_over_the_same_tls_with_a_secure_cookie() {
    let pki = generate();
    let dir = tempfile::tempdir().unwrap();
    let server = start_tls(&pki, dir.path(), |c| {
        c.tokens = vec![TokenConfig::new("tls-dashboard-token")];
    })
    .await;
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(pki.ca.as_bytes()).unwrap())
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = client
        .post(server.url("/ui/login"))
        .header("origin", server.url(""))
        .body("token=tls-dashboard-token&next=%2F")
        .send()
        .await
        .expect("login over https");
    assert_eq!(login.status(), 303);
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    for flag in ["HttpOnly", "SameSite=Strict", "Secure"] {
        assert!(cookie.contains(flag), "{cookie}");
    }
    let page = client
        .get(server.url("/"))
        .header("cookie", cookie.split(';').next().unwrap())
        .send()
        .await
        .expect("overview over https");
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("No topics yet"));
}
