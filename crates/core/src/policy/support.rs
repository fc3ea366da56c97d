//! Small lock-free building blocks shared by the policies: a rotating pointer, a seeded random
//! stream, and scans over the view that never allocate.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::view::{ClusterView, NodeId, NodeState};

/// A circular pointer over `0..len` that skips ineligible slots and moves past the slot it
/// chose, so skipping an unavailable node does not hand its successor two turns in a row.
#[derive(Debug, Default)]
pub(crate) struct Rotor {
    /// A ticket counter; the slot is `ticket % len`. It only grows, so concurrent picks each get
    /// their own ticket without a lock.
    ticket: AtomicUsize,
}

impl Rotor {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Starts the pointer at `slot` (for tests and for reproducing a published initial state).
    pub(crate) fn starting_at(slot: usize) -> Self {
        Rotor {
            ticket: AtomicUsize::new(slot),
        }
    }

    /// The raw position (the next slot is this modulo the slot count).
    pub(crate) fn position(&self) -> usize {
        self.ticket.load(Ordering::Relaxed)
    }

    /// Puts the pointer on `slot`.
    pub(crate) fn set_position(&self, slot: usize) {
        self.ticket.store(slot, Ordering::Relaxed);
    }

    /// The next slot in `0..len` for which `eligible` holds, or `None` when there is none.
    pub(crate) fn next(&self, len: usize, eligible: impl Fn(usize) -> bool) -> Option<usize> {
        self.next_preferring(len, eligible, |_| false)
    }

    /// The next slot for which `preferred` holds; when no slot is preferred, the next one for
    /// which `fallback` holds. One ticket either way, so a fallback does not skip a turn.
    pub(crate) fn next_preferring(
        &self,
        len: usize,
        preferred: impl Fn(usize) -> bool,
        fallback: impl Fn(usize) -> bool,
    ) -> Option<usize> {
        if len == 0 {
            return None;
        }
        let ticket = self.ticket.fetch_add(1, Ordering::Relaxed);
        let start = ticket % len;
        let offset = (0..len)
            .find(|&i| preferred((start + i) % len))
            .or_else(|| (0..len).find(|&i| fallback((start + i) % len)))?;
        if offset > 0 {
            // Best effort: if another pick took a ticket meanwhile, leave the pointer alone
            // rather than undo its move.
            let _ = self.ticket.compare_exchange(
                ticket.wrapping_add(1),
                ticket.wrapping_add(1 + offset),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        Some((start + offset) % len)
    }

    /// A fresh rotation start, for breaking ties fairly.
    pub(crate) fn spin(&self, len: usize) -> usize {
        if len == 0 {
            0
        } else {
            self.ticket.fetch_add(1, Ordering::Relaxed) % len
        }
    }
}

/// The SplitMix64 finaliser: a bijective 64-bit mixer with good avalanche.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seeded SplitMix64 stream advanced with one atomic add, so concurrent picks never lock and
/// the same seed gives the same sequence in a single-threaded run (the simulator).
#[derive(Debug)]
pub(crate) struct SplitMix64 {
    state: AtomicU64,
}

const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64 {
            state: AtomicU64::new(seed),
        }
    }

    pub(crate) fn next_u64(&self) -> u64 {
        let state = self
            .state
            .fetch_add(GOLDEN_GAMMA, Ordering::Relaxed)
            .wrapping_add(GOLDEN_GAMMA);
        mix64(state)
    }

    /// Uniform in `0..bound` (`bound > 0`), by multiply-shift (Lemire) rather than `%`, which
    /// would favour small values.
    pub(crate) fn below(&self, bound: usize) -> usize {
        ((u128::from(self.next_u64()) * bound as u128) >> 64) as usize
    }
}

/// How many nodes both the view and the policy's own per-node state know about. A view taken
/// during a reload race may have more or fewer nodes than the policy was built for; ids past
/// either end are treated as absent rather than indexed.
pub(crate) fn known_nodes(view: &dyn ClusterView, built_for: usize) -> usize {
    view.node_count().min(built_for)
}

/// Number of available nodes among `0..limit`.
pub(crate) fn count_available(view: &dyn ClusterView, limit: usize) -> usize {
    (0..limit).filter(|&id| view.node(id).available).count()
}

/// The `nth` (0-based) available node among `0..limit`.
pub(crate) fn nth_available(view: &dyn ClusterView, limit: usize, nth: usize) -> Option<NodeId> {
    (0..limit).filter(|&id| view.node(id).available).nth(nth)
}

