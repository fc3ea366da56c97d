//! Runs the churn experiment ([`crate::model::churn`]): the same open-loop load twice, once on
//! a cluster whose nodes never change (`[[node]]`s) and once on one that takes its nodes from a
//! `[[discovery]]` file the lab rewrites as its schedule says, then lines up the seconds around
//! each change.
//!
//! A node leaves the way a careful deploy takes it out: off the registry first, then — once the
//! switch's `/status` no longer lists it, plus a moment for answers in flight — stopped. A new
//! node is started and ready before it is registered.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use capstan_bench::{BenchConfig, RunResult, Target};
use capstan_workload::ArrivalKind;

use crate::model::churn::{Change, ChangeResult, ChurnPlan, ChurnResults, MembershipRun, NAME};
use crate::model::error::LabError;
use crate::procs::cluster::{self, NodeArgs, NodeSpec, Proc};

/// How a churn run is made.
#[derive(Debug, Clone)]
pub struct ChurnOptions {
    pub quick: bool,
    /// The `capstan` binary for the nodes and the switch.
    pub exe: PathBuf,
    /// Logs and the node list go here.
    pub work_dir: PathBuf,
    /// The command line, for the report.
    pub command: String,
}

/// How long a removed node is left running after the switch stopped listing it, for answers
/// still on their way (the demand is a few milliseconds).
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// How long the lab waits for the switch to show a change before calling the run failed.
const APPLY_DEADLINE: Duration = Duration::from_secs(15);

/// Runs both memberships and compares them.
pub async fn run_churn(
    opts: &ChurnOptions,
    say: &dyn Fn(String),
) -> Result<ChurnResults, LabError> {
    let plan = ChurnPlan::new(opts.quick);
    say(format!(
        "static membership: {} nodes, {} requests/s for {} s",
        plan.nodes, plan.rate, plan.duration_s
    ));
    let (static_run, _) = run_membership(&plan, opts, false, say).await?;
    say("discovery: the same load while nodes join and leave".into());
    let (discovery_run, mut changes) = run_membership(&plan, opts, true, say).await?;
    for c in &mut changes {
        let (errors, p99) = window_figures(&static_run.timeline, c.window);
        c.static_errors = errors;
        c.static_p99_ms = p99;
    }
    let findings = findings(&static_run, &discovery_run, &changes);
    Ok(ChurnResults {
        name: NAME.into(),
        title: "Churn: nodes joining and leaving under load".into(),
        command: opts.command.clone(),
        quick: opts.quick,
        plan,
        runs: vec![static_run, discovery_run],
        changes,
        findings,
    })
}

/// The node list the switch follows: a JSON file written atomically, or broken on purpose.
struct Registry {
    path: PathBuf,
}

impl Registry {
    fn write(&self, nodes: &[Node]) -> Result<(), LabError> {
        let entries: Vec<serde_json::Value> = nodes
            .iter()
            .map(|n| serde_json::json!({"address": n.addr.to_string(), "name": n.name}))
            .collect();
        let text = serde_json::json!({ "nodes": entries }).to_string();
        self.replace(&text)
    }

    /// Temp file and rename, as a deploy tool should.
    fn replace(&self, text: &str) -> Result<(), LabError> {
        let temp = self.path.with_extension("tmp");
        std::fs::write(&temp, text)
            .and_then(|()| std::fs::rename(&temp, &self.path))
            .map_err(|e| LabError::Run(format!("cannot write {}: {e}", self.path.display())))
    }

    /// The outage: first a half-written list, then no file at all.
    fn break_down(&self, half_way: bool) -> Result<(), LabError> {
        match half_way {
            true => self.replace("{\"nodes\": [{\"address\": \"127.0.0.1:"),
            false => std::fs::remove_file(&self.path)
                .map_err(|e| LabError::Run(format!("cannot remove {}: {e}", self.path.display()))),
        }
    }
}

/// One running node.
struct Node {
    name: String,
    addr: SocketAddr,
    /// Held, never read: dropping the node stops its process.
    _process: Proc,
}

