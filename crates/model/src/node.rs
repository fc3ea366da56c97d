use serde::{Deserialize, Serialize};

use crate::{DiskParams, NicParams, SslCosts};

/// Everything that describes one node's capacity. Defaults follow the CAP paper's §4.1 where it
/// gives a number; `static_cpu_ms` is ours (see its doc).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeParams {
    pub cores: u32,
    /// Multiplies the rate of the CPU, the memory copy and the disk: 0.5 doubles their times.
    pub speed: f64,
    pub disk: DiskParams,
    pub nic: NicParams,
    pub ssl: SslCosts,
    /// Main memory transfer rate in MB/s (10^6 bytes), the cost of serving a cached file.
    pub memory_mb_per_s: f64,
    /// Memory file cache size as a fraction of the document tree (CAP: 15 %). Above 1 the
    /// memory holds the whole tree with room to spare, which a process-per-connection node's
    /// processes can take (Banga & Druschel: a 97 MB cache over an 80 MB working set).
    pub cache_fraction: f64,
    /// Per-request CPU for a static file (parsing, headers, system calls), in ms at speed 1.
    /// The default of 1 ms is chosen so that the Jones thesis's lightly loaded static response
    /// times (2 ms for 500 bytes, 3 ms for 5 KB, Table 1) are matched once the network round
    /// trip is added.
    pub static_cpu_ms: f64,
    /// How much more a read of a file this node does not hold costs than a read from its own
    /// disk: the file comes from another node's disk over NFS (`capstan origin --partition`).
    /// SWEB (Andresen et al., §3.2) measured a remote NFS access at about 10 % more on the Meiko
    /// CS-2 (its b1 = 5 MB/s local, b2 = 4.5 MB/s remote, §3.3) and 50–70 % more on SUN
    /// workstations over Ethernet; the default 0.6 is the Ethernet figure's middle, since the
    /// modelled node sits on the CAP paper's 100 Mbit/s Ethernet. (With the 20 MB/s disk, 1.6×
    /// the transfer time is 12.5 MB/s: exactly the 100 Mbit/s wire.)
    pub remote_penalty: f64,
}

impl Default for NodeParams {
    fn default() -> Self {
        NodeParams {
            cores: 1,
            speed: 1.0,
            disk: DiskParams::default(),
            nic: NicParams::default(),
            ssl: SslCosts::default(),
            memory_mb_per_s: 100.0,
            cache_fraction: 0.15,
            static_cpu_ms: 1.0,
            remote_penalty: 0.6,
        }
    }
}

/// What one request asks of a node, at speed 1, in the order the node spends it: disk, then CPU,
/// then NIC.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Demand {
    pub disk_s: f64,
    pub cpu_s: f64,
    pub nic_bytes: u64,
}

impl NodeParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.cores == 0 {
            return Err("cores must be at least 1".into());
        }
        if !(self.speed.is_finite() && self.speed > 0.0) {
            return Err(format!(
                "speed must be a positive number, got {}",
                self.speed
            ));
        }
        if !(self.memory_mb_per_s.is_finite() && self.memory_mb_per_s > 0.0) {
            return Err("memory_mb_per_s must be positive".into());
        }
        if !(0.0..=100.0).contains(&self.cache_fraction) {
            return Err(format!(
                "cache_fraction must be between 0 and 100 (a multiple of the tree), got {}",
                self.cache_fraction
            ));
        }
        if !(self.static_cpu_ms.is_finite() && self.static_cpu_ms >= 0.0) {
            return Err("static_cpu_ms must be non-negative".into());
        }
        if !(self.remote_penalty.is_finite() && self.remote_penalty >= 0.0) {
            return Err(format!(
                "remote_penalty must be a non-negative number, got {}",
                self.remote_penalty
            ));
        }
        if !(self.nic.mbit_per_s.is_finite() && self.nic.mbit_per_s > 0.0) {
            return Err("nic mbit_per_s must be positive".into());
        }
        self.disk.validate()
    }

    /// Cache capacity for a document tree of `tree_bytes`.
    pub fn cache_bytes(&self, tree_bytes: u64) -> u64 {
        (tree_bytes as f64 * self.cache_fraction).round() as u64
    }

    /// A static file of `bytes`: a miss reads it from disk first; either way it is copied from
    /// memory and sent.
    pub fn static_file(&self, bytes: u64, cache_hit: bool) -> Demand {
        Demand {
            disk_s: if cache_hit {
                0.0
            } else {
                self.disk.access_time_s(bytes)
            },
            cpu_s: self.static_cpu_ms / 1e3 + bytes as f64 / (self.memory_mb_per_s * 1e6),
            nic_bytes: bytes,
        }
    }

    /// Time at speed 1 to read a file of `bytes` that lives on another node's disk, over the
    /// network file system: the local access time, `remote_penalty` more (SWEB §3.2).
    pub fn remote_read_s(&self, bytes: u64) -> f64 {
        self.disk.access_time_s(bytes) * (1.0 + self.remote_penalty)
    }

    /// Add the SSL costs of sending `bytes` securely to `base`.
    pub fn secure(&self, base: Demand, bytes: u64, handshake: bool) -> Demand {
        let hs = if handshake {
            self.ssl.handshake_cpu_s()
        } else {
            0.0
        };
        Demand {
            disk_s: base.disk_s,
            cpu_s: base.cpu_s + hs + self.ssl.bulk_cpu_s(bytes),
            nic_bytes: base.nic_bytes + self.ssl.overhead_bytes(bytes, handshake),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_costs_no_disk() {
        let p = NodeParams::default();
        let miss = p.static_file(5125, false);
        let hit = p.static_file(5125, true);
        assert_eq!(hit.disk_s, 0.0);
        assert!(miss.disk_s > 0.013);
        assert_eq!(hit.cpu_s, miss.cpu_s);
    }

    #[test]
    fn secure_adds_handshake_and_bulk() {
        let p = NodeParams::default();
        let base = p.static_file(5125, true);
        let s = p.secure(base, 5125, true);
        assert!(s.cpu_s - base.cpu_s > 0.0066);
        assert_eq!(s.nic_bytes, 5125 + 2048 + 73 + 29);
    }

    #[test]
    fn a_remote_read_costs_the_penalty_more_than_a_local_one() {
        let p = NodeParams::default();
        let local = p.disk.access_time_s(51_250);
        // 15.779 ms local (see disk.rs), 60 % more over NFS.
        assert!((p.remote_read_s(51_250) - local * 1.6).abs() < 1e-12);
        let meiko = NodeParams {
            remote_penalty: 0.1,
            ..NodeParams::default()
        };
        assert!((meiko.remote_read_s(0) - p.disk.access_time_s(0) * 1.1).abs() < 1e-12);
        let bad = NodeParams {
            remote_penalty: -0.1,
            ..NodeParams::default()
        };
        assert!(bad.validate().unwrap_err().contains("remote_penalty"));
    }

    #[test]
    fn validation_names_the_problem() {
        let p = NodeParams {
            speed: 0.0,
            ..NodeParams::default()
        };
        assert!(p.validate().unwrap_err().contains("speed"));
    }
}
