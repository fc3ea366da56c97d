//! `capstan sim sweb-skewed` and `capstan sim sweb-sizes`: the experiments of SWEB (Andresen,
//! Yang, Holmedahl, Ibarra, IPPS '96, §4) on a model of its cluster, with `core`'s `sweb`,
//! `round-robin` (the NCSA approach: DNS rotation, no redirection) and `home-node` (pure file
//! locality) policies.
//!
//! - [`model`]: the cluster — six nodes, local disks holding their partition, NFS to the others,
//!   DNS rotation, one redirection at most, loadd every T_gat through `core`'s gatherer.
//! - [`workload`]: the files and the bursty open-loop request stream.
//! - [`analysis`]: §3.3's maximum sustained rps.
//! - [`SwebExperiment`] (`experiment.rs`): what to run; this module runs it, on several threads.
//! - [`report`]: the text summary and the HTML page.
//!
//! sweb-skewed (§4.2): every request for one 1.5 MB file on one node, 8 rps for 45 s; the paper
//! measured 3.7 s mean response for round robin and 81.4 s for file locality. sweb-sizes (§4.2,
//! Table 3): files from 100 B to 1.5 MB, 30 s tests at rising rates; the paper found SWEB equal
//! to the others when lightly loaded and 15–60 % better at ≥ 20 rps. It also measures the
//! maximum sustained rate for 1.5 MB files over 120 s (§4.1, Table 1: 16 rps on the CS-2) beside
//! the §3.3 formula.

pub mod analysis;
mod experiment;
pub mod model;
pub mod report;
pub mod workload;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

pub use experiment::{
    CapacitySweep, Job, SwebExperiment, Which, DEFAULT_POLICIES, FILES_PER_NODE, LARGE_FILE, NAMES,
    SIZE_RANGE,
};
pub use model::{Cluster, NodeUse, RunOutcome};
pub use workload::Workload;

impl SwebExperiment {
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

#[cfg(test)]
mod tests;
