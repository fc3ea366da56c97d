//! An indexed 4-ary min-heap of slots, for the priority-key policies (LFU-DA, GDSF): push, pop,
//! re-key and remove any slot in O(log n), because each slot's position is tracked. Four children
//! per node halve the depth of a binary heap, and the four sit next to each other in memory.
//!
//! A key is a policy's priority plus a sequence number, compared in that order, so equal
//! priorities are broken by age (the least recently keyed goes first) and every key is distinct.

use super::slab::NIL;

const ARITY: usize = 4;

/// Priority, then sequence number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Key {
    pub priority: u64,
    pub seq: u64,
}

#[derive(Clone, Copy)]
struct Item {
    key: Key,
    slot: u32,
}

pub(crate) struct IndexedHeap {
    items: Vec<Item>,
    /// Slot → index in `items`, or NIL when the slot is not in the heap.
    pos: Vec<u32>,
}

impl IndexedHeap {
    pub fn new() -> Self {
        IndexedHeap {
            items: Vec::new(),
            pos: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn push(&mut self, slot: u32, key: Key) {
        let s = slot as usize;
        if s >= self.pos.len() {
            self.pos.resize(s + 1, NIL);
        }
        debug_assert_eq!(self.pos[s], NIL, "slot already in the heap");
        let i = self.items.len();
        self.items.push(Item { key, slot });
        self.sift_up(i);
    }

    /// The smallest key and its slot, removed from the heap.
    pub fn pop(&mut self) -> Option<(Key, u32)> {
        let top = *self.items.first()?;
        self.remove_at(0);
        Some((top.key, top.slot))
    }

    /// Removes `slot` (which must be in the heap); returns its key.
    pub fn remove(&mut self, slot: u32) -> Key {
        let i = self.pos[slot as usize] as usize;
        let key = self.items[i].key;
        self.remove_at(i);
        key
    }

    /// Gives `slot` (in the heap) a new key.
    pub fn rekey(&mut self, slot: u32, key: Key) {
        let i = self.pos[slot as usize] as usize;
        let old = self.items[i].key;
        self.items[i].key = key;
        if key < old {
            self.sift_up(i);
        } else {
            self.sift_down(i);
        }
    }

    fn remove_at(&mut self, i: usize) {
        let gone = self.items.swap_remove(i);
        self.pos[gone.slot as usize] = NIL;
        if i < self.items.len() {
            // The element moved into `i` may belong above or below it.
            self.sift_down(i);
            self.sift_up(self.pos[self.items[i].slot as usize] as usize);
        }
    }

    fn place(&mut self, i: usize, item: Item) {
        self.items[i] = item;
        self.pos[item.slot as usize] = i as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        let item = self.items[i];
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.items[parent].key <= item.key {
                break;
            }
            self.place(i, self.items[parent]);
            i = parent;
        }
        self.place(i, item);
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.items.len();
        let item = self.items[i];
        loop {
            let first = ARITY * i + 1;
            if first >= n {
                break;
            }
            let mut child = first;
            for c in first + 1..(first + ARITY).min(n) {
                if self.items[c].key < self.items[child].key {
                    child = c;
                }
            }
            if self.items[child].key >= item.key {
                break;
            }
            self.place(i, self.items[child]);
            i = child;
        }
        self.place(i, item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_key_order_after_rekeys_and_removals() {
        let mut h = IndexedHeap::new();
        // slot s gets key 100 - 7s mod 97: a scrambled order.
        for s in 0..50u32 {
            h.push(
                s,
                Key {
                    priority: u64::from((100 + 97 * 7 - 7 * s) % 97),
                    seq: u64::from(s),
                },
            );
        }
        h.rekey(
            3,
            Key {
                priority: 0,
                seq: 0,
            },
        );
        h.rekey(
            10,
            Key {
                priority: 1000,
                seq: 0,
            },
        );
        let k7 = h.remove(7);
        assert_eq!(k7.priority, (100 + 97 * 7 - 49) % 97);
        assert_eq!(h.len(), 49);
        let mut last = Key {
            priority: 0,
            seq: 0,
        };
        let mut slots = Vec::new();
        while let Some((k, s)) = h.pop() {
            assert!(k >= last);
            last = k;
            slots.push(s);
        }
        assert_eq!(slots.len(), 49);
        assert_eq!(slots[0], 3);
        assert_eq!(*slots.last().unwrap(), 10);
        assert!(!slots.contains(&7));
    }

    /// Random pushes, re-keys, removals and pops against a sorted model.
    #[test]
    fn matches_a_sorted_model() {
        use std::collections::BTreeSet;
        let mut h = IndexedHeap::new();
        let mut model: BTreeSet<(Key, u32)> = BTreeSet::new();
        let mut keys = vec![None; 300];
        let mut x = 12345u64;
        for seq in 0..50_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let slot = (x % 300) as u32;
            let key = Key {
                priority: (x >> 20) % 50,
                seq,
            };
            match (keys[slot as usize], (x >> 40) % 4) {
                (None, _) => {
                    h.push(slot, key);
                    model.insert((key, slot));
                    keys[slot as usize] = Some(key);
                }
                (Some(old), 0 | 1) => {
                    h.rekey(slot, key);
                    model.remove(&(old, slot));
                    model.insert((key, slot));
                    keys[slot as usize] = Some(key);
                }
                (Some(old), 2) => {
                    assert_eq!(h.remove(slot), old);
                    model.remove(&(old, slot));
                    keys[slot as usize] = None;
                }
                (Some(_), _) => {
                    let (k, s) = h.pop().unwrap();
                    assert_eq!(Some((k, s)), model.pop_first());
                    keys[s as usize] = None;
                }
            }
            assert_eq!(h.len(), model.len());
        }
    }
}
