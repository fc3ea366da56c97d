//! `capstan bench --polygraph FILE.toml`: a Web Polygraph workload
//! ([`capstan_workload::polygraph`]) driven through a proxy, measured per phase as the
//! Bakhtiyari thesis reports it: offered rate, throughput, response time of hits and misses
//! apart, the offered hit ratio (what an infinite cache would have hit) beside the measured
//! document and byte hit ratios, errors, and a time line per second.
//!
//! Robots: requests arrive at the phase's rate (robots × `req_rate` × load factor, Poisson) and
//! each goes to a robot drawn at random, which uses one of its at most `open_conn_limit`
//! keep-alive connections (a request waits while all its robot's connections are busy; its
//! response time counts from when it was due). Best effort (no `req_rate`): each robot asks
//! again as soon as its answer arrives. One generator thread runs it all, so the workload's one
//! request stream (working set, recurrence, goals) stays in order.
//!
//! A hit is what the proxy's response says: `X-Cache`/`Cache-Status` when present, otherwise
//! Varnish's two `X-Varnish` ids, Traffic Server's `Via` cache code, or an `Age` above 0.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use capstan_workload::{stream, Generator, PolyRequest, PolyWorkload};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::config::Target;
use crate::error::BenchError;
use crate::http::{self, CacheMark, Conn, ErrorKind};
use crate::stats::thread_cpu_s;

/// Called once a second with the elapsed seconds, the current phase and the responses so far.
pub type PolyProgress = std::sync::Arc<dyn Fn(f64, &str, u64) + Send + Sync>;

/// How to drive a workload.
#[derive(Debug, Clone)]
pub struct PolyConfig {
    pub target: Target,
    pub workload: PolyWorkload,
    /// A request not answered this long after it was due is an error (`read_timeout`).
    pub timeout: Duration,
    pub connect_timeout: Duration,
    /// After the last phase, in-flight requests may finish for this long.
    pub drain: Duration,
    /// Stop after this long even if a goal is not met (a fill goal the proxy is too slow for).
    pub max_duration: Duration,
}

/// Response times in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |us: u64| (us as f64 / 10.0).round() / 100.0;
        Latency {
            count: h.len(),
            mean: (h.mean() / 10.0).round() / 100.0,
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        }
    }
}

/// A response-time distribution as cumulative points: `fraction` of the `count` responses
/// took at most `ms` (the last point is the maximum at fraction 1).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cdf {
    pub count: u64,
    pub points: Vec<CdfPoint>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CdfPoint {
    pub ms: f64,
    pub fraction: f64,
}

/// The quantiles a [`Cdf`] keeps: every percent, then the tail in finer steps (a hit's tail is
/// where proxies differ).
const CDF_QUANTILES: [f64; 7] = [0.995, 0.998, 0.999, 0.9995, 0.9999, 0.99999, 1.0];

impl Cdf {
    fn of(h: Option<&Histogram<u64>>) -> Cdf {
        let Some(h) = h.filter(|h| !h.is_empty()) else {
            return Cdf::default();
        };
        let quantiles = (0..100).map(|p| p as f64 / 100.0).chain(CDF_QUANTILES);
        let mut points: Vec<CdfPoint> = Vec::with_capacity(110);
        for q in quantiles {
            let ms = h.value_at_quantile(q) as f64 / 1000.0;
            // Equal values at neighbouring quantiles are one step: keep the highest fraction.
            match points.last_mut() {
                Some(last) if last.ms == ms => last.fraction = q,
                _ => points.push(CdfPoint { ms, fraction: q }),
            }
        }
        Cdf {
            count: h.len(),
            points,
        }
    }
}

/// One phase's results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseResult {
    pub name: String,
    pub start_s: f64,
    pub end_s: f64,
    /// Requests issued per second of the phase (the schedule's rate; best effort: what the
    /// robots managed to ask).
    pub offered_rps: f64,
    /// The rate profile at the phase's start and end (requests/s); absent for best effort.
    pub offered_rps_from: Option<f64>,
    pub offered_rps_to: Option<f64>,
    pub requests: u64,
    /// Responses per second of the phase.
    pub throughput_rps: f64,
    /// Body bytes per second received.
    pub throughput_mbytes_s: f64,
    pub responses: u64,
    pub hits: u64,
    pub misses: u64,
    pub hit_bytes: u64,
    pub miss_bytes: u64,
    /// Measured document and byte hit ratios (of the responses).
    pub dhr: f64,
    pub bhr: f64,
    /// What an infinite cache would have hit, from the workload (of the requests issued).
    pub offered_dhr: f64,
    pub offered_bhr: f64,
    pub repeats: u64,
    pub fill_bytes: u64,
    pub errors: BTreeMap<String, u64>,
    pub response_ms: Latency,
    pub hit_ms: Latency,
    pub miss_ms: Latency,
}

