use std::sync::Mutex;

use super::support::known_nodes;
use super::{translate, Memory, Needs, Policy, RequestInfo, WeightSource};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// How `weighted-round-robin` gets its weights (the configuration's `metric`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WrrMetric {
    /// The nodes' configured weights (nginx, HAProxy).
    #[default]
    Static,
    /// WRR_num (CAP paper): from the active requests at each gather.
    Active,
    /// WRR_time (CAP paper): from the nodes' reported mean service times.
    ServiceTime,
}

impl WrrMetric {
    pub fn weights(self) -> WeightSource {
        match self {
            WrrMetric::Static => WeightSource::Configured,
            WrrMetric::Active => WeightSource::ActiveRequests,
            WrrMetric::ServiceTime => WeightSource::ServiceTime,
        }
    }
}

/// Parameters of `weighted-round-robin`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WrrParams {
    #[serde(default)]
    metric: WrrMetric,
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "weighted-round-robin",
    about: "smooth weighted round robin (nginx) on configured or gathered-load weights",
    params: "metric = static (default) | active (WRR_num) | service-time (WRR_time)",
    seeded: false,
    check: check::<WrrParams>,
    build: |params: &Params, ctx: &PolicyContext<'_>| {
        let p: WrrParams = read("weighted-round-robin", params)?;
        Ok(Box::new(WeightedRoundRobin::new(
            ctx.nodes.len(),
            p.metric.weights(),
        )))
    },
};

/// Smooth weighted round robin, as nginx does it: every pick adds each available node's weight to
/// its running credit, the node with the most credit wins and pays back the total. Over a cycle
/// of `Σ weights` picks each node gets exactly its weight, and heavy nodes' turns are spread out
/// (`a b a c a` for 3:1:1) instead of bunched.
///
/// Weights are read from the view at each pick (`NodeState::weight`, below 1 counts as 1): the
/// configured ones, or those the gatherer derived every T_gat when the policy declares a derived
/// [`WeightSource`] in its [`Needs`].
#[derive(Debug)]
pub struct WeightedRoundRobin {
    /// Running credit per node, sized to the cluster the policy was built for. A lock, not
    /// atomics: the credits of all nodes must change together for the cycle to stay exact, and
    /// the critical section is a few additions.
    credit: Mutex<Vec<i64>>,
    weights: WeightSource,
}

impl WeightedRoundRobin {
    /// `weights`: configured, or derived by the gatherer (the caller puts them in the view).
    pub fn new(node_count: usize, weights: WeightSource) -> Self {
        WeightedRoundRobin {
            credit: Mutex::new(vec![0; node_count]),
            weights,
        }
    }
}

impl Policy for WeightedRoundRobin {
    fn name(&self) -> &'static str {
        "weighted-round-robin"
    }

    fn needs(&self) -> Needs {
        Needs {
            request_content: false,
            gathered_load: self.weights == WeightSource::ServiceTime,
            weights: self.weights,
        }
    }

    fn pick(&self, _req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        // A panic elsewhere while holding the lock leaves credits that are still valid numbers.
        let mut credit = self.credit.lock().unwrap_or_else(|e| e.into_inner());
        let n = known_nodes(view, credit.len());
        let mut total = 0i64;
        let mut best: Option<NodeId> = None;
        for id in 0..n {
            let state = view.node(id);
            if !state.available {
                continue;
            }
            let weight = i64::from(state.weight.max(1));
            credit[id] += weight;
            total += weight;
            if best.is_none_or(|b| credit[id] > credit[b]) {
                best = Some(id);
            }
        }
        let chosen = best?;
        credit[chosen] -= total;
        Some(chosen)
    }

    fn memory(&self) -> Option<Memory> {
        let credit = self.credit.lock().unwrap_or_else(|e| e.into_inner());
        Some(Memory::Credits(credit.clone()))
    }

    /// Nodes that stay keep their credit, so a change of the node list does not restart every
    /// node's cycle; a new node starts at 0.
    fn recall(&self, memory: &Memory, old_to_new: &[Option<NodeId>]) {
        let Memory::Credits(old) = memory else {
            return;
        };
        let mut credit = self.credit.lock().unwrap_or_else(|e| e.into_inner());
        for (id, &c) in old.iter().enumerate() {
            if let Some(slot) = translate(id, old_to_new).and_then(|n| credit.get_mut(n)) {
                *slot = c;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, picks};
    use crate::view::StaticView;

    #[test]
    fn weights_interleave_smoothly() {
        let mut view = StaticView::uniform(3);
        view.nodes[0].weight = 5;
        view.nodes[1].weight = 1;
        view.nodes[2].weight = 1;
        // nginx's documented sequence for weights 5, 1, 1.
        let chosen = picks(
            &WeightedRoundRobin::new(3, WeightSource::Configured),
            &view,
            7,
        );
        assert_eq!(chosen, vec![0, 0, 1, 0, 2, 0, 0]);
    }

    #[test]
    fn each_cycle_gives_every_node_its_weight() {
        let mut view = StaticView::uniform(4);
        for (node, weight) in view.nodes.iter_mut().zip([3, 1, 2, 4]) {
            node.weight = weight;
        }
        let chosen = picks(
            &WeightedRoundRobin::new(4, WeightSource::Configured),
            &view,
            100,
        );
        for (node, weight) in [3, 1, 2, 4].into_iter().enumerate() {
            let count = chosen.iter().filter(|&&id| id == node).count();
            assert_eq!(count, weight * 10, "node {node}");
        }
    }

    #[test]
    fn equal_weights_are_plain_round_robin() {
        let chosen = picks(
            &WeightedRoundRobin::new(3, WeightSource::Configured),
            &StaticView::uniform(3),
            6,
        );
        assert_eq!(chosen, vec![0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn credits_of_nodes_that_stay_carry_over() {
        let mut view = StaticView::uniform(3);
        for (node, weight) in view.nodes.iter_mut().zip([5, 1, 1]) {
            node.weight = weight;
        }
        let old = WeightedRoundRobin::new(3, WeightSource::Configured);
        // 0, 0, 1 of nginx's 0 0 1 0 2 0 0.
        assert_eq!(picks(&old, &view, 3), vec![0, 0, 1]);
        // Same nodes, renumbered by a list that grew at the front.
        let new = WeightedRoundRobin::new(4, WeightSource::Configured);
        crate::policy::carry_over(&new, &old, &[Some(1), Some(2), Some(3)]);
        let mut grown = StaticView::uniform(4);
        grown.nodes[0].available = false;
        for (node, weight) in grown.nodes[1..].iter_mut().zip([5, 1, 1]) {
            node.weight = weight;
        }
        assert_eq!(
            picks(&new, &grown, 4),
            vec![1, 3, 1, 1],
            "the cycle goes on"
        );
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&WeightedRoundRobin::new(4, WeightSource::Configured), 4);
    }
}
