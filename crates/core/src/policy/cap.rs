use super::support::Rotor;
use super::{Needs, Policy, RequestInfo};
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
}
