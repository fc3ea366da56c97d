//! The peers' health checks: every `tier.health_interval` each other peer is asked for the
//! reserved path `crate::state::tier::HEALTH_PATH`, marked as a check (`Capstan-Tier-Hop:
//! check`), which a switch that lists
//! this one among its peers answers itself (`crate::pipeline::tier::answer_peer`). `tier.fall`
//! failures in a row take a peer out (its keys go to the others), `tier.rise` passes bring it
//! back; a failed hop takes it out at once. Each check opens a fresh connection, as node checks
//! do, so a peer that stops accepting fails its check even while pooled connections live.
//!
//! What `/status`, the status page and `/metrics` show of the tier is here too.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::header::{HeaderName, HeaderValue, USER_AGENT};
use http::Request;
use http_body_util::Empty;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use serde::Serialize;

use crate::config::sections::tier::{TierAdmission, TierEjection};
use crate::state::health::CheckResult;
use crate::state::switch::Switch;
use crate::state::tier::{Tier, CHECK_MARK, HEALTH_PATH, HOP_HEADER};
use crate::upstream::probe::{Failed, Peers};
use capstan_core::text::escape_html;

/// The checking task: one round per `tier.health_interval` until shutdown.
pub(crate) async fn check_peers(switch: Arc<Switch>) {
    let Some(tier) = switch.tier.as_ref() else {
        return;
    };
    let client = Peers::for_checks(tier);
    let mut stop = switch.shutdown_signal();
    loop {
        let started = tokio::time::Instant::now();
        share_admission(&switch, tier);
        check_round(tier, &client).await;
        share_admission(&switch, tier);
        tokio::select! {
            _ = tokio::time::sleep_until(started + tier.config.health_interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// With `tier.admission = "shared"`: gives every node's gate the number of live peers to
/// share its limit among (see `crate::state::tier_share`); a gate that has it already does
/// nothing.
pub(crate) fn share_admission(switch: &Switch, tier: &Tier) {
    if tier.config.admission != TierAdmission::Shared {
        return;
    }
    let live = u32::try_from(tier.members().live_count()).unwrap_or(u32::MAX);
    for node in &switch.cluster.load().nodes {
        node.admission.share_among(live);
    }
}

/// Checks every other peer at once and records the results.
async fn check_round(tier: &Tier, client: &Peers) {
    let mut checks = tokio::task::JoinSet::new();
    let members = tier.members();
    for (id, peer) in members.peers.iter().enumerate() {
        if id == members.own {
            continue;
        }
        let (client, address) = (client.clone(), peer.address);
        let timeout = tier.config.health_timeout;
        checks.spawn(async move {
            let mut req = Request::get(format!("http://{address}{HEALTH_PATH}"))
                .body(Empty::new())
                .expect("a GET of an address");
            let headers = req.headers_mut();
            headers.insert(USER_AGENT, HeaderValue::from_static("capstan-tier-check"));
            headers.insert(
                HeaderName::from_static(HOP_HEADER),
                HeaderValue::from_static(CHECK_MARK),
            );
            let result = match client.send(req, timeout).await {
                Err(Failed::TimedOut) => failed(
                    None,
                    format!("no response within {}", humantime::format_duration(timeout)),
                ),
                Err(Failed::Error(e)) => failed(None, e),
                Ok(resp) if resp.status().as_u16() == 200 => CheckResult {
                    passed: true,
                    status: Some(200),
                    error: None,
                },
                Ok(resp) => failed(
                    Some(resp.status().as_u16()),
                    format!(
                        "status {} (does the peer list this switch in its tier.peers?)",
                        resp.status().as_u16()
                    ),
                ),
            };
            (id, result)
        });
    }
    while let Some(Ok((id, result))) = checks.join_next().await {
        let peer = &members.peers[id];
        match peer
            .check
            .record(&result, tier.config.rise, tier.config.fall)
        {
            Some(true) => {
                tracing::info!(peer = %peer.address, "tier peer checks pass again: peer back in")
            }
            Some(false) => tracing::warn!(
                peer = %peer.address,
                "{} tier peer checks failed in a row: peer taken out ({})",
                tier.config.fall,
                result.error.as_deref().unwrap_or("unexpected status")
            ),
            None => {}
        }
    }
}

fn failed(status: Option<u16>, error: String) -> CheckResult {
    CheckResult {
        passed: false,
        status,
        error: Some(error),
    }
}

/// The tier as `/status` shows it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TierStatus {
    /// This switch's address among the peers.
    #[serde(rename = "self")]
    pub own: String,
    pub share_cache: bool,
    /// Requests whose hop header was removed (not from a peer's address).
    pub forged_hops: u64,
    pub local_copy_hits: u64,
    pub local_copies_stored: u64,
    /// `tier.admission`: `local` or `shared`.
    pub admission: TierAdmission,
    /// `tier.ejection`: `local`, `any` or `majority`.
    pub ejection: TierEjection,
    /// Where peers come from besides `tier.peers`, when `tier.discovery` is given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discovery: Option<PeerSourceStatus>,
    pub peers: Vec<PeerStatus>,
    /// The shared view of the nodes.
    pub gossip: GossipStatus,
}

/// The tier's discovery source and this switch's registration as `/status` shows them.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PeerSourceStatus {
    /// `dns`, `etcd` or `file`.
    pub kind: &'static str,
    pub target: String,
    /// `ok`, or `error` while its last look failed (the last good peer set stays).
    pub state: &'static str,
    pub last_error: Option<String>,
    /// Seconds since the source last gave a good list (`null`: never).
    pub last_good_s_ago: Option<f64>,
    pub looks_ok: u64,
    pub failures: u64,
    /// The addresses its last good list gave.
    pub found: Vec<String>,
    /// Entries of its last good list that gave no peer, and why.
    pub skipped: Vec<String>,
    /// Entries skipped since start, each counted once when it appeared.
    pub skipped_total: u64,
    /// With `tier.register`: this switch's key, `null` until registered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registration: Option<RegistrationStatus>,
}

/// This switch's registration in etcd.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct RegistrationStatus {
    pub key: Option<String>,
    /// Times the key was put (more than 1: etcd lost a lease and the key was put again).
    pub registrations: u64,
    pub last_error: Option<String>,
}

/// The tier's gossip as `/status` shows it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct GossipStatus {
    /// `tier.gossip_period` in milliseconds; `null` when gossip is off.
    pub period_ms: Option<f64>,
    /// Why gossip is not running, when it should and is not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub datagrams_sent: u64,
    pub send_errors: u64,
    /// Datagrams from an address that is no peer's listener (dropped unread).
    pub foreign_dropped: u64,
    /// Datagrams from a peer that did not decode (dropped).
    pub malformed_dropped: u64,
    /// Counts from a peer with another node list, dropped until its names arrive (at most
    /// ten periods).
    pub unmapped_dropped: u64,
    /// Nodes this switch cannot report (a name longer than 255 bytes).
    pub unreported_nodes: u64,
    /// Nodes taken out here because other switches have them out (`tier.ejection`).
    pub tier_ejections: u64,
    /// Gossip rounds × nodes that the tier had out but this switch kept in (too many out).
    pub tier_ejections_prevented: u64,
    /// Each node's tier-wide state as the policies see it.
    pub nodes: Vec<TierNodeStatus>,
}

