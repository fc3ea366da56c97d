//! TLS for `https://` targets: a rustls client configuration built once per run (ring provider,
//! TLS 1.2 and 1.3, ALPN `http/1.1`, in-memory session resumption as a browser would).
//!
//! Trust: `--cacert FILE` (PEM) replaces the system bundle, as with curl; otherwise the first
//! bundle found among `$SSL_CERT_FILE` and the usual distribution paths is read (no network, no
//! extra crate). `--insecure` accepts any certificate for any name.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_rustls::TlsConnector;

use crate::config::BenchConfig;
use crate::BenchError;

/// Where distributions keep their CA bundle.
const BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
    "/etc/ssl/ca-bundle.pem",
];

/// What a lane needs to open TLS connections to the target.
#[derive(Clone)]
pub(crate) struct Tls {
    pub connector: TlsConnector,
    pub name: ServerName<'static>,
    /// The configuration of `connector`, from which a client of its own is made per user
    /// (`tls_session_per_client`).
    config: Arc<ClientConfig>,
    per_client: bool,
}

/// Sessions a user's own cache holds (tickets of one server; a few suffice).
const USER_SESSIONS: usize = 8;

impl Tls {
    /// A connector with a session cache of its own for one user (a closed-loop client, a
    /// session), when the run asks for that; `None`: use the run's shared `connector`.
    pub fn for_user(&self) -> Option<TlsConnector> {
        if !self.per_client {
            return None;
        }
        let mut config = (*self.config).clone();
        config.resumption = rustls::client::Resumption::in_memory_sessions(USER_SESSIONS);
        Some(TlsConnector::from(Arc::new(config)))
    }
}

/// The TLS client for `cfg`'s target, or `None` for `http://`.
pub(crate) fn client(cfg: &BenchConfig) -> Result<Option<Tls>, BenchError> {
    if !cfg.target.tls {
        return Ok(None);
    }
    let host = cfg.target.host.trim_matches(['[', ']']).to_string();
    let name = ServerName::try_from(host)
        .map_err(|_| BenchError::Config(format!("bad TLS server name {:?}", cfg.target.host)))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| BenchError::Config(format!("TLS: {e}")))?;
    let mut config = if cfg.insecure {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAny(provider)))
            .with_no_client_auth()
    } else {
        builder
            .with_root_certificates(roots(cfg.ca_pem.as_deref())?)
            .with_no_client_auth()
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let config = Arc::new(config);
    Ok(Some(Tls {
        connector: TlsConnector::from(config.clone()),
        name,
        config,
        per_client: cfg.tls_session_per_client,
    }))
}

fn roots(ca_pem: Option<&[u8]>) -> Result<RootCertStore, BenchError> {
    let (pem, what) = match ca_pem {
        Some(p) => (p.to_vec(), "--cacert".to_string()),
        None => {
            let env = std::env::var("SSL_CERT_FILE").ok();
            let found = env
                .iter()
                .map(String::as_str)
                .chain(BUNDLES)
                .find_map(|p| std::fs::read(p).ok().map(|b| (b, p.to_string())));
            found.ok_or_else(|| {
                BenchError::Config(
                    "https: no CA bundle found on this system; give --cacert FILE or --insecure"
                        .into(),
                )
            })?
        }
    };
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| BenchError::Config(format!("{what}: bad PEM: {e}")))?;
        // A bundle may hold certificates webpki cannot use as anchors; skip those.
        let _ = store.add(cert);
    }
    if store.is_empty() {
        return Err(BenchError::Config(format!(
            "{what}: no usable certificates in the PEM"
        )));
    }
    Ok(store)
}

/// `--insecure`: any certificate, any name. Signatures are still checked so that the handshake
/// costs what a verifying client's does apart from the chain.
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
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
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
