//! A policy experiment as it will run: the command line's options, the series and levels the
//! plan expands to, the events the runner reports, and the request list of a mix.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use capstan_workload::{DocTree, FileList, FileListEntry, TreeKind};

use crate::model::error::LabError;
use crate::model::experiment::*;
use crate::model::results::Versions;
use crate::procs::cluster::NodeSpec;

/// Which world(s) `capstan lab` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Worlds {
    #[default]
    Live,
    Sim,
    Both,
}

impl std::str::FromStr for Worlds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "live" => Ok(Worlds::Live),
            "sim" => Ok(Worlds::Sim),
            "both" => Ok(Worlds::Both),
            _ => Err(format!("unknown engine {s:?} (live, sim or both)")),
        }
    }
}

/// What the command line changes.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub quick: bool,
    pub policies: Option<Vec<String>>,
    pub nodes: Option<usize>,
    pub repetitions: Option<usize>,
    pub seed: Option<u64>,
    /// The `capstan` binary to start nodes and the switch with.
    pub exe: PathBuf,
    /// Where child logs and the switch configuration go.
    pub work_dir: PathBuf,
    /// The command line, for the report.
    pub command: String,
    /// Live, simulated, or both side by side.
    pub worlds: crate::run::plan::Worlds,
}

/// What the runner tells its caller (the CLI draws a progress bar from these).
#[derive(Debug, Clone)]
pub enum Event {
    Planned {
        runs: usize,
        seconds: f64,
    },
    Run {
        index: usize,
        label: String,
        level: f64,
        repetition: usize,
    },
    Live {
        completed: u64,
        rps: f64,
        elapsed_s: f64,
        duration_s: f64,
    },
    Done {
        index: usize,
        throughput: f64,
    },
    Message(String),
}

pub type Observer = Arc<dyn Fn(Event) + Send + Sync>;

/// One series as it will run.
#[derive(Debug, Clone)]
pub struct SeriesPlan {
    pub label: String,
    /// The policy row's label (its name, or name and parameters).
    pub policy: String,
    pub row: PolicyRow,
    pub variant: Option<String>,
    pub nodes: Vec<NodeSpec>,
    pub tree: String,
    pub dynamic: Vec<Entry>,
    /// The switch's worker threads (the experiment's, or the variant's).
    pub switch_threads: usize,
}

#[derive(Debug, Clone)]
pub struct Plan {
    pub exp: Experiment,
    pub quick: bool,
    pub series: Vec<SeriesPlan>,
    pub levels: Vec<f64>,
    pub duration: Duration,
    pub warmup: Duration,
    pub repetitions: usize,
    pub seed: u64,
}

