//! TLS handshake counters of each TLS listener: completed handshakes by protocol version,
//! ALPN protocol and whether the session was resumed; failed ones by a small fixed set of
//! reasons; and how long completed handshakes took. Shown in `/status` (`listeners[].tls`)
//! and `/metrics` (`capstan_tls_*`).
//!
//! Everything is counted once per handshake, after it ends: the request path never touches
//! these counters. The label values are closed sets (2 versions × 3 ALPN values × 2, and five
//! failure reasons), so a client cannot grow the metrics by what it sends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use serde::Serialize;

/// The `version` label values, in the index order of [`TlsCounters`].
const VERSIONS: [&str; 2] = ["1.2", "1.3"];
/// The `alpn` label values.
const ALPNS: [&str; 3] = ["h2", "http/1.1", "none"];

/// Why a handshake did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandshakeFailure {
    /// The client aborted with a TLS alert — typically it did not accept the certificate (an
    /// SNI name no certificate has gets the default one, which the client then refuses).
    Alert,
    /// No certificate could be chosen for the ClientHello.
    NoCertificate,
    /// Not a valid TLS handshake: garbage or plain HTTP, no common version, cipher suite or
    /// ALPN protocol, a peer breaking the protocol.
    Protocol,
    /// The handshake did not finish within `timeouts.header_read`.
    Timeout,
    /// The connection failed or closed mid-handshake.
    Io,
}

impl HandshakeFailure {
    const ALL: [HandshakeFailure; 5] = [
        HandshakeFailure::Alert,
        HandshakeFailure::NoCertificate,
        HandshakeFailure::Protocol,
        HandshakeFailure::Timeout,
        HandshakeFailure::Io,
    ];

    /// The `reason` label value.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            HandshakeFailure::Alert => "alert",
            HandshakeFailure::NoCertificate => "no_certificate",
            HandshakeFailure::Protocol => "protocol",
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::Io => "io",
        }
    }

    /// The reason of a failed accept (tokio-rustls wraps rustls errors in `InvalidData`).
    pub(crate) fn of(error: &std::io::Error) -> HandshakeFailure {
        let tls_error = error
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        match tls_error {
            None => HandshakeFailure::Io,
            Some(rustls::Error::AlertReceived(_)) => HandshakeFailure::Alert,
            // What rustls reports when the certificate resolver found nothing.
            Some(rustls::Error::General(message)) if message.contains("certificate") => {
                HandshakeFailure::NoCertificate
            }
            Some(_) => HandshakeFailure::Protocol,
        }
    }
}

/// One TLS listener's handshake counters, shared by every worker accepting on it.
#[derive(Debug)]
pub struct TlsCounters {
    /// Completed handshakes, by `[version][alpn][resumed]`.
    completed: [[[AtomicU64; 2]; 3]; 2],
    /// Failed handshakes, by [`HandshakeFailure::ALL`] index.
    failed: [AtomicU64; 5],
    /// Seconds from the ClientHello's first bytes to the handshake's end, completed ones only.
    duration: Histogram,
}

impl Default for TlsCounters {
    fn default() -> Self {
        TlsCounters {
            completed: Default::default(),
            failed: Default::default(),
            // 0.25 ms to 1 s: a loopback handshake to one over a slow, distant link.
            duration: Histogram::new(exponential_buckets(0.000_25, 2.0, 13)),
        }
    }
}

