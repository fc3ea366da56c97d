//! One measured window on a running cluster, and what it takes: starting a series' cluster
//! (nodes and the switch, the policy seeded from the run's seed), the warm-up, the load's
//! configuration, and the record of the window (throughput, latency, per-node utilisation, the
//! CPU the switch and the generator used, a timeline of the nodes and the switch's weights).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_bench::{BenchConfig, Engine, Source, Target};
use capstan_workload::{Dist, DocTree, Popularity, SessionModel, TreeKind};

use crate::model::error::LabError;
use crate::model::experiment::{parse_duration, EngineKind, Experiment, PolicyRow, WorkloadKind};
use crate::model::results::*;
use crate::procs::cluster::{self, Cluster, NodeArgs};
use crate::run::plan::{filelist, Event, Observer, Options, Plan, SeriesPlan};

/// What every window of a run shares: the plan and options, the caller's observer, the
/// capacity measured first (open loop relative to it), the windows counted so far, and the HTTP
/// path probed on the first cluster (with both worlds).
pub(crate) struct Ctx<'a> {
    pub plan: &'a Plan,
    pub o: &'a Options,
    pub observer: Option<Observer>,
    pub capacity: Option<f64>,
    pub index: usize,
    pub http_path: Option<HttpPathProbe>,
}

/// One window to measure: the level, the repetition (or round), the seed of its request
/// stream, and its length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub level: f64,
    pub rep: usize,
    pub seed: u64,
    pub duration: Duration,
}

impl Ctx<'_> {
    pub fn emit(&self, e: Event) {
        if let Some(f) = &self.observer {
            f(e)
        }
    }

    /// With both worlds, the HTTP path measured once, on the first cluster started.
    pub async fn probe_path(&mut self, s: &SeriesPlan, c: &Cluster) -> Result<(), LabError> {
        if self.o.worlds != crate::run::plan::Worlds::Both || self.http_path.is_some() {
            return Ok(());
        }
        self.emit(Event::Message(
            "measuring the HTTP path (one client, a small and a large file)".into(),
        ));
        let probe = crate::run::http_path::measure(self.plan, s, c).await?;
        self.emit(Event::Message(probe.summary()));
        self.http_path = Some(probe);
        Ok(())
    }

    /// The warm-up before a cluster's first window: `plan.warmup` at `level`, not recorded.
    pub async fn warm_up(
        &self,
        s: &SeriesPlan,
        c: &Cluster,
        level: f64,
        seed: u64,
    ) -> Result<(), LabError> {
        if self.plan.warmup.is_zero() {
            return Ok(());
        }
        let value = level_value(self.plan, level, self.capacity);
        let (cfg, secure) = load_configs(self.plan, s, c, value, self.plan.warmup, seed ^ 0x5eed)?;
        run_load(cfg, secure.map(|(c, _)| c), None).await?;
        Ok(())
    }

    /// Measures one window on `c`, telling the observer when it starts and ends.
    pub async fn window(
        &mut self,
        s: &SeriesPlan,
        c: &mut Cluster,
        w: Window,
    ) -> Result<RunRecord, LabError> {
        let index = self.index;
        self.emit(Event::Run {
            index,
            label: s.label.clone(),
            level: w.level,
            repetition: w.rep,
        });
        let rec = measure(self.plan, s, c, w, self.capacity, self.observer.clone()).await?;
        self.emit(Event::Done {
            index,
            throughput: rec.throughput_rps,
        });
        self.index += 1;
        Ok(rec)
    }
}

pub(crate) fn level_value(plan: &Plan, level: f64, capacity: Option<f64>) -> f64 {
    match (plan.exp.load.relative_to_capacity, capacity) {
        (true, Some(c)) => level * c,
        _ => level,
    }
}

