//! TLS on the beanstalk listener of the real server (`delayq_daemon::run`): a CA and a
//! certificate generated at test time, a real rustls client that trusts only that CA doing
//! put, reserve and delete, and the clients that do not speak TLS or never finish the
//! handshake.

mod listener;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use delayq_daemon::config::{BeanstalkAddr, BeanstalkConfig, TlsConfig};
use listener::pki::{generate, https_client, write};
use listener::{PATIENCE, Running, start};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;

/// A server whose beanstalk listener speaks TLS with `pki`'s certificate, and its address.
async fn start_beanstalk_tls(
    dir: &std::path::Path,
    pki: &listener::pki::Pki,
    read_timeout_ms: u64,
) -> (Running, SocketAddr) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let tls = TlsConfig::new(
        write(dir, "cert.pem", &pki.cert),
        write(dir, "key.pem", &pki.key),
    );
    let running = start(|c| {
        c.tls = Some(tls);
        let mut b = BeanstalkConfig::new(BeanstalkAddr::Tcp(addr));
        b.tls = true;
        b.read_timeout_ms = read_timeout_ms;
        c.beanstalk = Some(b);
    })
    .await
    .with_client(https_client(&pki.ca));
    // The listener binds inside `run`: wait for it.
    let deadline = Instant::now() + PATIENCE;
    while TcpStream::connect(addr).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "the beanstalk listener never came up"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    (running, addr)
}

/// A rustls client that trusts only `ca`.
fn connector(ca: &str) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    TlsConnector::from(Arc::new(config))
}

/// Sends `command` and reads until the reply holds `want_lines` lines ending in `\r\n`.
async fn cmd<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    command: &str,
    want_lines: usize,
) -> String {
    s.write_all(command.as_bytes()).await.unwrap();
    s.write_all(b"\r\n").await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while got.windows(2).filter(|w| w == b"\r\n").count() < want_lines {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .expect("a reply in time")
            .unwrap();
        assert!(n > 0, "closed after {command:?}: {got:?}");
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(got).unwrap()
}

/// Reads until the server closes `s`, at most [`PATIENCE`]; returns what it sent.
async fn until_closed<S: AsyncRead + Unpin>(s: &mut S) -> Vec<u8> {
    let mut got = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, s.read_to_end(&mut got))
        .await
        .expect("closed in time");
    got
}

#[tokio::test]
async fn put_reserve_delete_over_tls_and_plain_clients_are_closed() {
    let pki = generate();
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = start_beanstalk_tls(dir.path(), &pki, 30_000).await;
    let tls = connector(&pki.ca);
    let name = ServerName::try_from("localhost").unwrap();
    let mut producer = tls
        .connect(name.clone(), TcpStream::connect(addr).await.unwrap())
        .await
        .expect("the handshake succeeds with the test CA");
    assert_eq!(cmd(&mut producer, "use tls", 1).await, "USING tls\r\n");
    let put = cmd(&mut producer, "put 7 0 60 6\r\nsecret", 1).await;
    let id = put
        .strip_prefix("INSERTED ")
        .and_then(|r| r.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("{put}"))
        .to_owned();
    let mut worker = tls
        .connect(name, TcpStream::connect(addr).await.unwrap())
        .await
        .unwrap();
    assert_eq!(cmd(&mut worker, "watch tls", 1).await, "WATCHING 2\r\n");
    assert_eq!(
        cmd(&mut worker, "reserve-with-timeout 5", 2).await,
        format!("RESERVED {id} 6\r\nsecret\r\n")
    );
    assert_eq!(
        cmd(&mut worker, &format!("delete {id}"), 1).await,
        "DELETED\r\n"
    );
    // The job went through the queue: the HTTP API sees it finished.
    let got = server.get_text(&format!("/get?topic=tls&id={id}")).await;
    assert!(got.contains("\"finished\""), "{got}");

    // A client that does not trust the CA fails the handshake: this is real TLS.
    let stranger = connector(&generate().ca);
    let refused = stranger
        .connect(
            ServerName::try_from("localhost").unwrap(),
            TcpStream::connect(addr).await.unwrap(),
        )
        .await;
    assert!(refused.is_err(), "an unknown CA is refused");

    // A plain-text client is closed without an answer.
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain.write_all(b"put 0 0 60 1\r\nx\r\n").await.unwrap();
    let sent = until_closed(&mut plain).await;
    assert!(!sent.starts_with(b"INSERTED"), "{sent:?}");
    // The TLS clients are unharmed.
    assert_eq!(
        cmd(&mut producer, "list-tube-used", 1).await,
        "USING tls\r\n"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_handshake_that_never_finishes_is_cut_after_the_read_timeout() {
    let pki = generate();
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = start_beanstalk_tls(dir.path(), &pki, 300).await;
    // Connected, silent: no handshake ever starts.
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // Half a ClientHello: a handshake started and never finished.
    let mut half = TcpStream::connect(addr).await.unwrap();
    half.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .await
        .unwrap();
    assert!(until_closed(&mut silent).await.is_empty());
    let _ = until_closed(&mut half).await;
    // A real client still gets in.
    let mut ok = connector(&pki.ca)
        .connect(
            ServerName::try_from("localhost").unwrap(),
            TcpStream::connect(addr).await.unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(cmd(&mut ok, "list-tube-used", 1).await, "USING default\r\n");
    server.stop().await;
}
