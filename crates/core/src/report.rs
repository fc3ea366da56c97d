//! The load report a node serves (`GET /_capstan/load`): one typed wire format shared by
//! `capstan origin` (which writes it), `capstan agent` (which writes it for nginx or Apache), the
//! switch's gatherer and the lab (which read it). The simulator builds the same type from its
//! models, so the gatherer sees identical input in both worlds.
//!
//! Field names are stable; fields added later get `#[serde(default)]` so an older node's report
//! still parses.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Utilisations and counts over one window of the node's history. Every field defaults to 0, so
/// a minimal daemon may send only the utilisations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Window {
    pub length_s: f64,
    pub cpu_util: f64,
    pub disk_util: f64,
    pub nic_util: f64,
    pub cpu_busy_s: f64,
    pub disk_busy_s: f64,
    pub nic_busy_s: f64,
    pub served: u64,
    pub mean_service_ms: f64,
}

impl Window {
    /// The window of `length_s` seconds in which the CPU (per core), disk and NIC were busy
    /// `cpu_s`, `disk_s` and `nic_s` seconds, and `served` requests took `service_s` in all —
    /// how a simulated node builds its report, as `capstan origin` does from its counters.
    pub fn from_busy(
        length_s: f64,
        (cpu_s, disk_s, nic_s): (f64, f64, f64),
        served: u64,
        service_s: f64,
    ) -> Window {
        let length = length_s.max(1e-9);
        let util = |busy: f64| (busy / length).clamp(0.0, 1.0);
        Window {
            length_s,
            cpu_util: util(cpu_s),
            disk_util: util(disk_s),
            nic_util: util(nic_s),
            cpu_busy_s: cpu_s,
            disk_busy_s: disk_s,
            nic_busy_s: nic_s,
            served,
            mean_service_ms: if served == 0 {
                0.0
            } else {
                service_s / served as f64 * 1e3
            },
        }
    }
}

/// Requests of one kind the node served, and their mean service time (per-class feedback).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClassWindow {
    pub served: u64,
    pub mean_service_ms: f64,
}

/// An emulated node's memory file cache.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheReport {
    /// What the cache may hold now: `configured_bytes` less the memory of the server's processes
    /// (process-per-connection mode), never below 0.
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub hits: u64,
    pub misses: u64,
    /// The capacity with no process memory taken (`cache_fraction` of the tree). Older reports
    /// lack it: 0.
    #[serde(default)]
    pub configured_bytes: u64,
}

/// A process-per-connection node (`capstan origin --process-limit`, Apache's prefork model in
/// Banga & Druschel §5.5): each connection it serves holds a process, at most `limit` at once;
/// later connections wait in the listen backlog, and each process's memory is taken from the
/// file cache.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessReport {
    /// Most connections served at once (Apache's MaxClients: 152 in the paper).
    pub limit: u32,
    /// Connections being served now, each holding a process.
    pub in_use: u64,
    /// Most processes in use at once since start.
    pub max_in_use: u64,
    /// Connections accepted since start.
    pub accepted: u64,
    /// Connections the kernel has completed and holds in the listen backlog, waiting for a
    /// process (Linux: the listening socket's accept queue).
    pub waiting: u64,
    /// The listen backlog: how many may wait before the kernel ignores new connection attempts.
    pub backlog: u32,
    /// Memory one process takes from the file cache, in bytes (≈ 500 KB in the paper).
    pub memory_per_process_bytes: u64,
    /// `in_use × memory_per_process_bytes`: what the processes take from the cache now.
    pub memory_bytes: u64,
}

/// Accuracy of an emulated node's waits for modelled completions (disk, CPU, NIC), since start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimerReport {
    pub waits: u64,
    /// Mean and largest time past the deadline (an early wake-up counts as 0).
    pub mean_late_us: f64,
    pub max_late_us: f64,
    /// Waits that ended before their deadline.
    pub early_waits: u64,
    /// How far ahead of their deadlines waits are set now, to make up for wake-up delay.
    pub lead_us: f64,
}

