//! Running a WAN experiment: for each contender and level a fresh server, `capstan bench
//! --wan` as a child process (it makes the namespaces and runs the router), and the server's
//! connections and processes sampled four times a second while the load runs. The protocol
//! contenders of `wan-loss-h3` (a TLS and QUIC listener, HTTP/1.1, HTTP/2 or HTTP/3 clients)
//! are set up from [`protocols`].

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use capstan_bench::RunResult;
use capstan_workload::tree::DocTree;

mod backend;
mod findings;
mod protocols;

use crate::model::error::LabError;
use crate::model::wan::{
    check_contender, ContenderRuns, LevelResult, PathFigures, Sample, Vary, WanExperiment,
    WanOptions, WanResults,
};
use backend::{Backend, NotStarted, Shared};

/// How often the server is sampled while the load runs.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Runs a WAN experiment; `say` gets one line per run.
pub async fn run_wan(
    exp: &WanExperiment,
    opts: &WanOptions,
    say: &(dyn Fn(String) + Send + Sync),
) -> Result<WanResults, LabError> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(LabError::Run(
            "WAN experiments need root (network namespaces and the delay router): run \
             capstan lab as root"
                .into(),
        ));
    }
    let contenders = opts
        .contenders
        .clone()
        .unwrap_or_else(|| exp.contenders(opts.mode));
    for c in &contenders {
        check_contender(c).map_err(LabError::Experiment)?;
    }
    std::fs::create_dir_all(&opts.work_dir)
        .map_err(|e| LabError::Run(format!("{}: {e}", opts.work_dir.display())))?;
    let kind = exp.tree_kind().map_err(LabError::Experiment)?;
    let tree = DocTree::generate(kind, exp.workload.seed, exp.workload.files)
        .map_err(|e| LabError::Experiment(e.to_string()))?;
    let mut shared = Shared {
        exe: opts.exe.clone(),
        dir: opts.work_dir.clone(),
        tree,
        docroot: None,
    };
    let mut results = results_head(exp, opts);
    for name in &contenders {
        let runs = run_contender(exp, opts, name, &mut shared, say).await?;
        results.contenders.push(runs);
    }
    results.findings = findings::findings(&results);
    Ok(results)
}

fn results_head(exp: &WanExperiment, opts: &WanOptions) -> WanResults {
    WanResults {
        name: exp.name.clone(),
        title: exp.title.clone(),
        figure: exp.figure.clone(),
        about: exp.about.clone(),
        mode: format!("{:?}", opts.mode).to_lowercase(),
        command: opts.command.clone(),
        vary: Some(exp.vary),
        x_label: exp.x_label().into(),
        levels: exp.levels(opts.mode),
        rate: exp.rate,
        duration_s: exp.duration_s(opts.mode),
        warmup_s: exp.warmup_s(opts.mode),
        load_at_start: std::fs::read_to_string("/proc/loadavg").unwrap_or_default(),
        paper: exp.paper.clone(),
        ..Default::default()
    }
}

/// Every level of one contender, each with a server of its own (so no run inherits the
/// connections still draining from the previous one).
async fn run_contender(
    exp: &WanExperiment,
    opts: &WanOptions,
    name: &str,
    shared: &mut Shared,
    say: &(dyn Fn(String) + Send + Sync),
) -> Result<ContenderRuns, LabError> {
    let mut runs = ContenderRuns {
        name: name.to_string(),
        ..Default::default()
    };
    for level in exp.levels(opts.mode) {
        let backend = match Backend::start(name, exp, shared).await {
            Ok(b) => b,
            Err(NotStarted::Skip(why)) | Err(NotStarted::Failed(why)) => {
                say(format!("{name}: skipped — {why}"));
                runs.skipped = Some(why);
                runs.levels.clear();
                return Ok(runs);
            }
        };
        runs.setup = backend.setup.clone();
        runs.version = backend.version.clone();
        let r = run_level(&backend, exp, opts, &level).await?;
        say(format!(
            "{name} at {level}: {:.1} of {:.0} req/s, p99 {:.0} ms, {:.0} connections open{}",
            r.throughput_rps,
            r.offered_rps,
            r.p99_ms,
            r.established_mean,
            r.processes_mean
                .map(|p| format!(", {p:.0} processes"))
                .unwrap_or_default()
        ));
        runs.levels.push(r);
    }
    Ok(runs)
}

