//! Experiment files: what a lab run starts (nodes, switch, workload, load schedule) and what the
//! paper measured for comparison. The built-in experiments are the TOML files in `experiments/`,
//! compiled in so `capstan lab --list` works from any directory.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::error::LabError;

/// The built-in experiments, in the order `--list` shows them: (name, TOML text).
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "switch-capacity",
        include_str!("../../../../experiments/switch-capacity.toml"),
    ),
    (
        "static",
        include_str!("../../../../experiments/static.toml"),
    ),
    (
        "mix-8020",
        include_str!("../../../../experiments/mix-8020.toml"),
    ),
    (
        "mix-6040",
        include_str!("../../../../experiments/mix-6040.toml"),
    ),
    (
        "scalability",
        include_str!("../../../../experiments/scalability.toml"),
    ),
    (
        "heterogeneous",
        include_str!("../../../../experiments/heterogeneous.toml"),
    ),
    (
        "cap-prototype",
        include_str!("../../../../experiments/cap-prototype.toml"),
    ),
    (
        "overload",
        include_str!("../../../../experiments/overload.toml"),
    ),
    (
        "sclient-overload",
        include_str!("../../../../experiments/sclient-overload.toml"),
    ),
    (
        "sclient-bursty",
        include_str!("../../../../experiments/sclient-bursty.toml"),
    ),
    (
        "sessions",
        include_str!("../../../../experiments/sessions.toml"),
    ),
    (
        "sweb-skewed",
        include_str!("../../../../experiments/sweb-skewed.toml"),
    ),
    (
        "sweb-sizes",
        include_str!("../../../../experiments/sweb-sizes.toml"),
    ),
    (
        "node-alone",
        include_str!("../../../../experiments/node-alone.toml"),
    ),
    (
        "mix-6040-2nodes",
        include_str!("../../../../experiments/mix-6040-2nodes.toml"),
    ),
    (
        "smp-vs-up",
        include_str!("../../../../experiments/smp-vs-up.toml"),
    ),
    (
        "switch-threads",
        include_str!("../../../../experiments/switch-threads.toml"),
    ),
];

