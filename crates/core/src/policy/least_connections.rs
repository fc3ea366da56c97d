use super::shared::{default_max_age_ms, Counts, ViewChoice};
use super::support::{least_loaded, Rotor};
use super::{Policy, RequestInfo};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `least-connections`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LeastConnectionsParams {
    /// Whose active requests count: this switch's (`local`) or the tier's (`shared`).
    #[serde(default)]
    view: ViewChoice,
    /// A tier snapshot older than this is ignored (the node's local count is used).
    #[serde(default = "default_max_age_ms")]
    max_age_ms: f64,
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "least-connections",
    about: "fewest active requests; ties go to the larger weight, then rotate (HAProxy, nginx)",
    params: "view = local (default) | shared (the tier's counts), max_age_ms (default 1000)",
    seeded: false,
    check: check::<LeastConnectionsParams>,
    build: |params: &Params, _: &PolicyContext<'_>| {
        let p: LeastConnectionsParams = read("least-connections", params)?;
        let counts = Counts::new("least-connections", p.view, p.max_age_ms)?;
        Ok(Box::new(LeastConnections::with_counts(counts)))
    },
};

/// Fewest active requests (HAProxy's and nginx's leastconn). Ties go to the node with the larger
/// weight, then rotate, so an idle cluster is not served by node 0 alone. With `view = shared`
/// the counts are the tier's where its snapshot is fresh (see `shared`).
#[derive(Debug)]
pub struct LeastConnections {
    tie_break: Rotor,
    counts: Counts,
}

impl Default for LeastConnections {
    fn default() -> Self {
        Self::with_counts(Counts::LOCAL)
    }
}

impl LeastConnections {
    pub fn new() -> Self {
        Self::default()
    }

    /// Least-connections on the given counts (local or tier-wide).
    pub fn with_counts(counts: Counts) -> Self {
        LeastConnections {
            tie_break: Rotor::new(),
            counts,
        }
    }
}

impl Policy for LeastConnections {
    fn name(&self) -> &'static str {
        "least-connections"
    }

    fn pick(&self, _req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        self.counts.with(view, |view| {
            let n = view.node_count();
            least_loaded(view, n, self.tie_break.spin(n)).map(|(id, _)| id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, picks};
    use crate::view::StaticView;

    #[test]
    fn picks_the_fewest_active() {
        let mut view = StaticView::uniform(3);
        view.nodes[0].active = 4;
        view.nodes[1].active = 2;
        view.nodes[2].active = 3;
        assert!(picks(&LeastConnections::new(), &view, 10)
            .iter()
            .all(|&id| id == 1));
    }

    #[test]
    fn ties_go_to_weight_then_rotate() {
        let mut view = StaticView::uniform(3);
        view.nodes[2].weight = 2;
        assert!(picks(&LeastConnections::new(), &view, 5)
            .iter()
            .all(|&id| id == 2));
        view.nodes[2].weight = 1;
        let mut chosen = picks(&LeastConnections::new(), &view, 6);
        chosen.sort_unstable();
        assert_eq!(chosen, vec![0, 0, 1, 1, 2, 2]);
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&LeastConnections::new(), 4);
        let shared = Counts::new("t", ViewChoice::Shared, 1000.0).unwrap();
        check_common_behaviour(&LeastConnections::with_counts(shared), 4);
    }

    #[test]
    fn the_shared_view_counts_the_other_dispatchers_requests() {
        use crate::view::TierState;
        let mut view = StaticView::uniform(2);
        view.now_nanos = 10;
        // This switch has 1 on node 0 and 3 on node 1; the tier has 9 and 4 (as of time 5).
        view.nodes[0].active = 1;
        view.nodes[1].active = 3;
        for (node, tier) in [(0, 9), (1, 4)] {
            view.nodes[node].tier = TierState {
                at_nanos: Some(5),
                active: tier,
                own_active: view.nodes[node].active,
                ..TierState::default()
            };
        }
        let local = LeastConnections::new();
        assert_eq!(picks(&local, &view, 3), vec![0, 0, 0]);
        let shared = Counts::new("t", ViewChoice::Shared, 1e-3).unwrap();
        let policy = LeastConnections::with_counts(shared);
        assert_eq!(picks(&policy, &view, 3), vec![1, 1, 1]);
        // Once the snapshot is older than max_age (1 µs), the local counts rule again.
        view.now_nanos = 2_000;
        assert_eq!(picks(&policy, &view, 3), vec![0, 0, 0]);
    }
}
