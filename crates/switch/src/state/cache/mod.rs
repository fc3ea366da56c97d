//! The switch's HTTP cache as shared state: the store (memory tier, and the disk tier it writes
//! through to), the fills in flight by key (request coalescing, see [`fill`]), the decision
//! counters and the hit-ratio history. What a request does with it is
//! [`crate::pipeline::cache`]'s job.

pub(crate) mod fill;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use capstan_cache::disk::DiskTier;
use capstan_cache::store::{Entry, Store, StoreConfig, StoreStats};
use http::header::HeaderMap;

use crate::config::cache::CacheConfig;
use fill::Fill;

/// Counters of the cache's decisions since the switch started.
#[derive(Debug, Default)]
pub struct Counters {
    pub hits: AtomicU64,
    pub stale_hits: AtomicU64,
    pub misses: AtomicU64,
    pub revalidations: AtomicU64,
    pub not_modified: AtomicU64,
    pub coalesced: AtomicU64,
    pub passes: AtomicU64,
    pub stored: AtomicU64,
    pub uncachable: AtomicU64,
    pub stale_on_error: AtomicU64,
    pub background_refreshes: AtomicU64,
    pub invalidations: AtomicU64,
    pub purges: AtomicU64,
    /// Memory misses the disk tier answered.
    pub disk_hits: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// One point of the hit-ratio history the status page draws.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct RatioSample {
    pub uptime_s: f64,
    pub hits: u64,
    pub lookups: u64,
}

/// The cache: its store, the fills in flight, counters. Lives as long as the switch (a reload
/// keeps what is stored; a changed size or policy takes effect on restart).
pub struct CacheLayer {
    pub store: Store,
    /// The disk tier: every stored response is written through to it, and a memory miss
    /// that it holds is promoted back to memory (so memory is a cache of the disk, as in
    /// Traffic Server); it survives a restart.
    pub disk: Option<Arc<DiskTier>>,
    pub(crate) fills: Mutex<HashMap<String, Arc<Fill>>>,
    pub counters: Counters,
    pub(crate) history: Mutex<VecDeque<RatioSample>>,
}

/// Samples kept for the status page (one per gathering tick).
const HISTORY: usize = 360;

impl CacheLayer {
    /// The cache for a `[cache]` section; fails when the disk tier's directory cannot be
    /// opened (or another process has it open).
    pub(crate) fn new(config: &CacheConfig) -> anyhow::Result<CacheLayer> {
        let disk = match &config.disk_path {
            Some(dir) => Some(Arc::new(
                DiskTier::open(
                    dir,
                    config.disk_size.0,
                    config.max_object.0,
                    config.policy,
                    config.rules(),
                )
                .map_err(|e| anyhow::anyhow!("cache disk tier {}: {e}", dir.display()))?,
            )),
            None => None,
        };
        Ok(CacheLayer {
            store: Store::new(StoreConfig {
                budget_bytes: config.memory.0,
                max_object_bytes: config.max_object.0,
                policy: config.policy,
                shards: 0,
            }),
            disk,
            fills: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            history: Mutex::new(VecDeque::new()),
        })
    }

    pub(crate) fn stats(&self) -> StoreStats {
        self.store.stats()
    }

    /// Hits (fresh and stale) and lookups so far.
    pub(crate) fn ratio_now(&self) -> (u64, u64) {
        let c = &self.counters;
        let hits = c.hits.load(Ordering::Relaxed) + c.stale_hits.load(Ordering::Relaxed);
        let lookups =
            hits + c.misses.load(Ordering::Relaxed) + c.revalidations.load(Ordering::Relaxed);
        (hits, lookups)
    }

    /// Records a point of the hit-ratio history.
    pub(crate) fn sample(&self, uptime_s: f64) {
        let (hits, lookups) = self.ratio_now();
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        if h.len() == HISTORY {
            h.pop_front();
        }
        h.push_back(RatioSample {
            uptime_s,
            hits,
            lookups,
        });
    }

    pub(crate) fn history(&self) -> Vec<RatioSample> {
        let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        h.iter().copied().collect()
    }

    pub(crate) fn fills(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Fill>>> {
        self.fills.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets a fill once it has ended, unless a newer one took its key.
    pub(crate) fn forget_fill(&self, key: &str, fill: &Arc<Fill>) {
        let mut fills = self.fills();
        if fills.get(key).is_some_and(|f| Arc::ptr_eq(f, fill)) {
            fills.remove(key);
        }
    }

    /// PURGE of one URL (every variant, both tiers); returns how many memory entries went.
    pub(crate) fn purge(&self, url: &str) -> usize {
        bump(&self.counters.purges);
        self.drop_url(url)
    }

    /// Removes every variant of `url` from both tiers.
    pub(crate) fn drop_url(&self, url: &str) -> usize {
        let in_memory = self.store.purge(url);
        let on_disk = self.disk.as_ref().map_or(0, |d| d.purge(url));
        in_memory.max(on_disk)
    }

    /// BAN: every URL `banned` matches, from both tiers.
    pub(crate) fn ban(&self, banned: impl Fn(&str) -> bool) -> usize {
        let in_memory = self.store.ban(&banned);
        let on_disk = self.disk.as_ref().map_or(0, |d| d.ban(&banned));
        in_memory.max(on_disk)
    }

    /// Forgets one entry in both tiers.
    pub(crate) fn remove(&self, entry: &Entry) {
        self.store.remove(entry);
        if let Some(disk) = &self.disk {
            disk.remove(&entry.url, &entry.key_extra, &entry.vary);
        }
    }

    /// Writes an entry through to the disk tier, off the event loop.
    pub(crate) fn write_through(&self, entry: &Arc<Entry>) {
        if let Some(disk) = &self.disk {
            let (disk, entry) = (Arc::clone(disk), Arc::clone(entry));
            tokio::task::spawn_blocking(move || {
                if let Err(e) = disk.put(&entry) {
                    tracing::debug!(url = %entry.url, "disk tier write failed: {e}");
                }
            });
        }
    }

    /// A memory miss looked up on disk (off the event loop); a hit is promoted to memory.
    pub(crate) async fn lookup_on_disk(&self, key: &Key, req: &HeaderMap) -> Option<Arc<Entry>> {
        let disk = Arc::clone(self.disk.as_ref()?);
        let (url, extra, req) = (key.url.clone(), key.extra.clone(), req.clone());
        let found = tokio::task::spawn_blocking(move || {
            disk.lookup(&url, &extra, |e| e.vary_matches(&req))
        })
        .await
        .ok()?
        .unwrap_or_else(|e| {
            tracing::debug!("disk tier read failed: {e}");
            None
        })?;
        bump(&self.counters.disk_hits);
        Some(match self.store.insert(found, 1).stored {
            Ok(promoted) => promoted,
            Err(_) => return None,
        })
    }
}

/// The cache key of a request, split into its URL and the rest.
pub(crate) struct Key {
    pub(crate) url: String,
    pub(crate) extra: String,
}
