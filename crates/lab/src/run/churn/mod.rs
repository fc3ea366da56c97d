//! Runs the churn experiment ([`crate::model::churn`]): the same open-loop load twice, once on
//! a cluster whose nodes never change (`[[node]]`s) and once on one that takes its nodes from a
//! `[[discovery]]` source ([`registry`]: a file the lab rewrites, or an etcd the nodes register
//! themselves in) while the schedule's changes happen, then lines up the seconds around each
//! change.
//!
//! A node leaves the way a careful deploy takes it out: off the registry first, then — once the
//! switch's `/status` no longer lists it — stopped (the file: by the lab, after a moment for
//! answers in flight; etcd: SIGTERM, on which the node deletes its key, serves a moment more and
//! exits). A new node is started and ready before it is registered.
//!
//! Inside: [`status`] (reading `/status`) and [`registry`] are independent; this module uses
//! both.

mod registry;
mod status;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use capstan_bench::{BenchConfig, RunResult, Target};
use capstan_workload::ArrivalKind;

use crate::model::churn::{
    Change, ChangeResult, ChurnPlan, ChurnResults, MembershipRun, RegistryKind, NAME,
};
use crate::model::error::LabError;
use crate::procs::cluster::{self, NodeArgs, NodeSpec, Proc, Registration};
use registry::Registry;
use status::{source_state, wait_for_nodes, wait_for_source};

