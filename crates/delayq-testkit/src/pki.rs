//! A CA and a server certificate generated at test time (rcgen), for the TLS tests of the
//! listeners and of the PostgreSQL connection.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// A test CA and a certificate it signed, as PEM.
pub struct Pki {
    /// The CA's certificate.
    pub ca: String,
    /// The server's certificate.
    pub cert: String,
    /// The server's private key.
    pub key: String,
}

/// Generates a fresh CA and a certificate for `localhost` and `127.0.0.1` it signed.
pub fn generate() -> Pki {
    generate_for(&["localhost", "127.0.0.1"])
}

/// Generates a fresh CA and a certificate for `names` (DNS names or IP addresses) it signed.
pub fn generate_for(names: &[&str]) -> Pki {
    let ca_key = KeyPair::generate().expect("generate the CA's key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "delayq test CA");
    let ca = ca_params.self_signed(&ca_key).expect("sign the CA");
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().expect("generate the server's key");
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let params = CertificateParams::new(names).expect("server certificate parameters");
    let cert = params
        .signed_by(&key, &issuer)
        .expect("sign the server certificate");
    Pki {
        ca: ca.pem(),
        cert: cert.pem(),
        key: key.serialize_pem(),
    }
}
