//! Runs the tier experiment ([`crate::model::tier`]): emulated nodes on fresh loopback ports,
//! and for each measurement a tier of K switches on 127.0.0.(10+i), one port for all, each under
//! its own CPU quota, driven by one load generator spreading its connections over the tier as a
//! DNS round-robin client does (`BenchConfig::targets`).
//!
//! Inside: [`switches`] starts and stops a tier of switches (configs, quotas, the `[tier]`
//! support check); this module runs the measurements with it: capacity against K, the cache
//! variants and the kill on nodes that keep the whole tree in memory (so the switches, not the
//! nodes, limit them), then the policies' local and shared views on slower, unequal nodes.

mod switches;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use capstan_bench::{BenchConfig, Engine, RunResult, Source, Target};
use capstan_workload::{DocTree, Popularity, TreeKind};

use crate::model::error::LabError;
use crate::model::tier::{
    median, settle_time, CacheRow, CapacityRow, KillResult, MirrorRow, Scale, SimMirror, TierPlan,
    TierResults, ViewRow, ViewsResult, NAME,
};
use crate::procs::cluster::{self, NodeArgs, NodeSpec, Proc};
use switches::{CacheMode, Tier};

/// How a tier run is made.
#[derive(Debug, Clone)]
pub struct TierOptions {
    pub scale: Scale,
    /// The `capstan` binary for the nodes and the switches.
    pub exe: PathBuf,
    /// Logs and configs go here.
    pub work_dir: PathBuf,
    /// The command line, for the report.
    pub command: String,
    /// Also run the views in the simulator's tier model (`--engine both`).
    pub with_sim: bool,
}

/// The emulated nodes every tier is put in front of.
struct Nodes {
    /// (name, address, report address); dropping `procs` kills them.
    list: Vec<(String, SocketAddr, SocketAddr)>,
    _procs: Vec<Proc>,
}

impl Nodes {
    /// Requests the nodes have served so far (their load reports' `served`).
    async fn served(&self) -> Result<u64, LabError> {
        let mut total = 0;
        for (name, _, report) in &self.list {
            let r = cluster::load_report(*report)
                .await
                .map_err(|e| LabError::Run(format!("{name}'s load report: {e}")))?;
            total += r.served;
        }
        Ok(total)
    }
}

/// Runs capacity, cache and kill measurements; the results with findings.
pub async fn run_tier(opts: &TierOptions, say: &dyn Fn(String)) -> Result<TierResults, LabError> {
    let plan = TierPlan::new(opts.scale);
    std::fs::create_dir_all(&opts.work_dir)
        .map_err(|e| LabError::Run(format!("cannot create {}: {e}", opts.work_dir.display())))?;
    let tree = DocTree::generate(TreeKind::Polygraph, plan.seed, Some(plan.files))
        .map_err(|e| LabError::Run(e.to_string()))?;
    // The cache runs' nodes keep the whole tree in memory: fast enough that the switches and
    // their caches, not the nodes' disks, are what the runs measure.
    let speeds = vec![1.0; plan.nodes];
    let nodes = start_nodes(&plan, opts, "nodes", &speeds, Some(1.0)).await?;
    let port = switches::common_port(*plan.switches.iter().max().unwrap_or(&1))?;
    let (tier_supported, tier_check) =
        switches::check_support(&opts.exe, &opts.work_dir, &nodes.list);
    say(format!(
        "[tier] peers in this build: {}",
        if tier_supported { "yes" } else { "no" }
    ));
    let quota = switches::probe_quota(plan.quota_cpus);
    say(format!("CPU quota per switch: {}", quota.detail));
    let ctx = Ctx {
        plan: &plan,
        opts,
        nodes: &nodes,
        port,
        quota: quota.applied,
    };
    let capacity = ctx.capacity(&tree, say).await?;
    let cache = ctx.cache(tier_supported, say).await?;
    let kill = ctx.kill(tier_supported, say).await?;
    drop(nodes);
    let views = match tier_supported {
        true => Some(views(&plan, opts, port, quota.applied, say).await?),
        false => None,
    };
    let mut results = TierResults {
        name: NAME.into(),
        title: "A tier of switches: capacity, one cache, a switch killed".into(),
        command: opts.command.clone(),
        plan: plan.clone(),
        quota,
        tier_supported,
        tier_check,
        capacity,
        cache,
        kill: Some(kill),
        views,
        sim: None,
        not_measured: not_measured(tier_supported),
        findings: Vec::new(),
    };
    if opts.with_sim {
        if let Some(v) = &results.views {
            say("sim: the views runs in the simulator's tier model".into());
            results.sim = Some(mirror_in_sim(v)?);
        }
    }
    results.findings = crate::model::tier::findings(&results);
    Ok(results)
}

