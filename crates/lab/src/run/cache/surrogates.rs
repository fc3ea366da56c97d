//! Surrogate metrics of a cache contender over time (the Bakhtiyari thesis's Figs. 4.35–4.42
//! and Table 4.8): while a workload runs, a thread samples the proxy's process tree once a
//! period — CPU as a percentage of one core (utime + stime deltas from `/proc/PID/stat`),
//! resident memory (`VmRSS` of `/proc/PID/status`), and disk reads and writes (bytes that
//! reached the storage layer, `read_bytes` / `write_bytes`, and read/write system calls,
//! `syscr` / `syscw`, of `/proc/PID/io`). Beside them, the block devices' own counters from
//! `/proc/diskstats` (bytes and completed operations read and written per second, summed over
//! the whole disks: no partitions, loop, RAM or device-mapper devices, which would count the
//! same I/O twice) — the thesis's blktrace view of the disk. Those are machine-wide: every
//! process's I/O is in them, not only the proxy's. The samples are summarised per workload
//! phase.
//!
//! The sampler is a plain thread, not a task on the load generator's runtime, so a slow
//! `/proc` scan never delays a request; it stops (and is joined) when dropped or finished.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use capstan_bench::polygraph::PhaseResult;

use crate::model::cache::{CacheResults, PhaseSurrogates, SurrogateSample, Surrogates};
use crate::model::error::LabError;

/// `/proc/PID/stat`: (parent pid, utime + stime in clock ticks). The command name (field 2)
/// may contain spaces and parentheses; fields are counted after its last `)`.
pub fn parse_stat(text: &str) -> Option<(u32, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime + stime))
}

/// `VmRSS` of `/proc/PID/status`, kB (absent for a zombie or a kernel thread).
pub fn parse_status_rss_kb(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The counters of `/proc/PID/io` the report uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoCounters {
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub syscr: u64,
    pub syscw: u64,
}

/// `/proc/PID/io` (`name: value` lines); `None` unless all four counters are there.
pub fn parse_io(text: &str) -> Option<IoCounters> {
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?
            .trim()
            .parse()
            .ok()
    };
    Some(IoCounters {
        read_bytes: field("read_bytes")?,
        write_bytes: field("write_bytes")?,
        syscr: field("syscr")?,
        syscw: field("syscw")?,
    })
}

/// One block device's counters of `/proc/diskstats` (sectors are 512 bytes there, whatever
/// the device's own sector size).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskCounters {
    pub reads: u64,
    pub read_sectors: u64,
    pub writes: u64,
    pub write_sectors: u64,
}

/// `/proc/diskstats`: (device name, counters) of every line with at least the classic 14
/// fields (major, minor, name, reads completed, merged, sectors read, ms, writes completed,
/// merged, sectors written, ...).
pub fn parse_diskstats(text: &str) -> Vec<(String, DiskCounters)> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let n = |i: usize| f.get(i)?.parse::<u64>().ok();
            (f.len() >= 14).then_some(())?;
            Some((
                f[2].to_string(),
                DiskCounters {
                    reads: n(3)?,
                    read_sectors: n(5)?,
                    writes: n(7)?,
                    write_sectors: n(9)?,
                },
            ))
        })
        .collect()
}

/// Whether a device of `/proc/diskstats` is a whole disk to count: listed in `/sys/block`
/// (`whole`), and not a loop, RAM, zram, device-mapper or RAID device, whose I/O also shows
/// on the disks beneath (or never reaches one).
pub fn is_counted_disk(name: &str, whole: &dyn Fn(&str) -> bool) -> bool {
    const SKIP: [&str; 5] = ["loop", "ram", "zram", "dm-", "md"];
    whole(name) && !SKIP.iter().any(|p| name.starts_with(p))
}

/// The counted disks' counters, summed, and their names; `Err` with the reason when
/// `/proc/diskstats` cannot be read.
fn read_disks() -> Result<(DiskCounters, Vec<String>), String> {
    let text =
        std::fs::read_to_string("/proc/diskstats").map_err(|e| format!("/proc/diskstats: {e}"))?;
    let whole = |n: &str| Path::new("/sys/block").join(n).exists();
    let mut sum = DiskCounters::default();
    let mut names = Vec::new();
    for (name, c) in parse_diskstats(&text) {
        if is_counted_disk(&name, &whole) {
            sum.reads += c.reads;
            sum.read_sectors += c.read_sectors;
            sum.writes += c.writes;
            sum.write_sectors += c.write_sectors;
            names.push(name);
        }
    }
    Ok((sum, names))
}

