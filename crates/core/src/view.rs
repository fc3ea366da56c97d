//! The cluster as a policy sees it.
//!
//! A node's state has two kinds of fields:
//!
//! - **live** — counted by the dispatcher itself at the moment of the decision: [`NodeState::active`]
//!   (requests it placed on the node and that have not finished) and membership
//!   ([`NodeState::available`]);
//! - **gathered** — [`NodeState::gathered`], from the node's last load report as the
//!   [`crate::gather::Gatherer`] turned it into state: CPU, disk and network utilisation, the
//!   node's own count of requests in service, its mean service time, requests served, and when
//!   the report arrived (so a policy can tell its age). Gathered fields change only once per
//!   gathering interval (T_gat), in the switch and in the simulator alike.
//!
//! - **tier-wide** — [`NodeState::tier`], what the dispatchers of a tier (several switches in
//!   front of the same nodes) told each other about the node: the active requests of all of them
//!   together, a recent latency, whether one of them ejected the node, and when this snapshot
//!   was taken ([`TierState::at_nanos`], so a policy can tell its age). The switch fills it from
//!   its peers' gossip, the simulator from its dispatchers' counts every gossip period. A lone
//!   dispatcher, or one whose peers stopped talking, leaves it unknown (`at_nanos: None`), and
//!   every policy then decides exactly as on live fields alone.
//!
//! [`NodeState::weight`] is the configured weight, or the weight the gatherer derived from
//! gathered state when the policy asks for derived weights (the CAP paper's WRR_num, WRR_time).
//!
//! The tier-wide count is stale by up to a gossip period, while the dispatcher's own part of it
//! is known live. [`TierState::estimate_active`] combines the two: the other dispatchers' requests
//! as of the snapshot (`active − own_active`) plus this dispatcher's live count, so a request it
//! placed a moment ago counts at once and is never counted twice.
//!
//! [`ClusterView::dispatcher`] says which dispatcher of how many the view belongs to (index 0 of
//! 1 alone), for policies that split work among the dispatchers of a tier (`join-idle-queue`).

/// Index of a node in the cluster's node list (0-based, in configuration order).
pub type NodeId = usize;

/// What the node's last load report said, as the gatherer keeps it (all **gathered**).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Gathered {
    /// View time at which the report arrived; `None` while the node has never reported.
    pub at_nanos: Option<u64>,
    /// CPU, disk and network utilisation over the node's last interval, each in [0, 1].
    pub cpu: f64,
    pub disk: f64,
    pub net: f64,
    /// Requests the node said it was serving when it reported.
    pub active: u32,
    /// Mean service time of the requests it finished in its last interval, milliseconds (0 when
    /// it finished none).
    pub mean_service_ms: f64,
    /// Requests the node has served since it started.
    pub served: u64,
}

impl Gathered {
    /// The load index: the busiest resource's utilisation (0 when the node never reported).
    pub fn load(&self) -> f64 {
        self.cpu.max(self.disk).max(self.net).clamp(0.0, 1.0)
    }

    /// How old the report is at `now_nanos`; `None` when there is none.
    pub fn age_nanos(&self, now_nanos: u64) -> Option<u64> {
        self.at_nanos.map(|at| now_nanos.saturating_sub(at))
    }
}

/// What the dispatchers of a tier last told each other about a node (all **tier-wide**; see the
/// module doc). The default is "unknown": no snapshot, every count 0.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TierState {
    /// View time at which this snapshot of the tier was taken; `None` while there is none (a lone
    /// dispatcher, or the tier's gossip has not reached this one yet).
    pub at_nanos: Option<u64>,
    /// Requests active on the node summed over every dispatcher of the tier, this one included
    /// (as of `at_nanos`).
    pub active: u32,
    /// This dispatcher's own part of `active`: its live count when the snapshot was taken.
    pub own_active: u32,
    /// Requests finished on the node, summed over the tier (only grows). `join-idle-queue` uses
    /// it as the node's idle epoch: it changes whenever the node may have become idle again.
    pub finished: u64,
    /// A recent latency of the node's requests across the tier, milliseconds (0 when unknown).
    pub latency_ms: f64,
    /// Some dispatcher of the tier has ejected the node (outlier detection, health checks).
    pub ejected: bool,
}

