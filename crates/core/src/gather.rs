//! The gatherer: turns nodes' load reports into the **gathered** part of each node's state, keeps
//! membership by silence (SWEB's loadd: a node whose reports stop is unavailable until they
//! resume) and derives the weights the CAP paper's dynamic WRR uses.
//!
//! The switch's gathering task and the simulator's gather event both drive one `Gatherer` the
//! same way — `record` / `record_failure` per node, then `end_round` once per gathering interval
//! (T_gat) — so a policy sees the same inputs live and simulated. Nothing here reads a clock:
//! every call takes the view time.

use crate::report::LoadReport;
use crate::view::{Gathered, NodeId, NodeState};

/// Where a policy's node weights come from (`NodeState::weight`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WeightSource {
    /// The configured weights.
    #[default]
    Configured,
    /// WRR_num (CAP paper): inversely proportional to the requests the dispatcher had placed on
    /// each node at the last gather, `+1` so an idle node's weight is finite.
    ActiveRequests,
    /// WRR_time (CAP paper): inversely proportional to each node's reported mean service time
    /// over its last interval; a node that finished nothing gets the mean weight.
    ServiceTime,
}

/// What a policy needs from its caller, declared by the policy so callers never list names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Reads the request's class or key, so needs a layer-7 switch (the simulator charges
    /// layer-7 costs; a content-blind policy could run at layer 4).
    pub request_content: bool,
    /// Reads gathered load (utilisations, reported service times): nodes must report.
    pub gathered_load: bool,
    /// Where its weights come from.
    pub weights: WeightSource,
}

/// Scale of derived weights: a node at the cluster's mean gets this weight.
pub const WEIGHT_SCALE: u32 = 10;
/// Largest derived weight.
pub const MAX_DERIVED_WEIGHT: u32 = 1000;

/// Membership rules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GatherRules {
    /// A node whose last report is older than this (or that never reported this long after the
    /// gatherer started) is marked unavailable; `None`: silence never takes a node out.
    pub silent_after_nanos: Option<u64>,
}

/// Per-node bookkeeping.
#[derive(Clone, Copy, Debug, Default)]
struct Feed {
    gathered: Gathered,
    weight: u32,
    silent: bool,
    reports: u64,
    failures: u64,
}

/// What the gatherer knows about every node.
#[derive(Clone, Debug)]
pub struct Gatherer {
    rules: GatherRules,
    started_at: u64,
    feeds: Vec<Feed>,
}

impl Gatherer {
    /// A gatherer for `nodes` nodes, started at view time `now_nanos`.
    pub fn new(nodes: usize, rules: GatherRules, now_nanos: u64) -> Self {
        Gatherer {
            rules,
            started_at: now_nanos,
            feeds: vec![
                Feed {
                    weight: 1,
                    ..Feed::default()
                };
                nodes
            ],
        }
    }

    pub fn node_count(&self) -> usize {
        self.feeds.len()
    }

    /// Restores what was known of node `node` (a reload keeps the state of nodes that stay).
    pub fn seed(&mut self, node: NodeId, gathered: Gathered) {
        if let Some(feed) = self.feeds.get_mut(node) {
            feed.gathered = gathered;
        }
    }

    /// Node `node` answered with `report` at `now_nanos`.
    pub fn record(&mut self, node: NodeId, report: &LoadReport, now_nanos: u64) {
        let Some(feed) = self.feeds.get_mut(node) else {
            return;
        };
        let unit = |u: f64| {
            if u.is_finite() {
                u.clamp(0.0, 1.0)
            } else {
                0.0
            }
        };
        let ms = report.interval.mean_service_ms;
        feed.gathered = Gathered {
            at_nanos: Some(now_nanos),
            cpu: unit(report.interval.cpu_util),
            disk: unit(report.interval.disk_util),
            net: unit(report.interval.nic_util),
            active: u32::try_from(report.active_requests).unwrap_or(u32::MAX),
            mean_service_ms: if ms.is_finite() && ms > 0.0 { ms } else { 0.0 },
            served: report.served,
        };
        feed.reports += 1;
    }