impl Plan {
    pub fn new(exp: &Experiment, o: &Options) -> Result<Plan, LabError> {
        let bad = |m: String| LabError::Experiment(m);
        let policies = match (&o.policies, o.quick, &exp.quick.policies) {
            (Some(p), _, _) => join_policy_pieces(p).map_err(bad)?,
            (None, true, Some(p)) => p.clone(),
            _ => exp.switch.policies.clone(),
        };
        let rows = policies
            .iter()
            .map(|p| PolicyRow::parse(p, &exp.switch.params))
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        if rows.is_empty() {
            return Err(bad("no policies to run".into()));
        }
        if o.nodes == Some(0) || o.nodes.is_some_and(|n| n > 64) {
            return Err(bad("--nodes must be 1..=64".into()));
        }
        if o.repetitions == Some(0) {
            return Err(bad("--repetitions must be at least 1".into()));
        }
        let levels = match (o.quick, &exp.quick.levels) {
            (true, Some(l)) => l.clone(),
            _ => exp.load.levels.clone(),
        };
        let pick = |full: &str, quick: &Option<String>, what: &str| {
            let s = if o.quick {
                quick.as_deref().unwrap_or(full)
            } else {
                full
            };
            parse_duration(what, s)
        };
        let duration = pick(&exp.load.duration, &exp.quick.duration, "duration")?;
        let warmup = pick(&exp.load.warmup, &exp.quick.warmup, "warmup")?;
        let base_count = o.nodes.unwrap_or(exp.nodes.count);
        let specs = |count: usize, speeds: &[f64], cores: u32| -> Vec<NodeSpec> {
            (0..count)
                .map(|i| NodeSpec {
                    name: format!("node{}", i + 1),
                    speed: speeds[i % speeds.len()],
                    cores,
                    partition: exp.nodes.partition.then(|| format!("{i}/{count}")),
                })
                .collect()
        };
        let mut variants: Vec<Option<&crate::model::experiment::Variant>> =
            exp.variants.iter().map(Some).collect();
        if o.quick {
            if let Some(names) = &exp.quick.variants {
                variants.retain(|v| v.is_some_and(|v| names.contains(&v.name)));
            }
        }
        if variants.is_empty() {
            variants.push(None);
        }
        let mut series = Vec::new();
        for v in &variants {
            for row in &rows {
                let p = &row.label;
                let count = v.and_then(|v| v.nodes).unwrap_or(base_count);
                let speeds = v
                    .and_then(|v| v.speeds.clone())
                    .unwrap_or_else(|| exp.nodes.speeds.clone());
                let label = match v {
                    Some(v) => format!("{p} · {}", v.name),
                    None => p.clone(),
                };
                let cores = v.and_then(|v| v.cores).unwrap_or(exp.nodes.cores);
                let nodes = match v.and_then(|v| v.alone) {
                    // Node K of the cluster by itself: its own name and speed, partition off.
                    Some(k) => vec![NodeSpec {
                        name: format!("node{k}"),
                        speed: exp.nodes.speeds[(k - 1) % exp.nodes.speeds.len()],
                        cores,
                        partition: None,
                    }],
                    None => specs(count, &speeds, cores),
                };
                series.push(SeriesPlan {
                    label,
                    policy: p.clone(),
                    row: row.clone(),
                    variant: v.map(|v| v.name.clone()),
                    nodes,
                    switch_threads: v
                        .and_then(|v| v.switch_threads)
                        .unwrap_or(exp.switch.threads),
                    tree: v
                        .and_then(|v| v.tree.clone())
                        .unwrap_or_else(|| exp.nodes.tree.clone()),
                    dynamic: v
                        .and_then(|v| v.dynamic.clone())
                        .unwrap_or_else(|| exp.workload.dynamic.clone()),
                });
            }
        }
        let mut shaped = exp.clone();
        if let (true, Some(period), Some(burst)) = (
            o.quick,
            exp.quick.burst_period_s,
            shaped.load.burst.as_mut(),
        ) {
            burst.period_s = period;
        }
        Ok(Plan {
            exp: shaped,
            quick: o.quick,
            series,
            levels,
            duration,
            warmup,
            repetitions: o
                .repetitions
                .or(exp.quick.repetitions.filter(|_| o.quick))
                .unwrap_or(exp.load.repetitions),
            seed: o.seed.unwrap_or(exp.seed),
        })
    }

    /// Measured windows in the whole run.
    pub fn runs(&self) -> usize {
        self.series.len() * self.repetitions * self.levels.len()
    }

    /// A rough wall-clock estimate: windows, warm-ups, and about a second per cluster start and
    /// drain.
    pub fn estimate_s(&self) -> f64 {
        let clusters = (self.series.len() * self.repetitions) as f64;
        let calibrate = if self.exp.load.relative_to_capacity {
            self.duration.as_secs_f64() + 1.5
        } else {
            0.0
        };
        self.runs() as f64 * (self.duration.as_secs_f64() + 0.3)
            + clusters * (self.warmup.as_secs_f64() + 1.0)
            + calibrate
    }

    pub fn x_label(&self) -> &'static str {
        match self.exp.load.engine {
            EngineKind::Closed => "clients",
            EngineKind::Open | EngineKind::Sclient if self.exp.load.relative_to_capacity => {
                "× capacity"
            }
            EngineKind::Open => "offered req/s",
            EngineKind::Sclient => "offered conn/s",
            EngineKind::Sessions => "sessions/s",
        }
    }
}

/// The request list of a mix: every file of the tree at its weight, then the dynamic entries.
pub fn filelist(
    tree: &str,
    seed: u64,
    files: Option<usize>,
    dynamic: &[Entry],
) -> Result<FileList, LabError> {
    let kind: TreeKind = tree
        .parse()
        .map_err(|e| LabError::Experiment(format!("{e}")))?;
    let t =
        DocTree::generate(kind, seed, files).map_err(|e| LabError::Experiment(e.to_string()))?;
    let mut fl = t.filelist();
    for e in dynamic {
        fl.entries.push(FileListEntry {
            path: e.path.clone(),
            weight: e.weight,
            comment: None,
            line: fl.entries.len() + 1,
        });
    }
    Ok(fl)
}

pub(crate) fn versions() -> Versions {
    let rustc = std::process::Command::new("rustc")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    Versions {
        capstan: env!("CARGO_PKG_VERSION").into(),
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .into(),
        os: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| format!("Linux {}", s.trim()))
            .unwrap_or_else(|_| std::env::consts::OS.into()),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        rustc,
    }
}