/// The experiment `capstan lab` runs without arguments.
pub const DEFAULT: &str = "mix-6040";

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    pub name: String,
    pub title: String,
    /// The figure of a paper this experiment rebuilds.
    pub figure: String,
    #[serde(default)]
    pub about: String,
    #[serde(default = "one")]
    pub seed: u64,
    pub nodes: Nodes,
    pub switch: SwitchPlan,
    pub workload: Workload,
    pub load: Load,
    #[serde(default)]
    pub quick: Quick,
    /// Alternative set-ups run for every policy (node counts, speeds, workloads).
    #[serde(default, rename = "variant")]
    pub variants: Vec<Variant>,
    pub paper: Option<Paper>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Nodes {
    #[serde(default = "four")]
    pub count: usize,
    #[serde(default = "one_u32")]
    pub cores: u32,
    /// Speed of each node, cycled when shorter than `count` (1.0 = the CAP paper's node).
    #[serde(default = "unit_speed")]
    pub speeds: Vec<f64>,
    #[serde(default = "default_tree")]
    pub tree: String,
    pub files: Option<usize>,
    pub cpu_light_ms: Option<f64>,
    pub cpu_med_ms: Option<f64>,
    pub disk_load_ms: Option<f64>,
    pub cache_fraction: Option<f64>,
    /// Worker threads per node process. One is plenty for an emulated node (its time is
    /// modelled) and leaves this machine's cores to the switch and the load generator.
    #[serde(default = "one_usize")]
    pub threads: usize,
    /// Node K of N holds only the files whose path hashes to K and reads the others over NFS
    /// (`capstan origin --partition K/N`, SWEB §3.2); false: every node holds the whole tree.
    #[serde(default)]
    pub partition: bool,
    /// How much more a remote (NFS) read costs than a local one (`--remote-penalty`).
    pub remote_penalty: Option<f64>,
    /// Settings of `capstan origin`'s configuration file, written as they are and passed with
    /// `--config` (node capacity under `node`, `node.disk`, `node.nic`; see `capstan origin
    /// --help`); the flags the lab sets win.
    pub origin: Option<toml::Table>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchPlan {
    pub policies: Vec<String>,
    #[serde(default = "one_usize")]
    pub threads: usize,
    /// T_gat: how often the switch fetches every node's load report.
    #[serde(default = "default_gather")]
    pub load_interval: String,
    /// Policy parameters by policy name, e.g. `[switch.params.lard] t_high = 20`.
    #[serde(default)]
    pub params: BTreeMap<String, toml::Table>,
    /// Policies told every object's size: policy name → the parameter that gets the tree's
    /// `{ path = bytes }` table (e.g. `sweb = "sizes"`, the broker's oracle of file sizes).
    #[serde(default)]
    pub tree_sizes: BTreeMap<String, String>,
    /// Request classes and rules, written into the switch configuration as they are; none gives
    /// the switch's built-in four classes (static, disk, cpu, cpu-disk).
    #[serde(default, rename = "class")]
    pub classes: Vec<toml::Table>,
    #[serde(default, rename = "rule")]
    pub rules: Vec<toml::Table>,
    pub default_class: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// The tree's files at their weights plus the `dynamic` entries (a WebStone file list).
    Mix,
    /// One path, every request.
    Url,
    /// The CAP paper's Table 1 sessions over the tree's objects.
    Sessions,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    pub kind: WorkloadKind,
    pub url: Option<String>,
    #[serde(default)]
    pub dynamic: Vec<Entry>,
    /// Sessions: Zipf exponent of object popularity (0 = uniform).
    #[serde(default)]
    pub zipf: f64,
    /// Sessions: multiplies the Table 1 think times so a short run sees whole sessions.
    #[serde(default = "one_f64")]
    pub think_scale: f64,
    /// Sessions: parallel connections for a page's embedded objects.
    #[serde(default = "two")]
    pub parallel: usize,
    /// The CAP paper's secure class sent for real over TLS (`[workload.secure]`).
    pub secure: Option<SecureClass>,
}

/// `[workload.secure]`: a share of the load is the secure class, sent over HTTPS to a TLS
/// listener of the switch (the lab's test certificate), as `/secure/…` variants of the
/// workload's requests. With real nodes (`[nodes.origin] resources = "real"`) the switch also
/// reaches the nodes over TLS, so the handshakes and the encryption at the nodes are real too;
/// emulated nodes pay the CAP paper's modelled SSL costs for `/secure/…` as before.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecureClass {
    /// The secure share of each load level (0 < share < 1): of the clients (closed loop), of
    /// the request rate (open loop) or of the session rate (sessions). The secure clients run
    /// beside the others, on connections of their own.
    pub share: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    pub path: String,
    pub weight: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EngineKind {
    Closed,
    Open,
    Sessions,
    /// Banga & Druschel's S-Clients: a level is an offered connection rate R (or a multiple of
    /// the capacity), generated by D = R·T sockets whose attempts are abandoned after T
    /// (500 ms, the paper's) — `capstan bench --sockets`.
    Sclient,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Load {
    pub engine: EngineKind,
    /// Closed: clients. Open: requests/s, or multiples of the measured capacity when
    /// `relative_to_capacity`. Sessions: new sessions per second.
    pub levels: Vec<f64>,
    /// Open loop: levels are factors of a capacity measured first by a closed-loop run.
    #[serde(default)]
    pub relative_to_capacity: bool,
    #[serde(default = "sixteen")]
    pub calibrate_clients: usize,
    pub duration: String,
    #[serde(default = "default_warmup")]
    pub warmup: String,
    /// HTTP/1.1 keep-alive; WebStone 2.5 (the thesis) opens a connection per request.
    #[serde(default)]
    pub keepalive: bool,
    #[serde(default = "one_usize")]
    pub repetitions: usize,
    /// Closed loop: mean of an exponential think time between requests, in ms (0 = none, as
    /// WebStone).
    #[serde(default)]
    pub think_ms: f64,
    #[serde(default = "one_usize")]
    pub generator_threads: usize,
    #[serde(default = "default_timeout")]
    pub timeout: String,
    /// After a window, how long requests still in flight may finish (and count in the response
    /// times): long where a queue must drain, as in SWEB's tests, which dropped nothing.
    #[serde(default = "default_drain")]
    pub drain: String,
    /// Open loop: on/off bursts (`peak` × the rate for `fraction` of each `period_s`); SWEB's
    /// clients launched each second's requests at once.
    pub burst: Option<capstan_workload::Burst>,
    /// The paper's claims measured in interleaved rounds, each with a 95 % interval.
    pub headline: Option<Headline>,
}

/// `[load.headline]`: the paper's claims (`[[paper.claim]]`) measured in interleaved rounds, so
/// that each claim's ratio comes with a 95 % interval. At each claim's level, round r runs every
/// contender of the claims there once, one window each, back to back, on clusters started once
/// for all rounds (the order rotates by one each round); the other runs of the experiment skip
/// those (policy, level) pairs. The interval is Student t over the rounds' log ratios
/// (`capstan_report::PairedRatio`): see docs/lab.md, "How sure is a claim".
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Headline {
    /// Rounds at every claim level (at least 2: one round has no interval).
    pub rounds: usize,
    /// The window of each run of a round (default: `load.duration`).
    pub duration: Option<String>,
}

/// What `--quick` changes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quick {
    pub levels: Option<Vec<f64>>,
    pub duration: Option<String>,
    pub warmup: Option<String>,
    pub policies: Option<Vec<String>>,
    pub variants: Option<Vec<String>>,
    pub repetitions: Option<usize>,
    /// The period of `load.burst` in the short form (its levels are too short for the full
    /// run's period to show a burst in each).
    pub burst_period_s: Option<f64>,
    /// `load.headline.rounds` in the short form.
    pub headline_rounds: Option<usize>,
    /// `load.headline.duration` in the short form.
    pub headline_duration: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Variant {
    pub name: String,
    pub nodes: Option<usize>,
    pub speeds: Option<Vec<f64>>,
    pub tree: Option<String>,
    pub dynamic: Option<Vec<Entry>>,
    /// Cores of every node in this variant (Jones Fig. 9: 2 nodes × 2 cores vs 4 × 1).
    pub cores: Option<u32>,
    /// Worker threads of the switch in this variant (Jones §4.4: the switch SMP vs UP).
    pub switch_threads: Option<usize>,
    /// Only node K (1-based) of `[nodes]`, alone behind the switch (Jones Fig. 7: each node
    /// measured by itself); its name and speed are node K's.
    pub alone: Option<usize>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Paper {
    pub source: String,
    /// What the paper's x axis counts ("clients", "offered req/s", …).
    #[serde(default)]
    pub x: String,
    #[serde(default, rename = "series")]
    pub series: Vec<PaperSeries>,
    #[serde(default, rename = "claim")]
    pub claims: Vec<Claim>,
    /// Differences of set-up worth knowing when comparing.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Numbers the paper reports (response times, ratios), beside ours.
    #[serde(default, rename = "measure")]
    pub measures: Vec<Measure>,
    /// SWEB §3.3's maximum sustained request rate, computed for the experiment's set-up.
    pub sweb_capacity: Option<SwebCapacity>,
    /// Jones Fig. 6: one node's CPU and disk utilisation samples (%) at a load level.
    #[serde(default, rename = "utilisation")]
    pub utilisation: Vec<crate::model::paper::PaperUtilisation>,
    /// Jones Fig. 7: each node measured alone under the same load.
    #[serde(default, rename = "node_alone")]
    pub nodes_alone: Vec<crate::model::paper::PaperNodeAlone>,
    /// Jones Fig. 8: where `policy`'s gain over `versus` peaks against clients per node.
    pub ratio: Option<crate::model::paper::RatioView>,
    /// One variant's throughput over another's (Jones Fig. 9: UP 4×1 over SMP 2×2).
    #[serde(default, rename = "variant_ratio")]
    pub variant_ratios: Vec<crate::model::paper::VariantRatio>,
}

/// What a [`Measure`] reads from a series' point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// Mean response time, ms.
    MeanMs,
    P50Ms,
    P90Ms,
    P99Ms,
    /// Completed responses per second of the window.
    Throughput,
}

impl Metric {
    pub fn of(self, p: &crate::model::results::Point) -> f64 {
        match self {
            Metric::MeanMs => p.mean_ms,
            Metric::P50Ms => p.p50_ms,
            Metric::P90Ms => p.p90_ms,
            Metric::P99Ms => p.p99_ms,
            Metric::Throughput => p.throughput_mean,
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            Metric::Throughput => "conn/s",
            _ => "ms",
        }
    }
}

/// A number the paper reports for `policy` at load level `at`: the metric itself, or with
/// `versus` the ratio of `policy`'s to `versus`'s.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measure {
    pub text: String,
    pub policy: String,
    pub versus: Option<String>,
    pub metric: Metric,
    pub at: f64,
    pub value: f64,
    pub variant: Option<String>,
}

/// The inputs of SWEB's §3.3 analysis: `p` nodes, mean file size F, local and remote disk
/// bandwidths b1 and b2, redirection probability d, preprocessing A and redirection O overheads.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwebCapacity {
    pub nodes: usize,
    pub file_bytes: f64,
    pub b1_mb_s: f64,
    pub b2_mb_s: f64,
    #[serde(default)]
    pub redirect_probability: f64,
    #[serde(default)]
    pub preprocess_ms: f64,
    #[serde(default)]
    pub redirect_ms: f64,
    /// The rate the paper prints for its example.
    pub paper_rps: Option<f64>,
}

