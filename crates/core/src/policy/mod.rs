//! Dispatching policies: one object-safe trait, chosen at run time from the configuration.
//!
//! A policy sees a request's class and key and a [`ClusterView`]; it returns a node or `None`
//! when no node is available. It never reads a clock (time is `view.now_nanos()`), never does
//! I/O and never blocks for long, so the switch can call it on every request and the simulator
//! can call it in virtual time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::class::ClassId;
pub use crate::gather::{Needs, WeightSource};
use crate::view::{ClusterView, NodeId};

mod cap;
mod cap_load;
mod consistent_hash;
mod lard;
mod lard_r;
mod least_connections;
mod peak_ewma;
mod random;
mod round_robin;
mod static_partitioning;
mod support;
mod target_table;
mod two_choices;
mod weighted_round_robin;

#[cfg(test)]
mod figure2_tests;
#[cfg(test)]
mod spec_tests;

pub use cap::Cap;
pub use cap_load::CapLoad;
pub use consistent_hash::ConsistentHash;
pub use lard::{Lard, LoadMeasure, Thresholds};
pub use lard_r::LardR;
pub use least_connections::LeastConnections;
pub use peak_ewma::PeakEwma;
pub use random::Random;
pub use round_robin::RoundRobin;
pub use static_partitioning::StaticPartitioning;
pub use two_choices::TwoChoices;
pub use weighted_round_robin::WeightedRoundRobin;

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

/// A policy and its parameters as written in the configuration (`[policy]` table, `name` key).
///
/// Every parameter has a default (taken from the paper the policy comes from where it gives
/// one), so `name = "lard"` alone is a complete table. Policies without parameters are empty
/// struct variants (`Cap {}`) rather than unit variants because serde lets an internally tagged
/// unit variant swallow unknown keys; this way a stray `max_load` under `name = "cap"` is an
/// error, not silently ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PolicySpec {
    /// Uniform over the available nodes (CAP paper's RAN).
    Random {
        /// Seed of the policy's own random stream: same seed, same choices (in a
        /// single-threaded run such as the simulator).
        #[serde(default = "default_seed")]
        seed: u64,
    },
    /// A circular pointer over the nodes.
    RoundRobin {},
    /// Smooth weighted round robin (as nginx does it), so a node of weight 3 next to one of
    /// weight 1 gets `a a b a`, not `a a a b`. Weights are the configured ones (`static`,
    /// default) or derived from gathered state every T_gat (`active`: the CAP paper's WRR_num;
    /// `service-time`: its WRR_time).
    WeightedRoundRobin {
        #[serde(default)]
        metric: WrrMetric,
    },
    /// Fewest active requests; ties go to the larger weight, then rotate.
    LeastConnections {},
    /// The power of two choices: two distinct random available nodes, the one with fewer active
    /// requests wins.
    TwoChoices {
        /// Seed of the policy's own random stream.
        #[serde(default = "default_seed")]
        seed: u64,
    },
    /// Finagle/Linkerd peak-EWMA: per node a latency average that jumps to any higher sample and
    /// decays towards lower ones with time constant `decay_time_secs`; the node with the least
    /// `ewma × (active + 1)` wins.
    PeakEwma {
        /// Time constant of the exponential decay, seconds (default 10, Finagle's).
        #[serde(default = "default_decay_time_secs")]
        decay_time_secs: f64,
    },
    /// Each class is served only by its own subset of nodes (the CAP paper's rival
    /// "StaticPartitioning"); round robin within the subset.
    StaticPartitioning {
        /// Class name → node names. Every name must be defined.
        #[serde(default)]
        partitions: Partitions,
        /// Nodes for the classes `partitions` does not list. Absent: those classes use every
        /// node.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        default: Option<Vec<String>>,
    },
    /// Locality-aware request distribution (Pai et al., ASPLOS '98): one target node per object
    /// key, moved to the least loaded node when the target's load is above `t_high` and some
    /// node's is below `t_low`, or when the target reaches `2 × t_high`.
    Lard {
        /// What the thresholds measure: `active` requests (Pai et al., default) or gathered
        /// `utilisation` (the CAP paper).
        #[serde(default)]
        load: LoadMeasure,
        /// Below this a node is lightly loaded (default 25 active, or 0.3 utilisation).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        t_low: Option<f64>,
        /// Above this a node is heavily loaded (default 65 active, or 0.7 utilisation).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        t_high: Option<f64>,
        /// Most object keys remembered (default 1,000,000); see [`Lard`] for the eviction.
        #[serde(default = "default_max_targets")]
        max_targets: usize,
    },
    /// LARD with replication (LARD/R): a set of nodes per object key; the least loaded member
    /// serves; a new node joins when that member is overloaded by LARD's rule, and the most
    /// loaded member leaves once the set has not changed for `shrink_after_secs` (Pai et al.'s
    /// K).
    LardR {
        /// What the thresholds measure, as for `lard`.
        #[serde(default)]
        load: LoadMeasure,
        /// Below this a node is lightly loaded (default 25 active, or 0.3 utilisation).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        t_low: Option<f64>,
        /// Above this a node is heavily loaded (default 65 active, or 0.7 utilisation).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        t_high: Option<f64>,
        /// Pai et al.'s K: seconds without a change before a server set shrinks (default 20).
        #[serde(default = "default_shrink_after_secs")]
        shrink_after_secs: f64,
        /// Most object keys remembered (default 1,000,000).
        #[serde(default = "default_max_targets")]
        max_targets: usize,
    },
    /// Consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam): a ring of
    /// virtual nodes walked clockwise from the key's hash to the first available node with fewer
    /// than `ceil((1 + epsilon) × (total_active + 1) / available_nodes)` active requests.
    ConsistentHash {
        /// Load slack ε ≥ 0 (default 0.25); `inf` turns the bound off (plain consistent hashing).
        #[serde(default = "default_epsilon")]
        epsilon: f64,
        /// Points per node on the ring (default 160, as ketama).
        #[serde(default = "default_virtual_nodes")]
        virtual_nodes: u32,
    },
    /// Client-aware policy (Casalicchio & Colajanni): one round-robin pointer per class, so every
    /// node gets an equal share (±1) of every class.
    Cap {},
    /// CAP that skips nodes whose reported `load` is at or above `max_load`; when every available
    /// node is over the bound it behaves as plain CAP rather than refuse.
    CapLoad {
        /// Utilisation bound in (0, 1] or above (default 0.9).
        #[serde(default = "default_max_load")]
        max_load: f64,
    },
}

