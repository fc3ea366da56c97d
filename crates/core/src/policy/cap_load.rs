use super::cap::Cap;
use super::{Memory, Needs, Policy, PolicyError, RequestInfo};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `cap-load`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CapLoadParams {
    /// Utilisation bound in (0, 1] or above (default 0.9).
    #[serde(default = "default_max_load")]
    max_load: f64,
}

fn default_max_load() -> f64 {
    0.9
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "cap-load",
    about: "CAP skipping nodes whose gathered load is at or above max_load (Jones's future work)",
    params: "max_load (default 0.9)",
    seeded: false,
    check: check::<CapLoadParams>,
    build: |params: &Params, ctx: &PolicyContext<'_>| {
        let p: CapLoadParams = read("cap-load", params)?;
        Ok(Box::new(CapLoad::new(ctx.classes.len(), p.max_load)?))
    },
};

/// CAP combined with server state, as the Jones thesis suggests for future work: each class keeps
/// its own round-robin pointer, but a node whose last reported utilisation (`NodeState::load`) is
/// at or above `max_load` is passed over. When every available node is over the bound, the
/// request goes where plain CAP would send it: refusing work because the whole cluster is busy
/// would turn overload into errors.
#[derive(Debug)]
pub struct CapLoad {
    cap: Cap,
    max_load: f64,
}

impl CapLoad {
    pub fn new(class_count: usize, max_load: f64) -> Result<Self, PolicyError> {
        if !(max_load.is_finite() && max_load > 0.0) {
            return Err(PolicyError::Invalid(format!(
                "cap-load: max_load must be a number > 0 (a utilisation, e.g. 0.9), got {max_load}"
            )));
        }
        Ok(CapLoad {
            cap: Cap::new(class_count),
            max_load,
        })
    }
}

impl Policy for CapLoad {
    fn needs(&self) -> Needs {
        Needs {
            request_content: true,
            gathered_load: true,
            ..Needs::default()
        }
    }

    fn name(&self) -> &'static str {
        "cap-load"
    }

    fn pick(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        self.cap.pointer(req.class).next_preferring(
            view.node_count(),
            |id| {
                let state = view.node(id);
                state.available && state.load() < self.max_load
            },
            |id| view.node(id).available,
        )
    }

    fn memory(&self) -> Option<Memory> {
        Some(self.cap.remembered())
    }

    fn recall(&self, memory: &Memory, old_to_new: &[Option<NodeId>]) {
        self.cap.take_pointers(memory, old_to_new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, picks, request};
    use crate::view::StaticView;

    #[test]
    fn skips_nodes_over_the_bound() {
        let policy = CapLoad::new(2, 0.9).unwrap();
        let mut view = StaticView::uniform(3);
        view.set_load(1, 0.95);
        view.set_load(2, 0.9);
        assert!(picks(&policy, &view, 6).iter().all(|&id| id == 0));
        view.set_load(2, 0.5);
        let fresh = CapLoad::new(2, 0.9).unwrap();
        assert_eq!(picks(&fresh, &view, 4), vec![0, 2, 0, 2]);
    }

    #[test]
    fn keeps_per_class_shares_among_nodes_under_the_bound() {
        let policy = CapLoad::new(2, 0.9).unwrap();
        let view = StaticView::uniform(2);
        let pick = |class| policy.pick(&request(class, "/"), &view).unwrap();
        assert_eq!([pick(0), pick(1), pick(0), pick(1)], [0, 0, 1, 1]);
    }

    #[test]
    fn falls_back_to_plain_cap_when_every_node_is_over() {
        let policy = CapLoad::new(1, 0.5).unwrap();
        let mut view = StaticView::uniform(3);
        for node in &mut view.nodes {
            node.gathered.cpu = 0.99;
        }
        view.nodes[0].available = false;
        assert_eq!(picks(&policy, &view, 4), vec![1, 2, 1, 2]);
    }

    #[test]
    fn rejects_a_bound_that_is_not_a_positive_number() {
        for bad in [0.0, -0.5, f64::NAN, f64::INFINITY] {
            let err = CapLoad::new(1, bad).unwrap_err();
            assert!(err.to_string().contains("max_load"), "{err}");
        }
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&CapLoad::new(4, 0.9).unwrap(), 4);
    }
}
