use super::lard::{check_max_targets, least_loaded_known, LoadMeasure, Thresholds};
use super::support::{known_nodes, Rotor};
use super::target_table::TargetTable;
use super::{translate, Memory, Needs, Policy, PolicyError, RememberedSet, RequestInfo};
use crate::view::{ClusterView, NodeId, NodeState};

use super::lard::thresholds;
use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `lard-r`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LardRParams {
    /// What the thresholds measure, as for `lard`.
    #[serde(default)]
    load: LoadMeasure,
    t_low: Option<f64>,
    t_high: Option<f64>,
    /// Pai et al.'s K: seconds without a change before a server set shrinks (default 20).
    #[serde(default = "default_shrink_after_secs")]
    shrink_after_secs: f64,
    /// Most object keys remembered (default 1,000,000).
    #[serde(default = "super::lard::default_max_targets")]
    max_targets: usize,
}

fn default_shrink_after_secs() -> f64 {
    20.0
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "lard-r",
    about: "LARD with replication (Pai et al.): a set of nodes per key, grown and shrunk",
    params: "as lard, plus shrink_after_secs (default 20)",
    seeded: false,
    check: check::<LardRParams>,
    build: |params: &Params, ctx: &PolicyContext<'_>| {
        let p: LardRParams = read("lard-r", params)?;
        Ok(Box::new(LardR::new(
            ctx.nodes.len(),
            thresholds("lard-r", p.load, p.t_low, p.t_high)?,
            p.shrink_after_secs,
            p.max_targets,
        )?))
    },
};

/// The nodes serving one target under LARD/R.
#[derive(Debug, Default)]
struct ServerSet {
    members: Vec<u32>,
    /// `view.now_nanos()` when `members` last changed.
    changed_at_nanos: u64,
}

/// LARD with replication (Pai et al., ASPLOS '98), for targets too hot for one node:
///
/// ```text
/// if serverSet[target] is empty: n ← least loaded node; serverSet[target] ← {n}
/// else:
///     n ← least loaded node in serverSet[target]
///     m ← most loaded node in serverSet[target]
///     if (n.load > T_high and some node has load < T_low) or n.load ≥ 2·T_high:
///         p ← least loaded node; add p to serverSet[target]; n ← p
///     if |serverSet[target]| > 1 and now − serverSet[target].lastMod > K:
///         remove m from serverSet[target]
/// send to n; if serverSet[target] changed: serverSet[target].lastMod ← now
/// ```
///
/// Load is `active`; time is `view.now_nanos()`. Unavailable members are never chosen and count
/// as the most loaded (so they leave first); when no member is available the least loaded node
/// joins. Members whose ids the view no longer has (a reload race) are dropped.
///
/// Memory: at most `max_targets` keys, each ~48 bytes plus its member list.
pub struct LardR {
    built_for: usize,
    thresholds: Thresholds,
    shrink_after_nanos: u64,
    sets: TargetTable<ServerSet>,
    tie_break: Rotor,
}

impl LardR {
    pub fn new(
        node_count: usize,
        thresholds: Thresholds,
        shrink_after_secs: f64,
        max_targets: usize,
    ) -> Result<Self, PolicyError> {
        check_max_targets("lard-r", max_targets)?;
        if !(shrink_after_secs.is_finite() && shrink_after_secs >= 0.0) {
            return Err(PolicyError::Invalid(format!(
                "lard-r: shrink_after_secs must be a number of seconds ≥ 0 (got \
                 {shrink_after_secs}; Pai et al. use 20)"
            )));
        }
        Ok(LardR {
            built_for: node_count,
            thresholds,
            shrink_after_nanos: (shrink_after_secs * 1e9) as u64,
            sets: TargetTable::new(max_targets),
            tie_break: Rotor::new(),
        })
    }
}

impl Policy for LardR {
    fn needs(&self) -> Needs {
        Needs {
            request_content: true,
            gathered_load: self.thresholds.measure == LoadMeasure::Utilisation,
            ..Needs::default()
        }
    }

