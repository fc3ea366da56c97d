//! LFU-DA, Least Frequently Used with Dynamic Aging, as Squid's `heap LFUDA`
//! (`src/repl/heap/store_heap_replacement.cc`, after Arlitt et al., HPL-1999-69).
//!
//! Each object has a key K = refcount + L, computed when it is admitted (refcount 1) and again on
//! every hit (with the L of that moment). L, the cache age, starts at 0 and becomes the key of each
//! evicted object; the smallest key is evicted. So an object that was popular long ago keeps its
//! old, small L inside its key and is eventually overtaken by objects keyed against a larger L.
//!
//! Departure from Squid: Squid breaks ties by subtracting a fraction that depends on the wall
//! clock (last reference time); this policy has no clock, so ties go to the object keyed earliest
//! (a sequence number), which is the same order without the time. Keys are integers, not doubles.
//! Not size-aware (Squid's LFUDA is not either).
//!
//! Because keys are integers that never fall below L, the queue is a ring of FIFOs indexed by key
//! (`bucket_queue`) rather than a heap: a hit or a miss is a few list operations, not a sift.

use super::bucket_queue::{BucketQueue, Keyed};
use super::idmap::IdMap;
use super::policy::{Evictor, ObjectId};
use super::slab::Slab;

pub(crate) struct LfuDa {
    capacity: u64,
    map: IdMap,
    slab: Slab<Meta>,
    queue: BucketQueue,
    /// The cache age L: the key of the last evicted object.
    age: u64,
    bytes: u64,
}

struct Meta {
    refs: u64,
    key: u64,
}

impl Keyed for Meta {
    fn key(&self) -> u64 {
        self.key
    }
    fn set_key(&mut self, key: u64) {
        self.key = key;
    }
}

impl LfuDa {
    pub fn new(capacity: u64) -> Self {
        LfuDa {
            capacity,
            map: IdMap::default(),
            slab: Slab::new(),
            queue: BucketQueue::new(),
            age: 0,
            bytes: 0,
        }
    }

    fn key_for(&self, refs: u64) -> u64 {
        self.age.saturating_add(refs)
    }
}

impl Evictor for LfuDa {
    fn name(&self) -> &'static str {
        "lfu-da"
    }

    fn admit(&mut self, id: ObjectId, size: u64, _cost: u64) -> bool {
        self.remove(id);
        if size > self.capacity {
            return false;
        }
        let slot = self.slab.alloc(id, size, Meta { refs: 1, key: 0 });
        let k = self.key_for(1);
        self.queue.push(&mut self.slab, slot, k);
        self.map.insert(id, slot);
        self.bytes += size;
        true
    }

    fn touch(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.get(id) {
            let refs = self.slab[slot].data.refs.saturating_add(1);
            self.slab[slot].data.refs = refs;
            let k = self.key_for(refs);
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
        self.age = k;
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

    /// L = 0. admit A, B, C: K = 1 each (in that order).
    /// touch A, A → refs 3, K_A = 0 + 3; touch B → refs 2, K_B = 2.
    /// victim: C (K 1, the smallest) → L = 1.
    /// admit D: K_D = 1 + 1 = 2, keyed after B.
    /// victim: B (K 2, keyed before D) → L = 2.
    /// admit E: K_E = 2 + 1 = 3, keyed after A.
    /// victim: D (K 2; L stays 2). victim: A (K 3, keyed before E) → L = 3. victim: E. None.
    #[test]
    fn hand_worked_sequence() {
        let mut p = LfuDa::new(1000);
        for id in [b'A', b'B', b'C'] {
            assert!(p.admit(id.into(), 10, 1));
        }
        p.touch(b'A'.into());
        p.touch(b'A'.into());
        p.touch(b'B'.into());
        assert_eq!(p.victim(), Some(b'C'.into()));
        assert_eq!(p.age, 1);
        assert!(p.admit(b'D'.into(), 10, 1));
        assert_eq!(p.victim(), Some(b'B'.into()));
        assert_eq!(p.age, 2);
        assert!(p.admit(b'E'.into(), 10, 1));
        assert_eq!(p.victim(), Some(b'D'.into()));
        assert_eq!(p.age, 2);
        assert_eq!(p.victim(), Some(b'A'.into()));
        assert_eq!(p.age, 3);
        assert_eq!(p.victim(), Some(b'E'.into()));
        assert_eq!(p.victim(), None);
        assert_eq!((p.len(), p.bytes()), (0, 0));
    }
}
