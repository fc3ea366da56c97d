//! GDSF's priority queue: a radix heap of unsorted buckets with a small exact heap in front
//! ("hot tier"). Exact: it pops in the same order as an indexed heap of (key, keying sequence).
//!
//! It relies on GDSF being monotone: every key pushed is ≥ the last popped key (H = L + f·c/s
//! and L is the last popped H), and so ≥ `base`, a key popped earlier. A key k ≥ base lives in
//! bucket `bits(k ^ base)` (0 for k = base, else the position of the highest bit in which k
//! differs from base, plus one), and a lower bucket holds only smaller keys. Cold buckets are
//! unsorted `Vec`s of (keying sequence, slot), and leaving one only marks the node (its entry goes
//! stale: its sequence no longer matches the node's). So push, remove and re-key touch only the
//! node, which the policy has just read, and the end of a `Vec`: a hit does not wander through a
//! big heap as it did, each level a likely cache miss. Stale entries are dropped when their
//! bucket is next read, or all at once when they outnumber its live ones.
//!
//! Only the lowest buckets are ever ordered: when the hot heap runs dry, the lowest non-empty
//! bucket is either moved into it whole (when it holds at most `HOT_BATCH` objects), or, as in
//! a radix heap, `base` becomes its smallest key and its objects are spread over the buckets
//! below. Every key pushed while the hot heap holds bucket b's objects goes to the hot heap if
//! its bucket is ≤ b, so the hot heap always holds the smallest keys. Objects leaving the hot
//! heap (re-keyed or removed) are only marked; their entries are dropped when they surface, or
//! all at once when they outnumber the live ones.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::slab::Slab;

/// Buckets 0..=64 (keys are 64-bit).
const BUCKETS: usize = 65;
/// Buckets this size or smaller move into the hot heap whole; larger ones are split first.
const HOT_BATCH: usize = 256;
/// `Place::tier` of an object in the hot heap.
const HOT: u8 = 254;
/// `Place::tier` of an object in no queue.
const NOWHERE: u8 = 255;

/// Where a node is queued: kept in the node, which the policy touches anyway.
#[derive(Clone, Copy)]
pub(crate) struct Place {
    key: u64,
    /// When it was keyed: the order among equal keys, and what tells a live entry from a stale
    /// one (each keying gets a new number).
    seq: u64,
    /// Its cold bucket, HOT or NOWHERE.
    tier: u8,
}

impl Place {
    pub const NEW: Place = Place {
        key: 0,
        seq: 0,
        tier: NOWHERE,
    };
}

/// What the queue needs from a node's policy data.
pub(crate) trait Queued {
    fn place(&self) -> &Place;
    fn place_mut(&mut self) -> &mut Place;
}

/// A hot-heap entry: (key, seq, slot), smallest first.
type Entry = Reverse<(u64, u64, u32)>;

/// A cold-bucket entry: live while the node's tier is this bucket and its seq is `seq`.
#[derive(Clone, Copy)]
struct Cold {
    seq: u64,
    slot: u32,
}

impl Cold {
    fn is_live<T: Queued>(self, slab: &Slab<T>, bucket: usize) -> bool {
        let place = slab[self.slot].data.place();
        place.seq == self.seq && usize::from(place.tier) == bucket
    }
}

pub(crate) struct RadixQueue {
    base: u64,
    cold: Vec<Vec<Cold>>,
    /// Live entries per cold bucket (the rest are stale).
    cold_live: [u32; BUCKETS],
    /// Bit b: `cold[b]` has live entries.
    occupied: u128,
    hot: BinaryHeap<Entry>,
    /// The highest bucket whose keys go to the hot heap; None while it is empty.
    hot_max: Option<usize>,
    /// Entries of `hot` whose object is still there.
    hot_live: usize,
    next_seq: u64,
    len: usize,
}

