//! TLS to nodes: a node with a `tls` table is reached over TLS (HAProxy's `server … ssl verify
//! required ca-file … sni …`, Envoy's upstream TLS transport socket).
//!
//! ```toml
//! [[node]]
//! address = "10.0.0.1:443"
//! tls = { ca_file = "ca.pem", sni = "api.example.com" }
//! ```
//!
//! The connection: TCP connect, the PROXY header when configured (it belongs to the TCP
//! connection, so it comes before the handshake), the TLS handshake offering ALPN `http/1.1`,
//! then HTTP/1.1 as to any node — or, for a node with `protocol = "h2"`, ALPN `h2` and HTTP/2
//! (see [`crate::upstream::h2`]). The node's certificate is verified against `ca_file` (a PEM
//! bundle; required while `verify` is on — the switch ships no trust store) for the name in
//! `sni`, which is also the SNI sent. Without `sni` the node's IP address is the name: no SNI
//! is sent and the certificate must list that address (an `IP:` subjectAltName).
//! `verify = false` skips the check (insecure; logged as a warning at load).
//!
//! The CA file is read when the configuration is loaded, so `capstan check`, start-up and a
//! reload refuse a missing, unreadable or empty bundle with a one-line error. A reload that
//! changes any node's TLS settings (or the bundle's content) rebuilds the connection pools.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::{Deserialize, Serialize};

use crate::net::node_clock::{NodeClock, TimedTcp};

/// A node's `tls` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawNodeTls {
    ca_file: Option<String>,
    sni: Option<String>,
    #[serde(default = "verify_by_default")]
    verify: bool,
}

fn verify_by_default() -> bool {
    true
}

/// A node's TLS settings, loaded: what was written (for `capstan check` and `/status`) and the
/// rustls client configuration built from it.
#[derive(Clone)]
pub struct NodeTls {
    pub ca_file: Option<PathBuf>,
    /// The name sent as SNI and verified; `None`: the node's IP address.
    pub sni: Option<String>,
    pub verify: bool,
    server_name: ServerName<'static>,
    client: Arc<rustls::ClientConfig>,
    /// A digest of the CA bundle's content, so a reload with a new bundle rebuilds the pools.
    ca_digest: u64,
    /// ALPN offers `h2` only (the node's `protocol = "h2"`), else `http/1.1` only.
    alpn_h2: bool,
}

impl PartialEq for NodeTls {
    fn eq(&self, other: &Self) -> bool {
        self.ca_file == other.ca_file
            && self.sni == other.sni
            && self.verify == other.verify
            && self.server_name == other.server_name
            && self.ca_digest == other.ca_digest
            && self.alpn_h2 == other.alpn_h2
    }
}

/// Over what decides the connections (the fields `eq` compares, less the name derived from
/// them): a cluster's fingerprint is made of these.
impl Hash for NodeTls {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.ca_file.hash(state);
        self.sni.hash(state);
        self.verify.hash(state);
        self.ca_digest.hash(state);
        self.alpn_h2.hash(state);
    }
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls")
            .field("ca_file", &self.ca_file)
            .field("sni", &self.sni)
            .field("verify", &self.verify)
            .finish_non_exhaustive()
    }
}

impl Serialize for NodeTls {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Shown<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            ca_file: &'a Option<PathBuf>,
            #[serde(skip_serializing_if = "Option::is_none")]
            sni: &'a Option<String>,
            verify: bool,
        }
        Shown {
            ca_file: &self.ca_file,
            sni: &self.sni,
            verify: self.verify,
        }
        .serialize(s)
    }
}

impl NodeTls {
    /// One line for `capstan check`.
    pub fn describe(&self) -> String {
        let name = match &self.sni {
            Some(sni) => format!("sni {sni}"),
            None => "no SNI (the certificate must name the IP address)".to_string(),
        };
        match (&self.ca_file, self.verify) {
            (Some(ca), true) => format!("TLS, verified against {}, {name}", ca.display()),
            _ => format!("TLS, NOT verified (verify = false), {name}"),
        }
    }
}

