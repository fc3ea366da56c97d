use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::shared::{default_max_age_ms, Counts, ViewChoice};
use super::support::{known_nodes, Rotor};
use super::{Outcome, Policy, PolicyError, RequestInfo};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `peak-ewma`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PeakEwmaParams {
    /// Time constant of the exponential decay, seconds (default 10, Finagle's).
    #[serde(default = "default_decay_time_secs")]
    decay_time_secs: f64,
    /// Whose active requests count: this switch's (`local`) or the tier's (`shared`, which also
    /// takes the tier's latency for a node this switch has no sample of).
    #[serde(default)]
    view: ViewChoice,
    /// A tier snapshot older than this is ignored (local count, no tier latency).
    #[serde(default = "default_max_age_ms")]
    max_age_ms: f64,
}

fn default_decay_time_secs() -> f64 {
    10.0
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "peak-ewma",
    about: "Finagle/Linkerd peak-EWMA: least latency average × (active + 1)",
    params: "decay_time_secs (default 10), view = local (default) | shared, max_age_ms (default 1000)",
    seeded: false,
    check: check::<PeakEwmaParams>,
    build: |params: &Params, ctx: &PolicyContext<'_>| {
        let p: PeakEwmaParams = read("peak-ewma", params)?;
        let counts = Counts::new("peak-ewma", p.view, p.max_age_ms)?;
        Ok(Box::new(
            PeakEwma::new(ctx.nodes.len(), p.decay_time_secs)?.with_counts(counts),
        ))
    },
};

/// Cost of a node that has requests in flight but no latency sample yet: large, so untried busy
/// nodes are probed last, and growing with its queue (Finagle's `Long.MaxValue >> 16`).
const UNKNOWN_BUSY_PENALTY: f64 = (i64::MAX >> 16) as f64;

/// One node's latency average. Readers (`pick`) use the two atomics without locking; the lock
/// only serialises writers so a sample is folded in against a consistent (cost, stamp) pair.
/// A reader may see a cost and stamp from different updates, which only shifts the decay of an
/// estimate by one sample.
#[derive(Debug, Default)]
struct NodeEwma {
    cost_nanos: AtomicU64,
    stamp_nanos: AtomicU64,
    writer: Mutex<()>,
}

/// Peak-EWMA (Finagle, Linkerd): per node an exponentially weighted moving average of latency
/// that *jumps* to any sample above it (so a slowing node is avoided at once) and decays towards
/// lower samples with time constant `decay_time` (so it is forgiven gradually). The average also
/// decays with the time since its last sample, measured on the view's clock, so an idle node's
/// stale bad record fades and it is tried again. The node with the least
/// `ewma × (active + 1)` wins; a node with no sample yet costs 0 when idle (probe it) and a large
/// penalty when busy.
///
/// A failed request (`Outcome::ok == false`) can raise a node's cost but never lower it: it
/// re-asserts the node's last estimate (or its own latency, if higher) and restarts the decay,
/// because a node refusing connections answers fast and must not look attractive for it.
#[derive(Debug)]
pub struct PeakEwma {
    nodes: Box<[NodeEwma]>,
    decay_nanos: f64,
    tie_break: Rotor,
    counts: Counts,
}

impl PeakEwma {
    pub fn new(node_count: usize, decay_time_secs: f64) -> Result<Self, PolicyError> {
        if !(decay_time_secs.is_finite() && decay_time_secs > 0.0) {
            return Err(PolicyError::Invalid(format!(
                "peak-ewma: decay_time_secs must be a number of seconds > 0 (got \
                 {decay_time_secs}; Finagle uses 10)"
            )));
        }
        Ok(PeakEwma {
            nodes: (0..node_count).map(|_| NodeEwma::default()).collect(),
            decay_nanos: decay_time_secs * 1e9,
            tie_break: Rotor::new(),
            counts: Counts::LOCAL,
        })
    }

    /// The same policy on the given counts (local or tier-wide).
    pub fn with_counts(mut self, counts: Counts) -> Self {
        self.counts = counts;
        self
    }

