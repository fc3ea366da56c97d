//! CLFUS, Clocked Least Frequently Used by Size: Apache Traffic Server's RAM cache replacement
//! (`iocore/cache/RamCacheCLFUS.cc`, described in Bakhtiyari's thesis §2.5.1).
//!
//! What it keeps, as in ATS:
//! - a *cached* list (a CLOCK queue) and a *history* list of objects seen but not cached, each
//!   entry with a hit count `hits` (1 when first seen, +1 on every hit or repeated admission);
//! - an object's value = (hits + 1) / (size + 256), the 256 being ATS's per-entry overhead;
//! - a running average of the values of the victim candidates the CLOCK has examined
//!   (`average = (value + 99·average) / 100`).
//!
//! The CLOCK step (`sweep`): take the oldest cached object; if its value is above the average and
//! fewer than 100 objects were passed over in this call, put it back at the head and go on;
//! otherwise it is the candidate. A hit moves an object to the head only if its value is above
//! the average. Each candidate taken ticks the history CLOCK: the oldest history entry has its
//! hits halved and, if any remain, is put back with one hit fewer, else it is forgotten; while
//! the history holds more than (cached objects + 10) entries, one more is forgotten per tick.
//!
//! Admission (ATS's `put`, mapped onto `admit` + `victim`):
//! - Admitting a cached object is a hit that refreshes its data: hits + 1, moved to the head, its
//!   size replaced, admitted (ATS's put on an existing entry; this is where CLFUS's "re-admit"
//!   differs from remove + admit, which would send the refreshed object back to the history).
//! - An object that fits in the free space is admitted. (ATS does so only while its history is
//!   empty, i.e. during the initial fill, and otherwise still runs one CLOCK step; admitting into
//!   free space whatever the history holds is this port's one departure in the admission rule.)
//! - A first-seen object that does not fit goes to the history (hits 1) and is declined; the CLOCK
//!   runs one step, and the candidate it takes is put back with one hit fewer. So a new object
//!   must be seen twice before it can push anything out (the 2Q-like part).
//! - An object in the history that is admitted again gets hits + 1 and its new size; if its value
//!   is below the average it stays in the history, declined. Otherwise candidates are taken until
//!   it fits; as soon as the candidates' summed value exceeds its own value it is declined, they
//!   are put back (one hit fewer each) and it returns to the history. If it wins, the candidates
//!   that still fit go back (one hit fewer each); the rest become the *pending victims*, which
//!   `victim()` hands out first, moving each to the history as ATS's `victimize` does.
//! - `victim()` with no pending victim runs the CLOCK once and evicts its candidate (for a store
//!   whose budget is below `capacity_bytes`).
//!
//! Not ported: RAM compression, the optional "seen" filter (a lossy hash of first sightings that
//! plays the history's role for never-seen keys), the hash table resizing. `cost` is ignored, as
//! ATS's value has no cost term. The history is also capped at capacity / 256 + 10 entries (the
//! most objects the cache could hold, each charged ATS's 256-byte overhead), so it stays bounded
//! whatever the store does; ATS relies on the per-tick trimming alone.

use super::idmap::IdMap;
use super::policy::{Evictor, ObjectId};
use super::slab::{List, Slab};

/// ATS `ENTRY_OVERHEAD`: bytes charged per entry when valuing it.
const ENTRY_OVERHEAD: u64 = 256;
/// ATS `HISTORY_HYSTERIA`: history entries allowed beyond the number of cached objects.
const HISTORY_HYSTERIA: usize = 10;
/// ATS `REQUEUE_LIMIT`: above-average objects passed over per CLOCK call.
const REQUEUE_LIMIT: u32 = 100;
/// ATS `AVERAGE_VALUE_OVER`: the average's smoothing window.
const AVERAGE_VALUE_OVER: f64 = 100.0;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Cached,
    /// Chosen to make room for an admitted object; handed out by the next `victim()` calls.
    Pending,
    History,
}

