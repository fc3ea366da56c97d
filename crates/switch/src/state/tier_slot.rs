//! One node's tier-wide state as the gossip last summed it, kept in atomics: written once per
//! gossip period for every node, read by every pick. An `ArcSwap` per node allocated and
//! retired 1,000 snapshots a round at 1,000 nodes (`arc_swap`'s debt payment was 7 % of an
//! idle tier's gossip CPU); plain stores cost nothing of the kind.
//!
//! The fields are stored one by one, the time last (release) and read first (acquire): a pick
//! that runs while a round publishes may see one field of the new round beside another of the
//! old, each a tier-wide approximation of the same moment within one period. `active` and
//! `own_active` share one word so `TierState::estimate_active` never mixes rounds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use capstan_core::TierState;

/// `at_nanos` when there is no snapshot.
const NONE: u64 = u64::MAX;

/// A node's [`TierState`], published without allocation.
#[derive(Debug)]
pub(crate) struct TierSlot {
    at_nanos: AtomicU64,
    /// `active` in the high half, `own_active` in the low.
    active: AtomicU64,
    finished: AtomicU64,
    /// `f64` bits.
    latency_ms: AtomicU64,
    ejected: AtomicBool,
}

impl Default for TierSlot {
    fn default() -> Self {
        TierSlot {
            at_nanos: AtomicU64::new(NONE),
            active: AtomicU64::new(0),
            finished: AtomicU64::new(0),
            latency_ms: AtomicU64::new(0f64.to_bits()),
            ejected: AtomicBool::new(false),
        }
    }
}

impl TierSlot {
    pub(crate) fn store(&self, state: TierState) {
        let active = (u64::from(state.active) << 32) | u64::from(state.own_active);
        self.active.store(active, Ordering::Relaxed);
        self.finished.store(state.finished, Ordering::Relaxed);
        (self.latency_ms).store(state.latency_ms.to_bits(), Ordering::Relaxed);
        self.ejected.store(state.ejected, Ordering::Relaxed);
        // A time of u64::MAX nanoseconds (584 years of uptime) would read as none.
        let at = state.at_nanos.map_or(NONE, |at| at.min(NONE - 1));
        self.at_nanos.store(at, Ordering::Release);
    }

    pub(crate) fn load(&self) -> TierState {
        let at = self.at_nanos.load(Ordering::Acquire);
        let active = self.active.load(Ordering::Relaxed);
        TierState {
            at_nanos: (at != NONE).then_some(at),
            active: (active >> 32) as u32,
            own_active: active as u32,
            finished: self.finished.load(Ordering::Relaxed),
            latency_ms: f64::from_bits(self.latency_ms.load(Ordering::Relaxed)),
            ejected: self.ejected.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_state_reads_back_whole() {
        let slot = TierSlot::default();
        assert_eq!(slot.load(), TierState::default());
        let state = TierState {
            at_nanos: Some(0),
            active: u32::MAX,
            own_active: 7,
            finished: u64::MAX,
            latency_ms: 12.5,
            ejected: true,
        };
        slot.store(state);
        assert_eq!(slot.load(), state);
        slot.store(TierState::default());
        assert_eq!(slot.load(), TierState::default());
    }
}