/// Starts a series' cluster with its logs in `log_dir`; `seed` (the seed of its first window)
/// seeds the policy's own random stream.
pub(crate) async fn start_cluster(
    plan: &Plan,
    s: &SeriesPlan,
    o: &Options,
    log_dir: &Path,
    seed: u64,
) -> Result<Cluster, LabError> {
    let exp = &plan.exp;
    let args = NodeArgs {
        tree: s.tree.clone(),
        files: exp.nodes.files,
        seed: plan.seed,
        cpu_light_ms: exp.nodes.cpu_light_ms,
        cpu_med_ms: exp.nodes.cpu_med_ms,
        disk_load_ms: exp.nodes.disk_load_ms,
        cache_fraction: exp.nodes.cache_fraction,
        threads: exp.nodes.threads,
        load_interval_ms: gather_interval(exp)?.as_millis().max(1) as u64,
        remote_penalty: exp.nodes.remote_penalty,
        config: origin_config(exp, &o.work_dir)?,
        register: None,
    };
    let mut row = s.row.clone();
    seed_policy(&mut row, seed);
    if let Some(param) = exp.switch.tree_sizes.get(row.name()) {
        row.table.insert(
            param.clone(),
            tree_sizes(&s.tree, plan.seed, exp.nodes.files)?.into(),
        );
    }
    cluster::start(
        &o.exe,
        &s.nodes,
        &args,
        switch_config(exp, &row),
        s.switch_threads,
        crate::run::secure::cluster_tls(exp, &o.work_dir)?.as_ref(),
        log_dir,
    )
    .await
}

/// A policy with a random stream of its own (random, two-choices, power-of-d,
/// join-idle-queue) gets a seed derived from the window's seed, so `--seed` decides its
/// choices too and each repetition draws a different stream; a row that sets `seed` keeps it.
pub(crate) fn seed_policy(row: &mut PolicyRow, seed: u64) {
    let seeded = capstan_core::policy::lookup(row.name()).is_some_and(|r| r.seeded);
    if seeded && !row.table.contains_key("seed") {
        use capstan_workload::rng::{fnv1a, splitmix64};
        // TOML integers are signed: keep the seed within i64.
        let derived = splitmix64(seed ^ fnv1a(b"switch-policy")) >> 1;
        row.table
            .insert("seed".into(), toml::Value::Integer(derived as i64));
    }
}

/// Every object of the tree the nodes serve and its size, as a policy parameter.
fn tree_sizes(tree: &str, seed: u64, files: Option<usize>) -> Result<toml::Table, LabError> {
    let kind: TreeKind = tree
        .parse()
        .map_err(|e| LabError::Experiment(format!("{e}")))?;
    let t =
        DocTree::generate(kind, seed, files).map_err(|e| LabError::Experiment(e.to_string()))?;
    Ok(t.files
        .iter()
        .map(|f| (f.path.clone(), toml::Value::Integer(f.size as i64)))
        .collect())
}

/// Writes `[nodes.origin]` as the nodes' configuration file, if the experiment has one.
fn origin_config(exp: &Experiment, dir: &std::path::Path) -> Result<Option<PathBuf>, LabError> {
    let Some(table) = &exp.nodes.origin else {
        return Ok(None);
    };
    let path = dir.join("origin.toml");
    std::fs::create_dir_all(dir)
        .and_then(|_| {
            std::fs::write(
                &path,
                toml::to_string(table).map_err(std::io::Error::other)?,
            )
        })
        .map_err(|e| LabError::Run(format!("cannot write {}: {e}", path.display())))?;
    Ok(Some(path))
}

/// T_gat: how often the switch gathers load reports (`switch.load_interval`).
fn gather_interval(exp: &Experiment) -> Result<Duration, LabError> {
    parse_duration("switch.load_interval", &exp.switch.load_interval)
}

/// How often a run's timeline looks at the nodes and the switch: every T_gat, but between a
/// quarter of a second and a second.
fn sample_period(exp: &Experiment) -> Duration {
    gather_interval(exp)
        .unwrap_or(Duration::from_secs(1))
        .clamp(Duration::from_millis(250), Duration::from_secs(1))
}

