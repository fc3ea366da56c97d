//! Layer 3, running experiments: the plan of a policy experiment and its runner (with the
//! secure clients and the HTTP path probe), the simulated world beside it, the validation of
//! the load generator against queueing theory, and the cache, WAN, churn and tier experiments.
//!
//! May use: [`crate::model`], [`crate::procs`]. Inside it, [`plan`] is at the bottom; the
//! runner uses `rounds` (the headline's interleaved rounds) and `window` (one measured window
//! on a cluster), `rounds` uses `window`; `window` uses `secure`, `http_path` and `simulate`;
//! `http_path` uses `simulate`.

pub(crate) mod cache;
pub(crate) mod churn;
pub(crate) mod http_path;
pub(crate) mod plan;
pub(crate) mod rounds;
pub(crate) mod runner;
pub(crate) mod secure;
pub(crate) mod simulate;
pub(crate) mod tier;
pub(crate) mod validate;
pub(crate) mod wan;
pub(crate) mod window;
