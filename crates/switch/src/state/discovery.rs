//! Each `[[discovery]]` source's state, written by `crate::control::discovery` and read by
//! `/status` and `/metrics`. Only control tasks and the admin listener touch it, never the
//! request path.

use std::sync::Mutex;
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use serde::Serialize;

use crate::config::DiscoverySource;

/// One source's state.
#[derive(Clone, Debug)]
pub(crate) struct SourceState {
    pub name: String,
    /// The source's kind (`file`, …).
    pub kind: &'static str,
    /// Where its nodes come from (a path, a DNS name, endpoints and a prefix).
    pub target: String,
    /// The last read failed (the last good list stays).
    pub error: Option<String>,
    pub last_good: Option<Instant>,
    /// Nodes of this source in the cluster now.
    pub nodes: usize,
    pub refreshes_ok: u64,
    pub refreshes_error: u64,
    /// The names of this source's nodes in the cluster.
    pub owned: Vec<String>,
    /// Entries of the last good list the kind dropped, and why (a DNS record with port 0, a
    /// target that does not exist): the rest of the list applies.
    pub dropped: Vec<String>,
    /// Entries of the last applied list left out because another node (static, admin-added
    /// or another source's) has their address or name.
    pub clashes: Vec<String>,
}

/// A source as `/status` shows it.
#[derive(Serialize)]
pub(crate) struct SourceStatus {
    pub kind: &'static str,
    pub name: String,
    pub target: String,
    /// `ok` or `error`.
    pub state: &'static str,
    pub last_error: Option<String>,
    /// Seconds since the source last gave a good list (`null`: never).
    pub last_good_s_ago: Option<f64>,
    pub nodes: usize,
    pub failures: u64,
    /// Entries of its last good list that gave no node, and why (`dropped` and `clashes`).
    pub skipped: Vec<String>,
}

/// Every source's state, by name.
#[derive(Default)]
pub(crate) struct DiscoveryBoard(Mutex<Vec<SourceState>>);

impl DiscoveryBoard {
    /// Changes a source's state (adding it when new; its kind and target as configured now).
    pub(crate) fn update(&self, source: &DiscoverySource, change: impl FnOnce(&mut SourceState)) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let at = match all.iter().position(|s| s.name == source.name) {
            Some(at) => at,
            None => {
                all.push(SourceState {
                    name: source.name.clone(),
                    kind: source.kind.name(),
                    target: source.kind.target(),
                    error: None,
                    last_good: None,
                    nodes: 0,
                    refreshes_ok: 0,
                    refreshes_error: 0,
                    owned: Vec::new(),
                    dropped: Vec::new(),
                    clashes: Vec::new(),
                });
                all.len() - 1
            }
        };
        all[at].kind = source.kind.name();
        all[at].target = source.kind.target();
        change(&mut all[at]);
    }

    /// Forgets a source a reload took out.
    pub(crate) fn remove(&self, name: &str) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|s| s.name != name);
    }

    pub(crate) fn snapshot(&self) -> Vec<SourceState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn status(&self) -> Vec<SourceStatus> {
        self.snapshot()
            .into_iter()
            .map(|s| SourceStatus {
                kind: s.kind,
                state: if s.error.is_some() { "error" } else { "ok" },
                last_good_s_ago: s.last_good.map(|t| t.elapsed().as_secs_f64()),
                failures: s.refreshes_error,
                nodes: s.nodes,
                skipped: s.dropped.iter().chain(&s.clashes).cloned().collect(),
                name: s.name,
                target: s.target,
                last_error: s.error,
            })
            .collect()
    }
}

/// `capstan_discovery_refreshes_total{source,result}`, `capstan_discovery_nodes{source}` and
/// `capstan_discovery_skipped{source}`.
#[derive(Debug)]
pub(crate) struct DiscoveryCollector(pub Vec<SourceState>);

impl Collector for DiscoveryCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if self.0.is_empty() {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "capstan_discovery_refreshes",
            "Looks at a discovery source (a file read, a DNS answer, a registry update), by result (ok, error)",
            None,
            MetricType::Counter,
        )?;
        for s in &self.0 {
            for (result, n) in [("ok", s.refreshes_ok), ("error", s.refreshes_error)] {
                let labels = [
                    ("source".to_string(), s.name.clone()),
                    ("result".to_string(), result.to_string()),
                ];
                ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "capstan_discovery_nodes",
            "Nodes of a discovery source in the cluster now",
            None,
            MetricType::Gauge,
        )?;
        for s in &self.0 {
            let labels = [("source".to_string(), s.name.clone())];
            ConstGauge::new(s.nodes as i64).encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "capstan_discovery_skipped",
            "Entries of a discovery source's last list that gave no node (a bad record, an address another node has)",
            None,
            MetricType::Gauge,
        )?;
        for s in &self.0 {
            let labels = [("source".to_string(), s.name.clone())];
            let skipped = s.dropped.len() + s.clashes.len();
            ConstGauge::new(skipped as i64).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}
