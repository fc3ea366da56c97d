use super::support::Rotor;
use super::{Policy, RequestInfo};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, NoParams, Params, Registration};
use super::PolicyContext;

pub(super) const REGISTRATION: Registration = Registration {
    name: "round-robin",
    about: "a circular pointer over the nodes",
    params: "",
    seeded: false,
    check: check::<NoParams>,
    build: |_: &Params, _: &PolicyContext<'_>| Ok(Box::new(RoundRobin::new())),
};

/// Circular pointer over the nodes, skipping unavailable ones.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: Rotor,
}

impl RoundRobin {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Policy for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn pick(&self, _req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        // Skipping an unavailable node must not give its successor two turns in a row: the
        // rotor moves past the node it chose.
        self.next
            .next(view.node_count(), |id| view.node(id).available)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::StaticView;

    fn req() -> RequestInfo<'static> {
        RequestInfo {
            class: 0,
            key: "/",
            key_hash: 0,
        }
    }

    #[test]
    fn cycles_through_nodes_in_order() {
        let rr = RoundRobin::new();
        let view = StaticView::uniform(3);
        let picks: Vec<_> = (0..7).map(|_| rr.pick(&req(), &view).unwrap()).collect();
        assert_eq!(picks, vec![0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn skips_unavailable_nodes_and_returns_none_when_all_are_down() {
        let rr = RoundRobin::new();
        let mut view = StaticView::uniform(3);
        view.nodes[1].available = false;
        let picks: Vec<_> = (0..6).map(|_| rr.pick(&req(), &view).unwrap()).collect();
        assert_eq!(picks, vec![0, 2, 0, 2, 0, 2]);
        for n in &mut view.nodes {
            n.available = false;
        }
        assert_eq!(rr.pick(&req(), &view), None);
        assert_eq!(rr.pick(&req(), &StaticView::uniform(0)), None);
    }
}
