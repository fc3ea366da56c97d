//! `capstan sim sweb-skewed` and `capstan sim sweb-sizes`: the experiments of SWEB (Andresen,
//! Yang, Holmedahl, Ibarra, IPPS '96, §4) on a model of its cluster, with `core`'s `sweb`,
//! `round-robin` (the NCSA approach: DNS rotation, no redirection) and `home-node` (pure file
//! locality) policies.
//!
//! - [`model`]: the cluster — six nodes, local disks holding their partition, NFS to the others,
//!   DNS rotation, one redirection at most, loadd every T_gat through `core`'s gatherer.
//! - [`workload`]: the files and the bursty open-loop request stream.
//! - [`analysis`]: §3.3's maximum sustained rps.
//! - [`report`]: the text summary and the HTML page.
//!
//! sweb-skewed (§4.2): every request for one 1.5 MB file on one node, 8 rps for 45 s; the paper
//! measured 3.7 s mean response for round robin and 81.4 s for file locality. sweb-sizes (§4.2,
//! Table 3): files from 100 B to 1.5 MB, 30 s tests at rising rates; the paper found SWEB equal
//! to the others when lightly loaded and 15–60 % better at ≥ 20 rps. It also measures the
//! maximum sustained rate for 1.5 MB files over 120 s (§4.1, Table 1: 16 rps on the CS-2) beside
//! the §3.3 formula.

pub mod analysis;
pub mod model;
pub mod report;
pub mod workload;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use crate::policy::PolicyChoice;
use crate::stats::{round, Estimate};
pub use model::{Cluster, NodeUse, RunOutcome};
pub use workload::Workload;

/// The scenario names.
pub const NAMES: &[&str] = &["sweb-skewed", "sweb-sizes"];

/// The policies compared unless told otherwise: SWEB, the NCSA approach and file locality.
pub const DEFAULT_POLICIES: &str = "sweb,round-robin,home-node";

/// Which experiment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Which {
    SwebSkewed,
    SwebSizes,
}

impl Which {
    pub fn named(name: &str) -> Option<Which> {
        match name {
            "sweb-skewed" => Some(Which::SwebSkewed),
            "sweb-sizes" => Some(Which::SwebSizes),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Which::SwebSkewed => "sweb-skewed",
            Which::SwebSizes => "sweb-sizes",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Which::SwebSkewed => {
                "SWEB §4.2 skewed test: every client asks for the same 1.5 MB file, which lives \
                 on one node's disk (8 rps in bursts each second, 45 s, 6 nodes)"
            }
            Which::SwebSizes => {
                "SWEB §4.2 / Table 3: files of 100 B to 1.5 MB spread over 6 nodes' disks, \
                 requested uniformly at rising rates (30 s tests); plus the maximum sustained \
                 rate for 1.5 MB files over 120 s (§4.1 Table 1) beside §3.3's formula"
            }
        }
    }
}

/// The maximum-sustained-rate sweep of sweb-sizes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CapacitySweep {
    pub file_bytes: u64,
    pub duration_s: f64,
    pub rates: Vec<f64>,
    /// A rate is sustained when the requests still unfinished as arrivals stop are at most this
    /// many seconds' worth of arrivals (a queue that keeps up holds a few seconds' worth; one
    /// that falls behind by 4 % over 120 s holds 5).
    pub backlog_seconds: f64,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct SwebExperiment {
    pub which: Which,
    pub cluster: Cluster,
    pub policies: Vec<PolicyChoice>,
    pub rates: Vec<f64>,
    pub duration_s: f64,
    pub replications: usize,
    pub seed: u64,
    pub capacity: Option<CapacitySweep>,
    pub threads: usize,
}

/// Files per node in sweb-sizes (ours: the paper does not say how many).
pub const FILES_PER_NODE: usize = 10;
/// The size range of sweb-sizes (§4.2: "approximately 100 bytes" to "approximately 1.5MB").
pub const SIZE_RANGE: (u64, u64) = (100, 1_500_000);
/// The large file of the skewed test and of the capacity sweep (§4.1, §4.2: 1.5 MB).
pub const LARGE_FILE: u64 = 1_500_000;

impl SwebExperiment {
    /// The experiment with the paper's set-up.
    pub fn new(which: Which) -> SwebExperiment {
        let policies = DEFAULT_POLICIES
            .split(',')
            .map(|p| PolicyChoice::parse(p).expect("default policies parse"))
            .collect();
        let (rates, duration_s, capacity) = match which {
            Which::SwebSkewed => (vec![8.0], 45.0, None),
            Which::SwebSizes => (
                vec![5.0, 10.0, 15.0, 20.0, 25.0, 30.0],
                30.0,
                Some(CapacitySweep {
                    file_bytes: LARGE_FILE,
                    duration_s: 120.0,
                    rates: (10..=26).map(f64::from).collect(),
                    backlog_seconds: 5.0,
                }),
            ),
        };
        SwebExperiment {
            which,
            cluster: Cluster::default(),
            policies,
            rates,
            duration_s,
            replications: 5,
            seed: 1,
            capacity,
            threads: 1,
        }
    }