/// The switch's configuration for one policy (listen, admin and nodes are added at start).
fn switch_config(exp: &Experiment, row: &PolicyRow) -> toml::Table {
    let mut t = toml::Table::new();
    t.insert("policy".into(), toml::Value::Table(row.table.clone()));
    let mut load = toml::Table::new();
    load.insert("path".into(), "/_capstan/load".into());
    load.insert("interval".into(), exp.switch.load_interval.clone().into());
    t.insert("load".into(), toml::Value::Table(load));
    // Over-capacity runs must see the cluster's answer, not the switch's connection limits: a
    // client waiting on a long queue moves no bytes, so its idle limit (60 s by default) must
    // not end the wait either.
    let mut timeouts = toml::Table::new();
    timeouts.insert("upstream".into(), exp.load.timeout.clone().into());
    timeouts.insert("first_byte".into(), exp.load.timeout.clone().into());
    // The papers' switches forwarded everything: no admission limit, no shedding, no ejection
    // of a slow node, so the lab's rows measure the policies as the papers did.
    let mut admission = toml::Table::new();
    admission.insert("limit".into(), "off".into());
    t.insert("admission".into(), toml::Value::Table(admission));
    let mut outlier = toml::Table::new();
    outlier.insert("consecutive_failures".into(), 0.into());
    t.insert("outlier".into(), toml::Value::Table(outlier));
    let load_timeout = parse_duration("load.timeout", &exp.load.timeout).unwrap_or_default();
    if load_timeout > Duration::from_secs(60) {
        timeouts.insert("client_idle".into(), exp.load.timeout.clone().into());
    }
    t.insert("timeouts".into(), toml::Value::Table(timeouts));
    if !exp.switch.classes.is_empty() {
        t.insert(
            "class".into(),
            toml::Value::Array(
                exp.switch
                    .classes
                    .iter()
                    .cloned()
                    .map(toml::Value::Table)
                    .collect(),
            ),
        );
    }
    if !exp.switch.rules.is_empty() {
        t.insert(
            "rule".into(),
            toml::Value::Array(
                exp.switch
                    .rules
                    .iter()
                    .cloned()
                    .map(toml::Value::Table)
                    .collect(),
            ),
        );
    }
    if let Some(d) = &exp.switch.default_class {
        t.insert("default_class".into(), d.clone().into());
    }
    t
}

/// The load of one window: the plain clients' run and, with `[workload.secure]`, the secure
/// clients' run beside it and their level.
fn load_configs(
    plan: &Plan,
    s: &SeriesPlan,
    c: &Cluster,
    level: f64,
    duration: Duration,
    seed: u64,
) -> Result<(BenchConfig, Option<(BenchConfig, f64)>), LabError> {
    let engine = plan.exp.load.engine;
    let Some(sc) = &plan.exp.workload.secure else {
        return Ok((
            bench_config(plan, s, c, engine, level, duration, seed)?,
            None,
        ));
    };
    let (plain_level, secure_level) = crate::run::secure::split_level(engine, level, sc.share);
    let plain = bench_config(plan, s, c, engine, plain_level, duration, seed)?;
    let secure = crate::run::secure::secure_config(plan, s, c, &plain, secure_level)?;
    Ok((plain, Some((secure, secure_level))))
}

/// Runs the plain load and, at the same time, the secure one.
async fn run_load(
    plain: BenchConfig,
    secure: Option<BenchConfig>,
    progress: Option<capstan_bench::ProgressFn>,
) -> Result<(capstan_bench::RunResult, Option<capstan_bench::RunResult>), LabError> {
    let err = |e: capstan_bench::BenchError| LabError::Run(e.to_string());
    match secure {
        None => Ok((
            capstan_bench::run(plain, progress).await.map_err(err)?,
            None,
        )),
        Some(sc) => {
            let (p, s) = tokio::join!(
                capstan_bench::run(plain, progress),
                capstan_bench::run(sc, None)
            );
            let s = s.map_err(|e| LabError::Run(format!("secure class: {e}")))?;
            Ok((p.map_err(err)?, Some(s)))
        }
    }
}

