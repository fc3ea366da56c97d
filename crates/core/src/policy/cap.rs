use super::support::Rotor;
use super::{translate, Memory, Needs, Policy, RequestInfo};
use crate::class::ClassId;
use crate::view::{ClusterView, NodeId};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `cap`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CapParams {
    /// Start class `c`'s pointer `c` nodes back, as Jones's `servermap.cap` rotates the server
    /// list per category (static from node 0, dynamic from the last node, disk from the one
    /// before), so the first requests of different classes land on different nodes. Default
    /// false: every pointer starts at node 0, as in the CAP paper.
    #[serde(default)]
    class_offsets: bool,
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "cap",
    about: "client-aware policy (Casalicchio & Colajanni): one round-robin pointer per class",
    params: "class_offsets (default false; true = Jones's servermap.cap rotation)",
    seeded: false,
    check: check::<CapParams>,
    build: |params: &Params, ctx: &PolicyContext<'_>| {
        let p: CapParams = read("cap", params)?;
        Ok(Box::new(if p.class_offsets {
            Cap::with_class_offsets(ctx.classes.len(), ctx.nodes.len())
        } else {
            Cap::new(ctx.classes.len())
        }))
    },
};

/// Client-aware policy (Casalicchio & Colajanni, WWW10 2001): a circular list of assignments per
/// class of service. Each class has its own round-robin pointer, so every node receives an equal
/// share (within one request) of every class, and no node's CPU or disk gets all of the
/// intensive requests of one kind. Pure CAP uses no load information at all.
#[derive(Debug)]
pub struct Cap {
    /// One pointer per class id, plus a last one shared by class ids the policy was not built
    /// for (a reload race), so they are still spread rather than refused.
    pointers: Box<[Rotor]>,
}

impl Cap {
    pub fn new(class_count: usize) -> Self {
        Cap {
            pointers: (0..=class_count).map(|_| Rotor::new()).collect(),
        }
    }

    /// CAP with each class's pointer already on a given node (`starts[class]`), as in a published
    /// example's initial state.
    pub fn with_pointers(starts: &[NodeId]) -> Self {
        Cap {
            pointers: starts
                .iter()
                .map(|&slot| Rotor::starting_at(slot))
                .chain(std::iter::once(Rotor::new()))
                .collect(),
        }
    }

    /// Jones's `servermap.cap`: class `c` starts at node `(nodes − c) mod nodes`.
    pub fn with_class_offsets(class_count: usize, nodes: usize) -> Self {
        let starts: Vec<NodeId> = (0..class_count)
            .map(|c| (nodes - c % nodes.max(1)) % nodes.max(1))
            .collect();
        Self::with_pointers(&starts)
    }

    pub(crate) fn pointer(&self, class: ClassId) -> &Rotor {
        let last = self.pointers.len() - 1;
        &self.pointers[class.min(last)]
    }

    pub(crate) fn remembered(&self) -> Memory {
        Memory::ClassPointers(self.pointers.iter().map(Rotor::position).collect())
    }

    /// Each class's pointer stays on the node it was at, or moves to the next node that stays
    /// when that one left; pointers of a policy built for another class count are ignored.
    pub(crate) fn take_pointers(&self, memory: &Memory, old_to_new: &[Option<NodeId>]) {
        let Memory::ClassPointers(positions) = memory else {
            return;
        };
        let old_len = old_to_new.len();
        if positions.len() != self.pointers.len() || old_len == 0 {
            return;
        }
        for (rotor, &position) in self.pointers.iter().zip(positions) {
            let at = position % old_len;
            let next_staying = (0..old_len).find_map(|i| translate((at + i) % old_len, old_to_new));
            if let Some(node) = next_staying {
                rotor.set_position(node);
            }
        }
    }
}

impl Policy for Cap {
    fn needs(&self) -> Needs {
        Needs {
            request_content: true,
            ..Needs::default()
        }
    }

