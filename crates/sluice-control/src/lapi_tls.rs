//! TLS to a CrowdSec Local API: the server checked against the system's
//! roots or `--crowdsec-ca FILE`, and a client certificate
//! (`--crowdsec-cert FILE --crowdsec-key FILE`) in place of an API key
//! (the LAPI admits it by the certificate's OU: `bouncers_allowed_ou`,
//! `agents_allowed_ou`).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The TLS flags of a LAPI client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LapiTls {
    /// PEM CA certificate(s) the server's certificate must chain to
    /// (default: the system's roots).
    pub ca: Option<PathBuf>,
    /// PEM client certificate (chain) and its key.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

impl LapiTls {
    /// Whether a client certificate authenticates (instead of a key or password).
    pub fn has_cert(&self) -> bool {
        self.cert.is_some()
    }

    /// The rustls client config these flags say; errors name the flag and file.
    pub fn client_config(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.ca {
            Some(ca) => {
                for c in certs("--crowdsec-ca", ca)? {
                    roots.add(c).map_err(|e| format!("--crowdsec-ca {}: {e}", ca.display()))?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                for c in native.certs {
                    // A system root rustls cannot use is skipped, as curl does.
                    let _ = roots.add(c);
                }
                if roots.is_empty() {
                    return Err("no system root certificates were found: give --crowdsec-ca FILE".into());
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let config = match (&self.cert, &self.key) {
            (Some(cert), Some(key)) => {
                let chain = certs("--crowdsec-cert", cert)?;
                let key_der = PrivateKeyDer::from_pem_file(key)
                    .map_err(|e| format!("--crowdsec-key {}: not a PEM private key ({e})", key.display()))?;
                builder
                    .with_client_auth_cert(chain, key_der)
                    .map_err(|e| format!("--crowdsec-cert {}: {e}", cert.display()))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err("--crowdsec-cert and --crowdsec-key go together".into()),
        };
        Ok(Arc::new(config))
    }
}

fn certs(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<_> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{flag} {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{flag} {}: not PEM certificates ({e})", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{flag} {}: no certificate in it", path.display()));
    }
    Ok(certs)
}
