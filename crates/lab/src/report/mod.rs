//! Layer 4, reports: the findings a policy experiment concludes with, the summary tables, and
//! `index.html` (SVG plots) beside `results.json`, for policy, cache, WAN, churn and tier experiments.
//!
//! May use: [`crate::model`], [`crate::procs`], [`crate::run`](mod@crate::run). Inside it, `experiment` (the
//! policy experiment's report) uses `claims` (the paper's claims with intervals), `figures` and
//! `sclient`.

pub(crate) mod cache;
pub(crate) mod churn;
pub(crate) mod claims;
pub(crate) mod experiment;
pub(crate) mod figures;
pub(crate) mod sclient;
pub(crate) mod tier;
pub(crate) mod wan;
