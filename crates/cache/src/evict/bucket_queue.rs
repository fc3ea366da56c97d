//! LFU-DA's priority queue: one FIFO of slab nodes per integer key, the keys in a ring indexed by
//! the key itself ("LFU in O(1)", with aging).
//!
//! The queue is monotone: the smallest key is popped and becomes the `floor`, and every key pushed
//! afterwards is ≥ the floor (LFU-DA keys are L + refcount and L is the last popped key). So the
//! live keys always lie in [floor, floor + RING) except for a few very frequent objects, and a
//! ring of `RING` FIFOs indexed by `key mod RING` holds them with no search: push, remove and
//! re-key are O(1) list operations on nodes the caller has just touched. Keys beyond the ring's
//! window (an object hit more than ~RING times) wait in an ordered map and move into the ring
//! when the floor comes near them. The smallest key is found through a two-level bitmap of
//! non-empty FIFOs, starting at the floor.
//!
//! Order: smallest key first, and among equal keys the one keyed earliest (a FIFO appends at
//! keying time) — the same order as the indexed heap's (priority, keying sequence), so the same
//! victims.

use std::collections::BTreeMap;

use super::slab::{Slab, NIL};

const RING_BITS: u32 = 14;
const RING: u64 = 1 << RING_BITS;
const MASK: u64 = RING - 1;
const WORDS: usize = (RING / 64) as usize;
const SUMMARY_WORDS: usize = WORDS.div_ceil(64);

/// What the queue needs from a node's policy data: where its key is kept.
pub(crate) trait Keyed {
    fn key(&self) -> u64;
    fn set_key(&mut self, key: u64);
}

/// A FIFO threaded through the slab's `prev`/`next`: `head` was keyed earliest.
#[derive(Clone, Copy)]
struct Fifo {
    head: u32,
    tail: u32,
}

const EMPTY: Fifo = Fifo {
    head: NIL,
    tail: NIL,
};

impl Fifo {
    fn push_back<T>(&mut self, slab: &mut Slab<T>, slot: u32) {
        let old = self.tail;
        let n = &mut slab[slot];
        n.prev = old;
        n.next = NIL;
        if old == NIL {
            self.head = slot;
        } else {
            slab[old].next = slot;
        }
        self.tail = slot;
    }