/// The available node with the fewest active requests among `0..limit`; ties go to the larger
/// weight, then to the first in circular order from `start`, so equal nodes share the work
/// instead of node 0 taking every tie.
pub(crate) fn least_loaded(
    view: &dyn ClusterView,
    limit: usize,
    start: usize,
) -> Option<(NodeId, NodeState)> {
    let mut best: Option<(NodeId, NodeState)> = None;
    for i in 0..limit {
        let id = (start + i) % limit;
        let state = view.node(id);
        if !state.available {
            continue;
        }
        let better = match &best {
            None => true,
            Some((_, b)) => {
                state.active < b.active || (state.active == b.active && state.weight > b.weight)
            }
        };
        if better {
            best = Some((id, state));
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::StaticView;

    #[test]
    fn rotor_moves_past_the_slot_it_skipped_to() {
        let rotor = Rotor::new();
        let down = 1;
        let picks: Vec<_> = (0..6)
            .map(|_| rotor.next(3, |i| i != down).unwrap())
            .collect();
        assert_eq!(picks, vec![0, 2, 0, 2, 0, 2]);
        assert_eq!(rotor.next(3, |_| false), None);
        assert_eq!(rotor.next(0, |_| true), None);
    }

    #[test]
    fn rotor_fallback_takes_one_ticket() {
        let rotor = Rotor::new();
        assert_eq!(rotor.next_preferring(3, |_| false, |_| true), Some(0));
        assert_eq!(rotor.next_preferring(3, |_| false, |_| true), Some(1));
        assert_eq!(rotor.next_preferring(3, |i| i == 0, |_| true), Some(0));
    }

    #[test]
    fn splitmix_is_deterministic_and_below_stays_in_range() {
        let a = SplitMix64::new(7);
        let b = SplitMix64::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
            assert!(a.below(5) < 5);
            b.below(5);
        }
        let mut seen = [0u32; 4];
        for _ in 0..4000 {
            seen[a.below(4)] += 1;
        }
        assert!(seen.iter().all(|&c| (800..1200).contains(&c)), "{seen:?}");
    }

    #[test]
    fn least_loaded_prefers_fewest_active_then_weight_then_rotation() {
        let mut view = StaticView::uniform(4);
        view.nodes[0].active = 3;
        view.nodes[1].active = 1;
        view.nodes[2].active = 1;
        view.nodes[2].weight = 2;
        view.nodes[3].active = 1;
        assert_eq!(least_loaded(&view, 4, 0).unwrap().0, 2);
        view.nodes[2].weight = 1;
        assert_eq!(least_loaded(&view, 4, 0).unwrap().0, 1);
        assert_eq!(least_loaded(&view, 4, 3).unwrap().0, 3);
        for n in &mut view.nodes {
            n.available = false;
        }
        assert_eq!(least_loaded(&view, 4, 0), None);
    }
}

/// Helpers for the policies' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use crate::class::ClassId;
    use crate::policy::{Policy, RequestInfo};
    use crate::view::{ClusterView, NodeId, NodeState, StaticView};

    pub(crate) fn request(class: ClassId, key: &str) -> RequestInfo<'_> {
        RequestInfo {
            class,
            key,
            key_hash: crate::hash_key(key),
        }
    }

    /// A view that claims more nodes than it has states for, as a view taken in the middle of a
    /// reload might: the extra ids report as available, so a policy that indexes its own
    /// per-node state by them would panic.
    pub(crate) struct GrownView(pub usize);

    impl ClusterView for GrownView {
        fn now_nanos(&self) -> u64 {
            0
        }
        fn node_count(&self) -> usize {
            self.0
        }
        fn node(&self, _id: NodeId) -> NodeState {
            NodeState::default()
        }
    }

    /// Picks made by `policy` for `count` requests of `class`, all with the same key.
    pub(crate) fn picks(policy: &dyn Policy, view: &StaticView, count: usize) -> Vec<NodeId> {
        (0..count)
            .map(|_| policy.pick(&request(0, "/"), view).expect("a node"))
            .collect()
    }

    /// Checks the behaviour every policy shares: never an unavailable node, `None` when none is
    /// available or the cluster is empty, and no panic when the view has more or fewer nodes than
    /// the policy was built for.
    pub(crate) fn check_common_behaviour(policy: &dyn Policy, built_for: usize) {
        let mut view = StaticView::uniform(built_for);
        view.nodes[1].available = false;
        for i in 0..200 {
            let key = format!("/k{i}");
            let picked = policy.pick(&request(i % 3, &key), &view);
            assert!(
                matches!(picked, Some(id) if id != 1 && id < built_for),
                "{}: picked {picked:?}",
                policy.name()
            );
        }
        for node in &mut view.nodes {
            node.available = false;
        }
        assert_eq!(
            policy.pick(&request(0, "/"), &view),
            None,
            "{}",
            policy.name()
        );
        assert_eq!(
            policy.pick(&request(0, "/"), &StaticView::uniform(0)),
            None,
            "{}",
            policy.name()
        );
        let shrunk = StaticView::uniform(built_for - 1);
        for i in 0..50 {
            let key = format!("/s{i}");
            let picked = policy.pick(&request(i % 5, &key), &shrunk);
            assert!(
                matches!(picked, Some(id) if id < built_for - 1),
                "{}: picked {picked:?}",
                policy.name()
            );
        }
        let grown = GrownView(built_for + 3);
        for i in 0..50 {
            let key = format!("/g{i}");
            assert!(policy.pick(&request(i % 5, &key), &grown).is_some());
        }
    }
}
