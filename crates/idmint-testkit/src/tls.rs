//! Certificates for the TLS tests, made fresh by each test with `rcgen`: a
//! CA, server certificates for `localhost` and `127.0.0.1` (valid, or
//! expired), client certificates, and a second, unrelated CA whose
//! certificates the first CA's trusters must refuse.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber,
};

/// A certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct CertPair {
    /// The certificate, PEM.
    pub cert: String,
    /// The private key, PEM (PKCS#8).
    pub key: String,
    /// The certificate, DER: what a client sees as the peer's.
    pub der: Vec<u8>,
}

impl CertPair {
    /// Writes `NAME.pem` and `NAME.key` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}.key"));
        std::fs::write(&cert, &self.cert).expect("write the certificate");
        std::fs::write(&key, &self.key).expect("write the key");
        (cert, key)
    }
}

/// A certificate authority that signs test certificates.
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's certificate, PEM: what clients (or, for mTLS, the server) trust.
    pub cert: String,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let mut params = CertificateParams::new(Vec::new()).expect("no names");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().expect("generate the CA key");
        let cert = params.self_signed(&key).expect("self-sign the CA");
        TestCa {
            cert: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// Writes the CA certificate to `dir/NAME.pem`; returns the path.
    pub fn write(&self, dir: &Path, name: &str) -> PathBuf {
        let path = dir.join(format!("{name}.pem"));
        std::fs::write(&path, &self.cert).expect("write the CA certificate");
        path
    }

    /// A server certificate for `localhost` and `127.0.0.1`, subject
    /// `CN=idmint test server <serial>`, with serial number `serial`
    /// (below 0x80: one DER byte), valid from 1975 to 4096.
    pub fn server(&self, serial: u8) -> CertPair {
        self.sign(serial, false, false)
    }

    /// [`TestCa::server`] whose validity ended in 2020.
    pub fn expired_server(&self, serial: u8) -> CertPair {
        self.sign(serial, false, true)
    }

    /// A client certificate, subject `CN=idmint test client <serial>`.
    pub fn client(&self, serial: u8) -> CertPair {
        self.sign(serial, true, false)
    }

    fn sign(&self, serial: u8, client: bool, expired: bool) -> CertPair {
        assert!(serial < 0x80, "one-byte positive serials only");
        let names = if client {
            Vec::new()
        } else {
            vec!["localhost".to_owned(), "127.0.0.1".to_owned()]
        };
        let mut params = CertificateParams::new(names).expect("valid names");
        let role = if client { "client" } else { "server" };
        params
            .distinguished_name
            .push(DnType::CommonName, format!("idmint test {role} {serial}"));
        params.serial_number = Some(SerialNumber::from_slice(&[serial]));
        params.use_authority_key_identifier_extension = true;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![if client {
            ExtendedKeyUsagePurpose::ClientAuth
        } else {
            ExtendedKeyUsagePurpose::ServerAuth
        }];
        if expired {
            params.not_before = rcgen::date_time_ymd(2019, 1, 1);
            params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        }
        let key = KeyPair::generate().expect("generate a key");
        let cert = params.signed_by(&key, &self.issuer).expect("sign");
        CertPair {
            cert: cert.pem(),
            key: key.serialize_pem(),
            der: cert.der().to_vec(),
        }
    }
}
