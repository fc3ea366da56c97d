//! The Jones thesis's figures beyond throughput against load (Figs. 6, 7 and 8): the paper's
//! numbers as an experiment file gives them (`[[paper.utilisation]]`, `[[paper.node_alone]]`,
//! `[paper.ratio]`, `[[paper.variant_ratio]]`) and ours beside them as `results.json` keeps them
//! (`figures`). The report's figures module computes and draws them.

use serde::{Deserialize, Serialize};

/// Jones Fig. 6: `iostat` samples (%) on one back-end node while `policy` ran at `at` clients.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperUtilisation {
    pub policy: String,
    pub at: f64,
    /// Seconds between the paper's samples.
    pub interval_s: f64,
    pub cpu: Vec<f64>,
    pub disk: Vec<f64>,
}

/// Jones Fig. 7: one node's throughput by itself, per run, at `at` clients.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperNodeAlone {
    pub node: String,
    pub at: f64,
    pub runs: Vec<f64>,
}

/// Jones Fig. 8: `policy`'s gain over `versus` against clients per node; the paper's peak is
/// `paper_peak` clients per node (his "5:2").
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RatioView {
    pub policy: String,
    pub versus: String,
    pub paper_peak: f64,
}

/// `text`: the paper's `variant` over `versus_variant` for `policy` at `at`, as a ratio of
/// throughputs.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VariantRatio {
    pub text: String,
    pub policy: String,
    pub variant: String,
    pub versus_variant: String,
    pub at: f64,
    pub value: f64,
}

/// A [`VariantRatio`] with ours at the measured level nearest the paper's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VariantRatioRow {
    pub text: String,
    pub paper: f64,
    pub ours: Option<f64>,
    pub ours_level: Option<f64>,
}

/// What this module adds to `results.json`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct JonesFigures {
    /// Every node's CPU, disk and NIC utilisation (0–1) per series and level, mean over
    /// repetitions of the window's busy time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_utilisation: Vec<NodeUtilRow>,
    /// The paper's Fig. 6 samples beside ours.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub utilisation_vs_paper: Vec<UtilCompare>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_alone: Option<NodesAlone>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ratio: Vec<RatioRow>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variant_ratios: Vec<VariantRatioRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeUtilRow {
    pub series: String,
    pub level: f64,
    pub node: String,
    pub cpu: f64,
    pub disk: f64,
    pub nic: f64,
    pub busiest: f64,
}

/// Mean, lowest and highest of a set of utilisations (0–1).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Spread {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    pub count: usize,
}

/// One Fig. 6 panel: the paper's samples over time on one node; ours over the nodes (window
/// means) and over time on node 1 (its load reports during the first repetition).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UtilCompare {
    pub policy: String,
    pub paper_level: f64,
    pub ours_level: Option<f64>,
    pub paper_cpu: Spread,
    pub paper_disk: Spread,
    pub ours_cpu_nodes: Option<Spread>,
    pub ours_disk_nodes: Option<Spread>,
    pub ours_cpu_node1_time: Option<Spread>,
    pub ours_disk_node1_time: Option<Spread>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AloneRow {
    pub node: String,
    pub conn_s: f64,
    pub stdev: f64,
    pub runs: usize,
}

/// Fig. 7: each node alone, the paper's and ours, with the spread (fastest / slowest).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodesAlone {
    pub paper_level: f64,
    pub ours_level: Option<f64>,
    pub paper: Vec<AloneRow>,
    pub paper_spread: f64,
    pub ours: Vec<AloneRow>,
    pub ours_spread: Option<f64>,
}

/// Fig. 8: one variant's gain at one level, ours and the paper's.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RatioRow {
    pub variant: Option<String>,
    pub nodes: usize,
    pub clients: f64,
    pub clients_per_node: f64,
    pub ours_gain_pct: Option<f64>,
    pub paper_gain_pct: Option<f64>,
}
