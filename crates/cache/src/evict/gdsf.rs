//! GDSF, Greedy-Dual-Size-Frequency (Cherkasova, HPL-98-69; Squid's `heap GDSF`).
//!
//! Each object has a value H = L + frequency × cost / size, computed when it is admitted
//! (frequency 1) and again on every hit (with the L of that moment). L starts at 0 and becomes the
//! H of each evicted object; the smallest H is evicted. Small, often hit, expensive-to-fetch
//! objects stay; large ones go first.
//!
//! Departures from Squid: Squid's key uses cost 1 (refcount / size) and a clock-based tie-breaker;
//! this one uses the store's cost (the miss latency, as in Cherkasova's GDSF) and breaks ties by
//! keying order (earliest first). A size of 0 counts as 1 byte.
//!
//! The queue is a radix heap with a small exact heap in front (`radix_queue`), not one big heap:
//! H never falls below L, which is what a radix heap needs, and the victims are the same.

use super::idmap::IdMap;
use super::policy::{Evictor, ObjectId};
use super::radix_queue::{Place, Queued, RadixQueue};
use super::slab::Slab;

pub(crate) struct Gdsf {
    capacity: u64,
    map: IdMap,
    slab: Slab<Meta>,
    queue: RadixQueue,
    /// The inflation value L: the H of the last evicted object.
    age: f64,
    bytes: u64,
}

struct Meta {
    freq: u64,
    cost: u64,
    place: Place,
}

impl Queued for Meta {
    fn place(&self) -> &Place {
        &self.place
    }
    fn place_mut(&mut self) -> &mut Place {
        &mut self.place
    }
}

impl Gdsf {
    pub fn new(capacity: u64) -> Self {
        Gdsf {
            capacity,
            map: IdMap::default(),
            slab: Slab::new(),
            queue: RadixQueue::new(),
            age: 0.0,
            bytes: 0,
        }
    }

    /// H = L + f × c / s, as a queue key. H is finite and ≥ 0, and the bit patterns of non-negative
    /// IEEE doubles sort like the numbers, so the bits serve as the integer priority.
    fn key_for(&self, slot: u32) -> u64 {
        let n = &self.slab[slot];
        let h = self.age + n.data.freq as f64 * n.data.cost as f64 / n.size.max(1) as f64;
        h.to_bits()
    }
}

impl Evictor for Gdsf {
    fn name(&self) -> &'static str {
        "gdsf"
    }

    fn admit(&mut self, id: ObjectId, size: u64, cost: u64) -> bool {
        self.remove(id);
        if size > self.capacity {
            return false;
        }
        let slot = self.slab.alloc(
            id,
            size,
            Meta {
                freq: 1,
                cost: cost.max(1),
                place: Place::NEW,
            },
        );
        let k = self.key_for(slot);
        self.queue.push(&mut self.slab, slot, k);
        self.map.insert(id, slot);
        self.bytes += size;
        true
    }

    fn touch(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.get(id) {
            let m = &mut self.slab[slot].data;
            m.freq = m.freq.saturating_add(1);
            let k = self.key_for(slot);
            self.queue.remove(&mut self.slab, slot);
            self.queue.push(&mut self.slab, slot, k);
        }
    }

    fn remove(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.remove(id) {
            self.queue.remove(&mut self.slab, slot);
            self.bytes -= self.slab[slot].size;
            self.slab.release(slot);
        }
    }

    fn victim(&mut self) -> Option<ObjectId> {
        let (k, slot) = self.queue.pop(&mut self.slab)?;
        self.age = f64::from_bits(k);
        let node = &self.slab[slot];
        let id = node.id;
        self.bytes -= node.size;
        self.map.remove(id);
        self.slab.release(slot);
        Some(id)
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// L = 0.
    /// admit A (size 100, cost 100): H = 0 + 1·100/100 = 1
    /// admit B (size 10, cost 100):  H = 10
    /// admit C (size 50, cost 100):  H = 2
    /// victim: A (1) → L = 1
    /// touch C: f = 2, H = 1 + 2·100/50 = 5
    /// admit D (size 200, cost 100): H = 1 + 0.5 = 1.5
    /// victim: D (1.5) → L = 1.5; victim: C (5) → L = 5
    /// admit E (size 100, cost 1000): H = 5 + 10 = 15
    /// victim: B (10), then E (15), then None.
    #[test]
    fn hand_worked_sequence() {
        let mut p = Gdsf::new(10_000);
        assert!(p.admit(b'A'.into(), 100, 100));
        assert!(p.admit(b'B'.into(), 10, 100));
        assert!(p.admit(b'C'.into(), 50, 100));
        assert_eq!(p.victim(), Some(b'A'.into()));
        assert_eq!(p.age, 1.0);
        p.touch(b'C'.into());
        assert!(p.admit(b'D'.into(), 200, 100));
        assert_eq!(p.victim(), Some(b'D'.into()));
        assert_eq!(p.age, 1.5);
        assert_eq!(p.victim(), Some(b'C'.into()));
        assert_eq!(p.age, 5.0);
        assert!(p.admit(b'E'.into(), 100, 1000));
        assert_eq!(p.victim(), Some(b'B'.into()));
        assert_eq!(p.victim(), Some(b'E'.into()));
        assert_eq!(p.age, 15.0);
        assert_eq!(p.victim(), None);
    }
}
