//! TLS to PostgreSQL, with libpq's settings: `sslmode` and `sslrootcert` in the URL (or the
//! key=value string), meaning what they mean to `psql`, so a URL copied from a provider's
//! console works as it is.
//!
//! | `sslmode`            | TLS                         | the server's certificate            |
//! | -------------------- | --------------------------- | ----------------------------------- |
//! | `disable`            | never                       | -                                   |
//! | `prefer` (default)   | when the server offers it   | not checked (as libpq)              |
//! | `require`            | always                      | not checked, unless `sslrootcert`   |
//! | `verify-ca`          | always                      | signed by a root of `sslrootcert`   |
//! | `verify-full`        | always                      | that, and issued for the host name  |
//!
//! `sslrootcert` is a PEM file of root certificates, or `system` for the machine's roots
//! (the default of `verify-ca` and `verify-full` here; libpq's is `~/.postgresql/root.crt`).
//! As in libpq, `require` with a `sslrootcert` verifies as `verify-ca`.
//!
//! tokio-postgres knows only `disable`, `prefer` and `require` and no `sslrootcert`, so
//! [`split`] takes both out of the connection string before it is parsed, and [`connector`]
//! builds the rustls configuration they ask for.

use std::sync::Arc;

use delayq::{Error, InvalidField};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Nothing: the connection is encrypted, not authenticated (`prefer`, `require`).
    Nothing,
    /// The chain up to a trusted root, not the name (`verify-ca`).
    Chain,
    /// The chain and the host name (`verify-full`).
    Full,
}

/// What the TLS settings of a connection string ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// How much of the certificate is checked.
    pub verify: Verify,
    /// `sslrootcert`: a PEM file, or `None` for the machine's roots.
    pub root_cert: Option<String>,
}

/// Takes libpq's `sslmode=verify-ca|verify-full` and `sslrootcert=…` out of `url` (a
/// `postgres://` URL or a key=value string), leaving what tokio-postgres parses (a verifying
/// mode becomes `require`).
pub fn split(url: &str) -> Result<(String, TlsSettings), Error> {
    let (rest, pairs) = match url.split_once("://") {
        Some((scheme, tail)) if scheme == "postgres" || scheme == "postgresql" => {
            let (base, query) = tail.split_once('?').unwrap_or((tail, ""));
            let mut kept = Vec::new();
            let mut found = Vec::new();
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                if k == "sslmode" || k == "sslrootcert" {
                    found.push((k.to_owned(), percent_decode(v)?));
                } else {
                    kept.push(pair);
                }
            }
            let mut rest = format!("{scheme}://{base}");
            if !kept.is_empty() {
                rest.push('?');
                rest.push_str(&kept.join("&"));
            }
            (rest, found)
        }
        _ => {
            let mut kept = Vec::new();
            let mut found = Vec::new();
            for token in key_values(url) {
                match token.split_once('=') {
                    Some((k, v)) if k.trim() == "sslmode" || k.trim() == "sslrootcert" => {
                        found.push((k.trim().to_owned(), unquote(v.trim())));
                    }
                    _ => kept.push(token),
                }
            }
            (kept.join(" "), found)
        }
    };
    let mut mode = None;
    let mut root_cert = None;
    for (k, v) in pairs {
        if k == "sslmode" {
            mode = Some(v);
        } else {
            root_cert = Some(v);
        }
    }
    let (verify, pass_on) = match mode.as_deref() {
        None | Some("prefer") => (Verify::Nothing, mode),
        Some("disable") | Some("allow") => (Verify::Nothing, Some("disable".to_owned())),
        Some("require") if root_cert.is_some() => (Verify::Chain, mode),
        Some("require") => (Verify::Nothing, mode),
        Some("verify-ca") => (Verify::Chain, Some("require".to_owned())),
        Some("verify-full") => (Verify::Full, Some("require".to_owned())),
        Some(other) => {
            return Err(InvalidField::new(
                "postgres",
                format!(
                    "sslmode={other:?} is not one of disable, allow, prefer, require, \
                     verify-ca, verify-full"
                ),
            )
            .into());
        }
    };
    let rest = match pass_on {
        Some(mode) => with_param(&rest, "sslmode", &mode),
        None => rest,
    };
    let root_cert = root_cert.filter(|r| r != "system");
    Ok((rest, TlsSettings { verify, root_cert }))
}

/// The rustls connector `settings` ask for (every connection gets one: with `disable`
/// tokio-postgres never uses it).
pub fn connector(settings: &TlsSettings) -> Result<MakeRustlsConnect, Error> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::storage("choosing the TLS versions for PostgreSQL", e))?;
    let algorithms = provider.signature_verification_algorithms;
    let config = match settings.verify {
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked { algorithms }))
            .with_no_client_auth(),
        Verify::Chain | Verify::Full => {
            let roots = Arc::new(roots(settings.root_cert.as_deref())?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
                .build()
                .map_err(|e| Error::storage("building the PostgreSQL certificate check", e))?;
            if settings.verify == Verify::Full {
                builder.with_webpki_verifier(webpki).with_no_client_auth()
            } else {
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki)))
                    .with_no_client_auth()
            }
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The trusted roots: the PEM file `path`, or the machine's.
fn roots(path: Option<&str>) -> Result<RootCertStore, Error> {
    let mut store = RootCertStore::empty();
    let field = |detail: String| Error::from(InvalidField::new("postgres", detail));
    match path {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| field(format!("sslrootcert={path:?} cannot be read: {e}")))?;
            for cert in certs {
                let cert =
                    cert.map_err(|e| field(format!("sslrootcert={path:?} is not PEM: {e}")))?;
                store.add(cert).map_err(|e| {
                    field(format!("sslrootcert={path:?} holds a bad certificate: {e}"))
                })?;
            }
            if store.is_empty() {
                return Err(field(format!("sslrootcert={path:?} holds no certificate")));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(field(
                    "sslmode=verify-ca/verify-full without sslrootcert needs the machine's \
                     root certificates, and none were found: name a PEM file with sslrootcert"
                        .to_owned(),
                ));
            }
        }
    }
    Ok(store)
}

