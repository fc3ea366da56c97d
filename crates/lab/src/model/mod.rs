//! Layer 1, the lab's schema: experiment files (policy, cache, WAN, churn and tier experiments), the results
//! they produce as `results.json` keeps them, the papers' rows beside ours, and the lab's error
//! type. Plain data with parsing and small pure helpers.
//!
//! May use: other crates only (no other layer of the lab).

pub(crate) mod cache;
pub(crate) mod churn;
pub(crate) mod error;
pub(crate) mod experiment;
pub(crate) mod paper;
pub(crate) mod results;
pub(crate) mod tier;
pub(crate) mod wan;
