//! Control: active health checks, load gathering, membership changes, discovery sources
//! (`[[discovery]]`), reloads, the admin API (its token, its replies), the operation
//! metrics, the tier's peer checks (`tier`), its peers found by discovery and its own registration
//! (`tier_peers`), and its gossip of the nodes' counts (`gossip`).
//!
//! May use: every layer below (`net` … `frontend`).

pub(crate) mod admin;
pub(crate) mod admin_auth;
pub(crate) mod discovery;
pub(crate) mod gather;
pub(crate) mod gossip;
pub(crate) mod health;
pub(crate) mod membership;
pub(crate) mod operation_metrics;
pub(crate) mod reload;
pub(crate) mod reply;
pub(crate) mod tier;
pub(crate) mod tier_peers;