/// Everything one membership run holds.
struct Run<'a> {
    opts: &'a ChurnOptions,
    log_dir: PathBuf,
    nodes: Vec<Node>,
    started: usize,
    admin: SocketAddr,
    registry: Option<Registry>,
}

impl Run<'_> {
    async fn start_node(&mut self) -> Result<Node, LabError> {
        self.started += 1;
        let spec = NodeSpec {
            name: format!("n{}", self.started),
            speed: 1.0,
            cores: 2,
            partition: None,
        };
        let (addr, _report, proc) = cluster::start_node_on_fresh_ports(
            &self.opts.exe,
            &spec,
            &node_args(),
            None,
            &self.log_dir,
        )
        .await?;
        Ok(Node {
            name: spec.name,
            addr,
            _process: proc,
        })
    }

    /// Registers the current nodes and waits until the switch lists exactly them.
    async fn publish(&mut self) -> Result<f64, LabError> {
        let registry = self.registry.as_ref().expect("a discovery run");
        let t = Instant::now();
        registry.write(&self.nodes)?;
        let wanted: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("lab-{}", n.name))
            .collect();
        wait_for_nodes(self.admin, &wanted).await?;
        Ok(t.elapsed().as_secs_f64())
    }

    /// Takes the node at `index` out: off the registry, drained, stopped.
    async fn retire(&mut self, index: usize) -> Result<f64, LabError> {
        let node = self.nodes.remove(index);
        let applied = self.publish().await?;
        tokio::time::sleep(DRAIN_GRACE).await;
        drop(node);
        Ok(applied)
    }

    /// Makes one change; returns the seconds until the switch showed it.
    async fn change(&mut self, change: Change) -> Result<f64, LabError> {
        match change {
            Change::ScaleOut { nodes } => {
                for _ in 0..nodes {
                    let node = self.start_node().await?;
                    self.nodes.push(node);
                }
                self.publish().await
            }
            Change::ScaleIn { nodes } => {
                let mut applied = 0.0;
                for _ in 0..nodes.min(self.nodes.len().saturating_sub(1)) {
                    applied += self.retire(self.nodes.len() - 1).await?;
                }
                Ok(applied)
            }
            Change::RollingRestart => {
                let mut applied = 0.0;
                for _ in 0..self.nodes.len() {
                    applied += self.retire(0).await?;
                    let node = self.start_node().await?;
                    self.nodes.push(node);
                    applied += self.publish().await?;
                }
                Ok(applied)
            }
            Change::RegistryOutage { seconds } => {
                let registry = self.registry.as_ref().expect("a discovery run");
                let failures = source_state(self.admin).await?.1;
                registry.break_down(true)?;
                // The switch must see the outage (or the run shows nothing).
                wait_for_source(self.admin, |state, n| state == "error" && n > failures).await?;
                tokio::time::sleep(Duration::from_secs(seconds) / 2).await;
                registry.break_down(false)?;
                tokio::time::sleep(Duration::from_secs(seconds) / 2).await;
                let names: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| format!("lab-{}", n.name))
                    .collect();
                // The switch kept its nodes all along; the list comes back unchanged.
                wait_for_nodes(self.admin, &names).await?;
                self.publish().await
            }
        }
    }
}

fn node_args() -> NodeArgs {
    NodeArgs {
        tree: "webstone".into(),
        files: None,
        seed: 1,
        cpu_light_ms: None,
        cpu_med_ms: None,
        disk_load_ms: None,
        cache_fraction: None,
        threads: 2,
        load_interval_ms: 1000,
        remote_penalty: None,
        config: None,
    }
}

/// The switch's configuration: least-connections over `[[node]]`s, or over the registry.
fn switch_config(nodes: &[Node], registry: Option<&Registry>, plan: &ChurnPlan) -> toml::Table {
    let mut text =
        String::from("[policy]\nname = \"least-connections\"\n[admission]\nlimit = \"off\"\n");
    match registry {
        Some(r) => text.push_str(&format!(
            "[[discovery]]\nname = \"lab\"\nfile = \"{}\"\ninterval = \"{}ms\"\n",
            r.path.display(),
            plan.interval_ms
        )),
        None => {
            for n in nodes {
                text.push_str(&format!(
                    "[[node]]\nname = \"lab-{}\"\naddress = \"{}\"\n",
                    n.name, n.addr
                ));
            }
        }
    }
    toml::from_str(&text).expect("the lab's own switch configuration parses")
}

