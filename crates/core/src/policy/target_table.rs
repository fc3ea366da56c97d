//! The bounded key → placement table behind LARD and LARD/R.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Mutex;

use super::support::mix64;

/// Keys are `RequestInfo::key_hash`, already a hash of the object key: storing the 64-bit hash
/// instead of the string means a lookup never allocates and an entry is a few bytes. Two keys
/// whose hashes collide share a placement, which costs at most some locality.
type Key = u64;

/// Re-mixes the (FNV) key hash so every bit of the table's hash is well spread.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = mix64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, key: u64) {
        self.0 = mix64(key);
    }
}

type Map<V> = HashMap<Key, V, BuildHasherDefault<KeyHasher>>;

/// Two generations of entries: lookups promote an entry from `previous` to `current`; when
/// `current` is full it becomes `previous` and the old `previous` is dropped. Keys used since the
/// last turnover survive it, so this approximates LRU at the cost of one extra probe, with no
/// per-entry bookkeeping.
struct Generations<V> {
    current: Map<V>,
    previous: Map<V>,
}

/// A sharded, size-bounded map from object key to a placement.
///
/// Memory bound: at most `max_targets` entries in all (each shard holds at most
/// `max_targets / (2 × shards)` per generation, two generations). Shards keep concurrent picks
/// for different keys from contending on one lock.
pub(crate) struct TargetTable<V> {
    shards: Box<[Mutex<Generations<V>>]>,
    per_generation: usize,
}

/// Tables smaller than this use one shard, so the bound stays exact for small `max_targets`.
const SHARDING_THRESHOLD: usize = 1024;
const SHARDS: usize = 16;

impl<V: Default> TargetTable<V> {
    /// `max_targets ≥ 2` (one entry per generation at least).
    pub(crate) fn new(max_targets: usize) -> Self {
        let shards = if max_targets >= SHARDING_THRESHOLD {
            SHARDS
        } else {
            1
        };
        let per_generation = (max_targets / (2 * shards)).max(1);
        TargetTable {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Generations {
                        current: Map::default(),
                        previous: Map::default(),
                    })
                })
                .collect(),
            per_generation,
        }
    }

    /// Runs `f` on the entry for `key` (a default one, flagged `true`, when the key is new) and
    /// keeps what it leaves there.
    pub(crate) fn update<R>(&self, key: Key, f: impl FnOnce(&mut V, bool) -> R) -> R {
        // The shard comes from a different mix than the map's hash, so keys within a shard still
        // spread over the map's buckets.
        let shard = (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % self.shards.len();
        let mut guard = self.shards[shard]
            .lock()
            // Entries are plain placements; one left half-updated by a panic is still usable.
            .unwrap_or_else(|e| e.into_inner());
        if let Some(entry) = guard.current.get_mut(&key) {
            return f(entry, false);
        }
        let (mut entry, fresh) = match guard.previous.remove(&key) {
            Some(entry) => (entry, false),
            None => (V::default(), true),
        };
        let result = f(&mut entry, fresh);
        let retired = if guard.current.len() >= self.per_generation {
            let full = std::mem::take(&mut guard.current);
            Some(std::mem::replace(&mut guard.previous, full))
        } else {
            None
        };
        guard.current.insert(key, entry);
        drop(guard);
        // Freeing a whole generation can take a while; do it outside the lock.
        drop(retired);
        result
    }

    /// Every entry, least recently used generation first, so that putting them into a fresh
    /// table in this order keeps the most recent ones if it is smaller.
    pub(crate) fn entries<T>(&self, mut export: impl FnMut(&V) -> Option<T>) -> Vec<(Key, T)> {
        let mut out = Vec::new();
        for shard in self.shards.iter() {
            let guard = shard.lock().unwrap_or_else(|e| e.into_inner());
            for map in [&guard.previous, &guard.current] {
                out.extend(map.iter().filter_map(|(&k, v)| export(v).map(|t| (k, t))));
            }
        }
        out
    }

    /// Entries held, for tests of the bound.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let g = s.lock().unwrap();
                g.current.len() + g.previous.len()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_holds_more_than_max_targets() {
        for max in [2, 10, 1000, 5000] {
            let table: TargetTable<u32> = TargetTable::new(max);
            for key in 0..20_000u64 {
                table.update(crate::hash_key(&key.to_string()), |v, _| *v = 1);
                assert!(table.len() <= max, "max {max}: {}", table.len());
            }
        }
    }

    #[test]
    fn entries_come_out_oldest_generation_first_and_refill_a_table_within_its_bound() {
        let table: TargetTable<u32> = TargetTable::new(8);
        for key in 0..8u64 {
            table.update(key, |v, _| *v = key as u32 * 10);
        }
        let entries = table.entries(|&v| Some(v));
        assert_eq!(entries.len(), 8);
        let position = |key: u64| entries.iter().position(|&(k, _)| k == key).unwrap();
        assert!(position(0) < position(7), "older keys first: {entries:?}");
        assert!(entries.iter().all(|&(k, v)| v == k as u32 * 10));
        // Into a smaller table, in that order: the most recent keys are the ones kept.
        let small: TargetTable<u32> = TargetTable::new(4);
        for (key, value) in entries {
            small.update(key, |v, _| *v = value);
        }
        assert_eq!(small.len(), 4);
        small.update(7, |v, fresh| assert!(!fresh && *v == 70));
    }

    #[test]
    fn recently_used_keys_survive_a_turnover() {
        let table: TargetTable<u32> = TargetTable::new(8);
        table.update(1, |v, fresh| {
            assert!(fresh);
            *v = 7;
        });
        for key in 100..103 {
            table.update(key, |_, _| ());
            // Keep key 1 in use while others come and go.
            table.update(1, |v, fresh| assert!(!fresh && *v == 7));
        }
        for key in 200..300 {
            table.update(key, |_, _| ());
        }
        table.update(1, |_, fresh| {
            assert!(fresh, "an unused key is eventually forgotten")
        });
    }
}
