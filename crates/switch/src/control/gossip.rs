//! The tier's gossip: every `tier.gossip_period` this switch sends its own counts of every node
//! to every other peer (UDP, from and to the peers' listener addresses), takes theirs, and sums
//! them into each node's tier-wide state, which picks then read without a lock
//! (`crate::state::cluster::NodeRuntime::publish_tier`). The encoding is `crate::net::gossip`'s,
//! the sums `crate::state::gossip`'s.
//!
//! The sums are made once per period, not per request: a request only reads them; the table
//! of this switch's nodes the reports are numbered by is made again only when the cluster
//! changes. With
//! `tier.ejection` on, the same round takes out the nodes enough other switches have out and
//! lets back those they no longer have out (`crate::state::tier_share` says which). A datagram
//! from an address that is no peer's listener is counted and dropped unread; one that does not
//! decode is counted and dropped; neither can stop the task.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use capstan_core::TierState;

use crate::config::sections::tier::TierEjection;
use crate::net::gossip::{self, NodeReport, Table, MAX_DATAGRAM};
use crate::state::cluster::{Cluster, NodeRuntime, OutReason};
use crate::state::gossip::{SharedView, Taken, AGE_OUT_PERIODS};
use crate::state::outlier::max_ejected;
use crate::state::switch::Switch;
use crate::state::tier::Tier;
use crate::state::tier_share::{self, Candidate};

/// Receive buffer asked for the gossip socket: a period's datagrams wait in it until the
/// next round takes them (16 peers' full rounds at 1,000 nodes are some 60 datagrams, and
/// the kernel charges each a few KiB of buffer).
const RECEIVE_BUFFER: usize = 1 << 20;

/// Binds the gossip socket on this switch's listener address (UDP, the same port as its TCP
/// listener), when the switch is in a tier with gossip on.
pub(crate) fn bind(switch: &Switch) -> anyhow::Result<Option<std::net::UdpSocket>> {
    let Some(tier) = switch.tier.as_ref() else {
        return Ok(None);
    };
    if tier.config.gossip_period.is_zero() {
        return Ok(None);
    }
    let address = tier.own_address;
    let socket = std::net::UdpSocket::bind(address).map_err(|e| {
        anyhow::anyhow!("tier gossip: cannot bind UDP {address} (this switch's listener address; set tier.gossip_period = \"off\" to run without the shared view): {e}")
    })?;
    socket.set_nonblocking(true)?;
    // Best effort: the kernel caps it at net.core.rmem_max; a smaller buffer only drops
    // datagrams of very large tiers, whose next full round says it all again.
    let _ = socket2::SockRef::from(&socket).set_recv_buffer_size(RECEIVE_BUFFER);
    Ok(Some(socket))
}

/// The gossip task: every period, takes the datagrams that came since the last round, then
/// sends and sums; until shutdown.
///
/// The socket is never handed to the runtime's reactor: a datagram's arrival wakes nothing,
/// and each round reads what is queued with non-blocking calls. A peer's counts are summed
/// only at a round in either case, so taking them there loses nothing, and an idle tier of 16
/// switches wakes each one once per period instead of once per peer per period (on two
/// cores, the 15 wake-ups a period were most of the gossip's CPU: `epoll_wait`, scheduling).
pub(crate) async fn gossip(switch: Arc<Switch>, socket: std::net::UdpSocket) {
    let Some(tier) = switch.tier.as_ref() else {
        return;
    };
    // One run of this switch: its peers drop what an earlier run said once this one speaks.
    let boot = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let period = tier.config.gossip_period;
    let mut own = OwnTable::of(&switch.cluster.load_full());
    let mut view = SharedView::new(&own.table);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stop = switch.shutdown_signal();
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    let mut seq = 0u64;
    loop {
        // The select only says what happened: a watch guard must not be held across the
        // round's sends.
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        take_queued(&switch, tier, &socket, &mut view, &mut buf);
        seq += 1;
        let cluster = switch.cluster.load_full();
        if !Arc::ptr_eq(&cluster, &own.cluster) {
            own = OwnTable::of(&cluster);
            view.set_table(&own.table);
        }
        round(&switch, tier, &socket, &mut view, &mut own, (boot, seq));
    }
}