/// One node's tier-wide state.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct TierNodeStatus {
    pub name: String,
    /// Requests on the node summed over this switch and every live peer that reported it (as
    /// of the last gossip round); 0 when no peer did.
    pub active: u32,
    /// This switch's own part of `active`.
    pub own_active: u32,
    pub finished: u64,
    pub latency_ms: f64,
    /// Some switch of the tier has the node out.
    pub ejected: bool,
    /// Out here because other switches have it out (`tier.ejection`).
    pub tier_ejected: bool,
    /// Age of the oldest report in the sums, milliseconds; `null` while no peer's report counts
    /// (the policies then use local counts only).
    pub age_ms: Option<f64>,
}

/// One peer as `/status` shows it.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct PeerStatus {
    pub address: String,
    /// Where it came from: `static`, the discovery source's kind, both (`static+etcd`), or
    /// `self` (this switch, listed by neither).
    pub source: String,
    /// `self`, `up` or `down`.
    pub state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    pub checks_passed: u64,
    pub checks_failed: u64,
    pub hops_sent: u64,
    pub hop_failures: u64,
    pub hops_served: u64,
    pub invalidations_sent: u64,
    pub invalidation_failures: u64,
    /// Gossip datagrams taken from the peer, and dropped (malformed, or of an older round).
    pub gossip_reports: u64,
    pub gossip_dropped: u64,
    /// Milliseconds since its last datagram was taken; `null` before the first.
    pub gossip_report_age_ms: Option<f64>,
}

