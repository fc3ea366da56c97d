//! The tier's gossip: every `tier.gossip_period` this switch sends its own counts of every node
//! to every other peer (UDP, from and to the peers' listener addresses), takes theirs, and sums
//! them into each node's tier-wide state, which picks then read without a lock
//! (`crate::state::cluster::NodeRuntime::publish_tier`). The encoding and the sums are
//! `crate::state::gossip`'s.
//!
//! The sums are made once per period, not per request: a request only reads them. The table
//! of this switch's nodes the reports are numbered by is made again only when the cluster
//! changes. A datagram
//! from an address that is no peer's listener is counted and dropped unread; one that does not
//! decode is counted and dropped; neither can stop the task.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use capstan_core::TierState;
use tokio::net::UdpSocket;

use crate::state::cluster::{Cluster, NodeRuntime, OutReason};
use crate::state::gossip::{
    self, NodeReport, SharedView, Table, Taken, AGE_OUT_PERIODS, MAX_DATAGRAM,
};
use crate::state::switch::Switch;
use crate::state::tier::Tier;

/// Binds the gossip socket on this switch's listener address (UDP, the same port as its TCP
/// listener), when the switch is in a tier with gossip on.
pub(crate) fn bind(switch: &Switch) -> anyhow::Result<Option<std::net::UdpSocket>> {
    let Some(tier) = switch.tier.as_ref() else {
        return Ok(None);
    };
    if tier.config.gossip_period.is_zero() {
        return Ok(None);
    }
    let address = tier.config.addresses[tier.own];
    let socket = std::net::UdpSocket::bind(address).map_err(|e| {
        anyhow::anyhow!("tier gossip: cannot bind UDP {address} (this switch's listener address; set tier.gossip_period = \"off\" to run without the shared view): {e}")
    })?;
    socket.set_nonblocking(true)?;
    Ok(Some(socket))
}

/// The gossip task: sends and sums every period, takes datagrams in between, until shutdown.
pub(crate) async fn gossip(switch: Arc<Switch>, socket: std::net::UdpSocket) {
    let Some(tier) = switch.tier.as_ref() else {
        return;
    };
    let socket = match UdpSocket::from_std(socket) {
        Ok(s) => s,
        Err(e) => {
            let error = format!("gossip socket: {e}");
            tracing::error!("{error}");
            *tier.gossip.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(error);
            return;
        }
    };
    // One run of this switch: its peers drop what an earlier run said once this one speaks.
    let boot = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let period = tier.config.gossip_period;
    let mut own = OwnTable::of(&switch.cluster.load_full());
    let mut view = SharedView::new(tier.peers.len(), &own.table);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stop = switch.shutdown_signal();
    let mut buf = vec![0u8; MAX_DATAGRAM + 1];
    let mut seq = 0u64;
    loop {
        // The select only says what happened: a watch guard must not be held across the
        // round's sends.
        let event = tokio::select! {
            _ = tick.tick() => None,
            got = socket.recv_from(&mut buf) => Some(got),
            _ = stop.wait_for(|s| *s) => return,
        };
        match event {
            None => {
                seq += 1;
                let cluster = switch.cluster.load_full();
                if !Arc::ptr_eq(&cluster, &own.cluster) {
                    own = OwnTable::of(&cluster);
                    view.set_table(&own.table);
                }
                round(&switch, tier, &socket, &mut view, &own, (boot, seq)).await;
            }
            Some(Ok((n, from))) => {
                take(&switch, tier, &mut view, &buf[..n], from);
                // A peer's round comes as a burst: take what is queued before sleeping again.
                while let Ok((n, from)) = socket.try_recv_from(&mut buf) {
                    take(&switch, tier, &mut view, &buf[..n], from);
                }
            }
            Some(Err(e)) => tracing::debug!("gossip receive: {e}"),
        }
    }
}

/// The cluster a gossip table was made of, and the table: made again only when the cluster
/// changes (a reload, a membership or discovery change), not every round.
struct OwnTable {
    cluster: Arc<Cluster>,
    table: Table,
}

impl OwnTable {
    fn of(cluster: &Arc<Cluster>) -> OwnTable {
        let table = Table::new(cluster.nodes.iter().map(|n| n.config.name.as_str()));
        OwnTable {
            cluster: Arc::clone(cluster),
            table,
        }
    }
}

/// One round: this switch's counts to every other peer, then the sums.
async fn round(
    switch: &Switch,
    tier: &Tier,
    socket: &UdpSocket,
    view: &mut SharedView,
    own: &OwnTable,
    (boot, seq): (u64, u64),
) {
    let now_nanos = switch.epoch.now_nanos();
    let nodes = &own.cluster.nodes;
    let reports: Vec<NodeReport> = (own.table.order.iter())
        .map(|&i| own_report(&nodes[i], now_nanos))
        .collect();
    let datagrams = gossip::encode(boot, seq, &own.table, &reports);
    tier.gossip
        .unnamed
        .store(own.table.unnamed as u64, Ordering::Relaxed);
    for (id, peer) in tier.peers.iter().enumerate() {
        if id == tier.own {
            continue;
        }
        for d in &datagrams {
            // A peer that is down still gets its share: it learns the tier as soon as it is back.
            match socket.send_to(d, peer.address).await {
                Ok(_) => tier.gossip.sent.fetch_add(1, Ordering::Relaxed),
                Err(_) => tier.gossip.send_errors.fetch_add(1, Ordering::Relaxed),
            };
        }
    }
    let now = Instant::now();
    let max_age = tier.config.gossip_period * AGE_OUT_PERIODS;
    let sums = view.sums(&reports, |id| tier.is_live(id), now, max_age);
    for (&i, sum) in own.table.order.iter().zip(sums) {
        let state = match sum {
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
    let Some(id) = tier.gossip_peer(from) else {
        tier.gossip.foreign.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%from, "gossip datagram from no peer's listener dropped");
        return;
    };
    let peer = &tier.peers[id];
    match gossip::decode(bytes) {
        Err(e) => {
            tier.gossip.malformed.fetch_add(1, Ordering::Relaxed);
            peer.gossip_dropped.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%from, "malformed gossip datagram dropped: {e}");
        }
        Ok((header, entries)) => match view.accept(id, header, entries, Instant::now()) {
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
