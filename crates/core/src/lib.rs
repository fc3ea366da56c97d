//! Capstan's pure core: request classes, the classifier, the cluster view and every dispatching
//! policy.
//!
//! Nothing here reads a clock, does I/O or spawns: time arrives through [`ClusterView::now_nanos`].
//! That is what lets the live switch and the discrete-event simulator run the very same policy code.

pub mod admission;
pub mod class;
pub mod gather;
pub mod policy;
pub mod report;
pub mod text;
pub mod view;

pub use class::{
    ClassDef, ClassId, ClassSpec, Classifier, ClassifierError, HeaderLookup, NoHeaders,
    RequestFacts, ResourceProfile, RuleSpec,
};
pub use gather::{GatherRules, Gatherer, Needs, WeightSource};
pub use policy::{
    build_policy, carry_over, mix64, Memory, Outcome, Policy, PolicyContext, PolicyError,
    PolicySpec, RequestInfo,
};
pub use report::LoadReport;
pub use view::{
    ClusterView, Dispatcher, Gathered, NodeId, NodeState, ReceivedAt, StaticView, TierState,
};

/// A stable 64-bit hash (FNV-1a) of a request key, the same on every platform and every run, so
/// hash-based placement is reproducible in the simulator and across switch restarts.
pub fn hash_key(key: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    key.bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}
