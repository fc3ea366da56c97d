//! The outlier detector (Envoy's outlier detection, consecutive-errors flavour): a node that
//! fails `outlier.consecutive_failures` requests in a row is ejected — it takes no new requests —
//! for `base_ejection` × the number of times it has been ejected in a row, at most
//! `max_ejection`.
//!
//! A failure is a response with a 5xx status, no response head within the first-byte timeout, or
//! the connection reset or closed before a response (a hung or crashing node). Connect failures
//! are left to passive health (`health.fail_threshold`), which takes a node out sooner. Any other
//! response head ends the run of failures.
//!
//! - **Back on probation.** The run of failures is not cleared by an ejection: the first failure
//!   after the node returns ejects it again at once, for longer. A success clears it; the
//!   ejection multiplier falls back to one once the node has stayed in for a whole
//!   `base_ejection` after returning.
//! - **Never empty the cluster.** An ejection that would put more than `max_ejected_percent` of
//!   the nodes out by ejection at once does not happen (it is counted as prevented); at least one
//!   node of a cluster of two or more may always be ejected, a cluster of one never loses its
//!   node. Nodes out by a tier's say-so (`tier.ejection`) count as ejected here.
//! - **Slow start** applies to an ejected node that returns, as to any node that comes back
//!   ([`crate::state::cluster::NodeRuntime::slow_start`]).
//!
//! The state is a few atomics per node; every decision takes the time as an argument.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::config::Outlier;

/// One node's record with the outlier detector.
#[derive(Debug, Default)]
pub struct OutlierState {
    consecutive: AtomicU32,
    /// Ejections in a row (the multiplier of the next one).
    in_a_row: AtomicU32,
    /// `Epoch` nanoseconds until which the node is ejected; 0 when it never was.
    ejected_until: AtomicU64,
    /// Ejections since start.
    pub ejections: AtomicU64,
    /// Ejections that did not happen because too many nodes were out already.
    pub prevented: AtomicU64,
}

/// What the detector decided about one failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not (yet) an outlier.
    Stays,
    /// Ejected for this long.
    Ejected(Duration),
    /// An outlier, but ejecting it would take out too many nodes.
    Prevented,
}

/// `/status`'s view of a node's record.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct OutlierStatus {
    pub consecutive_failures: u32,
    pub ejections: u64,
    /// Ejections that did not happen because `max_ejected_percent` of the nodes were out.
    pub prevented: u64,
    /// While ejected: how much longer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ejected_remaining_ms: Option<f64>,
}

impl OutlierState {
    /// Whether the node is ejected at `now_nanos`.
    pub(crate) fn is_ejected(&self, now_nanos: u64) -> bool {
        now_nanos < self.ejected_until.load(Ordering::Relaxed)
    }

    /// When the last ejection ends (or ended); 0 when there was none.
    pub(crate) fn ejected_until(&self) -> u64 {
        self.ejected_until.load(Ordering::Relaxed)
    }

    /// A response head that is not a 5xx: the run of failures ends.
    pub(crate) fn on_success(&self, now_nanos: u64, settings: &Outlier) {
        if self.consecutive.load(Ordering::Relaxed) != 0 {
            self.consecutive.store(0, Ordering::Relaxed);
        }
        let until = self.ejected_until.load(Ordering::Relaxed);
        let settled = until.saturating_add(nanos(settings.base_ejection));
        if self.in_a_row.load(Ordering::Relaxed) != 0 && now_nanos >= settled {
            self.in_a_row.store(0, Ordering::Relaxed);
        }
    }

