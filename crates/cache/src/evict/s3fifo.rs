//! S3-FIFO (Yang, Zhang, Qiu, Yue, Rashmi: "FIFO queues are all you need for cache eviction",
//! SOSP'23), following the paper's Algorithm 1 — the original variant, as in the authors'
//! `S3FIFOv0.c` in libCacheSim ("the original S3FIFO implementation used in" the paper), not the
//! later `S3FIFO.c` that inserts into the main queue while the cache is still filling.
//!
//! - Three FIFO queues: small S, main M, ghost G (ids only). Objects carry a 2-bit frequency:
//!   a hit sets freq = min(freq + 1, 3).
//! - A missed object is inserted at the head of M if its id is in G (and leaves G), else at the
//!   head of S; freq = 0.
//! - To evict: if S holds at least 10 % of the capacity in bytes, `evictS`, else `evictM`.
//! - `evictS`: take S's tail t. If t.freq > 1 (move-to-main threshold 2, as in Algorithm 1 and
//!   `S3FIFOv0.c`), move it to M's head with freq 0 and, if M is now over its 90 % share,
//!   `evictM`; otherwise t goes to G and is the victim. Repeat until something is evicted.
//!   (Summaries of the paper, and several ports, promote on any hit, freq > 0; the algorithm and
//!   the authors' code need two hits in S. `MOVE_TO_MAIN_THRESHOLD` is the one place to change.)
//! - `evictM`: take M's tail t. If t.freq > 0, reinsert it at M's head with freq − 1; otherwise it
//!   is the victim.
//! - G remembers ids whose recorded sizes sum to at most M's share (90 % of the capacity; the
//!   reference code's ghost-size-ratio 0.90), i.e. "as many entries as M holds" in the paper's
//!   words when the ghosts are sized like M's objects; the oldest ghosts are dropped first.
//!
//! Mapping onto `admit` + `victim`: Algorithm 1 evicts *before* inserting the new object x, so x
//! takes no part in those evictions. Here the store admits x first and then calls `victim()`; until
//! the next `admit`, or `touch`/`remove` of a tracked id, x is left out of the "S ≥ 10 %" test and skipped by the
//! scans, and is chosen only if nothing else is tracked. Algorithm 1's `evictS` may call `evictM`
//! and then still evict from S in the same call; here the object `evictM` evicted is returned and
//! the store's next `victim()` call (if it still needs room) carries on, so no more is evicted
//! than the budget needs. Objects of any size up to the capacity are admitted (`S3FIFOv0.c`
//! refuses objects as large as S; Algorithm 1 does not).

use super::idmap::IdMap;
use super::policy::{Evictor, ObjectId};
use super::slab::{List, Slab, NIL};

/// Frequency needed in S to be moved to M at eviction time (Algorithm 1: `t.freq > 1`).
const MOVE_TO_MAIN_THRESHOLD: u8 = 2;
/// 2-bit frequency.
const FREQ_CAP: u8 = 3;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Queue {
    Small,
    Main,
    Ghost,
}

struct Meta {
    queue: Queue,
    freq: u8,
}

pub(crate) struct S3Fifo {
    capacity: u64,
    /// M's share: capacity − capacity / 10. Also the ghost's byte budget.
    main_share: u64,
    map: IdMap,
    slab: Slab<Meta>,
    small: List,
    main: List,
    ghost: List,
    /// The object admitted last, while the store is still making room for it; NIL otherwise.
    incoming: u32,
}

impl S3Fifo {
    pub fn new(capacity: u64) -> Self {
        S3Fifo {
            capacity,
            main_share: capacity - capacity / 10,
            map: IdMap::default(),
            slab: Slab::new(),
            small: List::new(),
            main: List::new(),
            ghost: List::new(),
            incoming: NIL,
        }
    }

    /// Algorithm 1's `S.size ≥ 0.1 · cache size`, leaving out the object being inserted.
    fn small_over_share(&self) -> bool {
        let (mut len, mut bytes) = (self.small.len, self.small.bytes);
        if self.incoming != NIL && self.slab[self.incoming].data.queue == Queue::Small {
            len -= 1;
            bytes -= self.slab[self.incoming].size;
        }
        len > 0 && u128::from(bytes) * 10 >= u128::from(self.capacity)
    }

