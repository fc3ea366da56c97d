//! The id → slot map every policy looks objects up in: open addressing with linear probing over
//! 16-byte (id, slot) entries, kept at most half full, deletion by backward shift (no tombstones).
//!
//! A lookup usually touches one cache line — the entry itself — where a SIMD-group table
//! (`std`'s `HashMap`) touches two (the control bytes, then the entry). At 100 k objects the map
//! does not fit in L2, so that line is most of a lookup's cost.

use super::policy::ObjectId;
use super::slab::NIL;

#[derive(Clone, Copy)]
struct Entry {
    id: ObjectId,
    /// NIL marks an empty entry (any id is valid, so emptiness lives here).
    slot: u32,
}

const EMPTY: Entry = Entry { id: 0, slot: NIL };
const MIN_CAPACITY: usize = 16;

pub(crate) struct IdMap {
    entries: Vec<Entry>,
    /// `entries.len() - 1`; the length is a power of two.
    mask: usize,
    len: usize,
}

/// One 64×64→128-bit multiply folded to 64 bits: every input bit reaches the low bits used as the
/// index. Ids come from the store, not from clients, so no keyed hash is needed.
#[inline]
fn hash(id: ObjectId) -> usize {
    let p = u128::from(id) * 0x9E37_79B9_7F4A_7C15u128;
    ((p as u64) ^ ((p >> 64) as u64)) as usize
}

impl Default for IdMap {
    fn default() -> Self {
        IdMap {
            entries: vec![EMPTY; MIN_CAPACITY],
            mask: MIN_CAPACITY - 1,
            len: 0,
        }
    }
}

impl IdMap {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn get(&self, id: ObjectId) -> Option<u32> {
        let mut i = hash(id) & self.mask;
        loop {
            let e = self.entries[i];
            if e.slot == NIL {
                return None;
            }
            if e.id == id {
                return Some(e.slot);
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Maps `id` to `slot`; returns the slot it had.
    pub fn insert(&mut self, id: ObjectId, slot: u32) -> Option<u32> {
        debug_assert_ne!(slot, NIL);
        if 2 * (self.len + 1) > self.entries.len() {
            self.grow();
        }
        let mut i = hash(id) & self.mask;
        loop {
            let e = &mut self.entries[i];
            if e.slot == NIL {
                *e = Entry { id, slot };
                self.len += 1;
                return None;
            }
            if e.id == id {
                return Some(std::mem::replace(&mut e.slot, slot));
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Unmaps `id`; returns its slot.
    pub fn remove(&mut self, id: ObjectId) -> Option<u32> {
        let mut i = hash(id) & self.mask;
        loop {
            let e = self.entries[i];
            if e.slot == NIL {
                return None;
            }
            if e.id == id {
                break;
            }
            i = (i + 1) & self.mask;
        }
        let slot = self.entries[i].slot;
        // Backward shift: pull later entries of the run into the hole when their home allows it.
        let mut hole = i;
        let mut j = i;
        loop {
            j = (j + 1) & self.mask;
            let e = self.entries[j];
            if e.slot == NIL {
                break;
            }
            let home = hash(e.id) & self.mask;
            // `e` may move to `hole` unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.entries[hole] = e;
                hole = j;
            }
        }
        self.entries[hole] = EMPTY;
        self.len -= 1;
        Some(slot)
    }

    fn grow(&mut self) {
        let capacity = (self.entries.len() * 2).max(MIN_CAPACITY);
        let old = std::mem::replace(&mut self.entries, vec![EMPTY; capacity]);
        self.mask = capacity - 1;
        for e in old.into_iter().filter(|e| e.slot != NIL) {
            let mut i = hash(e.id) & self.mask;
            while self.entries[i].slot != NIL {
                i = (i + 1) & self.mask;
            }
            self.entries[i] = e;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Random inserts and removals (a small id range, so runs collide and wrap) against `HashMap`.
    #[test]
    fn matches_a_hash_map() {
        let mut m = IdMap::default();
        let mut model = HashMap::new();
        let mut x = 99u64;
        for step in 0..200_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let id = (x >> 3) % 3000;
            match (x >> 50) % 3 {
                0 => assert_eq!(m.remove(id), model.remove(&id), "step {step}"),
                _ => assert_eq!(m.insert(id, step), model.insert(id, step), "step {step}"),
            }
            assert_eq!(m.len(), model.len());
            let probe = (x >> 20) % 3000;
            assert_eq!(m.get(probe), model.get(&probe).copied());
        }
        for (&id, &slot) in &model {
            assert_eq!(m.get(id), Some(slot));
        }
    }

    #[test]
    fn extreme_ids_work() {
        let mut m = IdMap::default();
        for id in [0, 1, u64::MAX, u64::MAX - 1, 1 << 63] {
            assert_eq!(m.insert(id, 7), None);
        }
        assert_eq!(m.get(u64::MAX), Some(7));
        assert_eq!(m.remove(0), Some(7));
        assert_eq!(m.get(0), None);
        assert_eq!(m.len(), 4);
    }
}
