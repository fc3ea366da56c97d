//! `[[listener]]` entries: TLS listeners with certificates chosen by SNI (and, with
//! `quic = true`, HTTP/3 over QUIC on the same address's UDP port), or plain ones that also take
//! HTTP/2 prior knowledge (h2c), as written and resolved (certificates read).

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
    /// HTTP/3 on the same address over UDP, for a TLS listener with `quic = true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic: Option<Quic>,
}

/// A QUIC listener's settings (see `crate::frontend::quic`).
#[derive(Clone, Serialize)]
pub struct Quic {
    /// Most request streams a client may have open at once on one connection
    /// (`quic_max_streams`, QUIC's `initial_max_streams_bidi`).
    pub max_streams: u32,
    /// Handshakes in progress on the listener above which a client that has not proved its
    /// address gets a Retry first (`quic_retry_above`; 0: always).
    pub retry_above: usize,
    /// `Alt-Svc`'s `ma` on the TLS listener's responses, in seconds (`alt_svc_max_age`);
    /// 0: no `Alt-Svc`.
    pub alt_svc_max_age: u64,
    /// Accept 0-RTT data (`quic_0rtt`); requests with unsafe methods then wait for the
    /// handshake to finish.
    pub early_data: bool,
    /// The congestion controller of its connections (`quic_congestion`).
    pub congestion: Congestion,
    /// The TLS 1.3 side of QUIC: the listener's certificates and SNI, ALPN `h3`.
    #[serde(skip)]
    pub crypto: std::sync::Arc<quinn::crypto::rustls::QuicServerConfig>,
}

impl std::fmt::Debug for Quic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quic")
            .field("max_streams", &self.max_streams)
            .field("retry_above", &self.retry_above)
            .field("alt_svc_max_age", &self.alt_svc_max_age)
            .field("early_data", &self.early_data)
            .field("congestion", &self.congestion)
            .finish_non_exhaustive()
    }
}

/// A QUIC listener's congestion controller (`quic_congestion`). The switch's TCP listeners
/// get the kernel's (`net.ipv4.tcp_congestion_control`); by default QUIC follows the same
/// choice, so that HTTP/3 and HTTP/2 share a path on the same terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Congestion {
    /// The host's TCP choice: BBR when the kernel's is `bbr`, NewReno for `reno`, else CUBIC.
    System,
    Cubic,
    Bbr,
    NewReno,
}

impl Congestion {
    fn parse(name: &str) -> Option<Congestion> {
        Some(match name {
            "system" => Congestion::System,
            "cubic" => Congestion::Cubic,
            "bbr" => Congestion::Bbr,
            "new-reno" => Congestion::NewReno,
            _ => return None,
        })
    }

    /// `System` resolved with the kernel's TCP congestion control name (`None`: unknown, as
    /// off Linux), the others as they are.
    pub fn resolve(self, tcp: Option<&str>) -> Congestion {
        match (self, tcp.map(str::trim)) {
            (Congestion::System, Some("bbr" | "bbr2" | "bbr3")) => Congestion::Bbr,
            (Congestion::System, Some("reno")) => Congestion::NewReno,
            (Congestion::System, _) => Congestion::Cubic,
            (chosen, _) => chosen,
        }
    }

    /// The name as written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Congestion::System => "system",
            Congestion::Cubic => "cubic",
            Congestion::Bbr => "bbr",
            Congestion::NewReno => "new-reno",
        }
    }
}

/// Defaults of a QUIC listener: streams per connection, handshakes before Retry, `Alt-Svc`'s
/// max-age (a day, as Cloudflare and Google send).
const QUIC_MAX_STREAMS: u32 = 100;
const QUIC_RETRY_ABOVE: usize = 64;
const ALT_SVC_MAX_AGE: u64 = 86_400;

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
        let quic = match &self.quic {
            Some(q) => {
                let alt_svc = match q.alt_svc_max_age {
                    0 => "no Alt-Svc".to_string(),
                    n => format!("Alt-Svc ma={n}"),
                };
                let early = if q.early_data {
                    "0-RTT on"
                } else {
                    "0-RTT off"
                };
                format!(
                    "; HTTP/3 on udp://{} (up to {} streams per connection, Retry above {} handshakes, {alt_svc}, {early}, congestion control {})",
                    self.address, q.max_streams, q.retry_above, q.congestion.name()
                )
            }
            None => String::new(),
        };
        self.describe_kind() + &limits + &quic
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
    quic: Option<Spanned<bool>>,
    quic_max_streams: Option<Spanned<u32>>,
    quic_retry_above: Option<Spanned<usize>>,
    alt_svc_max_age: Option<Spanned<toml::Value>>,
    quic_0rtt: Option<Spanned<bool>>,
    quic_congestion: Option<Spanned<String>>,
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
        let quic =
            resolve_quic(l, tls.as_ref()).map_err(|(span, e)| (span, format!("{name}: {e}")))?;
        listeners.push(Listener {
            address,
            h2c,
            tls,
            max_connections: l.max_connections.as_ref().map(|m| *m.get_ref()),
            max_connections_per_client: l.max_connections_per_client.as_ref().map(|m| *m.get_ref()),
            quic,
        });
    }
    Ok(listeners)
}

