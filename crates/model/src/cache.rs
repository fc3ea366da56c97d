use std::collections::{BTreeMap, HashMap};

/// A least-recently-used cache of whole files, bounded by their total size in bytes.
///
/// It answers one question for the node model: does serving this file cost disk time (a miss) or
/// only a memory copy (a hit)? A file larger than the whole capacity is never admitted, as a real
/// page cache would thrash it straight out again.
#[derive(Debug, Clone)]
pub struct LruBytes {
    capacity: u64,
    used: u64,
    clock: u64,
    entries: HashMap<String, (u64, u64)>,
    order: BTreeMap<u64, String>,
    hits: u64,
    misses: u64,
}

impl LruBytes {
    pub fn new(capacity_bytes: u64) -> Self {
        LruBytes {
            capacity: capacity_bytes,
            used: 0,
            clock: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
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

    pub fn hits(&self) -> u64 {
        self.hits
    }

    pub fn misses(&self) -> u64 {
        self.misses
    }

    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// Record an access to `key` of `size` bytes; true on a hit. A miss admits the file, evicting
    /// least recently used files until it fits.
    pub fn access(&mut self, key: &str, size: u64) -> bool {
        self.clock += 1;
        let stamp = self.clock;
        if let Some((old_size, old_stamp)) = self.entries.get(key).copied() {
            self.order.remove(&old_stamp);
            if old_size == size {
                self.order.insert(stamp, key.to_string());
                self.entries.insert(key.to_string(), (size, stamp));
                self.hits += 1;
                return true;
            }
            // The file changed size: treat the cached copy as stale.
            self.entries.remove(key);
            self.used -= old_size;
        }
        self.misses += 1;
        if size > self.capacity {
            return false;
        }
        while self.used + size > self.capacity {
            let Some((_, victim)) = self.order.pop_first() else {
                break;
            };
            if let Some((vsize, _)) = self.entries.remove(&victim) {
                self.used -= vsize;
            }
        }
        self.used += size;
        self.order.insert(stamp, key.to_string());
        self.entries.insert(key.to_string(), (size, stamp));
        false
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
}
