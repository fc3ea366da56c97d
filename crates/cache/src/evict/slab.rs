//! The storage every policy shares: slab-allocated nodes addressed by `u32` slots, and intrusive
//! doubly linked lists threaded through them. (The id → slot map is in `idmap`.)
//!
//! Lists run from `head` (newest: just inserted, or most recently used) to `tail` (oldest); `next`
//! points towards the tail and `prev` towards the head. A node is in at most one list at a time.

use std::ops::{Index, IndexMut};

use super::policy::ObjectId;

/// "No slot": the end of a list, or an empty hand/marker.
pub(crate) const NIL: u32 = u32::MAX;

/// One tracked (or remembered) object.
pub(crate) struct Node<T> {
    pub id: ObjectId,
    pub size: u64,
    pub prev: u32,
    pub next: u32,
    /// The policy's own fields.
    pub data: T,
}

/// Nodes in one `Vec`, freed slots reused: no allocation per object once the slab has grown.
pub(crate) struct Slab<T> {
    nodes: Vec<Node<T>>,
    free: Vec<u32>,
}

impl<T> Slab<T> {
    pub fn new() -> Self {
        Slab {
            nodes: Vec::new(),
            free: Vec::new(),
        }
    }

    pub fn alloc(&mut self, id: ObjectId, size: u64, data: T) -> u32 {
        let node = Node {
            id,
            size,
            prev: NIL,
            next: NIL,
            data,
        };
        match self.free.pop() {
            Some(slot) => {
                self.nodes[slot as usize] = node;
                slot
            }
            None => {
                let slot = u32::try_from(self.nodes.len()).expect("fewer than 2^32 - 1 objects");
                assert!(slot != NIL, "fewer than 2^32 - 1 objects");
                self.nodes.push(node);
                slot
            }
        }
    }

    /// Returns the slot for reuse; the caller has unlinked it and dropped it from the map.
    pub fn release(&mut self, slot: u32) {
        self.free.push(slot);
    }
}

impl<T> Index<u32> for Slab<T> {
    type Output = Node<T>;
    fn index(&self, slot: u32) -> &Node<T> {
        &self.nodes[slot as usize]
    }
}

impl<T> IndexMut<u32> for Slab<T> {
    fn index_mut(&mut self, slot: u32) -> &mut Node<T> {
        &mut self.nodes[slot as usize]
    }
}

/// An intrusive doubly linked list over a [`Slab`], with its length and byte total.
#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    pub head: u32,
    pub tail: u32,
    pub len: usize,
    pub bytes: u64,
}

impl List {
    pub const fn new() -> Self {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
            bytes: 0,
        }
    }

    /// Links `slot` (not in any list) in as the new head.
    pub fn push_front<T>(&mut self, slab: &mut Slab<T>, slot: u32) {
        let old = self.head;
        {
            let n = &mut slab[slot];
            n.prev = NIL;
            n.next = old;
            self.bytes += n.size;
        }
        if old == NIL {
            self.tail = slot;
        } else {
            slab[old].prev = slot;
        }
        self.head = slot;
        self.len += 1;
    }

    /// Unlinks `slot`, which must be in this list.
    pub fn unlink<T>(&mut self, slab: &mut Slab<T>, slot: u32) {
        let (prev, next, size) = {
            let n = &mut slab[slot];
            let r = (n.prev, n.next, n.size);
            n.prev = NIL;
            n.next = NIL;
            r
        };
        if prev == NIL {
            self.head = next;
        } else {
            slab[prev].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            slab[next].prev = prev;
        }
        self.len -= 1;
        self.bytes -= size;
    }

    /// Unlinks and returns the oldest node.
    pub fn pop_back<T>(&mut self, slab: &mut Slab<T>) -> Option<u32> {
        let slot = self.tail;
        if slot == NIL {
            return None;
        }
        self.unlink(slab, slot);
        Some(slot)
    }

    /// Makes `slot` (in this list) the head.
    pub fn move_to_front<T>(&mut self, slab: &mut Slab<T>, slot: u32) {
        if self.head != slot {
            self.unlink(slab, slot);
            self.push_front(slab, slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(list: &List, slab: &Slab<()>) -> Vec<ObjectId> {
        let mut out = Vec::new();
        let mut s = list.head;
        while s != NIL {
            out.push(slab[s].id);
            s = slab[s].next;
        }
        out
    }

    #[test]
    fn list_links_both_ways_and_counts_bytes() {
        let mut slab = Slab::new();
        let mut l = List::new();
        let a = slab.alloc(1, 10, ());
        let b = slab.alloc(2, 20, ());
        let c = slab.alloc(3, 30, ());
        for s in [a, b, c] {
            l.push_front(&mut slab, s);
        }
        assert_eq!(ids(&l, &slab), [3, 2, 1]);
        assert_eq!((l.len, l.bytes), (3, 60));
        l.move_to_front(&mut slab, a);
        assert_eq!(ids(&l, &slab), [1, 3, 2]);
        l.unlink(&mut slab, c);
        assert_eq!(ids(&l, &slab), [1, 2]);
        assert_eq!(l.pop_back(&mut slab), Some(b));
        assert_eq!(l.pop_back(&mut slab), Some(a));
        assert_eq!(l.pop_back(&mut slab), None);
        assert_eq!((l.len, l.bytes, l.head, l.tail), (0, 0, NIL, NIL));
        slab.release(b);
        assert_eq!(slab.alloc(9, 1, ()), b, "freed slots are reused");
    }
}
