//! SIEVE (Zhang et al., "SIEVE is Simpler than LRU", NSDI'24; `Sieve.c` in libCacheSim).
//!
//! One FIFO queue, new objects at the head, a visited bit per object set by a hit, and a hand.
//! To evict, the hand starts where it stopped last time (the tail at first) and moves towards the
//! head, clearing visited bits as it passes, until it finds an unvisited object: that one is
//! evicted and the hand rests on its neighbour towards the head. Past the head it wraps to the
//! tail. Objects are never moved, so survivors stay in insertion order. As in libCacheSim, the
//! removal of the object under the hand (by `remove`) moves the hand to that neighbour too.
//! No departures; not size-aware (nor is SIEVE).

use super::idmap::IdMap;
use super::policy::{Evictor, ObjectId};
use super::slab::{List, Slab, NIL};

pub(crate) struct Sieve {
    capacity: u64,
    map: IdMap,
    /// Node data: the visited bit.
    slab: Slab<bool>,
    queue: List,
    /// Where the next search starts; NIL means the tail.
    hand: u32,
}

impl Sieve {
    pub fn new(capacity: u64) -> Self {
        Sieve {
            capacity,
            map: IdMap::default(),
            slab: Slab::new(),
            queue: List::new(),
            hand: NIL,
        }
    }

    fn forget(&mut self, slot: u32) {
        if self.hand == slot {
            self.hand = self.slab[slot].prev;
        }
        self.queue.unlink(&mut self.slab, slot);
        self.map.remove(self.slab[slot].id);
        self.slab.release(slot);
    }
}

impl Evictor for Sieve {
    fn name(&self) -> &'static str {
        "sieve"
    }

    fn admit(&mut self, id: ObjectId, size: u64, _cost: u64) -> bool {
        self.remove(id);
        if size > self.capacity {
            return false;
        }
        let slot = self.slab.alloc(id, size, false);
        self.queue.push_front(&mut self.slab, slot);
        self.map.insert(id, slot);
        true
    }

    fn touch(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.get(id) {
            self.slab[slot].data = true;
        }
    }

    fn remove(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.get(id) {
            self.forget(slot);
        }
    }

    fn victim(&mut self) -> Option<ObjectId> {
        if self.queue.len == 0 {
            return None;
        }
        let mut slot = if self.hand == NIL {
            self.queue.tail
        } else {
            self.hand
        };
        while self.slab[slot].data {
            self.slab[slot].data = false;
            let prev = self.slab[slot].prev;
            slot = if prev == NIL { self.queue.tail } else { prev };
        }
        let id = self.slab[slot].id;
        self.hand = slot; // `forget` moves it on to the neighbour towards the head
        self.forget(slot);
        Some(id)
    }

    fn len(&self) -> usize {
        self.queue.len
    }

    fn bytes(&self) -> u64 {
        self.queue.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Queue shown head → tail, `*` = visited, `^` = the hand.
    /// admit A B C D E            E D C B A          (hand at the tail)
    /// touch A, C                 E D C* B A*
    /// victim: A* cleared, B unvisited → evict B; hand → C.      E D C* A
    /// admit F                    F E D C*^ A
    /// touch A
    /// victim: from C: C* cleared, D unvisited → evict D; hand → E.   F E^ C A*
    /// victim: E unvisited → evict E; hand → F.                 F^ C A*
    /// touch F
    /// victim: F* cleared, past the head → wrap to the tail: A* cleared, C → evict C; hand → F.
    /// victim: F (cleared above) → evict F; hand → past the head (tail next time).
    /// victim: A. Then None.
    #[test]
    fn hand_worked_sequence() {
        let id = |c: u8| ObjectId::from(c);
        let mut p = Sieve::new(1000);
        for c in b"ABCDE" {
            assert!(p.admit(id(*c), 1, 1));
        }
        p.touch(id(b'A'));
        p.touch(id(b'C'));
        assert_eq!(p.victim(), Some(id(b'B')));
        assert!(p.admit(id(b'F'), 1, 1));
        p.touch(id(b'A'));
        assert_eq!(p.victim(), Some(id(b'D')));
        assert_eq!(p.victim(), Some(id(b'E')));
        p.touch(id(b'F'));
        assert_eq!(p.victim(), Some(id(b'C')));
        assert_eq!(p.victim(), Some(id(b'F')));
        assert_eq!(p.victim(), Some(id(b'A')));
        assert_eq!(p.victim(), None);
    }

    /// Removing the object under the hand moves the hand to its neighbour towards the head.
    /// E D C B A, touch A → victim B (A* cleared), hand at C. remove C → hand at D.
    /// touch E. victim: D. (Had the hand restarted at the tail, A would go.)
    #[test]
    fn remove_under_the_hand_moves_it_on() {
        let id = |c: u8| ObjectId::from(c);
        let mut p = Sieve::new(1000);
        for c in b"ABCDE" {
            assert!(p.admit(id(*c), 1, 1));
        }
        p.touch(id(b'A'));
        assert_eq!(p.victim(), Some(id(b'B')));
        p.remove(id(b'C'));
        p.touch(id(b'E'));
        assert_eq!(p.victim(), Some(id(b'D')));
    }
}
