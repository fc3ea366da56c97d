use serde::{Deserialize, Serialize};

use crate::{Fcfs, Slot, Time};

/// Network interface parameters; the default is the CAP paper's 100 Mbit/s Ethernet card.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NicParams {
    pub mbit_per_s: f64,
}

impl Default for NicParams {
    fn default() -> Self {
        NicParams { mbit_per_s: 100.0 }
    }
}

impl NicParams {
    pub fn transmit_time_s(&self, bytes: u64) -> f64 {
        bytes as f64 * 8.0 / (self.mbit_per_s * 1e6)
    }
}

/// A NIC that serialises outgoing bytes at its bandwidth, one response after another.
///
/// The node's `speed` factor does not apply: it describes the processor and disk, while the link
/// runs at its line rate whatever the host.
#[derive(Debug, Clone)]
pub struct Nic {
    params: NicParams,
    queue: Fcfs,
    bytes: u64,
}

impl Nic {
    pub fn new(params: NicParams) -> Self {
        assert!(
            params.mbit_per_s > 0.0 && params.mbit_per_s.is_finite(),
            "nic bandwidth must be positive"
        );
        Nic {
            params,
            queue: Fcfs::new(),
            bytes: 0,
        }
    }

    pub fn send(&mut self, now: Time, bytes: u64) -> Slot {
        self.bytes += bytes;
        self.queue.submit(now, self.params.transmit_time_s(bytes))
    }

    pub fn busy_seconds(&self, now: Time) -> f64 {
        self.queue.busy_seconds(now)
    }

    pub fn bytes_sent(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_megabytes_at_100_mbit() {
        let mut nic = Nic::new(NicParams::default());
        let s = nic.send(0.0, 5_248_000);
        assert!((s.finish - 0.419_84).abs() < 1e-9);
    }
}
