//! GDSF's priority queue: a radix heap of unsorted buckets with a small exact heap in front
//! ("hot tier"). Exact: it pops in the same order as an indexed heap of (key, keying sequence).
//!
//! It relies on GDSF being monotone: every key pushed is ≥ the last popped key (H = L + f·c/s
//! and L is the last popped H), and so ≥ `base`, a key popped earlier. A key k ≥ base lives in
//! bucket `bits(k ^ base)` (0 for k = base, else the position of the highest bit in which k
//! differs from base, plus one), and a lower bucket holds only smaller keys.
//!
//! Buckets are unsorted `Vec`s of entries (key, keying sequence, slot) that carry everything the
//! queue orders by, so moving them never reads a node: only a pop reads one, the victim's, which
//! the policy reads anyway. Leaving the queue (a re-key or a removal) only marks the node; its
//! entry goes stale — its sequence no longer matches the node's — and is skipped when it
//! surfaces, or dropped in a sweep once stale entries outnumber live ones. So a hit touches the
//! node the policy has just read and the end of a `Vec`, where a heap sifted through levels that
//! are each a likely cache miss.
//!
//! Only the lowest buckets are ever ordered: when the hot heap runs dry, the lowest non-empty
//! bucket is either moved into it whole (when it holds at most `HOT_BATCH` entries), or, as in a
//! radix heap, `base` becomes its smallest key and its entries are spread over the buckets
//! below. While the hot heap holds bucket b's entries, every key pushed goes to the hot heap if
//! its bucket is ≤ b, so the hot heap always holds the smallest keys.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::slab::Slab;

/// Buckets 0..=64 (keys are 64-bit).
const BUCKETS: usize = 65;
/// Buckets this size or smaller move into the hot heap whole; larger ones are split first.
const HOT_BATCH: usize = 256;

/// A node's side of the queue: which keying of it is current, if it is queued.
#[derive(Clone, Copy)]
pub(crate) struct Place {
    /// When it was last keyed: the order among equal keys, and what tells its live entry from
    /// stale ones (each keying gets a new number).
    seq: u64,
    queued: bool,
}

impl Place {
    pub const NEW: Place = Place {
        seq: 0,
        queued: false,
    };
}

/// What the queue needs from a node's policy data.
pub(crate) trait Queued {
    fn place(&self) -> &Place;
    fn place_mut(&mut self) -> &mut Place;
}

/// (key, seq, slot): ordered by key, then keying order. Live while the slot is queued with `seq`.
type Entry = (u64, u64, u32);

fn is_live<T: Queued>(slab: &Slab<T>, &(_, seq, slot): &Entry) -> bool {
    let place = slab[slot].data.place();
    place.queued && place.seq == seq
}

pub(crate) struct RadixQueue {
    base: u64,
    cold: Vec<Vec<Entry>>,
    /// Bit b: `cold[b]` is non-empty.
    occupied: u128,
    hot: BinaryHeap<Reverse<Entry>>,
    /// The highest bucket whose keys go to the hot heap; None while it is empty.
    hot_max: Option<usize>,
    /// Entries, live and stale, in the buckets and the hot heap.
    entries: usize,
    next_seq: u64,
    /// Queued slots (live entries).
    len: usize,
}