/// One membership: its totals and timeline, and (with discovery) what each change did.
async fn run_membership(
    plan: &ChurnPlan,
    opts: &ChurnOptions,
    discovery: bool,
    say: &dyn Fn(String),
) -> Result<(MembershipRun, Vec<ChangeResult>), LabError> {
    let label = if discovery { "discovery" } else { "static" };
    let log_dir = opts.work_dir.join(format!("churn-{label}"));
    std::fs::create_dir_all(&log_dir)
        .map_err(|e| LabError::Run(format!("cannot create {}: {e}", log_dir.display())))?;
    let registry = discovery.then(|| Registry {
        path: log_dir.join("nodes.json"),
    });
    let mut run = Run {
        opts,
        log_dir: log_dir.clone(),
        nodes: Vec::new(),
        started: 0,
        admin: SocketAddr::from(([127, 0, 0, 1], 0)),
        registry,
    };
    for _ in 0..plan.nodes {
        let node = run.start_node().await?;
        run.nodes.push(node);
    }
    if let Some(r) = &run.registry {
        r.write(&run.nodes)?;
    }
    let config = switch_config(&run.nodes, run.registry.as_ref(), plan);
    let (_switch, listen, admin) =
        cluster::start_bare_switch(&opts.exe, config, 1, &log_dir).await?;
    run.admin = admin;
    let load = bench_config(plan, listen)?;
    let t0 = Instant::now();
    let changes = async {
        let mut done = Vec::new();
        if !discovery {
            return Ok(done);
        }
        for (at, change) in &plan.changes {
            tokio::time::sleep_until((t0 + Duration::from_secs(*at)).into()).await;
            say(format!("{:>4} s  {}", at, change.describe()));
            let start = t0.elapsed().as_secs_f64();
            let applied_s = run.change(*change).await?;
            let took_s = t0.elapsed().as_secs_f64() - start;
            done.push(ChangeResult {
                at_s: round(start),
                change: *change,
                applied_s: round(applied_s),
                took_s: round(took_s),
                nodes_after: run.nodes.len(),
                window: (at.saturating_sub(1), at + took_s.ceil() as u64 + 2),
                errors: 0,
                static_errors: 0,
                p99_ms: 0.0,
                static_p99_ms: 0.0,
            });
        }
        Ok::<_, LabError>(done)
    };
    let (result, changes) = tokio::join!(capstan_bench::run(load, None), changes);
    let result = result.map_err(|e| LabError::Run(format!("the load failed: {e}")))?;
    let mut changes = changes?;
    let membership = membership_run(label, &result);
    for c in &mut changes {
        let (errors, p99) = window_figures(&membership.timeline, c.window);
        c.errors = errors;
        c.p99_ms = p99;
    }
    Ok((membership, changes))
}

fn bench_config(plan: &ChurnPlan, listen: SocketAddr) -> Result<BenchConfig, LabError> {
    let target = Target::parse(&format!("http://{listen}{}", plan.path))
        .map_err(|e| LabError::Run(e.to_string()))?;
    let mut cfg = BenchConfig::open(target, plan.rate);
    cfg.arrival = ArrivalKind::Poisson;
    cfg.duration = Duration::from_secs(plan.duration_s);
    cfg.keepalive = true;
    cfg.connections = 64;
    cfg.drain = Duration::from_secs(5);
    cfg.timeout = Duration::from_secs(10);
    Ok(cfg)
}

fn membership_run(label: &str, r: &RunResult) -> MembershipRun {
    MembershipRun {
        membership: match label {
            "discovery" => "discovery (file)".into(),
            other => other.into(),
        },
        completed: r.completed,
        failed: r.errors_total + r.unfinished,
        dropped: r.dropped,
        errors: r.errors.clone(),
        p50_ms: r.latency_ms.corrected.p50,
        p99_ms: r.latency_ms.corrected.p99,
        timeline: r.timeline.clone(),
    }
}