/// Loads a node's `tls` table (a relative `ca_file` is taken from `base_dir`). The error is
/// one line, prefixed with the key at fault.
pub(crate) fn resolve(
    raw: &RawNodeTls,
    address: SocketAddr,
    base_dir: Option<&Path>,
    protocol: crate::config::NodeProtocol,
) -> Result<NodeTls, String> {
    let server_name = match &raw.sni {
        Some(sni) => match ServerName::try_from(sni.clone()) {
            Ok(name) => name,
            Err(_) => return Err(format!("tls.sni: `{sni}` is not a valid DNS name")),
        },
        None => ServerName::IpAddress(address.ip().into()),
    };
    let ca_file = raw.ca_file.as_ref().map(|f| match base_dir {
        Some(dir) if Path::new(f).is_relative() => dir.join(f),
        _ => PathBuf::from(f),
    });
    let (roots, ca_digest) = match &ca_file {
        Some(path) => load_roots(path)?,
        None if raw.verify => {
            return Err(
                "tls.ca_file: name a PEM bundle of the CAs that sign the node's \
                        certificate (or set verify = false, which is insecure)"
                    .into(),
            )
        }
        None => (rustls::RootCertStore::empty(), 0),
    };
    let builder = rustls::ClientConfig::builder_with_provider(crate::net::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("tls: {e}"))?;
    let mut client = if raw.verify {
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification))
            .with_no_client_auth()
    };
    // One protocol offered: a node that cannot speak it fails the handshake (or, without
    // ALPN, the first request) instead of being spoken to in the other.
    let alpn_h2 = protocol == crate::config::NodeProtocol::H2;
    client.alpn_protocols = match alpn_h2 {
        true => vec![crate::net::tls::ALPN_H2.to_vec()],
        false => vec![crate::net::tls::ALPN_HTTP11.to_vec()],
    };
    Ok(NodeTls {
        ca_file,
        sni: raw.sni.clone(),
        verify: raw.verify,
        server_name,
        client: Arc::new(client),
        ca_digest,
        alpn_h2,
    })
}

/// The CA certificates of a PEM bundle, and a digest of the file.
fn load_roots(path: &Path) -> Result<(rustls::RootCertStore, u64), String> {
    let err = |message: String| format!("tls.ca_file {}: {message}", path.display());
    let pem = std::fs::read(path).map_err(|e| err(format!("cannot read: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("not a valid PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(err("no CERTIFICATE block in the file".into()));
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in certs {
        roots
            .add(cert)
            .map_err(|e| err(format!("not a usable CA certificate: {e}")))?;
    }
    let mut hasher = DefaultHasher::new();
    pem.hash(&mut hasher);
    Ok((roots, hasher.finish()))
}

/// `verify = false`: any certificate is accepted, but the handshake's signatures are still
/// checked (the connection is encrypted, not authenticated).
#[derive(Debug)]
struct NoVerification;

impl ServerCertVerifier for NoVerification {
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
        let provider = crate::net::tls::provider();
        let algorithms = &provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let provider = crate::net::tls::provider();
        let algorithms = &provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        crate::net::tls::provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The TLS settings of every TLS node of a cluster, by address, and a fingerprint of them all:
/// clients built for one fingerprint are rebuilt when it changes.
#[derive(Default)]
pub struct TlsToNodes {
    by_address: HashMap<SocketAddr, NodeTls>,
    pub fingerprint: u64,
}

impl TlsToNodes {
    pub fn of(nodes: &[crate::config::NodeConfig]) -> TlsToNodes {
        let mut hasher = DefaultHasher::new();
        let mut by_address = HashMap::new();
        for node in nodes {
            if let Some(tls) = &node.tls {
                node.address.hash(&mut hasher);
                tls.hash(&mut hasher);
                by_address.insert(node.address, tls.clone());
            }
        }
        TlsToNodes {
            by_address,
            fingerprint: if nodes.iter().any(|n| n.tls.is_some()) {
                hasher.finish()
            } else {
                0
            },
        }
    }

    pub fn get(&self, address: SocketAddr) -> Option<&NodeTls> {
        self.by_address.get(&address)
    }

    /// The node's settings for a URI the connector was given (its userinfo, the PROXY
    /// protocol's client addresses, is not part of the node's address).
    pub fn for_uri(&self, uri: &http::Uri) -> Option<&NodeTls> {
        if self.by_address.is_empty() {
            return None;
        }
        let authority = uri.authority()?.as_str();
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
        self.get(host_port.parse().ok()?)
    }
}

/// A connection to a node: plain TCP or TLS over it.
pub enum NodeStream {
    Plain(TimedTcp),
    Tls(Box<tokio_rustls::client::TlsStream<TimedTcp>>),
}

impl NodeStream {
    /// Runs the TLS handshake on `tcp` when `tls` says so. A certificate that does not verify
    /// fails here, as a connect error naming the cause.
    pub async fn over(tcp: TimedTcp, tls: Option<&NodeTls>) -> std::io::Result<NodeStream> {
        let Some(tls) = tls else {
            return Ok(NodeStream::Plain(tcp));
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.client));
        match connector.connect(tls.server_name.clone(), tcp).await {
            Ok(stream) => Ok(NodeStream::Tls(Box::new(stream))),
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!("TLS handshake failed: {e}"),
            )),
        }
    }

    /// The clock of the TCP connection underneath, when it is timed.
    pub fn clock(&self) -> Option<&Arc<NodeClock>> {
        match self {
            NodeStream::Plain(tcp) => tcp.clock(),
            NodeStream::Tls(tls) => tls.get_ref().0.clock(),
        }
    }
}

impl hyper_util::client::legacy::connect::Connection for NodeStream {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        hyper_util::client::legacy::connect::Connected::new()
    }
}

