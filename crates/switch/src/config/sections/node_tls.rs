//! A node's `tls` table: as written, resolved (CA roots loaded, the rustls client configuration built), and the TLS settings of every TLS node of a cluster by address.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::{Deserialize, Serialize};

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
    pub(crate) server_name: ServerName<'static>,
    pub(crate) client: Arc<rustls::ClientConfig>,
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

/// Loads a node's `tls` table (a relative `ca_file` is taken from `base_dir`; `alpn_h2`: the
/// node speaks HTTP/2, see `NodeProtocol`). The error is
/// one line, prefixed with the key at fault.
pub(crate) fn resolve(
    raw: &RawNodeTls,
    address: SocketAddr,
    base_dir: Option<&Path>,
    alpn_h2: bool,
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
        let h2 = true; // NodeProtocol::H2
        let h2 = resolve(&raw("verify = false"), addr, None, h2).unwrap();
        assert_eq!(h2.client.alpn_protocols, [b"h2".to_vec()]);
    }
}