/// Takes every datagram queued on the socket.
fn take_queued(
    switch: &Switch,
    tier: &Tier,
    socket: &std::net::UdpSocket,
    view: &mut SharedView,
    buf: &mut [u8],
) {
    loop {
        match socket.recv_from(buf) {
            Ok((n, from)) => take(switch, tier, view, &buf[..n], from),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            // An ICMP error of an earlier send (a peer that is down): nothing to take.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => continue,
            Err(e) => {
                let error = format!("gossip receive: {e}");
                tracing::warn!("{error}");
                *tier.gossip.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
                return;
            }
        }
    }
}

/// The cluster a gossip table was made of, and the table: made again only when the cluster
/// changes (a reload, a membership or discovery change), not every round.
struct OwnTable {
    cluster: Arc<Cluster>,
    table: Table,
    /// The counts the previous round sent (by table position), that the next sends changes of.
    sent: Option<Vec<NodeReport>>,
}

impl OwnTable {
    fn of(cluster: &Arc<Cluster>) -> OwnTable {
        let table = Table::new(cluster.nodes.iter().map(|n| n.config.name.as_str()));
        OwnTable {
            cluster: Arc::clone(cluster),
            table,
            sent: None,
        }
    }
}

/// One round: this switch's counts to every other peer, then the sums, and what they change
/// here (`tier.ejection`).
fn round(
    switch: &Switch,
    tier: &Tier,
    socket: &std::net::UdpSocket,
    view: &mut SharedView,
    own: &mut OwnTable,
    (boot, seq): (u64, u64),
) {
    let members = tier.members();
    let now_nanos = switch.epoch.now_nanos();
    let nodes = &own.cluster.nodes;
    let reports: Vec<NodeReport> = (own.table.order.iter())
        .map(|&i| own_report(&nodes[i], now_nanos))
        .collect();
    let datagrams = gossip::encode(boot, seq, &own.table, &reports, own.sent.as_deref());
    tier.gossip
        .unnamed
        .store(own.table.unnamed as u64, Ordering::Relaxed);
    for (id, peer) in members.peers.iter().enumerate() {
        if id == members.own {
            continue;
        }
        let needs_names = !view.has_our_table(peer.address);
        for d in datagrams
            .iter()
            .filter(|d| needs_names || !gossip::is_names(d))
        {
            // A peer that is down still gets its share: it learns the tier as soon as it is back.
            // Non-blocking: a full send buffer drops the datagram (counted), as a lossy
            // network would; the next round says it again.
            match socket.send_to(d, peer.address) {
                Ok(_) => tier.gossip.sent.fetch_add(1, Ordering::Relaxed),
                Err(_) => tier.gossip.send_errors.fetch_add(1, Ordering::Relaxed),
            };
        }
    }
    let live: HashSet<SocketAddr> = (members.peers.iter().enumerate())
        .filter(|&(id, _)| members.is_live(id))
        .map(|(_, p)| p.address)
        .collect();
    view.keep_peers(|a| members.peers.iter().any(|p| p.address == a));
    let max_age = tier.config.gossip_period * AGE_OUT_PERIODS;
    let sums = view.sums(&reports, |a| live.contains(&a), Instant::now(), max_age);
    // By the cluster's order, as the ejections are.
    let mut wanted = vec![false; nodes.len()];
    for ((&i, sum), report) in own.table.order.iter().zip(sums).zip(&reports) {
        let state = match &sum {
            None => TierState::default(),
            Some(sum) => TierState {
                at_nanos: Some(switch.epoch.nanos_at(sum.oldest)),
                active: sum.active,
                own_active: sum.own_active,
                finished: sum.finished,
                latency_ms: sum.latency_ms,
                ejected: sum.ejected,
            },
        };
        nodes[i].publish_tier(state);
        wanted[i] = sum.is_some_and(|s| {
            tier_share::tier_has_out(
                tier.config.ejection,
                report.ejected,
                s.peers_ejected,
                s.peers,
            )
        });
    }
    eject_by_tier(tier, &own.cluster, &wanted, now_nanos);
    own.sent = Some(reports);
}