struct Entry {
    hits: u64,
    state: State,
}

pub(crate) struct Clfus {
    capacity: u64,
    map: IdMap,
    slab: Slab<Entry>,
    cached: List,
    pending: List,
    history: List,
    history_cap: usize,
    average: f64,
    /// Candidates taken while admitting from the history (kept to reuse its allocation).
    taken: Vec<u32>,
}

fn value(hits: u64, size: u64) -> f64 {
    (hits as f64 + 1.0) / (size.saturating_add(ENTRY_OVERHEAD)) as f64
}

impl Clfus {
    pub fn new(capacity: u64) -> Self {
        let history_cap = usize::try_from(capacity / ENTRY_OVERHEAD)
            .unwrap_or(usize::MAX)
            .saturating_add(HISTORY_HYSTERIA);
        Clfus {
            capacity,
            map: IdMap::default(),
            slab: Slab::new(),
            cached: List::new(),
            pending: List::new(),
            history: List::new(),
            history_cap,
            average: 0.0,
            taken: Vec::new(),
        }
    }

    fn value_of(&self, slot: u32) -> f64 {
        let n = &self.slab[slot];
        value(n.data.hits, n.size)
    }

    /// The list that holds entries in `state`, with the slab to walk it.
    fn list(&mut self, state: State) -> (&mut List, &mut Slab<Entry>) {
        let list = match state {
            State::Cached => &mut self.cached,
            State::Pending => &mut self.pending,
            State::History => &mut self.history,
        };
        (list, &mut self.slab)
    }

    fn unlink(&mut self, slot: u32) {
        let (list, slab) = self.list(self.slab[slot].data.state);
        list.unlink(slab, slot);
    }

    fn push(&mut self, slot: u32, state: State) {
        self.slab[slot].data.state = state;
        let (list, slab) = self.list(state);
        list.push_front(slab, slot);
    }

    /// Drops an entry (unlinked) altogether.
    fn free(&mut self, slot: u32) {
        self.map.remove(self.slab[slot].id);
        self.slab.release(slot);
    }

    /// One CLOCK call over the cached list: the unlinked candidate, or None when nothing is cached.
    fn sweep(&mut self) -> Option<u32> {
        let mut passes = REQUEUE_LIMIT;
        loop {
            let slot = self.cached.pop_back(&mut self.slab)?;
            let v = self.value_of(slot);
            self.average = (v + self.average * (AVERAGE_VALUE_OVER - 1.0)) / AVERAGE_VALUE_OVER;
            if v > self.average && passes > 0 {
                passes -= 1;
                self.cached.push_front(&mut self.slab, slot);
                continue;
            }
            return Some(slot);
        }
    }

    /// A candidate that stays after all: back at the head with one hit fewer (ATS `REQUEUE_HITS`).
    fn requeue(&mut self, slot: u32) {
        let h = &mut self.slab[slot].data.hits;
        *h = h.saturating_sub(1);
        self.push(slot, State::Cached);
    }

    /// Moves the history CLOCK one step (ATS `tick`).
    fn tick(&mut self) {
        let Some(slot) = self.history.pop_back(&mut self.slab) else {
            return;
        };
        let halved = self.slab[slot].data.hits >> 1;
        if halved == 0 {
            self.free(slot);
            return;
        }
        self.slab[slot].data.hits = halved - 1;
        self.history.push_front(&mut self.slab, slot);
        if self.history.len > self.cached.len + self.pending.len + HISTORY_HYSTERIA {
            if let Some(old) = self.history.pop_back(&mut self.slab) {
                self.free(old);
            }
        }
    }

    /// Puts an (unlinked) entry into the history, keeping the history within its hard cap.
    fn send_to_history(&mut self, slot: u32) {
        self.push(slot, State::History);
        while self.history.len > self.history_cap {
            let old = self
                .history
                .pop_back(&mut self.slab)
                .expect("history is not empty");
            self.free(old);
        }
    }