/// Per-second rates between two readings of the disks, set on `s`.
fn set_disk_rates(s: &mut SurrogateSample, before: &DiskCounters, now: &DiskCounters, dt: f64) {
    let rate = |a: u64, b: u64| (b.saturating_sub(a) as f64 / dt.max(1e-9) * 10.0).round() / 10.0;
    s.disk_read_bytes_s = Some(rate(before.read_sectors * 512, now.read_sectors * 512));
    s.disk_write_bytes_s = Some(rate(before.write_sectors * 512, now.write_sectors * 512));
    s.disk_read_ops_s = Some(rate(before.reads, now.reads));
    s.disk_write_ops_s = Some(rate(before.writes, now.writes));
}

/// What one process looked like at a sampling instant.
#[derive(Debug, Clone, Copy, Default)]
struct ProcReading {
    ticks: u64,
    rss_kb: u64,
    io: Option<IoCounters>,
}

/// Every process of the tree rooted at `root`, read once.
fn read_tree(root: u32, io_errors: &mut Vec<String>) -> HashMap<u32, ProcReading> {
    let mut parents: Vec<(u32, u32, u64)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((ppid, ticks)) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .as_deref()
                .and_then(parse_stat)
            {
                parents.push((pid, ppid, ticks));
            }
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp, _)| *pp == parent)
                .map(|p| p.0),
        );
        i += 1;
    }
    let mut out = HashMap::new();
    for pid in tree {
        let Some(&(_, _, ticks)) = parents.iter().find(|p| p.0 == pid) else {
            continue;
        };
        let rss_kb = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .as_deref()
            .and_then(parse_status_rss_kb)
            .unwrap_or(0);
        let io = match std::fs::read_to_string(format!("/proc/{pid}/io")) {
            Ok(t) => parse_io(&t),
            Err(e) => {
                io_errors.push(format!("/proc/{pid}/io: {e}"));
                None
            }
        };
        out.insert(pid, ProcReading { ticks, rss_kb, io });
    }
    out
}

/// Clock ticks per second of `/proc/PID/stat`'s times.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value; it has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The sample of one period from two readings of the tree. A process new in `now` started
/// during the period: all its counters count; one that went away is left out.
fn sample_between(
    before: &HashMap<u32, ProcReading>,
    now: &HashMap<u32, ProcReading>,
    period_s: f64,
    t_s: f64,
    hz: f64,
) -> SurrogateSample {
    let mut ticks = 0u64;
    let mut io = Some(IoCounters::default());
    for (pid, r) in now {
        let b = before.get(pid);
        ticks += r.ticks.saturating_sub(b.map_or(0, |b| b.ticks));
        // A process new in `now` counts from zero; one unreadable reading makes the period's
        // I/O unknown rather than too low.
        let prev = b.map_or(Some(IoCounters::default()), |b| b.io);
        io = match (io, r.io, prev) {
            (Some(sum), Some(n), Some(p)) => Some(IoCounters {
                read_bytes: sum.read_bytes + n.read_bytes.saturating_sub(p.read_bytes),
                write_bytes: sum.write_bytes + n.write_bytes.saturating_sub(p.write_bytes),
                syscr: sum.syscr + n.syscr.saturating_sub(p.syscr),
                syscw: sum.syscw + n.syscw.saturating_sub(p.syscw),
            }),
            _ => None,
        };
    }
    SurrogateSample {
        t_s: (t_s * 1000.0).round() / 1000.0,
        cpu_percent: (ticks as f64 / hz / period_s * 1000.0).round() / 10.0,
        rss_mb: (now.values().map(|r| r.rss_kb).sum::<u64>() as f64 / 1024.0 * 10.0).round() / 10.0,
        read_bytes: io.map(|x| x.read_bytes),
        write_bytes: io.map(|x| x.write_bytes),
        read_ops: io.map(|x| x.syscr),
        write_ops: io.map(|x| x.syscw),
        processes: now.len() as u32,
        ..Default::default()
    }
}

/// Samples a process tree once a period on a thread of its own until finished or dropped.
pub struct Sampler {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<SampleLog>>,
    period: Duration,
}

impl Sampler {
    /// Starts sampling the tree rooted at `root` now (time 0 of the samples).
    pub fn start(root: u32, period: Duration) -> Sampler {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("capstan-lab-surrogates".into())
            .spawn(move || sample_loop(root, period, rx))
            .ok();
        Sampler {
            stop: Some(tx),
            thread,
            period,
        }
    }

