//! What a lookup returns: the usable records with their addresses and the answer's TTL, or a
//! specific error. Plain data, no resolver types, so callers need not know hickory.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// One usable record: an SRV record with its target's addresses, or (for `host:port`) the
/// host's addresses with the port (then `priority` and `weight` are 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The SRV target or the host, without its trailing dot.
    pub target: String,
    pub port: u16,
    pub priority: u16,
    pub weight: u16,
    /// Never empty; each address with `port` appears once in the whole answer.
    pub addresses: Vec<IpAddr>,
}

/// A good answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Answer {
    /// Sorted by priority (lowest first), then as the server listed them.
    pub records: Vec<Record>,
    /// The smallest TTL among the records used (SRV and A/AAAA), for when to ask again. An IP
    /// literal has none: a day.
    pub ttl: Duration,
    /// What was dropped and why, one line each (`_http._tcp.web.test: a.web.test:0: port 0`).
    pub skipped: Vec<String>,
}

impl Answer {
    /// Every address with its port and the record it came from; no address twice.
    pub fn endpoints(&self) -> impl Iterator<Item = (SocketAddr, &Record)> {
        self.records.iter().flat_map(|record| {
            (record.addresses.iter()).map(move |ip| (SocketAddr::new(*ip, record.port), record))
        })
    }
}

/// Why a whole answer is refused. Each names the name asked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    /// The name does not exist.
    #[error("{name}: no such name (NXDOMAIN)")]
    NxDomain { name: String },
    /// The name exists but has no record of the type asked for.
    #[error("{name}: no {rtype} record")]
    NoRecords { name: String, rtype: &'static str },
    /// The server answered with an error code (SERVFAIL, REFUSED, …).
    #[error("{name}: the server answered {rcode}")]
    Rcode { name: String, rcode: String },
    /// No server answered within the attempts.
    #[error("{name}: no answer ({attempts} attempts of {timeout:?})")]
    Timeout {
        name: String,
        attempts: u32,
        timeout: Duration,
    },
    /// Records came, but none could give a node (each reason is in the message).
    #[error("{name}: no usable record: {reasons}")]
    NoUsableRecord { name: String, reasons: String },
    /// The servers could not be reached or their answer not read (no server configured, an
    /// unreadable `/etc/resolv.conf`, a socket error, an answer that does not parse).
    #[error("{name}: {message}")]
    Failed { name: String, message: String },
}

impl DnsError {
    /// A short word for metrics labels: `nxdomain`, `no_records`, `servfail`, `rcode`,
    /// `timeout`, `no_usable_record`, `failed`.
    pub fn kind(&self) -> &'static str {
        match self {
            DnsError::NxDomain { .. } => "nxdomain",
            DnsError::NoRecords { .. } => "no_records",
            DnsError::Rcode { rcode, .. } if rcode == "SERVFAIL" => "servfail",
            DnsError::Rcode { .. } => "rcode",
            DnsError::Timeout { .. } => "timeout",
            DnsError::NoUsableRecord { .. } => "no_usable_record",
            DnsError::Failed { .. } => "failed",
        }
    }

    /// Worth asking again at once: the server may answer next time (a timeout, SERVFAIL, a
    /// socket error), unlike a definite answer.
    pub(crate) fn transient(&self) -> bool {
        match self {
            DnsError::Timeout { .. } | DnsError::Failed { .. } => true,
            DnsError::Rcode { rcode, .. } => rcode == "SERVFAIL",
            _ => false,
        }
    }
}

/// An address a node can have: not unspecified, multicast or broadcast. Loopback and private
/// ranges are fine (tests, clusters).
pub(crate) fn usable_address(ip: IpAddr) -> Result<(), &'static str> {
    match ip {
        _ if ip.is_unspecified() => Err("unspecified address"),
        _ if ip.is_multicast() => Err("multicast address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Err("broadcast address"),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_pair_each_address_with_its_record_port() {
        let record = |port, ips: &[&str]| Record {
            target: "t".into(),
            port,
            priority: 0,
            weight: 0,
            addresses: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        };
        let answer = Answer {
            records: vec![record(80, &["10.0.0.1", "::1"]), record(81, &["10.0.0.1"])],
            ttl: Duration::from_secs(5),
            skipped: vec![],
        };
        let seen: Vec<String> = answer.endpoints().map(|(a, _)| a.to_string()).collect();
        assert_eq!(seen, ["10.0.0.1:80", "[::1]:80", "10.0.0.1:81"]);
    }

    #[test]
    fn bad_addresses_and_kinds() {
        for bad in ["0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "ff02::1"] {
            assert!(usable_address(bad.parse().unwrap()).is_err(), "{bad}");
        }
        assert!(usable_address("127.0.0.2".parse().unwrap()).is_ok());
        let servfail = DnsError::Rcode {
            name: "n".into(),
            rcode: "SERVFAIL".into(),
        };
        assert_eq!(servfail.kind(), "servfail");
        assert!(servfail.transient());
        assert!(!DnsError::NxDomain { name: "n".into() }.transient());
    }
}
