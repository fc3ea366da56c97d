//! Observation: the access log (formats, the writer thread, the per-request notes) and the TLS
//! handshake counters.
//!
//! May use: `net`, `config`.

pub(crate) mod access_log;
pub(crate) mod tls_metrics;