/// One second of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Second {
    pub t: u64,
    pub phase: String,
    /// The schedule's rate at the start of this second (absent: best effort).
    pub offered_rate: Option<f64>,
    pub issued: u64,
    pub responses: u64,
    pub hits: u64,
    pub errors: u64,
    pub bytes: u64,
    pub hit_bytes: u64,
    pub offered_hits: u64,
    pub mean_ms: f64,
    pub hit_mean_ms: f64,
    pub miss_mean_ms: f64,
}

/// A whole run, serialised by `--json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PolyResult {
    pub target: String,
    pub robots: u32,
    /// Robots × req_rate; absent for best effort.
    pub peak_rate: Option<f64>,
    pub cache_bytes: u64,
    pub duration_s: f64,
    /// Whether every phase reached its goal (false: stopped by `max_duration`).
    pub completed: bool,
    pub phases: Vec<PhaseResult>,
    pub working_set_objects: u64,
    pub working_set_bytes: u64,
    /// The working set's size when it froze (objects, bytes), if it did.
    pub frozen_objects: Option<u64>,
    pub frozen_bytes: Option<u64>,
    /// Mean body size of the requests issued (the thesis's "mean object size").
    pub mean_object_bytes: f64,
    /// CPU the generator thread used, as a share of one core over the run.
    pub generator_cpu_percent: f64,
    pub timeline: Vec<Second>,
    /// Response times of every hit and of every miss over the whole run, apart.
    #[serde(default)]
    pub hit_cdf: Cdf,
    #[serde(default)]
    pub miss_cdf: Cdf,
}

#[derive(Default)]
struct PhaseStats {
    responses: u64,
    hits: u64,
    misses: u64,
    hit_bytes: u64,
    miss_bytes: u64,
    errors: BTreeMap<String, u64>,
    all: Option<Histogram<u64>>,
    hit: Option<Histogram<u64>>,
    miss: Option<Histogram<u64>>,
}

#[derive(Default, Clone)]
struct SecondStats {
    phase: usize,
    offered_rate: Option<f64>,
    issued: u64,
    responses: u64,
    hits: u64,
    errors: u64,
    bytes: u64,
    hit_bytes: u64,
    offered_hits: u64,
    sum_us: u64,
    hit_sum_us: u64,
    miss_sum_us: u64,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds")
}

fn record(h: &mut Option<Histogram<u64>>, us: u64) {
    let _ = h
        .get_or_insert_with(histogram)
        .record(us.clamp(1, 3_600_000_000));
}

/// Counters of the run, touched by the request tasks of the one generator thread.
#[derive(Default)]
struct Tally {
    phases: Vec<PhaseStats>,
    seconds: Vec<SecondStats>,
}

impl Tally {
    fn second(&mut self, t: f64) -> &mut SecondStats {
        let i = t.max(0.0) as usize;
        if self.seconds.len() <= i {
            self.seconds.resize(i + 1, SecondStats::default());
        }
        &mut self.seconds[i]
    }

    fn phase(&mut self, i: usize) -> &mut PhaseStats {
        if self.phases.len() <= i {
            self.phases.resize_with(i + 1, PhaseStats::default);
        }
        &mut self.phases[i]
    }

    fn issued(&mut self, t: f64, r: &PolyRequest, rate: Option<f64>) {
        let s = self.second(t);
        s.phase = r.phase;
        s.issued += 1;
        if s.offered_rate.is_none() {
            s.offered_rate = rate;
        }
        if r.offered_hit {
            s.offered_hits += 1;
        }
    }

