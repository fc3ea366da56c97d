use super::shared::{default_max_age_ms, Counts, ViewChoice};
use super::support::{known_nodes, least_loaded, Rotor};
use super::target_table::TargetTable;
use super::{translate, Memory, Needs, Policy, PolicyError, RequestInfo};
use crate::view::{ClusterView, NodeId, NodeState};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `lard` (and, with `shrink_after_secs`, of `lard-r`).
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LardParams {
    /// What the thresholds measure: `active` requests (Pai et al., default) or gathered
    /// `utilisation` (the CAP paper).
    #[serde(default)]
    load: LoadMeasure,
    /// Below this a node is lightly loaded (default 25 active, or 0.3 utilisation).
    t_low: Option<f64>,
    /// Above this a node is heavily loaded (default 65 active, or 0.7 utilisation).
    t_high: Option<f64>,
    /// Most object keys remembered (default 1,000,000).
    #[serde(default = "default_max_targets")]
    max_targets: usize,
    /// Whose active requests count (with `load = active`): this switch's (`local`) or the
    /// tier's (`shared`).
    #[serde(default)]
    view: ViewChoice,
    /// A tier snapshot older than this is ignored (the node's local count is used).
    #[serde(default = "default_max_age_ms")]
    max_age_ms: f64,
}

pub(crate) fn default_max_targets() -> usize {
    1_000_000
}

/// The thresholds as written, the measure's paper values where not.
pub(crate) fn thresholds(
    policy: &str,
    load: LoadMeasure,
    t_low: Option<f64>,
    t_high: Option<f64>,
) -> Result<Thresholds, PolicyError> {
    let (low, high) = load.paper_thresholds();
    Thresholds::new(policy, load, t_low.unwrap_or(low), t_high.unwrap_or(high))
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "lard",
    about: "locality-aware request distribution (Pai et al.): a target node per object key",
    params: "load = active (default; t_low 25, t_high 65) | utilisation (t_low 0.3, t_high 0.7), max_targets, view = local (default) | shared, max_age_ms (default 1000)",
    seeded: false,
    check: check::<LardParams>,
    build: |params: &Params, ctx: &PolicyContext<'_>| {
        let p: LardParams = read("lard", params)?;
        let lard = Lard::new(
            ctx.nodes.len(),
            thresholds("lard", p.load, p.t_low, p.t_high)?,
            p.max_targets,
        )?;
        Ok(Box::new(lard.with_counts(Counts::new(
            "lard",
            p.view,
            p.max_age_ms,
        )?)))
    },
};

/// What LARD's thresholds measure on a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadMeasure {
    /// The dispatcher's live count of active requests (Pai et al.: T_low 25, T_high 65).
    #[default]
    Active,
    /// The gathered load index, the busiest resource's utilisation in [0, 1] (the CAP paper's
    /// LARD: T_low 0.3, T_high 0.7), as of the last report.
    Utilisation,
}

impl LoadMeasure {
    /// The thresholds the measure's paper uses: (T_low, T_high).
    pub fn paper_thresholds(self) -> (f64, f64) {
        match self {
            LoadMeasure::Active => (25.0, 65.0),
            LoadMeasure::Utilisation => (0.3, 0.7),
        }
    }

    /// The node's load under this measure.
    pub fn of(self, state: &NodeState) -> f64 {
        match self {
            LoadMeasure::Active => f64::from(state.active),
            LoadMeasure::Utilisation => state.load(),
        }
    }
}

/// LARD's load thresholds (Pai et al., ASPLOS '98; the CAP paper's on utilisation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Thresholds {
    pub measure: LoadMeasure,
    /// Below this a node is lightly loaded.
    pub t_low: f64,
    /// Above this a node is heavily loaded; at twice this it is overloaded outright.
    pub t_high: f64,
}

impl Thresholds {
    /// Checks `0 ≤ t_low < t_high` (and `t_high ≤ 1` for utilisation); `policy` names the policy
    /// in the error message.
    pub fn new(
        policy: &str,
        measure: LoadMeasure,
        t_low: f64,
        t_high: f64,
    ) -> Result<Self, PolicyError> {
        let (paper_low, paper_high) = measure.paper_thresholds();
        let bounded = measure == LoadMeasure::Active || t_high <= 1.0;
        if !(t_low.is_finite() && t_high.is_finite() && t_low >= 0.0 && t_low < t_high && bounded) {
            return Err(PolicyError::Invalid(format!(
                "{policy}: t_low must be below t_high, both ≥ 0{} (got t_low = {t_low}, \
                 t_high = {t_high}; the paper uses {paper_low} and {paper_high})",
                if measure == LoadMeasure::Utilisation {
                    " and at most 1 for utilisation"
                } else {
                    ""
                }
            )));
        }
        Ok(Thresholds {
            measure,
            t_low,
            t_high,
        })
    }

