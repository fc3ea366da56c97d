//! Shared state: the running switch and a client connection's state, the cluster and each
//! node's runtime (passive health, outlier ejection, admission gates), the policy's view, the
//! retry budget, the connection limits, each discovery source's state, the tier's peers (`tier`), their shared view of the nodes (`gossip`) and what
//! it changes here (`tier_share`: a share of each node's limit, ejections by the tier; `tier_slot`:
//! a node's tier-wide state as a pick reads it), and what a
//! policy sees of a request.
//!
//! May use: `net`, `config`, `observe`.

pub(crate) mod admission;
pub(crate) mod cache;
pub(crate) mod cluster;
pub(crate) mod connection_limits;
pub(crate) mod counters;
pub(crate) mod discovery;
pub(crate) mod gossip;
pub(crate) mod health;
pub(crate) mod node_tls;
pub(crate) mod outlier;
pub(crate) mod request;
pub(crate) mod retry;
pub(crate) mod switch;
pub(crate) mod tier;
pub(crate) mod tier_share;
pub(crate) mod tier_slot;
