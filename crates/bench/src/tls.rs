//! TLS for `https://` targets: a rustls client configuration built once per run (ring provider,
//! TLS 1.2 and 1.3, ALPN `http/1.1`, in-memory session resumption as a browser would).
//!
//! `--http2` (ALPN `h2`, [`h2_client`]) and `--http3` (a QUIC client configuration,
//! [`quic_client`]) use the same trust.
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
use crate::error::BenchError;

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

/// The TLS client for `cfg`'s target, or `None` for `http://` (and for `--http2` and
/// `--http3`, which take [`h2_client`]'s and [`quic_client`]'s configurations instead).
pub(crate) fn client(cfg: &BenchConfig) -> Result<Option<Tls>, BenchError> {
    if !cfg.target.tls || cfg.protocol != crate::config::Protocol::Http1 {
        return Ok(None);
    }
    let host = cfg.target.host.trim_matches(['[', ']']).to_string();
    let name = ServerName::try_from(host)
        .map_err(|_| BenchError::Config(format!("bad TLS server name {:?}", cfg.target.host)))?;
    let config = Arc::new(rustls_config(cfg, b"http/1.1")?);
    Ok(Some(Tls {
        connector: TlsConnector::from(config.clone()),
        name,
        config,
        per_client: cfg.tls_session_per_client,
    }))
}

/// The TLS client for `--http2`: the run's trust, ALPN `h2` only.
pub(crate) fn h2_client(cfg: &BenchConfig) -> Result<TlsConnector, BenchError> {
    Ok(TlsConnector::from(Arc::new(rustls_config(cfg, b"h2")?)))
}

/// The QUIC client configuration for `--http3`: the same trust as https (`--cacert`,
/// `--insecure`, the system bundle), TLS 1.3 (QUIC has no other), ALPN `h3`, and session
/// resumption in memory for the whole run (no 0-RTT: the generator never sends early data).
pub(crate) fn quic_client(cfg: &BenchConfig) -> Result<quinn::ClientConfig, BenchError> {
    let config = rustls_config(cfg, b"h3")?;
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(config)
        .map_err(|e| BenchError::Config(format!("QUIC: {e}")))?;
    let mut client = quinn::ClientConfig::new(Arc::new(quic));
    let mut transport = quinn::TransportConfig::default();
    // A connection lives as long as the run; an idle timeout shorter than a request's would
    // end connections waiting on a slow server.
    let idle = cfg.timeout.max(std::time::Duration::from_secs(30));
    if let Ok(idle) = quinn::IdleTimeout::try_from(idle) {
        transport.max_idle_timeout(Some(idle));
    }
    if host_tcp_runs_bbr() {
        transport.congestion_controller_factory(Arc::new(bbr()));
    }
    client.transport_config(Arc::new(transport));
    Ok(client)
}

/// Whether the kernel's TCP congestion control is BBR: then `--http2` and `--http1`'s
/// connections run it, and `--http3`'s QUIC runs quinn's BBR too rather than its default CUBIC,
/// so the protocols are compared on the same terms (the switch's `quic_congestion = "system"`
/// makes the same choice for the responses).
fn host_tcp_runs_bbr() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .is_ok_and(|name| name.trim().starts_with("bbr"))
}

/// quinn's BBR with RFC 9002's initial window of 10 smallest datagrams, TCP's IW10 (quinn's
/// own BBR default is 200).
fn bbr() -> quinn::congestion::BbrConfig {
    let mut bbr = quinn::congestion::BbrConfig::default();
    bbr.initial_window(10 * 1200);
    bbr
}

/// A rustls client configuration with the run's trust and one ALPN protocol.
fn rustls_config(cfg: &BenchConfig, alpn: &[u8]) -> Result<ClientConfig, BenchError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone());
    let builder = if alpn == b"h3" {
        builder.with_protocol_versions(&[&rustls::version::TLS13])
    } else {
        builder.with_safe_default_protocol_versions()
    }
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
    config.alpn_protocols = vec![alpn.to_vec()];
    Ok(config)
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
