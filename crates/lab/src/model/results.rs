//! What a lab run produced, as written to `results.json` (field names are stable; schema
//! `capstan-lab/1`).

use std::collections::BTreeMap;

use capstan_sim::closed::HttpPath;
use serde::{Deserialize, Serialize};

pub const SCHEMA: &str = "capstan-lab/1";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LabResults {
    pub schema: String,
    pub experiment: String,
    pub title: String,
    pub figure: String,
    pub about: String,
    /// The command line that produced this, as typed.
    pub command: String,
    pub versions: Versions,
    pub quick: bool,
    pub seed: u64,
    pub started_unix_ms: u64,
    pub wall_s: f64,
    pub engine: String,
    /// What a load level counts: "clients", "req/s", "× capacity", "sessions/s".
    pub x_label: String,
    pub levels: Vec<f64>,
    /// Measured window of each run, in seconds.
    pub duration_s: f64,
    pub repetitions: usize,
    /// `[load.headline]`: the paper's claims measured in interleaved rounds (absent when the
    /// experiment has none; then every run is one of `repetitions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headline: Option<HeadlineRecord>,
    /// Open loop relative to capacity: the capacity measured first (conn/s).
    pub capacity_rps: Option<f64>,
    pub series: Vec<SeriesResult>,
    pub paper: Option<PaperCompare>,
    pub findings: Vec<String>,
    pub warnings: Vec<String>,
    /// Which worlds ran: `live`, `sim` (then `series` are the simulator's), or `both`.
    #[serde(default = "live")]
    pub worlds: String,
    /// With both worlds: the simulator's run of the same experiment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimWorld>,
    /// With both worlds: lab and simulator side by side per series, with a verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agreement: Vec<Agreement>,
    /// With both worlds: the HTTP path measured on the cluster before the runs, which the
    /// simulator's run models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_path: Option<crate::model::results::HttpPathProbe>,
    /// Jones thesis Figs. 6–8 views: per-node CPU and disk, each node alone, gain against
    /// clients per node.
    #[serde(default)]
    pub figures: crate::model::paper::JonesFigures,
}

fn live() -> String {
    "live".into()
}
fn one_u32() -> u32 {
    1
}
fn one_usize() -> usize {
    1
}

/// How the headline's rounds ran: at each claim level, round r ran each of the level's series
/// once (one window each, back to back; the order rotates by one each round), on clusters that
/// stayed up for all rounds. Their windows are in the series' `runs` with `round` set.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadlineRecord {
    pub rounds: usize,
    /// The window of each run of a round, seconds.
    pub duration_s: f64,
    pub levels: Vec<HeadlineLevel>,
}

/// One claim level of the headline and the series (labels, round 0's order) run there.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadlineLevel {
    pub level: f64,
    pub series: Vec<String>,
}

/// The experiment as the simulator ran it (`capstan_sim::closed`), shaped as the lab's series.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SimWorld {
    /// The simulator's measured window per level (at least 30 s of virtual time).
    pub window_s: f64,
    /// Events simulated, and the wall time they took.
    pub events: u64,
    pub wall_s: f64,
    pub series: Vec<SeriesResult>,
}

/// One series in both worlds: `agree` when throughput, mean and p90 response time are within
/// `tolerance_pct` of the lab's at every level.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Agreement {
    pub series: String,
    pub tolerance_pct: f64,
    pub verdict: String,
    /// The largest difference, in words.
    pub worst: String,
    pub rows: Vec<AgreementRow>,
}

/// One load level in both worlds; differences are (sim − live) / live, in %.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgreementRow {
    pub level: f64,
    pub live_throughput: f64,
    pub sim_throughput: f64,
    pub throughput_diff_pct: f64,
    pub live_mean_ms: f64,
    pub sim_mean_ms: f64,
    pub mean_diff_pct: f64,
    pub live_p90_ms: f64,
    pub sim_p90_ms: f64,
    pub p90_diff_pct: f64,
    /// Each node's busiest-resource utilisation (0–1), mean over repetitions.
    pub live_util: Vec<f64>,
    pub sim_util: Vec<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Versions {
    pub capstan: String,
    pub build: String,
    pub os: String,
    pub cpus: usize,
    pub rustc: String,
}