pub(crate) fn bench_config(
    plan: &Plan,
    s: &SeriesPlan,
    c: &Cluster,
    engine: EngineKind,
    level: f64,
    duration: Duration,
    seed: u64,
) -> Result<BenchConfig, LabError> {
    let exp = &plan.exp;
    let path = match exp.workload.kind {
        WorkloadKind::Url => exp.workload.url.clone().unwrap_or_else(|| "/".into()),
        _ => "/".into(),
    };
    let target = Target::parse(&format!("http://{}{path}", c.listen))
        .map_err(|e| LabError::Run(e.to_string()))?;
    let mut cfg = BenchConfig::open(target, 1.0);
    cfg.engine = match engine {
        EngineKind::Closed => Engine::Closed {
            clients: (level.round() as usize).max(1),
            think: (exp.load.think_ms > 0.0).then_some(Dist::Exp {
                mean: exp.load.think_ms / 1000.0,
            }),
        },
        EngineKind::Open => Engine::Open { rate: level },
        // D = R·T: each socket tries once per T while the server is behind.
        EngineKind::Sclient => Engine::SClient {
            sockets: (level * cfg.connect_timeout.as_secs_f64()).round().max(1.0) as usize,
        },
        EngineKind::Sessions => Engine::Sessions {
            rate: level,
            model: SessionModel::default(),
            parallel: exp.workload.parallel,
            think_scale: exp.workload.think_scale,
        },
    };
    cfg.source = match exp.workload.kind {
        WorkloadKind::Url => Source::Url,
        WorkloadKind::Mix => {
            Source::FileList(filelist(&s.tree, plan.seed, exp.nodes.files, &s.dynamic)?)
        }
        WorkloadKind::Sessions => Source::Mix {
            tree: s
                .tree
                .parse()
                .map_err(|e| LabError::Experiment(format!("{e}")))?,
            tree_seed: plan.seed,
            files: exp.nodes.files,
            popularity: if exp.workload.zipf > 0.0 {
                Popularity::Zipf {
                    alpha: exp.workload.zipf,
                }
            } else {
                Popularity::Uniform
            },
            recurrence: None,
        },
    };
    cfg.duration = duration;
    cfg.keepalive = exp.load.keepalive;
    cfg.timeout = parse_duration("load.timeout", &exp.load.timeout)?;
    cfg.threads = exp.load.generator_threads;
    cfg.seed = seed;
    cfg.drain = parse_duration("load.drain", &exp.load.drain)?;
    if engine == EngineKind::Open {
        cfg.burst = exp.load.burst;
    }
    Ok(cfg)
}

struct Snapshot {
    at: Instant,
    switch_cpu: f64,
    self_cpu: f64,
    nodes_cpu: f64,
    loads: Vec<cluster::LoadReport>,
    status: cluster::SwitchStatus,
}

async fn snapshot(c: &Cluster) -> Result<Snapshot, LabError> {
    let mut loads = Vec::new();
    for ((spec, _, _), addr) in c.nodes.iter().zip(&c.reports) {
        loads.push(
            cluster::load_report(*addr)
                .await
                .map_err(|e| LabError::Run(format!("{}: {e}", spec.name)))?,
        );
    }
    let status = cluster::switch_status(c.admin)
        .await
        .map_err(|e| LabError::Run(format!("switch: {e}")))?;
    Ok(Snapshot {
        at: Instant::now(),
        switch_cpu: cluster::cpu_seconds(Some(c.switch.pid())).unwrap_or(0.0),
        self_cpu: cluster::cpu_seconds(None).unwrap_or(0.0),
        nodes_cpu: c
            .nodes
            .iter()
            .map(|(_, _, p)| cluster::cpu_seconds(Some(p.pid())).unwrap_or(0.0))
            .sum(),
        loads,
        status,
    })
}

/// Until aborted: every `period`, each node's utilisation over its own last window, and the
/// weight and load the switch holds for it.
async fn sample_timeline(
    nodes: Vec<(String, std::net::SocketAddr)>,
    admin: std::net::SocketAddr,
    period: Duration,
    sink: Arc<std::sync::Mutex<Vec<UtilSample>>>,
) {
    let t0 = Instant::now();
    loop {
        tokio::time::sleep(period).await;
        let (mut util, mut cpu, mut disk) = (Vec::new(), Vec::new(), Vec::new());
        for (_, a) in &nodes {
            let (c, d, n) = cluster::load_report(*a)
                .await
                .map(|r| {
                    (
                        r.interval.cpu_util,
                        r.interval.disk_util,
                        r.interval.nic_util,
                    )
                })
                .unwrap_or((f64::NAN, f64::NAN, f64::NAN));
            util.push(round(c.max(d).max(n), 4));
            cpu.push(round(c, 4));
            disk.push(round(d, 4));
        }
        let status = cluster::switch_status(admin).await.unwrap_or_default();
        let of = |name: &str| status.nodes.iter().find(|n| n.name == name);
        let weights = nodes
            .iter()
            .map(|(name, _)| of(name).map_or(0, |n| n.effective_weight))
            .collect();
        let gathered = nodes
            .iter()
            .map(|(name, _)| of(name).map_or(0.0, |n| round(n.load, 4)))
            .collect();
        if let Ok(mut v) = sink.lock() {
            v.push(UtilSample {
                t_s: round(t0.elapsed().as_secs_f64(), 2),
                util,
                cpu,
                disk,
                weights,
                gathered,
            });
        }
    }
}

