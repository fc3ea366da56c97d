//! `capstan lab validate`: the live stack — the load generator's open Poisson arrivals, the real
//! switch, an emulated `capstan origin` — against queueing theory, on the cases the simulator
//! passes in `capstan_sim::queueing` (M/M/1, M/G/1 processor sharing, Erlang C).
//!
//! Each case is one emulated node behind the switch, fed `/cgi-bin/demand.cgi` requests whose
//! CPU demand the node draws itself (constant or exponential, mean [`MEAN_MS`]) and spends on its
//! processor-shared CPU or first come first served on its cores. Per utilisation the mean response
//! time measured by the load generator (from each request's intended start) is compared with the
//! formula. What the formula does not know — the HTTP path through generator, switch and node and
//! back, the processes' and timers' wake-ups — is measured first at near-zero load (utilisation
//! 0.1, constant demands, the little queueing there is taken off by theory) and subtracted, and
//! both the raw and the corrected error are reported.
//!
//! A finite run's mean scatters around the steady-state value, widely near saturation (at ρ 0.9 an
//! M/M/1 queue forgets its past only over hundreds of service times). So every point also gets the
//! spread a run of its length has in theory: the 95th percentile of the relative error of the
//! same queue, simulated for the same number of jobs from an empty start, over many seeds. A
//! point within 5 % passes; one outside 5 % but inside that spread is "within noise" (the run was
//! too short to test 5 %); anything else is a miss. When the machine rather than the stack is the
//! limit — the overhead moved between a probe before the points and one after, or the node's
//! timers woke late on average — the case's points are "machine-limited" instead of judged.
//!
//! Why the M/M/c case is one node with `c` cores and not `c` nodes: the switch dispatches each
//! request when it arrives and every node queues its own, so `c` nodes behind it are `c` queues
//! (the policy's), not Erlang C's one queue in front of `c` servers; the node's cores with
//! `queue=fcfs` are exactly that one queue.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use capstan_bench::{BenchConfig, Engine, Target};
use capstan_sim::queueing::{erlang_c_response, mean_response, mmc_mean_response, Discipline};
use capstan_workload::{ArrivalKind, Dist};
use serde::{Deserialize, Serialize};

use crate::model::error::LabError;
use crate::model::results::{round, Versions};
use crate::procs::cluster::{self, Cluster, NodeArgs, NodeSpec};
use crate::run::plan::versions;
use crate::run::plan::Observer;
use capstan_report::{escape, Chart, Page, Series};

/// Mean CPU demand per server, ms: short enough for hundreds of jobs in a quick window, long
/// enough that the HTTP path (one to three milliseconds in a debug build on a busy machine)
/// stays a modest part. The two-server case has twice the demand, so every case offers the
/// same request rate at a given utilisation (at most 180 requests/s, which a debug build of
/// generator, switch and node carries on two shared cores).
pub const MEAN_MS: f64 = 5.0;
/// The goal: measured mean within this fraction of the formula.
pub const GOAL: f64 = 0.05;
pub const SCHEMA: &str = "capstan-lab-validate/1";

/// A textbook queue and how the live node realises it.
#[derive(Debug, Clone, Copy)]
pub struct Case {
    pub name: &'static str,
    pub title: &'static str,
    /// Servers (the node's cores).
    pub servers: u32,
    /// `demand.cgi`'s `queue=`: `fcfs` or `ps`.
    pub queue: &'static str,
    /// `demand.cgi`'s `law=`: `exp` or `const`.
    pub law: &'static str,
    pub formula: &'static str,
}

impl Case {
    /// Mean demand of one request, ms.
    pub fn mean_ms(&self) -> f64 {
        MEAN_MS * self.servers as f64
    }
}

pub const CASES: [Case; 3] = [
    Case {
        name: "mm1",
        title: "M/M/1: exponential demands, one core, first come first served",
        servers: 1,
        queue: "fcfs",
        law: "exp",
        formula: "T = S / (1 − ρ)",
    },
    Case {
        name: "mg1-ps",
        title: "M/G/1-PS: constant demands on one processor-shared core (M/D/1-PS)",
        servers: 1,
        queue: "ps",
        law: "const",
        formula: "T = S / (1 − ρ) for any demand law (FCFS would give S·(1 + ρ / (2(1 − ρ))))",
    },
    Case {
        name: "erlang-c",
        title: "M/M/2 (Erlang C): exponential demands, two cores fed by one FCFS queue",
        servers: 2,
        queue: "fcfs",
        law: "exp",
        formula: "T = C(2, a) / (2μ − λ) + 1/μ, a = λ/μ",
    },
];