impl RadixQueue {
    pub fn new() -> Self {
        RadixQueue {
            base: 0,
            cold: vec![Vec::new(); BUCKETS],
            cold_live: [0; BUCKETS],
            occupied: 0,
            hot: BinaryHeap::new(),
            hot_max: None,
            hot_live: 0,
            next_seq: 0,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    fn bucket(&self, key: u64) -> usize {
        debug_assert!(key >= self.base, "keys never go below the base");
        (u64::BITS - (key ^ self.base).leading_zeros()) as usize
    }

    /// Queues `slot` (in no queue) under `key`, which must be ≥ the last popped key.
    pub fn push<T: Queued>(&mut self, slab: &mut Slab<T>, slot: u32, key: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let b = self.bucket(key);
        let place = slab[slot].data.place_mut();
        place.key = key;
        place.seq = seq;
        if self.hot_max.is_some_and(|h| b <= h) {
            place.tier = HOT;
            self.hot.push(Reverse((key, seq, slot)));
            self.hot_live += 1;
        } else {
            place.tier = b as u8;
            self.file(b, Cold { seq, slot });
        }
        self.len += 1;
    }

    /// Takes `slot` (queued) out of the queue.
    pub fn remove<T: Queued>(&mut self, slab: &mut Slab<T>, slot: u32) {
        let place = slab[slot].data.place_mut();
        let tier = place.tier;
        debug_assert_ne!(tier, NOWHERE, "slot is queued");
        place.tier = NOWHERE;
        if tier == HOT {
            self.hot_live -= 1;
            self.drop_stale_hot(slab);
        } else {
            self.forget_cold(slab, tier.into());
        }
        self.len -= 1;
    }

    /// Removes the earliest keyed of the smallest key; returns its key and slot.
    pub fn pop<T: Queued>(&mut self, slab: &mut Slab<T>) -> Option<(u64, u32)> {
        loop {
            while let Some(Reverse((key, seq, slot))) = self.hot.pop() {
                let place = slab[slot].data.place_mut();
                if place.tier == HOT && place.seq == seq {
                    place.tier = NOWHERE;
                    self.hot_live -= 1;
                    self.len -= 1;
                    return Some((key, slot));
                }
            }
            self.hot_max = None;
            if self.occupied == 0 {
                return None;
            }
            let b = self.occupied.trailing_zeros() as usize;
            if b == 0 || self.cold_live[b] as usize <= HOT_BATCH {
                self.heat(slab, b);
            } else {
                self.split(slab, b);
            }
        }
    }

    /// Moves cold bucket `b` (the lowest non-empty one; the hot heap is empty) into the hot heap.
    fn heat<T: Queued>(&mut self, slab: &mut Slab<T>, b: usize) {
        let mut entries = self.take_bucket(b);
        for &e in &entries {
            if e.is_live(slab, b) {
                let place = slab[e.slot].data.place_mut();
                place.tier = HOT;
                self.hot.push(Reverse((place.key, place.seq, e.slot)));
                self.hot_live += 1;
            }
        }
        self.hot_max = Some(b);
        entries.clear();
        self.cold[b] = entries;
    }

    /// Re-bases on the smallest key of bucket `b` (the lowest non-empty one; nothing is in the
    /// hot heap) and spreads the bucket over the buckets below it. Higher buckets keep their
    /// objects: the new base agrees with the old one above bit b - 1.
    fn split<T: Queued>(&mut self, slab: &mut Slab<T>, b: usize) {
        let mut entries = self.take_bucket(b);
        entries.retain(|e| e.is_live(slab, b));
        self.base = entries
            .iter()
            .map(|e| slab[e.slot].data.place().key)
            .min()
            .expect("a bucket with live entries");
        for &e in &entries {
            let place = slab[e.slot].data.place_mut();
            let to = (u64::BITS - (place.key ^ self.base).leading_zeros()) as usize;
            debug_assert!(to < b);
            place.tier = to as u8;
            self.file(to, e);
        }
        entries.clear();
        self.cold[b] = entries;
    }

    fn file(&mut self, b: usize, entry: Cold) {
        self.cold[b].push(entry);
        self.cold_live[b] += 1;
        self.occupied |= 1 << b;
    }

    /// Empties bucket `b`, returning its entries (live and stale).
    fn take_bucket(&mut self, b: usize) -> Vec<Cold> {
        self.cold_live[b] = 0;
        self.occupied &= !(1 << b);
        std::mem::take(&mut self.cold[b])
    }

    /// One of bucket `b`'s entries went stale: empty the bucket when nothing in it is live (no
    /// need to read the nodes), or sweep it when the stale entries outnumber the live ones.
    fn forget_cold<T: Queued>(&mut self, slab: &Slab<T>, b: usize) {
        self.cold_live[b] -= 1;
        let live = self.cold_live[b] as usize;
        if live == 0 {
            self.cold[b].clear();
            self.occupied &= !(1 << b);
        } else if self.cold[b].len() > 2 * live + 64 {
            self.cold[b].retain(|e| e.is_live(slab, b));
        }
    }

    /// Drops the hot heap's stale entries once they outnumber the live ones, so it stays small.
    fn drop_stale_hot<T: Queued>(&mut self, slab: &Slab<T>) {
        if self.hot.len() > 2 * self.hot_live + 64 {
            self.hot.retain(|&Reverse((_, seq, slot))| {
                let place = slab[slot].data.place();
                place.tier == HOT && place.seq == seq
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    impl Queued for Place {
        fn place(&self) -> &Place {
            self
        }
        fn place_mut(&mut self) -> &mut Place {
            self
        }
    }

    /// Random pushes (keys ≥ the last popped one, often equal, sometimes far above), re-keys,
    /// removals and pops against a sorted model of (key, keying time).
    #[test]
    fn matches_a_sorted_model() {
        let mut slab: Slab<Place> = Slab::new();
        let mut q = RadixQueue::new();
        let mut model: BTreeSet<(u64, u64, u32)> = BTreeSet::new();
        let mut keyed: Vec<Option<(u64, u64)>> = Vec::new();
        let mut last = 0u64;
        let mut x = 4242u64;
        for time in 0..300_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = match x % 8 {
                0 => last,
                1 => last.saturating_add(x >> 4),
                _ => last.saturating_add((x >> 8) % 5000),
            };
            let pick = if keyed.is_empty() {
                0
            } else {
                (x >> 20) as usize % keyed.len()
            };
            match (x >> 40) % 6 {
                0 | 1 => {
                    let slot = slab.alloc(0, 0, Place::NEW);
                    if keyed.len() <= slot as usize {
                        keyed.resize(slot as usize + 1, None);
                    }
                    q.push(&mut slab, slot, key);
                    model.insert((key, time, slot));
                    keyed[slot as usize] = Some((key, time));
                }
                2 | 3 if keyed.get(pick).is_some_and(Option::is_some) => {
                    let (k, t) = keyed[pick].take().unwrap();
                    let slot = pick as u32;
                    q.remove(&mut slab, slot);
                    model.remove(&(k, t, slot));
                    if (x >> 50).is_multiple_of(2) {
                        q.push(&mut slab, slot, key);
                        model.insert((key, time, slot));
                        keyed[pick] = Some((key, time));
                    } else {
                        slab.release(slot);
                    }
                }
                _ => {
                    let got = q.pop(&mut slab);
                    let want = model.pop_first().map(|(k, _, s)| (k, s));
                    assert_eq!(got, want, "at {time}");
                    if let Some((k, s)) = got {
                        last = k;
                        keyed[s as usize] = None;
                        slab.release(s);
                    }
                }
            }
            assert_eq!(q.len(), model.len());
        }
    }
}