/// The policies that read counts, with both views, in `capstan sim tier` at the lab's K, node
/// count and load, with a service time that gives the simulated nodes the lab's capacity.
fn mirror_in_sim(v: &ViewsResult) -> Result<SimMirror, LabError> {
    let runs = [
        ("least-connections", "local", "least-connections"),
        (
            "least-connections",
            "shared",
            "least-connections:view=shared",
        ),
        ("join-idle-queue", "local", "join-idle-queue:view=local"),
        ("join-idle-queue", "shared", "join-idle-queue"),
    ];
    let policies = (runs.iter())
        .map(|(_, _, spec)| capstan_sim::PolicyChoice::parse(spec))
        .collect::<Result<Vec<_>, _>>()
        .map_err(LabError::Run)?;
    let nodes = v.node_speeds.len();
    let exp = capstan_sim::tier::TierExperiment {
        nodes,
        dispatchers: vec![v.switches],
        loads: vec![(v.rate / v.capacity_rps.max(1e-9)).clamp(0.01, 0.99)],
        policies,
        gossip_periods_s: vec![0.1],
        service_ms: 1000.0 * nodes as f64 / v.capacity_rps.max(1e-9),
        jobs_per_node: 5000,
        warmup: 0.1,
        replications: 3,
        seed: 1,
        threads: 2,
    };
    let (report, _) = exp.run(&|_, _| {}).map_err(LabError::Run)?;
    let rows: Vec<MirrorRow> = (runs.iter())
        .map(|(policy, view, _)| {
            let lab = (v.rows.iter()).find(|r| r.policy == *policy && r.view == *view);
            let sim = (report.series.iter())
                .find(|s| s.view == *view && s.policy.starts_with(policy))
                .and_then(|s| s.points.first());
            MirrorRow {
                policy: policy.to_string(),
                view: view.to_string(),
                lab_p90_ms: lab.map_or(0.0, |r| r.p90_ms),
                sim_p90_ms: sim.map_or(0.0, |p| round3(p.p90.value)),
            }
        })
        .collect();
    Ok(SimMirror {
        dispatchers: exp.dispatchers[0],
        nodes,
        load: exp.loads[0],
        service_ms: round3(exp.service_ms),
        jobs_per_node: exp.jobs_per_node,
        replications: exp.replications,
        agreement: crate::model::tier::mirror_agreement(&rows),
        rows,
    })
}

/// The measurements this experiment leaves for later, said rather than faked.
fn not_measured(tier_supported: bool) -> Vec<String> {
    let mut v = Vec::new();
    if !tier_supported {
        v.push(
            "p90 of CAP, LARD, least-connections and join-idle-queue with local against shared \
             views: this build's switch does not take [tier], so there is no shared view."
                .into(),
        );
    }
    v.push(
        "Capacity and the cache in the simulator: its tier model has no switch CPU and no cache, \
         so `--engine both` mirrors only the policies' views (and `capstan sim tier` goes on to \
         K = 64 and 1,000 nodes, which one 2-core machine cannot host)."
            .into(),
    );
    v
}