impl SwebCapacity {
    /// The formula's inputs, for the simulator's implementation of it (the one `capstan sim
    /// sweb-sizes` uses, with how the garbled scan is read).
    pub fn inputs(&self) -> capstan_sim::sweb::analysis::Inputs {
        capstan_sim::sweb::analysis::Inputs {
            nodes: self.nodes,
            file_bytes: self.file_bytes,
            b1_mb_s: self.b1_mb_s,
            b2_mb_s: self.b2_mb_s,
            redirect_probability: self.redirect_probability,
            preprocess_ms: self.preprocess_ms,
            redirect_ms: self.redirect_ms,
        }
    }

    fn validate(&self) -> Result<(), String> {
        let positive = [self.file_bytes, self.b1_mb_s, self.b2_mb_s];
        if self.nodes == 0 || positive.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
            return Err(
                "paper.sweb_capacity: nodes, file_bytes, b1_mb_s and b2_mb_s must be positive"
                    .into(),
            );
        }
        let rest = [
            self.redirect_probability,
            self.preprocess_ms,
            self.redirect_ms,
        ];
        if rest.iter().any(|x| !(x.is_finite() && *x >= 0.0)) || self.redirect_probability > 1.0 {
            return Err("paper.sweb_capacity: redirect_probability (0–1), preprocess_ms and redirect_ms must be ≥ 0".into());
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperSeries {
    pub policy: String,
    pub variant: Option<String>,
    /// (x, conn/s) pairs as printed in the paper.
    pub points: Vec<[f64; 2]>,
}

/// A relative claim of the paper, recomputed from our data: `policy` delivered `percent` % more
/// than `versus` at load level `at`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Claim {
    pub text: String,
    pub policy: String,
    pub versus: String,
    pub at: f64,
    pub percent: f64,
    pub variant: Option<String>,
}

fn one() -> u64 {
    1
}
fn one_u32() -> u32 {
    1
}
fn one_usize() -> usize {
    1
}
fn one_f64() -> f64 {
    1.0
}
fn two() -> usize {
    2
}
fn four() -> usize {
    4
}
fn sixteen() -> usize {
    16
}
fn unit_speed() -> Vec<f64> {
    vec![1.0]
}
fn default_tree() -> String {
    "webstone-2000".into()
}
fn default_gather() -> String {
    "1s".into()
}
fn default_warmup() -> String {
    "1s".into()
}
fn default_timeout() -> String {
    "10s".into()
}
fn default_drain() -> String {
    "2s".into()
}

/// Deserialises an experiment file of any kind; a bad one is one line naming the file and the
/// line of the mistake.
pub(crate) fn parse_toml<T: serde::de::DeserializeOwned>(
    text: &str,
    origin: &str,
) -> Result<T, LabError> {
    toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let at = line.map(|l| format!(":{l}")).unwrap_or_default();
        LabError::Experiment(format!("{origin}{at}: {}", e.message().trim()))
    })
}