/// `verify-ca`: the chain is checked, the name is not.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require`: any certificate (libpq's meaning), the handshake's signatures
/// still checked so that the session keys are the server's.
#[derive(Debug)]
struct Unchecked {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `url` with `key=value` set: appended as a URL parameter or a key=value pair.
fn with_param(url: &str, key: &str, value: &str) -> String {
    if url.contains("://") {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}{key}={value}")
    } else if url.trim().is_empty() {
        format!("{key}={value}")
    } else {
        format!("{url} {key}={value}")
    }
}

/// The `key=value` tokens of a libpq connection string, quotes and escapes kept as written.
fn key_values(s: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                current.push(c);
                if let Some(next) = chars.next() {
                    current.push(next);
                }
            }
            '\'' => {
                quoted = !quoted;
                current.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !current.is_empty() {
                    tokens.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    // `key = value` with spaces around `=`: join the pieces back into one token.
    let mut joined: Vec<String> = Vec::new();
    for t in tokens {
        match joined.last_mut() {
            Some(last) if last.ends_with('=') || t.starts_with('=') => last.push_str(&t),
            _ => joined.push(t),
        }
    }
    joined
}

/// A key=value value without its quotes and escapes.
fn unquote(v: &str) -> String {
    let inner = v
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .unwrap_or(v);
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A URL parameter's value, `%XX` decoded.
fn percent_decode(v: &str) -> Result<String, Error> {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = v
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            let Some(b) = hex else {
                return Err(InvalidField::new(
                    "postgres",
                    format!("{v:?} has a bad %-escape at byte {i}"),
                )
                .into());
            };
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| {
        InvalidField::new("postgres", format!("{v:?} is not UTF-8 once decoded")).into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_takes_out_what_tokio_postgres_does_not_know() {
        let full = |root: Option<&str>| TlsSettings {
            verify: Verify::Full,
            root_cert: root.map(str::to_owned),
        };
        let none = TlsSettings {
            verify: Verify::Nothing,
            root_cert: None,
        };
        let chain = |root: &str| TlsSettings {
            verify: Verify::Chain,
            root_cert: Some(root.to_owned()),
        };
        let table: &[(&str, &str, TlsSettings)] = &[
            ("postgres://h/db", "postgres://h/db", none.clone()),
            (
                "postgres://u@h:5/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem",
                "postgres://u@h:5/db?sslmode=require",
                full(Some("/tmp/ca.pem")),
            ),
            (
                "postgresql://h/db?application_name=x&sslmode=verify-full",
                "postgresql://h/db?application_name=x&sslmode=require",
                full(None),
            ),
            (
                "postgres://h/db?sslmode=verify-full&sslrootcert=system",
                "postgres://h/db?sslmode=require",
                full(None),
            ),
            (
                "postgres://h/db?sslmode=require&sslrootcert=/ca.pem",
                "postgres://h/db?sslmode=require",
                chain("/ca.pem"),
            ),
            (
                "postgres://h/db?sslmode=disable",
                "postgres://h/db?sslmode=disable",
                none.clone(),
            ),
            (
                "host=h dbname=d sslmode=verify-ca sslrootcert='/a b/ca.pem'",
                "host=h dbname=d sslmode=require",
                chain("/a b/ca.pem"),
            ),
            (
                "host=h password='x y' sslmode = prefer",
                "host=h password='x y' sslmode=prefer",
                none.clone(),
            ),
        ];
        for (url, rest, settings) in table {
            let (got_rest, got) = split(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(&got_rest, rest, "{url}");
            assert_eq!(&got, settings, "{url}");
            got_rest
                .parse::<tokio_postgres::Config>()
                .unwrap_or_else(|e| panic!("{got_rest} does not parse: {e}"));
        }
    }

    #[test]
    fn split_refuses_what_libpq_would() {
        for (url, names) in [
            ("postgres://h/db?sslmode=verify", "sslmode=\"verify\""),
            ("postgres://h/db?sslrootcert=%zz", "%-escape"),
            ("host=h sslmode=strict", "sslmode=\"strict\""),
        ] {
            let e = split(url).expect_err(url).to_string();
            assert!(e.contains("postgres") && e.contains(names), "{url}: {e}");
        }
    }

    #[test]
    fn a_root_file_that_is_missing_or_empty_is_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").expect("write");
        for path in [dir.path().join("missing.pem"), empty] {
            let path = path.display().to_string();
            let settings = TlsSettings {
                verify: Verify::Full,
                root_cert: Some(path.clone()),
            };
            let e = connector(&settings).err().expect("refused").to_string();
            assert!(e.contains("sslrootcert") && e.contains(&path), "{e}");
        }
    }
}
