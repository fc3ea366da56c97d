//! `[[discovery]]` entries: sources of nodes beside the static `[[node]]`s, as written and
//! resolved; `crate::control::discovery` follows them.
//!
//! The keys every source has (`name`, `weight`, `hold`, `interval`) are resolved here; each
//! kind's own keys in its module (`file`, `dns`, `etcd`).
//!
//! Layers: `file`, `dns` and `etcd` are below this module; they share with it only `entry`
//! (the [`Located`] error type, the raw entry and the duration parser; `etcd` and `file`: only
//! `Located`), a leaf below them all.

mod dns;
mod entry;
mod etcd;
mod file;

pub use dns::DnsSource;
pub(crate) use entry::{Located, RawDiscovery};
pub use etcd::EtcdSource;

use std::path::{Path, PathBuf};
use std::time::Duration;

use capstan_discovery::dns::DnsName;
use serde::Serialize;
use toml::Spanned;

use entry::duration;

/// What a source is: where its nodes come from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A watched file (`.json` or `.toml`), relative paths taken from the config's folder.
    File(PathBuf),
    /// SRV or A/AAAA records, looked up again at their TTL.
    Dns(DnsSource),
    /// A watched etcd key prefix.
    Etcd(EtcdSource),
}

impl SourceKind {
    /// The kind's name, as `/status` and `capstan check` give it.
    pub fn name(&self) -> &'static str {
        match self {
            SourceKind::File(_) => "file",
            SourceKind::Dns(_) => "dns",
            SourceKind::Etcd(_) => "etcd",
        }
    }

    /// Where the nodes come from, in one short phrase (a path, a DNS name, endpoints and a
    /// prefix).
    pub fn target(&self) -> String {
        match self {
            SourceKind::File(path) => path.display().to_string(),
            SourceKind::Dns(dns) => dns.name.to_string(),
            SourceKind::Etcd(etcd) => etcd.target(),
        }
    }
}

/// One `[[discovery]]` entry, resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiscoverySource {
    /// Prefix of the nodes' names (`PREFIX-ADDRESS`), and the source's name in `/status`.
    pub name: String,
    /// Where the nodes come from.
    pub kind: SourceKind,
    /// Weight of a node that does not give one.
    pub weight: u32,
    /// How long an explicitly empty list must persist before it is applied.
    #[serde(with = "humantime_serde")]
    pub hold: Duration,
    /// How often the source is looked at (a `file`); how often its last good list is put
    /// back into the cluster (every kind).
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
}

impl DiscoverySource {
    /// One line for `capstan check`.
    pub fn describe(&self) -> String {
        let how = match &self.kind {
            SourceKind::Dns(dns) => dns.describe(),
            SourceKind::Etcd(e) => {
                format!("watched, timeout {}", humantime::format_duration(e.timeout))
            }
            SourceKind::File(_) => format!(
                "looked at every {}",
                humantime::format_duration(self.interval)
            ),
        };
        let weight = match &self.kind {
            SourceKind::Dns(dns) if matches!(dns.name, DnsName::Srv(_)) => {
                "weight from each SRV record".to_string()
            }
            _ => format!("weight {} unless given", self.weight),
        };
        format!(
            "{} {} (nodes {}-ADDRESS, {weight}, {how}, an empty list applied after {})",
            self.kind.name(),
            self.kind.target(),
            self.name,
            humantime::format_duration(self.hold),
        )
    }
}

/// Resolves every entry; an error comes with the span of the key at fault.
pub(crate) fn resolve(
    raw: &[Spanned<RawDiscovery>],
    base_dir: Option<&Path>,
) -> Result<Vec<DiscoverySource>, Located> {
    let mut sources: Vec<DiscoverySource> = Vec::new();
    for entry in raw {
        let span = entry.span();
        let entry = entry.get_ref();
        let given = [
            entry.file.as_ref().map(Spanned::span),
            entry.dns.as_ref().map(Spanned::span),
            entry.etcd.as_ref().map(Spanned::span),
        ];
        if let Some(second) = given.into_iter().flatten().nth(1) {
            return Err((
                Some(second),
                "discovery: give one of `file`, `dns` and `etcd` per [[discovery]]".into(),
            ));
        }
        let kind = match (&entry.file, &entry.dns, &entry.etcd) {
            (Some(file), _, _) => SourceKind::File(file::resolve(file, base_dir)?),
            (None, Some(name), _) => SourceKind::Dns(dns::resolve(name, entry)?),
            (None, None, Some(endpoints)) => SourceKind::Etcd(etcd::resolve(
                endpoints,
                entry.prefix.as_ref(),
                entry.timeout.as_ref(),
                span.clone(),
            )?),
            (None, None, None) => {
                return Err((
                    Some(span),
                    "discovery: give `file = \"PATH\"` (a .json or .toml list of nodes) or \
                     `dns = \"NAME\"` (an SRV name, or host:port) or \
                     `etcd = [\"http://HOST:2379\"]` with `prefix`"
                        .into(),
                ))
            }
        };
        if !matches!(kind, SourceKind::Dns(_)) {
            // `timeout` is an etcd key too.
            let etcd = matches!(kind, SourceKind::Etcd(_));
            if let Some((key, at)) = dns::own_keys(entry)
                .into_iter()
                .find(|(key, at)| at.is_some() && !(etcd && *key == "timeout"))
            {
                let e = format!("discovery: `{key}` is for `dns` sources only");
                return Err((at, e));
            }
        }
        if let (false, Some(prefix)) = (matches!(kind, SourceKind::Etcd(_)), &entry.prefix) {
            return Err((
                Some(prefix.span()),
                "discovery: `prefix` is for `etcd` sources only".into(),
            ));
        }
        let name = match &entry.name {
            Some(n) => {
                check_prefix(n.get_ref()).map_err(|e| (Some(n.span()), e))?;
                n.get_ref().clone()
            }
            None => kind.name().to_string(),
        };
        if sources.iter().any(|s| s.name == name) {
            let at = entry.name.as_ref().map_or(span.clone(), |n| n.span());
            return Err((
                Some(at),
                format!("discovery: two sources are named `{name}`; give each its own `name`"),
            ));
        }
        let weight = match &entry.weight {
            Some(w) if *w.get_ref() == 0 => {
                return Err((
                    Some(w.span()),
                    "discovery: weight must be at least 1".into(),
                ))
            }
            Some(w) => *w.get_ref(),
            None => 1,
        };
        let hold = duration(&entry.hold, "hold", Duration::from_secs(30))?;
        let interval = duration(&entry.interval, "interval", Duration::from_secs(2))?;
        if interval.is_zero() {
            let at = entry.interval.as_ref().map(|i| i.span());
            return Err((at, "discovery: interval must be more than 0s".into()));
        }
        sources.push(DiscoverySource {
            name,
            kind,
            weight,
            hold,
            interval,
        });
    }
    Ok(sources)
}

/// The prefix ends up in node names: `/nodes/NAME` and the `X-Capstan-Node` header.
fn check_prefix(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 64 {
        return Err("discovery: name must be 1 to 64 bytes".into());
    }
    match name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.".contains(*c)))
    {
        Some(c) => Err(format!(
            "discovery: name `{name}` has {c:?}; use letters, digits, - _ ."
        )),
        None => Ok(()),
    }
}