/// One policy (in one variant) over every load level.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SeriesResult {
    pub label: String,
    pub policy: String,
    pub variant: Option<String>,
    pub nodes: usize,
    pub speeds: Vec<f64>,
    /// Cores of each node (the experiment's, or the variant's).
    #[serde(default = "one_u32")]
    pub cores: u32,
    /// The switch's worker threads.
    #[serde(default = "one_usize")]
    pub switch_threads: usize,
    pub points: Vec<Point>,
    pub runs: Vec<RunRecord>,
}

/// A load level averaged over repetitions.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Point {
    pub level: f64,
    pub runs: usize,
    /// Completed responses per second of the measured window (conn/s), mean over the runs.
    pub throughput_mean: f64,
    pub throughput_stdev: f64,
    /// Half-width of the 95 % confidence interval of `throughput_mean` (Student t over the
    /// runs; 0 with one run). It includes whatever moved the whole machine between runs, which
    /// a claim's paired interval cancels (`paper.claims`).
    #[serde(default)]
    pub throughput_ci95: f64,
    /// Mean response time, ms (from each request's intended start, as the percentiles).
    #[serde(default)]
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub errors: u64,
    pub util_min: f64,
    pub util_max: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunRecord {
    pub level: f64,
    /// The repetition, or for a headline window its round (the same number as `round`).
    pub repetition: usize,
    /// A headline window (`[load.headline]`): the interleaved round it ran in, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub round: Option<usize>,
    /// Open loop and sessions: the rate offered (requests or sessions per second).
    pub offered_rps: f64,
    pub duration_s: f64,
    /// Responses (any status) received, including those finishing in the drain period.
    pub completed: u64,
    /// Responses completed inside the window, per second of the window.
    pub throughput_rps: f64,
    pub errors: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub status: BTreeMap<String, u64>,
    pub dropped: u64,
    /// Connection attempts (SYNs) the generator made, and those abandoned after the connect
    /// timeout (S-Clients: the paper's request rate counts every attempt).
    #[serde(default)]
    pub connect_attempts: u64,
    #[serde(default)]
    pub connect_timeouts: u64,
    /// Started but still without a response when the drain period ended (overload).
    pub unfinished: u64,
    pub latency_ms: capstan_bench::Percentiles,
    pub per_class: BTreeMap<String, ClassLatency>,
    /// (latency ms, fraction of responses at or below it).
    pub cdf: Vec<[f64; 2]>,
    pub nodes: Vec<NodeRecord>,
    /// Lowest and highest busiest-resource utilisation over the nodes (0–1).
    pub util_min: f64,
    pub util_max: f64,
    /// The nodes' utilisation and the switch's weights and gathered loads, every T_gat (at most
    /// once a second).
    pub timeline: Vec<UtilSample>,
    pub cpu: CpuRecord,
    pub warnings: Vec<String>,
    /// `[workload.secure]`: the secure class's own figures (it is in the totals too, and in
    /// `per_class` under `secure: …` or its `/secure/…` paths).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure: Option<SecureRecord>,
}

/// The secure class of one run, sent over TLS, and the TLS handshakes that served it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SecureRecord {
    /// Secure clients (closed loop) or the secure rate (open loop, sessions) of this level.
    pub level: f64,
    pub completed: u64,
    pub throughput_rps: f64,
    pub errors: u64,
    pub latency_ms: capstan_bench::Percentiles,
    /// Handshakes the switch's TLS listener completed during the window, and of them resumed
    /// ones: each secure client (or session) makes one full handshake, then resumes.
    pub switch_handshakes: u64,
    pub switch_resumed: u64,
    /// Handshakes the nodes' TLS listeners completed during the window (real nodes only: the
    /// switch's pooled connections to them), and of them resumed ones.
    pub node_handshakes: u64,
    pub node_resumed: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClassLatency {
    pub requests: u64,
    pub errors: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeRecord {
    pub name: String,
    pub speed: f64,
    /// Requests the node finished in the window (its own count).
    pub served: u64,
    /// Requests the switch placed on it, per switch class.
    pub placed: BTreeMap<String, u64>,
    /// Load reports the switch gathered from it during the window (T_gat at work).
    #[serde(default)]
    pub load_reports: u64,
    /// `K/N` when the node holds one partition of the tree, as its load report says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
    pub cpu_util: f64,
    pub disk_util: f64,
    pub nic_util: f64,
    /// The highest of the three: the node's utilisation as CAP Fig. 10 plots it.
    pub util: f64,
}

/// One look at the cluster during a run: what the nodes say and what the switch believes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct UtilSample {
    pub t_s: f64,
    /// Each node's busiest-resource utilisation over its last load window (its own report).
    pub util: Vec<f64>,
    /// Each node's CPU and disk utilisation over the same window (Jones Fig. 6 plots them
    /// apart).
    #[serde(default)]
    pub cpu: Vec<f64>,
    #[serde(default)]
    pub disk: Vec<f64>,
    /// Each node's weight as the switch's policy uses it now (configured, or derived from
    /// gathered state by WRR_num / WRR_time).
    #[serde(default)]
    pub weights: Vec<u32>,
    /// Each node's utilisation as the switch last gathered it (what LARD on utilisation sees).
    #[serde(default)]
    pub gathered: Vec<f64>,
}