/// The policies CAP, LARD, least-connections and join-idle-queue on a tier of `cache_switches`
/// switches without a cache, in front of unequal nodes: each with every switch's local view and
/// with the tier's shared view, at one open-loop rate below the nodes' calibrated capacity.
async fn views(
    plan: &TierPlan,
    opts: &TierOptions,
    port: u16,
    quota: bool,
    say: &dyn Fn(String),
) -> Result<ViewsResult, LabError> {
    let speeds = plan.views_node_speeds.clone();
    let nodes = start_nodes(plan, opts, "view-nodes", &speeds, None).await?;
    let ctx = Ctx {
        plan,
        opts,
        nodes: &nodes,
        port,
        quota,
    };
    let k = plan.cache_switches;
    let calibrate = CacheMode::Policy {
        policy: "least-connections",
        view: None,
    };
    let tier = ctx.tier(1, calibrate, k as f64, "views-calibrate").await?;
    let mut cfg = ctx.mix_load(&tier, plan.calibrate_s)?;
    cfg.engine = Engine::Closed {
        clients: 8 * speeds.len(),
        think: None,
    };
    let capacity = run_load(cfg).await?.completed_rps;
    drop(tier);
    let rate = (plan.views_load * capacity).max(1.0).round();
    say(format!(
        "views: nodes of speeds {speeds:?} take {capacity:.0} responses/s; each policy at {rate:.0}/s"
    ));
    let runs: [(&'static str, Option<&'static str>); 7] = [
        ("cap", None),
        ("lard", Some("local")),
        ("lard", Some("shared")),
        ("least-connections", Some("local")),
        ("least-connections", Some("shared")),
        ("join-idle-queue", Some("local")),
        ("join-idle-queue", Some("shared")),
    ];
    let mut rows = Vec::new();
    for (policy, view) in runs {
        let label = format!("views-{policy}-{}", view.unwrap_or("none"));
        say(format!("views: {policy}, view {}", view.unwrap_or("-")));
        let tier = ctx
            .tier(k, CacheMode::Policy { policy, view }, 1.0, &label)
            .await?;
        let mut cfg = ctx.mix_load(&tier, plan.views_s)?;
        cfg.engine = Engine::Open { rate };
        let r = run_load(cfg).await?;
        let l = &r.latency_ms.corrected;
        rows.push(ViewRow {
            policy: policy.into(),
            view: view.unwrap_or("-").into(),
            offered: r.offered,
            responses: r.completed,
            errors: r.errors_total,
            p50_ms: l.p50,
            p90_ms: l.p90,
            p99_ms: l.p99,
        });
    }
    Ok(ViewsResult {
        switches: k,
        node_speeds: speeds,
        capacity_rps: round3(capacity),
        rate,
        rows,
    })
}

/// Emulated nodes of `speeds`, logs in `dir` under the work folder; `cache_fraction` as
/// `capstan origin --cache-fraction` (None: its default).
async fn start_nodes(
    plan: &TierPlan,
    opts: &TierOptions,
    dir: &str,
    speeds: &[f64],
    cache_fraction: Option<f64>,
) -> Result<Nodes, LabError> {
    let args = NodeArgs {
        tree: TreeKind::Polygraph.name().into(),
        files: Some(plan.files),
        seed: plan.seed,
        cpu_light_ms: None,
        cpu_med_ms: None,
        disk_load_ms: None,
        cache_fraction,
        threads: 2,
        load_interval_ms: 1000,
        remote_penalty: None,
        config: None,
        register: None,
    };
    let dir = opts.work_dir.join(dir);
    std::fs::create_dir_all(&dir)
        .map_err(|e| LabError::Run(format!("cannot create {}: {e}", dir.display())))?;
    let (mut list, mut procs) = (Vec::new(), Vec::new());
    for (i, &speed) in speeds.iter().enumerate() {
        let spec = NodeSpec {
            name: format!("n{}", i + 1),
            speed,
            cores: 2,
            partition: None,
        };
        let (addr, report, proc) =
            cluster::start_node_on_fresh_ports(&opts.exe, &spec, &args, None, &dir).await?;
        list.push((spec.name, addr, report));
        procs.push(proc);
    }
    Ok(Nodes {
        list,
        _procs: procs,
    })
}

/// What every measurement shares.
struct Ctx<'a> {
    plan: &'a TierPlan,
    opts: &'a TierOptions,
    nodes: &'a Nodes,
    port: u16,
    quota: bool,
}

