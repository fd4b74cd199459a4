//! Push delivery to an HTTPS target (docs/push.md): with `push_ca_file` naming the private CA
//! that signed the target's certificate, the call goes through; without it the TLS handshake
//! fails, a `connect` failure whose reason names the certificate, and the task goes DEAD.

mod listener;
mod support;

use std::sync::Arc;

use delayq_testkit::Receiver;
use listener::pki::{generate, write};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use support::{PATIENCE, server};

fn acceptor(pki: &listener::pki::Pki) -> tokio_rustls::TlsAcceptor {
    let certs = CertificateDer::pem_slice_iter(pki.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(pki.key.as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_target_signed_by_the_configured_ca_is_delivered() {
    let pki = generate();
    let dir = tempfile::tempdir().unwrap();
    let ca = write(dir.path(), "ca.pem", &pki.ca);
    let receiver = Receiver::start_tls(acceptor(&pki), |_, _| delayq_testkit::Reply::ok()).await;
    let url = format!("https://localhost:{}/secure", receiver.port());

    let trusted = server()
        .with_push()
        .config(|c| c.push.ca_file = Some(ca.clone()))
        .start()
        .await;
    trusted
        .post("/push", json!({"topic": "tls", "url": url}))
        .await
        .ok();
    trusted.add("tls", "t1", json!({"body": "over tls"})).await;
    let calls = receiver.wait_for(1, PATIENCE).await;
    assert_eq!(calls[0].body, b"over tls");
    assert_eq!(calls[0].path, "/secure");
    trusted
        .eventually("finished", async || {
            trusted.get_task("tls", "t1").await.ok()["state_name"] == "finished"
        })
        .await;

    // Without the CA, the target's certificate is not trusted.
    let untrusted = server().with_push().start().await;
    untrusted
        .post("/push", json!({"topic": "tls", "url": url}))
        .await
        .ok();
    untrusted.add("tls", "t2", json!({"max_retries": 0})).await;
    untrusted
        .eventually("dead", async || {
            untrusted.get_task("tls", "t2").await.ok()["state_name"] == "dead"
        })
        .await;
    let task = untrusted.get_task("tls", "t2").await;
    let error = task.ok()["last_error"].as_str().unwrap().to_owned();
    assert!(error.starts_with("push: "), "{error}");
    assert!(error.to_lowercase().contains("certificate"), "{error}");
    assert_eq!(
        receiver.calls().len(),
        1,
        "no request got through the failed handshake"
    );
    let stats = untrusted.get("/stats?topic=tls").await;
    assert_eq!(stats.ok()["push"]["failed_connect"], 1, "{}", stats.text);
}
