use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Identity of a cached file for [`LruBytes::access_id`]: any integer the caller assigns (a file
/// index, an interned path).
pub type FileId = u64;

/// "No slot": the end of the recency list.
const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Slot {
    id: FileId,
    size: u64,
    /// Neighbours in recency order: `prev` is more recently used, `next` less.
    prev: u32,
    next: u32,
}

/// A hasher for integer ids: one multiplication (Fibonacci hashing), which spreads dense ids
/// over the whole word as the hash table's probing needs.
#[derive(Default, Clone, Copy)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n ^ self.0).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type IdMap<V> = HashMap<FileId, V, BuildHasherDefault<IdHasher>>;

/// Ids below this are looked up in a plain array (4 bytes per id up to the largest seen), larger
/// ones in a hash map: file indexes and interned paths are small and dense, and an array lookup
/// is the cheapest there is.
const DENSE_IDS: FileId = 1 << 22;

/// Where each cached file's slot is.
#[derive(Debug, Clone, Default)]
struct Index {
    dense: Vec<u32>,
    sparse: IdMap<u32>,
    len: usize,
}

impl Index {
    fn get(&self, id: FileId) -> Option<u32> {
        if id < DENSE_IDS {
            self.dense.get(id as usize).copied().filter(|&s| s != NIL)
        } else {
            self.sparse.get(&id).copied()
        }
    }

    fn insert(&mut self, id: FileId, slot: u32) {
        if id < DENSE_IDS {
            let i = id as usize;
            if i >= self.dense.len() {
                self.dense.resize(i + 1, NIL);
            }
            self.dense[i] = slot;
        } else {
            self.sparse.insert(id, slot);
        }
        self.len += 1;
    }

    fn remove(&mut self, id: FileId) {
        if id < DENSE_IDS {
            self.dense[id as usize] = NIL;
        } else {
            self.sparse.remove(&id);
        }
        self.len -= 1;
    }
}

/// A least-recently-used cache of whole files, bounded by their total size in bytes.
///
/// It answers one question for the node model: does serving this file cost disk time (a miss) or
/// only a memory copy (a hit)? A file larger than the whole capacity is never admitted, as a real
/// page cache would thrash it straight out again.
///
/// Files are named either by an integer id the caller assigns ([`LruBytes::access_id`], what the
/// simulator uses: no allocation, O(1)) or by path ([`LruBytes::access`], what the emulated origin
/// uses: each distinct path is interned to an id once, so later accesses allocate nothing). Use
/// one naming or the other on one cache, not both. Recency is an intrusive doubly linked list
/// over a slab of slots, so a hit is a hash lookup and two relinks, and an eviction pops the tail.
#[derive(Debug, Clone)]
pub struct LruBytes {
    capacity: u64,
    used: u64,
    index: Index,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Most and least recently used slots.
    head: u32,
    tail: u32,
    /// Paths seen by [`LruBytes::access`], and their ids.
    paths: HashMap<String, FileId>,
    hits: u64,
    misses: u64,
}

impl LruBytes {
    pub fn new(capacity_bytes: u64) -> Self {
        LruBytes {
            capacity: capacity_bytes,
            used: 0,
            index: Index::default(),
            slots: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            paths: HashMap::new(),
            hits: 0,
            misses: 0,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn used(&self) -> u64 {
        self.used
    }

    /// Changes the capacity; a smaller one evicts least recently used files until the rest
    /// fits (memory taken by something else, e.g. server processes, leaves the page cache at
    /// once). A larger one admits nothing by itself: files come back on their next miss.
    pub fn set_capacity(&mut self, capacity_bytes: u64) {
        self.capacity = capacity_bytes;
        while self.used > self.capacity && self.tail != NIL {
            self.remove(self.tail);
        }
    }

    pub fn hits(&self) -> u64 {
        self.hits
    }

    /// Forgets the hit and miss counts (the files stay): accesses made to fill the cache
    /// before a run are not the run's.
    pub fn reset_counts(&mut self) {
        self.hits = 0;
        self.misses = 0;
    }

    pub fn misses(&self) -> u64 {
        self.misses
    }

    /// Files currently cached.
    pub fn len(&self) -> usize {
        self.index.len
    }

    pub fn is_empty(&self) -> bool {
        self.index.len == 0
    }

    /// Whether the file at `key` (named by path) is cached.
    pub fn contains(&self, key: &str) -> bool {
        self.paths
            .get(key)
            .is_some_and(|&id| self.index.get(id).is_some())
    }

    /// Whether the file `id` is cached.
    pub fn contains_id(&self, id: FileId) -> bool {
        self.index.get(id).is_some()
    }

    /// Record an access to the file at path `key` of `size` bytes; true on a hit. A miss admits
    /// the file, evicting least recently used files until it fits. The path is copied once, the
    /// first time it is seen.
    pub fn access(&mut self, key: &str, size: u64) -> bool {
        let id = match self.paths.get(key) {
            Some(&id) => id,
            None => {
                let id = self.paths.len() as FileId;
                self.paths.insert(key.to_string(), id);
                id
            }
        };
        self.access_id(id, size)
    }

    /// Record an access to file `id` of `size` bytes; true on a hit. A miss admits the file,
    /// evicting least recently used files until it fits.
    pub fn access_id(&mut self, id: FileId, size: u64) -> bool {
        if let Some(s) = self.index.get(id) {
            if self.slots[s as usize].size == size {
                self.unlink(s);
                self.push_front(s);
                self.hits += 1;
                return true;
            }
            // The file changed size: treat the cached copy as stale.
            self.remove(s);
        }
        self.misses += 1;
        if size > self.capacity {
            return false;
        }
        while self.used + size > self.capacity && self.tail != NIL {
            self.remove(self.tail);
        }
        self.used += size;
        let slot = Slot {
            id,
            size,
            prev: NIL,
            next: NIL,
        };
        let s = match self.free.pop() {
            Some(s) => {
                self.slots[s as usize] = slot;
                s
            }
            None => {
                self.slots.push(slot);
                (self.slots.len() - 1) as u32
            }
        };
        self.push_front(s);
        self.index.insert(id, s);
        false
    }

    fn remove(&mut self, s: u32) {
        self.unlink(s);
        let slot = &self.slots[s as usize];
        self.used -= slot.size;
        self.index.remove(slot.id);
        self.free.push(s);
    }

    fn unlink(&mut self, s: u32) {
        let Slot { prev, next, .. } = self.slots[s as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    fn push_front(&mut self, s: u32) {
        let old = self.head;
        {
            let slot = &mut self.slots[s as usize];
            slot.prev = NIL;
            slot.next = old;
        }
        if old == NIL {
            self.tail = s;
        } else {
            self.slots[old as usize].prev = s;
        }
        self.head = s;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn miss_then_hit() {
        let mut c = LruBytes::new(1000);
        assert!(!c.access("/a", 400));
        assert!(c.access("/a", 400));
        assert_eq!((c.hits(), c.misses(), c.used()), (1, 1, 400));
    }

    #[test]
    fn reset_counts_keeps_the_files() {
        let mut c = LruBytes::new(1000);
        c.access("/a", 400);
        c.reset_counts();
        assert_eq!((c.hits(), c.misses(), c.used()), (0, 0, 400));
        assert!(c.access("/a", 400));
        assert_eq!((c.hits(), c.misses()), (1, 0));
    }

    #[test]
    fn evicts_least_recently_used_by_bytes() {
        let mut c = LruBytes::new(1000);
        c.access("/a", 400);
        c.access("/b", 400);
        c.access("/a", 400); // b is now the oldest
        c.access("/c", 400); // needs 200 more bytes: b goes
        assert!(c.contains("/a") && c.contains("/c") && !c.contains("/b"));
        assert_eq!(c.used(), 800);
        // One big file can push out several small ones.
        c.access("/big", 1000);
        assert!(c.contains("/big") && !c.contains("/a") && !c.contains("/c"));
    }

    #[test]
    fn oversized_files_are_not_admitted() {
        let mut c = LruBytes::new(100);
        c.access("/a", 50);
        assert!(!c.access("/huge", 101));
        assert!(!c.access("/huge", 101));
        assert!(c.contains("/a"));
    }

    #[test]
    fn a_smaller_capacity_evicts_the_oldest_files() {
        let mut c = LruBytes::new(1000);
        for k in ["/a", "/b", "/c"] {
            c.access(k, 300);
        }
        c.access("/a", 300); // b is now the oldest
        c.set_capacity(650);
        assert!(c.contains("/a") && c.contains("/c") && !c.contains("/b"));
        assert_eq!((c.used(), c.capacity()), (600, 650));
        c.set_capacity(0);
        assert!(c.is_empty());
        assert!(!c.access("/a", 300), "nothing fits in no memory");
        c.set_capacity(1000);
        assert!(!c.access("/a", 300) && c.access("/a", 300));
    }

    #[test]
    fn a_changed_size_is_a_miss() {
        let mut c = LruBytes::new(1000);
        c.access_id(7, 100);
        assert!(!c.access_id(7, 200));
        assert!(c.access_id(7, 200));
        assert_eq!((c.used(), c.len()), (200, 1));
    }

    /// Against a straightforward LRU (a list scanned on every access) over a skewed stream.
    #[test]
    fn agrees_with_a_scanning_lru() {
        let mut c = LruBytes::new(50_000);
        let mut list: Vec<(u64, u64)> = Vec::new(); // most recent last
        let mut x: u64 = 88_172_645_463_325_252;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut id = (x % 1000) * (x % 7) / 6; // skewed towards small ids
            if id.is_multiple_of(5) {
                id += u64::MAX / 2; // and some beyond the dense range
            }
            let size = 1 + id.wrapping_mul(7919) % 9000;
            let want = if let Some(i) = list.iter().position(|e| e.0 == id) {
                list.remove(i);
                true
            } else {
                let mut used: u64 = list.iter().map(|e| e.1).sum();
                while used + size > 50_000 {
                    used -= list.remove(0).1;
                }
                false
            };
            list.push((id, size));
            assert_eq!(c.access_id(id, size), want);
            assert_eq!(c.used(), list.iter().map(|e| e.1).sum::<u64>());
        }
    }
}