    /// Pai et al.'s rule for leaving a target: it is heavily loaded while some node is lightly
    /// loaded, or it has reached twice the high threshold regardless.
    pub(crate) fn should_move(&self, target: &NodeState, least: &NodeState) -> bool {
        let (t, l) = (self.measure.of(target), self.measure.of(least));
        (t > self.t_high && l < self.t_low) || t >= 2.0 * self.t_high
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
    measure: LoadMeasure,
) -> Option<(NodeId, NodeState)> {
    let n = known_nodes(view, built_for);
    let start = tie_break.spin(n);
    match measure {
        LoadMeasure::Active => least_loaded(view, n, start),
        LoadMeasure::Utilisation => least_utilised(view, n, start),
    }
}

/// The available node with the lowest gathered load index; ties (nodes that report the same, or
/// have not reported) go to fewer live active requests, then rotate.
fn least_utilised(
    view: &dyn ClusterView,
    limit: usize,
    start: usize,
) -> Option<(NodeId, NodeState)> {
    let mut best: Option<(NodeId, NodeState)> = None;
    for i in 0..limit {
        let id = (start + i) % limit;
        let state = view.node(id);
        if !state.available {
            continue;
        }
        let better = best.is_none_or(|(_, b)| {
            state.load() < b.load() || (state.load() == b.load() && state.active < b.active)
        });
        if better {
            best = Some((id, state));
        }
    }
    best
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
/// Load is the node's live `active` requests (Pai et al.) or its gathered utilisation (the CAP
/// paper), as [`Thresholds::measure`] says. The target is the request's key (`key_hash`). A target
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
    counts: Counts,
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
            counts: Counts::LOCAL,
        })
    }

    /// The same LARD comparing the given counts (local or tier-wide) with its thresholds.
    pub fn with_counts(mut self, counts: Counts) -> Self {
        self.counts = counts;
        self
    }

    fn pick_on(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let measure = self.thresholds.measure;
        let (least, least_state) =
            least_loaded_known(view, self.built_for, &self.tie_break, measure)?;
        let n = known_nodes(view, self.built_for);
        let chosen = self.targets.update(req.key_hash, |target, fresh| {
            let current = *target as NodeId;
            let usable = !fresh && current < n && view.node(current).available;
            let chosen = if usable
                && !self
                    .thresholds
                    .should_move(&view.node(current), &least_state)
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

impl Policy for Lard {
    fn needs(&self) -> Needs {
        Needs {
            request_content: true,
            gathered_load: self.thresholds.measure == LoadMeasure::Utilisation,
            ..Needs::default()
        }
    }

    fn name(&self) -> &'static str {
        "lard"
    }

    fn pick(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        self.counts.with(view, |view| self.pick_on(req, view))
    }

    fn memory(&self) -> Option<Memory> {
        Some(Memory::Targets(
            self.targets.entries(|&node| Some(node as NodeId)),
        ))
    }

    /// Targets on nodes that stay keep their node; targets on nodes that left are forgotten
    /// (the key gets a fresh target when it comes back). From LARD/R, a set's first member
    /// that stays becomes the target.
    fn recall(&self, memory: &Memory, old_to_new: &[Option<NodeId>]) {
        let keep = |key: u64, node: NodeId| self.targets.update(key, |t, _| *t = node as u32);
        match memory {
            Memory::Targets(targets) => {
                for &(key, old) in targets {
                    if let Some(node) = translate(old, old_to_new) {
                        keep(key, node);
                    }
                }
            }
            Memory::ServerSets(sets) => {
                for (key, set) in sets {
                    if let Some(node) = set.members.iter().find_map(|&m| translate(m, old_to_new)) {
                        keep(*key, node);
                    }
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

    fn lard(t_low: u32, t_high: u32) -> Lard {
        let t = Thresholds::new("lard", LoadMeasure::Active, t_low.into(), t_high.into());
        Lard::new(3, t.unwrap(), 1000).unwrap()
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
        let active = |low, high| Thresholds::new("lard", LoadMeasure::Active, low, high);
        let e = active(65.0, 25.0).unwrap_err().to_string();
        assert!(e.starts_with("lard: t_low must be below t_high"), "{e}");
        assert!(active(0.0, 0.0).is_err());
        assert!(active(0.0, 1.0).is_ok());
        assert!(active(f64::NAN, 1.0).is_err());
        let util = |low, high| Thresholds::new("lard", LoadMeasure::Utilisation, low, high);
        assert!(util(0.3, 0.7).is_ok());
        let e = util(0.3, 2.0).unwrap_err().to_string();
        assert!(e.contains("at most 1") && e.contains("0.3 and 0.7"), "{e}");
        let t = active(25.0, 65.0).unwrap();
        let e = Lard::new(2, t, 1).err().unwrap().to_string();
        assert!(e.contains("max_targets"), "{e}");
    }

    #[test]
    fn shared_behaviour() {
        let t = Thresholds::new("lard", LoadMeasure::Active, 25.0, 65.0).unwrap();
        check_common_behaviour(&Lard::new(4, t, 1000).unwrap(), 4);
        let t = Thresholds::new("lard", LoadMeasure::Utilisation, 0.3, 0.7).unwrap();
        check_common_behaviour(&Lard::new(4, t, 1000).unwrap(), 4);
        let shared = Counts::new("t", ViewChoice::Shared, 1000.0).unwrap();
        let t = Thresholds::new("lard", LoadMeasure::Active, 25.0, 65.0).unwrap();
        check_common_behaviour(&Lard::new(4, t, 1000).unwrap().with_counts(shared), 4);
    }

    /// With the shared view, a key leaves a node the whole tier overloads even though this
    /// switch alone has little on it.
    #[test]
    fn the_shared_view_moves_a_key_off_a_node_the_tier_overloads() {
        use crate::view::TierState;
        let shared = Counts::new("t", ViewChoice::Shared, 1000.0).unwrap();
        let local = lard(25, 65);
        let policy = lard(25, 65).with_counts(shared);
        let mut view = StaticView::uniform(2);
        let first = policy.pick(&request(0, "/a"), &view).unwrap();
        assert_eq!(local.pick(&request(0, "/a"), &view), Some(first));
        view.nodes[first].active = 5;
        view.nodes[first].tier = TierState {
            at_nanos: Some(0),
            active: 70,
            own_active: 5,
            ..TierState::default()
        };
        assert_eq!(local.pick(&request(0, "/a"), &view), Some(first));
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(1 - first));
    }

    #[test]
    fn targets_on_nodes_that_stay_survive_a_change_of_the_node_list() {
        let old = lard(25, 65);
        let view = StaticView::uniform(3);
        let keys: Vec<String> = (0..30).map(|i| format!("/k{i}")).collect();
        let before: Vec<NodeId> = keys
            .iter()
            .map(|k| old.pick(&request(0, k), &view).unwrap())
            .collect();
        assert!((0..3).all(|n| before.contains(&n)), "{before:?}");
        // Node 1 leaves, a new node joins at the end: old 0 → 0, 1 → gone, 2 → 1; new node 2.
        let map = [Some(0), None, Some(1)];
        let new = lard(25, 65);
        crate::policy::carry_over(&new, &old, &map);
        let view = StaticView::uniform(3);
        for (key, &was) in keys.iter().zip(&before) {
            let now = new.pick(&request(0, key), &view).unwrap();
            if let Some(same) = map[was] {
                assert_eq!(now, same, "{key} kept its node");
            }
        }
        // Without the memory the same keys land elsewhere, so the test can tell.
        let fresh = lard(25, 65);
        let moved = keys
            .iter()
            .zip(&before)
            .filter(|(k, &was)| map[was].is_some() && map[was] != fresh.pick(&request(0, k), &view))
            .count();
        assert!(moved > 5, "{moved}");
    }

    /// The CAP paper's LARD: thresholds on gathered utilisation, not on active requests.
    #[test]
    fn utilisation_thresholds_move_a_key_off_a_busy_node() {
        let t = Thresholds::new("lard", LoadMeasure::Utilisation, 0.3, 0.7).unwrap();
        let policy = Lard::new(3, t, 1000).unwrap();
        let mut view = StaticView::uniform(3);
        view.set_load(0, 0.5);
        view.set_load(1, 0.4);
        view.set_load(2, 0.6);
        // A new key goes to the least utilised node, whatever the active counts say.
        view.nodes[1].active = 50;
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(1));
        // Heavily loaded (0.8 > 0.7) but nobody is light (< 0.3): the key stays.
        view.set_load(1, 0.8);
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(1));
        // Node 0 drops to 0.2: the key moves there.
        view.set_load(0, 0.2);
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(0));
        // Active counts alone never move it.
        view.nodes[0].active = 500;
        assert_eq!(policy.pick(&request(0, "/a"), &view), Some(0));
        assert!(policy.needs().gathered_load && policy.needs().request_content);
    }
}
