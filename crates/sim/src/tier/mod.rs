//! `capstan sim tier`: a tier of K dispatchers (switches) in front of N nodes, each dispatcher
//! running its own instance of a `core` policy, on local counts or on the shared view refreshed
//! by gossip every period — the many-dispatcher setting of Lu et al.'s Join-Idle-Queue
//! (Performance 2011), with the switch's own policy code.
//!
//! - [`model`]: one run (the queueing model and how the views are fed).
//! - [`report`]: the text summary and the HTML report with plots.
//!
//! This module runs the grid: every policy (and, for policies on the shared view, every gossip
//! period) at every K and load, with replications, on worker threads.

pub mod model;
pub mod report;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

use crate::policy::PolicyChoice;
use crate::stats::{mean_ms, quantile_ms, round, Estimate};
use model::{TierResult, TierRun};

/// The default policies: the baselines, least-connections and power of two choices on local
/// and shared counts, and Join-Idle-Queue on both.
pub const DEFAULT_POLICIES: &str = "random,round-robin,least-connections,\
least-connections:view=shared,power-of-d:view=local,power-of-d,join-idle-queue:view=local,\
join-idle-queue";

/// What to run.
#[derive(Clone, Debug)]
pub struct TierExperiment {
    pub nodes: usize,
    pub dispatchers: Vec<usize>,
    pub loads: Vec<f64>,
    pub policies: Vec<PolicyChoice>,
    /// Gossip periods in seconds (0: an exact, always-current view) for the shared policies.
    pub gossip_periods_s: Vec<f64>,
    pub service_ms: f64,
    /// Requests per node per run.
    pub jobs_per_node: u64,
    pub warmup: f64,
    pub replications: usize,
    pub seed: u64,
    pub threads: usize,
}

/// Whether a policy reads the shared view: `view = shared` written, or (`power-of-d`,
/// `join-idle-queue`) its default.
pub fn uses_shared_view(p: &PolicyChoice) -> bool {
    match p.spec.param("view").and_then(|v| v.as_str()) {
        Some(v) => v == "shared",
        None => matches!(p.spec.name(), "power-of-d" | "join-idle-queue"),
    }
}

/// Whether a policy compares counts at all (so "local" means something for it).
fn counts_matter(p: &PolicyChoice) -> bool {
    !matches!(
        p.spec.name(),
        "random" | "round-robin" | "weighted-round-robin" | "consistent-hash" | "home-node"
    )
}

/// One point: a series at one K and load.
#[derive(Clone, Debug, Serialize)]
pub struct TierPoint {
    pub dispatchers: usize,
    pub load: f64,
    /// Response time, milliseconds, over replications.
    pub mean: Estimate,
    pub p50: Estimate,
    pub p90: Estimate,
    pub p99: Estimate,
    /// Fraction of requests sent to a node with no active request tier-wide.
    pub to_idle: f64,
    pub requests: u64,
}

/// One policy on one view (and gossip period) across K and load.
#[derive(Clone, Debug, Serialize)]
pub struct TierSeries {
    pub policy: String,
    /// `local`, `shared`, or `none` for policies that compare no counts.
    pub view: &'static str,
    /// The gossip period of a shared series, milliseconds (0: exact).
    pub gossip_ms: Option<f64>,
    pub points: Vec<TierPoint>,
}

impl TierSeries {
    /// The series' name in tables and plots: `least-connections:view=shared @ 100 ms`.
    pub fn label(&self) -> String {
        match self.gossip_ms {
            Some(0.0) => format!("{} @ exact", self.policy),
            Some(ms) => format!("{} @ {ms} ms", self.policy),
            None => self.policy.clone(),
        }
    }
}

/// The JSON written to `tier.json`.
#[derive(Clone, Debug, Serialize)]
pub struct TierReport {
    pub format: &'static str,
    pub nodes: usize,
    pub dispatchers: Vec<usize>,
    pub loads: Vec<f64>,
    pub gossip_periods_ms: Vec<f64>,
    pub service_ms: f64,
    pub jobs_per_node: u64,
    pub replications: usize,
    pub seeds: Vec<u64>,
    pub series: Vec<TierSeries>,
}

/// How the run went (not deterministic: wall and CPU time).
#[derive(Clone, Debug, Serialize)]
pub struct TierRunInfo {
    pub runs: usize,
    pub events: u64,
    pub wall_s: f64,
    pub threads: usize,
}

/// A series before it is run: the policy and the gossip period it is fed at.
struct Plan {
    policy: PolicyChoice,
    gossip_s: Option<f64>,
}

