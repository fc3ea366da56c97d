//! Real resources: a calibrated CPU loop, real files on disk and real synchronous disk I/O, for
//! nodes that are separate machines.

use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use capstan_workload::DocTree;

use crate::error::OriginError;
use crate::load::Busy;

pub struct Real {
    start: Instant,
    cores: u32,
    speed: f64,
    nic_bytes_per_s: f64,
    data_dir: PathBuf,
    /// Loop iterations per CPU-second, measured at start.
    iters_per_s: f64,
    disk_ns: AtomicU64,
    nic_bytes: AtomicU64,
    tmp_seq: AtomicU64,
    cpu_at_start: Option<f64>,
}

/// One step of the burn loop: a few floating-point library calls, like the thesis's CGI
/// programs ("a simple loop that makes math library calls").
#[inline(always)]
fn step(x: f64) -> f64 {
    (x.sqrt() + 1.000_001).ln().exp() + 1e-9
}

fn burn(iters: u64) -> f64 {
    let mut x = 2.0f64;
    for _ in 0..iters {
        x = black_box(step(black_box(x)));
    }
    x
}

/// Iterations per second of the burn loop on an idle core; the best of a few short runs, since
/// interference only ever makes a run slower. Each run is timed by the CPU time this thread
/// actually got (from `/proc/thread-self/schedstat`, in nanoseconds) where the platform has it,
/// so that being preempted by other processes (a loaded machine, tests running side by side)
/// does not make the loop look slower than it is; by the wall clock otherwise.
fn calibrate() -> f64 {
    let mut best = 0.0f64;
    let mut iters = 20_000u64;
    for _ in 0..6 {
        let (t, cpu0) = (Instant::now(), thread_cpu_ns());
        black_box(burn(iters));
        let wall = t.elapsed().as_secs_f64();
        let dt = match (cpu0, thread_cpu_ns()) {
            (Some(a), Some(b)) if b > a => (b - a) as f64 / 1e9,
            _ => wall,
        };
        if dt < 0.005 {
            iters *= 4;
            continue;
        }
        best = best.max(iters as f64 / dt);
    }
    best.max(1.0)
}

/// Nanoseconds this thread has spent running on a CPU (Linux schedstat).
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Process CPU seconds (user + system) from /proc/self/stat, where the platform has it. Linux
/// reports in clock ticks of 1/100 s on every architecture Capstan targets.
fn process_cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name, which may itself contain spaces.
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

const MARKER: &str = ".capstan-tree";

/// Files up to this size are read without leaving the event loop.
const INLINE_READ_MAX: u64 = 128 * 1024;

/// Write the tree's files under `dir` unless a marker says this exact tree is already there.
pub fn materialize(tree: &DocTree, dir: &Path) -> Result<(), OriginError> {
    let io = |path: &Path, e: std::io::Error| OriginError::Io {
        path: path.to_path_buf(),
        error: e,
    };
    let stamp = format!(
        "{} seed={} files={} bytes={}\n",
        tree.kind,
        tree.seed,
        tree.files.len(),
        tree.total_bytes()
    );
    let marker = dir.join(MARKER);
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    for f in &tree.files {
        let path = dir.join(f.path.trim_start_matches('/'));
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        let mut out =
            std::io::BufWriter::new(std::fs::File::create(&path).map_err(|e| io(&path, e))?);
        for c in tree.chunks(f) {
            out.write_all(c).map_err(|e| io(&path, e))?;
        }
        out.flush().map_err(|e| io(&path, e))?;
    }
    std::fs::write(&marker, stamp).map_err(|e| io(&marker, e))?;
    Ok(())
}

impl Real {
    pub fn new(
        cores: u32,
        speed: f64,
        nic_mbit_per_s: f64,
        data_dir: PathBuf,
    ) -> Result<Arc<Self>, OriginError> {
        let tmp = data_dir.join(".capstan-tmp");
        std::fs::create_dir_all(&tmp).map_err(|e| OriginError::Io {
            path: tmp.clone(),
            error: e,
        })?;
        Ok(Arc::new(Real {
            start: Instant::now(),
            cores,
            speed,
            nic_bytes_per_s: nic_mbit_per_s * 1e6 / 8.0,
            data_dir,
            iters_per_s: calibrate(),
            disk_ns: AtomicU64::new(0),
            nic_bytes: AtomicU64::new(0),
            tmp_seq: AtomicU64::new(0),
            cpu_at_start: process_cpu_seconds(),
        }))
    }

    /// Burn `work_s` CPU-seconds' worth of the calibrated loop (divided by speed) on a blocking
    /// thread; under contention it takes longer, as a real CGI process would.
    pub async fn cpu(&self, work_s: f64) {
        if work_s <= 0.0 {
            return;
        }
        let iters = (work_s / self.speed * self.iters_per_s).round() as u64;
        let _ = tokio::task::spawn_blocking(move || black_box(burn(iters))).await;
    }

    /// Read a file of the tree from disk. Small files are read right here on the event loop:
    /// from the page cache that takes microseconds, far less than a round trip through the
    /// blocking pool (with the prebuilt headers, this took the WebStone mix from about half of
    /// nginx's throughput to about 0.9 of it in one run on the 2-core development machine).
    pub async fn read_file(&self, tree_path: &str, size: u64) -> std::io::Result<Vec<u8>> {
        let path = self.data_dir.join(tree_path.trim_start_matches('/'));
        if size <= INLINE_READ_MAX {
            return std::fs::read(path);
        }
        match tokio::task::spawn_blocking(move || std::fs::read(path)).await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        }
    }

    /// The thesis's disk service: read the file, write it back with a synchronous write, delete
    /// the copy.
    pub async fn disk_load(&self, tree_path: &str) -> std::io::Result<()> {
        let src = self.data_dir.join(tree_path.trim_start_matches('/'));
        let seq = self.tmp_seq.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .data_dir
            .join(".capstan-tmp")
            .join(format!("{}-{seq}", std::process::id()));
        let t = Instant::now();
        let r = tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            let data = std::fs::read(&src)?;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&data)?;
            f.sync_all()?;
            drop(f);
            std::fs::remove_file(&tmp)
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        self.disk_ns
            .fetch_add(t.elapsed().as_nanos() as u64, Ordering::Relaxed);
        r
    }

    pub fn sent(&self, bytes: u64) {
        self.nic_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// CPU: whole-process CPU time over the node's cores. Disk: time spent in the disk service's
    /// I/O (static reads come from the page cache and are not counted). NIC: bytes sent over the
    /// configured bandwidth.
    pub fn busy(&self) -> Busy {
        let cpu = match (process_cpu_seconds(), self.cpu_at_start) {
            (Some(now), Some(start)) => (now - start) / self.cores as f64,
            _ => 0.0,
        };
        Busy {
            at: self.start.elapsed().as_secs_f64(),
            cpu_s: cpu,
            disk_s: self.disk_ns.load(Ordering::Relaxed) as f64 / 1e9,
            nic_s: self.nic_bytes.load(Ordering::Relaxed) as f64 / self.nic_bytes_per_s,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_is_in_a_sane_range() {
        let r = calibrate();
        assert!(r > 1e5, "{r} iterations/s");
        let t = Instant::now();
        black_box(burn((r * 0.02) as u64));
        // 20 ms of work; a loaded machine can only make it slower, never much faster.
        assert!(t.elapsed().as_secs_f64() > 0.01);
    }

    #[test]
    fn proc_stat_parses() {
        if Path::new("/proc/self/stat").exists() {
            assert!(process_cpu_seconds().is_some());
        }
    }
}