impl Case {
    /// Mean response time in theory, in units of the mean demand.
    pub fn theory(&self, rho: f64) -> f64 {
        match self.name {
            "erlang-c" => erlang_c_response(self.servers as usize, rho * self.servers as f64, 1.0),
            _ => 1.0 / (1.0 - rho),
        }
    }

    /// One simulated run of `jobs` jobs from an empty start (the first tenth discarded), mean
    /// response in units of the mean demand.
    fn simulate(&self, rho: f64, jobs: u64, seed: u64) -> f64 {
        let lambda = rho * self.servers as f64;
        match (self.name, self.law) {
            ("erlang-c", _) => mmc_mean_response(self.servers as usize, lambda, 1.0, jobs, seed),
            (_, law) => {
                let service = if law == "exp" {
                    Dist::Exp { mean: 1.0 }
                } else {
                    Dist::Const { value: 1.0 }
                };
                let d = if self.queue == "ps" {
                    Discipline::Ps
                } else {
                    Discipline::Fcfs
                };
                mean_response(1, d, lambda, service, None, jobs, seed)
            }
        }
    }

    /// The 95th percentile of |relative error| of a run of `jobs` measured jobs, in theory.
    pub fn noise(&self, rho: f64, jobs: u64, seed: u64) -> f64 {
        let want = self.theory(rho);
        let total = (jobs.max(10) as f64 / 0.9).ceil() as u64;
        let mut errs: Vec<f64> = (0..REPLICAS)
            .map(|k| (self.simulate(rho, total, seed.wrapping_add(k)) / want - 1.0).abs())
            .collect();
        errs.sort_by(f64::total_cmp);
        errs[(errs.len() * 95 / 100).min(errs.len() - 1)]
    }

    /// Mean response with constant demands (the probe's), in units of the demand: M/D/1 for one
    /// FCFS server, S/(1 − ρ) under PS; with two FCFS servers at the probe's load a request
    /// almost never waits (under 1 % of a demand at ρ 0.1), so the demand itself.
    fn constant_theory(&self, rho: f64) -> f64 {
        match (self.queue, self.servers) {
            ("ps", _) => 1.0 / (1.0 - rho),
            (_, 1) => 1.0 + rho / (2.0 * (1.0 - rho)),
            _ => 1.0,
        }
    }

    fn path(&self, law: &str) -> String {
        format!(
            "/cgi-bin/demand.cgi?ms={}&law={law}&queue={}",
            self.mean_ms(),
            self.queue
        )
    }
}

/// Utilisation of the overhead probe.
pub const PROBE_RHO: f64 = 0.1;

/// Simulated runs behind each point's noise band.
const REPLICAS: u64 = 60;

/// What `capstan lab validate` was told.
#[derive(Debug, Clone)]
pub struct ValidateOptions {
    pub quick: bool,
    pub seed: u64,
    pub exe: PathBuf,
    pub work_dir: PathBuf,
    pub command: String,
}

/// The schedule: utilisations, and how long each is measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub rhos: Vec<f64>,
    /// Requests due in this first part are sent but not measured: the queue fills first.
    pub settle: Duration,
    pub window: Duration,
    /// A first, unmeasured run at utilisation 0.5: connection pools fill and the node's timers
    /// learn their wake-up lead (see `capstan origin`'s emulation) before anything is measured.
    pub warm: Duration,
    /// The near-zero-load run (utilisation `PROBE_RHO`, constant demands) that measures the
    /// fixed overhead.
    pub probe: Duration,
}