async fn measure(
    plan: &Plan,
    s: &SeriesPlan,
    c: &mut Cluster,
    w: Window,
    capacity: Option<f64>,
    observer: Option<Observer>,
) -> Result<RunRecord, LabError> {
    let exp = &plan.exp;
    let value = level_value(plan, w.level, capacity);
    let (cfg, secure_cfg) = load_configs(plan, s, c, value, w.duration, w.seed)?;
    let secure_level = secure_cfg.as_ref().map(|(_, l)| *l);
    let before = snapshot(c).await?;
    let tls_before = crate::run::secure::handshakes(c, &before.status).await;
    let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sampler = tokio::spawn(sample_timeline(
        c.nodes
            .iter()
            .zip(&c.reports)
            .map(|((spec, _, _), a)| (spec.name.clone(), *a))
            .collect(),
        c.admin,
        sample_period(exp),
        samples.clone(),
    ));
    let result = run_load(cfg, secure_cfg.map(|(c, _)| c), progress_fn(observer)).await;
    sampler.abort();
    let timeline = samples.lock().map(|v| v.clone()).unwrap_or_default();
    let (r, secure_run) = result?;
    c.check_alive()?;
    let after = snapshot(c).await?;
    let tls_after = crate::run::secure::handshakes(c, &after.status).await;
    let (r, secure) = match (secure_run, secure_level) {
        (Some(sr), Some(level)) => {
            let rec = crate::run::secure::record(level, &sr, tls_before, tls_after);
            (crate::run::secure::combine(r, sr)?, Some(rec))
        }
        _ => (r, None),
    };
    let wall = after.at.duration_since(before.at).as_secs_f64().max(1e-9);
    let pct = |a: f64, b: f64| round(100.0 * (b - a) / wall, 1);
    let cpu = CpuRecord {
        switch_pct: pct(before.switch_cpu, after.switch_cpu),
        generator_pct: pct(before.self_cpu, after.self_cpu),
        generator_thread_max_pct: r.generator.cpu_percent_max,
        nodes_pct: pct(before.nodes_cpu, after.nodes_cpu),
    };
    let nodes = node_records(c, &before, &after);
    let util_min = nodes.iter().map(|n| n.util).fold(f64::INFINITY, f64::min);
    let util_max = nodes.iter().map(|n| n.util).fold(0.0, f64::max);
    Ok(RunRecord {
        level: w.level,
        repetition: w.rep,
        round: None,
        offered_rps: match exp.load.engine {
            EngineKind::Closed => 0.0,
            // D/T, which the whole number of sockets D makes differ a little from the level.
            EngineKind::Sclient => round(r.offered_rps, 2),
            _ => round(value, 2),
        },
        duration_s: r.duration_s,
        completed: r.completed,
        throughput_rps: r.completed_rps,
        errors: r.errors_total,
        errors_by_kind: r.errors.clone(),
        status: r.status.clone(),
        dropped: r.dropped,
        connect_attempts: r.connect_attempts,
        connect_timeouts: r.connect_timeouts,
        unfinished: r.unfinished,
        latency_ms: r.latency_ms.corrected.clone(),
        per_class: per_class(&r),
        cdf: cdf(&r),
        nodes,
        util_min: if util_min.is_finite() { util_min } else { 0.0 },
        util_max,
        timeline,
        warnings: window_warnings(exp, &r, &cpu),
        cpu,
        secure,
    })
}