    /// Stops sampling and summarises the samples per phase of the run.
    pub fn finish(mut self, phases: &[PhaseResult]) -> Surrogates {
        // Dropping the sender wakes the thread at once.
        self.stop.take();
        let SampleLog {
            samples,
            errors: mut unreadable,
            disk_devices,
        } = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_else(|| SampleLog {
                errors: vec!["the sampling thread did not start".into()],
                ..Default::default()
            });
        if samples.iter().any(|s| s.read_bytes.is_none()) && unreadable.is_empty() {
            unreadable.push("/proc/PID/io: some readings lacked counters".into());
        }
        Surrogates {
            period_s: self.period.as_secs_f64(),
            phases: summarise(&samples, phases),
            samples,
            unreadable,
            disk_devices,
        }
    }
}

/// What the sampling thread hands back.
#[derive(Default)]
struct SampleLog {
    samples: Vec<SurrogateSample>,
    errors: Vec<String>,
    disk_devices: Vec<String>,
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The sampling thread: one reading of the tree per period until the sender goes away.
fn sample_loop(root: u32, period: Duration, stop: mpsc::Receiver<()>) -> SampleLog {
    let hz = ticks_per_second();
    let start = Instant::now();
    let mut errors = Vec::new();
    let mut before = read_tree(root, &mut errors);
    let mut disks_before = read_disks();
    let disk_devices = disks_before
        .as_ref()
        .map(|d| d.1.clone())
        .unwrap_or_default();
    let mut at = start;
    let mut samples = Vec::new();
    loop {
        let wait = (at + period).saturating_duration_since(Instant::now());
        if !matches!(
            stop.recv_timeout(wait),
            Err(mpsc::RecvTimeoutError::Timeout)
        ) {
            break;
        }
        let now_at = Instant::now();
        let now = read_tree(root, &mut errors);
        let disks_now = read_disks();
        let dt = now_at.duration_since(at).as_secs_f64();
        let t = now_at.duration_since(start).as_secs_f64();
        let mut sample = sample_between(&before, &now, dt, t, hz);
        match (&disks_before, &disks_now) {
            (Ok(b), Ok(n)) => set_disk_rates(&mut sample, &b.0, &n.0, dt),
            (_, Err(e)) | (Err(e), _) => errors.push(e.clone()),
        }
        samples.push(sample);
        (before, disks_before, at) = (now, disks_now, now_at);
        // Once per reason, so hours of samples do not pile up the same error.
        errors = distinct(errors);
    }
    SampleLog {
        samples,
        errors: distinct(errors),
        disk_devices,
    }
}

/// The reasons a field was unreadable, once each (a pid that vanished between two reads is
/// not a reason).
fn distinct(errors: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for e in errors {
        if e.contains("No such file") || e.contains("No such process") {
            continue;
        }
        // "/proc/123/io: Permission denied" and "/proc/456/io: ..." are one reason.
        let general = match e.split_once(": ") {
            Some((path, why)) => format!(
                "{}: {why}",
                path.split('/')
                    .map(|p| if p.parse::<u32>().is_ok() { "PID" } else { p })
                    .collect::<Vec<_>>()
                    .join("/")
            ),
            None => e,
        };
        if !out.contains(&general) {
            out.push(general);
        }
    }
    out
}

/// Per phase, the samples whose period's middle lies in `[start_s, end_s)`.
pub fn summarise(samples: &[SurrogateSample], phases: &[PhaseResult]) -> Vec<PhaseSurrogates> {
    let mut spans = Vec::with_capacity(samples.len());
    let mut prev = 0.0;
    for s in samples {
        spans.push(((prev + s.t_s) / 2.0, s.t_s - prev, s));
        prev = s.t_s;
    }
    let sum = |v: &[&SurrogateSample], f: fn(&SurrogateSample) -> Option<u64>| {
        v.iter().map(|s| f(s)).sum::<Option<u64>>()
    };
    phases
        .iter()
        .map(|p| {
            let inside: Vec<(f64, &SurrogateSample)> = spans
                .iter()
                .filter(|(mid, _, _)| *mid >= p.start_s && *mid < p.end_s)
                .map(|(_, dt, s)| (*dt, *s))
                .collect();
            let v: Vec<&SurrogateSample> = inside.iter().map(|x| x.1).collect();
            // fold from +0.0: an empty `sum()` of floats is -0.0, printed "-0.00".
            let cpu_s = inside
                .iter()
                .map(|(dt, s)| s.cpu_percent / 100.0 * dt)
                .fold(0.0, |a, x| a + x);
            let n = v.len();
            PhaseSurrogates {
                phase: p.name.clone(),
                samples: n as u32,
                cpu_s: (cpu_s * 1000.0).round() / 1000.0,
                mean_cpu_percent: if n > 0 {
                    (v.iter().map(|s| s.cpu_percent).sum::<f64>() / n as f64 * 10.0).round() / 10.0
                } else {
                    0.0
                },
                max_cpu_percent: v.iter().map(|s| s.cpu_percent).fold(0.0, f64::max),
                max_rss_mb: v.iter().map(|s| s.rss_mb).fold(0.0, f64::max),
                read_bytes: sum(&v, |s| s.read_bytes),
                write_bytes: sum(&v, |s| s.write_bytes),
                read_ops: sum(&v, |s| s.read_ops),
                write_ops: sum(&v, |s| s.write_ops),
                cpu_ms_per_1k: (n > 0 && p.responses > 0)
                    .then(|| (cpu_s * 1e6 / p.responses as f64 * 100.0).round() / 100.0),
                disk_read_mb_s: time_mean(&inside, |s| s.disk_read_bytes_s, 1e6),
                disk_write_mb_s: time_mean(&inside, |s| s.disk_write_bytes_s, 1e6),
                disk_read_ops_s: time_mean(&inside, |s| s.disk_read_ops_s, 1.0),
                disk_write_ops_s: time_mean(&inside, |s| s.disk_write_ops_s, 1.0),
            }
        })
        .collect()
}

/// A rate's mean over samples weighted by their periods, divided by `unit`; absent when no
/// sample has it (or any lacks it: a gap would bias the mean).
fn time_mean(
    inside: &[(f64, &SurrogateSample)],
    rate: fn(&SurrogateSample) -> Option<f64>,
    unit: f64,
) -> Option<f64> {
    let mut total = 0.0;
    let mut secs = 0.0;
    for (dt, s) in inside {
        total += rate(s)? * dt;
        secs += dt;
    }
    (secs > 0.0).then(|| (total / secs / unit * 1000.0).round() / 1000.0)
}

fn mb(bytes: Option<u64>) -> String {
    bytes.map_or_else(|| "–".into(), |b| format!("{:.1}", b as f64 / 1e6))
}

fn count(n: Option<u64>) -> String {
    n.map_or_else(|| "–".into(), |n| n.to_string())
}

/// The per-contender, per-phase surrogate table (text; the thesis's Table 4.8 quantities).
pub fn surrogate_table(r: &CacheResults) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<13} {:<6} {:>7} {:>6} {:>6} {:>7} {:>8} {:>8} {:>9} {:>9} {:>10}",
        "contender",
        "phase",
        "CPU s",
        "CPU%",
        "max%",
        "RSS MB",
        "rd MB",
        "wr MB",
        "rd calls",
        "wr calls",
        "ms/1k resp"
    );
    for c in &r.contenders {
        let Some(sur) = &c.surrogates else { continue };
        for p in &sur.phases {
            if p.samples == 0 {
                let _ = writeln!(
                    s,
                    "{:<13} {:<6} no sample (the phase was shorter than the {} s period)",
                    c.name, p.phase, sur.period_s
                );
                continue;
            }
            let _ = writeln!(
                s,
                "{:<13} {:<6} {:>7.2} {:>6.1} {:>6.1} {:>7.1} {:>8} {:>8} {:>9} {:>9} {:>10}",
                c.name,
                p.phase,
                p.cpu_s,
                p.mean_cpu_percent,
                p.max_cpu_percent,
                p.max_rss_mb,
                mb(p.read_bytes),
                mb(p.write_bytes),
                count(p.read_ops),
                count(p.write_ops),
                p.cpu_ms_per_1k
                    .map_or_else(|| "–".into(), |x| format!("{x:.1}")),
            );
        }
        for why in &sur.unreadable {
            let _ = writeln!(s, "{:<13} unreadable: {why}", c.name);
        }
    }
    s + &disk_table(r)
}