/// The whole report. Only `interval` is required of a node; everything else has a default, so a
/// minimal load daemon can answer `{"interval":{"cpu_util":0.4,"disk_util":0,"nic_util":0}}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LoadReport {
    #[serde(default)]
    pub node: String,
    /// `emulated`, `real` (capstan origin) or `agent` (capstan agent beside a real server).
    #[serde(default)]
    pub resources: String,
    #[serde(default)]
    pub tree: String,
    #[serde(default)]
    pub cores: u32,
    #[serde(default)]
    pub speed: f64,
    #[serde(default)]
    pub uptime_s: f64,
    /// Requests being served now (the load request itself excluded).
    #[serde(default)]
    pub active_requests: u64,
    #[serde(default)]
    pub served: u64,
    #[serde(default)]
    pub mean_service_ms: f64,
    /// The last interval: what the gatherer turns into utilisations.
    pub interval: Window,
    #[serde(default)]
    pub since_start: Window,
    /// Per request kind over the last interval (`static`, `cgi`, …), when the node tells.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub classes: BTreeMap<String, ClassWindow>,
    /// Which share of the document tree this node holds locally (`--partition K/N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<Partition>,
    /// Memory file cache; only in emulated mode (real mode has the OS page cache).
    #[serde(default)]
    pub cache: Option<CacheReport>,
    /// How late the node's modelled waits ended past their deadlines; only in emulated mode.
    #[serde(default)]
    pub timer: Option<TimerReport>,
    /// Processes and listen backlog; only in process-per-connection mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes: Option<ProcessReport>,
}

/// Node `index` of `count` owns the files whose key hashes to it (`hash % count == index`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub index: u32,
    pub count: u32,
}

impl Partition {
    /// Whether the object with this locality key lives on this partition's node.
    pub fn holds(&self, key_hash: u64) -> bool {
        self.count <= 1 || key_hash % u64::from(self.count) == u64::from(self.index)
    }
}

/// Why a report body is not a load report.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReportError {
    #[error("not a load report: {0}")]
    Malformed(String),
    #[error("load report has a utilisation that is not a number in [0, 1]: {field} = {value}")]
    OutOfRange { field: &'static str, value: f64 },
}

impl LoadReport {
    /// Parses a report body (JSON) and checks its utilisations.
    pub fn parse(body: &[u8]) -> Result<LoadReport, ReportError> {
        let report: LoadReport =
            serde_json::from_slice(body).map_err(|e| ReportError::Malformed(e.to_string()))?;
        for (field, value) in [
            ("interval.cpu_util", report.interval.cpu_util),
            ("interval.disk_util", report.interval.disk_util),
            ("interval.nic_util", report.interval.nic_util),
        ] {
            // A report a little over 1 (rounding in a busy-time sum) is clamped later; NaN,
            // negatives and wild values mean the daemon is broken.
            if !value.is_finite() || !(0.0..=1.5).contains(&value) {
                return Err(ReportError::OutOfRange { field, value });
            }
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minimal_report_parses() {
        let r = LoadReport::parse(br#"{"interval":{"cpu_util":0.4}}"#).unwrap();
        assert_eq!(r.interval.cpu_util, 0.4);
        assert_eq!(r.active_requests, 0);
    }

    #[test]
    fn bad_reports_are_refused_with_the_reason() {
        let e = LoadReport::parse(b"{}").unwrap_err().to_string();
        assert!(e.contains("interval"), "{e}");
        assert!(LoadReport::parse(b"<html>").is_err());
        let e = LoadReport::parse(br#"{"interval":{"cpu_util":-3}}"#).unwrap_err();
        assert_eq!(
            e,
            ReportError::OutOfRange {
                field: "interval.cpu_util",
                value: -3.0
            }
        );
    }

    #[test]
    fn a_report_round_trips_through_json() {
        let r = LoadReport {
            node: "n1".into(),
            partition: Some(Partition { index: 1, count: 3 }),
            processes: Some(ProcessReport {
                limit: 152,
                in_use: 3,
                memory_bytes: 1_500_000,
                ..ProcessReport::default()
            }),
            ..LoadReport::default()
        };
        let back = LoadReport::parse(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn a_partition_holds_its_share_of_keys() {
        let p = |index| Partition { index, count: 3 };
        for h in 0..30u64 {
            let holders = (0..3).filter(|&i| p(i).holds(h)).count();
            assert_eq!(holders, 1, "every key has exactly one home");
        }
        assert!(Partition { index: 0, count: 1 }.holds(7));
    }
}
