//! Experiments: policies × replications (× T_gat values), run in parallel, summarised.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use capstan_workload::{stream, Dist};

use serde::Serialize;

use crate::cache::ThreadClock;
use crate::engine::{Engine, NodeUse, RunConfig, RunResult};
use crate::policy::{Metric, PolicyChoice};
use crate::scenario::{Layer, Scenario, CLASS_NAMES};
use crate::site::Site;
use crate::stats::{cdf_at, cdf_grid, mean_ms, quantile_ms, round, Estimate};

/// What to run.
#[derive(Clone, Debug)]
pub struct Experiment {
    pub scenario: Scenario,
    pub policies: Vec<PolicyChoice>,
    pub nodes: usize,
    pub rate: f64,
    pub duration_s: f64,
    /// Pages started before this are not measured (default: a tenth of the duration).
    pub warmup_s: f64,
    pub replications: usize,
    pub seed: u64,
    /// T_gat values (seconds) for the WRR sensitivity study (the paper's Figure 3); empty: none.
    pub tgat_sweep: Vec<f64>,
    /// Worker threads (replications run in parallel).
    pub threads: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct ClassSummary {
    pub class: &'static str,
    pub share: f64,
    pub mean: Estimate,
    pub p90: Estimate,
}

/// One policy's results over all replications. Latencies in milliseconds.
#[derive(Clone, Debug, Serialize)]
pub struct PolicySummary {
    pub policy: String,
    pub layer: &'static str,
    pub gather_s: f64,
    pub pages: u64,
    pub censored: u64,
    pub mean: Estimate,
    pub p50: Estimate,
    pub p90: Estimate,
    pub p99: Estimate,
    /// `[latency_ms, fraction of pages at or below]`, averaged over replications.
    pub cdf: Vec<[f64; 2]>,
    pub cache_hit_rate: Estimate,
    /// Per node, mean over replications.
    pub nodes: Vec<NodeUse>,
    pub classes: Vec<ClassSummary>,
    pub events: u64,
    /// HTTP requests (objects) sent per simulated second of the arrival period, mean over
    /// replications.
    pub requests_per_s: f64,
}

/// One point of the T_gat sensitivity study.
#[derive(Clone, Debug, Serialize)]
pub struct TgatPoint {
    pub metric: Metric,
    pub gather_s: f64,
    pub p90: Estimate,
    pub mean: Estimate,
}

/// Everything deterministic about an experiment: the JSON written to `results.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub format: &'static str,
    pub scenario: Scenario,
    pub nodes: usize,
    pub rate: f64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub replications: usize,
    pub seeds: Vec<u64>,
    pub policies: Vec<PolicySummary>,
    pub tgat: Vec<TgatPoint>,
    /// Events handled by all runs (the simulator's unit of work; events per second of CPU
    /// time are in `run-info.json`, since they depend on the machine).
    pub events: u64,
}

/// Wall-clock facts, kept apart from the report so the report is reproducible byte for byte.
#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    pub wall_s: f64,
    /// CPU seconds of the worker threads (their own, from `/proc/thread-self/schedstat`; wall
    /// time per run where that is missing), summed over runs.
    pub cpu_s: f64,
    pub runs: usize,
    pub events: u64,
    pub events_per_cpu_s: f64,
    /// Events per wall-clock second of the whole experiment (all threads together).
    pub events_per_wall_s: f64,
    /// CPU seconds one run needs per simulated second (arrival period), mean over runs.
    pub cpu_s_per_simulated_s: f64,
    pub threads: usize,
    pub available_parallelism: usize,
}

struct Job {
    policy: PolicyChoice,
    seed: u64,
}

/// Runs one configuration (a thin wrapper for callers that want a single run).
pub fn run_once(cfg: RunConfig) -> Result<RunResult, String> {
    Ok(Engine::new(cfg)?.run())
}

impl Experiment {
    fn config(&self, policy: PolicyChoice, seed: u64) -> RunConfig {
        RunConfig {
            scenario: self.scenario.clone(),
            policy,
            nodes: self.nodes,
            rate: self.rate,
            duration_s: self.duration_s,
            warmup_s: self.warmup_s,
            seed,
        }
    }