    fn answered(&mut self, phase: usize, t: f64, us: u64, hit: bool, bytes: u64) {
        let p = self.phase(phase);
        p.responses += 1;
        record(&mut p.all, us);
        if hit {
            p.hits += 1;
            p.hit_bytes += bytes;
            record(&mut p.hit, us);
        } else {
            p.misses += 1;
            p.miss_bytes += bytes;
            record(&mut p.miss, us);
        }
        let s = self.second(t);
        s.responses += 1;
        s.bytes += bytes;
        s.sum_us += us;
        if hit {
            s.hits += 1;
            s.hit_bytes += bytes;
            s.hit_sum_us += us;
        } else {
            s.miss_sum_us += us;
        }
    }

    fn failed(&mut self, phase: usize, t: f64, kind: ErrorKind) {
        *self
            .phase(phase)
            .errors
            .entry(kind.name().to_string())
            .or_default() += 1;
        self.second(t).errors += 1;
    }
}

/// A robot: its idle keep-alive connections and the limit on those open at once.
struct Robot {
    idle: RefCell<Vec<Conn>>,
    slots: Semaphore,
}

struct Run {
    cfg: PolyConfig,
    addr: SocketAddr,
    t0: Instant,
    host: String,
    robots: Vec<Robot>,
    tally: RefCell<Tally>,
    gen: RefCell<Generator>,
    inflight: std::cell::Cell<usize>,
}

/// One issued request counted in flight until it is tallied or abandoned (dropped).
struct InFlight(Rc<Run>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.inflight.set(self.0.inflight.get() - 1);
    }
}

impl Run {
    fn now_s(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Tallies `req` as issued at `t` and counts it in flight at once, before its task first
    /// runs, so the drain cannot miss a request spawned just before the schedule ended.
    fn issue(self: &Rc<Self>, t: f64, req: &PolyRequest, rate: Option<f64>) -> InFlight {
        self.tally.borrow_mut().issued(t, req, rate);
        self.inflight.set(self.inflight.get() + 1);
        InFlight(self.clone())
    }

    /// One request by robot `robot`, due at `due_s`; its response time counts from then.
    async fn request(self: Rc<Self>, robot: usize, req: PolyRequest, due_s: f64, _out: InFlight) {
        let due = self.t0 + Duration::from_secs_f64(due_s);
        let deadline = due + self.cfg.timeout;
        let outcome =
            tokio::time::timeout_at(deadline.into(), self.exchange(robot, &req.path)).await;
        let done = Instant::now();
        let t = (done - self.t0).as_secs_f64();
        let mut tally = self.tally.borrow_mut();
        match outcome {
            Ok(Ok(resp)) if resp.status < 400 => {
                let us = done.saturating_duration_since(due).as_micros() as u64;
                let hit = resp.cache == CacheMark::Hit;
                tally.answered(req.phase, t, us, hit, resp.body_bytes);
            }
            Ok(Ok(resp)) => {
                let kind = if resp.status >= 500 {
                    ErrorKind::Http5xx
                } else {
                    ErrorKind::Http4xx
                };
                tally.failed(req.phase, t, kind);
            }
            Ok(Err(kind)) => tally.failed(req.phase, t, kind),
            Err(_) => tally.failed(req.phase, t, ErrorKind::ReadTimeout),
        }
    }

    async fn exchange(&self, robot: usize, path: &str) -> Result<http::Response, ErrorKind> {
        let r = &self.robots[robot];
        let _slot = r.slots.acquire().await.map_err(|_| ErrorKind::Io)?;
        let bytes = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: capstan-bench-polygraph\r\n\r\n",
            self.host
        );
        let idle = r.idle.borrow_mut().pop();
        let (conn, resp) = match idle {
            Some(mut c) => match c.roundtrip(bytes.as_bytes(), false, true).await {
                Ok(resp) => (c, resp),
                // The proxy closed the idle connection (its keep-alive timeout) as we reused
                // it: a client retries a GET on a new connection (RFC 9112 §9.3.1), as
                // Polygraph's robots do.
                Err(ErrorKind::Closed | ErrorKind::Reset) => self.fresh(&bytes).await?,
                Err(e) => return Err(e),
            },
            None => self.fresh(&bytes).await?,
        };
        if resp.reusable {
            r.idle.borrow_mut().push(conn);
        }
        Ok(resp)
    }