macro_rules! either {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            NodeStream::Plain($s) => {
                let $s = std::pin::Pin::new($s);
                $e
            }
            NodeStream::Tls($s) => {
                let $s = std::pin::Pin::new(&mut **$s);
                $e
            }
        }
    };
}

impl tokio::io::AsyncRead for NodeStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        either!(self, s => s.poll_read(cx, buf))
    }
}

impl tokio::io::AsyncWrite for NodeStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        either!(self, s => s.poll_write(cx, buf))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        either!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        either!(self, s => s.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        either!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            NodeStream::Plain(s) => s.is_write_vectored(),
            NodeStream::Tls(s) => s.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawNodeTls {
        toml::from_str(text).unwrap()
    }

    fn pki() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/tls")
    }

    #[test]
    fn bad_settings_are_one_line_errors() {
        let addr: SocketAddr = "127.0.0.1:443".parse().unwrap();
        let dir = pki();
        let cases = [
            ("sni = \"localhost\"", "tls.ca_file: name a PEM bundle"),
            ("ca_file = \"missing.pem\"", "missing.pem: cannot read"),
            ("ca_file = \"gen.sh\"", "gen.sh: no CERTIFICATE block"),
            (
                "ca_file = \"ca.pem\"\nsni = \"not a name!\"",
                "tls.sni: `not a name!` is not a valid DNS name",
            ),
        ];
        for (text, expected) in cases {
            let e = resolve(&raw(text), addr, Some(&dir), Default::default()).unwrap_err();
            assert!(e.contains(expected), "{text}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
        let ok = resolve(
            &raw("ca_file = \"ca.pem\""),
            addr,
            Some(&dir),
            Default::default(),
        );
        let ok = ok.unwrap();
        assert_eq!(ok.server_name, ServerName::IpAddress(addr.ip().into()));
        assert_eq!(ok.client.alpn_protocols, [b"http/1.1".to_vec()]);
        let h2 = crate::config::NodeProtocol::H2;
        let h2 = resolve(&raw("verify = false"), addr, None, h2).unwrap();
        assert_eq!(h2.client.alpn_protocols, [b"h2".to_vec()]);
    }
}