fn rate(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".into(), |x| format!("{x:.digits$}"))
}

/// Per contender and phase, the whole disks' mean rates from `/proc/diskstats` (the
/// thesis's blktrace throughput, Figs. 4.36, 4.38–4.40, 4.42).
pub fn disk_table(r: &CacheResults) -> String {
    let mut s = String::new();
    let devices: Vec<String> = r
        .contenders
        .iter()
        .filter_map(|c| c.surrogates.as_ref())
        .flat_map(|x| x.disk_devices.iter().cloned())
        .fold(Vec::new(), |mut v, d| {
            if !v.contains(&d) {
                v.push(d);
            }
            v
        });
    let _ = writeln!(
        s,
        "\nBlock devices ({}), /proc/diskstats, machine-wide, means per second:",
        if devices.is_empty() {
            "none readable".to_string()
        } else {
            devices.join(", ")
        }
    );
    let _ = writeln!(
        s,
        "{:<13} {:<6} {:>9} {:>9} {:>9} {:>9}",
        "contender", "phase", "rd MB/s", "wr MB/s", "rd op/s", "wr op/s"
    );
    for c in &r.contenders {
        let Some(sur) = &c.surrogates else { continue };
        for p in sur.phases.iter().filter(|p| p.samples > 0) {
            let _ = writeln!(
                s,
                "{:<13} {:<6} {:>9} {:>9} {:>9} {:>9}",
                c.name,
                p.phase,
                rate(p.disk_read_mb_s, 3),
                rate(p.disk_write_mb_s, 3),
                rate(p.disk_read_ops_s, 1),
                rate(p.disk_write_ops_s, 1),
            );
        }
    }
    s
}