    /// Node `node` did not answer (refused, timed out, sent something that is not a report). Its
    /// last report stands until silence takes the node out.
    pub fn record_failure(&mut self, node: NodeId) {
        if let Some(feed) = self.feeds.get_mut(node) {
            feed.failures += 1;
        }
    }

    /// Ends a gathering round at `now_nanos`: applies the silence rule and derives weights.
    /// `live_active[i]` is the dispatcher's own count for node `i` now, `configured[i]` its
    /// configured weight.
    pub fn end_round(
        &mut self,
        now_nanos: u64,
        source: WeightSource,
        live_active: &[u32],
        configured: &[u32],
    ) {
        for feed in &mut self.feeds {
            feed.silent = match self.rules.silent_after_nanos {
                None => false,
                Some(limit) => {
                    let since = feed.gathered.at_nanos.unwrap_or(self.started_at);
                    now_nanos.saturating_sub(since) > limit
                }
            };
        }
        let weights = derive_weights(source, &self.gathered_all(), live_active, configured);
        for (feed, w) in self.feeds.iter_mut().zip(weights) {
            feed.weight = w;
        }
    }

    fn gathered_all(&self) -> Vec<Gathered> {
        self.feeds.iter().map(|f| f.gathered).collect()
    }

    /// The gathered state of node `node`.
    pub fn gathered(&self, node: NodeId) -> Gathered {
        self.feeds.get(node).map(|f| f.gathered).unwrap_or_default()
    }

    /// The weight derived at the last round (1 before any round).
    pub fn weight(&self, node: NodeId) -> u32 {
        self.feeds.get(node).map_or(1, |f| f.weight)
    }

    /// Whether silence has taken the node out (as of the last round).
    pub fn is_silent(&self, node: NodeId) -> bool {
        self.feeds.get(node).is_some_and(|f| f.silent)
    }

    /// Reports received from and failed gathers of node `node`.
    pub fn counts(&self, node: NodeId) -> (u64, u64) {
        self.feeds
            .get(node)
            .map_or((0, 0), |f| (f.reports, f.failures))
    }

    /// Writes the gathered fields, the derived weight and the silence rule into `state`, which
    /// carries the live fields already.
    pub fn apply(&self, node: NodeId, state: &mut NodeState, source: WeightSource) {
        let Some(feed) = self.feeds.get(node) else {
            return;
        };
        state.gathered = feed.gathered;
        if source != WeightSource::Configured {
            state.weight = feed.weight;
        }
        if feed.silent {
            state.available = false;
        }
    }
}