    fn name(&self) -> &'static str {
        "lard-r"
    }

    fn pick(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let measure = self.thresholds.measure;
        let (least, least_state) =
            least_loaded_known(view, self.built_for, &self.tie_break, measure)?;
        let n = known_nodes(view, self.built_for);
        let now = view.now_nanos();
        let chosen = self.sets.update(req.key_hash, |set, _fresh| {
            set.members.retain(|&m| (m as NodeId) < n);
            // Least loaded available member, and the member to shed (unavailable ones first,
            // then the most loaded).
            let mut lightest: Option<(NodeId, NodeState)> = None;
            let mut heaviest: Option<(NodeId, f64)> = None;
            for &member in &set.members {
                let id = member as NodeId;
                let state = view.node(id);
                let load = measure.of(&state);
                let weight_to_shed = if state.available { load } else { f64::INFINITY };
                if heaviest.is_none_or(|(_, w)| weight_to_shed > w) {
                    heaviest = Some((id, weight_to_shed));
                }
                if state.available && lightest.is_none_or(|(_, l)| load < measure.of(&l)) {
                    lightest = Some((id, state));
                }
            }
            let mut changed = false;
            let chosen = match lightest {
                Some((id, state)) if !self.thresholds.should_move(&state, &least_state) => id,
                _ => {
                    if !set.members.contains(&(least as u32)) {
                        set.members.push(least as u32);
                        changed = true;
                    }
                    least
                }
            };
            let stable_for = now.saturating_sub(set.changed_at_nanos);
            if set.members.len() > 1 && stable_for > self.shrink_after_nanos {
                if let Some((shed, _)) = heaviest.filter(|&(id, _)| id != chosen) {
                    set.members.retain(|&m| m as NodeId != shed);
                    changed = true;
                }
            }
            if changed {
                set.changed_at_nanos = now;
            }
            chosen
        });
        Some(chosen)
    }

    fn memory(&self) -> Option<Memory> {
        Some(Memory::ServerSets(self.sets.entries(|set| {
            Some(RememberedSet {
                members: set.members.iter().map(|&m| m as NodeId).collect(),
                changed_at_nanos: set.changed_at_nanos,
            })
        })))
    }

    /// Members that stay keep their place in the set (with its lastMod); members that left are
    /// dropped, and a set left empty is forgotten. LARD's targets become one-member sets.
    fn recall(&self, memory: &Memory, old_to_new: &[Option<NodeId>]) {
        let keep = |key: u64, members: Vec<u32>, changed_at_nanos: u64| {
            if !members.is_empty() {
                self.sets.update(key, |set, _| {
                    *set = ServerSet {
                        members,
                        changed_at_nanos,
                    }
                });
            }
        };
        let member = |old: NodeId| translate(old, old_to_new).map(|n| n as u32);
        match memory {
            Memory::ServerSets(sets) => {
                for (key, set) in sets {
                    let members = set.members.iter().filter_map(|&m| member(m)).collect();
                    keep(*key, members, set.changed_at_nanos);
                }
            }
            Memory::Targets(targets) => {
                for &(key, old) in targets {
                    keep(key, member(old).into_iter().collect(), 0);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, request};
    use crate::view::StaticView;

    const SECOND: u64 = 1_000_000_000;

    fn lard_r(nodes: usize, shrink_after_secs: f64) -> LardR {
        let t = Thresholds::new("lard-r", LoadMeasure::Active, 25.0, 65.0).unwrap();
        LardR::new(nodes, t, shrink_after_secs, 1000).unwrap()
    }

    #[test]
    fn a_hot_target_gains_a_replica_and_uses_both() {
        let policy = lard_r(3, 20.0);
        let mut view = StaticView::uniform(3);
        view.nodes[1].active = 10;
        view.nodes[2].active = 10;
        let first = policy.pick(&request(0, "/hot"), &view).unwrap();
        assert_eq!(first, 0);
        // Node 0 is heavily loaded while node 2 is lightly loaded: node 2 joins the set.
        view.nodes[0].active = 70;
        view.nodes[1].active = 40;
        assert_eq!(policy.pick(&request(0, "/hot"), &view), Some(2));
        // The set is {0, 2}: requests go to its least loaded member, never to node 1.
        view.nodes[0].active = 50;
        view.nodes[2].active = 60;
        view.nodes[1].active = 0;
        assert_eq!(policy.pick(&request(0, "/hot"), &view), Some(0));
    }

    #[test]
    fn the_set_shrinks_after_k_seconds_without_change() {
        let policy = lard_r(2, 20.0);
        let mut view = StaticView::uniform(2);
        view.nodes[1].active = 5;
        assert_eq!(policy.pick(&request(0, "/hot"), &view), Some(0));
        view.nodes[0].active = 130;
        view.now_nanos = SECOND;
        assert_eq!(policy.pick(&request(0, "/hot"), &view), Some(1));
        // Both members now; at exactly K seconds since the change nothing is removed yet.
        view.nodes[0].active = 10;
        view.nodes[1].active = 20;
        view.now_nanos = 21 * SECOND;
        assert_eq!(policy.pick(&request(0, "/hot"), &view), Some(0));
        assert_eq!(policy.pick(&request(0, "/hot"), &view), Some(0));
        // Past K: the most loaded member (node 1) leaves.
        view.now_nanos = 21 * SECOND + 1;
        assert_eq!(policy.pick(&request(0, "/hot"), &view), Some(0));
        view.nodes[0].active = 30;
        view.nodes[1].active = 0;
        view.now_nanos = 22 * SECOND;
        assert_eq!(
            policy.pick(&request(0, "/hot"), &view),
            Some(0),
            "node 1 left the set"
        );
    }

    #[test]
    fn unavailable_members_are_skipped_and_replaced() {
        let policy = lard_r(3, 20.0);
        let mut view = StaticView::uniform(3);
        let first = policy.pick(&request(0, "/a"), &view).unwrap();
        view.nodes[first].available = false;
        let second = policy.pick(&request(0, "/a"), &view).unwrap();
        assert_ne!(first, second);
        view.nodes[first].available = true;
        view.nodes[first].active = 9;
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(second));
    }

    #[test]
    fn parameters_are_validated() {
        let t = Thresholds::new("lard-r", LoadMeasure::Active, 25.0, 65.0).unwrap();
        for bad in [-1.0, f64::NAN, f64::INFINITY] {
            let e = LardR::new(2, t, bad, 10).err().unwrap().to_string();
            assert!(e.starts_with("lard-r: shrink_after_secs"), "{e}");
        }
        assert!(LardR::new(2, t, 20.0, 0).is_err());
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&lard_r(4, 20.0), 4);
    }

    #[test]
    fn server_sets_keep_members_that_stay_across_a_change_of_the_node_list() {
        let old = lard_r(3, 20.0);
        let mut view = StaticView::uniform(3);
        view.nodes[1].active = 10;
        view.nodes[2].active = 10;
        assert_eq!(policy_pick(&old, "/hot", &view), 0);
        view.nodes[0].active = 70;
        view.nodes[1].active = 40;
        view.now_nanos = 5 * SECOND;
        assert_eq!(
            policy_pick(&old, "/hot", &view),
            2,
            "node 2 joins the set {{0, 2}}"
        );
        let Some(Memory::ServerSets(sets)) = old.memory() else {
            panic!("lard-r remembers server sets");
        };
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].1.members, vec![0, 2]);
        assert_eq!(sets[0].1.changed_at_nanos, 5 * SECOND);

        // Node 0 leaves; old 1 → 0, old 2 → 1; a new node 2 joins. The set is now {1}.
        let new = lard_r(3, 20.0);
        crate::policy::carry_over(&new, &old, &[None, Some(0), Some(1)]);
        let mut view = StaticView::uniform(3);
        view.nodes[1].active = 30;
        view.now_nanos = 6 * SECOND;
        assert_eq!(
            policy_pick(&new, "/hot", &view),
            1,
            "the member that stayed"
        );

        // LARD's targets become one-member sets.
        let lard = crate::policy::Lard::new(
            2,
            Thresholds::new("lard", LoadMeasure::Active, 25.0, 65.0).unwrap(),
            100,
        )
        .unwrap();
        let two = StaticView::uniform(2);
        let target = lard.pick(&request(0, "/x"), &two).unwrap();
        let from_lard = lard_r(2, 20.0);
        crate::policy::carry_over(&from_lard, &lard, &[Some(1), Some(0)]);
        assert_eq!(policy_pick(&from_lard, "/x", &two), 1 - target);
    }

    fn policy_pick(policy: &LardR, key: &str, view: &StaticView) -> NodeId {
        policy.pick(&request(0, key), view).unwrap()
    }
}
