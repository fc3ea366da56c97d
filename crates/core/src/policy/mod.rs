//! Dispatching policies: one object-safe trait, chosen at run time from the configuration.
//!
//! A policy sees a request's class and key and a [`ClusterView`]; it returns a node or `None`
//! when no node is available. It never reads a clock (time is `view.now_nanos()`), never does
//! I/O and never blocks for long, so the switch can call it on every request and the simulator
//! can call it in virtual time.

use std::collections::BTreeMap;

use crate::class::ClassId;
pub use crate::gather::{Needs, WeightSource};
use crate::view::{ClusterView, NodeId};

mod registry;
pub mod shared;
mod support;

pub use support::mix64;
mod target_table;

#[cfg(test)]
mod figure2_tests;
#[cfg(test)]
mod spec_tests;

pub use registry::{lookup, registrations, PolicySpec, Registration};

/// Declares the policy modules and the registry in one list: adding a policy is its own file
/// (with a `REGISTRATION`) and one line here.
macro_rules! registry {
    ($($module:ident),* $(,)?) => {
        $(mod $module;)*
        /// Every policy, in help order.
        static REGISTRY: &[&Registration] = &[$(&$module::REGISTRATION),*];
    };
}

registry! {
    random,
    round_robin,
    weighted_round_robin,
    least_connections,
    two_choices,
    power_of_d,
    join_idle_queue,
    peak_ewma,
    static_partitioning,
    lard,
    lard_r,
    consistent_hash,
    cap,
    cap_load,
    home_node,
    sweb,
}

pub use cap::Cap;
pub use cap_load::CapLoad;
pub use consistent_hash::ConsistentHash;
pub use home_node::{home_of, HomeNode};
pub use join_idle_queue::JoinIdleQueue;
pub use lard::{Lard, LoadMeasure, Thresholds};
pub use lard_r::LardR;
pub use least_connections::LeastConnections;
pub use peak_ewma::PeakEwma;
pub use power_of_d::PowerOfD;
pub use random::Random;
pub use round_robin::RoundRobin;
pub use shared::{Counts, SharedCounts, ViewChoice};
pub use static_partitioning::StaticPartitioning;
pub use sweb::{Cost, Placement, Sweb, SwebNode, SwebParams};
pub use two_choices::TwoChoices;
pub use weighted_round_robin::{WeightedRoundRobin, WrrMetric};

/// What a policy may know about a request.
#[derive(Clone, Copy, Debug)]
pub struct RequestInfo<'a> {
    /// The request's class (from the classifier).
    pub class: ClassId,
    /// The locality key: the object the request is for (its path by default).
    pub key: &'a str,
    /// `crate::hash_key(key)`, computed once by the caller.
    pub key_hash: u64,
}

/// How a request placed by the policy ended.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outcome {
    /// The node answered (any HTTP status); false for connect failures, resets and timeouts.
    pub ok: bool,
    /// From dispatch to the end of the response, in nanoseconds.
    pub latency_nanos: u64,
    /// `view.now_nanos()` when the request finished.
    pub finished_at_nanos: u64,
}

/// A dispatching policy.
pub trait Policy: Send + Sync {
    /// The policy's configuration name (`round-robin`, `cap`, …).
    fn name(&self) -> &'static str;
    /// Pick a node for this request among the available ones, or `None` when none is available.
    fn pick(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId>;
    /// Told when a request it placed has finished (for policies that learn).
    fn on_done(&self, _node: NodeId, _req: &RequestInfo<'_>, _outcome: &Outcome) {}
    /// What the policy reads, so the switch and the simulator feed it without knowing its name.
    fn needs(&self) -> Needs {
        Needs::default()
    }
    /// What the policy has learned that a policy built for a changed node list may keep
    /// (LARD's targets, LARD/R's server sets, CAP's pointers, WRR's credits); `None` when it
    /// learns nothing worth keeping.
    fn memory(&self) -> Option<Memory> {
        None
    }
    /// Takes over what a previous policy learned, node ids translated by `old_to_new` (indexed
    /// by old id; `None` for a node that left). Called before the policy's first pick; memory of
    /// a kind the policy has no use for is ignored.
    fn recall(&self, _memory: &Memory, _old_to_new: &[Option<NodeId>]) {}
}

/// What a policy has learned about where requests go, as plain data that outlives a change of
/// the node list: a reload or a membership change builds a new policy for the new list and
/// hands it the old policy's memory ([`carry_over`]).
///
/// Plain data rather than downcasting to the old policy's type: the two trait methods have
/// defaults, so a policy that learns nothing needs no code, and a policy may take over another
/// kind's memory (LARD/R starts from LARD's targets and back).
#[derive(Clone, Debug, PartialEq)]
pub enum Memory {
    /// Object key hash → its target node (LARD).
    Targets(Vec<(u64, NodeId)>),
    /// Object key hash → its server set (LARD/R).
    ServerSets(Vec<(u64, RememberedSet)>),
    /// Per class id (plus one shared by unknown classes), the round-robin pointer's raw
    /// position; the node it points at is the position modulo the old node count (CAP).
    ClassPointers(Vec<usize>),
    /// Per node, smooth weighted round robin's running credit.
    Credits(Vec<i64>),
}

/// One LARD/R server set as remembered.
#[derive(Clone, Debug, PartialEq)]
pub struct RememberedSet {
    pub members: Vec<NodeId>,
    /// View time of the set's last change (Pai et al.'s lastMod).
    pub changed_at_nanos: u64,
}

/// Gives `new` what `old` learned, for a node list changed as `old_to_new` says.
pub fn carry_over(new: &dyn Policy, old: &dyn Policy, old_to_new: &[Option<NodeId>]) {
    if let Some(memory) = old.memory() {
        new.recall(&memory, old_to_new);
    }
}

/// `old` translated to the new node list, `None` when it left.
pub(crate) fn translate(old: NodeId, old_to_new: &[Option<NodeId>]) -> Option<NodeId> {
    old_to_new.get(old).copied().flatten()
}

/// What a policy needs to know about the cluster's shape when it is built.
pub struct PolicyContext<'a> {
    /// Node names in node-id order.
    pub nodes: &'a [String],
    /// Class names in class-id order.
    pub classes: &'a [String],
}

/// A policy spec that cannot be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PolicyError {
    #[error("unknown policy `{0}`")]
    UnknownPolicy(String),
    #[error("{0}")]
    Invalid(String),
}

/// Builds the policy a spec describes for a cluster of this shape.
pub fn build_policy(
    spec: &PolicySpec,
    ctx: &PolicyContext<'_>,
) -> Result<Box<dyn Policy>, PolicyError> {
    (spec.registration().build)(spec.params(), ctx)
}

/// The default seed of the random policies: fixed, so runs are reproducible unless the operator
/// asks otherwise.
pub const DEFAULT_SEED: u64 = 1;

pub(crate) fn default_seed() -> u64 {
    DEFAULT_SEED
}

/// Class name → the names of the nodes that serve it (static partitioning).
pub type Partitions = BTreeMap<String, Vec<String>>;