/// How a churn run is made.
#[derive(Debug, Clone)]
pub struct ChurnOptions {
    pub quick: bool,
    /// Where the discovery run's switch finds its nodes.
    pub registry: RegistryKind,
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

/// How long a node told to stop (SIGTERM) may take to deregister, serve its deregister wait
/// and exit.
const EXIT_DEADLINE: Duration = Duration::from_secs(15);

/// Runs both memberships and compares them.
pub async fn run_churn(
    opts: &ChurnOptions,
    say: &dyn Fn(String),
) -> Result<ChurnResults, LabError> {
    if opts.registry == RegistryKind::Etcd {
        crate::procs::etcd::check_installed()?;
    }
    let plan = ChurnPlan::new(opts.quick);
    say(format!(
        "static membership: {} nodes, {} requests/s for {} s",
        plan.nodes, plan.rate, plan.duration_s
    ));
    let (static_run, _) = run_membership(&plan, opts, false, say).await?;
    say(format!(
        "discovery ({}): the same load while nodes join and leave",
        opts.registry.as_str()
    ));
    let (discovery_run, mut changes) = run_membership(&plan, opts, true, say).await?;
    for c in &mut changes {
        let (errors, p99) = window_figures(&static_run.timeline, c.window);
        c.static_errors = errors;
        c.static_p99_ms = p99;
    }
    let findings = findings(opts.registry, &static_run, &discovery_run, &changes);
    Ok(ChurnResults {
        name: NAME.into(),
        title: "Churn: nodes joining and leaving under load".into(),
        command: opts.command.clone(),
        quick: opts.quick,
        registry: opts.registry,
        plan,
        runs: vec![static_run, discovery_run],
        changes,
        findings,
    })
}

/// One running node.
struct Node {
    name: String,
    addr: SocketAddr,
    /// Dropping the node kills its process.
    process: Proc,
}

impl Node {
    /// Asks the node to stop (SIGTERM): a registered node deletes its key, serves its
    /// deregister wait, then exits.
    fn terminate(&self) -> Result<(), LabError> {
        let pid = self.process.pid() as libc::pid_t;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet (the
        // `Child` is held and not waited for), so the pid cannot have been reused.
        let sent = unsafe { libc::kill(pid, libc::SIGTERM) };
        match sent {
            0 => Ok(()),
            _ => Err(LabError::Run(format!(
                "cannot send SIGTERM to {}: {}",
                self.name,
                std::io::Error::last_os_error()
            ))),
        }
    }

    /// Polls until the node's process has exited.
    async fn exited(&mut self) -> Result<(), LabError> {
        let deadline = Instant::now() + EXIT_DEADLINE;
        loop {
            match self.process.child.try_wait() {
                Ok(Some(_)) => return Ok(()),
                Err(e) => return Err(LabError::Run(format!("{}: {e}", self.name))),
                Ok(None) if Instant::now() > deadline => {
                    return Err(LabError::Run(format!(
                        "{} did not exit within {EXIT_DEADLINE:?} of SIGTERM",
                        self.name
                    )))
                }
                Ok(None) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}

/// Everything one membership run holds. The nodes are declared (so dropped) before the
/// registry: an etcd outlives the nodes registered in it.
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
        let register = self.registry.as_ref().and_then(Registry::registration);
        let (addr, _report, process) = cluster::start_node_on_fresh_ports(
            &self.opts.exe,
            &spec,
            &node_args(register),
            None,
            &self.log_dir,
        )
        .await?;
        Ok(Node {
            name: spec.name,
            addr,
            process,
        })
    }

    /// Whether the nodes put themselves in the registry (etcd) rather than the lab (file).
    fn self_registering(&self) -> bool {
        matches!(self.registry, Some(Registry::Etcd { .. }))
    }

    /// The switch's names of the current nodes.
    fn wanted(&self) -> Vec<String> {
        (self.nodes.iter())
            .map(|n| format!("lab-{}", n.name))
            .collect()
    }

    /// Registers the current nodes (etcd: they did so themselves) and waits until the switch
    /// lists exactly them; returns the seconds that took.
    async fn publish(&mut self) -> Result<f64, LabError> {
        let registry = self.registry.as_ref().expect("a discovery run");
        let t = Instant::now();
        let listed: Vec<(&str, SocketAddr)> = (self.nodes.iter())
            .map(|n| (n.name.as_str(), n.addr))
            .collect();
        registry.write(&listed)?;
        wait_for_nodes(self.admin, &self.wanted()).await?;
        Ok(t.elapsed().as_secs_f64())
    }

    /// Takes the node at `index` out: off the registry, drained, stopped.
    async fn retire(&mut self, index: usize) -> Result<f64, LabError> {
        let mut node = self.nodes.remove(index);
        if !self.self_registering() {
            let applied = self.publish().await?;
            tokio::time::sleep(DRAIN_GRACE).await;
            drop(node);
            return Ok(applied);
        }
        let t = Instant::now();
        node.terminate()?;
        wait_for_nodes(self.admin, &self.wanted()).await?;
        let applied = t.elapsed().as_secs_f64();
        node.exited().await?;
        Ok(applied)
    }

    /// Starts `count` nodes and waits until the switch lists them: the file lists them in one
    /// write; in etcd each registers itself as it starts, so each is waited for in turn.
    async fn add_nodes(&mut self, count: usize) -> Result<f64, LabError> {
        let mut applied = 0.0;
        for _ in 0..count {
            let node = self.start_node().await?;
            self.nodes.push(node);
            if self.self_registering() {
                applied += self.publish().await?;
            }
        }
        if !self.self_registering() {
            applied = self.publish().await?;
        }
        Ok(applied)
    }

    /// Makes one change; returns the seconds until the switch showed it.
    async fn change(&mut self, change: Change) -> Result<f64, LabError> {
        match change {
            Change::ScaleOut { nodes } => self.add_nodes(nodes).await,
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
                    applied += self.add_nodes(1).await?;
                }
                Ok(applied)
            }
            Change::RegistryOutage { seconds } => {
                let (admin, outage) = (self.admin, Duration::from_secs(seconds));
                match self.registry.as_mut().expect("a discovery run") {
                    Registry::File { path } => {
                        let path = path.clone();
                        file_outage(admin, &path, outage).await?;
                        // The switch kept its nodes all along; the list comes back unchanged.
                        wait_for_nodes(admin, &self.wanted()).await?;
                        self.publish().await
                    }
                    Registry::Etcd { server } => {
                        let back = etcd_outage(admin, server, outage).await?;
                        // The nodes' keys outlived the outage: the switch lists the same nodes.
                        wait_for_nodes(admin, &self.wanted()).await?;
                        Ok(back.elapsed().as_secs_f64())
                    }
                }
            }
        }
    }
}

/// The file's outage: half-written for half of it, then missing; the switch must report the
/// source in error (or the run shows nothing).
async fn file_outage(
    admin: SocketAddr,
    path: &std::path::Path,
    outage: Duration,
) -> Result<(), LabError> {
    let failures = source_state(admin).await?.1;
    registry::break_file(path, true)?;
    wait_for_source(admin, "see the registry outage", |state, n| {
        state == "error" && n > failures
    })
    .await?;
    tokio::time::sleep(outage / 2).await;
    registry::break_file(path, false)?;
    tokio::time::sleep(outage / 2).await;
    Ok(())
}

/// etcd's outage: killed (SIGKILL) for `outage`, the switch reporting the source in error, then
/// started again on its ports and data, the switch's watch back to `ok`; returns when etcd was
/// healthy again. The nodes' leases outlive it (etcd renews leases when it comes back) and
/// their keep-alives reconnect.
async fn etcd_outage(
    admin: SocketAddr,
    server: &mut crate::procs::etcd::EtcdProcess,
    outage: Duration,
) -> Result<Instant, LabError> {
    let failures = source_state(admin).await?.1;
    let down = Instant::now();
    server.kill();
    wait_for_source(admin, "see etcd go down", |state, n| {
        state == "error" && n > failures
    })
    .await?;
    tokio::time::sleep_until((down + outage).into()).await;
    server.restart().await?;
    let back = Instant::now();
    wait_for_source(admin, "take etcd back", |state, _| state == "ok").await?;
    Ok(back)
}

fn node_args(register: Option<Registration>) -> NodeArgs {
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
        register,
    }
}

