//! The memory tier: stored responses keyed by URL, several variants per URL (`Vary`, key
//! headers), a byte budget enforced by a pluggable [`Evictor`].
//!
//! Sharded by URL so that one URL's variants (and a PURGE of it) live under one lock. Bodies are
//! [`Bytes`]: a hit clones a reference, never the bytes. No clock and no I/O here: the caller
//! passes times in and gets evicted entries back (to demote them to the disk tier).

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};

use crate::evict::{new_evictor, EvictionKind, Evictor, ObjectId};
use crate::packed::PackedHeaders;
use crate::rfc::{StoredTimes, VaryKey};

/// Bytes charged per object beyond its body, its packed header fields and its key: the entry,
/// its map slots and the eviction policy's bookkeeping. Measured: 522 resident bytes per object
/// with no header fields and a 40-byte URL (`cargo bench -p capstan-cache --bench memory`), so
/// the budget counts
/// what the process really holds.
pub const ENTRY_OVERHEAD: u64 = 480;

/// Variants kept per URL; a `Vary` on a field with many values must not grow without bound.
pub const MAX_VARIANTS: usize = 16;

/// One stored response.
#[derive(Debug)]
pub struct Entry {
    pub id: ObjectId,
    /// `scheme://host/path?query` (what PURGE and BAN match).
    pub url: Arc<str>,
    /// The rest of the primary key (values of key headers), empty by default.
    pub key_extra: Box<str>,
    /// The request's values of the fields the response varies on.
    pub vary: VaryKey,
    pub status: StatusCode,
    /// The stored header fields, packed (see [`Entry::headers`]).
    pub packed: PackedHeaders,
    pub body: Bytes,
    pub times: StoredTimes,
    /// What the entry counts against the byte budget.
    pub charged: u64,
}

impl Entry {
    /// An entry ready to insert; `id` and `charged` are set by the store.
    pub fn new(
        url: &str,
        key_extra: &str,
        vary: VaryKey,
        status: StatusCode,
        headers: HeaderMap,
        body: Bytes,
        times: StoredTimes,
    ) -> Entry {
        let mut entry = Entry {
            id: 0,
            url: Arc::from(url),
            key_extra: Box::from(key_extra),
            vary,
            status,
            packed: PackedHeaders::pack(&headers),
            body,
            times,
            charged: 0,
        };
        entry.charged = entry.cost_in_bytes();
        entry
    }

    /// The stored header fields (their values share the stored bytes).
    pub fn headers(&self) -> HeaderMap {
        self.packed.unpack()
    }

    /// Whether a request with `req` fields selects this variant (RFC 9111 §4.1).
    pub fn vary_matches(&self, req: &HeaderMap) -> bool {
        if self.packed.get("vary").is_none() {
            // No Vary: the stored key is empty and every request matches.
            return self.vary.is_empty();
        }
        crate::rfc::vary_key(&self.headers(), req).is_some_and(|k| k == self.vary)
    }

    fn cost_in_bytes(&self) -> u64 {
        self.body.len() as u64
            + self.packed.packed_len() as u64
            + (self.url.len() + self.key_extra.len() + self.vary.as_bytes().len()) as u64
            + ENTRY_OVERHEAD
    }

    fn same_variant(&self, other: &Entry) -> bool {
        self.key_extra == other.key_extra && self.vary == other.vary
    }
}

/// What a lookup found.
#[derive(Debug)]
pub enum Lookup {
    Hit(Arc<Entry>),
    /// The URL is stored, but no variant matches this request.
    VaryMiss,
    /// Nothing stored for the URL.
    UriMiss,
}

/// Why an insert kept nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Larger than `max_object` or than a shard's budget.
    TooLarge,
    /// The eviction policy declined it (admission control).
    NotAdmitted,
}

/// The outcome of an insert: the stored entry and what was evicted to make room.
#[derive(Debug)]
pub struct Inserted {
    pub stored: Result<Arc<Entry>, Rejected>,
    pub evicted: Vec<Arc<Entry>>,
}

/// The memory tier's sizing.
#[derive(Clone, Copy, Debug)]
pub struct StoreConfig {
    pub budget_bytes: u64,
    pub max_object_bytes: u64,
    pub policy: EvictionKind,
    /// 0 picks one per 16 MiB of budget, from 1 to 16.
    pub shards: usize,
}

