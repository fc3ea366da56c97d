//! The tier's shared view of the nodes: what a switch keeps of its peers' reports and sums into
//! the policy view's tier-wide fields ([`capstan_core::TierState`]). The datagrams that carry the
//! reports (numbered by the sender's table, a full round every `NAMES_EVERY`th, the changes in
//! between) are `crate::net::gossip`'s.
//!
//! A receiver keeps a peer's last counts of every node by its own table's positions (a peer
//! with another node list is mapped by name once its names have arrived; counts it cannot map
//! yet are dropped and counted, [`Taken::Unmapped`]), and judges their age by when it last
//! heard the peer, not by when a node's counts last changed. The work is then bounded by the
//! requests placed per period rather than by the nodes: an idle tier of 16 switches with 1,000
//! nodes each sends one small datagram per peer per round.
//!
//! Everything here is pure (no sockets, no clock of its own), so it is tested directly; the
//! socket and the timer are `crate::control::gossip`'s.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use crate::net::gossip::{Entries, Header, NodeReport, Table};

/// A peer's report on a node is used for this many gossip periods after it arrived; then the
/// peer is taken to have stopped and its counts leave the sums.
pub(crate) const AGE_OUT_PERIODS: u32 = 3;

/// A peer's table other than this switch's: its positions mapped to this switch's, as far as its
/// names have arrived.
#[derive(Debug)]
struct PeerTable {
    id: u64,
    /// For each of the peer's positions: this switch's position of the same name, `None` if this
    /// switch has no such node, unset until the name has arrived.
    to_own: Vec<Option<Option<u32>>>,
    missing: usize,
}

/// What one peer told this switch.
#[derive(Debug, Default)]
struct PeerReports {
    /// Its run and the latest round taken from it.
    last: Option<(u64, u64)>,
    /// When a datagram of it was last taken: its counts are as old as that.
    heard: Option<Instant>,
    /// The table its last datagram spoke of: when it is this switch's own, the peer maps this
    /// switch's positions without names.
    speaks_of: Option<u64>,
    table: Option<PeerTable>,
    /// Its last counts of each node, by this switch's table position.
    nodes: Vec<Option<NodeReport>>,
}

/// What became of a datagram given to [`SharedView::accept`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Taken {
    /// Counts taken, or names learnt.
    Used,
    /// Of an older round than one already taken from the peer.
    Old,
    /// Counts of a table this switch cannot map to its own yet (the names have not all come).
    Unmapped,
}

/// Every peer's last reports, by the peer's listener address (peers come and go with the
/// tier's discovery; this switch has no entry), each by this switch's table position.
#[derive(Debug)]
pub(crate) struct SharedView {
    own: u64,
    len: usize,
    /// This switch's table's names by name, to map another table's names.
    index: FxHashMap<String, u32>,
    peers: FxHashMap<SocketAddr, PeerReports>,
}

/// The tier-wide sums for one node, before the oldest arrival is turned into view time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Sum {
    /// When the oldest report that went into the sums arrived.
    pub oldest: Instant,
    pub active: u32,
    pub own_active: u32,
    pub finished: u64,
    /// Mean of the known (non-zero) latencies, own included, milliseconds; 0 when none.
    pub latency_ms: f64,
    pub ejected: bool,
    /// Peers whose report went in (this switch not counted).
    pub peers: usize,
    /// Of those, the peers that have the node out.
    pub peers_ejected: usize,
}

impl SharedView {
    pub(crate) fn new(own: &Table) -> SharedView {
        let mut view = SharedView {
            own: 0,
            len: 0,
            index: FxHashMap::default(),
            peers: FxHashMap::default(),
        };
        view.set_table(own);
        view
    }

    /// This switch's node list changed: what peers said is by the old positions, so it is
    /// dropped (their next round, at most a period away, says it again), as are the maps of
    /// other tables to the old one.
    pub(crate) fn set_table(&mut self, own: &Table) {
        if own.id == self.own && own.len() == self.len && !self.index.is_empty() {
            return;
        }
        self.own = own.id;
        self.len = own.len();
        self.index = (own.names.iter().enumerate())
            .map(|(p, n)| (n.clone(), p as u32))
            .collect();
        for p in self.peers.values_mut() {
            p.table = None;
            p.nodes = vec![None; own.len()];
        }
    }