/// The observer's live progress during a window.
fn progress_fn(observer: Option<Observer>) -> Option<capstan_bench::ProgressFn> {
    observer.map(|f| {
        let cb: capstan_bench::ProgressFn = Arc::new(move |p: &capstan_bench::Progress| {
            f(Event::Live {
                completed: p.completed,
                rps: p.rps,
                elapsed_s: p.elapsed_s,
                duration_s: p.duration_s,
            })
        });
        cb
    })
}

/// Each node over the window: what it served and was busy (its own load report), and what the
/// switch placed on it and gathered from it (the switch's `/status`).
fn node_records(c: &Cluster, before: &Snapshot, after: &Snapshot) -> Vec<NodeRecord> {
    let mut nodes = Vec::new();
    for (i, (spec, _, _)) in c.nodes.iter().enumerate() {
        let (a, b) = (&before.loads[i].since_start, &after.loads[i].since_start);
        let len = (b.length_s - a.length_s).max(1e-9);
        let u = |x: f64, y: f64| round(((y - x) / len).clamp(0.0, 1.0), 4);
        let (cu, du, nu) = (
            u(a.cpu_busy_s, b.cpu_busy_s),
            u(a.disk_busy_s, b.disk_busy_s),
            u(a.nic_busy_s, b.nic_busy_s),
        );
        let sw_before = before.status.nodes.iter().find(|n| n.name == spec.name);
        let sw_after = after.status.nodes.iter().find(|n| n.name == spec.name);
        let placed: BTreeMap<String, u64> = sw_after
            .map(|n| {
                n.classes
                    .iter()
                    .map(|(k, v)| {
                        let old = sw_before
                            .and_then(|b| b.classes.get(k))
                            .copied()
                            .unwrap_or(0);
                        (k.clone(), v.saturating_sub(old))
                    })
                    .filter(|(_, v)| *v > 0)
                    .collect()
            })
            .unwrap_or_default();
        nodes.push(NodeRecord {
            name: spec.name.clone(),
            speed: spec.speed,
            served: b.served.saturating_sub(a.served),
            placed,
            load_reports: sw_after
                .zip(sw_before)
                .map_or(0, |(a, b)| a.load_reports.saturating_sub(b.load_reports)),
            partition: after.loads[i]
                .partition
                .map(|p| format!("{}/{}", p.index, p.count)),
            cpu_util: cu,
            disk_util: du,
            nic_util: nu,
            util: cu.max(du).max(nu),
        });
    }
    nodes
}

/// What may make a window measure the lab rather than the cluster: the switch or the load
/// generator near a core, the generator's own warnings, open-loop load not delivered.
fn window_warnings(exp: &Experiment, r: &capstan_bench::RunResult, cpu: &CpuRecord) -> Vec<String> {
    let mut warnings = Vec::new();
    if cpu.switch_pct > 80.0 {
        warnings.push(format!(
            "the switch used {:.0} % of a core (> 80 %): the result may be the switch's limit, not the cluster's",
            cpu.switch_pct
        ));
    }
    if cpu.generator_pct > 80.0 * exp.load.generator_threads as f64
        || cpu.generator_thread_max_pct > 80.0
    {
        warnings.push(format!(
            "the load generator used {:.0} % of a core (busiest thread {:.0} %, > 80 %): the result may be client-limited",
            cpu.generator_pct, cpu.generator_thread_max_pct
        ));
    }
    for w in &r.generator.warnings {
        if !w.contains("% of a core") {
            warnings.push(format!("load generator: {w}"));
        }
    }
    if exp.load.engine == EngineKind::Open
        && r.offered > 0
        && (r.started as f64) < 0.97 * r.offered as f64
    {
        warnings.push(format!(
            "offered load not delivered: {} requests were due, {} started ({} dropped)",
            r.offered, r.started, r.dropped
        ));
    }
    warnings
}

