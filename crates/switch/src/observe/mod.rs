//! Observation: the access log (formats, the writer thread, the per-request notes) and the TLS
//! handshake counters, the QUIC listeners' counters.
//!
//! May use: `net`, `config`.

pub(crate) mod access_log;
pub(crate) mod quic_metrics;
pub(crate) mod tls_metrics;