/// Counters since the store was made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct StoreStats {
    pub objects: u64,
    pub bytes: u64,
    pub budget_bytes: u64,
    pub inserts: u64,
    pub evictions: u64,
    pub rejected: u64,
    pub removed: u64,
}

struct Shard {
    urls: HashMap<Arc<str>, Vec<Arc<Entry>>>,
    ids: HashMap<ObjectId, Arc<str>>,
    evictor: Box<dyn Evictor>,
    budget: u64,
    bytes: u64,
    objects: u64,
}

impl Shard {
    /// Takes the entry with `id` out of the maps (not out of the evictor).
    fn take(&mut self, id: ObjectId) -> Option<Arc<Entry>> {
        let url = self.ids.remove(&id)?;
        let variants = self.urls.get_mut(&url)?;
        let pos = variants.iter().position(|e| e.id == id)?;
        let entry = variants.remove(pos);
        if variants.is_empty() {
            self.urls.remove(&url);
        }
        self.bytes -= entry.charged;
        self.objects -= 1;
        Some(entry)
    }

    fn remove(&mut self, id: ObjectId) -> Option<Arc<Entry>> {
        self.evictor.remove(id);
        self.take(id)
    }
}

/// The memory tier.
pub struct Store {
    shards: Box<[Mutex<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
    next_id: AtomicU64,
    config: StoreConfig,
    inserts: AtomicU64,
    evictions: AtomicU64,
    rejected: AtomicU64,
    removed: AtomicU64,
}

impl Store {
    pub fn new(config: StoreConfig) -> Store {
        let shards = match config.shards {
            0 => (config.budget_bytes / (16 << 20)).clamp(1, 16) as usize,
            n => n,
        };
        let budget = config.budget_bytes / shards as u64;
        Store {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        urls: HashMap::new(),
                        ids: HashMap::new(),
                        evictor: new_evictor(config.policy, budget),
                        budget,
                        bytes: 0,
                        objects: 0,
                    })
                })
                .collect(),
            hasher: Default::default(),
            next_id: AtomicU64::new(1),
            config,
            inserts: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            removed: AtomicU64::new(0),
        }
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    fn shard(&self, url: &str) -> MutexGuard<'_, Shard> {
        let i = (self.hasher.hash_one(url) % self.shards.len() as u64) as usize;
        // A panic while a shard was held cannot leave it half-updated in a way that matters
        // more than losing the cache: keep serving.
        self.shards[i].lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Finds the variant of `url` whose key extra matches and for which `vary_matches` holds
    /// (the caller compares the request with the entry's `Vary`). A hit is told to the policy.
    pub fn lookup(
        &self,
        url: &str,
        key_extra: &str,
        vary_matches: impl Fn(&Entry) -> bool,
    ) -> Lookup {
        let mut shard = self.shard(url);
        let Some(variants) = shard.urls.get(url) else {
            return Lookup::UriMiss;
        };
        let found = variants
            .iter()
            .rev()
            .find(|e| &*e.key_extra == key_extra && vary_matches(e))
            .cloned();
        match found {
            Some(entry) => {
                shard.evictor.touch(entry.id);
                Lookup::Hit(entry)
            }
            None => Lookup::VaryMiss,
        }
    }

    /// Stores `entry` (replacing the same variant), evicting as the policy says until the
    /// shard is within its budget. `cost` is what refetching would cost (µs of the miss).
    pub fn insert(&self, mut entry: Entry, cost: u64) -> Inserted {
        let mut evicted = Vec::new();
        let mut shard = self.shard(&entry.url);
        if entry.charged > self.config.max_object_bytes || entry.charged > shard.budget {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return Inserted {
                stored: Err(Rejected::TooLarge),
                evicted,
            };
        }
        entry.id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let replaced: Vec<ObjectId> = shard
            .urls
            .get(&entry.url)
            .map(|variants| {
                let same = variants.iter().filter(|e| e.same_variant(&entry));
                let oldest = (variants.len() >= MAX_VARIANTS).then(|| &variants[0]);
                same.chain(oldest).map(|e| e.id).collect()
            })
            .unwrap_or_default();
        for id in replaced {
            shard.remove(id);
        }
        if !shard.evictor.admit(entry.id, entry.charged, cost.max(1)) {
            self.rejected.fetch_add(1, Ordering::Relaxed);
            return Inserted {
                stored: Err(Rejected::NotAdmitted),
                evicted,
            };
        }
        let url = match shard.urls.get_key_value(&entry.url) {
            Some((existing, _)) => Arc::clone(existing),
            None => Arc::clone(&entry.url),
        };
        entry.url = Arc::clone(&url);
        let entry = Arc::new(entry);
        shard.bytes += entry.charged;
        shard.objects += 1;
        shard.ids.insert(entry.id, Arc::clone(&url));
        shard.urls.entry(url).or_default().push(Arc::clone(&entry));
        while shard.bytes > shard.budget {
            let Some(victim) = shard.evictor.victim() else {
                break;
            };
            if let Some(gone) = shard.take(victim) {
                evicted.push(gone);
            }
        }
        self.inserts.fetch_add(1, Ordering::Relaxed);
        self.evictions
            .fetch_add(evicted.len() as u64, Ordering::Relaxed);
        // The policy may have chosen the newcomer itself (a scan-resistant policy can).
        let stored = if evicted.iter().any(|e| e.id == entry.id) {
            Err(Rejected::NotAdmitted)
        } else {
            Ok(entry)
        };
        Inserted { stored, evicted }
    }

    /// Replaces a stored entry's headers and times after a `304` (RFC 9111 §4.3.4), keeping
    /// its body. Returns the updated entry, or `None` when it is no longer stored.
    pub fn update(
        &self,
        old: &Arc<Entry>,
        headers: HeaderMap,
        times: StoredTimes,
    ) -> Option<Arc<Entry>> {
        let mut shard = self.shard(&old.url);
        let variants = shard.urls.get_mut(&old.url)?;
        let slot = variants.iter_mut().find(|e| e.id == old.id)?;
        let mut updated = Entry {
            id: old.id,
            url: Arc::clone(&old.url),
            key_extra: old.key_extra.clone(),
            vary: old.vary.clone(),
            status: old.status,
            packed: PackedHeaders::pack(&headers),
            body: old.body.clone(),
            times,
            charged: 0,
        };
        updated.charged = old.charged;
        let updated = Arc::new(updated);
        *slot = Arc::clone(&updated);
        shard.evictor.touch(old.id);
        Some(updated)
    }

    /// Removes every variant of `url`; returns how many.
    pub fn purge(&self, url: &str) -> usize {
        let mut shard = self.shard(url);
        let ids: Vec<ObjectId> = shard
            .urls
            .get(url)
            .map(|v| v.iter().map(|e| e.id).collect())
            .unwrap_or_default();
        for &id in &ids {
            shard.remove(id);
        }
        self.removed.fetch_add(ids.len() as u64, Ordering::Relaxed);
        ids.len()
    }

    /// Removes one entry (found stale and unusable, or replaced); true when it was stored.
    pub fn remove(&self, entry: &Entry) -> bool {
        let removed = self.shard(&entry.url).remove(entry.id).is_some();
        if removed {
            self.removed.fetch_add(1, Ordering::Relaxed);
        }
        removed
    }

    /// Removes every entry whose URL satisfies `banned`; returns how many.
    pub fn ban(&self, banned: impl Fn(&str) -> bool) -> usize {
        let mut count = 0;
        for shard in self.shards.iter() {
            let mut shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            let ids: Vec<ObjectId> = shard
                .urls
                .iter()
                .filter(|(url, _)| banned(url))
                .flat_map(|(_, v)| v.iter().map(|e| e.id))
                .collect();
            for &id in &ids {
                shard.remove(id);
            }
            count += ids.len();
        }
        self.removed.fetch_add(count as u64, Ordering::Relaxed);
        count
    }

    pub fn stats(&self) -> StoreStats {
        let (mut objects, mut bytes) = (0, 0);
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(|p| p.into_inner());
            objects += shard.objects;
            bytes += shard.bytes;
        }
        StoreStats {
            objects,
            bytes,
            budget_bytes: self.config.budget_bytes,
            inserts: self.inserts.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            removed: self.removed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rfc::{CacheRules, StoredTimes};
    use std::time::SystemTime;

    fn entry(url: &str, body_len: usize) -> Entry {
        let now = SystemTime::UNIX_EPOCH;
        let headers = HeaderMap::new();
        let times = StoredTimes::new(StatusCode::OK, &headers, now, now, &CacheRules::default());
        Entry::new(
            url,
            "",
            VaryKey::default(),
            StatusCode::OK,
            headers,
            Bytes::from(vec![b'x'; body_len]),
            times,
        )
    }

    fn store(budget: u64) -> Store {
        Store::new(StoreConfig {
            budget_bytes: budget,
            max_object_bytes: budget,
            policy: EvictionKind::Lru,
            shards: 1,
        })
    }

    #[test]
    fn lookup_distinguishes_uri_miss_vary_miss_and_hit() {
        let s = store(1 << 20);
        assert!(matches!(
            s.lookup("http://h/a", "", |_| true),
            Lookup::UriMiss
        ));
        s.insert(entry("http://h/a", 10), 1).stored.unwrap();
        assert!(matches!(
            s.lookup("http://h/a", "", |_| false),
            Lookup::VaryMiss
        ));
        assert!(matches!(
            s.lookup("http://h/a", "x", |_| true),
            Lookup::VaryMiss
        ));
        let Lookup::Hit(e) = s.lookup("http://h/a", "", |_| true) else {
            panic!("expected a hit");
        };
        assert_eq!(e.body.len(), 10);
    }

    #[test]
    fn a_hit_shares_the_stored_body() {
        let s = store(1 << 20);
        let stored = s.insert(entry("http://h/a", 1000), 1).stored.unwrap();
        let Lookup::Hit(e) = s.lookup("http://h/a", "", |_| true) else {
            panic!("expected a hit");
        };
        assert_eq!(e.body.as_ptr(), stored.body.as_ptr());
    }

    #[test]
    fn the_byte_budget_holds_and_the_least_recent_goes_first() {
        let one = entry("http://h/0", 1000).charged;
        let s = store(one * 3);
        for i in 0..3 {
            s.insert(entry(&format!("http://h/{i}"), 1000), 1);
        }
        s.lookup("http://h/0", "", |_| true);
        let ins = s.insert(entry("http://h/3", 1000), 1);
        assert_eq!(ins.evicted.len(), 1);
        assert_eq!(&*ins.evicted[0].url, "http://h/1");
        let st = s.stats();
        assert!(st.bytes <= st.budget_bytes, "{st:?}");
        assert_eq!(st.objects, 3);
        assert_eq!(st.evictions, 1);
    }

    #[test]
    fn too_large_objects_are_refused() {
        let s = store(10_000);
        let ins = s.insert(entry("http://h/big", 20_000), 1);
        assert_eq!(ins.stored.unwrap_err(), Rejected::TooLarge);
        assert_eq!(s.stats().objects, 0);
    }

    #[test]
    fn same_variant_is_replaced_and_variants_are_bounded() {
        let s = store(1 << 24);
        s.insert(entry("http://h/a", 10), 1);
        s.insert(entry("http://h/a", 20), 1);
        assert_eq!(s.stats().objects, 1);
        for i in 0..(MAX_VARIANTS + 4) {
            let mut e = entry("http://h/v", 10);
            e.key_extra = format!("k{i}").into();
            s.insert(e, 1);
        }
        assert_eq!(s.stats().objects as usize, 1 + MAX_VARIANTS);
    }

    #[test]
    fn purge_ban_and_update() {
        let s = store(1 << 24);
        let a = s.insert(entry("http://h/a", 10), 1).stored.unwrap();
        s.insert(entry("http://h/img/1", 10), 1);
        s.insert(entry("http://h/img/2", 10), 1);
        let mut headers = HeaderMap::new();
        headers.insert("etag", http::HeaderValue::from_static("\"v2\""));
        let updated = s.update(&a, headers, a.times).unwrap();
        assert_eq!(updated.body.as_ptr(), a.body.as_ptr());
        let Lookup::Hit(now) = s.lookup("http://h/a", "", |_| true) else {
            panic!("expected a hit");
        };
        assert_eq!(now.headers()["etag"], "\"v2\"");
        assert_eq!(s.ban(|url| url.starts_with("http://h/img/")), 2);
        assert_eq!(s.purge("http://h/a"), 1);
        assert_eq!(s.purge("http://h/a"), 0);
        assert_eq!(s.stats().objects, 0);
        assert_eq!(s.stats().bytes, 0);
    }
}