    async fn fresh(&self, request: &str) -> Result<(Conn, http::Response), ErrorKind> {
        let mut c = Conn::new(http::connect(self.addr, None, self.cfg.connect_timeout).await?);
        let resp = c.roundtrip(request.as_bytes(), false, true).await?;
        Ok((c, resp))
    }
}

/// Runs the workload on a thread of its own and returns its results. `progress` gets the
/// elapsed seconds, the current phase and the responses so far, once a second.
pub async fn run(
    cfg: PolyConfig,
    progress: Option<PolyProgress>,
) -> Result<PolyResult, BenchError> {
    let addr = tokio::net::lookup_host((cfg.target.host.trim_matches(['[', ']']), cfg.target.port))
        .await
        .map_err(|e| BenchError::Io(format!("cannot resolve {}: {e}", cfg.target.host)))?
        .next()
        .ok_or_else(|| BenchError::Io(format!("cannot resolve {}", cfg.target.host)))?;
    if cfg.target.tls {
        return Err(BenchError::Config(
            "--polygraph drives plain http:// targets (proxies under test)".into(),
        ));
    }
    let gen = Generator::new(cfg.workload.clone()).map_err(BenchError::Config)?;
    crate::runner::raise_fd_limit();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("bench-polygraph".into())
        .spawn(move || {
            let _ = tx.send(run_here(cfg, addr, gen, progress));
        })
        .map_err(|e| BenchError::Io(format!("cannot start the generator thread: {e}")))?;
    rx.await
        .map_err(|_| BenchError::Io("the generator thread panicked".into()))?
}

fn run_here(
    cfg: PolyConfig,
    addr: SocketAddr,
    gen: Generator,
    progress: Option<PolyProgress>,
) -> Result<PolyResult, BenchError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BenchError::Io(format!("cannot start the generator: {e}")))?;
    let local = tokio::task::LocalSet::new();
    let w = cfg.workload.clone();
    let run = Rc::new(Run {
        host: cfg.target.authority(),
        robots: (0..w.robots)
            .map(|_| Robot {
                idle: RefCell::new(Vec::new()),
                slots: Semaphore::new(w.open_conn_limit as usize),
            })
            .collect(),
        cfg,
        addr,
        t0: Instant::now() + Duration::from_millis(20),
        tally: RefCell::new(Tally::default()),
        gen: RefCell::new(gen),
        inflight: std::cell::Cell::new(0),
    });
    let cpu0 = thread_cpu_s();
    let r = run.clone();
    let completed = local.block_on(&rt, async move {
        let ticker = progress.map(|cb| tokio::task::spawn_local(tick(r.clone(), cb)));
        let completed = match w.req_rate {
            Some(_) => open_loop(r.clone()).await,
            None => best_effort(r.clone()).await,
        };
        let drain_end = Instant::now() + r.cfg.drain;
        while r.inflight.get() > 0 && Instant::now() < drain_end {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if let Some(t) = ticker {
            t.abort();
        }
        completed
    });
    let wall = run.t0.elapsed().as_secs_f64().max(1e-9);
    let cpu = thread_cpu_s() - cpu0;
    drop(local);
    drop(rt);
    Ok(summarise(&run, completed, 100.0 * cpu / wall))
}

async fn tick(r: Rc<Run>, cb: PolyProgress) {
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let g = r.gen.borrow();
        let name = g
            .phase()
            .map(|i| g.workload().phases[i].name.clone())
            .unwrap_or_else(|| "drain".into());
        drop(g);
        let done: u64 = r.tally.borrow().phases.iter().map(|p| p.responses).sum();
        cb(r.now_s(), &name, done);
    }
}

/// Requests on the schedule, each to a random robot. Returns whether every goal was met.
async fn open_loop(r: Rc<Run>) -> bool {
    let mut pick = stream(r.cfg.workload.seed, "polygraph-robots");
    let robots = r.robots.len() as u64;
    let max_s = r.cfg.max_duration.as_secs_f64();
    let mut t = 0.0;
    loop {
        let next = r.gen.borrow_mut().next_arrival(t);
        let Some(next) = next else { return true };
        if next > max_s {
            return false;
        }
        t = next;
        tokio::time::sleep_until((r.t0 + Duration::from_secs_f64(t)).into()).await;
        let (req, rate) = {
            let mut g = r.gen.borrow_mut();
            let req = g.next(t);
            (req, g.offered_rate(t))
        };
        let Some(req) = req else { return true };
        let out = r.issue(t, &req, rate);
        let robot = (rand::RngCore::next_u64(&mut pick) % robots) as usize;
        tokio::task::spawn_local(r.clone().request(robot, req, t, out));
    }
}

