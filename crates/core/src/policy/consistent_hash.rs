use super::support::{known_nodes, mix64};
use super::{Needs, Policy, PolicyError, RequestInfo};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `consistent-hash`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsistentHashParams {
    /// Load slack ε ≥ 0 (default 0.25); `inf` turns the bound off (plain consistent hashing).
    #[serde(default = "default_epsilon")]
    epsilon: f64,
    /// Points per node on the ring (default 160, as ketama).
    #[serde(default = "default_virtual_nodes")]
    virtual_nodes: u32,
}

fn default_epsilon() -> f64 {
    0.25
}
fn default_virtual_nodes() -> u32 {
    160
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "consistent-hash",
    about: "consistent hashing with bounded loads (Mirrokni et al.): locality without a table",
    params: "epsilon (default 0.25; inf = no bound), virtual_nodes (default 160)",
    seeded: false,
    check: check::<ConsistentHashParams>,
    build: |params: &Params, ctx: &PolicyContext<'_>| {
        let p: ConsistentHashParams = read("consistent-hash", params)?;
        Ok(Box::new(ConsistentHash::new(
            ctx.nodes,
            p.epsilon,
            p.virtual_nodes,
        )?))
    },
};

/// Consistent hashing (Karger et al.) with bounded loads (Mirrokni, Thorup, Zadimoghaddam, SODA
/// 2018). Each node owns `virtual_nodes` points on a 64-bit ring, placed by hashing its *name*,
/// so adding or removing a node moves only the keys next to its points (about 1/n of them) and a
/// node keeps its keys across restarts and reorderings of the configuration.
///
/// A request walks clockwise from its key's point to the first available node whose active
/// requests are below the capacity `ceil((1 + ε) · (total_active + 1) / available_nodes)`, where
/// `total_active` sums the available nodes' `active` counts and the `+ 1` is the request being
/// placed. So no node ever holds more than about `1 + ε` times the average, while keys move only
/// when their node is full. Such a node always exists: if all were at capacity their sum would
/// exceed `total_active`.
#[derive(Debug)]
pub struct ConsistentHash {
    /// Ring points, sorted, and the node owning each (parallel arrays keep the binary search on a
    /// dense `u64` slice).
    points: Box<[u64]>,
    owners: Box<[u32]>,
    built_for: usize,
    epsilon: f64,
}

impl ConsistentHash {
    pub fn new(nodes: &[String], epsilon: f64, virtual_nodes: u32) -> Result<Self, PolicyError> {
        // +inf is allowed: it means no load bound.
        if epsilon.is_nan() || epsilon < 0.0 {
            return Err(PolicyError::Invalid(format!(
                "consistent-hash: epsilon must be ≥ 0 (got {epsilon}; Mirrokni et al.'s load \
                 slack, e.g. 0.25; `inf` for no load bound)"
            )));
        }
        if !(1..=10_000).contains(&virtual_nodes) {
            return Err(PolicyError::Invalid(format!(
                "consistent-hash: virtual_nodes must be between 1 and 10000 (got {virtual_nodes})"
            )));
        }
        let mut ring: Vec<(u64, u32)> = Vec::with_capacity(nodes.len() * virtual_nodes as usize);
        for (id, name) in nodes.iter().enumerate() {
            let base = crate::hash_key(name);
            for replica in 0..u64::from(virtual_nodes) {
                ring.push((mix64(base ^ mix64(replica)), id as u32));
            }
        }
        ring.sort_unstable();
        let (points, owners) = ring.into_iter().unzip::<_, _, Vec<_>, Vec<_>>();
        Ok(ConsistentHash {
            points: points.into_boxed_slice(),
            owners: owners.into_boxed_slice(),
            built_for: nodes.len(),
            epsilon,
        })
    }
}

impl Policy for ConsistentHash {
    fn needs(&self) -> Needs {
        Needs {
            request_content: true,
            ..Needs::default()
        }
    }

