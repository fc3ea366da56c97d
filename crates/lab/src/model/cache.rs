//! A cache experiment's schema: the experiment file (built-ins, contenders, the thesis's rows)
//! and its results (`results.json`: per contender the Web Polygraph result, the surrogate
//! metrics sampled while it ran, the better performer per phase and metric). Running is in
//! [`crate::run::cache`], the report in [`crate::report::cache`].

use std::path::PathBuf;

use capstan_bench::polygraph::PolyResult;
use capstan_cache::evict::EvictionKind;
use capstan_workload::polygraph::PolyFile;
use serde::{Deserialize, Serialize};

use crate::model::error::LabError;

/// The built-in cache experiments, in `--list` order: (name, TOML text).
pub const BUILTIN_CACHE: &[(&str, &str)] = &[
    (
        "cache-mixed-inc",
        include_str!("../../../../experiments/cache-mixed-inc.toml"),
    ),
    (
        "cache-best-effort",
        include_str!("../../../../experiments/cache-best-effort.toml"),
    ),
    (
        "cache-image",
        include_str!("../../../../experiments/cache-image.toml"),
    ),
    (
        "cache-html",
        include_str!("../../../../experiments/cache-html.toml"),
    ),
    (
        "cache-download",
        include_str!("../../../../experiments/cache-download.toml"),
    ),
];

/// The contenders a cache experiment knows; `capstan-POLICY` ([`capstan_policy`]) too.
pub const CONTENDERS: [&str; 3] = ["capstan", "varnish", "trafficserver"];

/// The eviction policy of a Capstan contender: `capstan` runs LRU (Varnish's and the
/// thesis's baseline), `capstan-gdsf`, `capstan-s3-fifo`, … the named policy of the cache.
pub fn capstan_policy(contender: &str) -> Option<&'static str> {
    let policy = match contender.strip_prefix("capstan") {
        Some("") => return Some(EvictionKind::Lru.name()),
        Some(rest) => rest.strip_prefix('-')?,
        None => return None,
    };
    EvictionKind::ALL
        .iter()
        .map(|k| k.name())
        .find(|name| *name == policy)
}

/// Whether `contender` names a known contender, else the one-line error listing them.
pub(crate) fn check_contender(contender: &str) -> Result<(), String> {
    if CONTENDERS.contains(&contender) || capstan_policy(contender).is_some() {
        return Ok(());
    }
    let policies: Vec<&str> = EvictionKind::ALL.iter().map(|k| k.name()).collect();
    Err(format!(
        "unknown contender {contender:?} (known: {}, and capstan-POLICY with POLICY one of {})",
        CONTENDERS.join(", "),
        policies.join(", ")
    ))
}

/// A cache experiment file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheExperiment {
    pub name: String,
    /// Always `"cache"`: tells a cache experiment file from a dispatching one.
    pub kind: String,
    pub title: String,
    pub figure: String,
    #[serde(default)]
    pub about: String,
    pub contenders: Vec<String>,
    /// Every contender's cache size (Capstan's memory tier, Varnish's malloc storage, Traffic
    /// Server's RAM cache and span), e.g. `"64MB"`. The workload's fill goals refer to it.
    pub cache_size: String,
    /// The thesis's cache size, which `--full` runs with (default: `cache_size`).
    #[serde(default)]
    pub full_cache_size: Option<String>,
    /// Worker threads of each proxy (Capstan `--threads`, Varnish `thread_pools`, Traffic
    /// Server `exec_thread.limit`).
    #[serde(default = "two")]
    pub proxy_threads: usize,
    /// The default run's time scale (phase durations × this); `--full` runs 1.
    pub time_scale: f64,
    /// The origin's think time × this.
    #[serde(default = "unit")]
    pub think_scale: f64,
    pub quick: CacheQuick,
    pub workload: toml::Table,
    #[serde(default, rename = "paper")]
    pub paper: Vec<PaperRow>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheQuick {
    pub time_scale: f64,
    pub cache_size: String,
    #[serde(default = "unit")]
    pub think_scale: f64,
}