impl Schedule {
    pub fn new(quick: bool) -> Schedule {
        if quick {
            Schedule {
                rhos: vec![0.3, 0.6],
                settle: Duration::from_secs(1),
                window: Duration::from_secs(5),
                warm: Duration::from_secs(1),
                probe: Duration::from_secs(2),
            }
        } else {
            Schedule {
                rhos: vec![0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
                settle: Duration::from_secs(3),
                window: Duration::from_secs(20),
                warm: Duration::from_secs(3),
                probe: Duration::from_secs(8),
            }
        }
    }

    pub fn estimate_s(&self) -> f64 {
        let per_point = (self.settle + self.window).as_secs_f64() + 0.5;
        CASES.len() as f64
            * (1.5
                + (self.warm + self.probe * 2).as_secs_f64()
                + per_point * self.rhos.len() as f64)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ValidationResults {
    pub schema: String,
    pub command: String,
    pub versions: Versions,
    pub quick: bool,
    pub seed: u64,
    /// Mean demand per server, ms (a case with `c` servers has `c` times this per request).
    pub mean_demand_ms: f64,
    pub settle_s: f64,
    pub window_s: f64,
    /// The goal, as a fraction (0.05).
    pub goal: f64,
    pub wall_s: f64,
    /// The machine's 1-minute load average before and after the run (other work competes with
    /// generator, switch and node for the cores).
    pub load_average: [f64; 2],
    pub cases: Vec<CaseResult>,
}

fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    pub name: String,
    pub title: String,
    pub formula: String,
    pub servers: u32,
    pub queue: String,
    pub law: String,
    /// Mean response at near-zero load minus what theory gives there: what the HTTP path,
    /// process wake-ups and timers add to every request. The mean of a probe before the points
    /// and one after.
    pub overhead_ms: f64,
    pub overhead_before_ms: f64,
    pub overhead_after_ms: f64,
    pub probe_requests: u64,
    /// The node's timers: mean lateness of a wake-up past its modelled deadline, µs.
    pub timer_mean_late_us: f64,
    /// Set when the machine, not the stack, limited the case (see [`machine_limit`]); its
    /// points then have the verdict `machine-limited`.
    pub machine_limited: Option<String>,
    pub points: Vec<ValidationPoint>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ValidationPoint {
    pub rho: f64,
    pub offered_rps: f64,
    /// Responses measured (due after the settling part).
    pub measured: u64,
    pub errors: u64,
    /// The node's CPU utilisation over the run, from its load report (per core).
    pub node_util: f64,
    pub formula_ms: f64,
    /// Mean response from each request's intended start, as measured.
    pub raw_ms: f64,
    /// `raw_ms` minus the case's overhead.
    pub corrected_ms: f64,
    pub raw_error_pct: f64,
    pub error_pct: f64,
    /// 95th percentile of |relative error| of a run this long, in theory, %.
    pub noise_pct: f64,
    /// `within 5 %`, `within noise`, `miss`, or `machine-limited` (see the case).
    pub verdict: String,
}

impl ValidationPoint {
    /// Within `tolerance` (a fraction), or within the run's own noise when that is wider.
    pub fn within(&self, tolerance: f64) -> bool {
        self.error_pct.abs() <= 100.0 * tolerance || self.error_pct.abs() <= self.noise_pct
    }
}

pub fn verdict(error_pct: f64, noise_pct: f64) -> &'static str {
    if error_pct.abs() <= 100.0 * GOAL {
        "within 5 %"
    } else if error_pct.abs() <= noise_pct {
        "within noise"
    } else {
        "miss"
    }
}

/// Runs every case and returns the results (write them with [`crate::write_validation`]).
pub async fn run(
    o: &ValidateOptions,
    observer: Option<Observer>,
) -> Result<ValidationResults, LabError> {
    let schedule = Schedule::new(o.quick);
    let t0 = Instant::now();
    let load_before = load_average();
    let say = |m: String| {
        if let Some(f) = &observer {
            f(crate::run::plan::Event::Message(m))
        }
    };
    let mut cases = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        say(format!("{}: {}", case.name, case.title));
        let r = run_case(case, &schedule, o, o.seed.wrapping_add(i as u64 * 101)).await?;
        for p in &r.points {
            say(format!(
                "  ρ {:.1}: {:.2} ms measured ({:.2} raw), {:.2} ms in theory: {:+.1} % (noise ±{:.1} %) — {}",
                p.rho, p.corrected_ms, p.raw_ms, p.formula_ms, p.error_pct, p.noise_pct, p.verdict
            ));
        }
        cases.push(r);
    }
    Ok(ValidationResults {
        schema: SCHEMA.into(),
        command: o.command.clone(),
        versions: versions(),
        quick: o.quick,
        seed: o.seed,
        mean_demand_ms: MEAN_MS,
        settle_s: schedule.settle.as_secs_f64(),
        window_s: schedule.window.as_secs_f64(),
        goal: GOAL,
        wall_s: round(t0.elapsed().as_secs_f64(), 1),
        load_average: [load_before, load_average()],
        cases,
    })
}

async fn start(case: &Case, o: &ValidateOptions) -> Result<Cluster, LabError> {
    let spec = NodeSpec {
        name: format!("{}-node", case.name),
        speed: 1.0,
        cores: case.servers,
        partition: None,
    };
    let args = NodeArgs {
        tree: "webstone".into(),
        files: None,
        seed: o.seed,
        cpu_light_ms: None,
        cpu_med_ms: None,
        disk_load_ms: None,
        cache_fraction: None,
        threads: 1,
        load_interval_ms: 1000,
        remote_penalty: None,
        config: None,
        register: None,
    };
    let config: toml::Table = toml::from_str(
        "[policy]\nname = \"round-robin\"\n[admission]\nlimit = \"off\"\n\
         [outlier]\nconsecutive_failures = 0\n",
    )
    .map_err(|e| LabError::Run(e.to_string()))?;
    cluster::start(&o.exe, &[spec], &args, config, 1, None, &o.work_dir).await
}

fn bench(c: &Cluster, path: &str, engine: Engine, seed: u64) -> Result<BenchConfig, LabError> {
    let target = Target::parse(&format!("http://{}{path}", c.listen))
        .map_err(|e| LabError::Run(e.to_string()))?;
    let mut cfg = BenchConfig::open(target, 1.0);
    cfg.engine = engine;
    cfg.arrival = ArrivalKind::Poisson;
    cfg.seed = seed;
    // Persistent connections: a connect and an accept per request would add CPU in the
    // generator and the switch, and with it overhead that grows with the load. Enough
    // connections that a request never waits for one (256 in M/M/1 at ρ 0.9: p ≈ 1e-12).
    cfg.keepalive = true;
    cfg.connections = 256;
    cfg.drain = Duration::from_secs(5);
    cfg.timeout = Duration::from_secs(10);
    Ok(cfg)
}

/// The near-zero-load run: open Poisson arrivals at utilisation [`PROBE_RHO`] with constant
/// demands, so the processes wake up per request as they do under the measured loads (a
/// closed-loop client keeps them busy and would understate it). Returns what the stack adds to
/// a request: the mean response less the theory's (the little queueing at that load), and how
/// many requests it saw.
async fn probe(
    case: &Case,
    c: &Cluster,
    length: Duration,
    seed: u64,
) -> Result<(f64, u64), LabError> {
    let mut cfg = bench(
        c,
        &case.path("const"),
        Engine::Open {
            rate: PROBE_RHO * case.servers as f64 / (case.mean_ms() / 1e3),
        },
        seed,
    )?;
    cfg.duration = length;
    let p = capstan_bench::run(cfg, None)
        .await
        .map_err(|e| LabError::Run(e.to_string()))?;
    let l = &p.latency_ms.corrected;
    if l.count == 0 || p.errors_total > 0 {
        return Err(LabError::Run(format!(
            "{}: the overhead probe got {} responses and {} errors",
            case.name, l.count, p.errors_total
        )));
    }
    let theory_ms = case.constant_theory(PROBE_RHO) * case.mean_ms();
    Ok((l.mean - theory_ms, l.count))
}

/// One utilisation, measured raw (corrections come once the overhead is known).
async fn measure(
    case: &Case,
    c: &mut Cluster,
    s: &Schedule,
    rho: f64,
    seed: u64,
) -> Result<(ValidationPoint, f64), LabError> {
    let rate = rho * case.servers as f64 / (case.mean_ms() / 1e3);
    let mut cfg = bench(c, &case.path(case.law), Engine::Open { rate }, seed)?;
    cfg.duration = s.settle + s.window;
    cfg.settle = s.settle;
    let node = c.nodes[0].1;
    let before = cluster::load_report(node).await.map_err(LabError::Run)?;
    let r = capstan_bench::run(cfg, None)
        .await
        .map_err(|e| LabError::Run(e.to_string()))?;
    c.check_alive()?;
    let after = cluster::load_report(node).await.map_err(LabError::Run)?;
    let (a, b) = (&before.since_start, &after.since_start);
    let util = (b.cpu_busy_s - a.cpu_busy_s) / (b.length_s - a.length_s).max(1e-9);
    let l = &r.latency_ms.corrected;
    let formula_ms = case.theory(rho) * case.mean_ms();
    let noise = case.noise(rho, l.count, seed.wrapping_mul(31));
    let point = ValidationPoint {
        rho,
        offered_rps: round(rate, 2),
        measured: l.count,
        errors: r.errors_total,
        node_util: round(util, 4),
        formula_ms: round(formula_ms, 3),
        raw_ms: round(l.mean, 3),
        raw_error_pct: round(100.0 * (l.mean / formula_ms - 1.0), 2),
        noise_pct: round(100.0 * noise, 1),
        ..ValidationPoint::default()
    };
    Ok((point, l.mean))
}

async fn run_case(
    case: &Case,
    s: &Schedule,
    o: &ValidateOptions,
    seed: u64,
) -> Result<CaseResult, LabError> {
    let mut c = start(case, o).await?;
    let mut warm = bench(
        &c,
        &case.path(case.law),
        Engine::Open {
            rate: 0.5 * case.servers as f64 / (case.mean_ms() / 1e3),
        },
        seed ^ 0x5eed,
    )?;
    warm.duration = s.warm;
    capstan_bench::run(warm, None)
        .await
        .map_err(|e| LabError::Run(e.to_string()))?;
    let (before_ms, n1) = probe(case, &c, s.probe, seed).await?;
    let mut points = Vec::new();
    for (k, &rho) in s.rhos.iter().enumerate() {
        points.push(measure(case, &mut c, s, rho, seed.wrapping_add(1 + k as u64)).await?);
    }
    // Once more after the points: if the machine's other work changed the overhead meanwhile,
    // subtracting it would not be subtracting a constant.
    let (after_ms, n2) = probe(case, &c, s.probe, seed.wrapping_add(99)).await?;
    let overhead_ms = (before_ms + after_ms) / 2.0;
    let timer = cluster::load_report(c.nodes[0].1)
        .await
        .map_err(LabError::Run)?
        .timer
        .unwrap_or_default();
    let shortfall = points
        .iter()
        .map(|(p, _)| (p.rho, p.node_util))
        .find(|(rho, util)| (util - rho).abs() > 0.25 * rho);
    let limited = machine_limit(after_ms - before_ms, timer.mean_late_us, shortfall);
    let points = points
        .into_iter()
        .map(|(mut p, raw_ms)| {
            let corrected_ms = raw_ms - overhead_ms;
            p.corrected_ms = round(corrected_ms, 3);
            p.error_pct = round(100.0 * (corrected_ms / p.formula_ms - 1.0), 2);
            // Judged on the printed numbers, so that the report agrees with itself.
            p.verdict = match &limited {
                Some(_) => "machine-limited".into(),
                None => verdict(p.error_pct, p.noise_pct).into(),
            };
            p
        })
        .collect();
    Ok(CaseResult {
        name: case.name.into(),
        title: case.title.into(),
        formula: case.formula.into(),
        servers: case.servers,
        queue: case.queue.into(),
        law: case.law.into(),
        overhead_ms: round(overhead_ms, 3),
        overhead_before_ms: round(before_ms, 3),
        overhead_after_ms: round(after_ms, 3),
        probe_requests: n1 + n2,
        timer_mean_late_us: round(timer.mean_late_us, 1),
        machine_limited: limited,
        points,
    })
}

/// Why the comparison says more about this machine than about the stack, if it does: the node
/// was not as busy as the offered load says (`(ρ, measured utilisation)`: the load did not get
/// through), the overhead moved by more than a fifth of a demand between the probes (other work
/// on the machine came or went), or the node's timers woke on average more than a tenth of a
/// demand late (its threads waited for a core).
pub fn machine_limit(drift_ms: f64, late_us: f64, shortfall: Option<(f64, f64)>) -> Option<String> {
    if let Some((rho, util)) = shortfall {
        Some(format!(
            "at ρ {rho:.1} the node was {:.0} % busy: the offered load did not get through",
            100.0 * util
        ))
    } else if drift_ms.abs() > 0.2 * MEAN_MS {
        Some(format!(
            "the fixed overhead moved by {drift_ms:+.2} ms during the case (> {:.1} ms): other work on the machine",
            0.2 * MEAN_MS
        ))
    } else if late_us > 100.0 * MEAN_MS {
        Some(format!(
            "the node's timers woke {late_us:.0} µs late on average (> {:.0} µs): its threads waited for a core",
            100.0 * MEAN_MS
        ))
    } else {
        None
    }
}

/// One line per point, for the terminal.
pub fn summary_table(r: &ValidationResults) -> String {
    let mut out = format!(
        "{:<9} {:>4} {:>8} {:>9} {:>9} {:>9} {:>8} {:>8} {:>7}  verdict\n",
        "case", "ρ", "req/s", "theory", "measured", "raw", "error", "noise", "util"
    );
    for c in &r.cases {
        for p in &c.points {
            out.push_str(&format!(
                "{:<9} {:>4.1} {:>8.1} {:>7.2}ms {:>7.2}ms {:>7.2}ms {:>+7.1}% {:>7.1}% {:>6.0}%  {}\n",
                c.name,
                p.rho,
                p.offered_rps,
                p.formula_ms,
                p.corrected_ms,
                p.raw_ms,
                p.error_pct,
                p.noise_pct,
                100.0 * p.node_util,
                p.verdict
            ));
        }
    }
    out
}

/// Writes `validation.json` and `index.html` (the table and a plot of the errors) into `dir`.
pub fn write(r: &ValidationResults, dir: &std::path::Path) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::Report(format!("cannot create {}: {e}", dir.display())))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report(e.to_string()))?;
    std::fs::write(dir.join("validation.json"), json + "\n")
        .map_err(|e| LabError::Report(format!("cannot write validation.json: {e}")))?;
    let path = dir.join("index.html");
    std::fs::write(&path, html(r)?)
        .map_err(|e| LabError::Report(format!("cannot write index.html: {e}")))?;
    Ok(path)
}

