//! What a SWEB experiment is: which one, its cluster, policies, rates and replications, the
//! jobs it makes. A leaf the runner (`mod.rs`) and the report both use.

use serde::Serialize;

use super::model::{self, Cluster};
use super::workload::Workload;
use crate::policy::PolicyChoice;

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

    pub(super) fn seeds(&self) -> Vec<u64> {
        (0..self.replications as u64)
            .map(|r| self.seed.wrapping_add(r))
            .collect()
    }

    pub(super) fn workload(
        &self,
        rate: f64,
        duration_s: f64,
        seed: u64,
        uniform: Option<u64>,
    ) -> Workload {
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

    pub(super) fn validate(&self) -> Result<(), String> {
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
}

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