    fn seeds(&self) -> Vec<u64> {
        (0..self.replications as u64)
            .map(|r| self.seed.wrapping_add(r))
            .collect()
    }

    fn workload(&self, rate: f64, duration_s: f64, seed: u64, uniform: Option<u64>) -> Workload {
        let nodes = self.cluster.nodes;
        match (self.which, uniform) {
            (_, Some(bytes)) => Workload::sizes(
                nodes,
                FILES_PER_NODE,
                (bytes, bytes),
                rate,
                duration_s,
                seed,
            ),
            (Which::SwebSkewed, None) => {
                Workload::skewed(nodes, rate, duration_s, LARGE_FILE, seed)
            }
            (Which::SwebSizes, None) => {
                Workload::sizes(nodes, FILES_PER_NODE, SIZE_RANGE, rate, duration_s, seed)
            }
        }
    }

    fn validate(&self) -> Result<(), String> {
        self.cluster.validate()?;
        if self.replications == 0 {
            return Err("replications must be at least 1".into());
        }
        if self.policies.is_empty() {
            return Err("no policies to run".into());
        }
        if self.rates.iter().any(|r| !(r.is_finite() && *r > 0.0)) {
            return Err("rates must be positive numbers of requests per second".into());
        }
        if !(self.duration_s.is_finite() && self.duration_s >= 1.0) {
            return Err("duration must be at least 1 s".into());
        }
        // Fail on a bad policy parameter before any run.
        let w = self.workload(1.0, 1.0, self.seed, None);
        for p in &self.policies {
            model::Run::new(&self.cluster, &w, p)?;
        }
        Ok(())
    }

    /// Runs every rate × policy × replication (and the capacity sweep), on `threads` threads.
    pub fn run(&self) -> Result<report::SwebReport, String> {
        self.validate()?;
        let seeds = self.seeds();
        let mut jobs = Vec::new();
        for &rate in &self.rates {
            for p in 0..self.policies.len() {
                for &seed in &seeds {
                    jobs.push(Job {
                        rate,
                        policy: p,
                        seed,
                        duration_s: self.duration_s,
                        uniform: None,
                    });
                }
            }
        }
        if let Some(c) = &self.capacity {
            for &rate in &c.rates {
                for p in 0..self.policies.len() {
                    for &seed in &seeds {
                        jobs.push(Job {
                            rate,
                            policy: p,
                            seed,
                            duration_s: c.duration_s,
                            uniform: Some(c.file_bytes),
                        });
                    }
                }
            }
        }
        let outcomes = self.run_jobs(&jobs)?;
        Ok(report::summarise(self, &jobs, &outcomes))
    }

    fn run_jobs(&self, jobs: &[Job]) -> Result<Vec<(RunOutcome, f64)>, String> {
        let next = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<JobResult>>> = Mutex::new(vec![None; jobs.len()]);
        std::thread::scope(|s| {
            for _ in 0..self.threads.clamp(1, jobs.len().max(1)) {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let w = self.workload(job.rate, job.duration_s, job.seed, job.uniform);
                    let r = model::Run::new(&self.cluster, &w, &self.policies[job.policy])
                        .map(|run| (run.run(), w.mean_request_bytes()));
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
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
}

/// A run's outcome and the mean size of the files it requested, or why it could not run.
type JobResult = Result<(RunOutcome, f64), String>;

/// One run to do.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub rate: f64,
    pub policy: usize,
    pub seed: u64,
    pub duration_s: f64,
    /// All files this size (the capacity sweep); `None`: the experiment's own files.
    pub uniform: Option<u64>,
}

/// Mean over replications of a per-run value.
fn estimate(runs: &[&RunOutcome], f: impl Fn(&RunOutcome) -> f64) -> Estimate {
    Estimate::of(&runs.iter().map(|r| f(r)).collect::<Vec<_>>())
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The `q` quantile of sorted values (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Share of requests a run redirected.
fn redirect_fraction(r: &RunOutcome) -> f64 {
    r.redirects as f64 / r.response_s.len().max(1) as f64
}

fn mean_node_use(runs: &[&RunOutcome]) -> Vec<NodeUse> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    let n = runs.len() as f64;
    (0..first.nodes.len())
        .map(|i| {
            let avg = |f: fn(&NodeUse) -> f64| {
                round(runs.iter().map(|r| f(&r.nodes[i])).sum::<f64>() / n)
            };
            NodeUse {
                cpu: avg(|u| u.cpu),
                disk: avg(|u| u.disk),
                nfs: avg(|u| u.nfs),
                served: runs.iter().map(|r| r.nodes[i].served).sum::<u64>() / runs.len() as u64,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests;
