//! HTTPS: the rustls acceptor built from the configured certificate and key files.
//!
//! The files are read once, at start-up; every problem (a file that cannot be read, holds no
//! PEM item of the right kind, or a key that does not fit the certificate) stops the start
//! with the file named. Only HTTP/1.1 is offered (ALPN), like the plain listener.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use crate::config::TlsConfig;

/// A certificate or key file that cannot be used, named.
#[derive(Debug, thiserror::Error)]
#[error("{what} {path}: {reason}")]
pub struct TlsError {
    /// What was being done.
    pub what: &'static str,
    /// The file.
    pub path: std::path::PathBuf,
    /// What is wrong with it.
    pub reason: String,
}

/// The first byte of every TLS connection: a handshake record. Anything else on the TLS port
/// is a client speaking plain HTTP (or nonsense).
pub(crate) const HANDSHAKE_RECORD: u8 = 0x16;

/// Builds the HTTPS acceptor of `config` (ALPN `http/1.1`).
pub fn acceptor(config: &TlsConfig) -> Result<TlsAcceptor, TlsError> {
    let mut server = server_config(config)?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// Builds the acceptor of the beanstalk listener: the same certificate and key, no ALPN
/// (beanstalk clients offer none, and one that does must not be refused for it).
pub fn beanstalk_acceptor(config: &TlsConfig) -> Result<TlsAcceptor, TlsError> {
    Ok(TlsAcceptor::from(Arc::new(server_config(config)?)))
}

fn server_config(config: &TlsConfig) -> Result<rustls::ServerConfig, TlsError> {
    let certs = read_certs(&config.cert)?;
    let key = read_key(&config.key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| refused("setting up TLS with", &config.cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            refused(
                "using the TLS key",
                &config.key,
                format!(
                    "it does not fit the certificate {} or is not usable: {e}",
                    config.cert.display()
                ),
            )
        })
}

fn refused(what: &'static str, path: &Path, reason: String) -> TlsError {
    TlsError {
        what,
        path: path.to_owned(),
        reason,
    }
}

fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| refused(what, path, e.to_string()))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    const WHAT: &str = "reading the TLS certificate file";
    let pem = read_file(WHAT, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, pem::Error>>()
        .map_err(|e| refused(WHAT, path, format!("it is not valid PEM: {e}")))?;
    if certs.is_empty() {
        return Err(refused(
            WHAT,
            path,
            "it holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    const WHAT: &str = "reading the TLS key file";
    let pem = read_file(WHAT, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        let reason = match e {
            pem::Error::NoItemsFound => {
                "it holds no PEM private key (-----BEGIN PRIVATE KEY-----, \
                                         or an RSA or EC key)"
                    .to_owned()
            }
            e => format!("it is not valid PEM: {e}"),
        };
        refused(WHAT, path, reason)
    })
}
