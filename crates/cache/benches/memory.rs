//! Resident memory per stored object, beyond its body: the memory tier (entry, packed header
//! fields, maps, LRU bookkeeping) and the disk tier's in-memory index (plus its evictor).
//! A measurement, not a check — RSS is per process, so it runs alone, here, not among tests:
//!
//! `cargo bench -p capstan-cache --bench memory` (optionally `-- 500000` objects)

use std::time::SystemTime;

use bytes::Bytes;
use capstan_cache::disk::DiskTier;
use capstan_cache::evict::EvictionKind;
use capstan_cache::rfc::{CacheRules, StoredTimes, VaryKey};
use capstan_cache::store::{Entry, Store, StoreConfig};
use http::{HeaderMap, HeaderValue, StatusCode};

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A typical small response's fields: `fields` of six.
fn headers(fields: usize) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (k, v) in [
        ("content-type", "text/html"),
        ("cache-control", "public, max-age=86400"),
        ("etag", "\"5f3a-1024\""),
        ("last-modified", "Mon, 23 Nov 2026 01:00:00 GMT"),
        ("date", "Mon, 23 Nov 2026 02:00:00 GMT"),
        ("via", "1.1 capstan"),
    ]
    .into_iter()
    .take(fields)
    {
        headers.insert(k, HeaderValue::from_static(v));
    }
    headers
}

/// Entries sharing one 1 KB body, so the body does not count.
fn entries(n: usize, fields: usize) -> impl Iterator<Item = Entry> {
    let body = Bytes::from(vec![b'x'; 1024]);
    let now = SystemTime::now();
    let headers = headers(fields);
    let times = StoredTimes::new(StatusCode::OK, &headers, now, now, &CacheRules::default());
    (0..n).map(move |i| {
        Entry::new(
            &format!("http://www.example.com/objects/{i:010}.html"),
            "",
            VaryKey::default(),
            StatusCode::OK,
            headers.clone(),
            body.clone(),
            times,
        )
    })
}

fn memory_tier(n: usize, fields: usize) -> f64 {
    let store = Store::new(StoreConfig {
        budget_bytes: 1 << 40,
        max_object_bytes: 1 << 20,
        policy: EvictionKind::Lru,
        shards: 0,
    });
    let before = rss_bytes();
    for e in entries(n, fields) {
        assert!(store.insert(e, 1).stored.is_ok());
    }
    let per_object = (rss_bytes() - before) as f64 / n as f64;
    assert_eq!(store.stats().objects, n as u64);
    per_object
}

fn disk_tier_index(n: usize) -> f64 {
    let dir = std::env::temp_dir().join(format!("capstan-memory-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let tier = DiskTier::open(
        &dir,
        1 << 40,
        1 << 20,
        EvictionKind::Lru,
        CacheRules::default(),
    )
    .expect("a disk tier in the temporary directory");
    // Warm the allocator with the write path's transient buffers before measuring.
    for e in entries(1000, 6) {
        tier.put(&e).expect("write");
    }
    let before = rss_bytes();
    for (i, e) in entries(n, 6).enumerate().skip(1000) {
        tier.put(&e)
            .unwrap_or_else(|err| panic!("write {i}: {err}"));
    }
    let per_object = (rss_bytes() - before) as f64 / (n - 1000) as f64;
    drop(tier);
    let _ = std::fs::remove_dir_all(&dir);
    per_object
}

/// Each measurement runs in a process of its own (this binary again, with the measurement's
/// name): memory a finished measurement freed would otherwise be reused by the next and hide
/// its growth.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(200_000);
    let mode = args.iter().find(|a| a.starts_with("measure-"));
    match mode.map(String::as_str) {
        Some("measure-store-0") => println!(
            "memory tier: {:.0} resident bytes per object beyond its body (no header fields, {n} objects)",
            memory_tier(n, 0)
        ),
        Some("measure-store-6") => println!(
            "memory tier: {:.0} resident bytes per object beyond its body (6 header fields, {n} objects)",
            memory_tier(n, 6)
        ),
        Some("measure-disk") => {
            let objects = (n / 4).max(2000);
            println!(
                "disk tier: {:.0} resident bytes per object (index + LRU; bodies on disk; {objects} objects)",
                disk_tier_index(objects)
            )
        }
        _ => {
            let me = std::env::current_exe().expect("the benchmark's own path");
            for measure in ["measure-store-0", "measure-store-6", "measure-disk"] {
                let status = std::process::Command::new(&me)
                    .arg(measure)
                    .arg(n.to_string())
                    .status()
                    .expect("the benchmark runs itself");
                assert!(status.success(), "{measure} failed");
            }
        }
    }
}