    /// Copies another record (the same node, rebuilt by a reload).
    pub(crate) fn copy_from(&self, other: &OutlierState) {
        for (to, from) in [
            (&self.consecutive, &other.consecutive),
            (&self.in_a_row, &other.in_a_row),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        for (to, from) in [
            (&self.ejected_until, &other.ejected_until),
            (&self.ejections, &other.ejections),
            (&self.prevented, &other.prevented),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    pub(crate) fn status(&self, now_nanos: u64) -> OutlierStatus {
        let until = self.ejected_until();
        OutlierStatus {
            consecutive_failures: self.consecutive.load(Ordering::Relaxed),
            ejections: self.ejections.load(Ordering::Relaxed),
            prevented: self.prevented.load(Ordering::Relaxed),
            ejected_remaining_ms: (now_nanos < until).then(|| (until - now_nanos) as f64 / 1e6),
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Something with a record with the outlier detector: a node's runtime
/// ([`crate::state::cluster::NodeRuntime`]).
pub(crate) trait HasOutlier {
    /// The record.
    fn outlier(&self) -> &OutlierState;

    /// Out because other switches of a tier have it out (`tier.ejection`): it counts against
    /// `max_ejected_percent` as an ejection here does.
    fn out_by_tier(&self) -> bool {
        false
    }
}

impl<T: HasOutlier> HasOutlier for Arc<T> {
    fn outlier(&self) -> &OutlierState {
        (**self).outlier()
    }

    fn out_by_tier(&self) -> bool {
        (**self).out_by_tier()
    }
}

/// Most nodes of `nodes` that may be out by ejection at once.
pub(crate) fn max_ejected(nodes: usize, percent: u32) -> usize {
    if nodes < 2 {
        return 0;
    }
    (nodes * percent as usize / 100).max(1)
}

/// Counts a failure of `nodes[id]` at `now_nanos`, and ejects it when it is an outlier and the
/// cluster can spare it.
pub(crate) fn on_failure<N: HasOutlier>(
    nodes: &[N],
    id: usize,
    now_nanos: u64,
    settings: &Outlier,
) -> Verdict {
    let record = nodes[id].outlier();
    let failures = record.consecutive.fetch_add(1, Ordering::Relaxed) + 1;
    if settings.consecutive_failures == 0
        || failures < settings.consecutive_failures
        || record.is_ejected(now_nanos)
    {
        return Verdict::Stays;
    }
    let out = nodes
        .iter()
        .filter(|n| n.outlier().is_ejected(now_nanos) || n.out_by_tier())
        .count();
    if out + 1 > max_ejected(nodes.len(), settings.max_ejected_percent) {
        record.prevented.fetch_add(1, Ordering::Relaxed);
        return Verdict::Prevented;
    }
    let times = record.in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
    let length = settings
        .base_ejection
        .saturating_mul(times)
        .min(settings.max_ejection);
    record
        .ejected_until
        .store(now_nanos.saturating_add(nanos(length)), Ordering::Relaxed);
    record.ejections.fetch_add(1, Ordering::Relaxed);
    Verdict::Ejected(length)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, NodeConfig};
    use crate::state::cluster::NodeRuntime;

    const S: u64 = 1_000_000_000;

    fn nodes(n: u16) -> Vec<Arc<NodeRuntime>> {
        let configs = (1..=n)
            .map(|port| NodeConfig {
                name: format!("n{port}"),
                address: ([127, 0, 0, 1], port).into(),
                weight: 1,
                public_url: None,
                report_address: None,
                tls: None,
                protocol: Default::default(),
            })
            .collect();
        let config = Config::from_parts(vec!["127.0.0.1:0".parse().unwrap()], configs);
        crate::state::cluster::Cluster::build(config, 1, None, 0)
            .unwrap()
            .nodes
    }

    fn settings(consecutive: u32, percent: u32) -> Outlier {
        Outlier {
            consecutive_failures: consecutive,
            base_ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(25),
            max_ejected_percent: percent,
        }
    }

    #[test]
    fn consecutive_failures_eject_for_longer_each_time_in_a_row() {
        let nodes = nodes(4);
        let s = settings(3, 50);
        assert_eq!(on_failure(&nodes, 0, S, &s), Verdict::Stays);
        nodes[0].outlier.on_success(S, &s);
        assert_eq!(on_failure(&nodes, 0, S, &s), Verdict::Stays);
        assert_eq!(on_failure(&nodes, 0, S, &s), Verdict::Stays);
        let first = on_failure(&nodes, 0, S, &s);
        assert_eq!(first, Verdict::Ejected(Duration::from_secs(10)));
        assert!(nodes[0].outlier.is_ejected(10 * S));
        assert!(!nodes[0].outlier.is_ejected(11 * S));
        // Back on probation: one failure ejects it again, for twice as long, then capped.
        assert_eq!(
            on_failure(&nodes, 0, 12 * S, &s),
            Verdict::Ejected(Duration::from_secs(20))
        );
        assert_eq!(
            on_failure(&nodes, 0, 40 * S, &s),
            Verdict::Ejected(Duration::from_secs(25))
        );
        // A success right after it returns clears the run, not yet the multiplier…
        nodes[0].outlier.on_success(66 * S, &s);
        assert_eq!(on_failure(&nodes, 0, 67 * S, &s), Verdict::Stays);
        // …a success a whole base ejection after its return clears both.
        nodes[0].outlier.on_success(80 * S, &s);
        for _ in 0..2 {
            on_failure(&nodes, 0, 81 * S, &s);
        }
        assert_eq!(
            on_failure(&nodes, 0, 81 * S, &s),
            Verdict::Ejected(Duration::from_secs(10))
        );
        assert_eq!(nodes[0].outlier.ejections.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_node_out_by_the_tier_counts_against_the_budget() {
        let nodes = nodes(2);
        let s = settings(1, 50);
        nodes[0].set_tier_out(true);
        assert_eq!(
            on_failure(&nodes, 1, S, &s),
            Verdict::Prevented,
            "the last node in"
        );
        nodes[0].set_tier_out(false);
        assert!(matches!(on_failure(&nodes, 1, S, &s), Verdict::Ejected(_)));
    }

    #[test]
    fn never_more_than_the_max_percent_and_never_the_only_node() {
        let nodes = nodes(4);
        let s = settings(1, 50);
        assert!(matches!(on_failure(&nodes, 0, S, &s), Verdict::Ejected(_)));
        assert!(matches!(on_failure(&nodes, 1, S, &s), Verdict::Ejected(_)));
        assert_eq!(on_failure(&nodes, 2, S, &s), Verdict::Prevented);
        assert_eq!(nodes[2].outlier.prevented.load(Ordering::Relaxed), 1);
        // Once one is back, another may go.
        assert!(matches!(
            on_failure(&nodes, 2, 12 * S, &s),
            Verdict::Ejected(_)
        ));
        let one = super::tests::nodes(1);
        assert_eq!(on_failure(&one, 0, S, &s), Verdict::Prevented);
        assert_eq!(max_ejected(4, 10), 1, "at least one of two or more");
        assert_eq!(max_ejected(10, 30), 3);
        assert_eq!(max_ejected(3, 0), 1);
    }

    #[test]
    fn zero_consecutive_failures_turns_it_off() {
        let nodes = nodes(3);
        let s = settings(0, 50);
        for _ in 0..100 {
            assert_eq!(on_failure(&nodes, 0, S, &s), Verdict::Stays);
        }
    }
}