/// `capstan bench`'s arguments for one run.
fn bench_args(
    b: &Backend,
    exp: &WanExperiment,
    opts: &WanOptions,
    level: &str,
    json: &Path,
) -> Vec<String> {
    let path = b.only_path.as_deref().unwrap_or("/");
    let scheme = if b.tls { "https" } else { "http" };
    let mut a: Vec<String> = vec![
        "bench".into(),
        format!("{scheme}://127.0.0.1:{}{path}", b.port),
        "--rate".into(),
        exp.rate.to_string(),
        "--duration".into(),
        format!("{}s", exp.warmup_s(opts.mode) + exp.duration_s(opts.mode)),
        "--timeout".into(),
        format!("{}s", exp.timeout_s),
        // The paper's S-Clients retried a connect after 500 ms; on a 200 ms path whose server
        // queues SYNs, a retry that early only adds load.
        "--connect-timeout".into(),
        "3s".into(),
        "--seed".into(),
        exp.workload.seed.to_string(),
        // Levels past a server's capacity fail many requests by design: their errors are the
        // finding, not a failed run (and a level is never cut short).
        "--max-error-rate".into(),
        "1".into(),
        "--quiet".into(),
        "--json".into(),
        json.display().to_string(),
    ];
    a.extend(b.client_args.iter().cloned());
    if b.only_path.is_none() {
        a.extend(["--tree".into(), exp.workload.tree.clone()]);
        a.extend(["--tree-seed".into(), exp.workload.seed.to_string()]);
        if let Some(n) = exp.workload.files {
            a.extend(["--files".into(), n.to_string()]);
        }
    }
    match exp.vary {
        Vary::Mix => {
            if !exp.path.is_empty() {
                a.extend(["--wan".into(), exp.path.clone()]);
            }
            for g in &exp.groups {
                a.extend(["--wan-group".into(), g.clone()]);
            }
        }
        Vary::Rtt | Vary::Loss => a.extend(["--wan".into(), exp.level_spec(level)]),
    }
    a
}

/// Runs the load of one level and samples the server until the generator exits.
async fn run_level(
    b: &Backend,
    exp: &WanExperiment,
    opts: &WanOptions,
    level: &str,
) -> Result<LevelResult, LabError> {
    let stem = format!("{}-{}", b.port, level.replace(['%', '/'], "pct"));
    let json = opts.work_dir.join(format!("bench-{stem}.json"));
    let log = opts.work_dir.join(format!("bench-{stem}.log"));
    let args = bench_args(b, exp, opts, level, &json);
    let out = std::fs::File::create(&log).map_err(|e| LabError::Run(e.to_string()))?;
    let err = out.try_clone().map_err(|e| LabError::Run(e.to_string()))?;
    let mut child = tokio::process::Command::new(&opts.exe)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| LabError::Run(format!("cannot start capstan bench: {e}")))?;
    let (cpu0, cache0) = (b.cpu_seconds(), b.cache_counts().await);
    let mut stamped: Vec<(u64, Sample)> = Vec::new();
    let status = loop {
        tokio::select! {
            s = child.wait() => break s,
            _ = tokio::time::sleep(SAMPLE_EVERY) => stamped.push((now_unix_ms(), b.sample().await)),
        }
    }
    .map_err(|e| LabError::Run(e.to_string()))?;
    if !status.success() {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(LabError::Run(format!(
            "capstan bench at {level} failed ({status}): {last} (log: {})",
            log.display()
        )));
    }
    let result: RunResult = serde_json::from_str(
        &std::fs::read_to_string(&json).map_err(|e| LabError::Run(e.to_string()))?,
    )
    .map_err(|e| LabError::Run(format!("{}: {e}", json.display())))?;
    let mut r = level_result(&result, exp.warmup_s(opts.mode), level, &args, stamped);
    let served = result.completed.max(1) as f64;
    r.cpu_ms_per_1k = Some((b.cpu_seconds() - cpu0) * 1e6 / served);
    if let (Some((h0, m0)), Some((h1, m1))) = (cache0, b.cache_counts().await) {
        let (h, m) = (h1.saturating_sub(h0), m1.saturating_sub(m0));
        r.hit_ratio = (h + m > 0).then(|| h as f64 / (h + m) as f64);
    }
    Ok(r)
}

