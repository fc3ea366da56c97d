//! Control: active health checks, load gathering, membership changes, the admin API and its
//! token, and the operation metrics.
//!
//! May use: every layer below (`net` … `frontend`).

pub mod admin;
pub mod admin_auth;
pub mod gather;
pub mod health;
pub mod membership;
pub mod operation_metrics;
pub mod reload;
pub mod reply;
