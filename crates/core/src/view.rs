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
//! [`NodeState::weight`] is the configured weight, or the weight the gatherer derived from
//! gathered state when the policy asks for derived weights (the CAP paper's WRR_num, WRR_time).

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
}

impl NodeState {
    /// The gathered load index (busiest resource's utilisation), 0 when unknown.
    pub fn load(&self) -> f64 {
        self.gathered.load()
    }
}

impl Default for NodeState {
    fn default() -> Self {
        NodeState {
            available: true,
            weight: 1,
            active: 0,
            gathered: Gathered::default(),
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
}

/// A view over a plain vector of node states, for tests, tools and the simulator.
#[derive(Clone, Debug, Default)]
pub struct StaticView {
    pub now_nanos: u64,
    pub nodes: Vec<NodeState>,
}

impl StaticView {
    /// `n` available nodes of weight 1 and no load.
    pub fn uniform(n: usize) -> Self {
        StaticView {
            now_nanos: 0,
            nodes: vec![NodeState::default(); n],
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
}