    /// Moves the (unlinked) `slot` to the ghost and trims the ghost to its budget.
    fn send_to_ghost(&mut self, slot: u32) {
        self.slab[slot].data = Meta {
            queue: Queue::Ghost,
            freq: 0,
        };
        self.ghost.push_front(&mut self.slab, slot);
        while self.ghost.bytes > self.main_share {
            let old = self
                .ghost
                .pop_back(&mut self.slab)
                .expect("ghost is not empty");
            self.map.remove(self.slab[old].id);
            self.slab.release(old);
        }
    }

    fn free(&mut self, slot: u32) -> ObjectId {
        let id = self.slab[slot].id;
        self.map.remove(id);
        self.slab.release(slot);
        id
    }

    fn evict_small(&mut self) -> Option<ObjectId> {
        loop {
            let t = self.small.tail;
            if t == NIL || t == self.incoming {
                return None;
            }
            self.small.unlink(&mut self.slab, t);
            if self.slab[t].data.freq >= MOVE_TO_MAIN_THRESHOLD {
                self.slab[t].data = Meta {
                    queue: Queue::Main,
                    freq: 0,
                };
                self.main.push_front(&mut self.slab, t);
                if self.main.bytes > self.main_share {
                    if let Some(id) = self.evict_main() {
                        return Some(id);
                    }
                }
            } else {
                let id = self.slab[t].id;
                self.send_to_ghost(t);
                return Some(id);
            }
        }
    }

    fn evict_main(&mut self) -> Option<ObjectId> {
        loop {
            let t = self.main.tail;
            if t == NIL || (t == self.incoming && self.main.len == 1) {
                return None;
            }
            let meta = &mut self.slab[t].data;
            if t == self.incoming {
                // Not in M yet, as far as Algorithm 1 is concerned: step over it.
            } else if meta.freq > 0 {
                meta.freq -= 1;
            } else {
                self.main.unlink(&mut self.slab, t);
                return Some(self.free(t));
            }
            self.main.move_to_front(&mut self.slab, t);
        }
    }

    /// The last resort: the object being inserted is all that is tracked.
    fn evict_incoming(&mut self) -> Option<ObjectId> {
        let t = std::mem::replace(&mut self.incoming, NIL);
        if t == NIL {
            return None;
        }
        let id = self.slab[t].id;
        if self.slab[t].data.queue == Queue::Small {
            self.small.unlink(&mut self.slab, t);
            self.send_to_ghost(t);
        } else {
            self.main.unlink(&mut self.slab, t);
            self.free(t);
        }
        Some(id)
    }

    /// Unlinks `slot` from whichever queue holds it.
    fn unlink(&mut self, slot: u32) {
        match self.slab[slot].data.queue {
            Queue::Small => self.small.unlink(&mut self.slab, slot),
            Queue::Main => self.main.unlink(&mut self.slab, slot),
            Queue::Ghost => self.ghost.unlink(&mut self.slab, slot),
        }
    }
}