    /// Whether `peer` is known to have the same table as this switch (its last datagram spoke
    /// of it): then it needs no names to map this switch's counts. A full round sends names
    /// only to the other peers (those not heard yet, or with another node list), so in a tier
    /// whose switches all have the same nodes the names stop after the first exchange (at
    /// 1,000 nodes they were two thirds of the datagrams).
    pub(crate) fn has_our_table(&self, peer: SocketAddr) -> bool {
        (self.peers.get(&peer)).is_some_and(|p| p.speaks_of == Some(self.own))
    }

    /// Forgets the peers `keep` no longer names (they left the tier).
    pub(crate) fn keep_peers(&mut self, keep: impl Fn(SocketAddr) -> bool) {
        self.peers.retain(|a, _| keep(*a));
    }

    /// Takes a datagram from `peer` that arrived at `now`.
    pub(crate) fn accept(
        &mut self,
        peer: SocketAddr,
        header: Header,
        entries: Entries,
        now: Instant,
    ) -> Taken {
        let (own, len) = (self.own, self.len);
        let p = self.peers.entry(peer).or_insert_with(|| PeerReports {
            nodes: vec![None; len],
            ..PeerReports::default()
        });
        match p.last {
            Some((boot, seq)) if boot == header.boot && header.seq < seq => return Taken::Old,
            // A new run of the peer: what the old one said is void.
            Some((boot, _)) if boot != header.boot => {
                p.table = None;
                p.nodes.iter_mut().for_each(|n| *n = None);
            }
            _ => {}
        }
        p.last = Some((header.boot, header.seq));
        p.heard = Some(now);
        p.speaks_of = Some(header.table);
        match entries {
            Entries::Names(names) if header.table != own => {
                learn_names(p, &self.index, header, names);
                Taken::Used
            }
            Entries::Names(_) => Taken::Used,
            Entries::Counts(reports) => {
                let first = header.first;
                let at = (0..).map(|i| first + i).zip(reports);
                take_counts(p, (own, len), header, at)
            }
            Entries::Changes(changes) => take_counts(p, (own, len), header, changes.into_iter()),
        }
    }

    /// The tier-wide sums for every node of this switch's table, in table order: `own[p]` (this
    /// switch's live counts) plus the last report of every peer for which `live` holds and
    /// whose report is at most `max_age` old at `now`; `None` where no peer's report counts
    /// (the node's tier state is then unknown).
    pub(crate) fn sums(
        &self,
        own: &[NodeReport],
        live: impl Fn(SocketAddr) -> bool,
        now: Instant,
        max_age: Duration,
    ) -> Vec<Option<Sum>> {
        let peers: Vec<&PeerReports> = (self.peers.iter())
            .filter(|(address, _)| live(**address))
            .map(|(_, p)| p)
            .collect();
        let fresh = |p: &&&PeerReports| {
            p.heard
                .is_some_and(|at| now.saturating_duration_since(at) <= max_age)
        };
        let peers: Vec<(&PeerReports, Instant)> = (peers.iter())
            .filter(fresh)
            .map(|p| (*p, p.heard.unwrap_or(now)))
            .collect();
        (own.iter().enumerate())
            .map(|(position, own)| {
                let reports = (peers.iter()).filter_map(|(p, at)| {
                    let report = p.nodes.get(position).copied().flatten()?;
                    Some((report, *at))
                });
                sum(own, reports, now)
            })
            .collect()
    }
}

/// Maps the peer's positions named in `names` to this switch's.
fn learn_names(
    p: &mut PeerReports,
    index: &FxHashMap<String, u32>,
    header: Header,
    names: Vec<String>,
) {
    let total = header.total as usize;
    if !matches!(&p.table, Some(t) if t.id == header.table) {
        p.table = Some(PeerTable {
            id: header.table,
            to_own: vec![None; total],
            missing: total,
        });
    }
    let table = p.table.as_mut().expect("set above");
    for (i, name) in names.iter().enumerate() {
        let slot = &mut table.to_own[header.first as usize + i];
        if slot.is_none() {
            table.missing -= 1;
        }
        *slot = Some(index.get(name.as_str()).copied());
    }
}

