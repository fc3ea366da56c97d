//! The node's load history behind `GET /_capstan/load`: the "collector" / "load daemon" of the
//! papers (SWEB's loadd, the CAP paper's WRR gathering every T_gat). The report itself is the one
//! typed wire format of `capstan_core::report`; this module keeps the counters and snapshots its
//! windows are computed from.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use capstan_core::report::{ClassWindow, Window};

/// Busy seconds per resource since the node started, read at time `at` (seconds since start).
#[derive(Debug, Clone, Copy, Default)]
pub struct Busy {
    pub at: f64,
    pub cpu_s: f64,
    pub disk_s: f64,
    pub nic_s: f64,
}

/// The kinds of request a node reports separately (`classes` in the report): what a dispatcher
/// that learns per-class demands (SWEB's oracle, WRR_time per class) needs to tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A file of the tree on this node's own disk (or any file, on an unpartitioned node).
    Static,
    /// A file of the tree this node reads over NFS (`--partition`: another node holds it).
    StaticRemote,
    CpuLight,
    CpuMed,
    DiskLoad,
    /// Anything under `/secure/`.
    Secure,
    /// `/cgi-bin/demand.cgi`: a demand the request states (queueing-theory checks).
    Demand,
}

const KINDS: usize = 7;

impl Kind {
    const ALL: [Kind; KINDS] = [
        Kind::Static,
        Kind::StaticRemote,
        Kind::CpuLight,
        Kind::CpuMed,
        Kind::DiskLoad,
        Kind::Secure,
        Kind::Demand,
    ];

    /// The key in the report's `classes`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Static => "static",
            Kind::StaticRemote => "static-remote",
            Kind::CpuLight => "cpu_light",
            Kind::CpuMed => "cpu_med",
            Kind::DiskLoad => "disk_load",
            Kind::Secure => "secure",
            Kind::Demand => "demand",
        }
    }
}

/// Requests served and their summed service time, in nanoseconds.
#[derive(Debug, Clone, Copy, Default)]
struct Count {
    served: u64,
    service_ns: u64,
}

impl Count {
    fn since(self, earlier: Count) -> Count {
        Count {
            served: self.served.saturating_sub(earlier.served),
            service_ns: self.service_ns.saturating_sub(earlier.service_ns),
        }
    }

