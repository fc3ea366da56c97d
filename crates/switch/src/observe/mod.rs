//! Observation: the access log (formats, the writer thread, the per-request notes) and the TLS
//! handshake counters.
//!
//! May use: `net`, `config`.

pub mod access_log;
pub mod tls_metrics;