/// The tier's status, when the switch is in one.
pub(crate) fn status(switch: &Switch) -> Option<TierStatus> {
    let tier = switch.tier.as_ref()?;
    let now_nanos = switch.epoch.now_nanos();
    let cluster = switch.cluster.load();
    let nodes = (cluster.nodes.iter())
        .map(|n| {
            let t = n.tier_state();
            TierNodeStatus {
                name: n.config.name.clone(),
                active: t.active,
                own_active: t.own_active,
                finished: t.finished,
                latency_ms: t.latency_ms,
                ejected: t.ejected,
                tier_ejected: n.is_tier_out(),
                age_ms: t.age_nanos(now_nanos).map(|a| a as f64 / 1e6),
            }
        })
        .collect();
    Some(tier_status(tier, now_nanos, nodes))
}

fn tier_status(tier: &Tier, now_nanos: u64, nodes: Vec<TierNodeStatus>) -> TierStatus {
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let g = &tier.gossip;
    let period = tier.config.gossip_period;
    let gossip = GossipStatus {
        period_ms: (!period.is_zero()).then_some(period.as_secs_f64() * 1e3),
        error: g.error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        datagrams_sent: load(&g.sent),
        send_errors: load(&g.send_errors),
        foreign_dropped: load(&g.foreign),
        malformed_dropped: load(&g.malformed),
        unmapped_dropped: load(&g.unmapped),
        unreported_nodes: load(&g.unnamed),
        tier_ejections: load(&g.tier_ejections),
        tier_ejections_prevented: load(&g.tier_ejections_prevented),
        nodes,
    };
    let members = tier.members();
    TierStatus {
        own: tier.own_address.to_string(),
        share_cache: tier.config.share_cache,
        admission: tier.config.admission,
        ejection: tier.config.ejection,
        discovery: source_status(tier),
        forged_hops: load(&tier.forged_hops),
        local_copy_hits: load(&tier.local_copy_hits),
        local_copies_stored: load(&tier.local_copies_stored),
        peers: (members.peers.iter().enumerate())
            .map(|(id, p)| {
                let check = p.check.status();
                PeerStatus {
                    address: p.address.to_string(),
                    source: members.sources[id].clone(),
                    state: if id == members.own {
                        "self"
                    } else {
                        check.state
                    },
                    last_error: check.last_error,
                    checks_passed: check.passed,
                    checks_failed: check.failed,
                    hops_sent: load(&p.hops_sent),
                    hop_failures: load(&p.hop_failures),
                    hops_served: load(&p.hops_served),
                    invalidations_sent: load(&p.invalidations_sent),
                    invalidation_failures: load(&p.invalidation_failures),
                    gossip_reports: load(&p.gossip_reports),
                    gossip_dropped: load(&p.gossip_dropped),
                    gossip_report_age_ms: match load(&p.gossip_last_at) {
                        0 => None,
                        at => Some(now_nanos.saturating_sub(at - 1) as f64 / 1e6),
                    },
                }
            })
            .collect(),
        gossip,
    }
}

/// The discovery source's part of the status, with `tier.discovery`.
fn source_status(tier: &Tier) -> Option<PeerSourceStatus> {
    let source = tier.config.source.as_ref()?;
    let s = tier
        .source
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    Some(PeerSourceStatus {
        kind: source.kind.name(),
        target: source.kind.target(),
        state: if s.error.is_some() { "error" } else { "ok" },
        last_error: s.error,
        last_good_s_ago: s.last_good.map(|t| t.elapsed().as_secs_f64()),
        looks_ok: s.looks_ok,
        failures: s.looks_failed,
        found: s.found.iter().map(|a| a.to_string()).collect(),
        skipped: s.skipped.iter().chain(&s.unusable).cloned().collect(),
        skipped_total: s.skipped_total,
        registration: tier.config.register.then_some(RegistrationStatus {
            key: s.registered_key,
            registrations: s.registrations,
            last_error: s.registration_error,
        }),
    })
}

