//! `capstan lab`: run an experiment per policy and write a report.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use capstan_lab::{Event, Experiment, Options, Plan};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

const LAB_EXAMPLES: &str = "Examples:
  capstan lab                                  # the default experiment (mix-6040), < 6 minutes
  capstan lab --list                           # the built-in experiments and the figures they rebuild
  capstan lab switch-capacity --quick          # any built-in, short form (< 2 minutes)
  capstan lab mix-8020 --policies cap,random,lard --repetitions 3 --out report-8020
  capstan lab mix-6040 --policies round-robin,weighted-round-robin:metric=service-time
  capstan lab my-experiment.toml --nodes 8 --seed 7
  capstan lab smp-vs-up --quick                # Jones Fig. 9 (also node-alone, mix-6040-2nodes, switch-threads)
  capstan lab cap-prototype --secure-tls 0.2 --real-nodes   # the secure class over real TLS
  capstan lab validate --quick                 # the live stack against M/M/1, M/G/1-PS, Erlang C (< 1 minute)
  capstan lab cache-mixed-inc --quick          # Capstan's cache vs Varnish vs Traffic Server, < 3 minutes
  capstan lab cache-best-effort --contenders capstan,varnish
  capstan lab wan-delay --quick                # behind capstan wan's delay router (root), < 3 minutes
  capstan lab wan-loss --contenders origin-processes,apache2
  capstan lab wan-loss-h3 --quick              # HTTP/1.1, HTTP/2, HTTP/3 vs loss through the switch (root)
  capstan lab churn --quick                    # nodes join and leave under load (< 1 minute)
  capstan lab churn --quick --registry etcd    # the same with nodes registering in an etcd
  capstan lab tier --quick                     # K = 1, 2 switches under CPU quotas (< 3 minutes)

Each run starts emulated `capstan origin` nodes and a `capstan serve` switch as child processes on
free loopback ports, drives the switch with the in-process load generator, and records conn/s,
response times per class, per-node utilisation (from /_capstan/load) and the real CPU used by the
switch and the load generator (warned above 80 % of a core). The report is OUT/index.html
(self-contained, SVG plots) and OUT/results.json; child logs go to OUT/logs/. A mix's report also
has each node's CPU and disk utilisation apart (the Jones thesis's Fig. 6). In an experiment file
a [[variant]] may set its own nodes, speeds, cores, switch_threads, or alone = K (node K alone).

Cache experiments (cache-mixed-inc, cache-best-effort, and the single content type baselines
cache-image, cache-html, cache-download) run the Bakhtiyari thesis's Web Polygraph workloads
against `capstan serve` with its cache, Varnish (varnishd -s malloc) and Traffic Server
(RAM cache and a disk span), each with the same cache size in front of one `capstan origin`; a
contender whose program is missing is installed with apt-get (as root), else skipped with the reason. Default: durations × 0.01 (minutes);
--quick: shorter still, a 4 MB cache; --full: the thesis's hours. The report gives per contender and
phase the offered rate, throughput, DHR/BHR beside the offered hit ratio, hit and miss response
times, errors, the proxy's CPU and memory, and the thesis's numbers; the better performer per
phase and metric (throughput, hit and miss time, DHR, BHR, CPU per 1,000 responses; within 2 %:
level) beside the thesis's own call (Tables 4.4/4.7, agree/disagree); and surrogate metrics
sampled every second from /proc for each proxy's processes: CPU %, RSS, disk read/write bytes and
calls, with the block devices' read/write bytes and operations per second (/proc/diskstats,
machine-wide), plotted over time and summed per phase (Figs. 4.35–4.42, Table 4.8); hit and miss
response-time CDFs per contender; and for rising-rate phases (inc, top2) response time and
throughput against the offered rate, with each proxy's saturation knee.

