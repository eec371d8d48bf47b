//! HTTP to a CrowdSec Local API, as a bouncer (a bridge's feed) and as a
//! watcher (the guard's blocks) both speak it: TLS with the server checked
//! against the system's roots or `--crowdsec-ca FILE`, and a client
//! certificate (`--crowdsec-cert FILE --crowdsec-key FILE`) in place of an
//! API key or password (the LAPI admits it by the certificate's OU:
//! `bouncers_allowed_ou`, `agents_allowed_ou`); agents that follow no
//! redirect; secrets kept in files only their owner reads.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// https to a CrowdSec LAPI as flags: the bridge's and shield's bouncer
/// and the guard's watcher (each command puts what names the LAPI in the
/// argument group `crowdsec_lapi`, its ways to authenticate in
/// `crowdsec_auth`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LapiTlsFlags {
    /// https: the CA certificate(s) the LAPI's certificate must chain to (default: the system's roots).
    #[arg(long, value_name = "FILE", requires = "crowdsec_lapi")]
    pub crowdsec_ca: Option<PathBuf>,
    /// https: authenticate with this client certificate (PEM) instead of an API key or a password.
    #[arg(long, value_name = "FILE", requires = "crowdsec_key", group = "crowdsec_auth")]
    pub crowdsec_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "crowdsec_cert")]
    pub crowdsec_key: Option<PathBuf>,
}

impl LapiTlsFlags {
    pub fn lapi_tls(self) -> LapiTls {
        LapiTls { ca: self.crowdsec_ca, cert: self.crowdsec_cert, key: self.crowdsec_key }
    }
}

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

/// `--crowdsec-url` and the TLS flags checked together: the rustls config
/// for an https URL, none for http. An http URL to a host that is not
/// loopback sends the credential (an API key, a password, a token) in the
/// clear: allowed (a LAPI on a private network), and said once at start.
pub fn check_url(url: &str, tls: &LapiTls) -> Result<Option<Arc<rustls::ClientConfig>>, String> {
    let Some(rest) =
        url.strip_prefix("https://").map(|r| (true, r)).or(url.strip_prefix("http://").map(|r| (false, r)))
    else {
        return Err(format!("--crowdsec-url {url}: expected http://HOST:PORT or https://HOST:PORT"));
    };
    match rest {
        (true, _) => tls.client_config().map(Some),
        (false, _) if tls.has_cert() || tls.ca.is_some() => {
            Err(format!("--crowdsec-url {url}: --crowdsec-ca and --crowdsec-cert need an https:// URL"))
        }
        (false, hostport) => {
            if let Some(warn) = cleartext_warning(url, hostport) {
                tracing::warn!(event = "lapi_cleartext", "{warn}");
            }
            Ok(None)
        }
    }
}

/// The warning for an http URL whose host (in `hostport`, what follows
/// `http://`) is not loopback.
fn cleartext_warning(url: &str, hostport: &str) -> Option<String> {
    let authority = hostport.split('/').next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback =
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    (!loopback).then(|| {
        format!("--crowdsec-url {url}: http to a host that is not loopback sends the LAPI credential in the clear; use https:// (with --crowdsec-ca for a private CA)")
    })
}

/// A transport error (refused, reset, DNS) as a line naming `url` once:
/// ureq's own text starts with the URL already.
pub fn transport_error(url: &str, e: &ureq::Error) -> String {
    let text = e.to_string();
    if text.contains(url) {
        text
    } else {
        format!("{url}: {text}")
    }
}

/// A warning when a file holding a secret (an API key, a password) can be
/// read by its group or others, naming the flag, the file and its mode.
pub fn secret_file_warning(flag: &str, path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o044 != 0).then(|| {
        format!(
            "{flag} {}: mode {mode:04o}, readable by group or others; whoever reads it can use the credential (chmod 600)",
            path.display()
        )
    })
}

/// A 3xx answer as "HTTP 302 to LOCATION" (at most 200 characters of it,
/// escaped for the log): agents here follow no redirect, so that a key, a
/// password or a token goes only where its flag says.
pub fn redirect(r: &ureq::Response) -> Option<String> {
    (300..400).contains(&r.status()).then(|| {
        let to = r
            .header("Location")
            .map_or_else(|| "no Location".to_owned(), |l| format!("{:?}", l.chars().take(200).collect::<String>()));
        format!("HTTP {} redirect to {to}", r.status())
    })
}

/// The agent a bouncer pulls with (and a watcher pushes with): no redirects (see [`redirect`]).
pub fn agent(tls: Option<&Arc<rustls::ClientConfig>>) -> ureq::Agent {
    let b =
        ureq::AgentBuilder::new().timeout_connect(Duration::from_secs(5)).timeout(Duration::from_secs(60)).redirects(0);
    match tls {
        Some(t) => b.tls_config(Arc::clone(t)),
        None => b,
    }
    .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleartext_to_another_host_is_said() {
        for url in ["http://127.0.0.1:8080", "http://localhost:8080/", "http://[::1]:8080", "http://127.0.0.2"] {
            let rest = url.strip_prefix("http://").unwrap();
            assert_eq!(cleartext_warning(url, rest), None, "{url}");
        }
        for url in ["http://10.0.0.5:8080", "http://lapi.example:8080", "http://[2001:db8::1]:8080/"] {
            let rest = url.strip_prefix("http://").unwrap();
            assert!(cleartext_warning(url, rest).is_some_and(|w| w.contains("in the clear")), "{url}");
        }
        assert!(check_url("ftp://x", &LapiTls::default()).unwrap_err().contains("expected http://"));
        let with_ca = LapiTls { ca: Some("/ca.pem".into()), ..LapiTls::default() };
        assert!(check_url("http://127.0.0.1:8080", &with_ca).unwrap_err().contains("need an https:// URL"));
        assert!(check_url("http://127.0.0.1:8080", &LapiTls::default()).unwrap().is_none());
    }

    #[test]
    fn a_refused_connection_names_its_url_once() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}/v1/decisions/stream");
        let e = agent(None).get(&url).call().unwrap_err();
        let line = transport_error(&url, &e);
        assert_eq!(line.matches(&url).count(), 1, "{line}");
        assert!(line.starts_with(&url), "{line}");
    }
}