/// A number the thesis reports for a contender and phase (its Table 4.6 / §4.4 text).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperRow {
    pub contender: String,
    pub phase: String,
    pub throughput_rps: Option<f64>,
    pub mbytes_s: Option<f64>,
    pub response_ms: Option<f64>,
    pub hit_ms: Option<f64>,
    pub miss_ms: Option<f64>,
    /// Percentages, as the thesis writes them.
    pub dhr: Option<f64>,
    pub offered_dhr: Option<f64>,
    pub bhr: Option<f64>,
    pub offered_bhr: Option<f64>,
    #[serde(default)]
    pub source: String,
}

fn two() -> usize {
    2
}
fn unit() -> f64 {
    1.0
}

impl CacheExperiment {
    pub fn parse(text: &str, origin: &str) -> Result<CacheExperiment, LabError> {
        let e: CacheExperiment = crate::model::experiment::parse_toml(text, origin)?;
        if e.kind != "cache" {
            return Err(LabError::Experiment(format!(
                "{origin}: kind must be \"cache\""
            )));
        }
        for c in &e.contenders {
            check_contender(c).map_err(|why| LabError::Experiment(format!("{origin}: {why}")))?;
        }
        e.workload(Mode::Default)
            .map_err(|m| LabError::Experiment(format!("{origin}: {m}")))?;
        Ok(e)
    }

    /// A built-in cache experiment by name, or a file that says `kind = "cache"`; `None` when
    /// the name is neither (a dispatching experiment).
    pub fn find(name_or_path: &str) -> Option<Result<CacheExperiment, LabError>> {
        if let Some((n, text)) = BUILTIN_CACHE.iter().find(|(n, _)| *n == name_or_path) {
            return Some(Self::parse(text, &format!("experiments/{n}.toml")));
        }
        let text = std::fs::read_to_string(name_or_path).ok()?;
        let kind = toml::from_str::<toml::Table>(&text)
            .ok()
            .and_then(|t| t.get("kind").and_then(|k| k.as_str()).map(str::to_string));
        (kind.as_deref() == Some("cache")).then(|| Self::parse(&text, name_or_path))
    }

    /// The workload for a mode, with its cache size and time scale set.
    pub fn workload(&self, mode: Mode) -> Result<capstan_workload::PolyWorkload, String> {
        let (scale, cache) = self.scale_and_cache(mode);
        let mut table = self.workload.clone();
        if table.contains_key("cache_size") || table.contains_key("time_scale") {
            return Err(
                "[workload]: cache_size and time_scale are the experiment's, not the \
                        workload's"
                    .into(),
            );
        }
        table.insert("cache_size".into(), toml::Value::String(cache.to_string()));
        let mut f: PolyFile = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| format!("[workload]: {}", e.message().trim()))?;
        f.time_scale = scale;
        f.resolve().map_err(|e| format!("[workload]: {e}"))
    }

    fn scale_and_cache(&self, mode: Mode) -> (f64, &str) {
        match mode {
            Mode::Quick => (self.quick.time_scale, &self.quick.cache_size),
            Mode::Default => (self.time_scale, &self.cache_size),
            Mode::Full => (
                1.0,
                self.full_cache_size.as_ref().unwrap_or(&self.cache_size),
            ),
        }
    }

    pub(crate) fn think_scale(&self, mode: Mode) -> f64 {
        match mode {
            Mode::Quick => self.quick.think_scale,
            _ => self.think_scale,
        }
    }
}

/// How long a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Quick,
    Default,
    Full,
}

/// What `capstan lab` passes to a cache experiment.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    pub mode: Mode,
    /// Replaces the experiment's contender list.
    pub contenders: Option<Vec<String>>,
    pub exe: PathBuf,
    pub work_dir: PathBuf,
    pub command: String,
}