/// Failed requests and the worst per-second p99 in the seconds `window` (inclusive).
fn window_figures(timeline: &[capstan_bench::TimelineSecond], window: (u64, u64)) -> (u64, f64) {
    let seconds = timeline
        .iter()
        .filter(|s| s.t >= window.0 && s.t <= window.1);
    seconds.fold((0, 0.0), |(errors, p99), s| {
        (errors + s.errors, f64::max(p99, s.p99_ms))
    })
}

/// Polls `/status` until the switch's nodes are exactly `wanted` (by name).
async fn wait_for_nodes(admin: SocketAddr, wanted: &[String]) -> Result<(), LabError> {
    let deadline = Instant::now() + APPLY_DEADLINE;
    let mut wanted = wanted.to_vec();
    wanted.sort();
    loop {
        let now = node_names(admin).await;
        if now.as_ref() == Ok(&wanted) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LabError::Run(format!(
                "the switch did not take the new node list within {APPLY_DEADLINE:?}: \
                 wanted {wanted:?}, it has {now:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The discovery source's `state` and `failures` on `/status`.
async fn source_state(admin: SocketAddr) -> Result<(String, u64), LabError> {
    let text = cluster::get(admin, "/status")
        .await
        .map_err(LabError::Run)?;
    let status: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| LabError::Run(e.to_string()))?;
    let source = &status["discovery"][0];
    Ok((
        source["state"].as_str().unwrap_or("").to_owned(),
        source["failures"].as_u64().unwrap_or(0),
    ))
}

/// Polls `/status` until the discovery source's state and failure count satisfy `done`.
async fn wait_for_source(
    admin: SocketAddr,
    done: impl Fn(&str, u64) -> bool,
) -> Result<(), LabError> {
    let deadline = Instant::now() + APPLY_DEADLINE;
    loop {
        let (state, failures) = source_state(admin).await?;
        if done(&state, failures) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LabError::Run(format!(
                "the switch did not see the registry outage within {APPLY_DEADLINE:?} \
                 (source state {state}, {failures} failures)"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn node_names(admin: SocketAddr) -> Result<Vec<String>, String> {
    let text = cluster::get(admin, "/status").await?;
    let status: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = (status["nodes"].as_array().into_iter().flatten())
        .filter_map(|n| n["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    Ok(names)
}

fn findings(
    static_run: &MembershipRun,
    discovery: &MembershipRun,
    changes: &[ChangeResult],
) -> Vec<String> {
    let mut f = vec![format!(
        "Across {} changes (scale-out, scale-in, rolling restart, registry outage) the switch \
         following its node list failed {} of {} requests; with static membership {} of {}.",
        changes.len(),
        discovery.failed,
        discovery.completed + discovery.failed,
        static_run.failed,
        static_run.completed + static_run.failed
    )];
    for c in changes {
        if let Change::RegistryOutage { seconds } = c.change {
            f.push(format!(
                "registry outage at {:.0} s: for {seconds} s the list was half-written, then \
                 missing; the switch reported the source in error and kept its {} nodes, \
                 {} failed requests around it (static: {}), worst p99 {:.1} ms (static: {:.1} ms).",
                c.at_s, c.nodes_after, c.errors, c.static_errors, c.p99_ms, c.static_p99_ms
            ));
            continue;
        }
        f.push(format!(
            "{} at {:.0} s: the switch showed it {:.2} s after the registry write(s); \
             {} failed requests around it (static: {}), worst p99 {:.1} ms (static: {:.1} ms).",
            c.change.describe(),
            c.at_s,
            c.applied_s,
            c.errors,
            c.static_errors,
            c.p99_ms,
            c.static_p99_ms
        ));
    }
    f.push(format!(
        "Whole run p99: {:.1} ms with discovery, {:.1} ms static (p50 {:.1} and {:.1} ms).",
        discovery.p99_ms, static_run.p99_ms, discovery.p50_ms, static_run.p50_ms
    ));
    f
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}
