//! The node's TLS listener (`tls_listen`, `tls_cert`, `tls_key`): HTTPS with rustls (ring, TLS
//! 1.2 and 1.3, ALPN `http/1.1`, session resumption by the library's defaults), so that with
//! `resources = real` the secure class's cost is the real one — a handshake when a client (or
//! the switch) opens a session, and encryption of every byte — instead of the CAP paper's
//! modelled SSL costs.
//!
//! Handshakes are counted (completed, of them resumed; failed) and shown in the load report's
//! `tls` object: the secure class's real work is seen where its modelled work would be.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Serialize;
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::error::OriginError;

/// A client that does not finish its handshake within this time is dropped, so a stalled or
/// non-TLS client cannot hold a task forever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshake counters of the TLS listener (all workers share them).
#[derive(Debug, Default)]
pub struct TlsCounters {
    handshakes: AtomicU64,
    resumed: AtomicU64,
    failed: AtomicU64,
}

/// The load report's `tls` object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TlsReport {
    /// Completed handshakes since the start.
    pub handshakes: u64,
    /// Of them, abbreviated ones (a session resumed by ticket or ID): no key exchange by the
    /// certificate's key.
    pub resumed: u64,
    /// Handshakes that failed or timed out (plain HTTP on the TLS port among them).
    pub failed: u64,
}

impl TlsCounters {
    pub fn report(&self) -> TlsReport {
        TlsReport {
            handshakes: self.handshakes.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// The acceptor for `cert` (a PEM chain, the server's certificate first) and `key` (PEM,
/// PKCS#8, PKCS#1 or SEC1). Every problem is one line naming the file.
pub fn acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, OriginError> {
    let bad =
        |path: &Path, why: String| OriginError::Config(format!("tls: {}: {why}", path.display()));
    let cert_pem = std::fs::read(cert).map_err(|e| bad(cert, format!("cannot read: {e}")))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(cert, format!("not a PEM certificate file: {e}")))?;
    if chain.is_empty() {
        return Err(bad(cert, "no CERTIFICATE block in the file".into()));
    }
    let key_pem = std::fs::read(key).map_err(|e| bad(key, format!("cannot read: {e}")))?;
    let key_der = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| bad(key, format!("no usable PEM private key: {e}")))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| OriginError::Config(format!("tls: {e}")))?
        .with_no_client_auth()
        // Checks that the key belongs to the certificate (where the key type allows).
        .with_single_cert(chain, key_der)
        .map_err(|e| bad(key, format!("unusable with {}: {e}", cert.display())))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Runs the handshake on `stream` and counts it; `None` when it failed (already counted).
pub async fn handshake(
    acceptor: &TlsAcceptor,
    stream: TcpStream,
    counters: &TlsCounters,
) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => {
            counters.handshakes.fetch_add(1, Ordering::Relaxed);
            if tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
                counters.resumed.fetch_add(1, Ordering::Relaxed);
            }
            Some(tls)
        }
        Ok(Err(e)) => {
            tracing::debug!("TLS handshake failed: {e}");
            counters.failed.fetch_add(1, Ordering::Relaxed);
            None
        }
        Err(_) => {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}
