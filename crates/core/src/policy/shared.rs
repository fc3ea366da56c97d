//! Counting on the tier-wide view: the `view = "local" | "shared"` parameter of the policies
//! that compare active requests (`least-connections`, `lard`, `peak-ewma`, `power-of-d`,
//! `join-idle-queue`).
//!
//! `local` (the default of the older policies) counts only this dispatcher's own live requests,
//! as a lone switch does. `shared` counts the whole tier's: [`SharedCounts`] shows the policy a
//! view whose `active` is the tier-wide estimate ([`crate::TierState::estimate_active`]) for every
//! node whose tier snapshot is at most `max_age_ms` old, and the live local count for the others
//! (none known, or the gossip stopped), so a policy falls back node by node rather than failing.
//! The policy's own code is unchanged: it reads `active` as before.

use super::PolicyError;
use crate::view::{ClusterView, Dispatcher, NodeId, NodeState};

/// Which active counts a policy compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ViewChoice {
    /// This dispatcher's own live counts only.
    #[default]
    Local,
    /// The tier-wide counts where fresh, the local ones elsewhere.
    Shared,
}

/// The default `max_age_ms`: a tier snapshot older than this is ignored.
pub(crate) fn default_max_age_ms() -> f64 {
    1000.0
}

/// A policy's choice of counts, checked.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Counts {
    pub choice: ViewChoice,
    pub max_age_nanos: u64,
}

impl Counts {
    /// Local counts (what every policy did before tiers).
    pub const LOCAL: Counts = Counts {
        choice: ViewChoice::Local,
        max_age_nanos: 0,
    };

    /// Checks `max_age_ms` (a number of milliseconds > 0); `policy` names it in the error.
    pub fn new(policy: &str, choice: ViewChoice, max_age_ms: f64) -> Result<Counts, PolicyError> {
        if !(max_age_ms.is_finite() && max_age_ms > 0.0) {
            return Err(PolicyError::Invalid(format!(
                "{policy}: max_age_ms must be a number of milliseconds > 0 (got {max_age_ms})"
            )));
        }
        Ok(Counts {
            choice,
            max_age_nanos: (max_age_ms * 1e6) as u64,
        })
    }

    /// Runs `f` on the view with the chosen counts.
    pub fn with<R>(&self, view: &dyn ClusterView, f: impl FnOnce(&dyn ClusterView) -> R) -> R {
        match self.choice {
            ViewChoice::Local => f(view),
            ViewChoice::Shared => f(&SharedCounts::new(view, self.max_age_nanos)),
        }
    }

    /// The count of one node under this choice.
    pub fn active(&self, state: &NodeState, now_nanos: u64) -> u32 {
        match self.choice {
            ViewChoice::Local => state.active,
            ViewChoice::Shared => state
                .shared_active(now_nanos, self.max_age_nanos)
                .unwrap_or(state.active),
        }
    }

    /// True when the node's tier snapshot is used under this choice.
    pub fn is_shared(&self, state: &NodeState, now_nanos: u64) -> bool {
        self.choice == ViewChoice::Shared && state.tier.is_fresh(now_nanos, self.max_age_nanos)
    }
}

/// A view whose `active` counts are tier-wide where the tier snapshot is fresh (module doc).
pub struct SharedCounts<'a> {
    inner: &'a dyn ClusterView,
    now: u64,
    max_age_nanos: u64,
}

impl<'a> SharedCounts<'a> {
    pub fn new(inner: &'a dyn ClusterView, max_age_nanos: u64) -> Self {
        SharedCounts {
            now: inner.now_nanos(),
            inner,
            max_age_nanos,
        }
    }
}

impl ClusterView for SharedCounts<'_> {
    fn now_nanos(&self) -> u64 {
        self.now
    }
    fn node_count(&self) -> usize {
        self.inner.node_count()
    }
    fn node(&self, id: NodeId) -> NodeState {
        let mut state = self.inner.node(id);
        if let Some(active) = state.shared_active(self.now, self.max_age_nanos) {
            state.active = active;
        }
        state
    }
    fn receiving_node(&self) -> Option<NodeId> {
        self.inner.receiving_node()
    }
    fn dispatcher(&self) -> Dispatcher {
        self.inner.dispatcher()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{StaticView, TierState};

    #[test]
    fn shared_counts_replace_fresh_nodes_only() {
        let mut view = StaticView::uniform(3);
        view.now_nanos = 1_000_000_000;
        view.nodes[0].active = 1;
        view.nodes[0].tier = TierState {
            at_nanos: Some(900_000_000),
            active: 7,
            own_active: 1,
            ..TierState::default()
        };
        view.nodes[1].active = 2;
        view.nodes[1].tier = TierState {
            at_nanos: Some(0),
            active: 50,
            ..TierState::default()
        };
        view.nodes[2].active = 4;
        let counts = Counts::new("t", ViewChoice::Shared, 500.0).unwrap();
        let seen: Vec<u32> = counts.with(&view, |v| (0..3).map(|i| v.node(i).active).collect());
        // Node 0: fresh (100 ms old), 6 others + 1 own; node 1: 1 s old, stale; node 2: unknown.
        assert_eq!(seen, vec![7, 2, 4]);
        assert_eq!(counts.active(&view.nodes[0], view.now_nanos), 7);
        assert!(counts.is_shared(&view.nodes[0], view.now_nanos));
        assert!(!counts.is_shared(&view.nodes[1], view.now_nanos));
        let local: Vec<u32> =
            Counts::LOCAL.with(&view, |v| (0..3).map(|i| v.node(i).active).collect());
        assert_eq!(local, vec![1, 2, 4]);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = Counts::new("lard", ViewChoice::Shared, bad).unwrap_err();
            assert!(e.to_string().starts_with("lard: max_age_ms"), "{e}");
        }
    }
}