pub fn parse_duration(what: &str, s: &str) -> Result<Duration, LabError> {
    capstan_bench::parse_duration(s).map_err(|e| LabError::Experiment(format!("{what}: {e}")))
}

impl Experiment {
    /// Parses and checks an experiment; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Experiment, LabError> {
        let exp: Experiment = parse_toml(text, origin)?;
        exp.validate()
            .map_err(|m| LabError::Experiment(format!("{origin}: {m}")))?;
        Ok(exp)
    }

    /// A built-in experiment by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> Result<Experiment, LabError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Experiment::parse(text, &format!("experiments/{name_or_path}.toml"));
        }
        let path = Path::new(name_or_path);
        if !path.exists() {
            let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
            return Err(LabError::Experiment(format!(
                "no experiment {name_or_path:?}: not a built-in ({}) and no such file",
                names.join(", ")
            )));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| LabError::Experiment(format!("cannot read {name_or_path}: {e}")))?;
        Experiment::parse(&text, name_or_path)
    }

    /// The command line's `--secure-tls SHARE` and `--real-nodes` on a loaded experiment: a
    /// share of the load as the secure class over TLS (`[workload.secure]`), and nodes that
    /// spend real resources (`[nodes.origin] resources = "real"`). Checked as the file is.
    pub fn with_overrides(
        mut self,
        secure_share: Option<f64>,
        real_nodes: bool,
    ) -> Result<Experiment, LabError> {
        if let Some(share) = secure_share {
            self.workload.secure = Some(SecureClass { share });
        }
        if real_nodes {
            self.nodes
                .origin
                .get_or_insert_with(toml::Table::new)
                .insert("resources".into(), "real".into());
        }
        self.validate()
            .map_err(|m| LabError::Experiment(format!("{}: {m}", self.name)))?;
        Ok(self)
    }

    fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() {
            return Err("name must not be empty".into());
        }
        check_policies(&self.switch.policies, &self.switch.params)?;
        if let Some(q) = &self.quick.policies {
            check_policies(q, &self.switch.params)?;
        }
        for p in self
            .switch
            .params
            .keys()
            .chain(self.switch.tree_sizes.keys())
        {
            if capstan_core::policy::lookup(p).is_none() {
                return Err(format!("[switch.params.{p}]: unknown policy {p:?}"));
            }
        }
        if self.nodes.count == 0 || self.nodes.count > 64 {
            return Err(format!(
                "nodes.count must be 1..=64, got {}",
                self.nodes.count
            ));
        }
        check_speeds(&self.nodes.speeds)?;
        if self.nodes.cores == 0 || self.nodes.threads == 0 || self.switch.threads == 0 {
            return Err("cores and threads must be at least 1".into());
        }
        self.nodes
            .tree
            .parse::<capstan_workload::TreeKind>()
            .map_err(|e| format!("nodes.tree: {e}"))?;
        parse_duration("switch.load_interval", &self.switch.load_interval)
            .map_err(|e| e.to_string())?;
        if self.load.levels.is_empty() {
            return Err("load.levels must list at least one level".into());
        }
        check_levels(&self.load.levels)?;
        if let Some(l) = &self.quick.levels {
            check_levels(l)?;
        }
        self.check_durations()?;
        if let Some(b) = &self.load.burst {
            if self.load.engine != EngineKind::Open {
                return Err("load.burst needs load.engine = \"open\"".into());
            }
            b.validate().map_err(|e| format!("load.burst: {e}"))?;
        }
        if let Some(p) = self.quick.burst_period_s {
            if self.load.burst.is_none() || !(p.is_finite() && p > 0.0) {
                return Err(format!(
                    "quick.burst_period_s needs load.burst and a positive period, got {p}"
                ));
            }
        }
        if let Some(r) = self.nodes.remote_penalty {
            if !(r.is_finite() && r >= 0.0) {
                return Err(format!("nodes.remote_penalty must be ≥ 0, got {r}"));
            }
        }
        if let Some(p) = &self.paper {
            if let Some(c) = &p.sweb_capacity {
                c.validate()?;
            }
        }
        if self.load.repetitions == 0
            || self.load.generator_threads == 0
            || self.quick.repetitions == Some(0)
        {
            return Err(
                "load.repetitions, quick.repetitions and load.generator_threads must be at least 1"
                    .into(),
            );
        }
        if !(self.load.think_ms >= 0.0 && self.load.think_ms.is_finite()) {
            return Err("load.think_ms must be ≥ 0".into());
        }
        self.check_workload()?;
        self.check_variants()?;
        self.check_headline()
    }
}