/// Real CPU used during the window, in percent of one core.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CpuRecord {
    pub switch_pct: f64,
    /// This process: the load generator's threads (and the lab's bookkeeping).
    pub generator_pct: f64,
    /// The busiest generator thread, as the load generator measured it.
    pub generator_thread_max_pct: f64,
    /// All node processes together (emulated nodes spend modelled time, so this is small).
    pub nodes_pct: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaperCompare {
    pub source: String,
    pub x: String,
    pub rows: Vec<PaperRow>,
    pub claims: Vec<ClaimRow>,
    pub notes: Vec<String>,
    /// The paper's reported numbers beside ours.
    #[serde(default)]
    pub measures: Vec<MeasureRow>,
    /// SWEB §3.3's maximum sustained rate for the experiment's set-up, beside what the runs
    /// imply.
    #[serde(default)]
    pub sweb_capacity: Option<CapacityRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MeasureRow {
    pub text: String,
    /// `ms`, `conn/s`, or `×` for a ratio of two policies.
    pub unit: String,
    pub paper: f64,
    pub ours: Option<f64>,
    pub ours_level: Option<f64>,
}

/// SWEB §3.3 (`r* = p / H`) next to the rates each series was measured to sustain.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CapacityRow {
    pub formula_rps: f64,
    pub seconds_per_request: f64,
    pub paper_rps: Option<f64>,
    pub sustained: Vec<Sustained>,
}

/// The highest offered rate a series kept up with (completed at least 95 % of it inside the
/// window, nothing lost), and the lowest it did not, if any.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sustained {
    pub series: String,
    pub kept_up_rps: Option<f64>,
    pub fell_behind_rps: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaperRow {
    pub series: String,
    pub level: f64,
    pub paper: f64,
    /// Ours at the same level, when we measured it.
    pub ours: Option<f64>,
}

/// A claim of the paper (`policy` x % more than `versus` at a level) beside ours, with ours'
/// 95 % interval and the verdict the interval gives.
///
/// Ours is estimated from pairs of windows at the measured level closest to the paper's: the
/// headline's rounds (`pairing` = `rounds`: both ran in the same round, seconds apart), else
/// repetitions of the same index (`repetitions`: each policy's ran one after the other), else
/// one window each (`single`: no interval). Per pair p = policy's conn/s / versus's; ours is
/// the geometric mean of the p, the interval exp(mean ± t · sd / √n) of their logs (Student t
/// over the pairs), both as percent more: 100 · (x − 1).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClaimRow {
    pub text: String,
    pub paper_percent: f64,
    /// Ours at the measured level closest to the paper's (the centre of the interval).
    pub ours_percent: Option<f64>,
    pub ours_level: Option<f64>,
    /// The 95 % interval of `ours_percent` (absent with fewer than two pairs).
    #[serde(default)]
    pub ours_ci95_low_percent: Option<f64>,
    #[serde(default)]
    pub ours_ci95_high_percent: Option<f64>,
    /// Each pair's percent more, in round (repetition) order.
    #[serde(default)]
    pub ours_pair_percents: Vec<f64>,
    /// `rounds`, `repetitions`, `single` (see above), or empty when not measured.
    #[serde(default)]
    pub pairing: String,
    /// `agrees` (the paper's value is inside our interval), `higher` (our whole interval is
    /// above it), `lower` (below it), `disagrees` (our whole interval has the opposite sign of
    /// the paper's effect), `no-interval` (one pair: not judged) or `not-measured`.
    #[serde(default)]
    pub verdict: String,
}

