//! The lab's experiment in the simulator (`--engine sim` and `--engine both`): the experiment
//! translated into `capstan_sim::closed` terms, run per series and load level, and — with both
//! engines — set beside the live results with a per-policy agreement verdict.
//!
//! The translation is the smallest honest one: the same nodes (cores, speed, and the node model
//! `capstan origin` reads from `[nodes.origin]`), the same file list (every file of the tree at
//! its weight with its size, the CGI entries as the demands the origin spends on them), the same
//! closed-loop clients and think time, the same policy rows with their parameters, T_gat and the
//! switch's classes. Beside the lab ([`Shape::AsLab`]) each level also runs as the lab ran it:
//! its window, the generator's own request sequence, a drained warm-up, and the HTTP path the lab
//! measured on its cluster ([`crate::run::http_path`]). What the simulator has no model of — the
//! switch's and generator's CPU on shared cores, timer lateness — is left out, so the comparison
//! shows it.

use std::time::Instant;

use capstan_core::class::{Classifier, HeaderLookup, RequestFacts, RuleSpec};
use capstan_core::PolicySpec;
use capstan_sim::closed::{self, ClosedConfig, HttpPath, RequestType, Work};
use capstan_workload::{DocTree, TreeKind};

use crate::model::error::LabError;
use crate::model::experiment::{EngineKind, Experiment, WorkloadKind};
use crate::model::results::*;
use crate::run::plan::{filelist, Plan, SeriesPlan};

/// Agreement goal: simulator and lab within this fraction on throughput, mean and p90.
pub const TOLERANCE: f64 = 0.15;
/// The simulator's measured window is at least this long (it costs milliseconds), so its own
/// noise is small beside the lab's.
pub const MIN_WINDOW_S: f64 = 30.0;

/// Bytes of a CGI's answer (`cpu_light done: 40 ms of cpu on node1` and the like).
const CGI_ANSWER_BYTES: u64 = 48;

struct NoHeaders;
impl HeaderLookup for NoHeaders {
    fn header(&self, _: &str) -> Option<&str> {
        None
    }
}

/// Refuses what the simulator cannot run, in one line, before anything starts.
pub fn check(exp: &Experiment) -> Result<(), LabError> {
    let no = |why: &str| {
        Err(LabError::Experiment(format!(
            "{}: the simulator cannot run this experiment: {why}",
            exp.name
        )))
    };
    if exp.load.engine != EngineKind::Closed {
        return no("it runs closed-loop clients only (load.engine = \"closed\")");
    }
    if exp.workload.kind == WorkloadKind::Sessions {
        return no("it runs file lists and single URLs only, not sessions");
    }
    if exp.nodes.partition {
        return no("partitioned trees (NFS reads) are not modelled");
    }
    if exp.workload.secure.is_some() {
        return no("the secure class over TLS ([workload.secure], --secure-tls) is not modelled");
    }
    if let Some(o) = &exp.nodes.origin {
        if o.contains_key("process_limit") {
            return no("process-per-connection nodes are not modelled");
        }
    }
    Ok(())
}

/// The origin's configuration as the lab starts each node: `[nodes.origin]`, then the flags.
fn origin_config(
    exp: &Experiment,
    cores: u32,
    speed: f64,
) -> Result<capstan_origin::OriginConfig, LabError> {
    let mut c = match &exp.nodes.origin {
        Some(t) => t
            .clone()
            .try_into::<capstan_origin::OriginConfig>()
            .map_err(|e| LabError::Experiment(format!("nodes.origin: {}", e.message())))?,
        None => capstan_origin::OriginConfig::default(),
    };
    c.node.cores = cores;
    c.node.speed = speed;
    let n = &exp.nodes;
    if let Some(v) = n.cpu_light_ms {
        c.services.cpu_light_ms = v;
    }
    if let Some(v) = n.cpu_med_ms {
        c.services.cpu_med_ms = v;
    }
    if let Some(v) = n.disk_load_ms {
        c.services.disk_load_ms = v;
    }
    if let Some(v) = n.cache_fraction {
        c.node.cache_fraction = v;
    }
    if let Some(v) = n.remote_penalty {
        c.node.remote_penalty = v;
    }
    Ok(c)
}