impl Experiment {
    /// Every duration parses; the window is positive.
    fn check_durations(&self) -> Result<(), String> {
        if parse_duration("load.duration", &self.load.duration)
            .map_err(|e| e.to_string())?
            .is_zero()
        {
            return Err("load.duration must be positive".into());
        }
        parse_duration("load.warmup", &self.load.warmup).map_err(|e| e.to_string())?;
        parse_duration("load.timeout", &self.load.timeout).map_err(|e| e.to_string())?;
        parse_duration("load.drain", &self.load.drain).map_err(|e| e.to_string())?;
        for (what, d) in [
            ("quick.duration", &self.quick.duration),
            ("quick.warmup", &self.quick.warmup),
        ] {
            if let Some(d) = d {
                parse_duration(what, d).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    }

    /// The workload against the load engine: sessions with sessions, a URL for `url`, the
    /// secure class's share and engines.
    fn check_workload(&self) -> Result<(), String> {
        match (self.workload.kind, self.load.engine) {
            (WorkloadKind::Sessions, EngineKind::Sessions) => {}
            (WorkloadKind::Sessions, _) | (_, EngineKind::Sessions) => {
                return Err(
                    "workload.kind = \"sessions\" goes with load.engine = \"sessions\"".into(),
                )
            }
            _ => {}
        }
        if self.load.relative_to_capacity
            && !matches!(self.load.engine, EngineKind::Open | EngineKind::Sclient)
        {
            return Err(
                "load.relative_to_capacity needs load.engine = \"open\" or \"sclient\"".into(),
            );
        }
        match self.workload.kind {
            WorkloadKind::Url => match &self.workload.url {
                Some(u) if u.starts_with('/') => {}
                _ => return Err("workload.kind = \"url\" needs url = \"/path\"".into()),
            },
            _ => {
                if self.workload.url.is_some() {
                    return Err("workload.url is only for kind = \"url\"".into());
                }
            }
        }
        if let Some(sc) = &self.workload.secure {
            if !(sc.share > 0.0 && sc.share < 1.0) {
                return Err(format!(
                    "workload.secure.share must be between 0 and 1 (exclusive), got {}",
                    sc.share
                ));
            }
            if matches!(self.load.engine, EngineKind::Sclient) || self.load.relative_to_capacity {
                return Err("workload.secure works with load.engine = \"closed\", \"open\" or \"sessions\", without relative_to_capacity".into());
            }
        }
        Ok(())
    }

    /// Every workload entry's path, and the variants: names unique, speeds, node counts,
    /// trees, machine shape, and the variants `--quick` names.
    fn check_variants(&self) -> Result<(), String> {
        for e in self.workload.dynamic.iter().chain(
            self.variants
                .iter()
                .flat_map(|v| v.dynamic.iter().flatten()),
        ) {
            if !e.path.starts_with('/') || e.path.contains(char::is_whitespace) {
                return Err(format!(
                    "workload entry {:?}: a path starts with '/' and has no spaces",
                    e.path
                ));
            }
        }
        let mut seen = std::collections::HashSet::new();
        for v in &self.variants {
            if !seen.insert(v.name.as_str()) {
                return Err(format!("variant {:?} is defined twice", v.name));
            }
            if let Some(s) = &v.speeds {
                check_speeds(s)?;
            }
            if v.nodes == Some(0) {
                return Err(format!("variant {:?}: nodes must be at least 1", v.name));
            }
            if let Some(t) = &v.tree {
                t.parse::<capstan_workload::TreeKind>()
                    .map_err(|e| format!("variant {:?}: {e}", v.name))?;
            }
            self.check_variant_machine(v)?;
        }
        if let Some(names) = &self.quick.variants {
            for n in names {
                if !self.variants.iter().any(|v| &v.name == n) {
                    return Err(format!("quick.variants: no variant {n:?}"));
                }
            }
        }
        Ok(())
    }

    /// `[load.headline]` and its `--quick` settings: at least two rounds (one has no interval),
    /// positive windows, and claims to measure.
    fn check_headline(&self) -> Result<(), String> {
        let quick = (&self.quick.headline_rounds, &self.quick.headline_duration);
        let Some(h) = &self.load.headline else {
            if quick.0.is_some() || quick.1.is_some() {
                return Err(
                    "quick.headline_rounds and quick.headline_duration need [load.headline]".into(),
                );
            }
            return Ok(());
        };
        if h.rounds < 2 || self.quick.headline_rounds.is_some_and(|r| r < 2) {
            return Err("load.headline.rounds and quick.headline_rounds must be at least 2 (one round has no interval)".into());
        }
        for (what, d) in [
            ("load.headline.duration", &h.duration),
            ("quick.headline_duration", &self.quick.headline_duration),
        ] {
            if let Some(d) = d {
                if parse_duration(what, d)
                    .map_err(|e| e.to_string())?
                    .is_zero()
                {
                    return Err(format!("{what} must be positive"));
                }
            }
        }
        if self.paper.as_ref().is_none_or(|p| p.claims.is_empty()) {
            return Err(
                "[load.headline] measures the [[paper.claim]]s; this experiment has none".into(),
            );
        }
        Ok(())
    }

    /// A variant's cores, switch threads and lone node are within reach of this experiment.
    fn check_variant_machine(&self, v: &Variant) -> Result<(), String> {
        let name = &v.name;
        if let Some(c) = v.cores {
            if !(1..=64).contains(&c) {
                return Err(format!("variant {name:?}: cores must be 1..=64, got {c}"));
            }
        }
        if let Some(t) = v.switch_threads {
            if !(1..=64).contains(&t) {
                return Err(format!(
                    "variant {name:?}: switch_threads must be 1..=64, got {t}"
                ));
            }
        }
        if let Some(k) = v.alone {
            if v.nodes.is_some() || v.speeds.is_some() {
                return Err(format!(
                    "variant {name:?}: alone = {k} runs one node of [nodes]; it takes no nodes or speeds"
                ));
            }
            if k == 0 || k > self.nodes.count {
                return Err(format!(
                    "variant {name:?}: alone must name a node 1..={}, got {k}",
                    self.nodes.count
                ));
            }
        }
        Ok(())
    }
}

fn check_policies(p: &[String], params: &BTreeMap<String, toml::Table>) -> Result<(), String> {
    if p.is_empty() {
        return Err("switch.policies must name at least one policy".into());
    }
    let mut seen = std::collections::HashSet::new();
    for text in p {
        let row = PolicyRow::parse(text, params)?;
        if !seen.insert(row.label.clone()) {
            return Err(format!("policy {:?} is listed twice", row.label));
        }
    }
    Ok(())
}

/// One policy row of a comparison, as an experiment's `switch.policies` or `--policies` writes
/// it: a name (`lard`), or a name with parameters in the simulator's syntax
/// (`weighted-round-robin:metric=service-time`), so one policy can have several rows.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyRow {
    /// The text as written: the row's label in the report and results.
    pub label: String,
    /// The switch's `[policy]` table: `name`, then `[switch.params.<name>]`, then the inline
    /// parameters (which win).
    pub table: toml::Table,
}

impl PolicyRow {
    /// Parses `name` or `name:key=value,key=value` over the experiment's per-policy parameters,
    /// and checks the result is a policy the switch accepts.
    pub fn parse(text: &str, params: &BTreeMap<String, toml::Table>) -> Result<PolicyRow, String> {
        let label = text.trim();
        let (name, inline) = label.split_once(':').unwrap_or((label, ""));
        let name = name.trim();
        if capstan_core::policy::lookup(name).is_none() {
            return Err(format!(
                "unknown policy {name:?} (known: {})",
                capstan_core::PolicySpec::names().join(", ")
            ));
        }
        let mut table = params.get(name).cloned().unwrap_or_default();
        for kv in inline.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("policy {label:?}: {kv:?} is not key=value"))?;
            table.insert(k.trim().replace('-', "_"), parse_value(v.trim()));
        }
        capstan_core::PolicySpec::new(name, table.clone())
            .map_err(|e| format!("policy {label:?}: {}", e.to_string().replace('\n', " ")))?;
        table.insert("name".into(), name.into());
        Ok(PolicyRow {
            label: label.to_string(),
            table,
        })
    }

    /// The policy's name (`weighted-round-robin` for `weighted-round-robin:metric=active`).
    pub fn name(&self) -> &str {
        self.table
            .get("name")
            .and_then(|v| v.as_str())
            .unwrap_or_default()
    }
}

