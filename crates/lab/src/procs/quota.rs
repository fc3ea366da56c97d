//! CPU quotas for processes the lab starts: a cgroup of `cpus` CPUs over a 10 ms period (so a
//! throttled process waits 10 ms at most), the method of `benches/lib.sh` `cpu_quota_group`:
//! cgroup v1's `cpu` controller where it is mounted and writable, else cgroup v2's `cpu.max`.
//! Without either (not root, no cpu controller) there is no quota and the caller says so.

use std::path::{Path, PathBuf};

/// The period of the quota, microseconds.
const PERIOD_US: u64 = 10_000;

/// A cgroup with a CPU quota; removed when dropped (its processes moved to the parent first).
#[derive(Debug)]
pub struct CpuQuota {
    dir: PathBuf,
    /// `cgroup v1 …` or `cgroup v2 …`: how the quota is set, for reports.
    pub method: String,
}

impl CpuQuota {
    /// A new cgroup `name` (made unique with our pid) of `cpus` CPUs, or why there cannot be one.
    pub fn new(name: &str, cpus: f64) -> Result<CpuQuota, String> {
        if !(cpus.is_finite() && cpus > 0.0) {
            return Err(format!("a CPU quota must be positive, got {cpus}"));
        }
        let quota = ((cpus * PERIOD_US as f64).round() as u64).max(1000);
        let leaf = format!("{name}-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        if v1.join("cpu.cfs_quota_us").is_file() {
            let dir = v1.join(&leaf);
            make(&dir)?;
            let q = CpuQuota {
                dir,
                method: format!(
                    "cgroup v1 cpu.cfs_quota_us {quota} µs per {PERIOD_US} µs ({cpus} CPU)"
                ),
            };
            write(&q.dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
            write(&q.dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
            return Ok(q);
        }
        let v2 = Path::new("/sys/fs/cgroup");
        let controllers =
            std::fs::read_to_string(v2.join("cgroup.controllers")).unwrap_or_default();
        if !controllers.split_whitespace().any(|c| c == "cpu") {
            return Err(
                "no cgroup cpu controller (neither v1 /sys/fs/cgroup/cpu nor v2 \
                        cgroup.controllers lists cpu)"
                    .into(),
            );
        }
        // Enabling the controller for children may fail when it already is; making the group
        // and writing cpu.max then tell whether it works.
        let _ = std::fs::write(v2.join("cgroup.subtree_control"), "+cpu");
        let dir = v2.join(&leaf);
        make(&dir)?;
        let q = CpuQuota {
            dir,
            method: format!("cgroup v2 cpu.max \"{quota} {PERIOD_US}\" ({cpus} CPU)"),
        };
        write(&q.dir.join("cpu.max"), &format!("{quota} {PERIOD_US}"))?;
        Ok(q)
    }

    /// Puts process `pid` (and the threads it starts later) under the quota.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())
    }
}

impl Drop for CpuQuota {
    fn drop(&mut self) {
        // A cgroup with processes in it cannot be removed: move any left to the parent.
        let parent = self.dir.parent().map(|p| p.join("cgroup.procs"));
        if let (Ok(pids), Some(parent)) = (
            std::fs::read_to_string(self.dir.join("cgroup.procs")),
            parent,
        ) {
            for pid in pids.split_whitespace() {
                let _ = std::fs::write(&parent, pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn make(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make cgroup {}: {e}", dir.display()))
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
