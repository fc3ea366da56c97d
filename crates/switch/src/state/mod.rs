//! Shared state: the running switch and a client connection's state, the cluster and each
//! node's runtime (passive health, outlier ejection, admission gates), the policy's view, the
//! retry budget and the connection limits.
//!
//! May use: `net`, `config`, `observe`.

pub mod admission;
pub mod cache;
pub mod cluster;
pub mod connection_limits;
pub mod counters;
pub mod health;
pub mod node_tls;
pub mod outlier;
pub mod retry;
pub mod switch;