    /// The node's average as of `now`, decayed for the time since its last sample.
    fn cost_at(&self, node: &NodeEwma, now: u64) -> f64 {
        let cost = f64::from_bits(node.cost_nanos.load(Ordering::Relaxed));
        if cost == 0.0 {
            return 0.0;
        }
        let elapsed = now.saturating_sub(node.stamp_nanos.load(Ordering::Relaxed));
        cost * (-(elapsed as f64) / self.decay_nanos).exp()
    }
}

impl Policy for PeakEwma {
    fn name(&self) -> &'static str {
        "peak-ewma"
    }

    fn pick(&self, _req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let n = known_nodes(view, self.nodes.len());
        let now = view.now_nanos();
        let start = self.tie_break.spin(n);
        let mut best: Option<(NodeId, f64)> = None;
        for i in 0..n {
            let id = (start + i) % n;
            let state = view.node(id);
            if !state.available {
                continue;
            }
            let mut ewma = self.cost_at(&self.nodes[id], now);
            let active = self.counts.active(&state, now);
            if ewma == 0.0 && self.counts.is_shared(&state, now) {
                ewma = state.tier.latency_ms.max(0.0) * 1e6;
            }
            let score = if ewma == 0.0 && active > 0 {
                UNKNOWN_BUSY_PENALTY + f64::from(active)
            } else {
                ewma * (f64::from(active) + 1.0)
            };
            if best.is_none_or(|(_, s)| score < s) {
                best = Some((id, score));
            }
        }
        best.map(|(id, _)| id)
    }

    fn on_done(&self, node: NodeId, _req: &RequestInfo<'_>, outcome: &Outcome) {
        let Some(ewma) = self.nodes.get(node) else {
            return;
        };
        let _writer = ewma.writer.lock().unwrap_or_else(|e| e.into_inner());
        let sample = outcome.latency_nanos as f64;
        let cost = f64::from_bits(ewma.cost_nanos.load(Ordering::Relaxed));
        let stamp = ewma.stamp_nanos.load(Ordering::Relaxed);
        let elapsed = outcome.finished_at_nanos.saturating_sub(stamp);
        let updated = if sample > cost {
            sample
        } else if !outcome.ok {
            cost
        } else {
            let w = (-(elapsed as f64) / self.decay_nanos).exp();
            cost * w + sample * (1.0 - w)
        };
        ewma.cost_nanos.store(updated.to_bits(), Ordering::Relaxed);
        ewma.stamp_nanos
            .store(outcome.finished_at_nanos.max(stamp), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, picks, request};
    use crate::view::StaticView;

    const MS: u64 = 1_000_000;
    const SECOND: u64 = 1_000_000_000;

    fn done(policy: &PeakEwma, node: NodeId, latency: u64, at: u64, ok: bool) {
        let outcome = Outcome {
            ok,
            latency_nanos: latency,
            finished_at_nanos: at,
        };
        policy.on_done(node, &request(0, "/"), &outcome);
    }

    #[test]
    fn prefers_the_faster_node() {
        let policy = PeakEwma::new(2, 10.0).unwrap();
        done(&policy, 0, 50 * MS, SECOND, true);
        done(&policy, 1, 10 * MS, SECOND, true);
        let mut view = StaticView::uniform(2);
        view.now_nanos = SECOND;
        assert!(picks(&policy, &view, 5).iter().all(|&id| id == 1));
        // Queue depth counts: 10 ms × 6 in flight costs more than 50 ms × 1.
        view.nodes[1].active = 5;
        assert_eq!(policy.pick(&request(0, "/"), &view), Some(0));
    }

    #[test]
    fn a_peak_counts_at_once_and_is_forgotten_gradually() {
        let policy = PeakEwma::new(1, 10.0).unwrap();
        done(&policy, 0, 10 * MS, SECOND, true);
        done(&policy, 0, 100 * MS, SECOND, true);
        let cost = |now| policy.cost_at(&policy.nodes[0], now);
        assert_eq!(cost(SECOND), (100 * MS) as f64);
        // One time constant later the estimate has decayed by e.
        let later = cost(11 * SECOND);
        assert!(
            (later - 100.0 * MS as f64 / std::f64::consts::E).abs() < 1.0,
            "{later}"
        );
        // A fast sample right after a slow one barely moves it (weight 1 − e^0 = 0) …
        done(&policy, 0, MS, SECOND, true);
        assert_eq!(cost(SECOND), (100 * MS) as f64);
        // … one a decay time later pulls it most of the way down.
        done(&policy, 0, MS, 11 * SECOND, true);
        let pulled = cost(11 * SECOND);
        assert!(pulled < 0.4 * (100 * MS) as f64, "{pulled}");
    }

    #[test]
    fn untried_nodes_are_probed_when_idle_and_penalised_when_busy() {
        let policy = PeakEwma::new(2, 10.0).unwrap();
        done(&policy, 0, 5 * MS, 0, true);
        let mut view = StaticView::uniform(2);
        assert_eq!(policy.pick(&request(0, "/"), &view), Some(1));
        view.nodes[1].active = 1;
        view.nodes[0].active = 100;
        assert_eq!(policy.pick(&request(0, "/"), &view), Some(0));
    }

    #[test]
    fn a_fast_failure_does_not_make_a_node_look_good() {
        let policy = PeakEwma::new(1, 10.0).unwrap();
        done(&policy, 0, 80 * MS, 0, true);
        done(&policy, 0, MS, 20 * SECOND, false);
        assert_eq!(
            policy.cost_at(&policy.nodes[0], 20 * SECOND),
            (80 * MS) as f64
        );
        // on_done for a node the policy does not know is ignored.
        done(&policy, 7, MS, 0, true);
    }

    #[test]
    fn parameters_are_validated() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = PeakEwma::new(2, bad).unwrap_err().to_string();
            assert!(e.starts_with("peak-ewma: decay_time_secs"), "{e}");
        }
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&PeakEwma::new(4, 10.0).unwrap(), 4);
        let shared = Counts::new("t", ViewChoice::Shared, 1000.0).unwrap();
        check_common_behaviour(&PeakEwma::new(4, 10.0).unwrap().with_counts(shared), 4);
    }

    #[test]
    fn the_shared_view_brings_the_tiers_counts_and_latency() {
        use crate::view::TierState;
        let shared = Counts::new("t", ViewChoice::Shared, 1000.0).unwrap();
        let policy = PeakEwma::new(2, 10.0).unwrap().with_counts(shared);
        let local = PeakEwma::new(2, 10.0).unwrap();
        for p in [&policy, &local] {
            done(p, 0, 10 * MS, SECOND, true);
            done(p, 1, 20 * MS, SECOND, true);
        }
        let mut view = StaticView::uniform(2);
        view.now_nanos = SECOND;
        // The tier has 4 requests on node 0 (none of them this switch's): 10 × 5 > 20 × 1.
        view.nodes[0].tier = TierState {
            at_nanos: Some(SECOND),
            active: 4,
            ..TierState::default()
        };
        assert_eq!(local.pick(&request(0, "/"), &view), Some(0));
        assert_eq!(policy.pick(&request(0, "/"), &view), Some(1));
        // An idle node this switch never sampled is probed (cost 0) — unless the tier knows it
        // is slow: then it costs the tier's latency.
        let fresh = PeakEwma::new(2, 10.0).unwrap().with_counts(shared);
        done(&fresh, 1, 20 * MS, SECOND, true);
        view.nodes[0].tier = TierState {
            at_nanos: Some(SECOND),
            ..TierState::default()
        };
        assert_eq!(fresh.pick(&request(0, "/"), &view), Some(0));
        view.nodes[0].tier.latency_ms = 50.0;
        assert_eq!(fresh.pick(&request(0, "/"), &view), Some(1));
    }
}
