//! `http-load --tls`: the client side of TLS (rustls, ring provider), for
//! `https://` URLs: server certificates checked against `--tls-ca` or the
//! system's roots, or not at all with `--tls-insecure` (a test bed's
//! self-signed guard).

use crate::load::LoadError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring::default_provider, verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::Path;
use std::sync::Arc;

/// Where the roots come from when `--tls-ca` is not given (Debian's bundle,
/// unless `SSL_CERT_FILE` names another).
const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// How `https://` targets are checked (`--tls-ca`, `--tls-insecure`,
/// `--tls-server-name`); pools with URLs of their own use the same.
#[derive(Debug, Clone, Default)]
pub struct TlsOptions {
    pub ca: Option<std::path::PathBuf>,
    pub insecure: bool,
    pub server_name: Option<String>,
}

/// What every TLS connection of a run shares.
#[derive(Debug, Clone)]
pub struct ClientTls {
    pub config: Arc<ClientConfig>,
    /// Sent as SNI (none for an IP address) and checked against the certificate.
    pub name: ServerName<'static>,
}

/// Accepts any certificate; signatures are still checked (the handshake is
/// a real one, its cost unchanged).
#[derive(Debug)]
struct AnyCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        msg: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(msg, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        msg: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(msg, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The TLS side of a run against `target`: for an https:// URL, or any
/// with `force` (`--tls`, a pool's `tls = true`); None for plain HTTP.
pub fn for_target(target: &crate::load::Target, force: bool, o: &TlsOptions) -> Result<Option<ClientTls>, LoadError> {
    (target.tls || force).then(|| client(&target.host, o)).transpose()
}

/// The TLS side of a run against `host` (the URL's authority, port and
/// brackets allowed; `--tls-server-name` overrides it).
pub fn client(host: &str, o: &TlsOptions) -> Result<ClientTls, LoadError> {
    let invalid = |m: String| LoadError::Invalid(m);
    let (ca, insecure) = (o.ca.as_deref(), o.insecure);
    let bare = match o.server_name.as_deref() {
        Some(n) => n,
        None => match host.rsplit_once(':') {
            Some((h, p)) if !p.contains(']') => h,
            _ => host,
        },
    };
    let bare = bare.trim_start_matches('[').trim_end_matches(']');
    let name = ServerName::try_from(bare.to_string())
        .map_err(|e| invalid(format!("{bare:?} is not a name TLS can check: {e}")))?;
    let provider = Arc::new(default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| invalid(e.to_string()))?;
    let mut config = if insecure {
        builder.dangerous().with_custom_certificate_verifier(Arc::new(AnyCert(provider))).with_no_client_auth()
    } else {
        let env = std::env::var_os("SSL_CERT_FILE");
        let file = ca.unwrap_or_else(|| env.as_deref().map_or(Path::new(SYSTEM_ROOTS), Path::new));
        let mut roots = RootCertStore::empty();
        let certs = CertificateDer::pem_file_iter(file)
            .map_err(|e| invalid(format!("{}: {e}", file.display())))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| invalid(format!("{}: {e}", file.display())))?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(invalid(format!("{}: no CA certificate in it", file.display())));
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(ClientTls { config: Arc::new(config), name })
}
