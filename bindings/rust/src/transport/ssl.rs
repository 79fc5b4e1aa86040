//! TLS for the SQL and ZooKeeper URLs, in libpq's words: `sslmode=disable|prefer|allow`
//! connect without TLS; `require`, `verify-ca` and `verify-full` connect with TLS and verify
//! the server's certificate and name — stricter than libpq's `require`, which checks nothing —
//! against the system's roots (rustls-native-certs, which reads `SSL_CERT_FILE` too) or the
//! CA file that `sslrootcert=` names.

use rustls::pki_types::CertificateDer;

/// `sslmode` and `sslrootcert` as they are read from a URL's query.
#[derive(Debug, Default)]
pub(crate) struct SslQuery {
    verify: bool,
    root: Option<String>,
}

impl SslQuery {
    /// Takes `key=value` if it is one of TLS's: `Ok(true)`; `Ok(false)` if it is not.
    pub(crate) fn take(&mut self, key: &str, value: &str) -> Result<bool, String> {
        match (key, value) {
            ("sslmode", "disable" | "prefer" | "allow") => self.verify = false,
            ("sslmode", "require" | "verify-ca" | "verify-full") => self.verify = true,
            ("sslmode", other) => {
                return Err(format!(
                    ": sslmode={other:?} (use disable, prefer, require, verify-ca or verify-full)"
                ));
            }
            ("sslrootcert", path) => self.root = Some(path.to_owned()),
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// `None` without TLS; with TLS, the CA file to verify against, or `None` for the
    /// system's roots.
    pub(crate) fn finish(self) -> Result<Option<Option<String>>, String> {
        if self.root.is_some() && !self.verify {
            return Err(": sslrootcert needs sslmode=require, verify-ca or verify-full".into());
        }
        Ok(self.verify.then_some(self.root))
    }
}

/// The certificates a server's chain must end in: those of the CA file `root`, or the
/// system's.
pub(crate) fn roots(root: Option<&str>) -> Result<Vec<CertificateDer<'static>>, String> {
    match root {
        Some(path) => {
            use rustls::pki_types::pem::PemObject;
            CertificateDer::pem_file_iter(path)
                .map_err(|e| format!("sslrootcert {path:?}: {e}"))?
                .map(|cert| cert.map_err(|e| format!("sslrootcert {path:?}: {e}")))
                .collect()
        }
        None => Ok(rustls_native_certs::load_native_certs().certs),
    }
}

/// A rustls client configuration (ring, TLS 1.2 and 1.3) that verifies a server against the
/// CA file `root`, or the system's roots.
pub(crate) fn client_config(root: Option<&str>) -> Result<rustls::ClientConfig, String> {
    let mut store = rustls::RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(roots(root)?);
    if added == 0 {
        return Err(format!(
            "no root certificate in {}",
            root.unwrap_or("the system's store")
        ));
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(store)
        .with_no_client_auth())
}

/// The same roots as [`roots`], as PEM text (zookeeper-client takes its CA so).
pub(crate) fn roots_pem(root: Option<&str>) -> Result<String, String> {
    use base64::Engine as _;
    let mut pem = String::new();
    for cert in roots(root)? {
        let b64 = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
        pem.push_str("-----BEGIN CERTIFICATE-----\n");
        for line in b64.as_bytes().chunks(64) {
            pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
            pem.push('\n');
        }
        pem.push_str("-----END CERTIFICATE-----\n");
    }
    if pem.is_empty() {
        return Err(format!(
            "no CA certificates in {}",
            root.unwrap_or("the system's roots")
        ));
    }
    Ok(pem)
}

/// Makes ring the process's default rustls provider unless the process chose one already.
/// Libraries that build their TLS configuration from the default (redis for `rediss://`,
/// zookeeper-client) need one, and with both ring and aws-lc-rs built in (zookeeper-client's
/// `tls` feature brings the latter) rustls does not pick one itself.
pub(crate) fn default_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may install one between the check and here: either is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
