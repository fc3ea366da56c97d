//! The node's load report, `GET /_capstan/load`: the "collector" / "load daemon" of the papers
//! (SWEB's loadd, the CAP paper's WRR gathering every T_gat).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Busy seconds per resource since the node started, read at time `at` (seconds since start).
#[derive(Debug, Clone, Copy, Default)]
pub struct Busy {
    pub at: f64,
    pub cpu_s: f64,
    pub disk_s: f64,
    pub nic_s: f64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    busy: Busy,
    served: u64,
    service_ns: u64,
}

/// Request counters plus a short history of snapshots, so that "the last interval" is always a
/// window of between one and one and a quarter intervals ending now.
pub struct LoadStats {
    pub active: AtomicU64,
    served: AtomicU64,
    service_ns: AtomicU64,
    history: Mutex<VecDeque<Snapshot>>,
    interval_s: f64,
}

/// Utilisations and counts over one window. Deserialisable, so clients of the report (the lab)
/// read it with this very type.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
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

#[derive(Debug, Clone, Serialize)]
pub struct CacheReport {
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub hits: u64,
    pub misses: u64,
}

/// The JSON body of `/_capstan/load`. Field names are stable.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    pub node: String,
    pub resources: &'static str,
    pub tree: String,
    pub cores: u32,
    pub speed: f64,
    pub uptime_s: f64,
    /// Requests being served now (the load request itself excluded).
    pub active_requests: u64,
    pub served: u64,
    pub mean_service_ms: f64,
    pub interval: Window,
    pub since_start: Window,
    /// Memory file cache; only in emulated mode (real mode has the OS page cache).
    pub cache: Option<CacheReport>,
    /// How late the node's modelled waits ended past their deadlines; only in emulated mode.
    pub timer: Option<TimerReport>,
}

/// Accuracy of an emulated node's waits for modelled completions (disk, CPU, NIC), since start.
#[derive(Debug, Clone, Serialize)]
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

fn window(from: &Snapshot, to: &Snapshot) -> Window {
    let len = (to.busy.at - from.busy.at).max(1e-9);
    let served = to.served - from.served;
    let cpu = (to.busy.cpu_s - from.busy.cpu_s).max(0.0);
    let disk = (to.busy.disk_s - from.busy.disk_s).max(0.0);
    let nic = (to.busy.nic_s - from.busy.nic_s).max(0.0);
    Window {
        length_s: len,
        cpu_util: (cpu / len).min(1.0),
        disk_util: (disk / len).min(1.0),
        nic_util: (nic / len).min(1.0),
        cpu_busy_s: cpu,
        disk_busy_s: disk,
        nic_busy_s: nic,
        served,
        mean_service_ms: if served == 0 {
            0.0
        } else {
            (to.service_ns - from.service_ns) as f64 / served as f64 / 1e6
        },
    }
}

impl LoadStats {
    pub fn new(interval_s: f64) -> Self {
        let mut h = VecDeque::new();
        h.push_back(Snapshot::default());
        LoadStats {
            active: AtomicU64::new(0),
            served: AtomicU64::new(0),
            service_ns: AtomicU64::new(0),
            history: Mutex::new(h),
            interval_s,
        }
    }

    pub fn interval_s(&self) -> f64 {
        self.interval_s
    }

    pub fn finished(&self, service_ns: u64) {
        self.served.fetch_add(1, Ordering::Relaxed);
        self.service_ns.fetch_add(service_ns, Ordering::Relaxed);
    }

    fn snapshot(&self, busy: Busy) -> Snapshot {
        Snapshot {
            busy,
            served: self.served.load(Ordering::Relaxed),
            service_ns: self.service_ns.load(Ordering::Relaxed),
        }
    }

    /// Called every quarter interval by the node's ticker.
    pub fn tick(&self, busy: Busy) {
        let snap = self.snapshot(busy);
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        h.push_back(snap);
        // Keep the start snapshot plus enough to cover an interval and a bit.
        while h.len() > 10 {
            h.remove(1);
        }
    }

    /// (last interval, since start).
    pub fn windows(&self, busy: Busy) -> (Window, Window) {
        let now = self.snapshot(busy);
        let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let start = h[0];
        let from = h
            .iter()
            .rev()
            .find(|s| s.busy.at <= now.busy.at - self.interval_s)
            .copied()
            .unwrap_or(start);
        (window(&from, &now), window(&start, &now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn busy(at: f64, cpu: f64) -> Busy {
        Busy {
            at,
            cpu_s: cpu,
            disk_s: 0.0,
            nic_s: 0.0,
        }
    }

    #[test]
    fn interval_window_uses_a_snapshot_at_least_one_interval_old() {
        let s = LoadStats::new(1.0);
        for i in 1..=8 {
            s.tick(busy(i as f64 * 0.25, i as f64 * 0.25 * 0.5));
        }
        // Busy at 50 % until t = 2, then 100 % until 2.5.
        let (last, all) = s.windows(busy(2.5, 1.5));
        assert!((last.length_s - 1.0).abs() < 1e-9);
        assert!((last.cpu_util - 0.75).abs() < 1e-9, "{}", last.cpu_util);
        assert!((all.cpu_util - 0.6).abs() < 1e-9);
    }

    #[test]
    fn mean_service_time() {
        let s = LoadStats::new(1.0);
        s.finished(100_000_000);
        s.finished(300_000_000);
        let (_, all) = s.windows(busy(1.0, 0.0));
        assert_eq!(all.served, 2);
        assert!((all.mean_service_ms - 200.0).abs() < 1e-9);
    }
}