impl Ctx<'_> {
    /// A tier of `k` switches, each with `cpus` times the plan's quota.
    async fn tier(
        &self,
        k: usize,
        mode: CacheMode,
        cpus: f64,
        label: &str,
    ) -> Result<Tier, LabError> {
        let quota = self.quota.then_some(self.plan.quota_cpus * cpus);
        let dir = self.opts.work_dir.join(label);
        Tier::start(
            &self.opts.exe,
            k,
            self.port,
            mode,
            &self.nodes.list,
            self.plan.switch_threads,
            quota,
            &dir,
        )
        .await
    }

    /// Saturated throughput per tier size: closed-loop keep-alive clients asking for one
    /// small cached object, so each switch's own quota is what limits it.
    async fn capacity(
        &self,
        tree: &DocTree,
        say: &dyn Fn(String),
    ) -> Result<Vec<CapacityRow>, LabError> {
        let hot = small_cachable(tree)?;
        let mut rows: Vec<CapacityRow> = Vec::new();
        for &k in &self.plan.switches {
            let mode = CacheMode::Independent {
                mib: self.plan.cache_mib,
            };
            let tier = self.tier(k, mode, 1.0, &format!("capacity-k{k}")).await?;
            let clients = self.plan.clients_per_switch * k;
            say(format!(
                "capacity: {k} switch(es), {clients} clients, {hot}"
            ));
            let mut cfg = load(&tier, &hot)?;
            cfg.engine = Engine::Closed {
                clients,
                think: None,
            };
            cfg.threads = 2;
            cfg.duration = Duration::from_secs(self.plan.capacity_s);
            let r = run_load(cfg).await?;
            let one = rows.first().map_or(r.completed_rps, |r| r.responses_per_s);
            rows.push(CapacityRow {
                switches: k,
                clients,
                responses_per_s: r.completed_rps,
                ratio_to_k_times_one: round3(r.completed_rps / (k as f64 * one).max(1e-9)),
                errors: r.errors_total,
                p99_ms: r.latency_ms.corrected.p99,
                targets: r.targets.clone(),
                generator_cpu_percent: r.generator.cpu_percent_max,
                generator_limited: r.generator.limited,
            });
            drop(tier);
        }
        Ok(rows)
    }

    /// K independent caches, one cache of K times the memory, and the sharded tier, on the
    /// same Polygraph content mix: a fill window, then a measured one.
    async fn cache(&self, sharded: bool, say: &dyn Fn(String)) -> Result<Vec<CacheRow>, LabError> {
        let (k, m) = (self.plan.cache_switches, self.plan.cache_mib);
        let variants = [
            ("independent", k, CacheMode::Independent { mib: m }),
            ("one-big", 1, CacheMode::Independent { mib: m * k as u64 }),
            ("sharded", k, CacheMode::Sharded { mib: m }),
        ];
        let mut rows = Vec::new();
        for (name, switches, mode) in variants {
            let mut row = CacheRow {
                variant: name.into(),
                switches,
                cache_mib_each: mode.mib(),
                available: true,
                note: String::new(),
                offered: 0,
                responses: 0,
                errors: 0,
                node_requests: 0,
                dhr: 0.0,
            };
            if matches!(mode, CacheMode::Sharded { .. }) && !sharded {
                row.available = false;
                row.note = "not available in this build (its switch does not take [tier])".into();
                rows.push(row);
                continue;
            }
            say(format!(
                "cache: {name}, {switches} switch(es) of {} MiB",
                mode.mib()
            ));
            // One big cache gets the CPU of the K switches it stands for, as it gets their
            // memory: the variants differ in how the cache is split, not in CPU.
            let cpus = k as f64 / switches as f64;
            let tier = (self.tier(switches, mode, cpus, &format!("cache-{name}"))).await?;
            let mut cfg = self.mix_load(&tier, self.plan.fill_s)?;
            run_load(cfg.clone()).await?;
            let before = self.nodes.served().await?;
            cfg.duration = Duration::from_secs(self.plan.measure_s);
            cfg.seed += 1;
            let r = run_load(cfg).await?;
            let node_requests = self.nodes.served().await?.saturating_sub(before);
            row.offered = r.offered;
            row.responses = r.completed;
            row.errors = r.errors_total;
            row.node_requests = node_requests;
            row.dhr = round3(1.0 - node_requests as f64 / r.completed.max(1) as f64);
            rows.push(row);
            drop(tier);
        }
        Ok(rows)
    }

    /// The content-mix load on `tier`: open loop at the plan's rate, keep-alive.
    fn mix_load(&self, tier: &Tier, seconds: u64) -> Result<BenchConfig, LabError> {
        let mut cfg = load(tier, "/")?;
        cfg.engine = Engine::Open {
            rate: self.plan.cache_rate,
        };
        cfg.connections = 16 * tier.len();
        cfg.duration = Duration::from_secs(seconds);
        cfg.seed = self.plan.seed;
        cfg.source = Source::Mix {
            tree: TreeKind::Polygraph,
            tree_seed: self.plan.seed,
            files: Some(self.plan.files),
            popularity: Popularity::Zipf {
                alpha: self.plan.zipf,
            },
            recurrence: None,
        };
        Ok(cfg)
    }

    /// The content-mix load on the cache tier while its last switch is killed (SIGKILL)
    /// half-way; the nodes' request rate is sampled four times a second.
    async fn kill(&self, sharded: bool, say: &dyn Fn(String)) -> Result<KillResult, LabError> {
        let k = self.plan.cache_switches.max(2);
        let (variant, mode) = match sharded {
            true => (
                "sharded",
                CacheMode::Sharded {
                    mib: self.plan.cache_mib,
                },
            ),
            false => (
                "independent",
                CacheMode::Independent {
                    mib: self.plan.cache_mib,
                },
            ),
        };
        say(format!(
            "kill: {variant} tier of {k}, the last switch killed at {} s of {} s",
            self.plan.kill_at_s, self.plan.kill_s
        ));
        let mut tier = self.tier(k, mode, 1.0, "kill").await?;
        // Warm the caches first so the kill, not the cold start, shapes the node rate.
        run_load(self.mix_load(&tier, self.plan.fill_s)?).await?;
        let cfg = self.mix_load(&tier, self.plan.kill_s)?;
        let killed = tier.addresses().last().cloned().unwrap_or_default();
        let t0 = Instant::now();
        let kill_at = Duration::from_secs(self.plan.kill_at_s);
        let load_end = Duration::from_secs(self.plan.kill_s);
        let sampling = async {
            let mut samples = Vec::new();
            let mut last = (0.0, self.nodes.served().await?);
            let mut killed_at = None;
            while t0.elapsed() < load_end {
                tokio::time::sleep(Duration::from_millis(250)).await;
                if killed_at.is_none() && t0.elapsed() >= kill_at {
                    tier.kill_last();
                    killed_at = Some(t0.elapsed().as_secs_f64());
                }
                let (t, n) = (t0.elapsed().as_secs_f64(), self.nodes.served().await?);
                let rate = (n.saturating_sub(last.1)) as f64 / (t - last.0).max(1e-3);
                samples.push((round3(t), rate.round()));
                last = (t, n);
            }
            Ok::<_, LabError>((samples, killed_at.unwrap_or(kill_at.as_secs_f64())))
        };
        let (r, sampled) = tokio::join!(run_load(cfg), sampling);
        let (r, (node_rate, at_s)) = (r?, sampled?);
        let before: Vec<f64> = (node_rate.iter())
            .filter(|(t, _)| *t > 1.0 && *t < at_s)
            .map(|p| p.1)
            .collect();
        Ok(KillResult {
            variant: variant.into(),
            switches: k,
            killed,
            at_s: round3(at_s),
            errors: r.errors_total,
            responses: r.completed,
            targets: r.targets.clone(),
            node_rate_before: median(before).unwrap_or(0.0),
            settle_s: settle_time(&node_rate, at_s),
            node_rate,
            timeline: r.timeline.clone(),
        })
    }
}