/// Sentences: each contender's CPU per 1,000 responses against Capstan's (or the leanest
/// contender's) in the loaded phases, and its peaks of CPU, memory and disk writes.
pub fn surrogate_findings(r: &CacheResults) -> Vec<String> {
    let with: Vec<(&str, &Surrogates)> = r
        .contenders
        .iter()
        .filter_map(|c| Some((c.name.as_str(), c.surrogates.as_ref()?)))
        .filter(|(_, s)| !s.samples.is_empty())
        .collect();
    let mut out = Vec::new();
    let per_1k = |s: &Surrogates, phase: &str| {
        s.phases
            .iter()
            .find(|p| p.phase == phase)
            .and_then(|p| p.cpu_ms_per_1k)
            .filter(|x| *x > 0.0)
    };
    for phase in ["top1", "inc", "top2"] {
        let rows: Vec<(&str, f64)> = with
            .iter()
            .filter_map(|(n, s)| Some((*n, per_1k(s, phase)?)))
            .collect();
        let base = rows
            .iter()
            .find(|(n, _)| *n == "capstan")
            .copied()
            .or_else(|| rows.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1)));
        let Some((base_name, base_v)) = base else {
            continue;
        };
        for (n, v) in rows.iter().filter(|(n, _)| *n != base_name) {
            out.push(format!(
                "{n} used {:.1}× {base_name}'s CPU per 1,000 responses in {phase} ({v:.1} ms \
                 against {base_v:.1} ms)",
                v / base_v
            ));
        }
    }
    for (n, s) in &with {
        let peak_cpu = s.samples.iter().map(|x| x.cpu_percent).fold(0.0, f64::max);
        let peak_rss = s.samples.iter().map(|x| x.rss_mb).fold(0.0, f64::max);
        let written: Option<u64> = s.samples.iter().map(|x| x.write_bytes).sum();
        let read: Option<u64> = s.samples.iter().map(|x| x.read_bytes).sum();
        let disk = match (read, written) {
            (Some(r), Some(w)) => format!(
                "{:.1} MB read from and {:.1} MB written to disk",
                r as f64 / 1e6,
                w as f64 / 1e6
            ),
            _ => "disk I/O unreadable".into(),
        };
        out.push(format!(
            "{n}: peak CPU {peak_cpu:.0} % of a core, peak RSS {peak_rss:.1} MB, {disk} over \
             the run"
        ));
        if let Some(line) = device_finding(n, s) {
            out.push(line);
        }
    }
    out
}

/// The whole disks' busiest second and mean write rate while a contender ran (machine-wide).
fn device_finding(name: &str, s: &Surrogates) -> Option<String> {
    let writes: Vec<f64> = s
        .samples
        .iter()
        .filter_map(|x| x.disk_write_bytes_s)
        .collect();
    let ops: Vec<f64> = s
        .samples
        .iter()
        .filter_map(|x| Some(x.disk_read_ops_s? + x.disk_write_ops_s?))
        .collect();
    if writes.is_empty() || ops.is_empty() {
        return None;
    }
    let mean_w = writes.iter().sum::<f64>() / writes.len() as f64;
    let peak_ops = ops.iter().copied().fold(0.0, f64::max);
    Some(format!(
        "{name}: the disks ({}) wrote {:.2} MB/s on average and peaked at {peak_ops:.0} \
         operations/s while it ran (/proc/diskstats counts every process of the machine)",
        s.disk_devices.join(", "),
        mean_w / 1e6
    ))
}