    fn unlink<T>(&mut self, slab: &mut Slab<T>, slot: u32) {
        let (prev, next) = (slab[slot].prev, slab[slot].next);
        if prev == NIL {
            self.head = next;
        } else {
            slab[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            slab[next].prev = prev;
        }
    }

    fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

pub(crate) struct BucketQueue {
    /// The FIFO of key k (floor ≤ k < floor + RING) is `ring[k mod RING]`.
    ring: Box<[Fifo]>,
    /// Bit i: `ring[i]` is non-empty.
    occupied: Box<[u64]>,
    /// Bit w: `occupied[w]` is non-zero.
    summary: [u64; SUMMARY_WORDS],
    /// FIFOs of keys ≥ floor + RING.
    overflow: BTreeMap<u64, Fifo>,
    floor: u64,
    len: usize,
}

impl BucketQueue {
    pub fn new() -> Self {
        BucketQueue {
            ring: vec![EMPTY; RING as usize].into_boxed_slice(),
            occupied: vec![0; WORDS].into_boxed_slice(),
            summary: [0; SUMMARY_WORDS],
            overflow: BTreeMap::new(),
            floor: 0,
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Queues `slot` (in no queue) under `key`, which must be ≥ the last popped key.
    pub fn push<T: Keyed>(&mut self, slab: &mut Slab<T>, slot: u32, key: u64) {
        debug_assert!(key >= self.floor, "keys never go below the floor");
        slab[slot].data.set_key(key);
        if key - self.floor < RING {
            let i = (key & MASK) as usize;
            self.ring[i].push_back(slab, slot);
            self.mark(i);
        } else {
            self.overflow
                .entry(key)
                .or_insert(EMPTY)
                .push_back(slab, slot);
        }
        self.len += 1;
    }

    /// Takes `slot` (queued) out of the queue.
    pub fn remove<T: Keyed>(&mut self, slab: &mut Slab<T>, slot: u32) {
        let key = slab[slot].data.key();
        if key - self.floor < RING {
            let i = (key & MASK) as usize;
            self.ring[i].unlink(slab, slot);
            if self.ring[i].is_empty() {
                self.unmark(i);
            }
        } else {
            let fifo = self.overflow.get_mut(&key).expect("queued under its key");
            fifo.unlink(slab, slot);
            if fifo.is_empty() {
                self.overflow.remove(&key);
            }
        }
        self.len -= 1;
    }

    /// Removes the earliest keyed of the smallest key; returns its key and slot. Its key becomes
    /// the floor.
    pub fn pop<T: Keyed>(&mut self, slab: &mut Slab<T>) -> Option<(u64, u32)> {
        let key = match self.first_in_ring() {
            Some(i) => self.floor + ((i as u64).wrapping_sub(self.floor) & MASK),
            None => *self.overflow.keys().next()?,
        };
        self.raise_floor(key);
        let slot = self.ring[(key & MASK) as usize].head;
        self.remove(slab, slot);
        Some((key, slot))
    }

    /// Moves the floor up to `floor` (the smallest key) and brings the overflow keys that now
    /// fit into the ring. Their ring entries are free: the ring held only keys in
    /// [floor, old floor + RING), which differ from theirs modulo RING.
    fn raise_floor(&mut self, floor: u64) {
        self.floor = floor;
        while let Some(entry) = self.overflow.first_entry() {
            if *entry.key() - floor >= RING {
                break;
            }
            let (key, fifo) = entry.remove_entry();
            let i = (key & MASK) as usize;
            debug_assert!(self.ring[i].is_empty());
            self.ring[i] = fifo;
            self.mark(i);
        }
    }

    /// The first non-empty ring entry from the floor's, wrapping round: the smallest key there.
    fn first_in_ring(&self) -> Option<usize> {
        let start = (self.floor & MASK) as usize;
        self.first_at_or_after(start)
            .or_else(|| self.first_at_or_after(0))
    }

    fn first_at_or_after(&self, from: usize) -> Option<usize> {
        let w = from / 64;
        let bits = self.occupied[w] & (!0u64 << (from % 64));
        if bits != 0 {
            return Some(w * 64 + bits.trailing_zeros() as usize);
        }
        let next = w + 1;
        for s in next / 64..SUMMARY_WORDS {
            let mut words = self.summary[s];
            if s == next / 64 {
                words &= !0u64 << (next % 64);
            }
            if words != 0 {
                let w = s * 64 + words.trailing_zeros() as usize;
                return Some(w * 64 + self.occupied[w].trailing_zeros() as usize);
            }
        }
        None
    }

    fn mark(&mut self, i: usize) {
        let w = i / 64;
        self.occupied[w] |= 1 << (i % 64);
        self.summary[w / 64] |= 1 << (w % 64);
    }

    fn unmark(&mut self, i: usize) {
        let w = i / 64;
        self.occupied[w] &= !(1 << (i % 64));
        if self.occupied[w] == 0 {
            self.summary[w / 64] &= !(1 << (w % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    impl Keyed for u64 {
        fn key(&self) -> u64 {
            *self
        }
        fn set_key(&mut self, key: u64) {
            *self = key;
        }
    }

    /// Random pushes (keys from the floor up to 3 × RING, so the overflow and the ring's wrap are
    /// both exercised), removals and pops against a sorted model of (key, keying time).
    #[test]
    fn matches_a_sorted_model_across_the_window() {
        let mut slab: Slab<u64> = Slab::new();
        let mut q = BucketQueue::new();
        let mut model: BTreeSet<(u64, u64, u32)> = BTreeSet::new();
        let mut keyed: Vec<Option<(u64, u64)>> = Vec::new();
        let mut x = 777u64;
        for time in 0..200_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let spread = if x.is_multiple_of(16) { 3 * RING } else { 20 };
            let key = q.floor + 1 + (x >> 8) % spread;
            match (x >> 40) % 5 {
                0 | 1 => {
                    let slot = slab.alloc(0, 0, 0);
                    if keyed.len() <= slot as usize {
                        keyed.resize(slot as usize + 1, None);
                    }
                    q.push(&mut slab, slot, key);
                    model.insert((key, time, slot));
                    keyed[slot as usize] = Some((key, time));
                }
                2 if !model.is_empty() => {
                    let pick = (x >> 20) as usize % keyed.len();
                    if let Some((k, t)) = keyed[pick].take() {
                        q.remove(&mut slab, pick as u32);
                        model.remove(&(k, t, pick as u32));
                        slab.release(pick as u32);
                    }
                }
                _ => {
                    let got = q.pop(&mut slab);
                    let want = model.pop_first().map(|(k, _, s)| (k, s));
                    assert_eq!(got, want, "at {time}");
                    if let Some((_, s)) = got {
                        keyed[s as usize] = None;
                        slab.release(s);
                    }
                }
            }
            assert_eq!(q.len(), model.len());
        }
        assert!(q.floor > 2 * RING, "the floor went round the ring");
    }
}