    fn seeds(&self) -> Vec<u64> {
        (0..self.replications as u64)
            .map(|r| self.seed.wrapping_add(r))
            .collect()
    }

    fn jobs(&self) -> Vec<Job> {
        let mut jobs = Vec::new();
        for p in &self.policies {
            for &seed in &self.seeds() {
                jobs.push(Job {
                    policy: p.clone(),
                    seed,
                });
            }
        }
        for metric in ["active", "service-time"] {
            for &g in &self.tgat_sweep {
                for &seed in &self.seeds() {
                    let label = format!("weighted-round-robin:metric={metric},gather={g}");
                    if let Ok(policy) = PolicyChoice::parse(&label) {
                        jobs.push(Job { policy, seed });
                    }
                }
            }
        }
        jobs
    }

    /// Number of runs `run` will do (for progress bars).
    pub fn run_count(&self) -> usize {
        self.replications * (self.policies.len() + 2 * self.tgat_sweep.len())
    }

    /// Runs everything; `progress(done, total)` is called after each run from worker threads.
    pub fn run(
        &self,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<(Report, RunInfo), String> {
        if self.replications == 0 {
            return Err("replications must be at least 1".into());
        }
        if self.policies.is_empty() && self.tgat_sweep.is_empty() {
            return Err("no policies to run".into());
        }
        // Fail fast on a bad configuration instead of in a worker.
        for p in &self.policies {
            Engine::new(self.config(p.clone(), self.seed))?;
        }
        let jobs = self.jobs();
        let total = jobs.len();
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let results: Mutex<Vec<Option<(RunResult, f64)>>> = Mutex::new(vec![None; total]);
        let started = Instant::now();
        let threads = self.threads.clamp(1, total.max(1));
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let job = &jobs[i];
                    let clock = ThreadClock::start();
                    let r = Engine::new(self.config(job.policy.clone(), job.seed))
                        .map(Engine::run)
                        .unwrap_or_default();
                    let cpu = clock.seconds();
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some((r, cpu));
                    progress(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                });
            }
        });
        let wall_s = started.elapsed().as_secs_f64();
        let results: Vec<(RunResult, f64)> = results
            .into_inner()
            .unwrap_or_else(|e| e.into_inner())
            .into_iter()
            .map(Option::unwrap_or_default)
            .collect();
        let events: u64 = results.iter().map(|r| r.0.events).sum();
        let cpu_s: f64 = results.iter().map(|r| r.1).sum();
        let reps = self.replications;
        let mut policies = Vec::new();
        for (i, p) in self.policies.iter().enumerate() {
            let runs: Vec<&RunResult> = results[i * reps..(i + 1) * reps]
                .iter()
                .map(|r| &r.0)
                .collect();
            policies.push(self.summarise(p, &runs));
        }
        let mut tgat = Vec::new();
        let base = self.policies.len() * reps;
        for (m, metric) in [Metric::Active, Metric::ServiceTime]
            .into_iter()
            .enumerate()
        {
            for (g, &gather_s) in self.tgat_sweep.iter().enumerate() {
                let at = base + (m * self.tgat_sweep.len() + g) * reps;
                let runs: Vec<&RunResult> = results[at..at + reps].iter().map(|r| &r.0).collect();
                tgat.push(TgatPoint {
                    metric,
                    gather_s,
                    p90: Estimate::of(&per_run(&runs, |r| quantile_ms(&r.latencies, 0.9))),
                    mean: Estimate::of(&per_run(&runs, |r| mean_ms(&r.latencies))),
                });
            }
        }
        let report = Report {
            format: "capstan-sim/1",
            scenario: self.scenario.clone(),
            nodes: self.nodes,
            rate: self.rate,
            duration_s: self.duration_s,
            warmup_s: self.warmup_s,
            replications: reps,
            seeds: self.seeds(),
            policies,
            tgat,
            events,
        };
        let info = RunInfo {
            wall_s,
            cpu_s,
            runs: total,
            events,
            events_per_cpu_s: events as f64 / cpu_s.max(1e-9),
            events_per_wall_s: events as f64 / wall_s.max(1e-9),
            cpu_s_per_simulated_s: cpu_s / total.max(1) as f64 / self.duration_s,
            threads,
            available_parallelism: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
        };
        Ok((report, info))
    }

    fn summarise(&self, p: &PolicyChoice, runs: &[&RunResult]) -> PolicySummary {
        let layer = match runs.first().and_then(|r| r.layer) {
            Some(Layer::L7) => "l7",
            _ => "l4",
        };
        let cdf = cdf_grid()
            .into_iter()
            .map(|x| {
                let f = per_run(runs, |r| cdf_at(&r.latencies, x));
                [x, round(f.iter().sum::<f64>() / f.len() as f64)]
            })
            .collect();
        let n = runs.len() as f64;
        let nodes = (0..self.nodes)
            .map(|i| {
                let avg = |f: fn(&NodeUse) -> f64| {
                    round(runs.iter().map(|r| f(&r.nodes[i])).sum::<f64>() / n)
                };
                NodeUse {
                    cpu: avg(|u| u.cpu),
                    disk: avg(|u| u.disk),
                    nic: avg(|u| u.nic),
                    backend_disk: avg(|u| u.backend_disk),
                    pages: runs.iter().map(|r| r.nodes[i].pages).sum::<u64>() / runs.len() as u64,
                }
            })
            .collect();
        let shares = self.scenario.mix.class_shares();
        let classes = (0..4)
            .filter(|&c| shares[c] > 0.0)
            .map(|c| ClassSummary {
                class: CLASS_NAMES[c],
                share: round(shares[c]),
                mean: Estimate::of(&per_run(runs, |r| mean_ms(&r.class_latencies[c]))),
                p90: Estimate::of(&per_run(runs, |r| quantile_ms(&r.class_latencies[c], 0.9))),
            })
            .collect();
        PolicySummary {
            policy: p.label.clone(),
            layer,
            gather_s: p.gather_s.unwrap_or(self.scenario.switch.gather_interval_s),
            pages: runs.iter().map(|r| r.latencies.len() as u64).sum(),
            censored: runs.iter().map(|r| r.censored).sum(),
            mean: Estimate::of(&per_run(runs, |r| mean_ms(&r.latencies))),
            p50: Estimate::of(&per_run(runs, |r| quantile_ms(&r.latencies, 0.5))),
            p90: Estimate::of(&per_run(runs, |r| quantile_ms(&r.latencies, 0.9))),
            p99: Estimate::of(&per_run(runs, |r| quantile_ms(&r.latencies, 0.99))),
            cdf,
            cache_hit_rate: Estimate::of(&per_run(runs, |r| {
                r.cache_hits as f64 / r.cache_lookups.max(1) as f64
            })),
            nodes,
            classes,
            events: runs.iter().map(|r| r.events).sum(),
            requests_per_s: round(
                runs.iter().map(|r| r.requests as f64).sum::<f64>()
                    / runs.len().max(1) as f64
                    / self.duration_s,
            ),
        }
    }
}

/// Mean HTTP requests (objects) a client session makes in `scenario`: pages per session (the
/// engine's rounded inverse Gaussian, at least one; estimated from 100 000 draws of a fixed
/// stream) × the popularity-weighted objects per page of the site built for `seed`. Dividing a
/// request rate by it gives the session rate that offers that many requests per second.
pub fn requests_per_session(scenario: &Scenario, seed: u64) -> f64 {
    let w = &scenario.workload;
    let pages = Dist::InverseGaussian {
        mu: w.pages_mu,
        lambda: w.pages_lambda,
    };
    let mut rng = stream(seed, "sim-requests-per-session");
    const DRAWS: u32 = 100_000;
    let total: f64 = (0..DRAWS)
        .map(|_| pages.sample(&mut rng).round().max(1.0))
        .sum();
    total / f64::from(DRAWS) * Site::generate(w, seed).mean_objects_per_page()
}

fn per_run(runs: &[&RunResult], f: impl Fn(&RunResult) -> f64) -> Vec<f64> {
    runs.iter().map(|r| f(r)).collect()
}