/// One contender's run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ContenderResult {
    pub name: String,
    pub version: String,
    /// Why it did not run.
    pub skipped: Option<String>,
    /// How it was set up (cache size, storage, threads).
    pub setup: String,
    pub result: Option<PolyResult>,
    /// CPU seconds of the proxy's processes over the workload, and per 1,000 responses.
    pub proxy_cpu_s: Option<f64>,
    pub proxy_cpu_ms_per_1k: Option<f64>,
    /// Resident memory of the proxy's processes at the end, MB.
    pub proxy_rss_mb: Option<f64>,
    /// CPU, memory and disk I/O of the proxy's processes, sampled every second.
    #[serde(default)]
    pub surrogates: Option<Surrogates>,
}

/// A cache experiment's results (`results.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CacheResults {
    pub name: String,
    pub title: String,
    pub figure: String,
    pub mode: String,
    pub command: String,
    pub cache_bytes: u64,
    pub time_scale: f64,
    pub think_scale: f64,
    pub load_at_start: String,
    pub contenders: Vec<ContenderResult>,
    pub paper: Vec<PaperRow>,
    /// Better performer per phase and metric, beside the thesis's call.
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
    pub findings: Vec<String>,
}

/// What is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Throughput,
    HitMs,
    MissMs,
    Dhr,
    Bhr,
    CpuPer1k,
}

impl Metric {
    pub const ALL: [Metric; 6] = [
        Metric::Throughput,
        Metric::HitMs,
        Metric::MissMs,
        Metric::Dhr,
        Metric::Bhr,
        Metric::CpuPer1k,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Metric::Throughput => "throughput resp/s",
            Metric::HitMs => "hit response ms",
            Metric::MissMs => "miss response ms",
            Metric::Dhr => "DHR %",
            Metric::Bhr => "BHR %",
            Metric::CpuPer1k => "CPU ms/1k resp",
        }
    }

    pub(crate) fn higher_is_better(self) -> bool {
        matches!(self, Metric::Throughput | Metric::Dhr | Metric::Bhr)
    }

    /// Our value for a contender and phase; `None` when the phase had nothing to measure it
    /// by (no hits for the hit time, no samples for the CPU).
    pub(crate) fn ours(self, c: &ContenderResult, phase: &str) -> Option<f64> {
        let p = c.result.as_ref()?.phases.iter().find(|p| p.name == phase)?;
        if p.responses == 0 {
            return None;
        }
        match self {
            Metric::Throughput => Some(p.throughput_rps),
            Metric::HitMs => (p.hits > 0).then_some(p.hit_ms.mean),
            Metric::MissMs => (p.misses > 0).then_some(p.miss_ms.mean),
            Metric::Dhr => Some(100.0 * p.dhr),
            Metric::Bhr => (p.hit_bytes + p.miss_bytes > 0).then_some(100.0 * p.bhr),
            Metric::CpuPer1k => {
                c.surrogates
                    .as_ref()?
                    .phases
                    .iter()
                    .find(|s| s.phase == phase)?
                    .cpu_ms_per_1k
            }
        }
    }

    pub(crate) fn thesis(self, row: &PaperRow) -> Option<f64> {
        match self {
            Metric::Throughput => row.throughput_rps,
            Metric::HitMs => row.hit_ms,
            Metric::MissMs => row.miss_ms,
            Metric::Dhr => row.dhr,
            Metric::Bhr => row.bhr,
            Metric::CpuPer1k => None,
        }
    }
}

/// Who did better among some contenders' values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    /// The better contender; `None`: level (within 2 %) or fewer than two values.
    pub better: Option<String>,
    /// How much better than the runner-up, % (absent when the runner-up's value is 0).
    pub by_percent: Option<f64>,
    /// Whether there were two values to compare.
    pub compared: bool,
}

impl Call {
    pub(crate) fn text(&self) -> String {
        match (&self.better, self.by_percent) {
            (_, _) if !self.compared => "–".into(),
            (None, _) => "level".into(),
            (Some(b), Some(by)) if by < 10.0 => format!("{b} by {by:.1} %"),
            (Some(b), Some(by)) => format!("{b} by {by:.0} %"),
            (Some(b), None) => b.clone(),
        }
    }
}