impl TierState {
    /// How old the snapshot is at `now_nanos`; `None` when there is none.
    pub fn age_nanos(&self, now_nanos: u64) -> Option<u64> {
        self.at_nanos.map(|at| now_nanos.saturating_sub(at))
    }

    /// True when there is a snapshot no older than `max_age_nanos` at `now_nanos`.
    pub fn is_fresh(&self, now_nanos: u64, max_age_nanos: u64) -> bool {
        self.age_nanos(now_nanos)
            .is_some_and(|age| age <= max_age_nanos)
    }

    /// The node's active requests across the tier as best known now: the other dispatchers'
    /// requests as of the snapshot plus `live_own`, this dispatcher's live count.
    pub fn estimate_active(&self, live_own: u32) -> u32 {
        self.active
            .saturating_sub(self.own_active)
            .saturating_add(live_own)
    }
}

/// What a policy may know about one node at the moment of a decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeState {
    /// **Live.** False while the node is administratively down or draining, out by passive or
    /// active health checks or outlier ejection, silent (its reports stopped), or excluded for
    /// this decision (a retry must not go back to the node that just failed). The live switch
    /// also hides a node at its admission limit with a full queue while another has room.
    pub available: bool,
    /// Configured weight (≥ 1), or derived from gathered state (see the module doc).
    pub weight: u32,
    /// **Live.** Requests placed on this node by the dispatcher and not yet finished.
    pub active: u32,
    /// **Gathered.** The node's last load report.
    pub gathered: Gathered,
    /// **Tier-wide.** What the tier's dispatchers last shared about the node (unknown when
    /// nothing feeds it).
    pub tier: TierState,
}

impl NodeState {
    /// The gathered load index (busiest resource's utilisation), 0 when unknown.
    pub fn load(&self) -> f64 {
        self.gathered.load()
    }

    /// The tier-wide estimate of the node's active requests ([`TierState::estimate_active`])
    /// when the tier's snapshot is at most `max_age_nanos` old at `now_nanos`, else `None`.
    pub fn shared_active(&self, now_nanos: u64, max_age_nanos: u64) -> Option<u32> {
        self.tier
            .is_fresh(now_nanos, max_age_nanos)
            .then(|| self.tier.estimate_active(self.active))
    }
}

impl Default for NodeState {
    fn default() -> Self {
        NodeState {
            available: true,
            weight: 1,
            active: 0,
            gathered: Gathered::default(),
            tier: TierState::default(),
        }
    }
}

/// Read-only view of the cluster handed to [`crate::Policy::pick`].
pub trait ClusterView {
    /// Current time in nanoseconds since an arbitrary epoch fixed for the view's lifetime
    /// (real time in the switch, virtual time in the simulator).
    fn now_nanos(&self) -> u64;
    /// Number of nodes; node ids are `0..node_count()`.
    fn node_count(&self) -> usize;
    /// State of node `id` (`id < node_count()`).
    fn node(&self, id: NodeId) -> NodeState;
    /// The node that received this request and is deciding where it goes, in a cluster without a
    /// front end: SWEB's DNS rotation hands each request to a node whose broker serves it or
    /// redirects it. `None` (the default) behind a switch, where no node has received it yet.
    fn receiving_node(&self) -> Option<NodeId> {
        None
    }
    /// Which dispatcher of the tier this view belongs to; a lone dispatcher (the default) is
    /// index 0 of 1.
    fn dispatcher(&self) -> Dispatcher {
        Dispatcher::ALONE
    }
}

