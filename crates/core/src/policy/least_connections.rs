use super::support::{least_loaded, Rotor};
use super::{Policy, RequestInfo};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, NoParams, Params, Registration};
use super::PolicyContext;

pub(super) const REGISTRATION: Registration = Registration {
    name: "least-connections",
    about: "fewest active requests; ties go to the larger weight, then rotate (HAProxy, nginx)",
    params: "",
    seeded: false,
    check: check::<NoParams>,
    build: |_: &Params, _: &PolicyContext<'_>| Ok(Box::new(LeastConnections::new())),
};

/// Fewest active requests (HAProxy's and nginx's leastconn). Ties go to the node with the larger
/// weight, then rotate, so an idle cluster is not served by node 0 alone.
#[derive(Debug, Default)]
pub struct LeastConnections {
    tie_break: Rotor,
}

impl LeastConnections {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for LeastConnections {
    fn name(&self) -> &'static str {
        "least-connections"
    }

    fn pick(&self, _req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let n = view.node_count();
        least_loaded(view, n, self.tie_break.spin(n)).map(|(id, _)| id)
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
    }
}