impl TierExperiment {
    /// Checks the grid (one-line errors naming the option).
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=100_000).contains(&self.nodes) {
            return Err(format!("--nodes {} is not in 1..=100000", self.nodes));
        }
        if self.dispatchers.is_empty() || self.dispatchers.iter().any(|&k| !(1..=1024).contains(&k))
        {
            return Err("--dispatchers needs values in 1..=1024".into());
        }
        if self.loads.is_empty() || self.loads.iter().any(|&l| !(l > 0.0 && l < 1.0)) {
            return Err("--loads needs values in (0, 1) (offered load per node)".into());
        }
        if self.gossip_periods_s.is_empty()
            || self
                .gossip_periods_s
                .iter()
                .any(|g| !(g.is_finite() && *g >= 0.0))
        {
            return Err("--gossip-period needs durations ≥ 0 (0: an exact shared view)".into());
        }
        if self.policies.is_empty() {
            return Err("--policies is empty".into());
        }
        if !(self.service_ms.is_finite() && self.service_ms > 0.0) {
            return Err("--service must be a positive duration".into());
        }
        if self.jobs_per_node == 0 || self.replications == 0 {
            return Err("--jobs-per-node and --replications must be at least 1".into());
        }
        Ok(())
    }

    fn plans(&self) -> Vec<Plan> {
        let mut plans = Vec::new();
        for p in &self.policies {
            if uses_shared_view(p) {
                for &g in &self.gossip_periods_s {
                    plans.push(Plan {
                        policy: p.clone(),
                        gossip_s: Some(g),
                    });
                }
            } else {
                plans.push(Plan {
                    policy: p.clone(),
                    gossip_s: None,
                });
            }
        }
        plans
    }

    /// Runs the experiment will do (for progress bars).
    pub fn run_count(&self) -> usize {
        self.plans().len() * self.dispatchers.len() * self.loads.len() * self.replications
    }

    fn runs(&self, plans: &[Plan]) -> Vec<TierRun> {
        let mut runs = Vec::new();
        for plan in plans {
            for &k in &self.dispatchers {
                for &load in &self.loads {
                    for r in 0..self.replications as u64 {
                        runs.push(TierRun {
                            nodes: self.nodes,
                            dispatchers: k,
                            load,
                            policy: plan.policy.clone(),
                            gossip_s: plan.gossip_s,
                            service_ms: self.service_ms,
                            jobs: self.jobs_per_node * self.nodes as u64,
                            warmup: self.warmup,
                            seed: self.seed.wrapping_add(r),
                        });
                    }
                }
            }
        }
        runs
    }

    /// Runs the grid on `threads` workers; `progress(done, total)` after each run.
    pub fn run(
        &self,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<(TierReport, TierRunInfo), String> {
        self.validate()?;
        let plans = self.plans();
        let runs = self.runs(&plans);
        // Fail fast on a policy that cannot be built, before the workers start.
        for plan in &plans {
            let mut probe = runs[0].clone();
            probe.policy = plan.policy.clone();
            probe.jobs = 1;
            model::run(&probe)?;
        }
        let started = Instant::now();
        let results = run_all(&runs, self.threads, progress)?;
        let info = TierRunInfo {
            runs: runs.len(),
            events: results.iter().map(|r| r.events).sum(),
            wall_s: started.elapsed().as_secs_f64(),
            threads: self.threads.clamp(1, runs.len()),
        };
        Ok((self.summarise(&plans, &results), info))
    }

    fn summarise(&self, plans: &[Plan], results: &[TierResult]) -> TierReport {
        let reps = self.replications;
        let mut chunks = results.chunks(reps);
        let series = plans
            .iter()
            .map(|plan| {
                let mut points = Vec::new();
                for &k in &self.dispatchers {
                    for &load in &self.loads {
                        let runs = chunks.next().unwrap_or_default();
                        points.push(point(k, load, runs));
                    }
                }
                TierSeries {
                    policy: plan.policy.label.clone(),
                    view: match (plan.gossip_s, counts_matter(&plan.policy)) {
                        (Some(_), _) => "shared",
                        (None, true) => "local",
                        (None, false) => "none",
                    },
                    gossip_ms: plan.gossip_s.map(|g| round(g * 1e3)),
                    points,
                }
            })
            .collect();
        TierReport {
            format: "capstan-sim-tier/1",
            nodes: self.nodes,
            dispatchers: self.dispatchers.clone(),
            loads: self.loads.clone(),
            gossip_periods_ms: self
                .gossip_periods_s
                .iter()
                .map(|g| round(g * 1e3))
                .collect(),
            service_ms: self.service_ms,
            jobs_per_node: self.jobs_per_node,
            replications: reps,
            seeds: (0..reps as u64)
                .map(|r| self.seed.wrapping_add(r))
                .collect(),
            series,
        }
    }
}

fn point(dispatchers: usize, load: f64, runs: &[TierResult]) -> TierPoint {
    let per =
        |f: &dyn Fn(&TierResult) -> f64| Estimate::of(&runs.iter().map(f).collect::<Vec<_>>());
    let requests: u64 = runs.iter().map(|r| r.latencies.len() as u64).sum();
    let idle: u64 = runs.iter().map(|r| r.to_idle).sum();
    TierPoint {
        dispatchers,
        load,
        mean: per(&|r| mean_ms(&r.latencies)),
        p50: per(&|r| quantile_ms(&r.latencies, 0.5)),
        p90: per(&|r| quantile_ms(&r.latencies, 0.9)),
        p99: per(&|r| quantile_ms(&r.latencies, 0.99)),
        to_idle: round(idle as f64 / requests.max(1) as f64),
        requests,
    }
}

/// Runs every run on up to `threads` workers, results in run order.
fn run_all(
    runs: &[TierRun],
    threads: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<TierResult>, String> {
    let total = runs.len();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<TierResult, String>>>> = Mutex::new(vec![None; total]);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, total.max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                let r = model::run(&runs[i]);
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("a run did not finish".into())))
        .collect()
}
