//! Counters the router keeps per path direction, and the report `capstan wan stats` prints.
//!
//! The router thread owns the live counters (no atomics on the packet path) and publishes a
//! [`Report`] a few times a second; readers only ever see published reports.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Live counters of one path direction.
#[derive(Debug)]
pub struct LinkCounters {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub drops: Drops,
    /// Packets accepted but not yet sent (in the queue or in flight).
    pub in_router: u64,
    pub max_queue_packets: u64,
    pub max_queue_bytes: u64,
    /// Actual minus intended departure, nanoseconds.
    pub delay_error: Histogram<u64>,
}

/// Dropped packets by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drops {
    /// The loss model (Bernoulli or Gilbert–Elliott).
    pub loss: u64,
    /// The queue limit (drop-tail).
    pub queue: u64,
    /// The router's own packet buffer was full.
    pub overflow: u64,
    /// The kernel refused the packet on the way out.
    pub write_error: u64,
}

impl Default for LinkCounters {
    fn default() -> Self {
        LinkCounters {
            packets_in: 0,
            bytes_in: 0,
            packets_out: 0,
            bytes_out: 0,
            drops: Drops::default(),
            in_router: 0,
            max_queue_packets: 0,
            max_queue_bytes: 0,
            // 1 ns to 100 s at 3 significant digits.
            delay_error: Histogram::new_with_bounds(1, 100_000_000_000, 3)
                .expect("static histogram bounds are valid"),
        }
    }
}

impl LinkCounters {
    pub fn record_delay_error(&mut self, ns: u64) {
        self.delay_error.saturating_record(ns.max(1));
    }

    /// A snapshot for the report, with the queue depth measured now.
    pub fn report(&self, queue_packets: u64, queue_bytes: u64) -> DirReport {
        let h = &self.delay_error;
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1e3;
        DirReport {
            packets_in: self.packets_in,
            bytes_in: self.bytes_in,
            packets_out: self.packets_out,
            bytes_out: self.bytes_out,
            drops: self.drops,
            queue_packets,
            queue_bytes,
            max_queue_packets: self.max_queue_packets,
            max_queue_bytes: self.max_queue_bytes,
            in_router: self.in_router,
            delay_error_us: Quantiles {
                count: h.len(),
                p50: us(0.5),
                p90: us(0.9),
                p99: us(0.99),
                p999: us(0.999),
                max: h.max() as f64 / 1e3,
            },
        }
    }
}

/// One direction of one path, as published.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DirReport {
    pub packets_in: u64,
    pub bytes_in: u64,
    pub packets_out: u64,
    pub bytes_out: u64,
    pub drops: Drops,
    pub queue_packets: u64,
    pub queue_bytes: u64,
    pub max_queue_packets: u64,
    pub max_queue_bytes: u64,
    pub in_router: u64,
    pub delay_error_us: Quantiles,
}

/// Delay error quantiles in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub count: u64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// One path as published: its parameters in words and both directions' counters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathReport {
    pub name: String,
    pub clients: Vec<String>,
    pub up_params: String,
    pub down_params: String,
    pub up: DirReport,
    pub down: DirReport,
}

/// How the router waits for departure times.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PacerReport {
    /// Timed wake-ups (the kernel timer fired).
    pub wakeups: u64,
    /// Current lead: how long before a departure the router wakes and then spins.
    pub lead_us: f64,
    /// Wake-up lateness (after the timer's target), p50 / p99 over the run.
    pub lateness_p50_us: f64,
    pub lateness_p99_us: f64,
    /// Real-time scheduling was granted to the router thread.
    pub realtime: bool,
    /// CPU time the router thread has used (user + system), seconds.
    pub router_cpu_s: f64,
    /// 100 ms intervals in which the router used > 80 % of a core and so did not spin.
    pub busy_intervals: u64,
}

/// Everything `capstan wan stats` shows for one set-up.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub name: String,
    pub pid: u32,
    pub server: String,
    pub uptime_s: f64,
    /// Packets that matched no path (other addresses, non-IPv4), dropped.
    pub unrouted: u64,
    pub pacer: PacerReport,
    pub paths: Vec<PathReport>,
}

impl Report {
    /// The per-path table `capstan wan stats` prints.
    pub fn table(&self) -> String {
        let mut out = format!(
            "{} (pid {}, server {}, up {:.0} s, unrouted {}, router CPU {:.2} s, timer lead {:.1} µs, wake-up lateness p50 {:.1} / p99 {:.1} µs{})\n",
            self.name,
            self.pid,
            self.server,
            self.uptime_s,
            self.unrouted,
            self.pacer.router_cpu_s,
            self.pacer.lead_us,
            self.pacer.lateness_p50_us,
            self.pacer.lateness_p99_us,
            if self.pacer.realtime { ", realtime" } else { "" }
        );
        out += &format!(
            "{:<12} {:<4} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9}  {}\n",
            "path", "dir", "packets", "bytes", "loss", "queue", "overflow", "wr-err", "q-pkts",
            "q-bytes", "err-p50us", "err-p99us", "err-maxus", "parameters"
        );
        for p in &self.paths {
            for (dir, r, params) in [
                ("up", &p.up, &p.up_params),
                ("down", &p.down, &p.down_params),
            ] {
                out += &format!(
                    "{:<12} {:<4} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9} {:>9.1} {:>9.1} {:>9.1}  {}\n",
                    p.name, dir, r.packets_out, r.bytes_out, r.drops.loss, r.drops.queue,
                    r.drops.overflow, r.drops.write_error, r.queue_packets, r.queue_bytes,
                    r.delay_error_us.p50, r.delay_error_us.p99, r.delay_error_us.max, params
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_quantiles_come_from_recorded_errors() {
        let mut c = LinkCounters::default();
        for us in 1..=100u64 {
            c.record_delay_error(us * 1000);
        }
        let r = c.report(3, 4500);
        assert_eq!(r.delay_error_us.count, 100);
        assert!(
            (r.delay_error_us.p50 - 50.0).abs() < 0.1,
            "{}",
            r.delay_error_us.p50
        );
        assert!((r.delay_error_us.max - 100.0).abs() < 0.1);
        assert_eq!((r.queue_packets, r.queue_bytes), (3, 4500));
    }

    #[test]
    fn table_has_a_row_per_direction() {
        let report = Report {
            name: "t".into(),
            paths: vec![PathReport {
                name: "lan".into(),
                ..PathReport::default()
            }],
            ..Report::default()
        };
        let table = report.table();
        assert_eq!(table.lines().filter(|l| l.starts_with("lan")).count(), 2);
    }
}