type Located = (Option<Range<usize>>, String);

/// The QUIC settings of a listener with `quic = true` (`None` without); the other QUIC keys
/// without it are an error, as are QUIC without certificates or without TLS 1.3.
fn resolve_quic(l: &RawListener, tls: Option<&Tls>) -> Result<Option<Quic>, Located> {
    let on = l.quic.as_ref().is_some_and(|q| *q.get_ref());
    if !on {
        let stray = (l
            .quic_max_streams
            .as_ref()
            .map(|v| ("quic_max_streams", v.span())))
        .or(l
            .quic_retry_above
            .as_ref()
            .map(|v| ("quic_retry_above", v.span())))
        .or(l
            .alt_svc_max_age
            .as_ref()
            .map(|v| ("alt_svc_max_age", v.span())))
        .or(l.quic_0rtt.as_ref().map(|v| ("quic_0rtt", v.span())))
        .or((l.quic_congestion.as_ref()).map(|v| ("quic_congestion", v.span())));
        return match stray {
            Some((key, span)) => Err((Some(span), format!("{key} needs quic = true"))),
            None => Ok(None),
        };
    }
    let span = l.quic.as_ref().map(Spanned::span);
    let Some(tls) = tls else {
        return Err((
            span,
            "quic = true needs TLS (QUIC always encrypts): add a [[listener.certificate]] with cert and key".into(),
        ));
    };
    if !tls.files.has_tls13() {
        let span = l.tls_versions.as_ref().map(Spanned::span).or(span);
        return Err((
            span,
            "quic = true needs TLS 1.3 (QUIC uses no other version): add \"1.3\" to tls_versions"
                .into(),
        ));
    }
    let max_streams = l
        .quic_max_streams
        .as_ref()
        .map_or(QUIC_MAX_STREAMS, |v| *v.get_ref());
    if max_streams == 0 {
        let span = l.quic_max_streams.as_ref().map(Spanned::span);
        return Err((span, "quic_max_streams must be at least 1".into()));
    }
    let alt_svc_max_age = match &l.alt_svc_max_age {
        None => ALT_SVC_MAX_AGE,
        Some(v) => match v.get_ref() {
            toml::Value::Integer(n) if *n >= 0 => *n as u64,
            toml::Value::String(s) if s == "off" => 0,
            _ => {
                return Err((
                    Some(v.span()),
                    "alt_svc_max_age: want seconds (0 or more) or \"off\"".into(),
                ))
            }
        },
    };
    let early_data = l.quic_0rtt.as_ref().is_some_and(|v| *v.get_ref());
    let congestion = match &l.quic_congestion {
        None => Congestion::System,
        Some(v) => Congestion::parse(v.get_ref()).ok_or_else(|| {
            (
                Some(v.span()),
                "quic_congestion: want \"system\", \"cubic\", \"bbr\" or \"new-reno\"".into(),
            )
        })?,
    };
    let crypto = tls.quic_crypto(early_data).map_err(|e| (span.clone(), e))?;
    Ok(Some(Quic {
        max_streams,
        retry_above: l
            .quic_retry_above
            .as_ref()
            .map_or(QUIC_RETRY_ABOVE, |v| *v.get_ref()),
        alt_svc_max_age,
        early_data,
        congestion,
        crypto,
    }))
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

#[cfg(test)]
mod tests {
    use super::Congestion;

    #[test]
    fn system_congestion_follows_the_kernels_tcp() {
        let system = Congestion::System;
        assert_eq!(system.resolve(Some("bbr\n")), Congestion::Bbr);
        assert_eq!(system.resolve(Some("reno")), Congestion::NewReno);
        assert_eq!(system.resolve(Some("cubic")), Congestion::Cubic);
        assert_eq!(system.resolve(Some("htcp")), Congestion::Cubic);
        assert_eq!(system.resolve(None), Congestion::Cubic, "not Linux");
        assert_eq!(Congestion::Cubic.resolve(Some("bbr")), Congestion::Cubic);
        for name in ["system", "cubic", "bbr", "new-reno"] {
            assert_eq!(Congestion::parse(name).map(Congestion::name), Some(name));
        }
        assert_eq!(Congestion::parse("vegas"), None);
    }
}
