//! Counters of each QUIC listener (`quic = true`): datagrams received and those that cannot
//! be QUIC at all, handshakes in progress, completed and failed, Retry packets sent, clients
//! refused, HTTP/3 requests and streams reset. Written by `crate::frontend::quic`, read by
//! `/status` and `/metrics` (`capstan_quic_*`, labelled with the listener's address).
//!
//! quinn drops a datagram that is not a QUIC packet of a connection (or a first packet of a new
//! one) without a word; what the switch can see of them is counted on the way in (see
//! `crate::frontend::quic`'s socket): a datagram too short to be a QUIC packet, or one with
//! the fixed bit clear (RFC 9000 §17: every QUIC v1 packet has it set, and the listener does
//! not let peers grease it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use serde::Serialize;

/// One QUIC listener's counters, shared by its tasks.
#[derive(Debug, Default)]
pub(crate) struct QuicCounters {
    pub datagrams: AtomicU64,
    pub garbage: AtomicU64,
    pub handshaking: AtomicU64,
    pub handshakes: AtomicU64,
    pub handshake_failures: AtomicU64,
    pub retries: AtomicU64,
    pub refused: AtomicU64,
    pub requests: AtomicU64,
    pub streams_reset: AtomicU64,
}

/// A QUIC listener's counters as `/status` shows them.
#[derive(Debug, Serialize)]
pub struct QuicStatus {
    /// Always `h3`: what the listener serves.
    pub protocol: &'static str,
    /// UDP datagrams received.
    pub datagrams: u64,
    /// Datagrams that cannot be QUIC packets (too short, or the fixed bit clear), dropped.
    pub garbage_datagrams: u64,
    /// Handshakes in progress now.
    pub handshakes_in_progress: u64,
    /// Handshakes completed since start.
    pub handshakes: u64,
    /// Handshakes that failed or timed out.
    pub handshake_failures: u64,
    /// Retry packets sent to make a client prove its address.
    pub retries: u64,
    /// New connections refused (listener, switch or per-client connection limit).
    pub refused: u64,
    /// HTTP/3 requests received.
    pub requests: u64,
    /// Response streams reset (a client that stopped reading, or a body that failed).
    pub streams_reset: u64,
}

impl QuicCounters {
    pub(crate) fn status(&self) -> QuicStatus {
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        QuicStatus {
            protocol: "h3",
            datagrams: n(&self.datagrams),
            garbage_datagrams: n(&self.garbage),
            handshakes_in_progress: n(&self.handshaking),
            handshakes: n(&self.handshakes),
            handshake_failures: n(&self.handshake_failures),
            retries: n(&self.retries),
            refused: n(&self.refused),
            requests: n(&self.requests),
            streams_reset: n(&self.streams_reset),
        }
    }
}

/// One metric family: name, help, kind and how to read it from a listener's counts.
type Family = (
    &'static str,
    &'static str,
    MetricType,
    fn(&QuicStatus) -> u64,
);

/// The QUIC listeners' counters for `/metrics`, read at scrape time.
#[derive(Debug)]
pub(crate) struct QuicCollector {
    listeners: Vec<(String, Arc<QuicCounters>)>,
}

impl QuicCollector {
    /// A collector of `(listener address, counters)`.
    pub(crate) fn of(listeners: Vec<(String, Arc<QuicCounters>)>) -> Self {
        QuicCollector { listeners }
    }
}

impl Collector for QuicCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let families: [Family; 9] = [
            (
                "capstan_quic_datagrams",
                "UDP datagrams received on the QUIC listener",
                MetricType::Counter,
                |s| s.datagrams,
            ),
            (
                "capstan_quic_garbage_datagrams",
                "Datagrams on the QUIC listener that cannot be QUIC packets (too short, fixed bit clear), dropped",
                MetricType::Counter,
                |s| s.garbage_datagrams,
            ),
            (
                "capstan_quic_handshakes_in_progress",
                "QUIC handshakes in progress on the listener",
                MetricType::Gauge,
                |s| s.handshakes_in_progress,
            ),
            (
                "capstan_quic_handshakes",
                "QUIC handshakes completed on the listener",
                MetricType::Counter,
                |s| s.handshakes,
            ),
            (
                "capstan_quic_handshake_failures",
                "QUIC handshakes that failed or timed out on the listener",
                MetricType::Counter,
                |s| s.handshake_failures,
            ),
            (
                "capstan_quic_retries",
                "Retry packets sent (address validation above quic_retry_above handshakes in progress)",
                MetricType::Counter,
                |s| s.retries,
            ),
            (
                "capstan_quic_refused",
                "New QUIC connections refused by a connection limit",
                MetricType::Counter,
                |s| s.refused,
            ),
            (
                "capstan_quic_requests",
                "HTTP/3 requests received on the listener (protocol h3)",
                MetricType::Counter,
                |s| s.requests,
            ),
            (
                "capstan_quic_streams_reset",
                "HTTP/3 response streams the switch reset (client not reading, body failed)",
                MetricType::Counter,
                |s| s.streams_reset,
            ),
        ];
        if self.listeners.is_empty() {
            return Ok(());
        }
        let statuses: Vec<(&String, QuicStatus)> = (self.listeners.iter())
            .map(|(a, c)| (a, c.status()))
            .collect();
        for (name, help, kind, read) in families {
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for (address, status) in &statuses {
                let labels = vec![
                    ("listener".to_string(), address.to_string()),
                    ("protocol".to_string(), "h3".to_string()),
                ];
                let metric = family.encode_family(&labels)?;
                match kind {
                    MetricType::Gauge => ConstGauge::new(read(status) as i64).encode(metric)?,
                    _ => ConstCounter::new(read(status)).encode(metric)?,
                }
            }
        }
        Ok(())
    }
}