/// One row of the table: a phase and a metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    pub phase: String,
    pub metric: String,
    /// Our value per contender that measured it.
    pub values: Vec<(String, f64)>,
    pub ours: Call,
    /// The thesis's call among the contenders its rows give numbers for (two or more).
    pub thesis: Option<Call>,
    /// `"agree"`, `"disagree"`, or why the thesis's call cannot be checked.
    pub against_thesis: Option<String>,
}

/// One sampling period of a proxy's processes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SurrogateSample {
    /// Seconds since the workload started, at the end of the period.
    pub t_s: f64,
    /// CPU used during the period, % of one core (200 = two cores busy).
    pub cpu_percent: f64,
    /// Resident memory of every process of the tree at the end of the period, MB.
    pub rss_mb: f64,
    /// Bytes read from / written to the storage layer during the period (absent: unreadable).
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
    /// Read / write system calls during the period (sockets included: `/proc/PID/io` does
    /// not tell files from sockets).
    pub read_ops: Option<u64>,
    pub write_ops: Option<u64>,
    /// Processes in the tree.
    pub processes: u32,
    /// The whole disks' reads and writes during the period, per second (`/proc/diskstats`,
    /// machine-wide; absent: unreadable).
    #[serde(default)]
    pub disk_read_bytes_s: Option<f64>,
    #[serde(default)]
    pub disk_write_bytes_s: Option<f64>,
    #[serde(default)]
    pub disk_read_ops_s: Option<f64>,
    #[serde(default)]
    pub disk_write_ops_s: Option<f64>,
}

/// A phase's summary of the samples whose period's middle falls in it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseSurrogates {
    pub phase: String,
    pub samples: u32,
    /// CPU seconds over the phase's samples.
    pub cpu_s: f64,
    pub mean_cpu_percent: f64,
    pub max_cpu_percent: f64,
    pub max_rss_mb: f64,
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
    pub read_ops: Option<u64>,
    pub write_ops: Option<u64>,
    /// CPU milliseconds per 1,000 responses of the phase.
    pub cpu_ms_per_1k: Option<f64>,
    /// Means over the phase's samples of the whole disks' rates (`/proc/diskstats`).
    #[serde(default)]
    pub disk_read_mb_s: Option<f64>,
    #[serde(default)]
    pub disk_write_mb_s: Option<f64>,
    #[serde(default)]
    pub disk_read_ops_s: Option<f64>,
    #[serde(default)]
    pub disk_write_ops_s: Option<f64>,
}

/// A contender's time series and its per-phase summary.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Surrogates {
    pub period_s: f64,
    pub samples: Vec<SurrogateSample>,
    pub phases: Vec<PhaseSurrogates>,
    /// Fields that could not be read, with the reason (e.g. `/proc/PID/io` without root).
    pub unreadable: Vec<String>,
    /// The block devices whose `/proc/diskstats` counters the disk rates sum.
    #[serde(default)]
    pub disk_devices: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capstan_contender_names_its_eviction_policy() {
        assert_eq!(capstan_policy("capstan"), Some("lru"));
        assert_eq!(capstan_policy("capstan-gdsf"), Some("gdsf"));
        assert_eq!(capstan_policy("capstan-s3-fifo"), Some("s3-fifo"));
        for not in ["capstan-", "capstan-fifo", "capstangdsf", "varnish", "gdsf"] {
            assert_eq!(capstan_policy(not), None, "{not}");
        }
        assert!(check_contender("trafficserver").is_ok());
        assert!(check_contender("capstan-lfu-da").is_ok());
        let why = check_contender("capstan-arc").unwrap_err();
        assert!(
            why.contains("\"capstan-arc\"")
                && why.contains("capstan-POLICY")
                && why.contains("sieve"),
            "{why}"
        );
    }
}
