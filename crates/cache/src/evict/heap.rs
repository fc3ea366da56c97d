//! An indexed binary min-heap of slots, for the priority-key policies (LFU-DA, GDSF): push, pop,
//! re-key and remove any slot in O(log n), because each slot's position is tracked.
//!
//! A key is a `u128`: the policy's priority in the high 64 bits and a sequence number in the low
//! 64, so equal priorities are broken by age (the least recently keyed goes first) and every key
//! is distinct.

use super::slab::NIL;

pub(crate) struct IndexedHeap {
    /// (key, slot), a binary min-heap on key.
    items: Vec<(u128, u32)>,
    /// Slot → index in `items`, or NIL when the slot is not in the heap.
    pos: Vec<u32>,
}

/// Packs a priority and a tie-breaking sequence number into one heap key.
pub(crate) fn key(priority: u64, seq: u64) -> u128 {
    (u128::from(priority) << 64) | u128::from(seq)
}

/// The priority half of a key.
pub(crate) fn priority(key: u128) -> u64 {
    (key >> 64) as u64
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

    pub fn push(&mut self, slot: u32, key: u128) {
        let s = slot as usize;
        if s >= self.pos.len() {
            self.pos.resize(s + 1, NIL);
        }
        debug_assert_eq!(self.pos[s], NIL, "slot already in the heap");
        let i = self.items.len();
        self.items.push((key, slot));
        self.pos[s] = i as u32;
        self.sift_up(i);
    }

    /// The smallest key and its slot, removed from the heap.
    pub fn pop(&mut self) -> Option<(u128, u32)> {
        let top = *self.items.first()?;
        self.remove_at(0);
        Some(top)
    }

    /// Removes `slot` (which must be in the heap); returns its key.
    pub fn remove(&mut self, slot: u32) -> u128 {
        let i = self.pos[slot as usize] as usize;
        let key = self.items[i].0;
        self.remove_at(i);
        key
    }

    /// Gives `slot` (in the heap) a new key.
    pub fn rekey(&mut self, slot: u32, key: u128) {
        let i = self.pos[slot as usize] as usize;
        let old = self.items[i].0;
        self.items[i].0 = key;
        if key < old {
            self.sift_up(i);
        } else {
            self.sift_down(i);
        }
    }

    fn remove_at(&mut self, i: usize) {
        let last = self.items.len() - 1;
        self.items.swap(i, last);
        let (_, gone) = self.items.pop().expect("non-empty");
        self.pos[gone as usize] = NIL;
        if i < last {
            self.pos[self.items[i].1 as usize] = i as u32;
            // The element moved into `i` may belong above or below it.
            self.sift_down(i);
            self.sift_up(i);
        }
    }

    fn sift_up(&mut self, mut i: usize) {
        let item = self.items[i];
        while i > 0 {
            let parent = (i - 1) / 2;
            if self.items[parent].0 <= item.0 {
                break;
            }
            self.items[i] = self.items[parent];
            self.pos[self.items[i].1 as usize] = i as u32;
            i = parent;
        }
        self.items[i] = item;
        self.pos[item.1 as usize] = i as u32;
    }

    fn sift_down(&mut self, mut i: usize) {
        let n = self.items.len();
        let item = self.items[i];
        loop {
            let left = 2 * i + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.items[right].0 < self.items[left].0 {
                right
            } else {
                left
            };
            if self.items[child].0 >= item.0 {
                break;
            }
            self.items[i] = self.items[child];
            self.pos[self.items[i].1 as usize] = i as u32;
            i = child;
        }
        self.items[i] = item;
        self.pos[item.1 as usize] = i as u32;
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
            h.push(s, key(u64::from((100 + 97 * 7 - 7 * s) % 97), u64::from(s)));
        }
        h.rekey(3, key(0, 0));
        h.rekey(10, key(1000, 0));
        let k7 = h.remove(7);
        assert_eq!(priority(k7), (100 + 97 * 7 - 49) % 97);
        assert_eq!(h.len(), 49);
        let mut last = 0u128;
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
}
