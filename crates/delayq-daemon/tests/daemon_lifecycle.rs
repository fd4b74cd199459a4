//! `Daemon::start_on` and `Daemon::stop` on memory storage: what a start leaves running and what
//! a stop (or a start that fails half-way) takes down.

use std::time::Duration;

use delayq::Queue;
use delayq_daemon::config::{StorageConfig, TlsConfig};
use delayq_daemon::{Daemon, ServerConfig, ServerError};
use tokio::net::TcpListener;

fn memory_config() -> ServerConfig {
    let mut config = ServerConfig::default();
    config.storage = StorageConfig::Memory;
    config
}

#[tokio::test]
async fn a_started_daemon_serves_and_its_stop_closes_the_listener_and_the_queue() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let queue = Queue::memory();
    let mut daemon = Daemon::start_on(listener, queue.clone(), &memory_config())
        .await
        .expect("start");
    let url = format!("http://{}/healthz", daemon.local_addr());
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 200);
    assert!(!queue.is_closing());
    // A shutdown future that is already complete: `wait` returns at once.
    daemon.wait(async {}).await;
    daemon.stop(Duration::from_secs(5)).await.expect("stop");
    assert!(queue.is_closing(), "the queue is shut down last");
    assert!(
        reqwest::get(&url).await.is_err(),
        "the listener is closed after the stop"
    );
}

#[tokio::test]
async fn a_start_that_fails_half_way_shuts_the_queue_down() {
    let mut config = memory_config();
    let dir = tempfile::tempdir().unwrap();
    config.tls = Some(TlsConfig::new(
        dir.path().join("missing-cert.pem"),
        dir.path().join("missing-key.pem"),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let queue = Queue::memory();
    let err = Daemon::start_on(listener, queue.clone(), &config)
        .await
        .unwrap_err();
    assert!(matches!(err, ServerError::Tls(_)), "{err:?}");
    assert!(err.to_string().contains("missing-cert.pem"), "{err}");
    assert!(
        queue.is_closing(),
        "the queue the start was given is shut down"
    );
}
