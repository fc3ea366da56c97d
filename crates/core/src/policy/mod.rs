//! Dispatching policies: one object-safe trait, chosen at run time from the configuration.
//!
//! A policy sees a request's class and key and a [`ClusterView`]; it returns a node or `None`
//! when no node is available. It never reads a clock (time is `view.now_nanos()`), never does
//! I/O and never blocks for long, so the switch can call it on every request and the simulator
//! can call it in virtual time.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::class::ClassId;
use crate::view::{ClusterView, NodeId};

mod round_robin;

pub use round_robin::RoundRobin;

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
}

/// A policy and its parameters as written in the configuration (`[policy]` table, `name` key).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PolicySpec {
    RoundRobin,
}

impl PolicySpec {
    /// Every policy name, for help texts and error messages.
    pub const NAMES: &'static [&'static str] = &["round-robin"];

    /// The spec of a policy with default parameters, by name.
    pub fn with_defaults(name: &str) -> Result<PolicySpec, PolicyError> {
        match name {
            "round-robin" => Ok(PolicySpec::RoundRobin),
            other => Err(PolicyError::UnknownPolicy(other.to_string())),
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            PolicySpec::RoundRobin => "round-robin",
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
    let _ = ctx;
    Ok(match spec {
        PolicySpec::RoundRobin => Box::new(RoundRobin::new()),
    })
}

/// The available node at or after `start` in circular order, if any.
pub(crate) fn next_available(view: &dyn ClusterView, start: usize) -> Option<NodeId> {
    let n = view.node_count();
    (0..n)
        .map(|i| (start + i) % n)
        .find(|&id| view.node(id).available)
}

#[allow(dead_code)]
pub(crate) type Partitions = BTreeMap<String, Vec<String>>;