fn html(r: &ValidationResults) -> Result<String, LabError> {
    use std::fmt::Write as _;
    let mut h = Page::new(
        "capstan lab validate",
        "The live stack against queueing theory",
    );
    let _ = write!(
        h,
        "<p>Open Poisson arrivals from the load generator, through the switch, to one emulated node \
         whose CPU demands (mean {} ms per core) are drawn by the node. Each point: {} s settling (sent, not \
         measured), then {} s measured. The fixed overhead (HTTP through generator, switch and node, \
         process and timer wake-ups) is measured at near-zero load (utilisation {PROBE_RHO}, constant \
         demands, the little queueing there taken off by theory) and subtracted; the raw error is shown too. <b>Noise</b>: the 95th percentile of the relative \
         error of a run with this many jobs, from {REPLICAS} simulated runs of the same queue — \
         a point outside 5 % but inside it is <i>within noise</i> (too short a run to test 5 %).</p>\
         <p><b>Command:</b> <code>{}</code><br><b>Versions:</b> capstan {} ({} build), {}, {}, {} CPUs; \
         seed {}{}, wall time {:.0} s, load average {:.1} before, {:.1} after</p>",
        r.mean_demand_ms,
        r.settle_s,
        r.window_s,
        escape(&r.command),
        escape(&r.versions.capstan),
        escape(&r.versions.build),
        escape(&r.versions.rustc),
        escape(&r.versions.os),
        r.versions.cpus,
        r.seed,
        if r.quick { ", --quick" } else { "" },
        r.wall_s,
        r.load_average[0],
        r.load_average[1]
    );
    h.push_str(&errors_svg(r)?);
    for c in &r.cases {
        let _ = write!(
            h,
            "<h2>{}</h2><p>{} — <code>{}</code>. Overhead {:.3} ms (probes before and after the \
             points: {:.3} and {:.3} ms, {} requests); node timers {:.0} µs late on average.{}</p><table><tr><th>ρ</th><th>offered req/s</th>\
             <th>node util %</th><th>measured</th><th>theory ms</th><th>raw ms</th><th>corrected ms</th>\
             <th>raw error</th><th>error</th><th>noise ±</th><th class=\"l\">verdict</th></tr>",
            escape(&c.name),
            escape(&c.title),
            escape(&c.formula),
            c.overhead_ms,
            c.overhead_before_ms,
            c.overhead_after_ms,
            c.probe_requests,
            c.timer_mean_late_us,
            c.machine_limited
                .as_ref()
                .map(|m| format!(" <b class=\"warn\">Machine-limited: {}.</b>", escape(m)))
                .unwrap_or_default()
        );
        for p in &c.points {
            let class = if p.verdict == "miss" || p.verdict == "machine-limited" {
                "warn"
            } else {
                "ok"
            };
            let _ = write!(
                h,
                "<tr><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{:.2}</td><td>{:.2}</td>\
                 <td>{:.2}</td><td>{:+.1} %</td><td>{:+.1} %</td><td>{:.1} %</td><td class=\"l {class}\">{}</td></tr>",
                p.rho,
                p.offered_rps,
                100.0 * p.node_util,
                p.measured,
                p.formula_ms,
                p.raw_ms,
                p.corrected_ms,
                p.raw_error_pct,
                p.error_pct,
                p.noise_pct,
                escape(&p.verdict)
            );
        }
        h.push_str("</table>");
    }
    h.push_str(
        "<p><small>Raw data: validation.json. The M/M/2 case is one node with two cores and one \
         queue: the switch places each request on arrival, so two nodes behind it would be two \
         queues, not Erlang C's one.</small></p>",
    );
    Ok(h.finish())
}