impl TlsCounters {
    /// Counts a completed handshake on `conn`, which took `took`.
    pub(crate) fn completed(&self, conn: &rustls::ServerConnection, took: Duration) {
        let version = match conn.protocol_version() {
            Some(rustls::ProtocolVersion::TLSv1_2) => 0,
            _ => 1,
        };
        let alpn = match conn.alpn_protocol() {
            Some(crate::net::tls::ALPN_H2) => 0,
            Some(crate::net::tls::ALPN_HTTP11) => 1,
            _ => 2,
        };
        let resumed = usize::from(conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed));
        self.completed[version][alpn][resumed].fetch_add(1, Ordering::Relaxed);
        self.duration.observe(took.as_secs_f64());
    }

    /// Counts a handshake that failed for `why`.
    pub(crate) fn failed(&self, why: HandshakeFailure) {
        let at = HandshakeFailure::ALL.iter().position(|f| *f == why);
        if let Some(at) = at {
            self.failed[at].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts as `/status` shows them.
    pub(crate) fn status(&self) -> TlsStatus {
        let mut status = TlsStatus::default();
        for (v, by_alpn) in self.completed.iter().enumerate() {
            for (a, by_resumed) in by_alpn.iter().enumerate() {
                for (r, count) in by_resumed.iter().enumerate() {
                    let n = count.load(Ordering::Relaxed);
                    status.handshakes += n;
                    status.resumed += if r == 1 { n } else { 0 };
                    *status.versions.at(v) += n;
                    *status.alpn.at(a) += n;
                }
            }
        }
        let failed = |f: HandshakeFailure| {
            let at = HandshakeFailure::ALL.iter().position(|g| *g == f);
            at.map_or(0, |at| self.failed[at].load(Ordering::Relaxed))
        };
        status.failures = TlsFailures {
            alert: failed(HandshakeFailure::Alert),
            no_certificate: failed(HandshakeFailure::NoCertificate),
            protocol: failed(HandshakeFailure::Protocol),
            timeout: failed(HandshakeFailure::Timeout),
            io: failed(HandshakeFailure::Io),
        };
        status
    }
}

/// A TLS listener's handshakes as `/status` shows them (`listeners[].tls`).
#[derive(Debug, Default, Serialize)]
pub struct TlsStatus {
    /// Completed handshakes.
    pub handshakes: u64,
    /// Of them, sessions resumed (ticket or session ID).
    pub resumed: u64,
    pub versions: ByVersion,
    pub alpn: ByAlpn,
    pub failures: TlsFailures,
}

/// Completed handshakes by TLS version.
#[derive(Debug, Default, Serialize)]
pub struct ByVersion {
    #[serde(rename = "1.2")]
    pub tls12: u64,
    #[serde(rename = "1.3")]
    pub tls13: u64,
}

impl ByVersion {
    fn at(&mut self, index: usize) -> &mut u64 {
        match index {
            0 => &mut self.tls12,
            _ => &mut self.tls13,
        }
    }
}

/// Completed handshakes by the protocol ALPN chose.
#[derive(Debug, Default, Serialize)]
pub struct ByAlpn {
    pub h2: u64,
    #[serde(rename = "http/1.1")]
    pub http11: u64,
    pub none: u64,
}

impl ByAlpn {
    fn at(&mut self, index: usize) -> &mut u64 {
        match index {
            0 => &mut self.h2,
            1 => &mut self.http11,
            _ => &mut self.none,
        }
    }
}

/// Failed handshakes by reason (see [`HandshakeFailure`]).
#[derive(Debug, Default, Serialize)]
pub struct TlsFailures {
    pub alert: u64,
    pub no_certificate: u64,
    pub protocol: u64,
    pub timeout: u64,
    pub io: u64,
}

/// The TLS listeners' counters for `/metrics`, read at scrape time.
#[derive(Debug)]
pub(crate) struct TlsCollector {
    listeners: Vec<(String, Arc<TlsCounters>)>,
}

impl TlsCollector {
    /// A collector of `(listener address, counters)`.
    pub(crate) fn of(listeners: Vec<(String, Arc<TlsCounters>)>) -> Self {
        TlsCollector { listeners }
    }
}

impl Collector for TlsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if self.listeners.is_empty() {
            return Ok(());
        }
        let label = |address: &str| vec![("listener".to_string(), address.to_string())];
        let mut family = encoder.encode_descriptor(
            "capstan_tls_handshakes",
            "TLS handshakes completed on the listener, by version, ALPN protocol and resumption",
            None,
            MetricType::Counter,
        )?;
        for (address, counters) in &self.listeners {
            for (v, by_alpn) in counters.completed.iter().enumerate() {
                for (a, by_resumed) in by_alpn.iter().enumerate() {
                    for (r, count) in by_resumed.iter().enumerate() {
                        let mut labels = label(address);
                        labels.push(("version".into(), VERSIONS[v].into()));
                        labels.push(("alpn".into(), ALPNS[a].into()));
                        labels.push(("resumed".into(), (r == 1).to_string()));
                        let n = count.load(Ordering::Relaxed);
                        ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
                    }
                }
            }
        }
        let mut family = encoder.encode_descriptor(
            "capstan_tls_handshake_failures",
            "TLS handshakes that did not complete on the listener, by reason \
             (alert, no_certificate, protocol, timeout, io)",
            None,
            MetricType::Counter,
        )?;
        for (address, counters) in &self.listeners {
            for (at, why) in HandshakeFailure::ALL.iter().enumerate() {
                let mut labels = label(address);
                labels.push(("reason".into(), why.reason().into()));
                let n = counters.failed[at].load(Ordering::Relaxed);
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "capstan_tls_handshake_duration_seconds",
            "Time from a ClientHello's first bytes to the end of a completed TLS handshake",
            None,
            MetricType::Histogram,
        )?;
        for (address, counters) in &self.listeners {
            let labels = label(address);
            counters.duration.encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_error(e: rustls::Error) -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }

    #[test]
    fn failures_are_sorted_into_a_few_reasons() {
        let alert = io_error(rustls::Error::AlertReceived(
            rustls::AlertDescription::UnknownCA,
        ));
        assert_eq!(HandshakeFailure::of(&alert), HandshakeFailure::Alert);
        let garbage = io_error(rustls::Error::InvalidMessage(
            rustls::InvalidMessage::InvalidContentType,
        ));
        assert_eq!(HandshakeFailure::of(&garbage), HandshakeFailure::Protocol);
        let no_cert = io_error(rustls::Error::General(
            "no server certificate chain resolved".into(),
        ));
        assert_eq!(
            HandshakeFailure::of(&no_cert),
            HandshakeFailure::NoCertificate
        );
        let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tls handshake eof");
        assert_eq!(HandshakeFailure::of(&eof), HandshakeFailure::Io);
    }

    #[test]
    fn status_sums_the_labelled_counts() {
        let counters = TlsCounters::default();
        counters.completed[1][0][1].fetch_add(2, Ordering::Relaxed);
        counters.completed[0][1][0].fetch_add(1, Ordering::Relaxed);
        counters.failed(HandshakeFailure::Timeout);
        let status = counters.status();
        assert_eq!((status.handshakes, status.resumed), (3, 2));
        assert_eq!((status.versions.tls12, status.versions.tls13), (1, 2));
        assert_eq!(
            (status.alpn.h2, status.alpn.http11, status.alpn.none),
            (2, 1, 0)
        );
        assert_eq!(status.failures.timeout, 1);
        assert_eq!(status.failures.protocol, 0);
    }
}