/// A closed-loop keep-alive config for `path` spread over the tier's switches.
fn load(tier: &Tier, path: &str) -> Result<BenchConfig, LabError> {
    let first = tier.addresses().first().cloned().unwrap_or_default();
    let target = Target::parse(&format!("http://{first}{path}"))
        .map_err(|e| LabError::Run(e.to_string()))?;
    let mut cfg = BenchConfig::open(target, 1.0);
    cfg.keepalive = true;
    cfg.targets = tier.addresses().to_vec();
    cfg.connect_timeout = Duration::from_millis(500);
    cfg.timeout = Duration::from_secs(5);
    cfg.drain = Duration::from_secs(2);
    Ok(cfg)
}

async fn run_load(cfg: BenchConfig) -> Result<RunResult, LabError> {
    capstan_bench::run(cfg, None)
        .await
        .map_err(|e| LabError::Run(format!("the load failed: {e}")))
}

/// The smallest cachable object of the tree (the capacity runs' one object: all hits).
fn small_cachable(tree: &DocTree) -> Result<String, LabError> {
    (tree.files.iter())
        .filter(|f| f.cachable && f.size >= 512)
        .min_by_key(|f| f.size)
        .map(|f| f.path.clone())
        .ok_or_else(|| LabError::Run("the tree has no cachable object".into()))
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