/// One dispatcher's place in its tier: index `index` of `count` (`index < count`), the same
/// numbering at every dispatcher (the switch numbers its live peers in address order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dispatcher {
    pub index: usize,
    pub count: usize,
}

impl Dispatcher {
    /// A dispatcher with no peers.
    pub const ALONE: Dispatcher = Dispatcher { index: 0, count: 1 };
}

/// A view as seen from the node that received the request (see
/// [`ClusterView::receiving_node`]); everything else is the inner view's.
pub struct ReceivedAt<'a> {
    inner: &'a dyn ClusterView,
    node: NodeId,
}

impl<'a> ReceivedAt<'a> {
    pub fn new(inner: &'a dyn ClusterView, node: NodeId) -> Self {
        ReceivedAt { inner, node }
    }
}

impl ClusterView for ReceivedAt<'_> {
    fn now_nanos(&self) -> u64 {
        self.inner.now_nanos()
    }
    fn node_count(&self) -> usize {
        self.inner.node_count()
    }
    fn node(&self, id: NodeId) -> NodeState {
        self.inner.node(id)
    }
    fn receiving_node(&self) -> Option<NodeId> {
        Some(self.node)
    }
    fn dispatcher(&self) -> Dispatcher {
        self.inner.dispatcher()
    }
}

/// A view over a plain vector of node states, for tests, tools and the simulator.
#[derive(Clone, Debug)]
pub struct StaticView {
    pub now_nanos: u64,
    pub nodes: Vec<NodeState>,
    /// The dispatcher the view belongs to ([`Dispatcher::ALONE`] unless set).
    pub dispatcher: Dispatcher,
}

impl Default for StaticView {
    fn default() -> Self {
        StaticView {
            now_nanos: 0,
            nodes: Vec::new(),
            dispatcher: Dispatcher::ALONE,
        }
    }
}

impl StaticView {
    /// `n` available nodes of weight 1 and no load.
    pub fn uniform(n: usize) -> Self {
        StaticView {
            now_nanos: 0,
            nodes: vec![NodeState::default(); n],
            dispatcher: Dispatcher::ALONE,
        }
    }

    /// Sets node `id`'s gathered utilisation (all three resources) — for tests and tools.
    pub fn set_load(&mut self, id: NodeId, load: f64) {
        let g = &mut self.nodes[id].gathered;
        g.cpu = load;
        g.disk = load;
        g.net = load;
        g.at_nanos.get_or_insert(self.now_nanos);
    }
}

impl ClusterView for StaticView {
    fn now_nanos(&self) -> u64 {
        self.now_nanos
    }
    fn node_count(&self) -> usize {
        self.nodes.len()
    }
    fn node(&self, id: NodeId) -> NodeState {
        self.nodes[id]
    }
    fn dispatcher(&self) -> Dispatcher {
        self.dispatcher
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tier_estimate_adds_the_live_own_count_to_the_others_snapshot() {
        let mut state = NodeState {
            active: 3,
            ..NodeState::default()
        };
        // Nothing feeds the tier state: unknown, so no shared count at any age.
        assert_eq!(state.shared_active(10, u64::MAX), None);
        state.tier = TierState {
            at_nanos: Some(100),
            active: 10,
            own_active: 2,
            ..TierState::default()
        };
        // Others had 8; this dispatcher has 3 now (one more than it reported).
        assert_eq!(state.shared_active(150, 50), Some(11));
        assert_eq!(state.tier.age_nanos(150), Some(50));
        // Older than the limit: stale, so None.
        assert_eq!(state.shared_active(151, 50), None);
        // A clock that went back counts as age 0, and a bogus snapshot never underflows.
        assert_eq!(state.shared_active(90, 0), Some(11));
        state.tier.own_active = 20;
        assert_eq!(state.tier.estimate_active(u32::MAX), u32::MAX);
        assert_eq!(state.tier.estimate_active(4), 4);
    }
}
