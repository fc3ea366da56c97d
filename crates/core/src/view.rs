//! The cluster as a policy sees it.

/// Index of a node in the cluster's node list (0-based, in configuration order).
pub type NodeId = usize;

/// What a policy may know about one node at the moment of a decision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodeState {
    /// False while the node is administratively down, backed off by passive health, or excluded
    /// for this decision (a retry must not go back to the node that just failed).
    pub available: bool,
    /// Static weight from the configuration (≥ 1).
    pub weight: u32,
    /// Requests placed on this node and not yet finished.
    pub active: u32,
    /// Last reported utilisation in [0, 1] (the busiest of CPU, disk and network); 0 when unknown.
    pub load: f64,
}

impl Default for NodeState {
    fn default() -> Self {
        NodeState {
            available: true,
            weight: 1,
            active: 0,
            load: 0.0,
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