/// The default seed of the random policies: fixed, so runs are reproducible unless the operator
/// asks otherwise.
pub const DEFAULT_SEED: u64 = 1;

fn default_seed() -> u64 {
    DEFAULT_SEED
}
fn default_decay_time_secs() -> f64 {
    10.0
}
fn default_max_targets() -> usize {
    1_000_000
}
fn default_shrink_after_secs() -> f64 {
    20.0
}
fn default_epsilon() -> f64 {
    0.25
}
fn default_virtual_nodes() -> u32 {
    160
}
fn default_max_load() -> f64 {
    0.9
}

impl PolicySpec {
    /// Every policy name, for help texts and error messages.
    pub const NAMES: &'static [&'static str] = &[
        "random",
        "round-robin",
        "weighted-round-robin",
        "least-connections",
        "two-choices",
        "peak-ewma",
        "static-partitioning",
        "lard",
        "lard-r",
        "consistent-hash",
        "cap",
        "cap-load",
    ];

    /// The spec of a policy with default parameters, by name.
    pub fn with_defaults(name: &str) -> Result<PolicySpec, PolicyError> {
        Ok(match name {
            "random" => PolicySpec::Random {
                seed: default_seed(),
            },
            "round-robin" => PolicySpec::RoundRobin {},
            "weighted-round-robin" => PolicySpec::WeightedRoundRobin {
                metric: WrrMetric::default(),
            },
            "least-connections" => PolicySpec::LeastConnections {},
            "two-choices" => PolicySpec::TwoChoices {
                seed: default_seed(),
            },
            "peak-ewma" => PolicySpec::PeakEwma {
                decay_time_secs: default_decay_time_secs(),
            },
            "static-partitioning" => PolicySpec::StaticPartitioning {
                partitions: Partitions::new(),
                default: None,
            },
            "lard" => PolicySpec::Lard {
                load: LoadMeasure::default(),
                t_low: None,
                t_high: None,
                max_targets: default_max_targets(),
            },
            "lard-r" => PolicySpec::LardR {
                load: LoadMeasure::default(),
                t_low: None,
                t_high: None,
                shrink_after_secs: default_shrink_after_secs(),
                max_targets: default_max_targets(),
            },
            "consistent-hash" => PolicySpec::ConsistentHash {
                epsilon: default_epsilon(),
                virtual_nodes: default_virtual_nodes(),
            },
            "cap" => PolicySpec::Cap {},
            "cap-load" => PolicySpec::CapLoad {
                max_load: default_max_load(),
            },
            other => return Err(PolicyError::UnknownPolicy(other.to_string())),
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            PolicySpec::Random { .. } => "random",
            PolicySpec::RoundRobin {} => "round-robin",
            PolicySpec::WeightedRoundRobin { .. } => "weighted-round-robin",
            PolicySpec::LeastConnections {} => "least-connections",
            PolicySpec::TwoChoices { .. } => "two-choices",
            PolicySpec::PeakEwma { .. } => "peak-ewma",
            PolicySpec::StaticPartitioning { .. } => "static-partitioning",
            PolicySpec::Lard { .. } => "lard",
            PolicySpec::LardR { .. } => "lard-r",
            PolicySpec::ConsistentHash { .. } => "consistent-hash",
            PolicySpec::Cap {} => "cap",
            PolicySpec::CapLoad { .. } => "cap-load",
        }
    }
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
    let node_count = ctx.nodes.len();
    Ok(match spec {
        PolicySpec::Random { seed } => Box::new(Random::new(*seed)),
        PolicySpec::RoundRobin {} => Box::new(RoundRobin::new()),
        PolicySpec::WeightedRoundRobin { metric } => {
            Box::new(WeightedRoundRobin::new(node_count, metric.weights()))
        }
        PolicySpec::LeastConnections {} => Box::new(LeastConnections::new()),
        PolicySpec::TwoChoices { seed } => Box::new(TwoChoices::new(*seed)),
        PolicySpec::PeakEwma { decay_time_secs } => {
            Box::new(PeakEwma::new(node_count, *decay_time_secs)?)
        }
        PolicySpec::StaticPartitioning {
            partitions,
            default,
        } => Box::new(StaticPartitioning::new(
            ctx,
            partitions,
            default.as_deref(),
        )?),
        PolicySpec::Lard {
            load,
            t_low,
            t_high,
            max_targets,
        } => Box::new(Lard::new(
            node_count,
            thresholds("lard", *load, *t_low, *t_high)?,
            *max_targets,
        )?),
        PolicySpec::LardR {
            load,
            t_low,
            t_high,
            shrink_after_secs,
            max_targets,
        } => Box::new(LardR::new(
            node_count,
            thresholds("lard-r", *load, *t_low, *t_high)?,
            *shrink_after_secs,
            *max_targets,
        )?),
        PolicySpec::ConsistentHash {
            epsilon,
            virtual_nodes,
        } => Box::new(ConsistentHash::new(ctx.nodes, *epsilon, *virtual_nodes)?),
        PolicySpec::Cap {} => Box::new(Cap::new(ctx.classes.len())),
        PolicySpec::CapLoad { max_load } => Box::new(CapLoad::new(ctx.classes.len(), *max_load)?),
    })
}

fn thresholds(
    policy: &str,
    load: LoadMeasure,
    t_low: Option<f64>,
    t_high: Option<f64>,
) -> Result<Thresholds, PolicyError> {
    let (low, high) = load.paper_thresholds();
    Thresholds::new(policy, load, t_low.unwrap_or(low), t_high.unwrap_or(high))
}

/// How `weighted-round-robin` gets its weights (the configuration's `metric`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WrrMetric {
    /// The nodes' configured weights (nginx, HAProxy).
    #[default]
    Static,
    /// WRR_num: from the active requests at each gather.
    Active,
    /// WRR_time: from the nodes' reported mean service times.
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

/// Class name → the names of the nodes that serve it (static partitioning).
pub type Partitions = BTreeMap<String, Vec<String>>;