/// The switch's configuration: least-connections over `[[node]]`s, or over the registry.
fn switch_config(nodes: &[Node], registry: Option<&Registry>, plan: &ChurnPlan) -> toml::Table {
    let mut text =
        String::from("[policy]\nname = \"least-connections\"\n[admission]\nlimit = \"off\"\n");
    match registry {
        Some(r) => text.push_str(&r.discovery_toml(plan.interval_ms)),
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
    let registry = match discovery {
        true => Some(Registry::start(opts.registry, &log_dir).await?),
        false => None,
    };
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
        let listed: Vec<(&str, SocketAddr)> = (run.nodes.iter())
            .map(|n| (n.name.as_str(), n.addr))
            .collect();
        r.write(&listed)?;
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
    let label = match &run.registry {
        Some(r) => format!("discovery ({})", r.kind().as_str()),
        None => label.to_string(),
    };
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

fn membership_run(label: String, r: &RunResult) -> MembershipRun {
    MembershipRun {
        membership: label,
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

fn findings(
    registry: RegistryKind,
    static_run: &MembershipRun,
    discovery: &MembershipRun,
    changes: &[ChangeResult],
) -> Vec<String> {
    let mut f = vec![format!(
        "Across {} changes (scale-out, scale-in, rolling restart, registry outage) the switch \
         following its node list ({} registry) failed {} of {} requests; with static \
         membership {} of {}.",
        changes.len(),
        registry.as_str(),
        discovery.failed,
        discovery.completed + discovery.failed,
        static_run.failed,
        static_run.completed + static_run.failed
    )];
    for c in changes {
        if let Change::RegistryOutage { seconds } = c.change {
            let what = match registry {
                RegistryKind::File => "the list was half-written, then missing",
                RegistryKind::Etcd => "etcd was down (killed, then started again on its data)",
            };
            f.push(format!(
                "registry outage at {:.0} s: for {seconds} s {what}; the switch reported the \
                 source in error and kept its {} nodes, {} failed requests around it \
                 (static: {}), worst p99 {:.1} ms (static: {:.1} ms).",
                c.at_s, c.nodes_after, c.errors, c.static_errors, c.p99_ms, c.static_p99_ms
            ));
            continue;
        }
        f.push(format!(
            "{} at {:.0} s: the switch showed it {:.2} s after {}; \
             {} failed requests around it (static: {}), worst p99 {:.1} ms (static: {:.1} ms).",
            c.change.describe(),
            c.at_s,
            c.applied_s,
            match registry {
                RegistryKind::File => "the registry write(s)",
                RegistryKind::Etcd => "the node(s) registered themselves or got SIGTERM",
            },
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
