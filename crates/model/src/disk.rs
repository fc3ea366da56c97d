use serde::{Deserialize, Serialize};

use crate::{Fcfs, Slot, Time};

/// Disk parameters. Defaults are the CAP paper's (§4.1): an IBM Deskstar 34GXP with 20 MB/s
/// transfer, 9 ms seek, 7200 RPM and 0.05 ms controller delay. MB here is 10^6 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskParams {
    pub seek_ms: f64,
    pub rpm: f64,
    pub transfer_mb_per_s: f64,
    pub controller_ms: f64,
}

impl Default for DiskParams {
    fn default() -> Self {
        DiskParams {
            seek_ms: 9.0,
            rpm: 7200.0,
            transfer_mb_per_s: 20.0,
            controller_ms: 0.05,
        }
    }
}

impl DiskParams {
    /// Mean rotational latency: half a revolution, since the wanted sector is equally likely to be
    /// anywhere on the track when the head arrives.
    pub fn rotational_latency_s(&self) -> f64 {
        0.5 * 60.0 / self.rpm
    }

    /// Service time of one access of `bytes` at speed 1: controller + seek + rotation + transfer.
    pub fn access_time_s(&self, bytes: u64) -> f64 {
        self.controller_ms / 1e3
            + self.seek_ms / 1e3
            + self.rotational_latency_s()
            + bytes as f64 / (self.transfer_mb_per_s * 1e6)
    }

    pub fn validate(&self) -> Result<(), String> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        if !(ok(self.seek_ms) && ok(self.controller_ms)) {
            return Err("disk seek_ms and controller_ms must be non-negative numbers".into());
        }
        if !(self.rpm.is_finite() && self.rpm > 0.0) {
            return Err("disk rpm must be positive".into());
        }
        if !(self.transfer_mb_per_s.is_finite() && self.transfer_mb_per_s > 0.0) {
            return Err("disk transfer_mb_per_s must be positive".into());
        }
        Ok(())
    }
}

/// An FCFS disk: one arm, requests served in arrival order.
#[derive(Debug, Clone)]
pub struct Disk {
    params: DiskParams,
    speed: f64,
    queue: Fcfs,
}

impl Disk {
    pub fn new(params: DiskParams, speed: f64) -> Self {
        assert!(
            speed > 0.0 && speed.is_finite(),
            "disk speed must be positive"
        );
        Disk {
            params,
            speed,
            queue: Fcfs::new(),
        }
    }

    pub fn params(&self) -> &DiskParams {
        &self.params
    }

    /// One access of `bytes` (seek, rotation, controller and transfer), queued FCFS.
    pub fn read(&mut self, now: Time, bytes: u64) -> Slot {
        let s = self.params.access_time_s(bytes) / self.speed;
        self.queue.submit(now, s)
    }

    /// A job with a given service time at speed 1 (a whole CGI's worth of disk work).
    pub fn busy_for(&mut self, now: Time, seconds: f64) -> Slot {
        self.queue.submit(now, seconds / self.speed)
    }

    pub fn busy_seconds(&self, now: Time) -> f64 {
        self.queue.busy_seconds(now)
    }

    pub fn backlog(&self, now: Time) -> f64 {
        self.queue.backlog(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_defaults() {
        let p = DiskParams::default();
        assert!((p.rotational_latency_s() - 0.004_166_666).abs() < 1e-6);
        // 50 KB file of the WebStone set: 9 + 4.1667 + 0.05 + 2.5625 ms.
        let t = p.access_time_s(51_250);
        assert!((t - 0.015_779_17).abs() < 1e-6, "{t}");
    }

    #[test]
    fn speed_scales_service() {
        let mut fast = Disk::new(DiskParams::default(), 1.0);
        let mut slow = Disk::new(DiskParams::default(), 0.5);
        let a = fast.read(0.0, 500);
        let b = slow.read(0.0, 500);
        assert!((b.finish - 2.0 * a.finish).abs() < 1e-12);
    }
}
