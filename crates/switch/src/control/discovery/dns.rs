//! The `dns` kind: SRV records (`_http._tcp.web.example`) or a host's A/AAAA records
//! (`web.example:8080`), looked up through `capstan_discovery::dns` and looked up again when
//! the answer's TTL (within `min_ttl`..`max_ttl`) has passed; after a failed lookup sooner:
//! `min_ttl`, then twice as long each time, up to 30 s (or `max_ttl` when less).
//!
//! An answer becomes nodes named `SOURCE-IP:PORT`:
//! - SRV: the weight of the record is the node's (0, "no preference", counts as 1). Only the
//!   records of the lowest priority value that has usable ones give nodes: the switch has no
//!   standby nodes, so the others wait in the DNS (RFC 2782: try them only when the first are
//!   gone). When every record of that priority goes, the next priority's take over.
//! - `host:port`: each address with the port, weighted by the source's `weight`.
//!
//! Records the lookup dropped (port 0, target `.`, a target that does not exist, a bad or
//! repeated address) and entries the shared checks refuse are listed in `/status` (`skipped`)
//! and counted in `capstan_discovery_skipped`, logged when they change; the rest apply.
//!
//! A lookup that fails without a definite answer (SERVFAIL or another error code, no answer,
//! records of which none is usable) is a failed look: the last good set stays for as long as
//! the failure lasts. A definite "there is no such service" (NXDOMAIN, or no record of the
//! type asked for) is an empty list, which the common part applies only once it has lasted
//! `hold` (HAProxy's `hold nx`): a record deleted for a moment costs nothing, a service taken
//! out of the DNS is followed. The reason is in `skipped` meanwhile.

use std::time::Duration;

use capstan_discovery::dns::{Answer, DnsError, DnsName, Options, Resolver};
use tokio::sync::mpsc;

use super::entries;
use super::look::{Dropped, Listing, Look};
use crate::config::{DiscoverySource, DnsSource};

/// The longest pause between lookups while they fail.
const MAX_RETRY: Duration = Duration::from_secs(30);

fn options(dns: &DnsSource) -> Options {
    Options {
        resolvers: dns.resolvers.clone(),
        timeout: dns.timeout,
        attempts: dns.attempts,
    }
}

/// The nodes an answer gives (see the module doc), and what it dropped.
pub(super) fn listing(source: &DiscoverySource, dns: &DnsSource, answer: &Answer) -> Listing {
    let mut listing = Listing {
        dropped: answer.skipped.clone(),
        ..Listing::default()
    };
    let srv = matches!(dns.name, DnsName::Srv(_));
    let first = answer.records.iter().map(|r| r.priority).min();
    for (address, record) in answer.endpoints() {
        let at = format!("{} ({}:{})", address, record.target, record.port);
        if Some(record.priority) != first {
            let why = format!("{at}: priority {}", record.priority);
            listing.standby.push(why);
            continue;
        }
        let weight = srv.then(|| u32::from(record.weight.max(1)));
        let made = entries::node(source, &at, address, weight, &address.to_string())
            .and_then(|node| entries::push_unique(&mut listing.nodes, &at, node));
        if let Err(e) = made {
            listing.dropped.push(format!("{}: {e}", dns.name));
        }
    }
    listing
}

/// One lookup, blocking (at start, and for `capstan check --resolve`): on a thread of its own
/// with its own small runtime, so it works inside and outside a runtime.
pub(super) fn look_once(source: &DiscoverySource, dns: &DnsSource) -> Result<Listing, String> {
    let lookup = || -> Result<Listing, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("no runtime for the lookup: {e}"))?;
        runtime.block_on(async {
            let resolver = Resolver::new(options(dns)).map_err(|e| e.to_string())?;
            let answer = resolver
                .resolve(&dns.name)
                .await
                .map_err(|e| e.to_string())?;
            Ok(listing(source, dns, &answer))
        })
    };
    std::thread::scope(|scope| {
        (scope.spawn(lookup).join()).unwrap_or_else(|_| Err("the lookup thread failed".into()))
    })
}

/// When to look again after `failures` failed lookups in a row.
fn retry_after(dns: &DnsSource, failures: u32) -> Duration {
    let doubled = dns
        .min_ttl
        .saturating_mul(1 << failures.saturating_sub(1).min(16));
    doubled.min(MAX_RETRY.min(dns.max_ttl)).max(dns.min_ttl)
}