/// Every robot asks again as soon as its answer arrives.
async fn best_effort(r: Rc<Run>) -> bool {
    let max_s = r.cfg.max_duration.as_secs_f64();
    tokio::time::sleep_until(r.t0.into()).await;
    let mut set = tokio::task::JoinSet::new();
    for robot in 0..r.robots.len() {
        let r = r.clone();
        set.spawn_local(async move {
            loop {
                let t = r.now_s();
                if t > max_s {
                    return false;
                }
                let req = r.gen.borrow_mut().next(t);
                let Some(req) = req else { return true };
                let out = r.issue(t, &req, None);
                r.clone().request(robot, req, t, out).await;
            }
        });
    }
    let mut all = true;
    while let Some(done) = set.join_next().await {
        all &= done.unwrap_or(false);
    }
    all
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// A phase's errors plus, as `unfinished`, its requests neither answered nor failed: still in
/// flight when the drain ended, so every issued request is accounted for.
fn with_unfinished(
    errors: &BTreeMap<String, u64>,
    issued: u64,
    responses: u64,
) -> BTreeMap<String, u64> {
    let mut all = errors.clone();
    let failed: u64 = errors.values().sum();
    let unfinished = issued.saturating_sub(responses + failed);
    if unfinished > 0 {
        all.insert("unfinished".into(), unfinished);
    }
    all
}

fn summarise(run: &Run, completed: bool, cpu_percent: f64) -> PolyResult {
    let g = run.gen.borrow();
    let w = g.workload();
    let tally = run.tally.borrow();
    let end_all = run.now_s();
    let empty = PhaseStats::default();
    let phases: Vec<PhaseResult> = g
        .tallies()
        .iter()
        .enumerate()
        .map(|(i, gp)| {
            let s = tally.phases.get(i).unwrap_or(&empty);
            let errors = with_unfinished(&s.errors, gp.requests, s.responses);
            let end = gp.end_s.unwrap_or(end_all);
            let dur = (end - gp.start_s).max(1e-9);
            let peak = w.peak_rate();
            let spec = &w.phases[i];
            PhaseResult {
                name: gp.name.clone(),
                start_s: gp.start_s,
                end_s: end,
                offered_rps: gp.requests as f64 / dur,
                offered_rps_from: peak.map(|p| p * spec.load.0),
                offered_rps_to: peak.map(|p| p * spec.load.1),
                requests: gp.requests,
                throughput_rps: s.responses as f64 / dur,
                throughput_mbytes_s: (s.hit_bytes + s.miss_bytes) as f64 / dur / 1e6,
                responses: s.responses,
                hits: s.hits,
                misses: s.misses,
                hit_bytes: s.hit_bytes,
                miss_bytes: s.miss_bytes,
                dhr: ratio(s.hits, s.responses),
                bhr: ratio(s.hit_bytes, s.hit_bytes + s.miss_bytes),
                offered_dhr: gp.offered_dhr(),
                offered_bhr: gp.offered_bhr(),
                repeats: gp.repeats,
                fill_bytes: gp.fill_bytes,
                errors,
                response_ms: s.all.as_ref().map(Latency::of).unwrap_or_default(),
                hit_ms: s.hit.as_ref().map(Latency::of).unwrap_or_default(),
                miss_ms: s.miss.as_ref().map(Latency::of).unwrap_or_default(),
            }
        })
        .collect();
    let mean_ms = |sum: u64, n: u64| (ratio(sum, n) / 10.0).round() / 100.0;
    let timeline = tally
        .seconds
        .iter()
        .enumerate()
        .map(|(t, s)| Second {
            t: t as u64,
            phase: w.phases[s.phase.min(w.phases.len() - 1)].name.clone(),
            offered_rate: s.offered_rate,
            issued: s.issued,
            responses: s.responses,
            hits: s.hits,
            errors: s.errors,
            bytes: s.bytes,
            hit_bytes: s.hit_bytes,
            offered_hits: s.offered_hits,
            mean_ms: mean_ms(s.sum_us, s.responses),
            hit_mean_ms: mean_ms(s.hit_sum_us, s.hits),
            miss_mean_ms: mean_ms(s.miss_sum_us, s.responses - s.hits),
        })
        .collect();
    let merged = |pick: fn(&PhaseStats) -> Option<&Histogram<u64>>| {
        let mut all: Option<Histogram<u64>> = None;
        for h in tally.phases.iter().filter_map(pick) {
            let _ = all.get_or_insert_with(histogram).add(h);
        }
        Cdf::of(all.as_ref())
    };
    let (ws_objects, ws_bytes, _) = g.working_set();
    let issued: u64 = g.tallies().iter().map(|p| p.requests).sum();
    let issued_bytes: u64 = g.tallies().iter().map(|p| p.bytes).sum();
    PolyResult {
        target: run.cfg.target.url(),
        robots: w.robots,
        peak_rate: w.peak_rate(),
        cache_bytes: w.cache_bytes,
        duration_s: end_all,
        completed,
        phases,
        working_set_objects: ws_objects,
        working_set_bytes: ws_bytes,
        frozen_objects: g.frozen().map(|f| f.0),
        frozen_bytes: g.frozen().map(|f| f.1),
        mean_object_bytes: ratio(issued_bytes, issued),
        generator_cpu_percent: (cpu_percent * 10.0).round() / 10.0,
        timeline,
        hit_cdf: merged(|p| p.hit.as_ref()),
        miss_cdf: merged(|p| p.miss.as_ref()),
    }
}

/// The per-phase table `capstan bench --polygraph` prints.
pub fn summary_table(r: &PolyResult) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<6} {:>7} {:>8} {:>8} {:>7} {:>7} {:>7} {:>7} {:>8} {:>8} {:>8} {:>6}",
        "phase",
        "secs",
        "offered",
        "thruput",
        "DHR%",
        "offDHR%",
        "BHR%",
        "offBHR%",
        "hit ms",
        "miss ms",
        "all ms",
        "errors"
    );
    for p in &r.phases {
        let errors: u64 = p.errors.values().sum();
        let _ = writeln!(
            s,
            "{:<6} {:>7.1} {:>8.1} {:>8.1} {:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>8.2} {:>8.1} {:>8.1} {:>6}",
            p.name,
            p.end_s - p.start_s,
            p.offered_rps,
            p.throughput_rps,
            100.0 * p.dhr,
            100.0 * p.offered_dhr,
            100.0 * p.bhr,
            100.0 * p.offered_bhr,
            p.hit_ms.mean,
            p.miss_ms.mean,
            p.response_ms.mean,
            errors
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_neither_answered_nor_failed_are_reported_unfinished() {
        let errors = BTreeMap::from([("read_timeout".to_string(), 2)]);
        let all = with_unfinished(&errors, 10, 5);
        assert_eq!(all["read_timeout"], 2);
        assert_eq!(all["unfinished"], 3);
        assert!(!with_unfinished(&errors, 7, 5).contains_key("unfinished"));
    }

    #[test]
    fn a_cdf_rises_to_one_at_the_maximum_and_keeps_the_count() {
        assert_eq!(Cdf::of(None), Cdf::default());
        let mut h = histogram();
        // 90 responses of 1 ms, 10 of 300 ms (µs in the histogram).
        for _ in 0..90 {
            h.record(1_000).unwrap();
        }
        for _ in 0..10 {
            h.record(300_000).unwrap();
        }
        let c = Cdf::of(Some(&h));
        assert_eq!(c.count, 100);
        assert!(c
            .points
            .windows(2)
            .all(|w| w[0].ms < w[1].ms && w[0].fraction < w[1].fraction));
        let last = c.points.last().unwrap();
        assert_eq!(last.fraction, 1.0);
        assert!((last.ms - 300.0).abs() < 1.0, "{c:?}");
        // Ninety percent took 1 ms: one step at 1 ms up to fraction ≈ 0.9, then the misses.
        assert!((c.points[0].ms - 1.0).abs() < 0.01, "{c:?}");
        assert!((0.89..=0.9).contains(&c.points[0].fraction), "{c:?}");
        assert_eq!(c.points.len(), 2, "{c:?}");
    }
}