/// A parameter value as TOML would read it: integer, float, boolean, else a string.
fn parse_value(v: &str) -> toml::Value {
    if let Ok(i) = v.parse::<i64>() {
        toml::Value::Integer(i)
    } else if let Ok(f) = v.parse::<f64>() {
        toml::Value::Float(f)
    } else if let Ok(b) = v.parse::<bool>() {
        toml::Value::Boolean(b)
    } else {
        toml::Value::String(v.to_string())
    }
}

/// Rejoins a comma-split `--policies` list: a `key=value` piece without a `:` belongs to the
/// policy before it (`lard:t_low=0.2,t_high=0.6,cap` is two policies).
pub fn join_policy_pieces(pieces: &[String]) -> Result<Vec<String>, String> {
    let mut items: Vec<String> = Vec::new();
    for piece in pieces.iter().map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let is_param = piece.contains('=') && !piece.contains(':');
        match items.last_mut() {
            Some(last) if is_param => {
                last.push(',');
                last.push_str(piece);
            }
            _ if is_param => {
                return Err(format!(
                    "policy parameter {piece:?} has no policy before it"
                ))
            }
            _ => items.push(piece.to_string()),
        }
    }
    Ok(items)
}

fn check_speeds(s: &[f64]) -> Result<(), String> {
    if s.is_empty() || s.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return Err(format!("speeds must be positive numbers, got {s:?}"));
    }
    Ok(())
}

