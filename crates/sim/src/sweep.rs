//! Parameter sweeps of the CAP paper's Table 1 ranges: the number of web nodes (2–32) or the
//! arrival rate of new client sessions (100–300 per second), every policy at every value.
//!
//! A sweep is a list of ordinary [`Experiment`]s that differ in one field; each point keeps the
//! page-latency estimates the paper plots (90th percentile, mean, P(latency ≤ 5 s)).

use serde::Serialize;

use crate::run::{Experiment, PolicySummary, RunInfo};
use crate::stats::Estimate;

/// The swept quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Axis {
    /// Web server nodes (`--nodes-sweep`).
    Nodes,
    /// New client sessions per second (`--rate-sweep`).
    Rate,
}

impl Axis {
    /// Axis label for plots and tables.
    pub fn label(self) -> &'static str {
        match self {
            Axis::Nodes => "web server nodes",
            Axis::Rate => "new clients per second",
        }
    }

    /// Checks the values: at least one, each in range (one-line error otherwise).
    pub fn validate(self, values: &[f64]) -> Result<(), String> {
        if values.is_empty() {
            return Err("a sweep needs at least one value".into());
        }
        for &v in values {
            match self {
                Axis::Nodes if !(v.fract() == 0.0 && (1.0..=4096.0).contains(&v)) => {
                    return Err(format!(
                        "--nodes-sweep value {v} is not a node count in 1..=4096"
                    ))
                }
                Axis::Rate if !(v.is_finite() && v > 0.0) => {
                    return Err(format!("--rate-sweep value {v} is not a positive rate"))
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// One policy at one swept value.
#[derive(Clone, Debug, Serialize)]
pub struct SweepPoint {
    pub x: f64,
    pub p90: Estimate,
    pub mean: Estimate,
    /// Fraction of pages served within 5 s (the paper's Fig. 6c measure), mean over runs.
    pub within_5s: f64,
    pub cache_hit_rate: f64,
    /// Busiest node's CPU and disk utilisation.
    pub max_cpu: f64,
    pub max_disk: f64,
    pub pages: u64,
}

/// One policy across the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepSeries {
    pub policy: String,
    pub points: Vec<SweepPoint>,
}

/// The JSON written to `sweep.json`.
#[derive(Clone, Debug, Serialize)]
pub struct SweepReport {
    pub format: &'static str,
    pub scenario: String,
    pub axis: Axis,
    pub values: Vec<f64>,
    /// The fixed parameters (the swept one takes each value in turn).
    pub nodes: usize,
    pub rate: f64,
    pub duration_s: f64,
    pub replications: usize,
    pub seeds: Vec<u64>,
    pub series: Vec<SweepSeries>,
}

/// The fraction of pages at or below `x_ms`, interpolated linearly in log latency between the
/// CDF's grid points (the grid is log-spaced and 2.5 s or 5 s are not on it).
pub fn cdf_interpolated(cdf: &[[f64; 2]], x_ms: f64) -> f64 {
    let Some(hi) = cdf.iter().position(|pt| pt[0] >= x_ms) else {
        return cdf.last().map_or(0.0, |pt| pt[1]);
    };
    if hi == 0 || cdf[hi][0] == x_ms {
        return cdf[hi][1];
    }
    let (a, b) = (cdf[hi - 1], cdf[hi]);
    let t = (x_ms.ln() - a[0].ln()) / (b[0].ln() - a[0].ln());
    a[1] + t * (b[1] - a[1])
}

fn point(x: f64, p: &PolicySummary) -> SweepPoint {
    let within_5s = cdf_interpolated(&p.cdf, 5000.0);
    let max = |f: fn(&crate::engine::NodeUse) -> f64| p.nodes.iter().map(f).fold(0.0, f64::max);
    SweepPoint {
        x,
        p90: p.p90,
        mean: p.mean,
        within_5s,
        cache_hit_rate: p.cache_hit_rate.value,
        max_cpu: max(|u| u.cpu),
        max_disk: max(|u| u.disk),
        pages: p.pages,
    }
}

/// Runs `base` once per value of `axis`; `progress(done, total)` counts runs over the whole
/// sweep. The T_gat sweep of `base` is not repeated at each point.
pub fn run_sweep(
    base: &Experiment,
    axis: Axis,
    values: &[f64],
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<(SweepReport, RunInfo), String> {
    axis.validate(values)?;
    let mut exp = base.clone();
    exp.tgat_sweep.clear();
    let per_point = exp.run_count();
    let total = per_point * values.len();
    let mut series: Vec<SweepSeries> = exp
        .policies
        .iter()
        .map(|p| SweepSeries {
            policy: p.label.clone(),
            points: Vec::new(),
        })
        .collect();
    let mut info: Option<RunInfo> = None;
    for (i, &x) in values.iter().enumerate() {
        match axis {
            Axis::Nodes => exp.nodes = x as usize,
            Axis::Rate => exp.rate = x,
        }
        let offset = i * per_point;
        let (report, run_info) = exp.run(&|done, _| progress(offset + done, total))?;
        for (s, p) in series.iter_mut().zip(&report.policies) {
            s.points.push(point(x, p));
        }
        info = Some(match info {
            None => run_info,
            Some(acc) => RunInfo {
                wall_s: acc.wall_s + run_info.wall_s,
                cpu_s: acc.cpu_s + run_info.cpu_s,
                runs: acc.runs + run_info.runs,
                events: acc.events + run_info.events,
                events_per_cpu_s: (acc.events + run_info.events) as f64
                    / (acc.cpu_s + run_info.cpu_s).max(1e-9),
                ..run_info
            },
        });
    }
    let report = SweepReport {
        format: "capstan-sim-sweep/1",
        scenario: base.scenario.name.clone(),
        axis,
        values: values.to_vec(),
        nodes: base.nodes,
        rate: base.rate,
        duration_s: base.duration_s,
        replications: base.replications,
        seeds: (0..base.replications as u64)
            .map(|r| base.seed.wrapping_add(r))
            .collect(),
        series,
    };
    let info = info.ok_or("a sweep needs at least one value")?;
    Ok((report, info))
}