/// The response-time distribution of a window: (ms, fraction) at every percent and at 99.9 %.
fn cdf(r: &capstan_bench::RunResult) -> Vec<[f64; 2]> {
    match capstan_bench::result::decode_hist(&r.histograms.corrected) {
        Ok(h) if !h.is_empty() => {
            let mut v: Vec<[f64; 2]> = (0..=100)
                .map(|i| {
                    let q = i as f64 / 100.0;
                    [h.value_at_quantile(q) as f64 / 1000.0, q]
                })
                .collect();
            v.push([h.value_at_quantile(0.999) as f64 / 1000.0, 0.999]);
            v.sort_by(|a, b| a[1].total_cmp(&b[1]));
            v
        }
        _ => Vec::new(),
    }
}

/// Latency per request class, and for session workloads per page too (a page is its HTML
/// object and the embedded objects fetched after it: what a user waits for).
fn per_class(r: &capstan_bench::RunResult) -> BTreeMap<String, ClassLatency> {
    let of = |requests: u64, errors: u64, l: &capstan_bench::Percentiles| ClassLatency {
        requests,
        errors,
        mean_ms: l.mean,
        p50_ms: l.p50,
        p90_ms: l.p90,
        p99_ms: l.p99,
    };
    let mut classes: BTreeMap<String, ClassLatency> = r
        .per_class
        .iter()
        .map(|(k, v)| (k.clone(), of(v.requests, v.errors, &v.latency_ms)))
        .collect();
    if r.sessions > 0 && r.page_ms.count > 0 {
        classes.insert(
            "pages (sessions)".into(),
            of(r.page_ms.count, 0, &r.page_ms),
        );
    }
    classes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_sizes_name_every_file_of_the_tree() {
        let sizes = tree_sizes("sweb", 1, None).unwrap();
        assert_eq!(sizes.len(), 61);
        assert_eq!(sizes["/sweb/skewed.html"].as_integer(), Some(1_500_000));
        let total: i64 = sizes.values().filter_map(|v| v.as_integer()).sum();
        // 60 evenly spaced sizes from 100 B to 1.5 MB, and the skewed file.
        assert_eq!(total, 60 * 750_050 + 1_500_000);
        assert!(tree_sizes("nope", 1, None).is_err());
    }

    /// `--seed` reaches the switch: a policy with a random stream gets a seed derived from the
    /// window's, another per repetition; a row's own seed and a policy without one are left alone.
    #[test]
    fn seeded_policies_take_the_runs_seed() {
        let params = BTreeMap::new();
        let seeded = |text: &str, seed: u64| {
            let mut row = PolicyRow::parse(text, &params).unwrap();
            seed_policy(&mut row, seed);
            row.table.get("seed").and_then(|v| v.as_integer())
        };
        for p in ["random", "two-choices", "power-of-d", "join-idle-queue"] {
            let a = seeded(p, 1).unwrap_or_else(|| panic!("{p}"));
            assert!(a >= 0);
            assert_eq!(seeded(p, 1), Some(a), "{p}: the same seed, the same stream");
            assert_ne!(
                seeded(p, 1 + 7919),
                Some(a),
                "{p}: another repetition, another stream"
            );
        }
        assert_eq!(seeded("random:seed=42", 1), Some(42));
        assert_eq!(seeded("cap", 1), None);
        assert_eq!(seeded("round-robin", 1), None);
        // The switch takes the seeded row.
        let mut row = PolicyRow::parse("random", &params).unwrap();
        seed_policy(&mut row, 5);
        let mut table = row.table.clone();
        table.remove("name");
        assert!(capstan_core::PolicySpec::new("random", table).is_ok());
    }

    /// Banga & Druschel's bursts have a 100 s period; the short form's 4 s levels take the
    /// period `[quick] burst_period_s` gives instead.
    #[test]
    fn the_short_form_takes_its_own_burst_period() {
        let exp = Experiment::load("sclient-bursty").unwrap();
        let opts = |quick: bool| Options {
            quick,
            policies: None,
            nodes: None,
            repetitions: None,
            seed: None,
            exe: PathBuf::from("capstan"),
            work_dir: PathBuf::from("."),
            command: String::new(),
            worlds: crate::run::plan::Worlds::Live,
        };
        let period = |quick| {
            Plan::new(&exp, &opts(quick))
                .unwrap()
                .exp
                .load
                .burst
                .unwrap()
                .period_s
        };
        assert_eq!(period(false), 100.0);
        assert_eq!(period(true), 10.0);
    }
}