WAN experiments (wan-delay, wan-loss, wan-mix; Banga & Druschel §5.5–5.6, Figs. 9 and 10; root)
put the load generator behind `capstan wan`'s delay router (RTT 0–200 ms, loss 0–5 %, or client
groups on LAN, backbone, wireless and modem paths at once) and run one contender at a time on
0.0.0.0: the emulated node with 152 processes (origin-processes; origin-processes-1k asks for one
1 KB file, the paper's trivial workload), event-driven (origin-events), the switch in front of the
process node (switch), and the real apache2 (prefork, MaxRequestWorkers 152) and nginx serving the
same tree from disk (installed with apt-get when missing; skipped with the reason otherwise). The
report plots throughput, open connections and processes against the RTT or loss, and the paper's
numbers beside ours. wan-loss-h3 reruns §5.6 (0–5 % loss at 100 ms RTT) against the switch's TLS
listener with quic = true, loaded over HTTP/1.1, HTTP/2 and HTTP/3 at one concurrency
(switch-h1, switch-h2, switch-h3; goodput, p50, p99 and the slowest request against loss, the
paper's numbers beside the HTTP/1.1 row); a build whose switch refuses quic = true (capstan check)
reports the HTTP/3 row as not available.

`capstan lab churn` runs one open-loop load twice against a switch in front of emulated nodes:
with static [[node]]s, and with the nodes from a [[discovery]] file the lab rewrites during the
run: a scale-out (+2 nodes), a scale-in (-2), a rolling restart of every node (each leaves the
list, is drained, stopped, started again on a new port and listed again) and a registry outage (a
half-written list, then none). With --registry etcd the lab starts its own etcd (loopback,
a temporary data folder) instead, the switch watches a prefix in it, and every node registers
itself (capstan origin --register); a node leaves on SIGTERM (it deletes its key, serves 1 s
more, exits) and the outage kills etcd and starts it again on its data. The report gives, per
change, how long the switch took to show it on /status and the failed requests and worst p99
around it against the same seconds of the static run, with plots over time. --quick: about
25 s per run instead of 50.

`capstan lab tier` starts emulated nodes and tiers of K switches (K = 1, 2, 4; --quick: 1, 2),
switch i on 127.0.0.(10+i), each in its own cgroup of 0.25 CPU when cgroups can be made (else
the report says it ran without), and drives them with one generator that spreads its
connections over the tier as a DNS round-robin client does (capstan bench --target). The report
gives the saturated throughput against K beside K x one switch; the document hit ratio and node
requests of K independent caches of M MiB, one cache of K*M MiB and a sharded tier ([cache] with
[tier] peers on every switch; `not available in this build` when capstan check refuses [tier]);
and a switch killed mid-run (failed requests, seconds until the nodes' request rate settles).

Experiment files are TOML; see experiments/*.toml for every field (nodes, switch policies and
classes, workload, load levels, --quick settings, the paper's numbers).

`capstan lab validate` checks the live stack against queueing theory instead: open Poisson
arrivals through the switch to one emulated node whose CPU demands are exponential or constant
(origin's /cgi-bin/demand.cgi), at utilisations 0.3–0.9 (--quick: 0.3 and 0.6), for M/M/1,
M/G/1-PS and M/M/2 (Erlang C). Each point reports the measured mean response, the formula, the
error after the fixed HTTP overhead (measured at near-zero load, utilisation 0.1) and before it, the
noise a run that long has in theory (simulated), and a verdict: within 5 %, within noise,
miss, or machine-limited (the overhead moved between probes before and after the points, or the
node's timers woke late: other work on this machine, not the stack). Output: OUT/index.html and OUT/validation.json.";

#[derive(clap::Args, Debug)]
#[command(after_help = LAB_EXAMPLES)]
pub struct LabArgs {
    /// A built-in experiment name, an experiment TOML file, or `validate` (the live stack
    /// against queueing theory) [default: mix-6040]
    #[arg(value_name = "EXPERIMENT")]
    experiment: Option<String>,

    /// List the built-in experiments and exit.
    #[arg(long)]
    list: bool,

    /// The experiment's short form: fewer levels and policies, shorter windows.
    #[arg(long)]
    quick: bool,

    /// Cache experiments: the thesis's own durations and cache size (hours). (WAN experiments
    /// run their full levels without --quick.)
    #[arg(long, conflicts_with = "quick")]
    full: bool,

    /// Cache and WAN experiments: contenders to run, comma-separated, replacing the
    /// experiment's list (cache: capstan, varnish, trafficserver, and capstan-POLICY for
    /// another eviction policy than LRU, e.g. capstan-gdsf; WAN: origin-processes,
    /// origin-processes-1k, origin-events, switch, apache2, nginx).
    #[arg(long, value_name = "C1,C2", value_delimiter = ',')]
    contenders: Vec<String>,

    /// Policies to run, comma-separated (replaces the experiment's list); a policy may carry
    /// parameters, `lard:load=utilisation,t_high=0.6`, each such row labelled as written.
    #[arg(long, value_name = "P1,P2", value_delimiter = ',')]
    policies: Vec<String>,

    /// Number of back-end nodes (replaces the experiment's count; variants that set their own
    /// count keep it).
    #[arg(long, value_name = "N")]
    nodes: Option<usize>,

    /// Repetitions of every run, for error bars (an experiment's [load.headline] measures its
    /// paper claims in interleaved rounds of its own instead).
    #[arg(long, value_name = "N")]
    repetitions: Option<usize>,

    /// Report directory.
    #[arg(long, value_name = "DIR", default_value = "lab-report")]
    out: PathBuf,

    /// Seed of the trees and the request streams.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,

    /// Which world runs the experiment: `live` (nodes, switch and load on this machine), `sim`
    /// (the discrete-event simulator, in virtual time, seconds of wall time) or `both` (the
    /// report sets them side by side per policy with an agreement verdict, 15 % tolerance;
    /// the lab first measures the HTTP path on its cluster, and the simulator runs each level as
    /// the lab ran it: same window, same request sequence, that path). The simulator runs
    /// closed-loop file-list experiments.
    #[arg(long, value_name = "WORLD", default_value = "live", value_parser = ["live", "sim", "both"])]
    engine: String,

    /// Run this share (0–1) of every load level as the CAP paper's secure class over TLS for
    /// real: /secure/… requests from clients of their own, over HTTPS to a TLS listener of the
    /// switch (the test PKI's RSA certificate), each client or session a user with its own TLS
    /// session cache (a full handshake, then resumption). The experiment file's
    /// [workload.secure] share. Closed, open and sessions engines.
    #[arg(long, value_name = "SHARE")]
    secure_tls: Option<f64>,

    /// Nodes spend real CPU and disk (capstan origin --resources real) instead of emulated
    /// time; with a secure class the switch reaches them over TLS and /secure/… costs the real
    /// handshakes and encryption. The experiment file's [nodes.origin] resources = "real".
    #[arg(long)]
    real_nodes: bool,

    /// The churn experiment: where its discovery run's switch finds the nodes, `file` (a node
    /// list the lab rewrites) or `etcd` (an etcd the lab starts; the nodes register
    /// themselves) [default: file]
    #[arg(long, value_name = "REGISTRY", value_parser = ["file", "etcd"])]
    registry: Option<String>,

    /// The tier experiment at second-long windows, for tests of its plumbing (figures mean
    /// nothing).
    #[arg(long, hide = true, conflicts_with = "quick")]
    smoke: bool,
}

pub fn run(args: LabArgs) -> anyhow::Result<()> {
    if args.list {
        list();
        return Ok(());
    }
    let name = args
        .experiment
        .clone()
        .unwrap_or_else(|| capstan_lab::DEFAULT.to_string());
    check_known(&name)?;
    let other_room = capstan_lab::CacheExperiment::find(&name).is_some()
        || capstan_lab::WanExperiment::find(&name).is_some()
        || name == "validate"
        || name == capstan_lab::CHURN
        || name == capstan_lab::TIER;
    if other_room && (args.secure_tls.is_some() || args.real_nodes) {
        bail!("--secure-tls and --real-nodes apply to the switch experiments, not to {name}");
    }
    if args.smoke && name != capstan_lab::TIER {
        bail!("--smoke applies to the tier experiment, not to {name}");
    }
    if args.registry.is_some() && name != capstan_lab::CHURN {
        bail!("--registry applies to the churn experiment, not to {name}");
    }
    if let Some(exp) = capstan_lab::CacheExperiment::find(&name) {
        return run_cache(&args, exp?);
    }
    if let Some(exp) = capstan_lab::WanExperiment::find(&name) {
        return run_wan(&args, exp?);
    }
    if name == capstan_lab::CHURN {
        return run_churn(&args);
    }
    if name == capstan_lab::TIER {
        return run_tier(&args);
    }
    if args.full || !args.contenders.is_empty() {
        bail!(
            "--full and --contenders apply to the cache and WAN experiments (capstan lab --list)"
        );
    }
    if name == "validate" {
        return validate(&args);
    }
    let exp = Experiment::load(&name)?.with_overrides(args.secure_tls, args.real_nodes)?;
    let worlds: capstan_lab::Worlds = args.engine.parse().map_err(anyhow::Error::msg)?;
    if worlds != capstan_lab::Worlds::Live {
        capstan_lab::check_sim(&exp)?;
    }
    let exe = std::env::current_exe().context("cannot find the capstan binary")?;
    let opts = Options {
        quick: args.quick,
        policies: (!args.policies.is_empty()).then(|| args.policies.clone()),
        nodes: args.nodes,
        repetitions: args.repetitions,
        seed: args.seed,
        exe,
        work_dir: args.out.join("logs"),
        command: command_line(),
        worlds,
    };
    let plan = Plan::new(&exp, &opts)?;
    // The simulator first: it takes seconds, and a translation it refuses stops the run before
    // the live part starts. Alone it runs the model alone; beside the lab it runs again after
    // the live runs, with the HTTP path they measured.
    if worlds != capstan_lab::Worlds::Live {
        let world = capstan_lab::simulate(&plan, capstan_lab::SimShape::Model)?;
        if worlds == capstan_lab::Worlds::Sim {
            let mut results = capstan_lab::sim_only_results(&plan, &opts, world);
            capstan_lab::conclude(&mut results, &exp);
            return finish(&results, &args);
        }
    }
    eprintln!(
        "capstan lab: {} — {} ({} runs, about {:.0} s)",
        exp.name,
        exp.figure,
        plan.runs(),
        plan.estimate_s()
    );
    let bar = progress_bar(plan.runs());
    let observer = observer(bar.clone(), plan.x_label());
    let outcome = until_interrupted(capstan_lab::run(&plan, &opts, Some(observer)));
    bar.finish_and_clear();
    let mut results = outcome?;
    if worlds == capstan_lab::Worlds::Both {
        let path = results
            .http_path
            .as_ref()
            .map(|p| p.path())
            .unwrap_or_default();
        let world = capstan_lab::simulate(&plan, capstan_lab::SimShape::AsLab(path))?;
        capstan_lab::attach_sim(&mut results, world);
    }
    capstan_lab::conclude(&mut results, &exp);
    finish(&results, &args)
}

/// Runs `work` on a single-threaded runtime until it ends or Ctrl-C. Ctrl-C drops the run,
/// and with it every node, switch and server it started, so none outlives the lab.
fn until_interrupted<T, E: Into<anyhow::Error>>(
    work: impl std::future::Future<Output = Result<T, E>>,
) -> anyhow::Result<T> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let outcome = rt.block_on(async {
        tokio::select! {
            r = work => Some(r),
            _ = tokio::signal::ctrl_c() => None,
        }
    });
    match outcome {
        Some(r) => r.map_err(Into::into),
        None => bail!("interrupted; no report written"),
    }
}

/// Writes the report and prints the summary.
fn finish(results: &capstan_lab::LabResults, args: &LabArgs) -> anyhow::Result<()> {
    let path = capstan_lab::write_report(results, &args.out)?;
    println!("{} — {}", results.title, results.figure);
    print!("{}", capstan_lab::summary_table(results));
    for a in &results.agreement {
        println!(
            "lab vs simulator, {}: {} ({})",
            a.series, a.verdict, a.worst
        );
    }
    for f in &results.findings {
        println!("- {f}");
    }
    if !results.warnings.is_empty() {
        println!(
            "! {} warning(s), e.g.: {}",
            results.warnings.len(),
            results.warnings[0]
        );
    }
    println!("report: {}", path.display());
    println!("data:   {}", args.out.join("results.json").display());
    Ok(())
}

fn command_line() -> String {
    std::env::args()
        .enumerate()
        .map(|(i, a)| if i == 0 { "capstan".to_string() } else { a })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `capstan lab validate`: the live stack against queueing theory.
fn validate(args: &LabArgs) -> anyhow::Result<()> {
    if !args.policies.is_empty() || args.nodes.is_some() || args.repetitions.is_some() {
        bail!("lab validate takes only --quick, --seed and --out (its cases fix policy and nodes)");
    }
    let opts = capstan_lab::ValidateOptions {
        quick: args.quick,
        seed: args.seed.unwrap_or(1),
        exe: std::env::current_exe().context("cannot find the capstan binary")?,
        work_dir: args.out.join("logs"),
        command: command_line(),
    };
    let schedule = capstan_lab::Schedule::new(args.quick);
    eprintln!(
        "capstan lab validate: {} cases × {} utilisations, about {:.0} s",
        capstan_lab::CASES.len(),
        schedule.rhos.len(),
        schedule.estimate_s()
    );
    let observer: capstan_lab::Observer = Arc::new(|e: Event| {
        if let Event::Message(m) = e {
            eprintln!("{m}");
        }
    });
    let results = until_interrupted(capstan_lab::run_validation(&opts, Some(observer)))?;
    let path = capstan_lab::write_validation(&results, &args.out)?;
    print!("{}", capstan_lab::validation_summary_table(&results));
    println!("report: {}", path.display());
    println!("data:   {}", args.out.join("validation.json").display());
    let verdicts: Vec<&str> = results
        .cases
        .iter()
        .flat_map(|c| c.points.iter().map(|p| p.verdict.as_str()))
        .collect();
    let count = |v: &str| verdicts.iter().filter(|x| **x == v).count();
    // No failing exit status on a miss: a point outside its 95 % noise band happens by chance
    // one time in twenty, and the verdicts are the result.
    println!(
        "{} of {} points within 5 %, {} within noise, {} missed, {} machine-limited",
        count("within 5 %"),
        verdicts.len(),
        count("within noise"),
        count("miss"),
        count("machine-limited")
    );
    for c in &results.cases {
        if let Some(m) = &c.machine_limited {
            println!("! {}: machine-limited: {m}", c.name);
        }
    }
    Ok(())
}

/// A cache experiment: each contender in turn, a table per phase, the report.
fn run_cache(args: &LabArgs, exp: capstan_lab::CacheExperiment) -> anyhow::Result<()> {
    use capstan_lab::{CacheMode as Mode, CacheOptions};
    let mode = match (args.quick, args.full) {
        (true, _) => Mode::Quick,
        (_, true) => Mode::Full,
        _ => Mode::Default,
    };
    let opts = CacheOptions {
        mode,
        contenders: (!args.contenders.is_empty()).then(|| args.contenders.clone()),
        exe: std::env::current_exe().context("cannot find the capstan binary")?,
        work_dir: args.out.join("logs"),
        command: command_line(),
    };
    eprintln!("capstan lab: {} — {} ({mode:?})", exp.name, exp.figure);
    let say = |m: String| eprintln!("  {m}");
    let results = until_interrupted(capstan_lab::run_cache(&exp, &opts, &say))?;
    let path = capstan_lab::write_cache_report(&results, &args.out)?;
    let heading = format!("{} — {}", results.title, results.figure);
    let table = capstan_lab::cache_summary_table(&results);
    print_summary(&heading, &table, &results.findings, &path, &args.out);
    Ok(())
}

/// A WAN experiment: each contender at each level behind the delay router, the report.
fn run_wan(args: &LabArgs, exp: capstan_lab::WanExperiment) -> anyhow::Result<()> {
    use capstan_lab::{WanMode as Mode, WanOptions};
    if args.full {
        bail!("--full applies to the cache experiments; a WAN experiment without --quick runs all its levels");
    }
    let mode = if args.quick {
        Mode::Quick
    } else {
        Mode::Default
    };
    for c in &args.contenders {
        capstan_lab::check_wan_contender(c).map_err(anyhow::Error::msg)?;
    }
    let opts = WanOptions {
        mode,
        contenders: (!args.contenders.is_empty()).then(|| args.contenders.clone()),
        exe: std::env::current_exe().context("cannot find the capstan binary")?,
        work_dir: args.out.join("logs"),
        command: command_line(),
    };
    let runs = exp.levels(mode).len()
        * opts
            .contenders
            .as_ref()
            .map_or(exp.contenders(mode).len(), Vec::len);
    let run_s = exp.warmup_s(mode) + exp.duration_s(mode);
    eprintln!(
        "capstan lab: {} — {} ({runs} runs of {run_s} s, about {:.0} s)",
        exp.name,
        exp.figure,
        runs as f64 * (run_s + 5.0)
    );
    let say = |m: String| eprintln!("  {m}");
    let results = until_interrupted(capstan_lab::run_wan(&exp, &opts, &say))?;
    let path = capstan_lab::write_wan_report(&results, &args.out)?;
    let heading = format!("{} — {}", results.title, results.figure);
    let table = capstan_lab::wan_summary_table(&results);
    print_summary(&heading, &table, &results.findings, &path, &args.out);
    Ok(())
}

/// The churn experiment: static membership, then discovery with changes; the report.
fn run_churn(args: &LabArgs) -> anyhow::Result<()> {
    if args.full || !args.contenders.is_empty() || !args.policies.is_empty() {
        bail!("churn takes --quick, --registry and --out only");
    }
    let registry: capstan_lab::RegistryKind = (args.registry.as_deref().unwrap_or("file"))
        .parse()
        .map_err(anyhow::Error::msg)?;
    let opts = capstan_lab::ChurnOptions {
        quick: args.quick,
        registry,
        exe: std::env::current_exe().context("cannot find the capstan binary")?,
        work_dir: args.out.join("logs"),
        command: command_line(),
    };
    eprintln!(
        "capstan lab: churn — nodes joining and leaving under load (two runs, registry: {})",
        registry.as_str()
    );
    let say = |m: String| eprintln!("  {m}");
    let results = until_interrupted(capstan_lab::run_churn(&opts, &say))?;
    let path = capstan_lab::write_churn_report(&results, &args.out)?;
    let table = capstan_lab::churn_summary_table(&results);
    print_summary(&results.title, &table, &results.findings, &path, &args.out);
    Ok(())
}

/// The tier experiment: capacity against K, the tier's cache, a switch killed; the report.
fn run_tier(args: &LabArgs) -> anyhow::Result<()> {
    if args.full || !args.contenders.is_empty() || !args.policies.is_empty() {
        bail!("tier takes --quick, --engine live|both and --out only");
    }
    let with_sim = match args.engine.as_str() {
        "live" => false,
        "both" => true,
        _ => bail!(
            "tier runs --engine live (default) or both (its policies also in the simulator); \
             for the simulator alone run `capstan sim tier`"
        ),
    };
    let scale = match (args.quick, args.smoke) {
        (_, true) => capstan_lab::TierScale::Smoke,
        (true, false) => capstan_lab::TierScale::Quick,
        (false, false) => capstan_lab::TierScale::Full,
    };
    let opts = capstan_lab::TierOptions {
        scale,
        exe: std::env::current_exe().context("cannot find the capstan binary")?,
        work_dir: args.out.join("logs"),
        command: command_line(),
        with_sim,
    };
    eprintln!("capstan lab: tier — K switches on their own addresses and CPU quotas");
    let say = |m: String| eprintln!("  {m}");
    let results = until_interrupted(capstan_lab::run_tier(&opts, &say))?;
    let path = capstan_lab::write_tier_report(&results, &args.out)?;
    let table = capstan_lab::tier_summary_table(&results);
    print_summary(&results.title, &table, &results.findings, &path, &args.out);
    Ok(())
}

/// What a finished contender experiment prints: its heading, table, findings and files.
fn print_summary(
    heading: &str,
    table: &str,
    findings: &[String],
    report: &std::path::Path,
    out: &std::path::Path,
) {
    println!("{heading}");
    print!("{table}");
    for f in findings {
        println!("- {f}");
    }
    println!("report: {}", report.display());
    println!("data:   {}", out.join("results.json").display());
}

/// One group of `capstan lab --list`: its heading and its experiments with what each is.
struct Group {
    heading: &'static str,
    experiments: Vec<(&'static str, String)>,
}

/// Every experiment `capstan lab` knows by name, in `--list`'s groups: what `--list` prints and
/// what an unknown name's error lists, from this one list.
fn catalogue() -> Vec<Group> {
    fn described<E>(
        table: &'static [(&'static str, &'static str)],
        parse: impl Fn(&str, &str) -> Result<E, capstan_lab::LabError>,
        about: impl Fn(&E) -> String,
    ) -> Vec<(&'static str, String)> {
        table
            .iter()
            .map(|&(name, text)| match parse(text, name) {
                Ok(e) => (name, about(&e)),
                Err(e) => (name, format!("(broken: {e})")),
            })
            .collect()
    }
    let mut switch = described(capstan_lab::BUILTIN, Experiment::parse, |e: &Experiment| {
        format!("{} — rebuilds {}", e.title, e.figure)
    });
    switch.push((
        "validate",
        "the live stack against queueing theory (M/M/1, M/G/1-PS, Erlang C)".into(),
    ));
    vec![
        Group {
            heading: "Built-in experiments (capstan lab NAME [--quick]):",
            experiments: switch,
        },
        Group {
            heading: "Cache experiments (capstan lab NAME [--quick | --full] [--contenders C1,C2]):",
            experiments: described(
                capstan_lab::BUILTIN_CACHE,
                capstan_lab::CacheExperiment::parse,
                |e| format!("{} — rebuilds {}", e.title, e.figure),
            ),
        },
        Group {
            heading: "WAN experiments (root; capstan lab NAME [--quick] [--contenders C1,C2]):",
            experiments: described(
                capstan_lab::BUILTIN_WAN,
                capstan_lab::WanExperiment::parse,
                |e| format!("{} — rebuilds {}", e.title, e.figure),
            ),
        },
        Group {
            heading: "Membership experiments (capstan lab NAME [--quick]):",
            experiments: vec![
                (
                    capstan_lab::CHURN,
                    "nodes joining and leaving under load through [[discovery]], against static [[node]]s".into(),
                ),
                (
                    capstan_lab::TIER,
                    "K switches on their own addresses and CPU quotas: capacity, one cache, a switch killed".into(),
                ),
            ],
        },
    ]
}

fn list() {
    let groups = catalogue();
    let width = groups
        .iter()
        .flat_map(|g| g.experiments.iter().map(|(n, _)| n.len()))
        .max()
        .unwrap_or(0);
    for group in groups {
        println!("{}", group.heading);
        for (name, about) in group.experiments {
            println!("  {name:<width$} {about}");
        }
    }
    println!("Default: {}", capstan_lab::DEFAULT);
}

/// A name that is neither an experiment `--list` shows nor a file: the error lists them all.
fn check_known(name: &str) -> anyhow::Result<()> {
    let names: Vec<&str> = catalogue()
        .into_iter()
        .flat_map(|g| g.experiments.into_iter().map(|(n, _)| n))
        .collect();
    if names.contains(&name) || std::path::Path::new(name).exists() {
        return Ok(());
    }
    bail!(
        "no experiment {name:?}: not a built-in ({}) and no such file",
        names.join(", ")
    )
}

fn progress_bar(runs: usize) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(runs as u64), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} runs  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn observer(bar: ProgressBar, x: &'static str) -> capstan_lab::Observer {
    let current = Arc::new(Mutex::new(String::new()));
    Arc::new(move |e: Event| match e {
        Event::Planned { .. } => {}
        Event::Run {
            label,
            level,
            repetition,
            ..
        } => {
            let s = format!(
                "{label} @ {} {x}{}",
                capstan_lab::fmt_level(level),
                if repetition > 0 {
                    format!(" (rep {})", repetition + 1)
                } else {
                    String::new()
                }
            );
            bar.set_message(s.clone());
            if let Ok(mut c) = current.lock() {
                *c = s;
            }
        }
        Event::Live {
            rps,
            elapsed_s,
            duration_s,
            ..
        } => {
            let c = current.lock().map(|c| c.clone()).unwrap_or_default();
            bar.set_message(format!(
                "{c}: {rps:.0} conn/s ({elapsed_s:.0}/{duration_s:.0} s)"
            ));
        }
        Event::Done { .. } => bar.inc(1),
        Event::Message(m) => bar.println(m),
    })
}