impl LabResults {
    pub fn series_named(&self, policy: &str, variant: Option<&str>) -> Option<&SeriesResult> {
        self.series
            .iter()
            .find(|s| s.policy == policy && s.variant.as_deref() == variant)
    }
}

impl SeriesResult {
    /// The point at the measured level closest to `level`.
    pub fn nearest(&self, level: f64) -> Option<&Point> {
        self.points
            .iter()
            .min_by(|a, b| (a.level - level).abs().total_cmp(&(b.level - level).abs()))
    }

    pub fn peak(&self) -> Option<&Point> {
        self.points
            .iter()
            .max_by(|a, b| a.throughput_mean.total_cmp(&b.throughput_mean))
    }
}

pub fn mean_stdev(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let m = xs.iter().sum::<f64>() / n;
    if xs.len() < 2 {
        return (m, 0.0);
    }
    let v = xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0);
    (m, v.sqrt())
}

pub fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

/// Each level's runs (its repetitions, or the headline's rounds) averaged.
pub fn points(levels: &[f64], runs: &[RunRecord]) -> Vec<Point> {
    levels
        .iter()
        .map(|&level| {
            let rs: Vec<&RunRecord> = runs.iter().filter(|r| r.level == level).collect();
            let tp: Vec<f64> = rs.iter().map(|r| r.throughput_rps).collect();
            let (m, sd) = mean_stdev(&tp);
            let ci = capstan_report::stats::ci95_half_width(&tp);
            let avg = |f: &dyn Fn(&RunRecord) -> f64| {
                mean_stdev(&rs.iter().map(|r| f(r)).collect::<Vec<_>>()).0
            };
            Point {
                level,
                runs: rs.len(),
                throughput_mean: round(m, 2),
                throughput_stdev: round(sd, 2),
                throughput_ci95: round(ci, 2),
                mean_ms: round(avg(&|r| r.latency_ms.mean), 3),
                p50_ms: round(avg(&|r| r.latency_ms.p50), 3),
                p90_ms: round(avg(&|r| r.latency_ms.p90), 3),
                p99_ms: round(avg(&|r| r.latency_ms.p99), 3),
                errors: rs.iter().map(|r| r.errors).sum(),
                util_min: round(avg(&|r| r.util_min), 4),
                util_max: round(avg(&|r| r.util_max), 4),
            }
        })
        .collect()
}

pub fn fmt_level(l: f64) -> String {
    if l.fract() == 0.0 {
        format!("{l:.0}")
    } else {
        format!("{l}")
    }
}

/// One probed file: its size, the lab's mean response and the model's time for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathSample {
    pub path: String,
    pub bytes: u64,
    pub requests: u64,
    pub lab_mean_ms: f64,
    pub model_ms: f64,
}

/// What the probe found, and the path the simulator was given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpPathProbe {
    pub small: PathSample,
    pub large: PathSample,
    /// Fixed part per request, ms.
    pub fixed_ms: f64,
    /// Part per megabyte (10^6 bytes) of answer, ms.
    pub per_mb_ms: f64,
}

impl HttpPathProbe {
    /// The path as the simulator takes it.
    pub fn path(&self) -> HttpPath {
        HttpPath {
            fixed_s: self.fixed_ms / 1e3,
            per_byte_s: self.per_mb_ms / 1e9,
        }
    }

    /// A line for the console and the report.
    pub fn summary(&self) -> String {
        format!(
            "HTTP path measured on the cluster: {:.2} ms per request + {:.2} ms per MB \
             ({} B: {:.2} ms in the lab vs {:.2} ms modelled; {} B: {:.2} vs {:.2} ms)",
            self.fixed_ms,
            self.per_mb_ms,
            self.small.bytes,
            self.small.lab_mean_ms,
            self.small.model_ms,
            self.large.bytes,
            self.large.lab_mean_ms,
            self.large.model_ms,
        )
    }
}
