//! What the admin listener shows of the cache: the `/status` section, Prometheus metrics, the
//! status page's hit-ratio chart, and the PURGE / BAN endpoints.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

use capstan_cache::store::StoreStats;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use serde::Serialize;

use crate::state::cache::{CacheLayer, RatioSample};

/// The `cache` section of `GET /status`.
#[derive(Serialize)]
pub(crate) struct CacheReport {
    pub hits: u64,
    pub stale_hits: u64,
    pub misses: u64,
    pub revalidations: u64,
    pub not_modified: u64,
    pub coalesced: u64,
    pub passes: u64,
    pub stored: u64,
    pub uncachable: u64,
    pub stale_on_error: u64,
    pub background_refreshes: u64,
    pub invalidations: u64,
    pub purges: u64,
    /// Hits (fresh and stale) over lookups, 0–1.
    pub hit_ratio: f64,
    pub memory: StoreStats,
    pub history: Vec<RatioSample>,
}

impl CacheLayer {
    pub(crate) fn report(&self) -> CacheReport {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (hits, lookups) = self.ratio_now();
        CacheReport {
            hits: get(&c.hits),
            stale_hits: get(&c.stale_hits),
            misses: get(&c.misses),
            revalidations: get(&c.revalidations),
            not_modified: get(&c.not_modified),
            coalesced: get(&c.coalesced),
            passes: get(&c.passes),
            stored: get(&c.stored),
            uncachable: get(&c.uncachable),
            stale_on_error: get(&c.stale_on_error),
            background_refreshes: get(&c.background_refreshes),
            invalidations: get(&c.invalidations),
            purges: get(&c.purges),
            hit_ratio: if lookups == 0 {
                0.0
            } else {
                hits as f64 / lookups as f64
            },
            memory: self.stats(),
            history: self.history(),
        }
    }
}

/// Writes the cache's metric families.
pub(crate) fn encode_metrics(
    report: &CacheReport,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(
        "capstan_cache_lookups",
        "Cache lookups by result: hit (fresh), stale (served stale), miss, revalidate, pass",
        None,
        MetricType::Counter,
    )?;
    for (result, n) in [
        ("hit", report.hits),
        ("stale", report.stale_hits),
        ("miss", report.misses),
        ("revalidate", report.revalidations),
        ("pass", report.passes),
    ] {
        let labels = vec![("result".to_string(), result.to_string())];
        ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
    }
    let counters = [
        (
            "capstan_cache_coalesced",
            "Requests served by another request's node fetch",
            report.coalesced,
        ),
        (
            "capstan_cache_not_modified",
            "Revalidations the node answered 304",
            report.not_modified,
        ),
        ("capstan_cache_stored", "Responses stored", report.stored),
        (
            "capstan_cache_uncachable",
            "Node responses not storable",
            report.uncachable,
        ),
        (
            "capstan_cache_stale_on_error",
            "Stale entries served because the node failed",
            report.stale_on_error,
        ),
        (
            "capstan_cache_background_refreshes",
            "Background refreshes of stale entries",
            report.background_refreshes,
        ),
        (
            "capstan_cache_invalidations",
            "URLs invalidated by unsafe methods",
            report.invalidations,
        ),
        ("capstan_cache_purges", "PURGE requests", report.purges),
        (
            "capstan_cache_evictions",
            "Entries evicted from the memory tier",
            report.memory.evictions,
        ),
    ];
    for (name, help, n) in counters {
        ConstCounter::new(n).encode(encoder.encode_descriptor(
            name,
            help,
            None,
            MetricType::Counter,
        )?)?;
    }
    let gauges = [
        (
            "capstan_cache_objects",
            "Entries stored in the memory tier",
            report.memory.objects,
        ),
        (
            "capstan_cache_bytes",
            "Bytes charged to the memory tier",
            report.memory.bytes,
        ),
        (
            "capstan_cache_budget_bytes",
            "Byte budget of the memory tier",
            report.memory.budget_bytes,
        ),
    ];
    for (name, help, n) in gauges {
        ConstGauge::new(n as i64).encode(encoder.encode_descriptor(
            name,
            help,
            None,
            MetricType::Gauge,
        )?)?;
    }
    Ok(())
}

/// The status page's cache section: counters and the hit ratio over time (per sampling
/// interval, not cumulative), as an inline SVG.
pub(crate) fn dashboard_section(report: &CacheReport) -> String {
    let mut out = format!(
        "<h2>Cache</h2><p>hit ratio <b>{:.1} %</b> · {} hits, {} stale hits, {} misses, {} revalidations \
         ({} answered 304) · {} coalesced · {} stored, {} uncachable · {} objects, {:.1} of {:.1} MiB · \
         {} evictions</p>",
        report.hit_ratio * 100.0,
        report.hits,
        report.stale_hits,
        report.misses,
        report.revalidations,
        report.not_modified,
        report.coalesced,
        report.stored,
        report.uncachable,
        report.memory.objects,
        report.memory.bytes as f64 / 1048576.0,
        report.memory.budget_bytes as f64 / 1048576.0,
        report.memory.evictions,
    );
    let points: Vec<(f64, f64)> = report
        .history
        .windows(2)
        .filter_map(|w| {
            let lookups = w[1].lookups.saturating_sub(w[0].lookups);
            let hits = w[1].hits.saturating_sub(w[0].hits);
            (lookups > 0).then(|| (w[1].uptime_s, hits as f64 / lookups as f64))
        })
        .collect();
    if points.len() < 2 {
        out.push_str(
            "<p>(the hit-ratio chart appears after a few sampling intervals with traffic)</p>",
        );
        return out;
    }
    let (w, h) = (600.0, 160.0);
    let (t0, t1) = (
        points[0].0,
        points[points.len() - 1].0.max(points[0].0 + 1.0),
    );
    let mut path = String::new();
    for (i, (t, r)) in points.iter().enumerate() {
        let x = 40.0 + (t - t0) / (t1 - t0) * (w - 50.0);
        let y = 10.0 + (1.0 - r) * (h - 30.0);
        let _ = write!(path, "{}{x:.1},{y:.1} ", if i == 0 { "M" } else { "L" });
    }
    let _ = write!(
        out,
        "<svg width={w} height={h} role=img aria-label='hit ratio over time'>\
         <text x=0 y=14 font-size=11>100 %</text><text x=0 y={} font-size=11>0 %</text>\
         <line x1=40 y1={} x2={} y2={} stroke=#999 />\
         <path d='{path}' fill=none stroke=#1f77b4 stroke-width=2 />\
         <text x=40 y={} font-size=11>{t0:.0} s</text><text x={} y={} font-size=11 text-anchor=end>{t1:.0} s (uptime)</text>\
         </svg>",
        h - 20.0,
        h - 20.0,
        w - 10.0,
        h - 20.0,
        h - 4.0,
        w - 10.0,
        h - 4.0,
    );
    out
}
