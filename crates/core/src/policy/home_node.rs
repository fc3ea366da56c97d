//! `home-node`: pure file locality, the rival SWEB is measured against (Andresen et al., IPPS '96,
//! §4.2: "purely exploit the file locality by assigning requests to the nodes that own the
//! requested files").

use super::registry::{check, NoParams, Params, Registration};
use super::{Needs, Policy, PolicyContext, RequestInfo};
use crate::view::{ClusterView, NodeId};

pub(super) const REGISTRATION: Registration = Registration {
    name: "home-node",
    about: "pure file locality (SWEB's rival): every request to its object's home node, key hash % nodes",
    params: "",
    seeded: false,
    check: check::<NoParams>,
    build: |_: &Params, _: &PolicyContext<'_>| Ok(Box::new(HomeNode::new())),
};

/// Sends every request to its object's home node: node `key_hash % nodes`, the rule of
/// [`crate::report::Partition::holds`] (`capstan origin --partition K/N`). When the home node is
/// unavailable the next available node after it (in id order, wrapping) serves, so an object's
/// requests still stay together.
#[derive(Debug, Default)]
pub struct HomeNode;

impl HomeNode {
    pub fn new() -> Self {
        HomeNode
    }
}

/// The home node of an object among `nodes` nodes (`None` when there are none).
pub fn home_of(key_hash: u64, nodes: usize) -> Option<NodeId> {
    (nodes > 0).then(|| (key_hash % nodes as u64) as NodeId)
}

impl Policy for HomeNode {
    fn name(&self) -> &'static str {
        "home-node"
    }

    fn needs(&self) -> Needs {
        Needs {
            request_content: true,
            ..Needs::default()
        }
    }

    fn pick(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let n = view.node_count();
        let home = home_of(req.key_hash, n)?;
        (0..n)
            .map(|i| (home + i) % n)
            .find(|&id| view.node(id).available)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, request};
    use crate::report::Partition;
    use crate::view::StaticView;

    #[test]
    fn the_home_is_the_partition_that_holds_the_key() {
        let policy = HomeNode::new();
        let view = StaticView::uniform(6);
        for i in 0..100 {
            let key = format!("/f{i}");
            let req = request(0, &key);
            let home = policy.pick(&req, &view).unwrap();
            let holder = Partition {
                index: home as u32,
                count: 6,
            };
            assert!(holder.holds(req.key_hash), "{key}");
        }
    }

    #[test]
    fn a_down_home_passes_to_the_next_node() {
        let policy = HomeNode::new();
        let mut view = StaticView::uniform(3);
        let req = request(0, "/x");
        let home = policy.pick(&req, &view).unwrap();
        view.nodes[home].available = false;
        assert_eq!(policy.pick(&req, &view), Some((home + 1) % 3));
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&HomeNode::new(), 4);
    }
}
