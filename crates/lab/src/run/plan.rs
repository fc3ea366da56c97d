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
    /// The paper's claims in interleaved rounds (`[load.headline]`), when they can be measured.
    pub headline: Option<HeadlinePlan>,
}

/// The headline's rounds as they will run: at each claim level, every round runs each of the
/// level's series once, back to back.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadlinePlan {
    pub rounds: usize,
    pub duration: Duration,
    /// Each claim level (one of the plan's levels) with the series that run there: indices
    /// into `Plan::series`, in round 0's order.
    pub levels: Vec<(f64, Vec<usize>)>,
}

impl HeadlinePlan {
    /// The experiment's `[load.headline]` for this run: `--quick`'s rounds and window, and the
    /// claims' contenders among `series`. None beside the simulator: `--engine both` runs every
    /// level as one pass on one cluster, which the simulator replays window by window.
    fn of(
        exp: &Experiment,
        o: &Options,
        series: &[SeriesPlan],
        levels: &[f64],
    ) -> Result<Option<HeadlinePlan>, LabError> {
        let Some(h) = exp
            .load
            .headline
            .as_ref()
            .filter(|_| o.worlds == Worlds::Live)
        else {
            return Ok(None);
        };
        let full = h.duration.as_deref().unwrap_or(&exp.load.duration);
        let window = match (o.quick, &exp.quick.headline_duration) {
            (true, Some(q)) => q.as_str(),
            _ => full,
        };
        let duration = parse_duration("headline duration", window)?;
        let rounds = match (o.quick, exp.quick.headline_rounds) {
            (true, Some(r)) => r,
            _ => h.rounds,
        };
        let claims = exp.paper.as_ref().map_or(&[][..], |p| &p.claims[..]);
        Ok(Self::new(claims, series, levels, rounds, duration))
    }

    /// The claims' contenders at their levels. A claim whose policy or rival is not among the
    /// series (left out with `--policies`) is left out; `None` when no claim is left, or when
    /// `rounds` is below 2.
    fn new(
        claims: &[Claim],
        series: &[SeriesPlan],
        levels: &[f64],
        rounds: usize,
        duration: Duration,
    ) -> Option<HeadlinePlan> {
        let find = |policy: &str, variant: &Option<String>| {
            series
                .iter()
                .position(|s| s.policy == policy && s.variant == *variant)
        };
        let mut out: Vec<(f64, Vec<usize>)> = Vec::new();
        for c in claims {
            let (Some(a), Some(b)) = (find(&c.policy, &c.variant), find(&c.versus, &c.variant))
            else {
                continue;
            };
            let Some(&level) = levels
                .iter()
                .min_by(|x, y| (*x - c.at).abs().total_cmp(&(*y - c.at).abs()))
            else {
                continue;
            };
            let at = match out.iter().position(|(l, _)| *l == level) {
                Some(i) => i,
                None => {
                    out.push((level, Vec::new()));
                    out.len() - 1
                }
            };
            for i in [a, b] {
                if !out[at].1.contains(&i) {
                    out[at].1.push(i);
                }
            }
        }
        out.sort_by(|x, y| x.0.total_cmp(&y.0));
        (rounds >= 2 && !out.is_empty()).then_some(HeadlinePlan {
            rounds,
            duration,
            levels: out,
        })
    }

    /// Series `series` runs at `level` in the rounds (so not among the other runs).
    pub fn covers(&self, series: usize, level: f64) -> bool {
        self.levels
            .iter()
            .any(|(l, members)| *l == level && members.contains(&series))
    }

