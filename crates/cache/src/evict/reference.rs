//! The heap-based LFU-DA and GDSF as they were before the bucket and radix queues replaced the
//! indexed heap: kept, for tests only, as the reference the new structures must agree with victim
//! for victim.

use super::heap::IndexedHeap;
use super::idmap::IdMap;
use super::policy::{Evictor, ObjectId};
use super::slab::Slab;

/// LFU-DA over the indexed heap.
pub(crate) struct HeapLfuDa {
    capacity: u64,
    map: IdMap,
    /// Node data: the reference count.
    slab: Slab<u64>,
    heap: IndexedHeap,
    /// The cache age L: the key of the last evicted object.
    age: u64,
    bytes: u64,
}

impl HeapLfuDa {
    pub fn new(capacity: u64) -> Self {
        HeapLfuDa {
            capacity,
            map: IdMap::default(),
            slab: Slab::new(),
            heap: IndexedHeap::new(),
            age: 0,
            bytes: 0,
        }
    }

    fn key_for(&self, refs: u64) -> u64 {
        self.age.saturating_add(refs)
    }
}

impl Evictor for HeapLfuDa {
    fn name(&self) -> &'static str {
        "lfu-da"
    }

    fn admit(&mut self, id: ObjectId, size: u64, _cost: u64) -> bool {
        self.remove(id);
        if size > self.capacity {
            return false;
        }
        let slot = self.slab.alloc(id, size, 1);
        let k = self.key_for(1);
        self.heap.push(slot, k);
        self.map.insert(id, slot);
        self.bytes += size;
        true
    }

    fn touch(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.get(id) {
            let refs = self.slab[slot].data.saturating_add(1);
            self.slab[slot].data = refs;
            let k = self.key_for(refs);
            self.heap.rekey(slot, k);
        }
    }

    fn remove(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.remove(id) {
            self.heap.remove(slot);
            self.bytes -= self.slab[slot].size;
            self.slab.release(slot);
        }
    }

    fn victim(&mut self) -> Option<ObjectId> {
        let (k, slot) = self.heap.pop()?;
        self.age = k;
        let node = &self.slab[slot];
        let id = node.id;
        self.bytes -= node.size;
        self.map.remove(id);
        self.slab.release(slot);
        Some(id)
    }

    fn len(&self) -> usize {
        self.heap.len()
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// GDSF over the indexed heap.
pub(crate) struct HeapGdsf {
    capacity: u64,
    map: IdMap,
    slab: Slab<Meta>,
    heap: IndexedHeap,
    /// The inflation value L: the H of the last evicted object.
    age: f64,
    bytes: u64,
}

struct Meta {
    freq: u64,
    cost: u64,
}

impl HeapGdsf {
    pub fn new(capacity: u64) -> Self {
        HeapGdsf {
            capacity,
            map: IdMap::default(),
            slab: Slab::new(),
            heap: IndexedHeap::new(),
            age: 0.0,
            bytes: 0,
        }
    }

    /// H = L + f × c / s, as a heap key. H is finite and ≥ 0, and the bit patterns of non-negative
    /// IEEE doubles sort like the numbers, so the bits serve as the integer priority.
    fn key_for(&self, slot: u32) -> u64 {
        let n = &self.slab[slot];
        let h = self.age + n.data.freq as f64 * n.data.cost as f64 / n.size.max(1) as f64;
        h.to_bits()
    }
}

impl Evictor for HeapGdsf {
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
            },
        );
        let k = self.key_for(slot);
        self.heap.push(slot, k);
        self.map.insert(id, slot);
        self.bytes += size;
        true
    }

    fn touch(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.get(id) {
            let m = &mut self.slab[slot].data;
            m.freq = m.freq.saturating_add(1);
            let k = self.key_for(slot);
            self.heap.rekey(slot, k);
        }
    }

    fn remove(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.remove(id) {
            self.heap.remove(slot);
            self.bytes -= self.slab[slot].size;
            self.slab.release(slot);
        }
    }

    fn victim(&mut self) -> Option<ObjectId> {
        let (k, slot) = self.heap.pop()?;
        self.age = f64::from_bits(k);
        let node = &self.slab[slot];
        let id = node.id;
        self.bytes -= node.size;
        self.map.remove(id);
        self.slab.release(slot);
        Some(id)
    }

    fn len(&self) -> usize {
        self.heap.len()
    }

    fn bytes(&self) -> u64 {
        self.bytes
    }
}