/// Takes out (and lets back) the nodes the tier has out, within the outlier detector's budget.
fn eject_by_tier(tier: &Tier, cluster: &Cluster, wanted: &[bool], now_nanos: u64) {
    if tier.config.ejection == TierEjection::Local {
        return;
    }
    let candidates: Vec<Candidate> = (cluster.nodes.iter().zip(wanted))
        .map(|(n, &wanted)| {
            let ejected_here = n.outlier.is_ejected(now_nanos);
            Candidate {
                wanted,
                tier_out: n.is_tier_out(),
                ejected_here,
                out_otherwise: !ejected_here
                    && !matches!(n.out_reason(now_nanos), None | Some(OutReason::TierEjected)),
            }
        })
        .collect();
    let outlier = &cluster.config.outlier;
    let max_out = max_ejected(cluster.nodes.len(), outlier.max_ejected_percent);
    let (out, prevented) = tier_share::tier_ejections(&candidates, max_out);
    let counters = &tier.gossip;
    for (node, out) in cluster.nodes.iter().zip(out) {
        if node.set_tier_out(out) {
            match out {
                true => {
                    counters.tier_ejections.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(node = %node.config.name, "node taken out: the tier's gossip says other switches have it out");
                }
                false => {
                    tracing::info!(node = %node.config.name, "node back: the tier no longer has it out")
                }
            }
        }
    }
    if prevented > 0 {
        counters
            .tier_ejections_prevented
            .fetch_add(prevented as u64, Ordering::Relaxed);
    }
}

/// What this switch tells its peers about `node`.
fn own_report(node: &NodeRuntime, now_nanos: u64) -> NodeReport {
    NodeReport {
        active: node.live_active(),
        finished: node.served.load(Ordering::Relaxed),
        latency_us: node.latency_ewma_us().min(f64::from(u32::MAX)) as u32,
        ejected: matches!(
            node.out_reason(now_nanos),
            Some(OutReason::Ejected | OutReason::BackedOff | OutReason::CheckFailed)
        ),
    }
}

/// Takes one datagram: counted and dropped unless it is a well-formed report from a peer.
fn take(switch: &Switch, tier: &Tier, view: &mut SharedView, bytes: &[u8], from: SocketAddr) {
    let members = tier.members();
    let Some(id) = members.gossip_peer(from) else {
        tier.gossip.foreign.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%from, "gossip datagram from no peer's listener dropped");
        return;
    };
    let peer = &members.peers[id];
    match gossip::decode(bytes) {
        Err(e) => {
            tier.gossip.malformed.fetch_add(1, Ordering::Relaxed);
            peer.gossip_dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%from, "malformed gossip datagram dropped: {e}");
        }
        Ok((header, entries)) => match view.accept(peer.address, header, entries, Instant::now()) {
            Taken::Used => {
                peer.gossip_reports.fetch_add(1, Ordering::Relaxed);
                let at = switch.epoch.now_nanos().saturating_add(1);
                peer.gossip_last_at.store(at, Ordering::Relaxed);
            }
            Taken::Old => {
                peer.gossip_dropped.fetch_add(1, Ordering::Relaxed);
            }
            Taken::Unmapped => {
                tier.gossip.unmapped.fetch_add(1, Ordering::Relaxed);
                peer.gossip_dropped.fetch_add(1, Ordering::Relaxed);
            }
        },
    }
}