/// The status page's tier table.
pub(crate) fn dashboard_section(tier: &TierStatus) -> String {
    let mut rows = String::new();
    for p in &tier.peers {
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape_html(&p.address),
            escape_html(&p.source),
            match p.state {
                "down" => "<b>down</b>".to_string(),
                s => s.to_string(),
            },
            p.hops_sent,
            p.hop_failures,
            p.hops_served,
            p.invalidations_sent - p.invalidation_failures,
            p.gossip_report_age_ms
                .map_or("–".to_string(), |a| format!("{a:.0} ms")),
            escape_html(p.last_error.as_deref().unwrap_or("")),
        );
    }
    format!(
        "<h2>Tier</h2><p>this switch {} · shared cache {} · {} local-copy hits · {} forged hop headers removed</p>\
         <table><tr><th>peer</th><th>from</th><th>state</th><th>hops sent</th><th>hop failures</th>\
         <th>hops served</th><th>invalidations acknowledged</th><th>last gossip</th><th>last error</th></tr>{rows}</table>",
        escape_html(&tier.own),
        if tier.share_cache { "on" } else { "off" },
        tier.local_copy_hits,
        tier.forged_hops,
    ) + &source_line(tier.discovery.as_ref())
        + &gossip_line(&tier.gossip)
}

/// The status page's line on the discovery source of peers.
fn source_line(source: Option<&PeerSourceStatus>) -> String {
    let Some(s) = source else {
        return String::new();
    };
    let error = s.last_error.as_deref().map_or(String::new(), |e| {
        format!(
            " · <b>{}</b> (the last good peer set stays)",
            escape_html(e)
        )
    });
    let registered = match &s.registration {
        None => String::new(),
        Some(r) => format!(
            " · registered as {}",
            escape_html(r.key.as_deref().unwrap_or("(not yet)"))
        ),
    };
    format!(
        "<p>peers from {} {}: {} found · {} skipped{registered}{error}</p>",
        s.kind,
        escape_html(&s.target),
        s.found.len(),
        s.skipped.len(),
    )
}

/// The status page's line on the shared view.
fn gossip_line(g: &GossipStatus) -> String {
    let Some(period) = g.period_ms else {
        return "<p>shared view of the nodes: off</p>".to_string();
    };
    let known = g.nodes.iter().filter(|n| n.age_ms.is_some()).count();
    format!(
        "<p>shared view of the nodes: own counts sent every {period:.0} ms · {known} of {} nodes \
         known tier-wide · {} datagrams sent · {} malformed and {} from no peer dropped{}</p>",
        g.nodes.len(),
        g.datagrams_sent,
        g.malformed_dropped,
        g.foreign_dropped,
        g.error
            .as_deref()
            .map_or(String::new(), |e| format!(" · <b>{}</b>", escape_html(e))),
    )
}

