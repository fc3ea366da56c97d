//! TLS termination: certificates and keys read from PEM files, chosen by SNI, and the rustls
//! server configuration of a TLS listener (ALPN, protocol versions, session resumption).
//!
//! Certificates are read when the configuration is loaded, so `capstan check`, start-up and a
//! reload all refuse a missing file, an unreadable PEM or a key that does not belong to its
//! certificate with the same one-line error, and a reload that succeeds hands the new
//! certificates to new connections while open ones keep theirs. Session tickets are sealed
//! with one process-wide key set (rotated by rustls), so a client resumes across workers and
//! across reloads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use serde::Serialize;

/// ALPN protocol ids the switch can speak.
pub(crate) const ALPN_H2: &[u8] = b"h2";
pub(crate) const ALPN_HTTP11: &[u8] = b"http/1.1";
/// HTTP/3's ALPN id, the only one a QUIC listener offers (RFC 9114 §3.1).
pub(crate) const ALPN_H3: &[u8] = b"h3";

/// One certificate of a listener, as written in the configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CertificateFiles {
    /// PEM file with the certificate chain: the server's certificate first, then intermediates.
    pub cert: PathBuf,
    /// PEM file with its private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub key: PathBuf,
}

/// A TLS listener's settings, as written under `[[listener]]` (see [`crate::frontend::listener`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TlsFiles {
    /// Certificates offered by SNI name (their subjectAltName DNS names, wildcards included);
    /// the first one is the default for clients that send no name or an unknown one.
    pub certificates: Vec<CertificateFiles>,
    /// ALPN protocols offered, in the switch's order of preference.
    pub alpn: Vec<String>,
    /// TLS versions accepted: "1.2" and/or "1.3".
    pub versions: Vec<String>,
}

/// A TLS listener ready to accept: its files (for `capstan check` and `/status`) and the rustls
/// configuration built from them.
#[derive(Clone)]
pub struct Tls {
    pub files: TlsFiles,
    /// The SNI names each certificate serves, in the order of `files.certificates`.
    pub names: Vec<Vec<String>>,
    pub server_config: Arc<rustls::ServerConfig>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.files)
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl Serialize for Tls {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.files.serialize(s)
    }
}

/// Where in a `[[listener]]` table an error lies, for the configuration's located errors.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum ErrorAt {
    /// The `cert` of the certificate with this index.
    Cert(usize),
    /// The `key` of the certificate with this index.
    Key(usize),
    Alpn,
    Versions,
    Listener,
}

/// A TLS settings error: one line, and where it lies.
#[derive(Debug, Clone)]
pub(crate) struct TlsError {
    pub at: ErrorAt,
    pub message: String,
}

pub(crate) fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    Arc::clone(PROVIDER.get_or_init(|| Arc::new(rustls::crypto::ring::default_provider())))
}

/// One ticket key set for the whole process: tickets stay valid across workers and reloads.
fn ticketer() -> Result<Arc<dyn ProducesTickets>, rustls::Error> {
    static TICKETER: OnceLock<Arc<dyn ProducesTickets>> = OnceLock::new();
    if let Some(t) = TICKETER.get() {
        return Ok(Arc::clone(t));
    }
    let made = rustls::crypto::ring::Ticketer::new()?;
    Ok(Arc::clone(TICKETER.get_or_init(|| made)))
}

/// TLS 1.2 session-id resumption cache, shared like the ticketer.
fn session_cache() -> Arc<dyn StoresServerSessions> {
    static CACHE: OnceLock<Arc<dyn StoresServerSessions>> = OnceLock::new();
    Arc::clone(CACHE.get_or_init(|| rustls::server::ServerSessionMemoryCache::new(20_000)))
}