fn classifier(exp: &Experiment) -> Result<Classifier, LabError> {
    if exp.switch.classes.is_empty() && exp.switch.rules.is_empty() {
        return Ok(Classifier::cap_defaults());
    }
    let bad = |e: String| LabError::Experiment(format!("switch classes: {e}"));
    let classes = exp
        .switch
        .classes
        .iter()
        .map(|t| {
            t.clone()
                .try_into()
                .map_err(|e: toml::de::Error| bad(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rules: Vec<RuleSpec> = exp
        .switch
        .rules
        .iter()
        .map(|t| {
            t.clone()
                .try_into()
                .map_err(|e: toml::de::Error| bad(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let default = exp.switch.default_class.as_deref().unwrap_or("static");
    Classifier::new(&classes, &rules, default).map_err(|e| bad(e.to_string()))
}

/// The document tree a series' nodes serve.
pub(crate) fn series_tree(plan: &Plan, s: &SeriesPlan) -> Result<DocTree, LabError> {
    let kind: TreeKind = s
        .tree
        .parse()
        .map_err(|e| LabError::Experiment(format!("{e}")))?;
    DocTree::generate(kind, plan.seed, plan.exp.nodes.files)
        .map_err(|e| LabError::Experiment(e.to_string()))
}

/// The request list of a series: what each path costs on the origin, and its switch class.
fn requests(
    plan: &Plan,
    s: &SeriesPlan,
    services: &capstan_origin::Services,
    classes: &Classifier,
) -> Result<(Vec<RequestType>, u64), LabError> {
    let exp = &plan.exp;
    let tree = series_tree(plan, s)?;
    let list: Vec<(String, u64)> = match exp.workload.kind {
        WorkloadKind::Url => vec![(exp.workload.url.clone().unwrap_or_else(|| "/".into()), 1)],
        _ => filelist(&s.tree, plan.seed, exp.nodes.files, &s.dynamic)?
            .entries
            .into_iter()
            .map(|e| (e.path, e.weight))
            .collect(),
    };
    let mut out = Vec::with_capacity(list.len());
    for (full, weight) in list {
        let (path, query) = match full.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (full.as_str(), None),
        };
        let work = match path {
            "/cgi-bin/cpu_light.cgi" => Work::Cpu {
                seconds: services.cpu_light_ms / 1e3,
                bytes: CGI_ANSWER_BYTES,
            },
            "/cgi-bin/cpu_med.cgi" => Work::Cpu {
                seconds: services.cpu_med_ms / 1e3,
                bytes: CGI_ANSWER_BYTES,
            },
            "/cgi-bin/disk_load.cgi" => Work::Disk {
                seconds: services.disk_load_ms / 1e3,
                bytes: CGI_ANSWER_BYTES * 2,
            },
            p => match tree.position(p) {
                Some(i) => Work::Static {
                    object: i as u64,
                    bytes: tree.files[i].size,
                },
                None => {
                    return Err(LabError::Experiment(format!(
                        "the simulator has no model of {full:?} (tree files and the thesis's CGIs only)"
                    )))
                }
            },
        };
        let class = classes.classify(&RequestFacts {
            method: "GET",
            path,
            query,
            headers: &NoHeaders,
            // The lab's clients speak plain HTTP to the switch.
            tls: false,
            sni: None,
        });
        out.push(RequestType {
            key: path.to_string(),
            class,
            weight,
            work,
        });
    }
    Ok((out, tree.total_bytes()))
}

/// The policy of a row as the switch builds it (with the tree's sizes when the experiment
/// hands them to it).
fn policy(plan: &Plan, s: &SeriesPlan) -> Result<PolicySpec, LabError> {
    let mut table = s.row.table.clone();
    table.remove("name");
    let exp = &plan.exp;
    if let Some(param) = exp.switch.tree_sizes.get(s.row.name()) {
        let t = series_tree(plan, s)?;
        let sizes: toml::Table = t
            .files
            .iter()
            .map(|f| (f.path.clone(), toml::Value::Integer(f.size as i64)))
            .collect();
        table.insert(param.clone(), sizes.into());
    }
    PolicySpec::new(s.row.name(), table)
        .map_err(|e| LabError::Experiment(e.to_string().replace('\n', " ")))
}

/// The model's time for a file already in a node's memory cache, on an idle node: what the
/// HTTP path probe subtracts from the lab's response to find the path.
pub struct CachedFileModel {
    nodes: Vec<capstan_model::NodeParams>,
    tree_bytes: u64,
}

impl CachedFileModel {
    pub fn new(plan: &Plan, s: &SeriesPlan) -> Result<CachedFileModel, LabError> {
        let nodes = s
            .nodes
            .iter()
            .map(|n| origin_config(&plan.exp, n.cores, n.speed).map(|c| c.node))
            .collect::<Result<Vec<_>, _>>()?;
        let tree = series_tree(plan, s)?;
        Ok(CachedFileModel {
            nodes,
            tree_bytes: tree.total_bytes(),
        })
    }

    /// The smallest node's memory cache, bytes.
    pub fn cache_bytes(&self) -> u64 {
        self.nodes
            .iter()
            .map(|n| n.cache_bytes(self.tree_bytes))
            .min()
            .unwrap_or(0)
    }

    /// Seconds to serve a cached file of `bytes`, averaged over the nodes (the probe's requests
    /// spread over them): its CPU and memory copy at the node's speed, then its NIC time.
    pub fn time_s(&self, bytes: u64) -> f64 {
        let one = |n: &capstan_model::NodeParams| {
            n.static_file(bytes, true).cpu_s / n.speed + n.nic.transmit_time_s(bytes)
        };
        self.nodes.iter().map(one).sum::<f64>() / self.nodes.len().max(1) as f64
    }
}

/// How the simulator runs the plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    /// The model alone (`--engine sim`): windows of at least `MIN_WINDOW_S`, each client its
    /// own request stream, no HTTP path.
    Model,
    /// Beside the lab (`--engine both`): each level as the lab runs it — the lab's window, the
    /// generator's own request sequence (its seed and stream), every client starting at once on
    /// idle nodes after a warm-up as long as the lab's nodes had run before that level — and
    /// the HTTP path the lab measured.
    AsLab(HttpPath),
}

/// Runs every series and level of the plan in the simulator, shaped by `shape`. Returns the
/// series (shaped as the lab's) and the events simulated.
pub fn run(plan: &Plan, shape: Shape) -> Result<SimWorld, LabError> {
    check(&plan.exp)?;
    let t0 = Instant::now();
    let exp = &plan.exp;
    let classes = classifier(exp)?;
    let class_names: Vec<String> = classes.classes().iter().map(|c| c.name.clone()).collect();
    let gather = crate::model::experiment::parse_duration(
        "switch.load_interval",
        &exp.switch.load_interval,
    )?;
    let window = match shape {
        Shape::Model => plan.duration.as_secs_f64().max(MIN_WINDOW_S),
        Shape::AsLab(_) => plan.duration.as_secs_f64(),
    };
    let mut events = 0;
    let mut series = Vec::new();
    for s in &plan.series {
        let node_cfgs = s
            .nodes
            .iter()
            .map(|n| origin_config(exp, n.cores, n.speed))
            .collect::<Result<Vec<_>, _>>()?;
        let (reqs, tree_bytes) = requests(plan, s, &node_cfgs[0].services, &classes)?;
        let spec = policy(plan, s)?;
        let mut runs = Vec::new();
        for rep in 0..plan.repetitions {
            for (i, &level) in plan.levels.iter().enumerate() {
                let seed = crate::run::plan::window_seed(plan.seed, rep);
                let (warmup_s, draws, http_path) = match shape {
                    Shape::Model => (
                        plan.warmup.as_secs_f64().max(1.0),
                        closed::Draws::PerClient,
                        HttpPath::default(),
                    ),
                    Shape::AsLab(path) => (
                        plan.warmup.as_secs_f64() + i as f64 * plan.duration.as_secs_f64(),
                        as_bench(exp, seed),
                        path,
                    ),
                };
                let cfg = ClosedConfig {
                    nodes: node_cfgs.iter().map(|c| c.node.clone()).collect(),
                    node_names: s.nodes.iter().map(|n| n.name.clone()).collect(),
                    tree_bytes,
                    requests: reqs.clone(),
                    classes: class_names.clone(),
                    policy: spec.clone(),
                    gather_interval_s: gather.as_secs_f64(),
                    clients: (level.round() as usize).max(1),
                    think_mean_s: exp.load.think_ms / 1e3,
                    warmup_s,
                    duration_s: window,
                    seed,
                    http_path,
                    draws,
                };
                let r = closed::run(&cfg).map_err(LabError::Run)?;
                events += r.events;
                runs.push(record(s, level, rep, window, &r, &reqs));
            }
        }
        series.push(SeriesResult {
            label: s.label.clone(),
            policy: s.policy.clone(),
            variant: s.variant.clone(),
            nodes: s.nodes.len(),
            speeds: s.nodes.iter().map(|n| n.speed).collect(),
            cores: s.nodes.first().map_or(1, |n| n.cores),
            switch_threads: s.switch_threads,
            points: crate::model::results::points(&plan.levels, &runs),
            runs,
        });
    }
    Ok(SimWorld {
        window_s: window,
        events,
        wall_s: round(t0.elapsed().as_secs_f64(), 2),
        series,
    })
}

/// The generator's request sequence for a level run with `seed` (and its warm-up run's), when
/// it draws one sequence for all clients (one generator thread); else each client its own.
fn as_bench(exp: &Experiment, seed: u64) -> closed::Draws {
    if exp.load.generator_threads > 1 {
        return closed::Draws::PerClient;
    }
    closed::Draws::AsBench {
        seed,
        warmup_seed: seed ^ 0x5eed,
    }
}

fn record(
    s: &SeriesPlan,
    level: f64,
    rep: usize,
    window: f64,
    r: &closed::ClosedResult,
    reqs: &[RequestType],
) -> RunRecord {
    let nodes: Vec<NodeRecord> = s
        .nodes
        .iter()
        .zip(&r.nodes)
        .map(|(spec, u)| NodeRecord {
            name: spec.name.clone(),
            speed: spec.speed,
            served: u.served,
            cpu_util: round(u.cpu.clamp(0.0, 1.0), 4),
            disk_util: round(u.disk.clamp(0.0, 1.0), 4),
            nic_util: round(u.nic.clamp(0.0, 1.0), 4),
            util: round(u.cpu.max(u.disk).max(u.nic).clamp(0.0, 1.0), 4),
            ..NodeRecord::default()
        })
        .collect();
    let util_min = nodes.iter().map(|n| n.util).fold(f64::INFINITY, f64::min);
    let util_max = nodes.iter().map(|n| n.util).fold(0.0, f64::max);
    let count = r.latencies_s.len() as u64;
    RunRecord {
        level,
        repetition: rep,
        duration_s: window,
        completed: count,
        throughput_rps: round(r.throughput, 2),
        latency_ms: capstan_bench::Percentiles {
            count,
            min: r.quantile_ms(0.0),
            mean: r.mean_ms(),
            p50: r.quantile_ms(0.5),
            p90: r.quantile_ms(0.9),
            p99: r.quantile_ms(0.99),
            p999: r.quantile_ms(0.999),
            max: r.quantile_ms(1.0),
            ..Default::default()
        },
        per_class: per_class(reqs, r),
        nodes,
        util_min: if util_min.is_finite() { util_min } else { 0.0 },
        util_max,
        ..RunRecord::default()
    }
}

/// Response times per class as the lab's generator groups them (a CGI's name, else the
/// file's extension), so the two worlds compare class by class.
fn per_class(
    reqs: &[RequestType],
    r: &closed::ClosedResult,
) -> std::collections::BTreeMap<String, ClassLatency> {
    let mut groups: std::collections::BTreeMap<String, Vec<f64>> = Default::default();
    for (rt, samples) in reqs.iter().zip(&r.latencies_by_type_s) {
        let group = groups
            .entry(capstan_bench::source::extension_group(&rt.key))
            .or_default();
        group.extend(samples.iter().map(|s| s * 1e3));
    }
    groups
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(name, mut v)| {
            v.sort_by(f64::total_cmp);
            let q = |p: f64| v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
            let latency = ClassLatency {
                requests: v.len() as u64,
                errors: 0,
                mean_ms: round(v.iter().sum::<f64>() / v.len() as f64, 3),
                p50_ms: round(q(0.5), 3),
                p90_ms: round(q(0.9), 3),
                p99_ms: round(q(0.99), 3),
            };
            (name, latency)
        })
        .collect()
}

/// What a difference in this direction is most likely made of (the report's paragraph lists
/// every cause; this names the one that fits the sign).
fn why(metric: &str, diff_pct: f64) -> &'static str {
    let sim_faster = if metric == "throughput" {
        diff_pct > 0.0
    } else {
        diff_pct < 0.0
    };
    if sim_faster {
        " — the simulator is faster: under load the lab's requests also wait for this \
         machine's shared cores (switch, generator, nodes), which the model and the one-client \
         path probe leave out"
    } else {
        " — the simulator is slower: the lab's node timers or its short window's few responses \
         in the tail"
    }
}

fn diff_pct(live: f64, sim: f64) -> f64 {
    if live.abs() < 1e-12 {
        return if sim.abs() < 1e-12 { 0.0 } else { 100.0 };
    }
    round(100.0 * (sim - live) / live, 1)
}

/// Per series and level, the two worlds side by side, and a verdict per series.
pub fn agreement(live: &[SeriesResult], sim: &[SeriesResult]) -> Vec<Agreement> {
    let mut out = Vec::new();
    for l in live {
        let Some(s) = sim.iter().find(|s| s.label == l.label) else {
            continue;
        };
        let mut rows = Vec::new();
        for lp in &l.points {
            let Some(sp) = s.points.iter().find(|p| p.level == lp.level) else {
                continue;
            };
            let utils = |sr: &SeriesResult| -> Vec<f64> {
                let runs: Vec<&RunRecord> =
                    sr.runs.iter().filter(|r| r.level == lp.level).collect();
                let n = runs.first().map_or(0, |r| r.nodes.len());
                (0..n)
                    .map(|i| {
                        let v: Vec<f64> = runs
                            .iter()
                            .filter_map(|r| r.nodes.get(i))
                            .map(|x| x.util)
                            .collect();
                        round(mean_stdev(&v).0, 3)
                    })
                    .collect()
            };
            rows.push(AgreementRow {
                level: lp.level,
                live_throughput: lp.throughput_mean,
                sim_throughput: sp.throughput_mean,
                throughput_diff_pct: diff_pct(lp.throughput_mean, sp.throughput_mean),
                live_mean_ms: lp.mean_ms,
                sim_mean_ms: sp.mean_ms,
                mean_diff_pct: diff_pct(lp.mean_ms, sp.mean_ms),
                live_p90_ms: lp.p90_ms,
                sim_p90_ms: sp.p90_ms,
                p90_diff_pct: diff_pct(lp.p90_ms, sp.p90_ms),
                live_util: utils(l),
                sim_util: utils(s),
            });
        }
        let worst = rows
            .iter()
            .flat_map(|r| {
                [
                    ("throughput", r.throughput_diff_pct),
                    ("mean", r.mean_diff_pct),
                    ("p90", r.p90_diff_pct),
                ]
                .map(|(m, d)| (m, d, r.level))
            })
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()));
        let (verdict, worst_text) = match worst {
            Some((m, d, level)) => {
                let agree = d.abs() <= 100.0 * TOLERANCE;
                let mut text = format!(
                    "largest difference: {m} {d:+.1} % at {}",
                    crate::model::results::fmt_level(level)
                );
                if !agree {
                    text.push_str(why(m, d));
                }
                (if agree { "agree" } else { "disagree" }, text)
            }
            None => ("no data", String::new()),
        };
        out.push(Agreement {
            series: l.label.clone(),
            tolerance_pct: 100.0 * TOLERANCE,
            verdict: verdict.into(),
            worst: worst_text,
            rows,
        });
    }
    out
}

/// Results of a simulator-only run (`--engine sim`), shaped as a lab run's.
pub fn sim_only_results(plan: &Plan, o: &crate::run::plan::Options, world: SimWorld) -> LabResults {
    let exp = &plan.exp;
    LabResults {
        schema: SCHEMA.into(),
        experiment: exp.name.clone(),
        title: exp.title.clone(),
        figure: exp.figure.clone(),
        about: exp.about.clone(),
        command: o.command.clone(),
        versions: crate::run::plan::versions(),
        quick: plan.quick,
        seed: plan.seed,
        started_unix_ms: 0,
        wall_s: world.wall_s,
        engine: format!("{:?}", exp.load.engine).to_lowercase(),
        x_label: plan.x_label().into(),
        levels: plan.levels.clone(),
        duration_s: world.window_s,
        repetitions: plan.repetitions,
        headline: None,
        capacity_rps: None,
        series: world.series,
        paper: None,
        findings: Vec::new(),
        warnings: Vec::new(),
        worlds: "sim".into(),
        sim: None,
        agreement: Vec::new(),
        http_path: None,
        figures: Default::default(),
    }
}

/// Adds the simulator's run and the agreement to a live run's results.
pub fn attach(results: &mut LabResults, world: SimWorld) {
    results.agreement = agreement(&results.series, &world.series);
    results.worlds = "both".into();
    results.sim = Some(world);
}