/// One line per contender over the run's seconds, named at its end.
fn time_svg(
    r: &CacheResults,
    caption: &str,
    y_desc: &str,
    value: fn(&SurrogateSample) -> f64,
) -> Result<String, LabError> {
    use capstan_report::{Chart, Marker, Series};
    let series: Vec<(&str, Vec<(f64, f64)>)> = r
        .contenders
        .iter()
        .filter_map(|c| {
            let s = c.surrogates.as_ref()?;
            Some((
                c.name.as_str(),
                s.samples.iter().map(|x| (x.t_s, value(x))).collect(),
            ))
        })
        .collect();
    let mut chart =
        Chart::new(caption, "seconds since the workload started", y_desc).size(760, 340);
    for (name, pts) in series {
        chart.add(Series::new(name, pts).marker(Marker::None));
    }
    chart.svg().map_err(LabError::Report)
}

/// The report's surrogate section: CPU and RSS over time, the per-phase table, what could
/// not be read.
pub(crate) fn surrogate_html(r: &CacheResults) -> Result<String, LabError> {
    let mut h = String::from(
        "<h2>Surrogate metrics (the thesis's Figs. 4.35–4.42, Table 4.8)</h2>\
         <p>Sampled once a second from /proc while the workload ran: the proxy's whole \
         process tree. Disk bytes are what reached the storage layer (/proc/PID/io \
         read_bytes, write_bytes); read/write calls (syscr, syscw) count every read and write \
         system call, sockets included. The block devices' rates come from /proc/diskstats \
         (whole disks): they count every process of the machine, so they show the proxy's disk \
         use only beside what else ran.</p>",
    );
    if !r.contenders.iter().any(|c| c.surrogates.is_some()) {
        h.push_str("<p>No contender was sampled.</p>");
        return Ok(h);
    }
    h.push_str(&time_svg(
        r,
        "proxy CPU over time",
        "CPU, % of one core",
        |s| s.cpu_percent,
    )?);
    h.push_str(&time_svg(
        r,
        "proxy resident memory over time",
        "RSS, MB",
        |s| s.rss_mb,
    )?);
    h.push_str(&time_svg(
        r,
        "block devices: bytes read + written per second (/proc/diskstats)",
        "MB/s, whole disks, machine-wide",
        |s| (s.disk_read_bytes_s.unwrap_or(0.0) + s.disk_write_bytes_s.unwrap_or(0.0)) / 1e6,
    )?);
    h.push_str(&time_svg(
        r,
        "block devices: read + write operations per second (/proc/diskstats)",
        "operations/s, whole disks, machine-wide",
        |s| s.disk_read_ops_s.unwrap_or(0.0) + s.disk_write_ops_s.unwrap_or(0.0),
    )?);
    let _ = write!(
        h,
        "<h3>Per phase</h3><pre>{}</pre>",
        capstan_report::escape(&surrogate_table(r))
    );
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Varnish's cache process as /proc shows it (command name with a space and parentheses).
    const STAT: &str = "4242 (cache-main (x) y) S 4200 4200 10332 0 -1 4194560 9120 0 3 0 \
        1234 567 0 0 20 0 23 0 3506434 312233984 30412 18446744073709551615 1 1 0 0 0 0 0 \
        4096 0 0 0 0 17 1 0 0 0 0 0";
    const STATUS: &str = "Name:\tcache-main\nUmask:\t0022\nState:\tS (sleeping)\n\
        VmPeak:\t  405000 kB\nVmRSS:\t  121648 kB\nRssAnon:\t  100000 kB\nThreads:\t23\n";
    const IO: &str = "rchar: 6976\nwchar: 1200\nsyscr: 10\nsyscw: 3\nread_bytes: 4096\n\
        write_bytes: 81920\ncancelled_write_bytes: 0\n";

    #[test]
    fn proc_files_parse_from_captured_text() {
        assert_eq!(parse_stat(STAT), Some((4200, 1234 + 567)));
        assert_eq!(parse_stat("12 (short) S"), None);
        assert_eq!(parse_status_rss_kb(STATUS), Some(121648));
        assert_eq!(parse_status_rss_kb("Name:\tkthreadd\nState:\tS\n"), None);
        assert_eq!(
            parse_io(IO),
            Some(IoCounters {
                read_bytes: 4096,
                write_bytes: 81920,
                syscr: 10,
                syscw: 3
            })
        );
        // A kernel without task I/O accounting lacks the storage counters.
        assert_eq!(parse_io("rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\n"), None);
    }

    fn reading(ticks: u64, rss_kb: u64, io: Option<(u64, u64, u64, u64)>) -> ProcReading {
        ProcReading {
            ticks,
            rss_kb,
            io: io.map(|(read_bytes, write_bytes, syscr, syscw)| IoCounters {
                read_bytes,
                write_bytes,
                syscr,
                syscw,
            }),
        }
    }

    /// A virtual machine's /proc/diskstats (20 fields, kernel 5.5+), an old 14-field disk line
    /// and a 7-field partition line of a 2.6 kernel.
    const DISKSTATS: &str = "   7       0 loop0 5 0 10 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n\
        254       0 vda 4611201 114033 155711274 8671805 724842 1030060 917092440 11827666 0 \
        1226156 21109949 868406 87 878527224 573218 8945 37258\n\
        254       1 vda1 100 200 50 80\n\
        8       0 sda 10 0 20 5 4 0 8 1 0 6 6\n\
        253       0 dm-0 3 0 6 0 1 0 2 0 0 0 0 0 0 0\n";

    #[test]
    fn diskstats_parse_and_only_whole_disks_count() {
        let all = parse_diskstats(DISKSTATS);
        let names: Vec<&str> = all.iter().map(|d| d.0.as_str()).collect();
        // Lines with fewer than 14 fields (partitions on 2.6 kernels) are left out.
        assert_eq!(names, ["loop0", "vda", "sda", "dm-0"]);
        assert_eq!(
            all[1].1,
            DiskCounters {
                reads: 4611201,
                read_sectors: 155711274,
                writes: 724842,
                write_sectors: 917092440
            }
        );
        let whole = |n: &str| ["loop0", "vda", "dm-0", "zram0"].contains(&n);
        assert!(is_counted_disk("vda", &whole));
        assert!(!is_counted_disk("vda1", &whole));
        for skipped in ["loop0", "dm-0", "zram0"] {
            assert!(!is_counted_disk(skipped, &whole), "{skipped}");
        }
        let mut s = SurrogateSample::default();
        let before = DiskCounters {
            reads: 10,
            read_sectors: 8,
            writes: 5,
            write_sectors: 100,
        };
        let now = DiskCounters {
            reads: 14,
            read_sectors: 16,
            writes: 7,
            write_sectors: 2148,
        };
        set_disk_rates(&mut s, &before, &now, 2.0);
        assert_eq!(s.disk_read_bytes_s, Some(2048.0));
        assert_eq!(s.disk_write_bytes_s, Some(524288.0));
        assert_eq!(
            (s.disk_read_ops_s, s.disk_write_ops_s),
            (Some(2.0), Some(1.0))
        );
    }

    #[test]
    fn a_period_sums_the_tree_and_counts_new_processes_from_zero() {
        let before = HashMap::from([
            (1, reading(100, 1024, Some((0, 0, 5, 5)))),
            (2, reading(50, 1024, Some((4096, 0, 10, 0)))),
            (9, reading(70, 1024, Some((0, 0, 0, 0)))),
        ]);
        // Pid 9 exited, pid 3 is new; 0.5 s at 100 ticks/s.
        let now = HashMap::from([
            (1, reading(130, 2048, Some((0, 8192, 6, 9)))),
            (2, reading(60, 1024, Some((8192, 0, 12, 0)))),
            (3, reading(10, 1024, Some((0, 4096, 1, 1)))),
        ]);
        let s = sample_between(&before, &now, 0.5, 2.0, 100.0);
        // (30 + 10 + 10) ticks = 0.5 s of CPU in 0.5 s: one core.
        assert_eq!(s.cpu_percent, 100.0);
        assert_eq!(s.rss_mb, 4.0);
        assert_eq!(s.read_bytes, Some(4096));
        assert_eq!(s.write_bytes, Some(8192 + 4096));
        assert_eq!(s.read_ops, Some(1 + 2 + 1));
        assert_eq!(s.write_ops, Some(4 + 1));
        assert_eq!(s.processes, 3);
        // One unreadable /proc/PID/io makes the period's disk I/O unknown, not smaller.
        let blind = HashMap::from([(1, reading(130, 2048, None))]);
        let s = sample_between(&before, &blind, 1.0, 3.0, 100.0);
        assert_eq!(
            (s.cpu_percent, s.read_bytes, s.write_ops),
            (30.0, None, None)
        );
    }

    #[test]
    fn samples_are_summarised_per_phase_by_their_middle() {
        let phase = |name: &str, start_s: f64, end_s: f64, responses: u64| PhaseResult {
            name: name.into(),
            start_s,
            end_s,
            responses,
            ..Default::default()
        };
        let sample = |t_s: f64, cpu: f64, rss: f64, wr: Option<u64>| SurrogateSample {
            t_s,
            cpu_percent: cpu,
            rss_mb: rss,
            read_bytes: Some(0),
            write_bytes: wr,
            read_ops: Some(1),
            write_ops: Some(2),
            processes: 1,
            disk_write_bytes_s: Some(t_s * 1e6),
            ..Default::default()
        };
        let samples = [
            sample(1.0, 10.0, 5.0, Some(100)),
            sample(2.0, 30.0, 7.0, Some(200)),
            sample(3.0, 50.0, 6.0, None),
            sample(4.0, 70.0, 9.0, Some(1)),
        ];
        let s = summarise(
            &samples,
            &[
                phase("fill", 0.0, 2.0, 1000),
                phase("top1", 2.0, 3.4, 2000),
                phase("cool", 5.0, 5.2, 10),
            ],
        );
        assert_eq!(s[0].samples, 2);
        assert!((s[0].cpu_s - 0.4).abs() < 1e-9, "{:?}", s[0]);
        assert_eq!((s[0].mean_cpu_percent, s[0].max_cpu_percent), (20.0, 30.0));
        assert_eq!(s[0].max_rss_mb, 7.0);
        assert_eq!(s[0].write_bytes, Some(300));
        assert_eq!((s[0].read_ops, s[0].write_ops), (Some(2), Some(4)));
        assert_eq!(s[0].cpu_ms_per_1k, Some(400.0));
        // Disk rates: the mean of 1 and 2 MB/s over two 1 s periods; no read rate sampled.
        assert_eq!(s[0].disk_write_mb_s, Some(1.5));
        assert_eq!(s[0].disk_read_mb_s, None);
        // The sample at 4 s covers 3–4 s: its middle is past top1's end.
        assert_eq!(s[1].samples, 1);
        assert_eq!(s[1].write_bytes, None);
        assert_eq!(s[1].cpu_ms_per_1k, Some(250.0));
        // A phase shorter than a period has no sample, and no "-0.00" CPU seconds.
        assert_eq!((s[2].samples, s[2].cpu_ms_per_1k), (0, None));
        assert!(s[2].cpu_s == 0.0 && s[2].cpu_s.is_sign_positive());
    }

    #[test]
    fn unreadable_reasons_are_kept_once_and_vanished_pids_dropped() {
        let d = distinct(vec![
            "/proc/12/io: Permission denied (os error 13)".into(),
            "/proc/13/io: Permission denied (os error 13)".into(),
            "/proc/14/io: No such file or directory (os error 2)".into(),
        ]);
        assert_eq!(d, ["/proc/PID/io: Permission denied (os error 13)"]);
        assert_eq!(distinct(d.clone()), d);
    }

    #[test]
    fn the_sampler_reads_a_live_process_tree_and_stops_when_finished() {
        let phase = PhaseResult {
            name: "all".into(),
            end_s: 1e9,
            responses: 1,
            ..Default::default()
        };
        // Busy for five periods, while the sampler (a thread) reads the tree. A busy machine
        // may keep the sampler from its core for all of them: then again, for longer each time
        // (the sampler's work is polled for with a deadline, not assumed done in 100 ms).
        let mut busy_for = Duration::from_millis(100);
        let s = loop {
            let sampler = Sampler::start(std::process::id(), Duration::from_millis(20));
            let mut x = 0u64;
            let started = Instant::now();
            while started.elapsed() < busy_for {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
            std::hint::black_box(x);
            let s = sampler.finish(std::slice::from_ref(&phase));
            let cpu: f64 = s.samples.iter().map(|x| x.cpu_percent).sum();
            if (s.samples.len() >= 2 && cpu > 0.0) || busy_for >= Duration::from_secs(6) {
                break s;
            }
            busy_for *= 4;
        };
        assert!(s.samples.len() >= 2, "{s:?}");
        assert!(s.samples.iter().all(|x| x.rss_mb > 0.0 && x.processes >= 1));
        assert!(s.samples.iter().map(|x| x.cpu_percent).sum::<f64>() > 0.0);
        assert_eq!(s.phases[0].samples as usize, s.samples.len());
        assert!(s.samples.windows(2).all(|w| w[0].t_s < w[1].t_s));
        // Linux always has /proc/diskstats; a container may show no whole disk in /sys/block.
        assert!(
            s.samples.iter().all(|x| x.disk_write_ops_s.is_some()),
            "{s:?}"
        );
    }
}
