//! `[[listener]]` entries: TLS listeners with certificates chosen by SNI, or plain ones that also take HTTP/2 prior knowledge (h2c), as written and resolved (certificates read).

use std::net::SocketAddr;
use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::net::address::resolve_address;
use crate::net::tls::{CertificateFiles, ErrorAt, Tls, TlsFiles};

/// One `[[listener]]` entry, resolved.
#[derive(Clone, Debug, Serialize)]
pub struct Listener {
    pub address: SocketAddr,
    /// A plain listener that also takes HTTP/2 from clients that start with its preface.
    pub h2c: bool,
    /// Present for a TLS listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<Tls>,
    /// Most connections open at once on this listener (HAProxy's `bind … maxconn`); more
    /// wait in its accept queue. `limits.max_connections` holds as well.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// This listener's own `limits.max_connections_per_client`, counting only its own
    /// connections (0: no limit here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections_per_client: Option<usize>,
}

impl Listener {
    /// `https://ADDR (h2, http/1.1; 2 certificates)` and the like, for logs and `capstan check`.
    pub fn describe(&self) -> String {
        let mut limits = String::new();
        if let Some(n) = self.max_connections {
            limits.push_str(&format!(", at most {n} connections"));
        }
        match self.max_connections_per_client {
            Some(0) => limits.push_str(", no per-client limit"),
            Some(n) => limits.push_str(&format!(", at most {n} per client address")),
            None => {}
        }
        self.describe_kind() + &limits
    }

    fn describe_kind(&self) -> String {
        match &self.tls {
            Some(tls) => {
                let names: Vec<String> = tls
                    .names
                    .iter()
                    .map(|n| match n.is_empty() {
                        true => "(no DNS name)".to_string(),
                        false => n.join(" "),
                    })
                    .collect();
                format!(
                    "https://{} (ALPN {}; TLS {}; certificates, first is the default: {})",
                    self.address,
                    tls.files.alpn.join(", "),
                    tls.files.versions.join(", "),
                    names.join(" | ")
                )
            }
            None if self.h2c => format!("http://{} (HTTP/1.1 and h2c)", self.address),
            None => format!("http://{}", self.address),
        }
    }
}

/// A `[[listener]]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawListener {
    address: Spanned<String>,
    #[serde(default)]
    h2c: Option<Spanned<bool>>,
    #[serde(default, rename = "certificate")]
    certificates: Vec<Spanned<RawCertificate>>,
    alpn: Option<Spanned<Vec<String>>>,
    tls_versions: Option<Spanned<Vec<String>>>,
    max_connections: Option<Spanned<usize>>,
    max_connections_per_client: Option<Spanned<usize>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCertificate {
    cert: Spanned<String>,
    key: Spanned<String>,
}

/// Resolves `[[listener]]` tables, reading certificates and keys (relative paths from
/// `base_dir`). An error comes with the span it is about.
pub(crate) fn resolve(
    raw: &[Spanned<RawListener>],
    base_dir: Option<&Path>,
) -> Result<Vec<Listener>, (Option<Range<usize>>, String)> {
    let mut listeners: Vec<Listener> = Vec::new();
    for entry in raw {
        let l = entry.get_ref();
        let address = resolve_address(l.address.get_ref())
            .map_err(|e| (Some(l.address.span()), format!("listener: {e}")))?;
        let name = format!("listener {}", l.address.get_ref());
        let h2c = l.h2c.as_ref().is_some_and(|h| *h.get_ref());
        let is_tls = !l.certificates.is_empty();
        if !is_tls {
            let tls_key = l.alpn.as_ref().map(|a| ("alpn", a.span()));
            let tls_key = tls_key.or(l.tls_versions.as_ref().map(|v| ("tls_versions", v.span())));
            if let Some((key, span)) = tls_key {
                return Err((
                    Some(span),
                    format!(
                        "{name}: {key} needs TLS: add a [[listener.certificate]] with cert and key"
                    ),
                ));
            }
        }
        if is_tls && h2c {
            let span = l.h2c.as_ref().map(Spanned::span);
            return Err((
                span,
                format!("{name}: h2c is for plain listeners; a TLS listener offers h2 by ALPN"),
            ));
        }
        let tls = is_tls
            .then(|| load_tls(l, base_dir).map_err(|(span, e)| (span, format!("{name}: {e}"))))
            .transpose()?;
        if let Some(max) = l.max_connections.as_ref().filter(|m| *m.get_ref() == 0) {
            return Err((
                Some(max.span()),
                format!("{name}: max_connections must be at least 1 (leave it out for no limit)"),
            ));
        }
        listeners.push(Listener {
            address,
            h2c,
            tls,
            max_connections: l.max_connections.as_ref().map(|m| *m.get_ref()),
            max_connections_per_client: l.max_connections_per_client.as_ref().map(|m| *m.get_ref()),
        });
    }
    Ok(listeners)
}

fn load_tls(
    l: &RawListener,
    base_dir: Option<&Path>,
) -> Result<Tls, (Option<Range<usize>>, String)> {
    let defaults = TlsFiles::default();
    let files = TlsFiles {
        certificates: l
            .certificates
            .iter()
            .map(|c| CertificateFiles {
                cert: c.get_ref().cert.get_ref().into(),
                key: c.get_ref().key.get_ref().into(),
            })
            .collect(),
        alpn: l
            .alpn
            .as_ref()
            .map_or(defaults.alpn, |a| a.get_ref().clone()),
        versions: l
            .tls_versions
            .as_ref()
            .map_or(defaults.versions, |v| v.get_ref().clone()),
    };
    files.load(base_dir).map_err(|e| {
        let span = match e.at {
            ErrorAt::Cert(i) => Some(l.certificates[i].get_ref().cert.span()),
            ErrorAt::Key(i) => Some(l.certificates[i].get_ref().key.span()),
            ErrorAt::Alpn => l.alpn.as_ref().map(Spanned::span),
            ErrorAt::Versions => l.tls_versions.as_ref().map(Spanned::span),
            ErrorAt::Listener => None,
        };
        (span.or(Some(l.address.span())), e.message)
    })
}
