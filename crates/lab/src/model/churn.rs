//! The churn experiment (`capstan lab churn`): nodes join and leave a switch's cluster while it
//! carries load — a scale-out, a scale-in, a rolling restart and a registry outage — and the
//! report shows the errors and response times around each change against the same load on a
//! cluster whose membership never changes.
//!
//! The switch takes its nodes from a `[[discovery]]` source ([`RegistryKind`]): a file the lab
//! writes to, as a deploy tool or a registry sidecar would, or an etcd prefix the nodes register
//! themselves under. A node leaves by leaving the registry first and stops only once the switch
//! has drained it, as a careful rolling restart does. This module holds the schedule
//! and the results (`results.json`); running is in [`crate::run::churn`], the report in
//! [`crate::report::churn`].

use serde::{Deserialize, Serialize};

use capstan_bench::TimelineSecond;

/// The experiment's name on the command line.
pub const NAME: &str = "churn";

/// One change to the cluster's membership, at a time into the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind")]
pub enum Change {
    /// `nodes` new nodes start and are registered.
    ScaleOut { nodes: usize },
    /// The `nodes` newest nodes are deregistered, drained, then stopped.
    ScaleIn { nodes: usize },
    /// Every node in turn: deregistered, drained, stopped, started again on a new port,
    /// registered again.
    RollingRestart,
    /// The registry is unusable for `seconds` (the file: a half-written list, then none; etcd:
    /// killed), then good again with the same nodes.
    RegistryOutage { seconds: u64 },
}

impl Change {
    /// A short phrase for tables.
    pub fn describe(&self) -> String {
        match self {
            Change::ScaleOut { nodes } => format!("scale-out (+{nodes} nodes)"),
            Change::ScaleIn { nodes } => format!("scale-in (−{nodes} nodes)"),
            Change::RollingRestart => "rolling restart (every node)".into(),
            Change::RegistryOutage { seconds } => format!("registry outage ({seconds} s)"),
        }
    }
}

/// Where the switch finds the nodes in the discovery run (`capstan lab churn --registry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RegistryKind {
    /// A JSON node list the lab rewrites (`[[discovery]] file`).
    #[default]
    File,
    /// An etcd the lab starts, each node registering itself (`capstan origin --register`) and
    /// deleting its key on SIGTERM (`[[discovery]] etcd`).
    Etcd,
}

impl RegistryKind {
    /// `file` or `etcd`, as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            RegistryKind::File => "file",
            RegistryKind::Etcd => "etcd",
        }
    }
}

impl std::str::FromStr for RegistryKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "file" => Ok(RegistryKind::File),
            "etcd" => Ok(RegistryKind::Etcd),
            other => Err(format!("unknown registry `{other}` (file or etcd)")),
        }
    }
}

/// A churn run's schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChurnPlan {
    /// Nodes registered at the start.
    pub nodes: usize,
    /// Requests per second offered (open loop, Poisson).
    pub rate: f64,
    /// What each request asks for.
    pub path: String,
    /// Length of the run.
    pub duration_s: u64,
    /// The changes, by seconds into the run.
    pub changes: Vec<(u64, Change)>,
    /// How often the switch looks at the node list (its `[[discovery]] interval`).
    pub interval_ms: u64,
}

impl ChurnPlan {
    /// The schedule: `quick` for tests and a first look (about 25 s per membership), else
    /// about 50 s per membership.
    pub fn new(quick: bool) -> ChurnPlan {
        let (gap, outage) = if quick { (4, 3) } else { (9, 6) };
        let changes = vec![
            (gap, Change::ScaleOut { nodes: 2 }),
            (2 * gap, Change::ScaleIn { nodes: 2 }),
            (3 * gap, Change::RollingRestart),
            (5 * gap, Change::RegistryOutage { seconds: outage }),
        ];
        ChurnPlan {
            nodes: 3,
            rate: if quick { 200.0 } else { 400.0 },
            path: "/cgi-bin/demand.cgi?ms=4&law=exp".into(),
            duration_s: 6 * gap + outage,
            changes,
            interval_ms: 200,
        }
    }

    /// Most nodes at once (for starting the spares up front).
    pub fn peak_nodes(&self) -> usize {
        let mut now = self.nodes;
        let mut peak = now;
        for (_, change) in &self.changes {
            match change {
                Change::ScaleOut { nodes } => now += nodes,
                Change::ScaleIn { nodes } => now = now.saturating_sub(*nodes),
                _ => {}
            }
            peak = peak.max(now);
        }
        peak
    }
}

/// What one change did, as the lab saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChangeResult {
    pub at_s: f64,
    pub change: Change,
    /// Seconds from the registry write (etcd: a node's registration, or the SIGTERM that makes
    /// it deregister; the outage: etcd healthy again) until the switch's `/status` showed the
    /// new node set, summed over the change's steps (a rolling restart is several).
    pub applied_s: f64,
    /// Seconds the change took from start to end (including drains).
    pub took_s: f64,
    /// Nodes in the switch's cluster after it.
    pub nodes_after: usize,
    /// Window of the run around the change: its start and end second.
    pub window: (u64, u64),
    /// Failed requests (errors and unfinished) in the window, with discovery.
    pub errors: u64,
    /// Failed requests in the same seconds of the static run.
    pub static_errors: u64,
    /// Worst per-second p99 response time in the window, ms, with discovery.
    pub p99_ms: f64,
    /// The same for the static run.
    pub static_p99_ms: f64,
}

/// One membership's run: totals and its timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MembershipRun {
    /// `static`, `discovery (file)` or `discovery (etcd)`.
    pub membership: String,
    pub completed: u64,
    /// Errors plus requests unfinished at the end.
    pub failed: u64,
    pub dropped: u64,
    pub errors: std::collections::BTreeMap<String, u64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub timeline: Vec<TimelineSecond>,
}

/// `results.json` of a churn run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChurnResults {
    pub name: String,
    pub title: String,
    pub command: String,
    pub quick: bool,
    /// Where the discovery run's switch found its nodes.
    #[serde(default)]
    pub registry: RegistryKind,
    pub plan: ChurnPlan,
    pub runs: Vec<MembershipRun>,
    pub changes: Vec<ChangeResult>,
    pub findings: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_fits_in_the_run_and_peaks_after_the_scale_out() {
        for quick in [true, false] {
            let plan = ChurnPlan::new(quick);
            assert_eq!(plan.peak_nodes(), 5);
            let last = plan.changes.last().unwrap();
            assert!(matches!(last.1, Change::RegistryOutage { .. }));
            assert!(plan.changes.windows(2).all(|w| w[0].0 < w[1].0));
            assert!(last.0 < plan.duration_s);
        }
    }

    #[test]
    fn a_registry_kind_reads_back_as_written() {
        for kind in [RegistryKind::File, RegistryKind::Etcd] {
            assert_eq!(kind.as_str().parse::<RegistryKind>(), Ok(kind));
        }
        assert!("consul"
            .parse::<RegistryKind>()
            .unwrap_err()
            .contains("file or etcd"));
    }
}