impl RadixQueue {
    pub fn new() -> Self {
        RadixQueue {
            base: 0,
            cold: vec![Vec::new(); BUCKETS],
            occupied: 0,
            hot: BinaryHeap::new(),
            hot_max: None,
            entries: 0,
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

    /// Queues `slot` (not queued) under `key`, which must be ≥ the last popped key.
    pub fn push<T: Queued>(&mut self, slab: &mut Slab<T>, slot: u32, key: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let place = slab[slot].data.place_mut();
        debug_assert!(!place.queued, "slot is not queued");
        *place = Place { seq, queued: true };
        let b = self.bucket(key);
        if self.hot_max.is_some_and(|h| b <= h) {
            self.hot.push(Reverse((key, seq, slot)));
        } else {
            self.file(b, (key, seq, slot));
        }
        self.entries += 1;
        self.len += 1;
    }

    /// Takes `slot` (queued) out of the queue; its entry goes stale.
    pub fn remove<T: Queued>(&mut self, slab: &mut Slab<T>, slot: u32) {
        let place = slab[slot].data.place_mut();
        debug_assert!(place.queued, "slot is queued");
        place.queued = false;
        self.len -= 1;
        if self.entries > 2 * self.len + 1024 {
            self.sweep(slab);
        }
    }

    /// Removes the earliest keyed of the smallest key; returns its key and slot.
    pub fn pop<T: Queued>(&mut self, slab: &mut Slab<T>) -> Option<(u64, u32)> {
        if self.len == 0 {
            self.clear();
            return None;
        }
        loop {
            while let Some(Reverse(entry)) = self.hot.pop() {
                self.entries -= 1;
                if is_live(slab, &entry) {
                    let (key, _, slot) = entry;
                    slab[slot].data.place_mut().queued = false;
                    self.len -= 1;
                    return Some((key, slot));
                }
            }
            self.hot_max = None;
            debug_assert_ne!(self.occupied, 0, "a live entry is somewhere");
            let b = self.occupied.trailing_zeros() as usize;
            if b == 0 || self.cold[b].len() <= HOT_BATCH {
                self.heat(b);
            } else {
                self.split(b);
            }
        }
    }

    /// Moves cold bucket `b` (the lowest non-empty one; the hot heap is empty) into the hot heap.
    fn heat(&mut self, b: usize) {
        let mut bucket = self.take_bucket(b);
        self.hot.extend(bucket.drain(..).map(Reverse));
        self.hot_max = Some(b);
        self.cold[b] = bucket;
    }

    /// Re-bases on the smallest key of bucket `b` (the lowest non-empty one; nothing is in the
    /// hot heap) and spreads the bucket over the buckets below it. Higher buckets keep their
    /// entries: the new base agrees with the old one above bit b - 1. Stale entries are spread
    /// too (their keys may be the smallest; that only makes the base lower, which is safe).
    fn split(&mut self, b: usize) {
        let mut bucket = self.take_bucket(b);
        self.base = bucket
            .iter()
            .map(|&(key, _, _)| key)
            .min()
            .expect("a non-empty bucket");
        for entry in bucket.drain(..) {
            let to = self.bucket(entry.0);
            debug_assert!(to < b);
            self.file(to, entry);
        }
        self.cold[b] = bucket;
    }

    fn file(&mut self, b: usize, entry: Entry) {
        self.cold[b].push(entry);
        self.occupied |= 1 << b;
    }

    /// Empties bucket `b`, returning its entries; the `Vec` is meant to be put back, emptied.
    fn take_bucket(&mut self, b: usize) -> Vec<Entry> {
        self.occupied &= !(1 << b);
        std::mem::take(&mut self.cold[b])
    }

    /// Drops the stale entries left when nothing is queued, without reading them, and re-bases
    /// on 0: a split may have based the buckets on a stale key above the last popped one.
    fn clear(&mut self) {
        for bucket in &mut self.cold {
            bucket.clear();
        }
        self.hot.clear();
        self.occupied = 0;
        self.hot_max = None;
        self.entries = 0;
        self.base = 0;
    }

    /// Drops every stale entry (reading each entry's node: paid for by the ≥ 1024 + len
    /// removals since the last sweep).
    fn sweep<T: Queued>(&mut self, slab: &Slab<T>) {
        for b in 0..BUCKETS {
            self.cold[b].retain(|e| is_live(slab, e));
            if self.cold[b].is_empty() {
                self.occupied &= !(1 << b);
            }
        }
        self.hot.retain(|Reverse(e)| is_live(slab, e));
        self.entries = self.len;
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
