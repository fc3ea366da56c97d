//! Metrics of the access log, PROXY protocol listeners, tunnels and `timeouts.client_send` cuts,
//! read at scrape time.

use std::sync::atomic::Ordering;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::state::switch::Switch;

/// The counters, copied when `/metrics` is asked for.
#[derive(Debug)]
pub(crate) struct OperationCollector {
    log_written: Option<u64>,
    log_dropped: Option<u64>,
    proxy_untrusted: u64,
    proxy_malformed: u64,
    tunnels_open: u64,
    tunnels_opened: u64,
    send_cut_connections: u64,
    send_cut_h2_streams: u64,
}

impl OperationCollector {
    pub(crate) fn of(switch: &Switch) -> OperationCollector {
        let log = switch.access_log.as_ref();
        let rejections = &switch.proxy_rejections;
        OperationCollector {
            log_written: log.map(|l| l.written()),
            log_dropped: log.map(|l| l.dropped()),
            proxy_untrusted: rejections.untrusted.load(Ordering::Relaxed),
            proxy_malformed: rejections.malformed.load(Ordering::Relaxed),
            tunnels_open: switch.tunnels.open.load(Ordering::Relaxed),
            tunnels_opened: switch.tunnels.opened.load(Ordering::Relaxed),
            send_cut_connections: switch
                .client_send_timeouts
                .connections
                .load(Ordering::Relaxed),
            send_cut_h2_streams: switch
                .client_send_timeouts
                .h2_streams
                .load(Ordering::Relaxed),
        }
    }
}

impl Collector for OperationCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let (Some(written), Some(dropped)) = (self.log_written, self.log_dropped) {
            ConstCounter::new(written).encode(encoder.encode_descriptor(
                "capstan_access_log_written",
                "Access log lines written",
                None,
                MetricType::Counter,
            )?)?;
            ConstCounter::new(dropped).encode(encoder.encode_descriptor(
                "capstan_access_log_dropped",
                "Access log lines dropped because the writer was behind (never blocking a worker)",
                None,
                MetricType::Counter,
            )?)?;
        }
        let mut family = encoder.encode_descriptor(
            "capstan_proxy_protocol_rejected",
            "Connections closed on PROXY protocol listeners, by reason",
            None,
            MetricType::Counter,
        )?;
        for (reason, count) in [
            ("untrusted", self.proxy_untrusted),
            ("malformed", self.proxy_malformed),
        ] {
            let labels = vec![("reason".to_string(), reason.to_string())];
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        ConstGauge::new(self.tunnels_open as i64).encode(encoder.encode_descriptor(
            "capstan_tunnels_open",
            "Upgraded (WebSocket) and CONNECT tunnels open now",
            None,
            MetricType::Gauge,
        )?)?;
        ConstCounter::new(self.tunnels_opened).encode(encoder.encode_descriptor(
            "capstan_tunnels_opened",
            "Tunnels opened since start",
            None,
            MetricType::Counter,
        )?)?;
        self.encode_client_send_timeouts(&mut encoder)
    }
}

impl OperationCollector {
    fn encode_client_send_timeouts(
        &self,
        encoder: &mut DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "capstan_client_send_timeouts",
            "Responses cut by timeouts.client_send (the client stopped taking them), by what was \
             cut: a client connection, or one HTTP/2 stream whose client granted no window",
            None,
            MetricType::Counter,
        )?;
        for (cut, count) in [
            ("connection", self.send_cut_connections),
            ("h2_stream", self.send_cut_h2_streams),
        ] {
            let labels = vec![("cut".to_string(), cut.to_string())];
            ConstCounter::new(count).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