    fn name(&self) -> &'static str {
        "cap"
    }

    fn pick(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        self.pointer(req.class)
            .next(view.node_count(), |id| view.node(id).available)
    }

    fn memory(&self) -> Option<Memory> {
        Some(self.remembered())
    }

    fn recall(&self, memory: &Memory, old_to_new: &[Option<NodeId>]) {
        self.take_pointers(memory, old_to_new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, request};
    use crate::view::StaticView;

    #[test]
    fn every_node_gets_an_equal_share_of_every_class() {
        for nodes in [2, 3, 4, 7] {
            let cap = Cap::new(4);
            let view = StaticView::uniform(nodes);
            let mut counts = vec![[0usize; 4]; nodes];
            // An irregular class mix, so equal shares cannot come from the sequence itself.
            for i in 0..1000usize {
                let class = [0, 0, 1, 2, 0, 3, 2, 0, 1][i % 9];
                let node = cap.pick(&request(class, "/"), &view).unwrap();
                counts[node][class] += 1;
            }
            for class in 0..4 {
                let shares: Vec<_> = counts.iter().map(|c| c[class]).collect();
                let spread = shares.iter().max().unwrap() - shares.iter().min().unwrap();
                assert!(spread <= 1, "{nodes} nodes, class {class}: {shares:?}");
            }
        }
    }

    #[test]
    fn shares_stay_exact_when_picks_come_from_several_threads() {
        let cap = Cap::new(2);
        let view = StaticView::uniform(4);
        let counts: Vec<[usize; 4]> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| {
                        let mut counts = [0usize; 4];
                        for _ in 0..1000 {
                            counts[cap.pick(&request(1, "/"), &view).unwrap()] += 1;
                        }
                        counts
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        for node in 0..4 {
            assert_eq!(counts.iter().map(|c| c[node]).sum::<usize>(), 1000);
        }
    }

    #[test]
    fn classes_have_independent_pointers() {
        let cap = Cap::new(2);
        let view = StaticView::uniform(3);
        let pick = |class| cap.pick(&request(class, "/"), &view).unwrap();
        assert_eq!(
            [pick(0), pick(0), pick(1), pick(0), pick(1)],
            [0, 1, 0, 2, 1]
        );
    }

    #[test]
    fn unknown_class_ids_share_a_pointer_instead_of_panicking() {
        let cap = Cap::new(1);
        let view = StaticView::uniform(2);
        assert_eq!(cap.pick(&request(5, "/"), &view), Some(0));
        assert_eq!(cap.pick(&request(9, "/"), &view), Some(1));
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&Cap::new(4), 4);
    }

    /// Jones's servermap.cap for four nodes: static 0 1 2 3, dynamic 3 0 1 2, disk 2 3 0 1.
    #[test]
    fn class_offsets_rotate_the_list_as_servermap_cap() {
        let policy = Cap::with_class_offsets(3, 4);
        let view = crate::view::StaticView::uniform(4);
        let first = |class| {
            let r = crate::policy::support::testing::request(class, "/x");
            (0..4).map(|_| policy.pick(&r, &view).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(first(0), vec![0, 1, 2, 3]);
        assert_eq!(first(1), vec![3, 0, 1, 2]);
        assert_eq!(first(2), vec![2, 3, 0, 1]);
    }

    #[test]
    fn pointers_stay_on_their_nodes_across_a_change_of_the_node_list() {
        let old = Cap::new(2);
        let view = StaticView::uniform(4);
        let pick = |cap: &Cap, class, view: &StaticView| cap.pick(&request(class, "/"), view);
        // Class 0's pointer ends on node 2, class 1's on node 1.
        for _ in 0..2 {
            pick(&old, 0, &view);
        }
        pick(&old, 1, &view);
        // Node 1 leaves (old 2 → 1, old 3 → 2, old 0 → 0).
        let new = Cap::new(2);
        crate::policy::carry_over(&new, &old, &[Some(0), None, Some(1), Some(2)]);
        let view = StaticView::uniform(3);
        assert_eq!(pick(&new, 0, &view), Some(1), "old node 2, renumbered");
        assert_eq!(
            pick(&new, 1, &view),
            Some(1),
            "old node 1 left: the next node that stays"
        );
        // Another class count: nothing carried, the pointers start afresh.
        let other = Cap::new(3);
        crate::policy::carry_over(&other, &old, &[Some(0), Some(1), Some(2), Some(3)]);
        assert_eq!(pick(&other, 0, &StaticView::uniform(4)), Some(0));
    }
}