impl TlsFiles {
    /// Reads every certificate and key (relative paths from `base_dir`) and builds the rustls
    /// configuration.
    pub(crate) fn load(self, base_dir: Option<&Path>) -> Result<Tls, TlsError> {
        let err = |at, message: String| TlsError { at, message };
        if self.certificates.is_empty() {
            return Err(err(
                ErrorAt::Listener,
                "a TLS listener needs at least one certificate (cert and key)".into(),
            ));
        }
        let versions = self.protocol_versions()?;
        let alpn = self.alpn_ids()?;
        let mut resolver = SniResolver::default();
        let mut names = Vec::new();
        for (i, files) in self.certificates.iter().enumerate() {
            let key = load_certified_key(files, base_dir, i)?;
            let dns = dns_names(&key.cert[0]);
            resolver.add(Arc::new(key), &dns);
            names.push(dns);
        }
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&versions)
            .map_err(|e| err(ErrorAt::Versions, format!("TLS versions: {e}")))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        config.alpn_protocols = alpn;
        config.session_storage = session_cache();
        config.ticketer =
            ticketer().map_err(|e| err(ErrorAt::Listener, format!("session tickets: {e}")))?;
        Ok(Tls {
            files: self,
            names,
            server_config: Arc::new(config),
        })
    }

    /// Whether TLS 1.3 is among the versions (QUIC speaks nothing else, RFC 9001 §4.2).
    pub(crate) fn has_tls13(&self) -> bool {
        self.versions.iter().any(|v| v == "1.3")
    }

    fn protocol_versions(
        &self,
    ) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, TlsError> {
        let mut versions = Vec::new();
        for v in &self.versions {
            versions.push(match v.as_str() {
                "1.2" => &rustls::version::TLS12,
                "1.3" => &rustls::version::TLS13,
                other => {
                    return Err(TlsError {
                        at: ErrorAt::Versions,
                        message: format!(
                            "TLS version `{other}` is not supported (want \"1.2\" or \"1.3\")"
                        ),
                    })
                }
            });
        }
        if versions.is_empty() {
            return Err(TlsError {
                at: ErrorAt::Versions,
                message: "versions must name at least one of \"1.2\" and \"1.3\"".into(),
            });
        }
        Ok(versions)
    }

    fn alpn_ids(&self) -> Result<Vec<Vec<u8>>, TlsError> {
        let mut ids = Vec::new();
        for p in &self.alpn {
            match p.as_bytes() {
                ALPN_H2 | ALPN_HTTP11 => ids.push(p.as_bytes().to_vec()),
                _ => {
                    return Err(TlsError {
                        at: ErrorAt::Alpn,
                        message: format!(
                            "ALPN protocol `{p}` is not supported (want \"h2\" and/or \"http/1.1\")"
                        ),
                    })
                }
            }
        }
        Ok(ids)
    }
}

impl Tls {
    /// The TLS side of a QUIC listener beside this TLS one: the same certificates chosen by
    /// the same SNI resolver and the same session tickets, but TLS 1.3 only and ALPN `h3`.
    /// `early_data`: accept 0-RTT (quinn wants the early-data limit at `u32::MAX` for it).
    pub(crate) fn quic_crypto(
        &self,
        early_data: bool,
    ) -> Result<Arc<quinn::crypto::rustls::QuicServerConfig>, String> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| format!("QUIC TLS: {e}"))?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&self.server_config.cert_resolver));
        config.alpn_protocols = vec![ALPN_H3.to_vec()];
        config.session_storage = session_cache();
        config.ticketer = ticketer().map_err(|e| format!("session tickets: {e}"))?;
        config.max_early_data_size = if early_data { u32::MAX } else { 0 };
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(config)
            .map_err(|e| format!("QUIC TLS: {e}"))?;
        Ok(Arc::new(quic))
    }
}

