//! An indexed 4-ary min-heap of slots, for the priority-key policies (LFU-DA, GDSF): push, pop,
//! re-key and remove any slot in O(log n), because each slot's position is tracked. Four children
//! per node halve the depth of a binary heap, and with 16-byte items they share a cache line or two.
//!
//! Items are ordered by the policy's priority, then by when they were (re)keyed: among equal
//! priorities the least recently keyed comes first. That order is a 32-bit sequence number; when
//! it runs out, the items are renumbered in order (sorting the array, which leaves a valid heap),
//! once per 2^32 keyings.

use super::slab::NIL;

const ARITY: usize = 4;

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Order {
    priority: u64,
    seq: u32,
}

#[derive(Clone, Copy)]
struct Item {
    order: Order,
    slot: u32,
}

pub(crate) struct IndexedHeap {
    items: Vec<Item>,
    /// Slot → index in `items`, or NIL when the slot is not in the heap.
    pos: Vec<u32>,
    next_seq: u32,
    /// The sequence number that triggers renumbering (lowered by tests).
    seq_limit: u32,
}

impl IndexedHeap {
    pub fn new() -> Self {
        IndexedHeap {
            items: Vec::new(),
            pos: Vec::new(),
            next_seq: 0,
            seq_limit: u32::MAX,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn push(&mut self, slot: u32, priority: u64) {
        let s = slot as usize;
        if s >= self.pos.len() {
            self.pos.resize(s + 1, NIL);
        }
        debug_assert_eq!(self.pos[s], NIL, "slot already in the heap");
        let order = self.order(priority);
        let i = self.items.len();
        self.items.push(Item { order, slot });
        self.sift_up(i);
    }

    /// The smallest item's priority and slot, removed from the heap.
    pub fn pop(&mut self) -> Option<(u64, u32)> {
        let top = *self.items.first()?;
        self.remove_at(0);
        Some((top.order.priority, top.slot))
    }

    /// Removes `slot` (which must be in the heap).
    pub fn remove(&mut self, slot: u32) {
        let i = self.pos[slot as usize] as usize;
        self.remove_at(i);
    }

    /// Gives `slot` (in the heap) a new priority; it now counts as the most recently keyed.
    pub fn rekey(&mut self, slot: u32, priority: u64) {
        let order = self.order(priority);
        let i = self.pos[slot as usize] as usize;
        let old = self.items[i].order;
        self.items[i].order = order;
        if order < old {
            self.sift_up(i);
        } else {
            self.sift_down(i);
        }
    }

    fn order(&mut self, priority: u64) -> Order {
        if self.next_seq >= self.seq_limit {
            self.renumber();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        Order { priority, seq }
    }

    /// Renumbers the sequence from 0 in the current order. A sorted array is a valid heap.
    fn renumber(&mut self) {
        self.items.sort_unstable_by_key(|item| item.order);
        for (i, item) in self.items.iter_mut().enumerate() {
            item.order.seq = i as u32;
            self.pos[item.slot as usize] = i as u32;
        }
        self.next_seq = self.items.len() as u32;
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
            if self.items[parent].order <= item.order {
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
                if self.items[c].order < self.items[child].order {
                    child = c;
                }
            }
            if self.items[child].order >= item.order {
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
    fn equal_priorities_leave_in_keying_order() {
        let mut h = IndexedHeap::new();
        for s in 0..10 {
            h.push(s, 5);
        }
        h.rekey(0, 5);
        h.rekey(3, 1);
        h.remove(7);
        let order: Vec<u32> = std::iter::from_fn(|| h.pop().map(|(_, s)| s)).collect();
        assert_eq!(order, [3, 1, 2, 4, 5, 6, 8, 9, 0]);
    }

    /// Random pushes, re-keys, removals and pops against a sorted model of (priority, keying
    /// time), with renumbering forced every 1000 keyings.
    #[test]
    fn matches_a_sorted_model_across_renumbering() {
        use std::collections::BTreeSet;
        let mut h = IndexedHeap::new();
        h.seq_limit = 1000;
        let mut model: BTreeSet<(u64, u64, u32)> = BTreeSet::new();
        let mut keys: Vec<Option<(u64, u64)>> = vec![None; 300];
        let mut x = 12345u64;
        for time in 0..50_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let slot = (x % 300) as u32;
            let priority = (x >> 20) % 50;
            match (keys[slot as usize], (x >> 40) % 4) {
                (None, _) => {
                    h.push(slot, priority);
                    model.insert((priority, time, slot));
                    keys[slot as usize] = Some((priority, time));
                }
                (Some((p, t)), 0 | 1) => {
                    h.rekey(slot, priority);
                    model.remove(&(p, t, slot));
                    model.insert((priority, time, slot));
                    keys[slot as usize] = Some((priority, time));
                }
                (Some((p, t)), 2) => {
                    h.remove(slot);
                    model.remove(&(p, t, slot));
                    keys[slot as usize] = None;
                }
                (Some(_), _) => {
                    let (p, s) = h.pop().unwrap();
                    let (mp, _, ms) = model.pop_first().unwrap();
                    assert_eq!((p, s), (mp, ms), "at {time}");
                    keys[s as usize] = None;
                }
            }
            assert_eq!(h.len(), model.len());
        }
    }
}