/// Corrected relative error against ρ, one line per case, the noise band as error bars and the
/// ±5 % goal dashed.
fn errors_svg(r: &ValidationResults) -> Result<String, LabError> {
    let span = r
        .cases
        .iter()
        .flat_map(|c| c.points.iter())
        .map(|p| p.error_pct.abs() + p.noise_pct)
        .fold(10.0, f64::max)
        .min(100.0)
        * 1.1;
    let mut chart = Chart::new(
        "measured mean response vs theory (after the fixed overhead)",
        "utilisation ρ",
        "error, % (bars: noise of a run this long)",
    )
    .x_range(0.2, 1.0)
    .y_range(-span, span)
    .hline(-5.0)
    .hline(5.0);
    for (i, c) in r.cases.iter().enumerate() {
        // Cases side by side at each ρ, so their bars do not hide each other.
        let dx = (i as f64 - 1.0) * 0.012;
        let (pts, noise): (Vec<(f64, f64)>, Vec<f64>) = c
            .points
            .iter()
            .map(|p| {
                let e = p.error_pct.clamp(-span, span);
                // A bar stays inside the plot (only a point clamped at ±100 % is cut).
                ((p.rho + dx, e), p.noise_pct.min(span - e.abs()).max(0.0))
            })
            .unzip();
        chart.add(Series::new(c.name.as_str(), pts).with_ci(noise));
    }
    chart.svg().map_err(LabError::Report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn theory_and_noise() {
        let mm1 = &CASES[0];
        assert!((mm1.theory(0.5) - 2.0).abs() < 1e-12);
        // Erlang C for two servers: T = 1 / (μ (1 − ρ²)).
        let ec = &CASES[2];
        assert!((ec.theory(0.5) - 1.0 / (1.0 - 0.25)).abs() < 1e-9);
        // A long run scatters less than a short one, and more near saturation.
        let short = mm1.noise(0.5, 300, 1);
        let long = mm1.noise(0.5, 30_000, 1);
        assert!(long < short && long < 0.1, "{short} {long}");
        assert!(mm1.noise(0.9, 300, 1) > short);
    }

    #[test]
    fn machine_limits() {
        assert_eq!(machine_limit(0.3, 200.0, None), None);
        assert!(machine_limit(-1.5, 200.0, None).unwrap().contains("moved"));
        assert!(machine_limit(0.0, 900.0, None).unwrap().contains("late"));
        assert!(machine_limit(0.0, 0.0, Some((0.6, 0.4)))
            .unwrap()
            .contains("did not get through"));
    }

    #[test]
    fn verdicts() {
        assert_eq!(verdict(4.9, 20.0), "within 5 %");
        assert_eq!(verdict(-12.0, 20.0), "within noise");
        assert_eq!(verdict(30.0, 20.0), "miss");
    }
}