/// The weights `source` gives: `configured` unchanged, or derived so that a node at the mean
/// gets [`WEIGHT_SCALE`] (clamped to `1..=MAX_DERIVED_WEIGHT`).
pub fn derive_weights(
    source: WeightSource,
    gathered: &[Gathered],
    live_active: &[u32],
    configured: &[u32],
) -> Vec<u32> {
    let n = gathered.len();
    let scale = f64::from(WEIGHT_SCALE);
    let clamp = |w: f64| (w.round() as u32).clamp(1, MAX_DERIVED_WEIGHT);
    match source {
        WeightSource::Configured => (0..n)
            .map(|i| configured.get(i).copied().unwrap_or(1).max(1))
            .collect(),
        WeightSource::ActiveRequests => {
            let active = |i: usize| f64::from(live_active.get(i).copied().unwrap_or(0));
            let mean = (0..n).map(active).sum::<f64>() / n.max(1) as f64;
            (0..n)
                .map(|i| clamp(scale * (1.0 + mean) / (1.0 + active(i))))
                .collect()
        }
        WeightSource::ServiceTime => {
            let reporting: Vec<f64> = gathered
                .iter()
                .map(|g| g.mean_service_ms)
                .filter(|&t| t > 0.0)
                .collect();
            let mean = reporting.iter().sum::<f64>() / reporting.len().max(1) as f64;
            gathered
                .iter()
                .map(|g| {
                    if g.mean_service_ms <= 0.0 || mean <= 0.0 {
                        WEIGHT_SCALE
                    } else {
                        clamp(scale * mean / g.mean_service_ms)
                    }
                })
                .collect()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Window;

    fn report(cpu: f64, disk: f64, active: u64, service_ms: f64) -> LoadReport {
        LoadReport {
            active_requests: active,
            interval: Window {
                length_s: 1.0,
                cpu_util: cpu,
                disk_util: disk,
                mean_service_ms: service_ms,
                ..Window::default()
            },
            ..LoadReport::default()
        }
    }

    #[test]
    fn a_report_becomes_gathered_state_with_its_time() {
        let mut g = Gatherer::new(2, GatherRules::default(), 0);
        g.record(1, &report(0.25, 0.75, 3, 40.0), 5_000);
        let got = g.gathered(1);
        assert_eq!(got.at_nanos, Some(5_000));
        assert_eq!(got.load(), 0.75);
        assert_eq!(got.active, 3);
        assert_eq!(got.age_nanos(7_000), Some(2_000));
        assert_eq!(g.gathered(0).at_nanos, None);
        assert_eq!(g.counts(1), (1, 0));
    }

    #[test]
    fn utilisations_are_clamped_and_nan_is_zero() {
        let mut g = Gatherer::new(1, GatherRules::default(), 0);
        g.record(0, &report(f64::NAN, 1.2, 0, f64::INFINITY), 1);
        let got = g.gathered(0);
        assert_eq!((got.cpu, got.disk, got.mean_service_ms), (0.0, 1.0, 0.0));
    }

    #[test]
    fn a_silent_node_is_marked_down_and_back_when_reports_resume() {
        let rules = GatherRules {
            silent_after_nanos: Some(3_000),
        };
        let mut g = Gatherer::new(2, rules, 0);
        let src = WeightSource::Configured;
        g.record(0, &report(0.1, 0.0, 0, 0.0), 1_000);
        g.record(1, &report(0.1, 0.0, 0, 0.0), 1_000);
        g.end_round(2_000, src, &[0, 0], &[1, 1]);
        assert!(!g.is_silent(0) && !g.is_silent(1));
        // Node 1 stops reporting.
        g.record(0, &report(0.1, 0.0, 0, 0.0), 4_500);
        g.record_failure(1);
        g.end_round(4_500, src, &[0, 0], &[1, 1]);
        assert!(!g.is_silent(0) && g.is_silent(1));
        let mut state = NodeState::default();
        g.apply(1, &mut state, src);
        assert!(!state.available);
        // It comes back.
        g.record(1, &report(0.1, 0.0, 0, 0.0), 6_000);
        g.end_round(6_000, src, &[0, 0], &[1, 1]);
        assert!(!g.is_silent(1));
        assert_eq!(g.counts(1), (2, 1));
    }

    #[test]
    fn a_node_that_never_reports_goes_silent_after_the_limit_from_start() {
        let rules = GatherRules {
            silent_after_nanos: Some(3_000),
        };
        let mut g = Gatherer::new(1, rules, 10_000);
        g.end_round(12_000, WeightSource::Configured, &[0], &[1]);
        assert!(!g.is_silent(0));
        g.end_round(13_001, WeightSource::Configured, &[0], &[1]);
        assert!(g.is_silent(0));
    }

    #[test]
    fn wrr_num_weights_by_hand() {
        // Active 0, 2, 4: mean 2, weights 10·3/1 = 30, 10·3/3 = 10, 10·3/5 = 6.
        let w = derive_weights(
            WeightSource::ActiveRequests,
            &[Gathered::default(); 3],
            &[0, 2, 4],
            &[1, 1, 1],
        );
        assert_eq!(w, vec![30, 10, 6]);
    }

    #[test]
    fn wrr_time_weights_by_hand() {
        let g = |ms| Gathered {
            mean_service_ms: ms,
            ..Gathered::default()
        };
        // Mean of the reporting nodes 20 ms: 10·20/10 = 20, 10·20/30 ≈ 7, silent node → 10.
        let w = derive_weights(
            WeightSource::ServiceTime,
            &[g(10.0), g(30.0), g(0.0)],
            &[],
            &[],
        );
        assert_eq!(w, vec![20, 7, 10]);
    }

    #[test]
    fn configured_weights_pass_through_with_a_floor_of_one() {
        let w = derive_weights(
            WeightSource::Configured,
            &[Gathered::default(); 3],
            &[],
            &[3, 0, 2],
        );
        assert_eq!(w, vec![3, 1, 2]);
    }
}
