//! The test PKI (the testkit's), written to files, and a client that trusts it.

use std::path::{Path, PathBuf};

// Not every test binary that shares this module uses the TLS tests' PKI.
#[allow(unused_imports)]
pub use delayq_testkit::pki::{Pki, generate};

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A TLS client that trusts the test CA (and nothing else).
pub fn https_client(ca: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .timeout(super::PATIENCE)
        .build()
        .unwrap()
}