/// Looks the name up now and again at each answer's TTL, sending each look; the records it
/// dropped go to `/status` (logged when they change). Ends when the receiver is gone.
pub(super) async fn feed(
    on_dropped: Dropped,
    source: DiscoverySource,
    dns: DnsSource,
    looks: mpsc::Sender<Look>,
) {
    let mut resolver: Option<Resolver> = None;
    let mut failures = 0;
    let mut dropped: Vec<String> = Vec::new();
    loop {
        let (listing, wait) = match lookup(&mut resolver, &dns).await {
            Ok(answer) => {
                failures = 0;
                let wait = answer.ttl.clamp(dns.min_ttl, dns.max_ttl);
                (Ok(listing(&source, &dns, &answer)), wait)
            }
            Err(e) if matches!(e.kind(), "nxdomain" | "no_records") => {
                failures += 1;
                let gone = Listing {
                    dropped: vec![format!("{e}: an empty list, applied after `hold`")],
                    ..Listing::default()
                };
                (Ok(gone), retry_after(&dns, failures))
            }
            Err(e) => {
                failures += 1;
                (Err(e.to_string()), retry_after(&dns, failures))
            }
        };
        if let Ok(listing) = &listing {
            for line in listing.dropped.iter().filter(|l| !dropped.contains(l)) {
                tracing::warn!(source = %source.name, "discovery: dropped {line}");
            }
            if listing.dropped != dropped {
                dropped.clone_from(&listing.dropped);
                on_dropped(dropped.clone());
            }
        }
        let look = listing.map(|l| l.nodes);
        if looks.send(look).await.is_err() {
            return;
        }
        tokio::time::sleep(wait).await;
    }
}

/// One lookup, making the resolver first if need be (it reads `/etc/resolv.conf`: off the
/// event loop).
async fn lookup(resolver: &mut Option<Resolver>, dns: &DnsSource) -> Result<Answer, DnsError> {
    let resolver = match resolver {
        Some(resolver) => resolver,
        None => {
            let options = options(dns);
            let made = tokio::task::spawn_blocking(move || Resolver::new(options))
                .await
                .map_err(|e| DnsError::Failed {
                    name: dns.name.to_string(),
                    message: format!("making the resolver failed: {e}"),
                })?;
            resolver.insert(made?)
        }
    };
    resolver.resolve(&dns.name).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_discovery::dns::Record;

    fn source(name: &str) -> (DiscoverySource, DnsSource) {
        let dns = DnsSource {
            name: DnsName::parse(name).unwrap(),
            resolvers: vec![],
            min_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(60),
            timeout: Duration::from_secs(1),
            attempts: 1,
        };
        let source = DiscoverySource {
            name: "web".into(),
            kind: crate::config::SourceKind::Dns(dns.clone()),
            weight: 4,
            hold: Duration::from_secs(30),
            interval: Duration::from_secs(2),
        };
        (source, dns)
    }

    fn record(priority: u16, weight: u16, port: u16, ips: &[&str]) -> Record {
        Record {
            target: "t.test".into(),
            port,
            priority,
            weight,
            addresses: ips.iter().map(|ip| ip.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn srv_weights_become_node_weights_and_only_the_first_priority_serves() {
        let (source, dns) = source("_http._tcp.web.test");
        let answer = Answer {
            records: vec![
                record(0, 0, 80, &["10.0.0.1"]),
                record(0, 7, 81, &["10.0.0.2", "::1"]),
                record(5, 1, 80, &["10.0.0.3"]),
            ],
            ttl: Duration::from_secs(5),
            skipped: vec!["_http._tcp.web.test: x.test:0: port 0".into()],
        };
        let listing = listing(&source, &dns, &answer);
        let nodes: Vec<(String, u32)> = (listing.nodes.iter())
            .map(|n| (n.name.clone(), n.weight))
            .collect();
        assert_eq!(
            nodes,
            [
                ("web-10.0.0.1:80".to_string(), 1),
                ("web-10.0.0.2:81".to_string(), 7),
                ("web-[::1]:81".to_string(), 7)
            ]
        );
        assert_eq!(listing.standby, ["10.0.0.3:80 (t.test:80): priority 5"]);
        assert_eq!(listing.dropped, answer.skipped);
    }

    #[test]
    fn host_nodes_take_the_source_weight_and_retries_back_off_within_bounds() {
        let (source, dns) = source("web.test:8080");
        let answer = Answer {
            records: vec![record(0, 0, 8080, &["10.0.0.1"])],
            ttl: Duration::from_secs(5),
            skipped: vec![],
        };
        let listing = listing(&source, &dns, &answer);
        assert_eq!(listing.nodes[0].weight, 4);
        assert_eq!(listing.nodes[0].name, "web-10.0.0.1:8080");
        let waits: Vec<u64> = (1..=8).map(|n| retry_after(&dns, n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(retry_after(&dns, u32::MAX), Duration::from_secs(30));
    }
}