/// `capstan_tier_gossip_*`: per peer, per node and for the whole gossip.
fn encode_gossip(encoder: &mut DescriptorEncoder, t: &TierStatus) -> Result<(), std::fmt::Error> {
    let peers = || t.peers.iter().filter(|p| p.state != "self");
    let per_peer: [PeerCounter; 2] = [
        (
            "capstan_tier_gossip_reports",
            "Gossip datagrams taken from the peer",
            |p| p.gossip_reports,
        ),
        (
            "capstan_tier_gossip_dropped",
            "Gossip datagrams from the peer dropped (malformed, of an older round, or counts of another node list not mapped yet)",
            |p| p.gossip_dropped,
        ),
    ];
    for (name, help, value) in per_peer {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for p in peers() {
            let label = vec![("peer".to_string(), p.address.clone())];
            ConstCounter::new(value(p)).encode(family.encode_family(&label)?)?;
        }
    }
    let g = &t.gossip;
    for (name, help, value) in [
        (
            "capstan_tier_gossip_sent",
            "Gossip datagrams sent",
            g.datagrams_sent,
        ),
        (
            "capstan_tier_gossip_send_errors",
            "Gossip datagrams that could not be sent",
            g.send_errors,
        ),
        (
            "capstan_tier_gossip_foreign_dropped",
            "Gossip datagrams from an address that is no peer's listener, dropped",
            g.foreign_dropped,
        ),
        (
            "capstan_tier_gossip_malformed_dropped",
            "Gossip datagrams from a peer that did not decode, dropped",
            g.malformed_dropped,
        ),
        (
            "capstan_tier_gossip_unmapped_dropped",
            "Gossip counts from a peer whose node list differs, dropped until its names arrive",
            g.unmapped_dropped,
        ),
    ] {
        ConstCounter::new(value).encode(encoder.encode_descriptor(
            name,
            help,
            None,
            MetricType::Counter,
        )?)?;
    }
    let mut family = encoder.encode_descriptor(
        "capstan_tier_gossip_node_active",
        "Requests on the node across the tier (this switch and its live peers) as of the last gossip round",
        None,
        MetricType::Gauge,
    )?;
    for n in &g.nodes {
        let label = vec![("node".to_string(), n.name.clone())];
        ConstGauge::new(i64::from(n.active)).encode(family.encode_family(&label)?)?;
    }
    Ok(())
}

/// A per-peer counter's name, help and value.
type PeerCounter = (&'static str, &'static str, fn(&PeerStatus) -> u64);

/// `capstan_tier_*` at scrape time.
#[derive(Debug)]
pub(crate) struct TierCollector(pub TierStatus);

impl Collector for TierCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let t = &self.0;
        let label = |p: &PeerStatus| vec![("peer".to_string(), p.address.clone())];
        let mut gauge = encoder.encode_descriptor(
            "capstan_tier_peer_up",
            "1 while the peer may own keys (this switch, or another whose checks pass), else 0",
            None,
            MetricType::Gauge,
        )?;
        for p in &t.peers {
            ConstGauge::new(i64::from(p.state != "down"))
                .encode(gauge.encode_family(&label(p))?)?;
        }
        let counters: [PeerCounter; 5] = [
            (
                "capstan_tier_hops_sent",
                "Requests sent to the peer as their key's owner",
                |p| p.hops_sent,
            ),
            (
                "capstan_tier_hop_failures",
                "Hops to the peer that failed before its answer (served through a node instead)",
                |p| p.hop_failures,
            ),
            (
                "capstan_tier_hops_served",
                "Requests the peer sent this switch (hops and checks)",
                |p| p.hops_served,
            ),
            (
                "capstan_tier_invalidations_sent",
                "PURGE and BAN sent on to the peer",
                |p| p.invalidations_sent,
            ),
            (
                "capstan_tier_invalidation_failures",
                "PURGE and BAN the peer did not acknowledge",
                |p| p.invalidation_failures,
            ),
        ];
        for (name, help, value) in counters {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for p in &t.peers {
                ConstCounter::new(value(p)).encode(family.encode_family(&label(p))?)?;
            }
        }
        encode_gossip(&mut encoder, t)?;
        let source = t.discovery.as_ref();
        for (name, help, value) in [
            (
                "capstan_tier_discovery_failures",
                "Looks at the tier's discovery source that failed (the last good peer set stayed)",
                source.map_or(0, |s| s.failures),
            ),
            (
                "capstan_tier_discovery_skipped",
                "Entries of the tier's discovery source that gave no peer, each counted once",
                source.map_or(0, |s| s.skipped_total),
            ),
            (
                "capstan_tier_gossip_ejections",
                "Nodes taken out here because other switches of the tier have them out",
                t.gossip.tier_ejections,
            ),
            (
                "capstan_tier_forged_hops",
                "Hop headers removed from requests not from a peer",
                t.forged_hops,
            ),
            (
                "capstan_tier_local_copy_hits",
                "Hits on local copies of keys another peer owns",
                t.local_copy_hits,
            ),
            (
                "capstan_tier_local_copies_stored",
                "Local copies of hot keys stored",
                t.local_copies_stored,
            ),
        ] {
            ConstCounter::new(value).encode(encoder.encode_descriptor(
                name,
                help,
                None,
                MetricType::Counter,
            )?)?;
        }
        Ok(())
    }
}