/// Reads one certificate chain and its key and checks that they belong together.
fn load_certified_key(
    files: &CertificateFiles,
    base_dir: Option<&Path>,
    index: usize,
) -> Result<CertifiedKey, TlsError> {
    let cert_path = resolve_path(&files.cert, base_dir);
    let key_path = resolve_path(&files.key, base_dir);
    let cert_err = |message: String| TlsError {
        at: ErrorAt::Cert(index),
        message: format!("certificate {}: {message}", cert_path.display()),
    };
    let key_err = |message: String| TlsError {
        at: ErrorAt::Key(index),
        message: format!("key {}: {message}", key_path.display()),
    };
    let cert_pem = std::fs::read(&cert_path).map_err(|e| cert_err(format!("cannot read: {e}")))?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| cert_err(format!("not a valid PEM certificate file: {e}")))?;
    if chain.is_empty() {
        return Err(cert_err("no CERTIFICATE block in the file".into()));
    }
    if let Err(e) = webpki::EndEntityCert::try_from(&chain[0]) {
        return Err(cert_err(format!(
            "the first certificate does not parse: {e}"
        )));
    }
    let key_pem = std::fs::read(&key_path).map_err(|e| key_err(format!("cannot read: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            key_err("no PRIVATE KEY block in the file".into())
        }
        e => key_err(format!("not a valid PEM private key: {e}")),
    })?;
    let signing_key = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| key_err(format!("unusable private key: {e}")))?;
    let certified = CertifiedKey::new(chain, signing_key);
    match certified.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(certified)
        }
        Err(_) => Err(key_err(format!(
            "does not match the certificate {}",
            cert_path.display()
        ))),
    }
}

fn resolve_path(path: &Path, base_dir: Option<&Path>) -> PathBuf {
    match base_dir {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path.to_path_buf(),
    }
}

/// The DNS names (lower case) a certificate's subjectAltName lists; `*.example.org` included.
fn dns_names(cert: &CertificateDer<'_>) -> Vec<String> {
    match webpki::EndEntityCert::try_from(cert) {
        Ok(ee) => ee
            .valid_dns_names()
            .map(|n| n.trim_end_matches('.').to_ascii_lowercase())
            .collect(),
        Err(_) => Vec::new(),
    }
}

/// Chooses a certificate by the client's SNI name: an exact name first, then a wildcard for
/// the name's parent (`*.example.org` serves `www.example.org`, not `a.b.example.org`), then
/// the default — the first certificate, so a client without SNI (or with an address for a
/// name) still completes the handshake, as nginx's default server does.
#[derive(Debug, Default)]
struct SniResolver {
    by_name: HashMap<String, Arc<CertifiedKey>>,
    default: Option<Arc<CertifiedKey>>,
}

impl SniResolver {
    fn add(&mut self, key: Arc<CertifiedKey>, names: &[String]) {
        if self.default.is_none() {
            self.default = Some(Arc::clone(&key));
        }
        for name in names {
            // An earlier certificate keeps a name two of them list.
            self.by_name
                .entry(name.clone())
                .or_insert_with(|| Arc::clone(&key));
        }
    }

    fn lookup(&self, name: &str) -> Option<&Arc<CertifiedKey>> {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(key) = self.by_name.get(&name) {
            return Some(key);
        }
        let (_, parent) = name.split_once('.')?;
        self.by_name.get(&format!("*.{parent}"))
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        hello
            .server_name()
            .and_then(|name| self.lookup(name))
            .or(self.default.as_ref())
            .cloned()
    }
}

impl Default for TlsFiles {
    fn default() -> Self {
        TlsFiles {
            certificates: Vec::new(),
            alpn: vec!["h2".into(), "http/1.1".into()],
            versions: vec!["1.2".into(), "1.3".into()],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_serve_one_label_only() {
        let mut r = SniResolver::default();
        let (a, b) = (dummy(), dummy());
        r.add(Arc::clone(&a), &["a.example.org".into()]);
        r.add(Arc::clone(&b), &["*.example.org".into()]);
        assert!(Arc::ptr_eq(r.lookup("A.Example.org.").unwrap(), &a));
        assert!(Arc::ptr_eq(r.lookup("www.example.org").unwrap(), &b));
        assert!(r.lookup("x.www.example.org").is_none());
        assert!(r.lookup("example.org").is_none());
    }

    fn dummy() -> Arc<CertifiedKey> {
        #[derive(Debug)]
        struct NoKey;
        impl rustls::sign::SigningKey for NoKey {
            fn choose_scheme(
                &self,
                _: &[rustls::SignatureScheme],
            ) -> Option<Box<dyn rustls::sign::Signer>> {
                None
            }
            fn algorithm(&self) -> rustls::SignatureAlgorithm {
                rustls::SignatureAlgorithm::ECDSA
            }
        }
        Arc::new(CertifiedKey::new(
            vec![CertificateDer::from(vec![0u8])],
            Arc::new(NoKey),
        ))
    }
}