/// Stores a datagram's counts, each at the sender's table position given, by this switch's
/// positions.
fn take_counts(
    p: &mut PeerReports,
    (own, len): (u64, usize),
    header: Header,
    reports: impl Iterator<Item = (u32, NodeReport)>,
) -> Taken {
    if header.table == own && header.total as usize == len {
        for (position, report) in reports {
            p.nodes[position as usize] = Some(report);
        }
        return Taken::Used;
    }
    match &p.table {
        Some(t)
            if t.id == header.table
                && t.missing == 0
                && t.to_own.len() == header.total as usize =>
        {
            for (position, report) in reports {
                if let Some(Some(own)) = t.to_own[position as usize] {
                    p.nodes[own as usize] = Some(report);
                }
            }
            Taken::Used
        }
        _ => Taken::Unmapped,
    }
}

/// `own` plus `reports`, each with when its peer was last heard; `None` without any report.
fn sum(
    own: &NodeReport,
    reports: impl Iterator<Item = (NodeReport, Instant)>,
    now: Instant,
) -> Option<Sum> {
    let mut sum = Sum {
        oldest: now,
        active: own.active,
        own_active: own.active,
        finished: own.finished,
        latency_ms: 0.0,
        ejected: own.ejected,
        peers: 0,
        peers_ejected: 0,
    };
    let (mut latency_total, mut latencies) = (u64::from(own.latency_us), 0u32);
    if own.latency_us > 0 {
        latencies += 1;
    }
    for (r, at) in reports {
        sum.peers += 1;
        sum.oldest = sum.oldest.min(at);
        sum.active = sum.active.saturating_add(r.active);
        sum.finished = sum.finished.saturating_add(r.finished);
        sum.ejected |= r.ejected;
        sum.peers_ejected += usize::from(r.ejected);
        if r.latency_us > 0 {
            latency_total += u64::from(r.latency_us);
            latencies += 1;
        }
    }
    if latencies > 0 {
        sum.latency_ms = latency_total as f64 / f64::from(latencies) / 1000.0;
    }
    (sum.peers > 0).then_some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::gossip::{decode, encode, is_names};

    fn report(active: u32) -> NodeReport {
        NodeReport {
            active,
            finished: u64::from(active) * 10,
            latency_us: 2000,
            ejected: false,
        }
    }

    fn peer(n: u8) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, n], 8080))
    }

    /// Round `seq` of `reports` (after `previous`) from `peer`, taken at `at`.
    struct Round<'a> {
        peer: SocketAddr,
        boot: u64,
        seq: u64,
        table: &'a Table,
        reports: &'a [NodeReport],
        previous: Option<&'a [NodeReport]>,
    }

    fn take(view: &mut SharedView, r: Round, at: Instant) -> Vec<Taken> {
        (encode(r.boot, r.seq, r.table, r.reports, r.previous).iter())
            .map(|d| {
                let (h, e) = decode(d).unwrap();
                view.accept(r.peer, h, e, at)
            })
            .collect()
    }

    fn full<'a>(
        peer: SocketAddr,
        boot: u64,
        table: &'a Table,
        reports: &'a [NodeReport],
    ) -> Round<'a> {
        Round {
            peer,
            boot,
            seq: 10,
            table,
            reports,
            previous: None,
        }
    }

    #[test]
    fn sums_add_live_fresh_peers_to_the_own_counts_and_age_out() {
        let start = Instant::now();
        let period = Duration::from_millis(100);
        let max_age = period * AGE_OUT_PERIODS;
        let table = Table::new(["web"]);
        let mut view = SharedView::new(&table);
        let own = [NodeReport {
            latency_us: 0,
            ..report(2)
        }];
        let all = |_: SocketAddr| true;
        assert_eq!(
            view.sums(&own, all, start, max_age),
            [None],
            "no peer: unknown"
        );
        take(&mut view, full(peer(1), 9, &table, &[report(5)]), start);
        let mut ejected = report(7);
        ejected.ejected = true;
        ejected.latency_us = 4000;
        let later = start + period;
        take(&mut view, full(peer(2), 3, &table, &[ejected]), later);
        let sum = view.sums(&own, all, later, max_age)[0].unwrap();
        assert_eq!((sum.active, sum.own_active, sum.peers), (14, 2, 2));
        assert_eq!(sum.finished, 20 + 50 + 70);
        assert_eq!(sum.oldest, start, "the age is the oldest contribution's");
        assert!(sum.ejected);
        assert_eq!(sum.peers_ejected, 1);
        assert_eq!(sum.latency_ms, 3.0, "mean of the known latencies");
        // Peer 2 taken out by its health checks: only peer 1 counts.
        let sum = view.sums(&own, |a| a != peer(2), later, max_age)[0].unwrap();
        assert_eq!((sum.active, sum.ejected), (7, false));
        // Peer 1 silent for more than 3 periods: it ages out; peer 2 is still in.
        let aged = start + max_age + Duration::from_millis(1);
        let sum = view.sums(&own, all, aged, max_age)[0].unwrap();
        assert_eq!((sum.active, sum.peers, sum.oldest), (9, 1, later));
        // An idle round of peer 1 (nothing changed) makes its counts fresh again.
        let five = [report(5)];
        let idle = Round {
            seq: 11,
            previous: Some(&five),
            ..full(peer(1), 9, &table, &five)
        };
        assert_eq!(take(&mut view, idle, aged), [Taken::Used]);
        let sum = view.sums(&own, all, aged, max_age)[0].unwrap();
        assert_eq!((sum.active, sum.peers, sum.oldest), (14, 2, later));
        let gone = aged + max_age + Duration::from_millis(1);
        assert_eq!(view.sums(&own, all, gone, max_age), [None]);
    }

    /// Names go only to peers not known to share this switch's table; a full round without
    /// its names datagrams still carries every count, which a peer of the same table maps.
    #[test]
    fn names_are_for_peers_of_another_or_an_unknown_table() {
        let now = Instant::now();
        let ours = Table::new(["a", "b"]);
        let theirs = Table::new(["a", "b", "c"]);
        let mut view = SharedView::new(&ours);
        assert!(!view.has_our_table(peer(1)), "not heard yet");
        let reports = [report(3), report(4)];
        let round = encode(1, 10, &ours, &reports, None);
        assert!(round.iter().any(|d| is_names(d)) && !round.iter().all(|d| is_names(d)));
        // The same table, its names left out: every count taken.
        let without_names: Vec<Vec<u8>> = round.into_iter().filter(|d| !is_names(d)).collect();
        for d in &without_names {
            let (h, e) = decode(d).unwrap();
            assert_eq!(view.accept(peer(1), h, e, now), Taken::Used);
        }
        assert!(view.has_our_table(peer(1)));
        let sums = view.sums(&[report(0); 2], |_| true, now, Duration::from_secs(1));
        let actives: Vec<u32> = sums.iter().map(|s| s.unwrap().active).collect();
        assert_eq!(actives, [3, 4]);
        // Another table: names needed.
        let three = [report(1); 3];
        take(&mut view, full(peer(2), 1, &theirs, &three), now);
        assert!(!view.has_our_table(peer(2)));
        // A reload that changes this switch's own table: every peer needs names again.
        view.set_table(&theirs);
        assert!(!view.has_our_table(peer(1)));
        assert!(view.has_our_table(peer(2)));
    }

    #[test]
    fn changes_land_on_their_nodes_and_leave_the_others_as_they_were() {
        let now = Instant::now();
        let max_age = Duration::from_secs(1);
        let table = Table::new(["a", "b", "c"]);
        let mut view = SharedView::new(&table);
        let own = [report(0); 3];
        let actives = |view: &SharedView| -> Vec<Option<u32>> {
            (view.sums(&own, |_| true, now, max_age).iter())
                .map(|s| s.map(|s| s.active))
                .collect()
        };
        let first = [report(1), report(2), report(3)];
        take(&mut view, full(peer(1), 1, &table, &first), now);
        let second = [report(1), report(9), report(3)];
        let changes = Round {
            seq: 11,
            previous: Some(&first),
            ..full(peer(1), 1, &table, &second)
        };
        assert_eq!(take(&mut view, changes, now), [Taken::Used]);
        assert_eq!(actives(&view), [Some(1), Some(9), Some(3)]);
    }

    #[test]
    fn an_older_round_is_dropped_and_a_restarted_peer_starts_again() {
        let now = Instant::now();
        let max_age = Duration::from_secs(1);
        let table = Table::new(["db", "web"]);
        let mut view = SharedView::new(&table);
        let own = [report(0), report(0)];
        let sums = |view: &SharedView| -> Vec<Option<u32>> {
            (view.sums(&own, |_| true, now, max_age).iter())
                .map(|s| s.map(|s| s.active))
                .collect()
        };
        take(
            &mut view,
            full(peer(1), 1, &table, &[report(1), report(4)]),
            now,
        );
        let stale = [report(9), report(99)];
        let older = Round {
            seq: 9,
            ..full(peer(1), 1, &table, &stale)
        };
        assert_eq!(take(&mut view, older, now), [Taken::Old, Taken::Old]);
        assert_eq!(sums(&view), [Some(1), Some(4)]);
        // The peer restarted: its round 1 is taken though 1 < 10.
        let anew = [report(2), report(3)];
        let restarted = Round {
            seq: 1,
            ..full(peer(1), 2, &table, &anew)
        };
        assert_eq!(take(&mut view, restarted, now), [Taken::Used, Taken::Used]);
        assert_eq!(sums(&view), [Some(2), Some(3)]);
        // A third run says only db: the second run's web is gone.
        let (h, _) = decode(&encode(3, 20, &table, &[report(0), report(0)], None)[1]).unwrap();
        let only_db = Entries::Counts(vec![report(6)]);
        assert_eq!(view.accept(peer(1), h, only_db, now), Taken::Used);
        assert_eq!(
            sums(&view),
            [Some(6), None],
            "a third run: only what it said counts"
        );
        // A peer that left the tier is forgotten.
        view.keep_peers(|a| a != peer(1));
        assert_eq!(sums(&view), [None, None]);
    }

    #[test]
    fn a_peer_with_another_node_list_is_mapped_by_name_once_its_names_arrive() {
        let now = Instant::now();
        let max_age = Duration::from_secs(1);
        let own_table = Table::new(["a", "b", "c"]);
        let mut view = SharedView::new(&own_table);
        let own = [report(0), report(0), report(0)];
        // The peer has b, c and d (no a): another table.
        let theirs = Table::new(["d", "c", "b"]);
        let reports = [report(20), report(30), report(40)]; // b, c, d in its table order
        let before = [report(0); 3];
        let actives = |view: &SharedView| -> Vec<Option<u32>> {
            (view.sums(&own, |_| true, now, max_age).iter())
                .map(|s| s.map(|s| s.active))
                .collect()
        };
        // Round 5 carries changes but no names: they cannot be placed yet.
        let unnamed = Round {
            peer: peer(1),
            boot: 1,
            seq: 5,
            table: &theirs,
            reports: &reports,
            previous: Some(&before),
        };
        assert_eq!(take(&mut view, unnamed, now), [Taken::Unmapped]);
        assert_eq!(actives(&view), [None, None, None]);
        // A full round brings the names first, then counts that land by name; d is not ours.
        let taken = take(&mut view, full(peer(1), 1, &theirs, &reports), now);
        assert_eq!(taken, [Taken::Used, Taken::Used]);
        assert_eq!(actives(&view), [None, Some(20), Some(30)]);
        // This switch's list changes: what was said by the old positions is dropped.
        let grown = Table::new(["a", "b", "c", "d"]);
        view.set_table(&grown);
        let own4 = [report(0); 4];
        assert!(view
            .sums(&own4, |_| true, now, max_age)
            .iter()
            .all(Option::is_none));
        // Now the lists are the same: the positions are taken as they are, names or not.
        let same = [report(1), report(2), report(3), report(4)];
        let changes = Round {
            peer: peer(1),
            boot: 1,
            seq: 11,
            table: &grown,
            reports: &same,
            previous: Some(&[report(0); 4]),
        };
        assert_eq!(take(&mut view, changes, now), [Taken::Used]);
        let sums = view.sums(&own4, |_| true, now, max_age);
        assert_eq!(
            sums.iter().map(|s| s.unwrap().active).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
    }
}