/// The measured seconds of a run: after the warm-up (or the first second, the ramp of a run
/// that starts empty) up to the end of the schedule; only the drain is left after it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Window {
    from_s: f64,
    to_s: f64,
}

impl Window {
    fn new(result: &RunResult, warmup_s: f64) -> Window {
        Window {
            from_s: warmup_s.max(1.0).min(result.duration_s),
            to_s: result.duration_s,
        }
    }

    /// The timeline's whole seconds inside the window.
    fn seconds<'a>(
        &self,
        result: &'a RunResult,
    ) -> impl Iterator<Item = &'a capstan_bench::TimelineSecond> {
        let (from, to) = (self.from_s.ceil() as u64, self.to_s.floor() as u64);
        result
            .timeline
            .iter()
            .filter(move |s| s.t >= from && s.t < to)
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[v.len() / 2])
}

/// The run's figures from the generator's result and the samples taken while its load ran.
fn level_result(
    result: &RunResult,
    warmup_s: f64,
    level: &str,
    args: &[String],
    stamped: Vec<(u64, Sample)>,
) -> LevelResult {
    let start = result.started_unix_ms;
    let samples: Vec<Sample> = stamped
        .into_iter()
        .filter(|(t, _)| *t >= start)
        .map(|(t, s)| Sample {
            t_s: (t - start) as f64 / 1e3,
            ..s
        })
        .collect();
    let w = Window::new(result, warmup_s);
    let steady: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.t_s >= w.from_s && s.t_s <= w.to_s)
        .collect();
    let mean = |f: &dyn Fn(&Sample) -> f64| {
        (!steady.is_empty()).then(|| steady.iter().map(|s| f(s)).sum::<f64>() / steady.len() as f64)
    };
    let processes: Vec<u32> = steady.iter().filter_map(|s| s.processes).collect();
    let seconds: Vec<_> = w.seconds(result).collect();
    LevelResult {
        level: level.to_string(),
        spec: wan_flags(args),
        offered_rps: result.offered_rps,
        throughput_rps: steady_throughput(result, w),
        completed_rps: result.completed_rps,
        goodput_mbps: goodput_mbps(&seconds),
        protocol: result.protocol.clone(),
        p999_ms: result.latency_ms.corrected.p999,
        max_ms: result.latency_ms.corrected.max,
        errors: seconds.iter().map(|s| s.errors).sum(),
        unfinished: result.unfinished,
        p50_ms: median(seconds.iter().map(|s| s.p50_ms).collect()).unwrap_or(0.0),
        p99_ms: median(seconds.iter().map(|s| s.p99_ms).collect()).unwrap_or(0.0),
        established_mean: mean(&|s| s.established as f64).unwrap_or(0.0),
        established_max: steady.iter().map(|s| s.established).max().unwrap_or(0),
        finishing_mean: mean(&|s| s.finishing as f64).unwrap_or(0.0),
        send_queue_max_bytes: steady.iter().map(|s| s.send_queue_bytes).max().unwrap_or(0),
        accept_queue_max: steady.iter().map(|s| s.accept_queue).max().unwrap_or(0),
        processes_mean: (!processes.is_empty())
            .then(|| processes.iter().map(|&p| p as f64).sum::<f64>() / processes.len() as f64),
        processes_max: processes.iter().copied().max(),
        cache_min_bytes: steady.iter().filter_map(|s| s.cache_bytes).min(),
        hit_ratio: None,
        cpu_ms_per_1k: None,
        paths: paths(result),
        warnings: result.generator.warnings.clone(),
        samples,
    }
}

/// Mean completions per second over the window's whole seconds; the generator's own figure
/// when the run is too short for that.
fn steady_throughput(result: &RunResult, w: Window) -> f64 {
    let seconds: Vec<u64> = w.seconds(result).map(|s| s.completed).collect();
    if seconds.is_empty() {
        return result.completed_rps;
    }
    seconds.iter().sum::<u64>() as f64 / seconds.len() as f64
}