    /// Every series that runs in some round, in the plan's order.
    pub fn members(&self) -> Vec<usize> {
        let mut all: Vec<usize> = self.levels.iter().flat_map(|(_, m)| m.clone()).collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// Windows in all rounds.
    pub fn windows(&self) -> usize {
        self.rounds * self.levels.iter().map(|(_, m)| m.len()).sum::<usize>()
    }

    /// Round `round`'s order at a level: its series rotated by `round`, so that no contender is
    /// always the first after a pause or the one after the same rival.
    pub fn order(members: &[usize], round: usize) -> Vec<usize> {
        let mut v = members.to_vec();
        if !v.is_empty() {
            let k = round % v.len();
            v.rotate_left(k);
        }
        v
    }
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
        let series = series_plans(exp, o, &rows);
        let mut shaped = exp.clone();
        if let (true, Some(period), Some(burst)) = (
            o.quick,
            exp.quick.burst_period_s,
            shaped.load.burst.as_mut(),
        ) {
            burst.period_s = period;
        }
        let headline = HeadlinePlan::of(exp, o, &series, &levels)?;
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
            headline,
        })
    }

    /// The levels series `i` runs at outside the headline's rounds (every level but those
    /// where the rounds measure it).
    pub fn curve_levels(&self, i: usize) -> Vec<f64> {
        self.levels
            .iter()
            .copied()
            .filter(|&l| !self.headline.as_ref().is_some_and(|h| h.covers(i, l)))
            .collect()
    }

    /// Measured windows outside the headline's rounds.
    fn curve_runs(&self) -> usize {
        (0..self.series.len())
            .map(|i| self.curve_levels(i).len())
            .sum::<usize>()
            * self.repetitions
    }

    /// Measured windows in the whole run.
    pub fn runs(&self) -> usize {
        self.curve_runs() + self.headline.as_ref().map_or(0, |h| h.windows())
    }

    /// A rough wall-clock estimate: windows, warm-ups, and about a second per cluster start and
    /// drain.
    pub fn estimate_s(&self) -> f64 {
        let with_curve = (0..self.series.len())
            .filter(|&i| !self.curve_levels(i).is_empty())
            .count();
        let clusters = (with_curve * self.repetitions
            + self.headline.as_ref().map_or(0, |h| h.members().len()))
            as f64;
        let calibrate = if self.exp.load.relative_to_capacity {
            self.duration.as_secs_f64() + 1.5
        } else {
            0.0
        };
        let rounds = self.headline.as_ref().map_or(0.0, |h| {
            h.windows() as f64 * (h.duration.as_secs_f64() + 0.3)
        });
        self.curve_runs() as f64 * (self.duration.as_secs_f64() + 0.3)
            + rounds
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

/// The series of an experiment: every policy row in every variant (the variants `--quick`
/// keeps), each with its nodes, tree, dynamic requests and switch threads.
fn series_plans(exp: &Experiment, o: &Options, rows: &[PolicyRow]) -> Vec<SeriesPlan> {
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
        for row in rows {
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
    series
}

/// The seed of repetition `rep`'s windows (and of round `rep`'s): its request stream, and the
/// switch policy's own stream when the policy draws random numbers. The simulator's replay of
/// a level (`--engine both`) takes the same.
pub fn window_seed(seed: u64, rep: usize) -> u64 {
    seed.wrapping_add(rep as u64 * 7919)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(quick: bool, policies: Option<&str>) -> Options {
        Options {
            quick,
            policies: policies.map(|p| p.split(',').map(String::from).collect()),
            exe: PathBuf::from("capstan"),
            work_dir: PathBuf::from("."),
            ..Default::default()
        }
    }

    /// mix-6040's claims: CAP vs RAND and vs RR at 10 clients, CAP vs RAND at 24; the rounds
    /// take those (policy, level) pairs from the other runs.
    #[test]
    fn the_headline_runs_the_claims_contenders_at_their_levels() {
        let exp = Experiment::load("mix-6040").unwrap();
        let plan = Plan::new(&exp, &opts(false, None)).unwrap();
        let h = plan.headline.clone().unwrap();
        let label = |i: usize| plan.series[i].label.as_str();
        let at = |k: usize| -> Vec<&str> { h.levels[k].1.iter().map(|&i| label(i)).collect() };
        assert_eq!(
            (h.levels[0].0, at(0)),
            (10.0, vec!["cap", "random", "round-robin"])
        );
        assert_eq!((h.levels[1].0, at(1)), (24.0, vec!["cap", "random"]));
        assert_eq!(h.members().len(), 3);
        let cap = plan.series.iter().position(|s| s.policy == "cap").unwrap();
        let rr = plan
            .series
            .iter()
            .position(|s| s.policy == "round-robin")
            .unwrap();
        assert_eq!(plan.curve_levels(cap), [2.0, 4.0, 8.0, 16.0]);
        assert_eq!(plan.curve_levels(rr), [2.0, 4.0, 8.0, 16.0, 24.0]);
        let others = plan.series.len() - 3;
        let curve = 4 + 5 + 4 + others * plan.levels.len();
        assert_eq!(plan.runs(), curve + h.rounds * 5);
        // Each round rotates the order by one.
        assert_eq!(HeadlinePlan::order(&[3, 5, 7], 0), [3, 5, 7]);
        assert_eq!(HeadlinePlan::order(&[3, 5, 7], 1), [5, 7, 3]);
        assert_eq!(HeadlinePlan::order(&[3, 5, 7], 4), [5, 7, 3]);
        // --quick: its own rounds, and the claim at 24 at the nearest quick level, 20.
        let quick = Plan::new(&exp, &opts(true, None)).unwrap();
        let qh = quick.headline.unwrap();
        assert_eq!(Some(qh.rounds), exp.quick.headline_rounds);
        assert_eq!(
            qh.levels.iter().map(|l| l.0).collect::<Vec<_>>(),
            [10.0, 20.0]
        );
        // A policy left out leaves its claims out; none left, no rounds.
        let two = Plan::new(&exp, &opts(false, Some("cap,round-robin"))).unwrap();
        let th = two.headline.unwrap();
        assert_eq!(th.levels.len(), 1);
        assert_eq!(th.levels[0].1.len(), 2);
        let both = Options {
            worlds: Worlds::Both,
            ..opts(true, None)
        };
        assert!(Plan::new(&exp, &both).unwrap().headline.is_none());
        let alone = Plan::new(&exp, &opts(false, Some("cap"))).unwrap();
        assert!(alone.headline.is_none());
        assert_eq!(alone.curve_levels(0).len(), alone.levels.len());
    }

    #[test]
    fn a_headline_needs_two_rounds_and_claims() {
        let text = crate::model::experiment::BUILTIN
            .iter()
            .find(|(n, _)| *n == "mix-6040")
            .unwrap()
            .1;
        let one = text.replacen("rounds = ", "rounds = 1 #", 1);
        let e = Experiment::parse(&one, "x.toml").unwrap_err().to_string();
        assert!(e.contains("at least 2"), "{e}");
        let start = text.find("\n[[paper.claim]]").unwrap();
        let end = text.find("\n# Fig. 6").unwrap();
        let no_claims = format!("{}{}", &text[..start], &text[end..]);
        let e = Experiment::parse(&no_claims, "x.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[[paper.claim]]"), "{e}");
    }
}