fn check_levels(l: &[f64]) -> Result<(), String> {
    if l.is_empty() || l.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
        return Err(format!("load levels must be positive numbers, got {l:?}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_parses_and_names_a_figure() {
        for (name, text) in BUILTIN {
            let e = Experiment::parse(text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(&e.name, name);
            assert!(!e.figure.is_empty(), "{name}");
        }
    }

    #[test]
    fn policy_rows_take_parameters_over_the_experiments() {
        let mut params = BTreeMap::new();
        let mut lard = toml::Table::new();
        lard.insert("load".into(), "utilisation".into());
        lard.insert("t_high".into(), 0.8.into());
        params.insert("lard".to_string(), lard);
        let row = PolicyRow::parse("lard:t_high=0.6,max-targets=5", &params).unwrap();
        assert_eq!(row.label, "lard:t_high=0.6,max-targets=5");
        assert_eq!(row.name(), "lard");
        assert_eq!(row.table["load"].as_str(), Some("utilisation"));
        assert_eq!(row.table["t_high"].as_float(), Some(0.6));
        assert_eq!(row.table["max_targets"].as_integer(), Some(5));
        let plain = PolicyRow::parse("lard", &params).unwrap();
        assert_eq!(plain.table["t_high"].as_float(), Some(0.8));
        for (text, why) in [
            ("nope", "unknown policy \"nope\""),
            ("lard:t_low", "not key=value"),
            ("lard:bogus=1", "bogus"),
            ("weighted-round-robin:metric=often", "often"),
        ] {
            let e = PolicyRow::parse(text, &params).unwrap_err();
            assert!(e.contains(why) && !e.contains('\n'), "{text}: {e}");
        }
    }

    #[test]
    fn split_policy_lists_are_rejoined() {
        let pieces: Vec<String> = [
            "lard:t_low=0.2",
            "t_high=0.6",
            "cap",
            "weighted-round-robin:metric=active",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            join_policy_pieces(&pieces).unwrap(),
            [
                "lard:t_low=0.2,t_high=0.6",
                "cap",
                "weighted-round-robin:metric=active"
            ]
        );
        assert!(join_policy_pieces(&["t_low=1".to_string()])
            .unwrap_err()
            .contains("no policy before it"));
    }

    #[test]
    fn a_policy_listed_twice_is_refused() {
        let e = check_policies(&["cap".into(), "cap".into()], &BTreeMap::new()).unwrap_err();
        assert!(e.contains("twice"), "{e}");
    }

    #[test]
    fn errors_name_the_line() {
        let text = BUILTIN[0].1.replace("[load]", "[load]\nbogus = 1");
        let e = Experiment::parse(&text, "x.toml").unwrap_err().to_string();
        assert!(e.starts_with("x.toml:"), "{e}");
        assert!(e.contains("bogus"), "{e}");
        let text = BUILTIN[0].1.replace("\"cap\"", "\"nope\"");
        let e = Experiment::parse(&text, "x.toml").unwrap_err().to_string();
        assert!(e.contains("unknown policy \"nope\""), "{e}");
    }
}
