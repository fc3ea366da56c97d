//! The result of a run, as serialised to JSON (schema in `SCHEMA.md`), and the exact merge of
//! results from several shards.

use std::collections::BTreeMap;

use base64::Engine as _;
use hdrhistogram::serialization::{Deserializer, Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::http::ErrorKind;
use crate::stats::{new_hist, Stats};

pub const SCHEMA: &str = "capstan-bench/1";

/// Summary of a latency histogram, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    pub count: u64,
    pub min: f64,
    pub mean: f64,
    pub stdev: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Percentiles {
    pub fn of(h: &Histogram<u64>) -> Percentiles {
        if h.is_empty() {
            return Percentiles::default();
        }
        let ms = |us: f64| (us / 1000.0 * 1000.0).round() / 1000.0;
        let q = |p: f64| ms(h.value_at_quantile(p) as f64);
        Percentiles {
            count: h.len(),
            min: ms(h.min() as f64),
            mean: ms(h.mean()),
            stdev: ms(h.stdev()),
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: ms(h.max() as f64),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// From the intended start (the schedule), so a server stall counts for every request it
    /// delayed: no coordinated omission.
    pub corrected: Percentiles,
    /// From the actual start of the request.
    pub uncorrected: Percentiles,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimelineSecond {
    /// Seconds since the start.
    pub t: u64,
    pub offered: u64,
    pub started: u64,
    pub completed: u64,
    pub errors: u64,
    pub dropped: u64,
    pub bytes: u64,
    /// Body bytes of the responses to the requests due in this second, whenever they
    /// completed (`bytes` counts by completion): over a window, the share of the offered
    /// load's bytes that arrived, unmoved by how late a large response ends.
    #[serde(default)]
    pub bytes_by_start: u64,
    /// Corrected latency of the responses completed in this second (2 significant digits).
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassResult {
    pub requests: u64,
    pub errors: u64,
    pub bytes: u64,
    pub latency_ms: Percentiles,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheResult {
    pub hits: u64,
    pub misses: u64,
    pub hit_bytes: u64,
    pub miss_bytes: u64,
    /// hits / (hits + misses): the document hit ratio (DHR).
    pub doc_hit_ratio: f64,
    /// hit bytes / all marked bytes: the byte hit ratio (BHR).
    pub byte_hit_ratio: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Generator {
    pub threads: usize,
    /// Highest CPU use of one generator thread, percent of a core.
    pub cpu_percent_max: f64,
    pub lag_p99_ms: f64,
    /// The generator could not keep its schedule: the result may be client-limited.
    pub limited: bool,
    pub warnings: Vec<String>,
}

/// Serialised histograms (HdrHistogram V2 + DEFLATE, base64), values in microseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Histograms {
    pub corrected: String,
    pub uncorrected: String,
    pub lag: String,
    pub connect: String,
    pub ttfb: String,
    pub page: String,
    #[serde(default)]
    pub redirected: String,
    pub per_class: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    pub schema: String,
    pub engine: String,
    /// The HTTP version on the wire: `http/1.0` (a connection per request), `http/1.1`
    /// (keep-alive) or `h3` (`--http3`); empty in results written before it was recorded.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub protocol: String,
    pub target: String,
    /// Shards this result covers, as `i/n`.
    pub shards: Vec<String>,
    pub started_unix_ms: u64,
    /// Length of the schedule window in seconds.
    pub duration_s: f64,
    /// Configured mean rate (requests/s; sessions/s for the sessions engine), 0 if closed loop.
    pub offered_rps: f64,
    /// Requests the schedule made due (closed loop: requests started).
    pub offered: u64,
    pub started: u64,
    /// Full responses of any status.
    pub completed: u64,
    /// Responses completed within the window, per second of the window.
    pub completed_rps: f64,
    /// Finished requests: responses plus transport failures.
    pub requests: u64,
    /// Due but never started: in-flight or connect-slot limit, or still waiting at the end.
    pub dropped: u64,
    /// Started but still in flight when the drain period ended.
    pub unfinished: u64,
    pub sessions: u64,
    pub bytes: u64,
    pub connect_attempts: u64,
    /// Connect attempts abandoned after the connect timeout and retried (S-Client).
    pub connect_timeouts: u64,
    pub connections_opened: u64,
    pub errors_total: u64,
    pub errors: BTreeMap<String, u64>,
    pub status: BTreeMap<String, u64>,
    pub latency_ms: Latency,
    pub lag_ms: Percentiles,
    pub connect_ms: Percentiles,
    pub ttfb_ms: Percentiles,
    /// Sessions engine: a page with all its embedded objects.
    pub page_ms: Percentiles,
    /// Requests answered with a redirect that was followed (`--follow-redirects`), from the
    /// intended start to the end of the redirected answer; also counted in `latency_ms`.
    #[serde(default)]
    pub redirected_ms: Percentiles,
    pub per_class: BTreeMap<String, ClassResult>,
    pub content_types: BTreeMap<String, u64>,
    pub cache: CacheResult,
    pub nodes: BTreeMap<String, u64>,
    pub timeline: Vec<TimelineSecond>,
    pub generator: Generator,
    pub histograms: Histograms,
    /// `capstan bench --wan`: the emulated WAN paths the load crossed; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wan: Option<WanResult>,
    /// `--target`: per connection target, in the given order; absent without.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetResult>,
    /// The run stopped early (`BenchConfig::give_up_after`): no response at all, only failed
    /// requests; `duration_s` is then the time it ran. Absent when it ran its whole duration.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gave_up: bool,
}

/// One connection target of a run spread over several (`--target`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TargetResult {
    /// `host:port` as given.
    pub address: String,
    /// Responses it gave.
    pub requests: u64,
    /// Requests that failed on it (transport errors, e.g. in flight when it died).
    pub errors: u64,
    /// Connections opened to it.
    pub connects: u64,
    /// Connections that came to it because the target they were meant for refused or failed
    /// to connect (a dead target's share moving over).
    pub reconnects: u64,
    /// Connect attempts it refused or let time out.
    pub refused: u64,
}

pub(crate) fn targets(addresses: &[String], accs: &[crate::stats::TargetAcc]) -> Vec<TargetResult> {
    addresses
        .iter()
        .zip(accs)
        .map(|(a, t)| TargetResult {
            address: a.clone(),
            requests: t.requests,
            errors: t.errors,
            connects: t.connects,
            reconnects: t.reconnects,
            refused: t.refused,
        })
        .collect()
}

/// A run behind `capstan wan`'s delay router: per path (client group), the load it carried and
/// the router's counters for it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WanResult {
    /// The server side's address the generator connected to (the target's host, rewritten).
    pub server: String,
    /// The router as a whole (`capstan wan stats --json` without `paths`): uptime, packets that
    /// matched no path, and its pacer (timer lead, wake-up lateness, CPU time).
    pub router: serde_json::Value,
    pub paths: Vec<WanPath>,
}

/// One client group and its path.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WanPath {
    pub name: String,
    /// The group's client (source) addresses.
    pub clients: Vec<String>,
    /// The share of the load this group generated: its addresses over all groups' addresses.
    pub share: f64,
    /// The group's own figures, as in the run's totals.
    pub offered_rps: f64,
    pub completed: u64,
    pub completed_rps: f64,
    pub errors_total: u64,
    pub latency_ms: Latency,
    pub connect_ms: Percentiles,
    pub ttfb_ms: Percentiles,
    /// The router's report of this path (`capstan wan stats --json`): `up_params`,
    /// `down_params`, and per direction `up`/`down` packets, bytes, drops by cause, queue depth
    /// and delay error.
    pub router: serde_json::Value,
}

pub fn encode_hist(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    let _ = V2DeflateSerializer::new().serialize(h, &mut buf);
    base64::engine::general_purpose::STANDARD.encode(buf)
}

pub fn decode_hist(s: &str) -> Result<Histogram<u64>, BenchError> {
    if s.is_empty() {
        return Ok(new_hist());
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s)
        .map_err(|e| BenchError::Merge(format!("bad histogram encoding: {e}")))?;
    let h: Histogram<u64> = Deserializer::new()
        .deserialize(&mut &bytes[..])
        .map_err(|e| BenchError::Merge(format!("bad histogram: {e:?}")))?;
    let mut out = new_hist();
    out.add(&h)
        .map_err(|e| BenchError::Merge(format!("histogram out of range: {e:?}")))?;
    Ok(out)
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        ((a as f64 / b as f64) * 1e6).round() / 1e6
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

impl CacheResult {
    fn new(hits: u64, misses: u64, hit_bytes: u64, miss_bytes: u64) -> CacheResult {
        CacheResult {
            hits,
            misses,
            hit_bytes,
            miss_bytes,
            doc_hit_ratio: ratio(hits, hits + misses),
            byte_hit_ratio: ratio(hit_bytes, hit_bytes + miss_bytes),
        }
    }
}

/// The self-check of Banga & Druschel §4.3: a generator that could not keep its schedule
/// measured itself, not the server.
pub fn self_check(g: &mut Generator, lag_p99_ms: f64, scheduled: bool) {
    g.lag_p99_ms = lag_p99_ms;
    if scheduled && lag_p99_ms > 1.0 {
        g.warnings.push(format!(
            "generator lag p99 {lag_p99_ms:.2} ms > 1 ms: requests started late; add --threads or \
             another shard"
        ));
    }
    if g.cpu_percent_max > 90.0 {
        g.warnings.push(format!(
            "a generator thread used {:.0} % of a core (> 90 %): the result may be client-limited",
            g.cpu_percent_max
        ));
    }
    g.limited = !g.warnings.is_empty();
}

pub(crate) struct Meta<'a> {
    pub engine: &'a str,
    pub target: String,
    pub shard: (u32, u32),
    pub started_unix_ms: u64,
    pub duration_s: f64,
    pub offered_rps: f64,
    pub classes: &'a [String],
    pub generator: Generator,
}

pub(crate) fn build(stats: &Stats, m: Meta<'_>) -> RunResult {
    let errors: BTreeMap<String, u64> = ErrorKind::ALL
        .iter()
        .map(|k| (k.name().to_string(), stats.errors[*k as usize]))
        .filter(|(_, v)| *v > 0)
        .collect();
    let status: BTreeMap<String, u64> = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"]
        .iter()
        .zip(stats.status)
        .filter(|(_, v)| *v > 0)
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let mut per_class = BTreeMap::new();
    let mut class_hists = BTreeMap::new();
    for (name, c) in m.classes.iter().zip(&stats.classes) {
        if c.requests + c.errors == 0 {
            continue;
        }
        per_class.insert(
            name.clone(),
            ClassResult {
                requests: c.requests,
                errors: c.errors,
                bytes: c.bytes,
                latency_ms: Percentiles::of(&c.hist),
            },
        );
        class_hists.insert(name.clone(), encode_hist(&c.hist));
    }
    let transport_errors: u64 = stats.errors_total()
        - stats.errors[ErrorKind::Http4xx as usize]
        - stats.errors[ErrorKind::Http5xx as usize];
    let mut generator = m.generator;
    let lag = Percentiles::of(&stats.lag);
    self_check(&mut generator, lag.p99, !stats.lag.is_empty());
    RunResult {
        schema: SCHEMA.into(),
        engine: m.engine.into(),
        protocol: String::new(),
        target: m.target,
        shards: vec![format!("{}/{}", m.shard.0, m.shard.1)],
        started_unix_ms: m.started_unix_ms,
        duration_s: round3(m.duration_s),
        offered_rps: m.offered_rps,
        offered: stats.offered,
        started: stats.started,
        completed: stats.completed,
        completed_rps: round3(stats.completed_in_window as f64 / m.duration_s.max(1e-9)),
        requests: stats.completed + transport_errors,
        dropped: stats.dropped,
        unfinished: stats.unfinished,
        sessions: stats.sessions,
        bytes: stats.bytes,
        connect_attempts: stats.connect_attempts,
        connect_timeouts: stats.connect_timeouts,
        connections_opened: stats.connections_opened,
        errors_total: stats.errors_total(),
        errors,
        status,
        latency_ms: Latency {
            corrected: Percentiles::of(&stats.corrected),
            uncorrected: Percentiles::of(&stats.uncorrected),
        },
        lag_ms: lag,
        connect_ms: Percentiles::of(&stats.connect),
        ttfb_ms: Percentiles::of(&stats.ttfb),
        page_ms: Percentiles::of(&stats.page),
        redirected_ms: Percentiles::of(&stats.redirected),
        per_class,
        content_types: stats
            .content_types
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        cache: CacheResult::new(
            stats.cache_hits,
            stats.cache_misses,
            stats.cache_hit_bytes,
            stats.cache_miss_bytes,
        ),
        nodes: stats.nodes.iter().map(|(k, v)| (k.clone(), *v)).collect(),
        timeline: stats
            .timeline
            .iter()
            .enumerate()
            .map(|(t, s)| {
                let (p50, p99, max) = match &s.latency {
                    Some(h) => (
                        h.value_at_quantile(0.5) as f64 / 1000.0,
                        h.value_at_quantile(0.99) as f64 / 1000.0,
                        h.max() as f64 / 1000.0,
                    ),
                    None => (0.0, 0.0, 0.0),
                };
                TimelineSecond {
                    t: t as u64,
                    offered: s.offered,
                    started: s.started,
                    completed: s.completed,
                    errors: s.errors,
                    dropped: s.dropped,
                    bytes: s.bytes,
                    bytes_by_start: s.bytes_by_start,
                    p50_ms: round3(p50),
                    p99_ms: round3(p99),
                    max_ms: round3(max),
                }
            })
            .collect(),
        generator,
        histograms: Histograms {
            corrected: encode_hist(&stats.corrected),
            uncorrected: encode_hist(&stats.uncorrected),
            lag: encode_hist(&stats.lag),
            connect: encode_hist(&stats.connect),
            ttfb: encode_hist(&stats.ttfb),
            page: encode_hist(&stats.page),
            redirected: encode_hist(&stats.redirected),
            per_class: class_hists,
        },
        wan: None,
        targets: Vec::new(),
        gave_up: false,
    }
}

/// Shards' per-target counts add by address.
fn merge_targets(a: &mut Vec<TargetResult>, b: &[TargetResult]) {
    for t in b {
        match a.iter_mut().find(|x| x.address == t.address) {
            Some(x) => {
                x.requests += t.requests;
                x.errors += t.errors;
                x.connects += t.connects;
                x.reconnects += t.reconnects;
                x.refused += t.refused;
            }
            None => a.push(t.clone()),
        }
    }
}

fn add_maps(a: &mut BTreeMap<String, u64>, b: &BTreeMap<String, u64>) {
    for (k, v) in b {
        *a.entry(k.clone()).or_default() += v;
    }
}

/// Merges results of shards of one experiment: counters add, histograms add exactly and
/// percentiles are recomputed from them. Per-second timeline percentiles cannot be merged
/// exactly from summaries: the merged second shows the largest shard value.
pub fn merge(results: &[RunResult]) -> Result<RunResult, BenchError> {
    let Some(first) = results.first() else {
        return Err(BenchError::Merge("nothing to merge".into()));
    };
    for r in results {
        if r.schema != SCHEMA {
            return Err(BenchError::Merge(format!(
                "unknown schema {:?} (expected {SCHEMA})",
                r.schema
            )));
        }
    }
    let mut out = first.clone();
    let hist = |f: &dyn Fn(&RunResult) -> &String| -> Result<Histogram<u64>, BenchError> {
        let mut h = new_hist();
        for r in results {
            h.add(decode_hist(f(r))?)
                .map_err(|e| BenchError::Merge(format!("{e:?}")))?;
        }
        Ok(h)
    };
    let corrected = hist(&|r| &r.histograms.corrected)?;
    let uncorrected = hist(&|r| &r.histograms.uncorrected)?;
    let lag = hist(&|r| &r.histograms.lag)?;
    let connect = hist(&|r| &r.histograms.connect)?;
    let ttfb = hist(&|r| &r.histograms.ttfb)?;
    let page = hist(&|r| &r.histograms.page)?;
    let redirected = hist(&|r| &r.histograms.redirected)?;
    for r in &results[1..] {
        out.shards.extend(r.shards.iter().cloned());
        out.started_unix_ms = out.started_unix_ms.min(r.started_unix_ms);
        out.duration_s = out.duration_s.max(r.duration_s);
        out.offered_rps += r.offered_rps;
        out.offered += r.offered;
        out.started += r.started;
        out.completed += r.completed;
        out.requests += r.requests;
        out.dropped += r.dropped;
        out.unfinished += r.unfinished;
        out.sessions += r.sessions;
        out.bytes += r.bytes;
        out.connect_attempts += r.connect_attempts;
        out.connect_timeouts += r.connect_timeouts;
        out.connections_opened += r.connections_opened;
        out.errors_total += r.errors_total;
        add_maps(&mut out.errors, &r.errors);
        add_maps(&mut out.status, &r.status);
        add_maps(&mut out.content_types, &r.content_types);
        add_maps(&mut out.nodes, &r.nodes);
        out.cache.hits += r.cache.hits;
        out.cache.misses += r.cache.misses;
        out.cache.hit_bytes += r.cache.hit_bytes;
        out.cache.miss_bytes += r.cache.miss_bytes;
        if out.timeline.len() < r.timeline.len() {
            out.timeline
                .resize(r.timeline.len(), TimelineSecond::default());
        }
        for (i, (a, b)) in out.timeline.iter_mut().zip(&r.timeline).enumerate() {
            a.t = i as u64;
            a.offered += b.offered;
            a.started += b.started;
            a.completed += b.completed;
            a.errors += b.errors;
            a.dropped += b.dropped;
            a.bytes += b.bytes;
            a.bytes_by_start += b.bytes_by_start;
            a.p50_ms = a.p50_ms.max(b.p50_ms);
            a.p99_ms = a.p99_ms.max(b.p99_ms);
            a.max_ms = a.max_ms.max(b.max_ms);
        }
        merge_targets(&mut out.targets, &r.targets);
        out.gave_up |= r.gave_up;
        match (&mut out.wan, &r.wan) {
            (Some(a), Some(b)) => a.paths.extend(b.paths.iter().cloned()),
            (None, Some(b)) => out.wan = Some(b.clone()),
            _ => {}
        }
        out.generator.threads += r.generator.threads;
        out.generator.cpu_percent_max = out
            .generator
            .cpu_percent_max
            .max(r.generator.cpu_percent_max);
        for w in &r.generator.warnings {
            out.generator
                .warnings
                .push(format!("shard {}: {w}", r.shards.join(",")));
        }
        for (name, c) in &r.per_class {
            let e = out.per_class.entry(name.clone()).or_default();
            e.requests += c.requests;
            e.errors += c.errors;
            e.bytes += c.bytes;
        }
    }
    // Completions in the window: each shard's rate times its window, over the merged window.
    let in_window: f64 = results.iter().map(|r| r.completed_rps * r.duration_s).sum();
    out.completed_rps = round3(in_window / out.duration_s.max(1e-9));
    out.cache = CacheResult::new(
        out.cache.hits,
        out.cache.misses,
        out.cache.hit_bytes,
        out.cache.miss_bytes,
    );
    for name in out.per_class.keys().cloned().collect::<Vec<_>>() {
        let mut h = new_hist();
        for r in results {
            if let Some(s) = r.histograms.per_class.get(&name) {
                h.add(decode_hist(s)?)
                    .map_err(|e| BenchError::Merge(format!("{e:?}")))?;
            }
        }
        out.per_class
            .get_mut(&name)
            .expect("key from the map")
            .latency_ms = Percentiles::of(&h);
        out.histograms.per_class.insert(name, encode_hist(&h));
    }
    out.latency_ms = Latency {
        corrected: Percentiles::of(&corrected),
        uncorrected: Percentiles::of(&uncorrected),
    };
    out.lag_ms = Percentiles::of(&lag);
    out.connect_ms = Percentiles::of(&connect);
    out.ttfb_ms = Percentiles::of(&ttfb);
    out.page_ms = Percentiles::of(&page);
    out.redirected_ms = Percentiles::of(&redirected);
    let mut g = Generator {
        threads: out.generator.threads,
        cpu_percent_max: out.generator.cpu_percent_max,
        ..Default::default()
    };
    let shard_warnings = std::mem::take(&mut out.generator.warnings);
    self_check(&mut g, out.lag_ms.p99, !lag.is_empty());
    g.warnings.retain(|w| !w.starts_with("a generator thread"));
    g.warnings.extend(
        shard_warnings
            .into_iter()
            .filter(|w| !w.contains("lag p99")),
    );
    g.limited = !g.warnings.is_empty() || results.iter().any(|r| r.generator.limited);
    out.generator = g;
    out.histograms = Histograms {
        corrected: encode_hist(&corrected),
        uncorrected: encode_hist(&uncorrected),
        lag: encode_hist(&lag),
        connect: encode_hist(&connect),
        ttfb: encode_hist(&ttfb),
        page: encode_hist(&page),
        redirected: encode_hist(&redirected),
        per_class: out.histograms.per_class,
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result_with(values: &[u64]) -> RunResult {
        let mut h = new_hist();
        for v in values {
            h.record(*v).unwrap();
        }
        RunResult {
            schema: SCHEMA.into(),
            shards: vec!["0/2".into()],
            duration_s: 1.0,
            completed: values.len() as u64,
            completed_rps: values.len() as f64,
            latency_ms: Latency {
                corrected: Percentiles::of(&h),
                uncorrected: Percentiles::of(&h),
            },
            histograms: Histograms {
                corrected: encode_hist(&h),
                uncorrected: encode_hist(&h),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn merge_adds_histograms_exactly() {
        let a: Vec<u64> = (1..=1000).map(|i| i * 7).collect();
        let b: Vec<u64> = (1..=3000).map(|i| 50_000 + i * 13).collect();
        let m = merge(&[result_with(&a), result_with(&b)]).unwrap();
        let all: Vec<u64> = a.iter().chain(&b).copied().collect();
        let one = result_with(&all);
        assert_eq!(m.latency_ms.corrected, one.latency_ms.corrected);
        assert_eq!(
            decode_hist(&m.histograms.corrected).unwrap(),
            decode_hist(&one.histograms.corrected).unwrap()
        );
        assert_eq!(m.completed, 4000);
        assert_eq!(m.completed_rps, 4000.0);
        assert!(merge(&[]).is_err());
        let mut bad = result_with(&a);
        bad.schema = "other".into();
        assert!(merge(&[bad]).is_err());
    }
}