/// Body bytes per second of the requests due in the measured seconds, whenever their
/// responses ended (within the run's drain), in Mbit/s. Counted by completion instead, one
/// large response moves whole Mbit/s across the window's edge (the CAP tree's sizes are
/// heavy-tailed: in `wan-loss-h3 --quick` two objects of 678 and 582 KB are 38 % of the bytes),
/// so the faster protocol could score less by finishing the first before the window opened.
fn goodput_mbps(seconds: &[&capstan_bench::TimelineSecond]) -> f64 {
    if seconds.is_empty() {
        return 0.0;
    }
    let bytes: u64 = seconds.iter().map(|s| s.bytes_by_start).sum();
    bytes as f64 * 8.0 / 1e6 / seconds.len() as f64
}

/// The `--wan…` flags of a run, as one line.
fn wan_flags(args: &[String]) -> String {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a.starts_with("--wan") {
            out.push(format!(
                "{a} {}",
                it.next().map(String::as_str).unwrap_or("")
            ));
        }
    }
    out.join(" ")
}

/// Per client group: the generator's figures and the router's drops on that path.
fn paths(result: &RunResult) -> Vec<PathFigures> {
    let Some(wan) = &result.wan else {
        return Vec::new();
    };
    wan.paths
        .iter()
        .map(|p| PathFigures {
            name: p.name.clone(),
            offered_rps: p.offered_rps,
            completed_rps: p.completed_rps,
            errors: p.errors_total,
            p50_ms: p.latency_ms.corrected.p50,
            p99_ms: p.latency_ms.corrected.p99,
            router_drops: router_drops(&p.router),
        })
        .collect()
}

/// Every drop the router counted on a path, both directions, whatever the cause.
fn router_drops(router: &serde_json::Value) -> u64 {
    ["up", "down"]
        .iter()
        .filter_map(|dir| router.get(dir)?.get("drops")?.as_object())
        .flat_map(|drops| drops.values())
        .filter_map(|v| v.as_u64())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steady_throughput_leaves_out_the_first_and_last_second() {
        let mut r = RunResult {
            duration_s: 5.0,
            completed_rps: 9.0,
            ..Default::default()
        };
        let w = Window::new(&r, 0.0);
        assert_eq!(
            steady_throughput(&r, w),
            9.0,
            "no timeline: the generator's figure"
        );
        for (t, completed) in [(0, 10), (1, 100), (2, 100), (3, 90), (4, 110), (5, 40)] {
            r.timeline.push(capstan_bench::TimelineSecond {
                t,
                completed,
                ..Default::default()
            });
        }
        assert_eq!(steady_throughput(&r, Window::new(&r, 0.0)), 100.0);
        // Goodput counts the bytes of the requests due in the window, whenever they arrived.
        r.timeline[1].bytes = 1_000_000;
        r.timeline[2].bytes_by_start = 1_000_000;
        let w = Window::new(&r, 2.0);
        let seconds: Vec<_> = w.seconds(&r).collect();
        assert_eq!(goodput_mbps(&seconds), 8.0 / 3.0);
        // After a 3 s warm-up only seconds 3 and 4 are measured.
        assert_eq!(steady_throughput(&r, Window::new(&r, 3.0)), 100.0);
        assert_eq!(Window::new(&r, 3.0).seconds(&r).count(), 2);
        assert_eq!(
            Window::new(&r, 9.0).seconds(&r).count(),
            0,
            "a warm-up past the end"
        );
    }

    #[test]
    fn drops_are_summed_over_causes_and_directions() {
        let v = serde_json::json!({
            "up": {"drops": {"loss": 3, "queue": 1}},
            "down": {"drops": {"loss": 5, "queue": 0}},
        });
        assert_eq!(router_drops(&v), 9);
        assert_eq!(router_drops(&serde_json::json!({})), 0);
    }

    #[test]
    fn the_wan_flags_of_a_run_are_kept_for_the_report() {
        let args: Vec<String> = ["bench", "u", "--wan", "rtt=1ms", "--wan-group", "name=a"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(wan_flags(&args), "--wan rtt=1ms --wan-group name=a");
    }
}