impl Evictor for S3Fifo {
    fn name(&self) -> &'static str {
        "s3-fifo"
    }

    fn admit(&mut self, id: ObjectId, size: u64, _cost: u64) -> bool {
        self.incoming = NIL;
        let found = self.map.get(id);
        if let Some(slot) = found {
            self.unlink(slot);
            if size > self.capacity {
                self.free(slot);
                return false;
            }
        } else if size > self.capacity {
            return false;
        }
        let slot = match found {
            Some(slot) => {
                // A ghost hit goes to M; re-admitting a tracked object is remove + admit (to S).
                let n = &mut self.slab[slot];
                let queue = if n.data.queue == Queue::Ghost {
                    Queue::Main
                } else {
                    Queue::Small
                };
                n.size = size;
                n.data = Meta { queue, freq: 0 };
                slot
            }
            None => {
                let slot = self.slab.alloc(
                    id,
                    size,
                    Meta {
                        queue: Queue::Small,
                        freq: 0,
                    },
                );
                self.map.insert(id, slot);
                slot
            }
        };
        match self.slab[slot].data.queue {
            Queue::Main => self.main.push_front(&mut self.slab, slot),
            _ => self.small.push_front(&mut self.slab, slot),
        }
        self.incoming = slot;
        true
    }

    fn touch(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.get(id) {
            let meta = &mut self.slab[slot].data;
            if meta.queue != Queue::Ghost {
                meta.freq = (meta.freq + 1).min(FREQ_CAP);
                self.incoming = NIL;
            }
        }
    }

    fn remove(&mut self, id: ObjectId) {
        if let Some(slot) = self.map.get(id) {
            self.incoming = NIL;
            self.unlink(slot);
            self.free(slot);
        }
    }

    fn victim(&mut self) -> Option<ObjectId> {
        if self.small.len + self.main.len == 0 {
            return None;
        }
        if self.small_over_share() {
            if let Some(id) = self.evict_small() {
                return Some(id);
            }
        }
        self.evict_main()
            .or_else(|| self.evict_small())
            .or_else(|| self.evict_incoming())
    }

    fn len(&self) -> usize {
        self.small.len + self.main.len
    }

    fn bytes(&self) -> u64 {
        self.small.bytes + self.main.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue_of(p: &S3Fifo, id: ObjectId) -> Option<Queue> {
        p.map.get(id).map(|s| p.slab[s].data.queue)
    }

    // Capacity 100: S's share is 10 bytes, M's 90. Every object is 5 bytes. Queues head → tail.
    //
    //  1. admit A B C D                      S: D C B A
    //  2. touch A, A (freq 2), B (1), D (1)
    //  3. victim: S = 20 ≥ 10 → evictS: A has freq 2 > 1 → M (freq 0); B has freq 1 → G. → B
    //                                        S: D C   M: A   G: B
    //  4. victim: S = 10 ≥ 10 → evictS: C (freq 0) → G. → C      S: D   G: C B
    //  5. admit B: in G → M's head.          M: B A   G: C
    //  6. victim: S = 5 < 10 → evictM: A (freq 0). → A            M: B
    //  7. admit C: in G → M.                 M: C B   G: (empty)
    //     touch B ×4 → freq 3 (capped)
    //  8. admit E, F                         S: F E D
    //  9. victim: S without F (being inserted) = 10 ≥ 10 → evictS: D, freq 1 → G. → D
    // 10. victim: S without F = 5 < 10 → evictM: B freq 3 → reinserted with 2 (M: B C);
    //     C freq 0. → C
    // 11. victim: evictM: B 2 → 1 → 0 (reinserted each time), then evicted. → B
    // 12. victim: M is empty → from S: E (freq 0) → G. → E
    // 13. victim: only F, the object being inserted, is left → G. → F
    // 14. victim: None.                      G: F E D
    #[test]
    fn hand_worked_sequence() {
        let id = |c: u8| ObjectId::from(c);
        let mut p = S3Fifo::new(100);
        for c in b"ABCD" {
            assert!(p.admit(id(*c), 5, 1));
        }
        for c in b"AABD" {
            p.touch(id(*c));
        }
        assert_eq!(p.victim(), Some(id(b'B')));
        assert_eq!(queue_of(&p, id(b'A')), Some(Queue::Main));
        assert_eq!(queue_of(&p, id(b'B')), Some(Queue::Ghost));
        assert_eq!(p.victim(), Some(id(b'C')));
        assert_eq!((p.len(), p.bytes()), (2, 10));
        assert!(p.admit(id(b'B'), 5, 1));
        assert_eq!(queue_of(&p, id(b'B')), Some(Queue::Main));
        assert_eq!(p.victim(), Some(id(b'A')));
        assert_eq!(
            queue_of(&p, id(b'A')),
            None,
            "evicted from M: not remembered"
        );
        assert!(p.admit(id(b'C'), 5, 1));
        assert_eq!(queue_of(&p, id(b'C')), Some(Queue::Main));
        for _ in 0..4 {
            p.touch(id(b'B'));
        }
        assert!(p.admit(id(b'E'), 5, 1));
        assert!(p.admit(id(b'F'), 5, 1));
        assert_eq!((p.len(), p.bytes()), (5, 25));
        assert_eq!(p.victim(), Some(id(b'D')));
        assert_eq!(p.victim(), Some(id(b'C')));
        assert_eq!(p.victim(), Some(id(b'B')));
        assert_eq!(p.victim(), Some(id(b'E')));
        assert_eq!(p.victim(), Some(id(b'F')));
        assert_eq!(p.victim(), None);
        assert_eq!((p.len(), p.bytes(), p.ghost.len), (0, 0, 3));
        for c in b"DEF" {
            assert_eq!(queue_of(&p, id(*c)), Some(Queue::Ghost));
        }
    }

    /// The ghost keeps ids whose sizes sum to at most M's share (90 of 100 bytes here).
    #[test]
    fn ghost_is_bounded_by_mains_share() {
        let mut p = S3Fifo::new(100);
        for i in 0..100 {
            assert!(p.admit(i, 10, 1));
            while p.bytes() > 100 {
                p.victim();
            }
        }
        assert_eq!(p.ghost.bytes, 90);
        assert_eq!(p.ghost.len, 9);
        assert_eq!(p.map.len(), p.len() + p.ghost.len);
    }
}