    fn name(&self) -> &'static str {
        "consistent-hash"
    }

    fn pick(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let n = known_nodes(view, self.built_for);
        let (mut available, mut total_active) = (0u64, 0u64);
        for id in 0..n {
            let state = view.node(id);
            if state.available {
                available += 1;
                total_active += u64::from(state.active);
            }
        }
        if available == 0 {
            return None;
        }
        // Float to integer casts saturate, so an infinite ε is simply "no bound".
        let capacity =
            ((1.0 + self.epsilon) * (total_active + 1) as f64 / available as f64).ceil() as u64;
        // FNV's high bits are weak on short keys; mix before placing the key on the ring.
        let point = mix64(req.key_hash);
        let start = self.points.partition_point(|&p| p < point);
        let len = self.points.len();
        (0..len)
            .map(|step| self.owners[(start + step) % len] as NodeId)
            .find(|&id| {
                if id >= n {
                    return false;
                }
                let state = view.node(id);
                state.available && u64::from(state.active) < capacity
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, request};
    use crate::view::StaticView;

    fn node_names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("node-{i}")).collect()
    }

    fn placements(policy: &ConsistentHash, view: &StaticView, keys: usize) -> Vec<NodeId> {
        (0..keys)
            .map(|k| {
                let key = format!("/objects/{k}.html");
                policy.pick(&request(0, &key), view).unwrap()
            })
            .collect()
    }

    #[test]
    fn keys_spread_and_stick() {
        let policy = ConsistentHash::new(&node_names(4), 0.25, 160).unwrap();
        let view = StaticView::uniform(4);
        let first = placements(&policy, &view, 10_000);
        assert_eq!(first, placements(&policy, &view, 10_000));
        for node in 0..4 {
            let share = first.iter().filter(|&&id| id == node).count();
            assert!((2000..3000).contains(&share), "node {node}: {share}");
        }
    }

    #[test]
    fn removing_a_node_moves_only_its_keys() {
        let names = node_names(5);
        let policy = ConsistentHash::new(&names, f64::INFINITY, 160).unwrap();
        let mut view = StaticView::uniform(5);
        let before = placements(&policy, &view, 10_000);
        view.nodes[3].available = false;
        let after = placements(&policy, &view, 10_000);
        let moved = before.iter().zip(&after).filter(|(b, a)| b != a).count();
        // Exactly the keys of node 3 move, and they are about 1/5 of all.
        assert!(before
            .iter()
            .zip(&after)
            .all(|(&b, &a)| (b == a) == (b != 3)));
        assert!((1500..2500).contains(&moved), "{moved}");

        // Same when the node is removed from the configuration: placement is by name.
        let mut fewer = names.clone();
        fewer.remove(3);
        let rebuilt = ConsistentHash::new(&fewer, f64::INFINITY, 160).unwrap();
        let rebuilt_after = placements(&rebuilt, &StaticView::uniform(4), 10_000);
        let by_name = |ids: &[NodeId], names: &[String]| -> Vec<String> {
            ids.iter().map(|&id| names[id].clone()).collect()
        };
        assert_eq!(by_name(&after, &names), by_name(&rebuilt_after, &fewer));
    }

    #[test]
    fn no_node_exceeds_the_load_bound() {
        let epsilon = 0.25;
        let nodes = 4;
        let policy = ConsistentHash::new(&node_names(nodes), epsilon, 160).unwrap();
        let mut view = StaticView::uniform(nodes);
        // A skewed key stream (one hot key half the time), each request staying active.
        for i in 0..2000usize {
            let key = if i % 2 == 0 {
                "/hot".to_string()
            } else {
                format!("/k{i}")
            };
            let total: u64 = view.nodes.iter().map(|s| u64::from(s.active)).sum();
            let capacity = ((1.0 + epsilon) * (total + 1) as f64 / nodes as f64).ceil() as u32;
            let id = policy.pick(&request(0, &key), &view).unwrap();
            view.nodes[id].active += 1;
            assert!(
                view.nodes[id].active <= capacity,
                "request {i}: {:?}",
                view.nodes
            );
        }
        let max = view.nodes.iter().map(|s| s.active).max().unwrap();
        assert!(f64::from(max) <= (1.0 + epsilon) * 2000.0 / nodes as f64 + 1.0);
    }

    #[test]
    fn a_key_stays_put_while_its_node_is_under_capacity() {
        let policy = ConsistentHash::new(&node_names(4), 0.25, 160).unwrap();
        let mut view = StaticView::uniform(4);
        let home = policy.pick(&request(0, "/x"), &view).unwrap();
        for node in &mut view.nodes {
            node.active = 10;
        }
        // 14 active at home: capacity = ceil(1.25 × (30 + 14 + 1) / 4) = 15, room for one more.
        view.nodes[home].active = 14;
        assert_eq!(policy.pick(&request(0, "/x"), &view), Some(home));
        // 15 active: capacity = ceil(1.25 × 46 / 4) = 15, full.
        view.nodes[home].active = 15;
        assert_ne!(policy.pick(&request(0, "/x"), &view), Some(home));
    }

    #[test]
    fn parameters_are_validated() {
        for bad in [-0.1, f64::NAN] {
            let e = ConsistentHash::new(&node_names(2), bad, 10).unwrap_err();
            assert!(e.to_string().starts_with("consistent-hash: epsilon"), "{e}");
        }
        for bad in [0, 10_001] {
            let e = ConsistentHash::new(&node_names(2), 0.25, bad).unwrap_err();
            assert!(e.to_string().contains("virtual_nodes"), "{e}");
        }
        assert!(ConsistentHash::new(&node_names(2), 0.0, 1).is_ok());
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&ConsistentHash::new(&node_names(4), 0.25, 160).unwrap(), 4);
    }
}