    fn mean_ms(self) -> f64 {
        if self.served == 0 {
            0.0
        } else {
            self.service_ns as f64 / self.served as f64 / 1e6
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Snapshot {
    busy: Busy,
    all: Count,
    kinds: [Count; KINDS],
}

#[derive(Default)]
struct Counter {
    served: AtomicU64,
    service_ns: AtomicU64,
}

impl Counter {
    fn add(&self, served: u64, service_ns: u64) {
        self.served.fetch_add(served, Ordering::Relaxed);
        self.service_ns.fetch_add(service_ns, Ordering::Relaxed);
    }

    fn read(&self) -> Count {
        Count {
            served: self.served.load(Ordering::Relaxed),
            service_ns: self.service_ns.load(Ordering::Relaxed),
        }
    }
}

/// Request counters plus a short history of snapshots, so that "the last interval" is always a
/// window of between one and one and a quarter intervals ending now.
pub struct LoadStats {
    pub active: AtomicU64,
    all: Counter,
    kinds: [Counter; KINDS],
    history: Mutex<VecDeque<Snapshot>>,
    interval_s: f64,
}

/// The report's windows: the last interval, since start, and the last interval per kind (only
/// kinds that served something in it).
pub struct Windows {
    pub interval: Window,
    pub since_start: Window,
    pub classes: BTreeMap<String, ClassWindow>,
}

fn window(from: &Snapshot, to: &Snapshot) -> Window {
    let len = (to.busy.at - from.busy.at).max(1e-9);
    let count = to.all.since(from.all);
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
        served: count.served,
        mean_service_ms: count.mean_ms(),
    }
}

fn classes(from: &Snapshot, to: &Snapshot) -> BTreeMap<String, ClassWindow> {
    Kind::ALL
        .iter()
        .zip(to.kinds.iter().zip(&from.kinds))
        .map(|(kind, (to, from))| (kind, to.since(*from)))
        .filter(|(_, c)| c.served > 0)
        .map(|(kind, c)| {
            let w = ClassWindow {
                served: c.served,
                mean_service_ms: c.mean_ms(),
            };
            (kind.name().to_string(), w)
        })
        .collect()
}

impl LoadStats {
    pub fn new(interval_s: f64) -> Self {
        let mut h = VecDeque::new();
        h.push_back(Snapshot::default());
        LoadStats {
            active: AtomicU64::new(0),
            all: Counter::default(),
            kinds: Default::default(),
            history: Mutex::new(h),
            interval_s,
        }
    }

    pub fn interval_s(&self) -> f64 {
        self.interval_s
    }

    /// A request ended after `service_ns`; `kind` when it was one of the reported kinds.
    pub fn finished(&self, service_ns: u64, kind: Option<Kind>) {
        self.all.add(1, service_ns);
        if let Some(k) = kind {
            self.kinds[k as usize].add(1, service_ns);
        }
    }

    /// Requests someone else served and counted (a real server beside `capstan agent`), whose
    /// service times are unknown.
    pub fn served_elsewhere(&self, served: u64) {
        self.all.add(served, 0);
    }

    fn snapshot(&self, busy: Busy) -> Snapshot {
        let mut kinds = [Count::default(); KINDS];
        for (k, c) in kinds.iter_mut().zip(&self.kinds) {
            *k = c.read();
        }
        Snapshot {
            busy,
            all: self.all.read(),
            kinds,
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

    /// The windows ending now.
    pub fn windows(&self, busy: Busy) -> Windows {
        let now = self.snapshot(busy);
        let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        let start = h[0];
        let from = h
            .iter()
            .rev()
            .find(|s| s.busy.at <= now.busy.at - self.interval_s)
            .copied()
            .unwrap_or(start);
        Windows {
            interval: window(&from, &now),
            since_start: window(&start, &now),
            classes: classes(&from, &now),
        }
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
        let w = s.windows(busy(2.5, 1.5));
        assert!((w.interval.length_s - 1.0).abs() < 1e-9);
        assert!(
            (w.interval.cpu_util - 0.75).abs() < 1e-9,
            "{}",
            w.interval.cpu_util
        );
        assert!((w.since_start.cpu_util - 0.6).abs() < 1e-9);
    }

    #[test]
    fn mean_service_time() {
        let s = LoadStats::new(1.0);
        s.finished(100_000_000, None);
        s.finished(300_000_000, None);
        let all = s.windows(busy(1.0, 0.0)).since_start;
        assert_eq!(all.served, 2);
        assert!((all.mean_service_ms - 200.0).abs() < 1e-9);
    }

    #[test]
    fn classes_cover_the_last_interval_only_and_only_kinds_served() {
        let s = LoadStats::new(1.0);
        s.finished(50_000_000, Some(Kind::CpuLight));
        s.tick(busy(1.0, 0.0));
        s.finished(10_000_000, Some(Kind::Static));
        s.finished(30_000_000, Some(Kind::Static));
        s.finished(40_000_000, Some(Kind::StaticRemote));
        s.finished(1_000_000, None);
        let w = s.windows(busy(2.0, 0.0));
        let names: Vec<&str> = w.classes.keys().map(String::as_str).collect();
        assert_eq!(names, ["static", "static-remote"]);
        assert_eq!(w.classes["static"].served, 2);
        assert!((w.classes["static"].mean_service_ms - 20.0).abs() < 1e-9);
        assert!((w.classes["static-remote"].mean_service_ms - 40.0).abs() < 1e-9);
        // Every request counts in the totals, kinds or not.
        assert_eq!(w.interval.served, 4);
        assert_eq!(w.since_start.served, 5);
    }

    #[test]
    fn requests_served_elsewhere_count_without_a_service_time() {
        let s = LoadStats::new(1.0);
        s.served_elsewhere(7);
        let w = s.windows(busy(1.0, 0.0));
        assert_eq!(w.since_start.served, 7);
        assert_eq!(w.since_start.mean_service_ms, 0.0);
        assert!(w.classes.is_empty());
    }
}
