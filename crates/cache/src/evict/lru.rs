//! LRU: one list, a hit moves the object to the head, the victim is the tail (least recently
//! admitted or hit). Not size-aware.

use super::idmap::IdMap;
use super::policy::{Evictor, ObjectId};
use super::slab::{List, Slab};

pub(crate) struct Lru {
    capacity: u64,
    map: IdMap,
    slab: Slab<()>,
    list: List,
}

impl Lru {
    pub fn new(capacity: u64) -> Self {
        Lru {
            capacity,
            map: IdMap::default(),
            slab: Slab::new(),
            list: List::new(),
        }
    }
}

impl Evictor for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }

    fn admit(&mut self, id: ObjectId, size: u64, _cost: u64) -> bool {
        self.remove(id);
        if size > self.capacity {
            return false;
        }
        let slot = self.slab.alloc(id, size, ());
        self.list.push_front(&mut self.slab, slot);
        self.map.insert(id, slot);
        true
    }

    fn touch(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.get(id) {
            self.list.move_to_front(&mut self.slab, slot);
        }
    }

    fn remove(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.remove(id) {
            self.list.unlink(&mut self.slab, slot);
            self.slab.release(slot);
        }
    }

    fn victim(&mut self) -> Option<ObjectId> {
        let slot = self.list.pop_back(&mut self.slab)?;
        let id = self.slab[slot].id;
        self.map.remove(id);
        self.slab.release(slot);
        Some(id)
    }

    fn len(&self) -> usize {
        self.list.len
    }

    fn bytes(&self) -> u64 {
        self.list.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Admit 1, 2, 3 (list, head first: 3 2 1); touch 1 → 1 3 2; admit 4 → 4 1 3 2.
    /// Victims come off the tail: 2, then 3; touch 4 → 4 1; victims 1, 4; then nothing.
    #[test]
    fn evicts_least_recently_used_first() {
        let mut p = Lru::new(100);
        for id in 1..=3 {
            assert!(p.admit(id, 10, 1));
        }
        p.touch(1);
        assert!(p.admit(4, 10, 1));
        assert_eq!(p.victim(), Some(2));
        assert_eq!(p.victim(), Some(3));
        p.touch(4);
        assert_eq!(p.victim(), Some(1));
        assert_eq!(p.victim(), Some(4));
        assert_eq!(p.victim(), None);
    }
}