    /// The history entry `slot` (unlinked, hits and size already updated) asks to be cached.
    fn admit_from_history(&mut self, slot: u32) -> bool {
        let size = self.slab[slot].size;
        let mine = self.value_of(slot);
        if mine < self.average {
            self.send_to_history(slot);
            return false;
        }
        let mut taken = std::mem::take(&mut self.taken);
        taken.clear();
        let mut taken_value = 0.0;
        let mut won = true;
        while self.cached.bytes + size > self.capacity {
            let Some(c) = self.sweep() else {
                won = false; // what is left is already pending: no room to be made
                break;
            };
            taken_value += self.value_of(c);
            taken.push(c);
            self.tick();
            if taken_value > mine {
                won = false;
                break;
            }
        }
        if won {
            for &c in &taken {
                if self.cached.bytes + size + self.slab[c].size <= self.capacity {
                    self.requeue(c);
                } else {
                    self.push(c, State::Pending);
                }
            }
            self.push(slot, State::Cached);
        } else {
            for &c in &taken {
                self.requeue(c);
            }
            self.send_to_history(slot);
        }
        self.taken = taken;
        won
    }
}

impl Evictor for Clfus {
    fn name(&self) -> &'static str {
        "clfus"
    }

    fn admit(&mut self, id: ObjectId, size: u64, _cost: u64) -> bool {
        if let Some(slot) = self.map.get(id) {
            self.unlink(slot);
            if size > self.capacity {
                self.free(slot);
                return false;
            }
            let n = &mut self.slab[slot];
            n.size = size;
            n.data.hits = n.data.hits.saturating_add(1);
            return match n.data.state {
                State::Cached | State::Pending => {
                    self.push(slot, State::Cached);
                    true
                }
                State::History => self.admit_from_history(slot),
            };
        }
        if size > self.capacity {
            return false;
        }
        if self.cached.bytes + size <= self.capacity {
            let slot = self.slab.alloc(
                id,
                size,
                Entry {
                    hits: 1,
                    state: State::Cached,
                },
            );
            self.map.insert(id, slot);
            self.push(slot, State::Cached);
            return true;
        }
        // First sight, and something would have to go: remember it instead (ATS `Lhistory`).
        if let Some(c) = self.sweep() {
            self.tick();
            self.requeue(c);
        }
        let slot = self.slab.alloc(
            id,
            size,
            Entry {
                hits: 1,
                state: State::History,
            },
        );
        self.map.insert(id, slot);
        self.send_to_history(slot);
        false
    }

    fn touch(&mut self, id: ObjectId) {
        let Some(slot) = self.map.get(id) else {
            return;
        };
        match self.slab[slot].data.state {
            State::History => {} // not cached: ATS's get does not count it either
            State::Pending => self.slab[slot].data.hits += 1,
            State::Cached => {
                if self.value_of(slot) > self.average {
                    self.cached.move_to_front(&mut self.slab, slot);
                }
                self.slab[slot].data.hits += 1;
            }
        }
    }

    fn remove(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.get(id) {
            self.unlink(slot);
            self.free(slot);
        }
    }

    fn victim(&mut self) -> Option<ObjectId> {
        let slot = match self.pending.pop_back(&mut self.slab) {
            Some(slot) => slot,
            None => {
                let slot = self.sweep()?;
                self.tick();
                slot
            }
        };
        let id = self.slab[slot].id;
        self.send_to_history(slot);
        Some(id)
    }

    fn len(&self) -> usize {
        self.cached.len + self.pending.len
    }

    fn bytes(&self) -> u64 {
        self.cached.bytes + self.pending.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history_len(p: &Clfus) -> usize {
        p.history.len
    }

    /// Capacity 1000; value v(h, s) = (h + 1) / (s + 256); all objects 400 bytes, so
    /// v(0) = 1/656 ≈ 0.00152, v(1) = 2/656 ≈ 0.00305, v(2) = 3/656 ≈ 0.00457.
    ///
    /// 1. admit A, B: they fit (800 bytes). Cached, head first: B A; hits 1 each.
    /// 2. touch B: v(1) > average 0 → to the head (it is already); hits 2.
    /// 3. admit C (first sight, 1200 > 1000): one CLOCK call. Every candidate is above the
    ///    average (which starts at 0 and only creeps up), so 100 are passed over — A, B, A, B, …
    ///    — and the 101st, A, is taken; it is put back with one hit fewer (hits 0). C goes to
    ///    the history (hits 1). Declined. The average is now ≈ 0.64 × the candidates' mean
    ///    ≈ 0.0024.
    /// 4. admit C again: hits 2, v(C) = v(2) ≈ 0.00457 ≥ average. Room is needed (1200 > 1000):
    ///    the oldest is B (v(2), above the average: passed over), then A with v(0) ≈ 0.00152,
    ///    below the average: taken. Taken value 0.00152 < v(C), and now 400 + 400 fits: C is
    ///    admitted. A does not fit back (400 + 400 + 400 > 1000), so A is the pending victim.
    ///    bytes() = 1200 until the store asks.
    /// 5. victim: A (pending), into the history. bytes 800.
    /// 6. victim again (the store wants more room): cached is C B, both above the average
    ///    (v(2) each): 100 passed over, alternating B, C, …; the 101st, B, goes.
    #[test]
    fn hand_worked_sequence() {
        let (a, b, c) = (1, 2, 3);
        let mut p = Clfus::new(1000);
        assert!(p.admit(a, 400, 1));
        assert!(p.admit(b, 400, 1));
        p.touch(b);
        assert!(!p.admit(c, 400, 1), "first sight when full: history");
        assert_eq!((p.len(), p.bytes(), history_len(&p)), (2, 800, 1));
        assert_eq!(
            p.slab[p.map.get(a).unwrap()].data.hits,
            0,
            "the CLOCK's candidate lost a hit"
        );
        assert!(
            p.average > 0.002 && p.average < 0.003,
            "average {}",
            p.average
        );
        assert!(
            p.admit(c, 400, 1),
            "second sight, worth more than its victim"
        );
        assert_eq!((p.len(), p.bytes()), (3, 1200));
        assert_eq!(p.victim(), Some(a));
        assert_eq!((p.len(), p.bytes(), history_len(&p)), (2, 800, 1));
        assert_eq!(p.victim(), Some(b));
        assert_eq!(p.victim(), Some(c));
        assert_eq!(p.victim(), None);
    }

    /// A huge object that would push out several hot small ones is declined even when seen
    /// again; a small one seen twice gets in.
    #[test]
    fn admission_by_value() {
        let mut p = Clfus::new(10_000);
        for id in 0..10 {
            assert!(p.admit(id, 900, 1));
            for _ in 0..5 {
                p.touch(id);
            }
        }
        assert_eq!(p.bytes(), 9000);
        for _ in 0..3 {
            assert!(!p.admit(99, 8000, 1), "huge and cold: declined");
        }
        assert_eq!((p.len(), p.bytes()), (10, 9000));
        assert_eq!(p.victim().map(|_| ()), Some(()), "the CLOCK still works");
        assert!(p.admit(50, 500, 1), "fits in the room made");
    }

    #[test]
    fn history_stays_bounded() {
        let cap = 100 * 1024;
        let mut p = Clfus::new(cap);
        let mut x = 1u64;
        for _ in 0..100_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = (x >> 33) % 5000;
            if p.admit(id, 512 + (x >> 20) % 1024, 1) {
                while p.bytes() > cap {
                    p.victim();
                }
            }
            assert!(history_len(&p) <= p.history_cap);
            assert_eq!(p.map.len(), p.len() + history_len(&p));
        }
        assert_eq!(p.history_cap, 400 + HISTORY_HYSTERIA);
    }
}
