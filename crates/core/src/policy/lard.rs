use super::support::{known_nodes, least_loaded, Rotor};
use super::target_table::TargetTable;
use super::{Policy, PolicyError, RequestInfo};
use crate::view::{ClusterView, NodeId, NodeState};

/// LARD's load thresholds on a node's active requests (Pai et al., ASPLOS '98).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    /// Below this a node is lightly loaded.
    pub t_low: u32,
    /// Above this a node is heavily loaded; at twice this it is overloaded outright.
    pub t_high: u32,
}

impl Thresholds {
    /// Checks `t_low < t_high`; `policy` names the policy in the error message.
    pub fn new(policy: &str, t_low: u32, t_high: u32) -> Result<Self, PolicyError> {
        if t_high == 0 || t_low >= t_high {
            return Err(PolicyError::Invalid(format!(
                "{policy}: t_low must be below t_high and t_high above 0 (got t_low = {t_low}, \
                 t_high = {t_high}; Pai et al. use 25 and 65)"
            )));
        }
        Ok(Thresholds { t_low, t_high })
    }

    /// Pai et al.'s rule for leaving a target: it is heavily loaded while some node is lightly
    /// loaded, or it has reached twice the high threshold regardless.
    pub(crate) fn should_move(&self, target_active: u32, least_active: u32) -> bool {
        (target_active > self.t_high && least_active < self.t_low)
            || u64::from(target_active) >= 2 * u64::from(self.t_high)
    }
}

pub(crate) fn check_max_targets(policy: &str, max_targets: usize) -> Result<(), PolicyError> {
    if max_targets < 2 {
        return Err(PolicyError::Invalid(format!(
            "{policy}: max_targets must be at least 2 (got {max_targets})"
        )));
    }
    Ok(())
}

/// The least loaded available node, where every LARD decision starts.
pub(crate) fn least_loaded_known(
    view: &dyn ClusterView,
    built_for: usize,
    tie_break: &Rotor,
) -> Option<(NodeId, NodeState)> {
    let n = known_nodes(view, built_for);
    least_loaded(view, n, tie_break.spin(n))
}

/// Locality-aware request distribution (Pai et al., ASPLOS '98), basic version:
///
/// ```text
/// if server[target] is unset: server[target] ← least loaded node
/// else if (server[target].load > T_high and some node has load < T_low)
///         or server[target].load ≥ 2·T_high: server[target] ← least loaded node
/// send to server[target]
/// ```
///
/// Load is the node's `active` requests. The target is the request's key (`key_hash`). A target
/// whose node is unavailable (or gone after a reload) is reassigned as if it were new.
///
/// Memory: at most `max_targets` keys are remembered, about 16 bytes each in the hash table (so
/// the default 1,000,000 is ~16–32 MB); beyond that the least recently used keys are forgotten by
/// generation (see `TargetTable`) and get a fresh target when they come back.
pub struct Lard {
    built_for: usize,
    thresholds: Thresholds,
    targets: TargetTable<u32>,
    tie_break: Rotor,
}

impl Lard {
    pub fn new(
        node_count: usize,
        thresholds: Thresholds,
        max_targets: usize,
    ) -> Result<Self, PolicyError> {
        check_max_targets("lard", max_targets)?;
        Ok(Lard {
            built_for: node_count,
            thresholds,
            targets: TargetTable::new(max_targets),
            tie_break: Rotor::new(),
        })
    }
}

impl Policy for Lard {
    fn name(&self) -> &'static str {
        "lard"
    }

    fn pick(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let (least, least_state) = least_loaded_known(view, self.built_for, &self.tie_break)?;
        let n = known_nodes(view, self.built_for);
        let chosen = self.targets.update(req.key_hash, |target, fresh| {
            let current = *target as NodeId;
            let usable = !fresh && current < n && view.node(current).available;
            let chosen = if usable
                && !self
                    .thresholds
                    .should_move(view.node(current).active, least_state.active)
            {
                current
            } else {
                least
            };
            *target = chosen as u32;
            chosen
        });
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, request};
    use crate::view::StaticView;

    fn lard(t_low: u32, t_high: u32) -> Lard {
        Lard::new(3, Thresholds::new("lard", t_low, t_high).unwrap(), 1000).unwrap()
    }

    #[test]
    fn a_key_stays_on_its_node_below_the_thresholds() {
        let policy = lard(25, 65);
        let mut view = StaticView::uniform(3);
        let first = policy.pick(&request(0, "/a"), &view).unwrap();
        // Even when its node is now the busiest, up to T_high, the key stays.
        view.nodes[first].active = 65;
        for _ in 0..5 {
            assert_eq!(policy.pick(&request(0, "/a"), &view), Some(first));
        }
        // New keys go to the least loaded node.
        let b = policy.pick(&request(0, "/b"), &view).unwrap();
        assert_ne!(b, first);
        view.nodes[b].active = 1;
        let c = policy.pick(&request(0, "/c"), &view).unwrap();
        assert!(c != first && c != b);
    }

    #[test]
    fn moves_when_over_t_high_and_some_node_is_under_t_low() {
        let policy = lard(25, 65);
        let mut view = StaticView::uniform(3);
        for node in &mut view.nodes {
            node.active = 30;
        }
        let first = policy.pick(&request(0, "/a"), &view).unwrap();
        view.nodes[first].active = 66;
        // Nobody under T_low: stay.
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(first));
        let other = (first + 1) % 3;
        view.nodes[other].active = 24;
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(other));
        // And the key stays on its new node.
        view.nodes[first].active = 0;
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(other));
    }

    #[test]
    fn moves_at_twice_t_high_regardless() {
        let policy = lard(25, 65);
        let mut view = StaticView::uniform(2);
        for node in &mut view.nodes {
            node.active = 100;
        }
        let first = policy.pick(&request(0, "/a"), &view).unwrap();
        view.nodes[first].active = 129;
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(first));
        view.nodes[first].active = 130;
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(1 - first));
    }

    #[test]
    fn an_unavailable_target_is_replaced() {
        let policy = lard(25, 65);
        let mut view = StaticView::uniform(3);
        let first = policy.pick(&request(0, "/a"), &view).unwrap();
        view.nodes[first].available = false;
        let second = policy.pick(&request(0, "/a"), &view).unwrap();
        assert_ne!(second, first);
        view.nodes[first].available = true;
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(second));
    }

    #[test]
    fn parameters_are_validated() {
        let e = Thresholds::new("lard", 65, 25).unwrap_err().to_string();
        assert!(e.starts_with("lard: t_low must be below t_high"), "{e}");
        assert!(Thresholds::new("lard", 0, 0).is_err());
        assert!(Thresholds::new("lard", 0, 1).is_ok());
        let t = Thresholds::new("lard", 25, 65).unwrap();
        let e = Lard::new(2, t, 1).err().unwrap().to_string();
        assert!(e.contains("max_targets"), "{e}");
    }

    #[test]
    fn shared_behaviour() {
        let t = Thresholds::new("lard", 25, 65).unwrap();
        check_common_behaviour(&Lard::new(4, t, 1000).unwrap(), 4);
    }
}
