//! The `dns` kind's keys: the name (`_service._proto.domain` for SRV, else `host:port`), the
//! servers to ask, the bounds on the answer's TTL and how patiently to ask.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use capstan_discovery::dns::DnsName;
use serde::{Serialize, Serializer};
use toml::Spanned;

use super::entry::{duration, Located, RawDiscovery};

/// A `dns` source, resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DnsSource {
    /// What to look up.
    #[serde(serialize_with = "as_text")]
    pub name: DnsName,
    /// Servers to ask (`IP:PORT`); empty: the `nameserver`s of `/etc/resolv.conf`.
    pub resolvers: Vec<SocketAddr>,
    /// The answer's TTL is raised to this before the next lookup (a TTL of 0 would ask
    /// without pause), and failed lookups are retried after it (then twice as long, and so on).
    #[serde(with = "humantime_serde")]
    pub min_ttl: Duration,
    /// The answer's TTL is lowered to this: the longest a change can go unseen.
    #[serde(with = "humantime_serde")]
    pub max_ttl: Duration,
    /// How long one query waits for an answer.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Queries per lookup before it fails (at least 1).
    pub attempts: u32,
}

fn as_text<S: Serializer>(name: &DnsName, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(name)
}

impl DnsSource {
    /// What `capstan check` says about how it is followed.
    pub(super) fn describe(&self) -> String {
        let servers = match self.resolvers.is_empty() {
            true => "/etc/resolv.conf".to_string(),
            false => (self.resolvers.iter())
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        };
        format!(
            "{} via {servers}, looked up again after its TTL within {}..{}",
            match self.name {
                DnsName::Srv(_) => "SRV",
                DnsName::Host { .. } => "A/AAAA",
            },
            humantime::format_duration(self.min_ttl),
            humantime::format_duration(self.max_ttl),
        )
    }
}

/// The dns-only keys of an entry, for refusing them on another kind.
pub(super) fn own_keys(
    entry: &RawDiscovery,
) -> [(&'static str, Option<std::ops::Range<usize>>); 5] {
    [
        ("resolvers", entry.resolvers.as_ref().map(Spanned::span)),
        ("min_ttl", entry.min_ttl.as_ref().map(Spanned::span)),
        ("max_ttl", entry.max_ttl.as_ref().map(Spanned::span)),
        ("timeout", entry.timeout.as_ref().map(Spanned::span)),
        ("attempts", entry.attempts.as_ref().map(Spanned::span)),
    ]
}

pub(super) fn resolve(name: &Spanned<String>, entry: &RawDiscovery) -> Result<DnsSource, Located> {
    let parsed = DnsName::parse(name.get_ref())
        .map_err(|e| (Some(name.span()), format!("discovery: dns {e}")))?;
    let mut resolvers = Vec::new();
    for text in entry.resolvers.iter().flat_map(|r| r.get_ref()) {
        let at = entry.resolvers.as_ref().map(Spanned::span);
        let address = resolver_address(text).map_err(|e| (at, e))?;
        resolvers.push(address);
    }
    let min_ttl = duration(&entry.min_ttl, "min_ttl", Duration::from_secs(1))?;
    let max_ttl = duration(&entry.max_ttl, "max_ttl", Duration::from_secs(300))?;
    let timeout = duration(&entry.timeout, "timeout", Duration::from_secs(2))?;
    if min_ttl.is_zero() {
        let at = entry.min_ttl.as_ref().map(Spanned::span);
        return Err((at, "discovery: min_ttl must be more than 0s".into()));
    }
    if max_ttl < min_ttl {
        let at = entry
            .max_ttl
            .as_ref()
            .or(entry.min_ttl.as_ref())
            .map(Spanned::span);
        return Err((at, "discovery: max_ttl must be at least min_ttl".into()));
    }
    if timeout.is_zero() {
        let at = entry.timeout.as_ref().map(Spanned::span);
        return Err((at, "discovery: timeout must be more than 0s".into()));
    }
    let attempts = match &entry.attempts {
        Some(a) if !(1..=10).contains(a.get_ref()) => {
            return Err((Some(a.span()), "discovery: attempts must be 1 to 10".into()))
        }
        Some(a) => *a.get_ref(),
        None => 2,
    };
    Ok(DnsSource {
        name: parsed,
        resolvers,
        min_ttl,
        max_ttl,
        timeout,
        attempts,
    })
}

/// `IP:PORT`, or an IP alone for port 53. A name is refused: it would need a resolver itself.
fn resolver_address(text: &str) -> Result<SocketAddr, String> {
    let address = match (text.parse::<SocketAddr>(), text.parse::<IpAddr>()) {
        (Ok(address), _) => address,
        (_, Ok(ip)) => SocketAddr::new(ip, 53),
        _ => {
            return Err(format!(
                "discovery: resolvers: `{text}` is not IP:PORT (an IP address, not a name)"
            ))
        }
    };
    match address.port() {
        0 => Err(format!("discovery: resolvers: `{text}`: port 0")),
        _ => Ok(address),
    }
}
