//! `capstan sim`: the discrete-event simulator of the web cluster; [`tier`] is `capstan sim
//! tier`, the many-dispatcher experiment.

mod tier;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use capstan_sim::cache::{self as simcache, Contender, Generated, ObjectSizes, Study};
use capstan_sim::scenario::{Scenario, NAMES};
use capstan_sim::sweb::{SwebExperiment, Which};
use capstan_sim::sweep::{run_sweep, Axis, SweepReport};
use capstan_sim::{Experiment, PolicyChoice};
use clap::{ArgGroup, Args, Subcommand};

const DEFAULT_POLICIES: &str = "cap,weighted-round-robin,weighted-round-robin:metric=service-time,\
lard,static-partitioning,round-robin,random";

#[derive(Args, Debug)]
#[command(
    about = "Simulate the web cluster in virtual time with the same policies the switch runs \
(CAP paper §4, SWEB §4, cache eviction)",
    long_about = "Simulate a web cluster in virtual time: client sessions (CAP paper Table 1), a \
layer-4/7 web switch that sees server state only every T_gat, web nodes with a processor-shared \
CPU, FCFS disk, LRU memory cache (15 % of the site), NIC and SSL costs (Table 2), and back-end \
database servers. Every policy is the switch's own code from capstan-core.\n\n\
Writes DIR/results.json (deterministic: same seed, same bytes), DIR/run-info.json (wall time, \
events/s) and DIR/report.html (CDF and T_gat plots, tables), and prints a summary.\n\n\
SWEB (Andresen et al., IPPS '96, §4): `sweb-skewed` and `sweb-sizes` run the paper's experiments \
on a model of its six-node Meiko CS-2 — each node's local disk holds its share of the files \
(b1 = 5 MB/s), the others' shares are read over NFS (b2 = 4.5 MB/s), DNS rotation hands requests \
to nodes whose broker may redirect once, and loads are gathered every 2 s — comparing `sweb`, \
`round-robin` (DNS rotation alone) and `home-node` (pure file locality). sweb-skewed: one 1.5 MB \
file, 8 rps in bursts, 45 s. sweb-sizes: 100 B – 1.5 MB files at 5–30 rps, 30 s each, plus the \
maximum sustained rate of 1.5 MB files over 120 s beside §3.3's formula. They take --policies, \
--nodes (default 6), --rate (one rate instead of the paper's), --duration, --replications, \
--seed, --jobs, --out and --quiet, and write DIR/results.json (format capstan-sim-sweb/1) and \
DIR/report.html. The `sweb` policy gets the model's file sizes, bandwidths, CPU demands and \
redirect costs as its defaults (its oracle); any parameter written overrides them \
(`sweb:sigma=0,gather=0.5`).",
    after_help = "Examples:\n  \
capstan sim --list\n  \
capstan sim transaction --duration 2m --replications 3 --out out/transaction\n  \
capstan sim commerce --policies cap,weighted-round-robin,lard,round-robin,random \\\n      \
--nodes 8 --rate 200 --duration 10m --replications 5 --seed 1 --out out/commerce\n  \
capstan sim publishing-static --policies 'lard:t_low=10,t_high=30,cap' --out out/pub\n  \
capstan sim commerce --tgat-sweep 0,1,2,5,10,20 --policies cap --out out/fig3\n  \
capstan sim commerce --nodes 1000 --request-rate 100k --duration 30s --replications 4 \\\n      \
--policies cap --out out/scale   # 1,000 nodes, 100 k HTTP requests/s, 4 runs in parallel\n  \
capstan sim commerce --tgat-sweep 0,1,2,5,10,20 --policies random,round-robin --out out/fig3b\n  \
capstan sim commerce --nodes-sweep 2,4,8,16,32 --policies cap,lard,round-robin --out out/nodes\n  \
capstan sim commerce --rate-sweep 100,150,200,250,300 --out out/rate\n  \
capstan sim commerce --set workload.zipf-alpha=0.6 --set node.cache_fraction=0.05 --out out/v\n  \
capstan sim results-md --template crates/sim/BENCHMARKS-papers.template.md --results out/sim\n  \
capstan sim my-site.toml --out out/mine     # TOML: base = \"commerce\", then overrides\n  \
capstan sim sweb-skewed --out out/sweb-skewed  # SWEB §4.2: round robin vs file locality vs sweb\n  \
capstan sim sweb-sizes --replications 3 --out out/sweb-sizes\n  \
capstan sim cache --zipf 0.8 --report out/cache   # eviction policies (sim cache --help)\n  \
capstan sim tier --out out/tier   # K switches in front of 1,000 nodes (sim tier --help)\n\n\
Policy parameters follow a colon (commas separate parameters too): the switch's own parameters \
(t_low, t_high, epsilon, max_load, seed, …), plus gather=SECONDS (T_gat for this policy; 0 = live \
state) and, for weighted-round-robin, metric=active|service-time|static."
)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct SimArgs {
    #[command(subcommand)]
    command: Option<SimCommand>,
    /// Scenario name (see --list) or path to a scenario TOML file.
    #[arg(value_name = "SCENARIO", required_unless_present = "list")]
    scenario: Option<String>,
    /// List the named scenarios and policies, then exit.
    #[arg(long)]
    list: bool,
    /// Policies to compare, comma-separated, with optional parameters (`lard:t_low=10,t_high=30`)
    /// [default: cap,weighted-round-robin,…,random; sweb-*: sweb,round-robin,home-node].
    #[arg(long)]
    policies: Option<String>,
    /// Web server nodes [default: 8; sweb-*: 6].
    #[arg(long)]
    nodes: Option<usize>,
    /// New client sessions per second [default: 200; sweb-*: requests per second, default the
    /// paper's: 8, or 5–30].
    #[arg(long)]
    rate: Option<f64>,
    /// Offered HTTP requests (objects) per second instead of --rate (e.g. 100k, 2.5M): the
    /// session rate becomes this ÷ the scenario's mean requests per session (pages per session
    /// × popularity-weighted objects per page). For large clusters: `--nodes 1000
    /// --request-rate 100k`.
    #[arg(long, value_name = "REQ/S", conflicts_with = "rate", value_parser = parse_count)]
    request_rate: Option<f64>,
    /// Simulated time during which sessions arrive (e.g. 600, 90s, 10m, 1h) [default: 10m;
    /// sweb-skewed: 45s; sweb-sizes: 30s].
    #[arg(long)]
    duration: Option<String>,
    /// Pages started before this are not measured (default: a tenth of the duration).
    #[arg(long)]
    warmup: Option<String>,
    /// Independent replications (seeds SEED, SEED+1, …) per policy.
    #[arg(long, default_value_t = 5)]
    replications: usize,
    /// First seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also run WRR_num and WRR_time at these T_gat values in seconds (the paper's Figure 3;
    /// the policies given run beside them as flat baselines, e.g. `--policies random,round-robin`).
    #[arg(long, value_delimiter = ',', value_name = "SECONDS")]
    tgat_sweep: Vec<f64>,
    /// Run every policy at each of these node counts (CAP Table 1: 2–32); writes
    /// DIR/sweep.json and DIR/report.html instead of results.json.
    #[arg(long, value_delimiter = ',', value_name = "N", conflicts_with_all = ["rate_sweep", "tgat_sweep", "nodes"])]
    nodes_sweep: Vec<f64>,
    /// Run every policy at each of these arrival rates in new clients/s (CAP Table 1: 100–300);
    /// writes DIR/sweep.json and DIR/report.html.
    #[arg(long, value_delimiter = ',', value_name = "RATE", conflicts_with_all = ["tgat_sweep", "rate", "request_rate"])]
    rate_sweep: Vec<f64>,
    /// Override one scenario field, TOML syntax with a dotted path (repeatable), e.g.
    /// `--set workload.zipf-alpha=0.6`, `--set node.cache_fraction=0.05`,
    /// `--set node.ssl.rsa_kbit_per_s=3.85`, `--set costs.db-disk-ms=40` (fields: see the
    /// scenario TOML format in crates/sim/BENCHMARKS-papers.md).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    overrides: Vec<String>,
    /// Worker threads: replications (and policies) run in parallel, one run per thread at a
    /// time [default: all cores, as std::thread::available_parallelism reports them].
    #[arg(long)]
    jobs: Option<usize>,
    /// Output directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

/// A positive number with an optional k (10³) or M (10⁶) suffix: `100000`, `100k`, `2.5M`.
fn parse_count(s: &str) -> std::result::Result<f64, String> {
    let t = s.trim();
    let (num, mul) = match t.strip_suffix(['k', 'K']) {
        Some(n) => (n, 1e3),
        None => match t.strip_suffix('M') {
            Some(n) => (n, 1e6),
            None => (t, 1.0),
        },
    };
    num.trim()
        .parse::<f64>()
        .ok()
        .map(|v| v * mul)
        .filter(|v| v.is_finite() && *v > 0.0)
        .ok_or_else(|| format!("`{s}` is not a positive number (e.g. 100000, 100k, 2.5M)"))
}

/// Seconds from `90`, `90s`, `10m`, `1h`, `500ms`.
fn parse_duration(s: &str) -> Result<f64> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let v: f64 = num
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .with_context(|| format!("bad duration `{s}` (e.g. 600, 90s, 10m, 1h)"))?;
    let mul = match unit {
        "ms" => 1e-3,
        "s" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        _ => bail!("bad duration unit in `{s}` (use ms, s, m or h)"),
    };
    Ok(v * mul)
}

/// Splits the policy list on commas, re-attaching `key=value` pieces to the policy before them.
fn split_policies(text: &str) -> Result<Vec<PolicyChoice>> {
    let mut items: Vec<String> = Vec::new();
    for piece in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let is_param = piece.contains('=') && !piece.contains(':');
        match items.last_mut() {
            Some(last) if is_param => {
                last.push(',');
                last.push_str(piece);
            }
            _ if is_param => bail!("policy parameter `{piece}` has no policy before it"),
            _ => items.push(piece.to_string()),
        }
    }
    if items.is_empty() {
        bail!("--policies is empty");
    }
    items
        .iter()
        .map(|p| PolicyChoice::parse(p).map_err(anyhow::Error::msg))
        .collect()
}

fn load_scenario(arg: &str) -> Result<Scenario> {
    if let Some(s) = Scenario::named(arg) {
        return Ok(s);
    }
    let path = std::path::Path::new(arg);
    if arg.ends_with(".toml") || path.exists() {
        let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {arg}"))?;
        return Scenario::from_toml(&text).map_err(|e| anyhow::anyhow!("{arg}: {e}"));
    }
    bail!(
        "unknown scenario `{arg}` (known: {}; or a .toml file)",
        scenarios()
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// Every named scenario with its description: what `--list` prints and an unknown name's
/// error lists, from this one list.
fn scenarios() -> Vec<(&'static str, String)> {
    let own = NAMES.iter().map(|&n| {
        let about = Scenario::named(n).map(|s| s.description);
        (n, about.unwrap_or_default())
    });
    let sweb = capstan_sim::sweb::NAMES.iter().map(|&n| {
        let about = Which::named(n).map(|w| w.description().to_string());
        (n, about.unwrap_or_default())
    });
    own.chain(sweb).collect()
}

fn list() {
    println!("Scenarios:");
    for (name, about) in scenarios() {
        println!("  {name:<20} {about}");
    }
    println!("\nPolicies (the switch's; parameters after a colon):");
    for reg in capstan_core::policy::registrations() {
        println!("  {:<22} {}", reg.name, reg.about);
        if !reg.params.is_empty() {
            println!("  {:<22}   {}", "", reg.params);
        }
    }
    println!(
        "\nThe simulator's defaults where the paper is the reference: weighted-round-robin is \
         metric=active (WRR_num);\nrandom policies draw a seed per replication unless seed= is given."
    );
    println!("\nEvery policy also takes gather=SECONDS (T_gat; 0 = live server state).");
    println!(
        "In sweb-skewed and sweb-sizes, sweb's sizes, bandwidths, CPU demands and redirect \
         costs come from the model unless given; gather must be > 0 there."
    );
}

pub fn run(mut args: SimArgs) -> Result<()> {
    match args.command.take() {
        Some(SimCommand::Cache(cache)) => return run_cache(*cache),
        Some(SimCommand::ResultsMd(md)) => return run_results_md(md),
        Some(SimCommand::Tier(t)) => {
            let policies = split_policies(tier::policy_list(&t))?;
            return tier::run(*t, policies);
        }
        None => {}
    }
    if args.list {
        list();
        return Ok(());
    }
    let name = args.scenario.as_deref().unwrap_or_default();
    if let Some(which) = Which::named(name) {
        return run_sweb(&args, which);
    }
    let scenario = apply_overrides(load_scenario(name)?, &args.overrides)?;
    let policies = split_policies(args.policies.as_deref().unwrap_or(DEFAULT_POLICIES))?;
    let duration_s = parse_duration(args.duration.as_deref().unwrap_or("10m"))?;
    let nodes = args.nodes.unwrap_or(8);
    let rate = match args.request_rate {
        Some(r) => r / capstan_sim::run::requests_per_session(&scenario, args.seed),
        None => args.rate.unwrap_or(200.0),
    };
    if duration_s <= 0.0 {
        bail!("--duration must be positive");
    }
    let warmup_s = match &args.warmup {
        Some(w) => parse_duration(w)?,
        None => duration_s / 10.0,
    };
    if warmup_s >= duration_s {
        bail!("--warmup must be shorter than --duration");
    }
    if nodes == 0 || nodes > 4096 {
        bail!("--nodes must be between 1 and 4096");
    }
    if !(rate.is_finite() && rate > 0.0) {
        bail!("--rate must be a positive number of clients per second");
    }
    if args.replications == 0 {
        bail!("--replications must be at least 1");
    }
    if args.tgat_sweep.iter().any(|g| !g.is_finite() || *g < 0.0) {
        bail!("--tgat-sweep values must be seconds ≥ 0");
    }
    let threads = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let exp = Experiment {
        scenario,
        policies,
        nodes,
        rate,
        duration_s,
        warmup_s,
        replications: args.replications,
        seed: args.seed,
        tgat_sweep: args.tgat_sweep.clone(),
        threads: threads.max(1),
    };
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(exp.run_count() as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} runs, eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    };
    let progress = |done: usize, _total: usize| bar.set_position(done as u64);
    if let Some((axis, values)) = sweep_axis(&args)? {
        bar.set_length((exp.run_count() * values.len()) as u64);
        let (report, info) =
            run_sweep(&exp, axis, &values, &progress).map_err(anyhow::Error::msg)?;
        bar.finish_and_clear();
        return write_sweep(&args, &report, &info);
    }
    let (report, info) = exp.run(&progress).map_err(anyhow::Error::msg)?;
    bar.finish_and_clear();
    println!(
        "{} · {} nodes · {} clients/s · {} s · {} replication(s)",
        report.scenario.name, report.nodes, report.rate, report.duration_s, report.replications
    );
    println!(
        "{:<44} {:>5} {:>16} {:>16} {:>16} {:>16} {:>6} {:>9}",
        "policy", "layer", "mean ms", "p50 ms", "p90 ms", "p99 ms", "hit", "req/s"
    );
    let f = |e: &capstan_sim::stats::Estimate| format!("{:.0} ± {:.0}", e.value, e.ci95);
    for p in &report.policies {
        println!(
            "{:<44} {:>5} {:>16} {:>16} {:>16} {:>16} {:>6.3} {:>9.0}",
            p.policy,
            p.layer,
            f(&p.mean),
            f(&p.p50),
            f(&p.p90),
            f(&p.p99),
            p.cache_hit_rate.value,
            p.requests_per_s
        );
    }
    for t in &report.tgat {
        println!(
            "T_gat {:>6} s  WRR {:<13} p90 {}",
            t.gather_s,
            serde_json::to_string(&t.metric)?.trim_matches('"'),
            f(&t.p90)
        );
    }
    eprintln!(
        "{} runs, {} events in {:.1} s wall: {:.2} M events/s per CPU-second, {:.2} M events/s \
         wall ({} threads), {:.2} CPU-s per simulated second per run",
        info.runs,
        info.events,
        info.wall_s,
        info.events_per_cpu_s / 1e6,
        info.events_per_wall_s / 1e6,
        info.threads,
        info.cpu_s_per_simulated_s
    );
    if let Some(dir) = &args.out {
        let json = serde_json::to_string_pretty(&report)? + "\n";
        std::fs::write(dir.join("results.json"), json)
            .with_context(|| format!("cannot write {}", dir.display()))?;
        std::fs::write(
            dir.join("run-info.json"),
            serde_json::to_string_pretty(&info)? + "\n",
        )?;
        let html = capstan_sim::report::html(&report).map_err(anyhow::Error::msg)?;
        std::fs::write(dir.join("report.html"), html)?;
        eprintln!(
            "wrote {}/results.json, run-info.json, report.html",
            dir.display()
        );
    }
    Ok(())
}

/// The `--nodes-sweep` or `--rate-sweep` asked for, validated.
fn sweep_axis(args: &SimArgs) -> Result<Option<(Axis, Vec<f64>)>> {
    let (axis, values) = match (&args.nodes_sweep[..], &args.rate_sweep[..]) {
        ([], []) => return Ok(None),
        (v, []) => (Axis::Nodes, v),
        ([], v) => (Axis::Rate, v),
        _ => bail!("--nodes-sweep and --rate-sweep cannot be combined"),
    };
    axis.validate(values).map_err(anyhow::Error::msg)?;
    Ok(Some((axis, values.to_vec())))
}

fn write_sweep(args: &SimArgs, report: &SweepReport, info: &capstan_sim::RunInfo) -> Result<()> {
    println!(
        "{} · sweep of {} · {} s · {} replication(s)",
        report.scenario,
        report.axis.label(),
        report.duration_s,
        report.replications
    );
    for s in &report.series {
        let row: Vec<String> = s
            .points
            .iter()
            .map(|p| format!("{}: {:.0} ± {:.0}", p.x, p.p90.value, p.p90.ci95))
            .collect();
        println!("{:<32} p90 ms  {}", s.policy, row.join("  "));
    }
    eprintln!(
        "{} runs, {} events in {:.1} s wall",
        info.runs, info.events, info.wall_s
    );
    if let Some(dir) = &args.out {
        std::fs::write(
            dir.join("sweep.json"),
            serde_json::to_string_pretty(report)? + "\n",
        )
        .with_context(|| format!("cannot write {}", dir.display()))?;
        std::fs::write(
            dir.join("run-info.json"),
            serde_json::to_string_pretty(info)? + "\n",
        )?;
        let html = capstan_sim::sweep_report::sweep_html(report).map_err(anyhow::Error::msg)?;
        std::fs::write(dir.join("report.html"), html)?;
        eprintln!(
            "wrote {}/sweep.json, run-info.json, report.html",
            dir.display()
        );
    }
    Ok(())
}

/// `capstan sim sweb-skewed | sweb-sizes`: SWEB's experiments (see `capstan_sim::sweb`).
fn run_sweb(args: &SimArgs, which: Which) -> Result<()> {
    let name = which.name();
    if args.warmup.is_some()
        || !args.tgat_sweep.is_empty()
        || !args.nodes_sweep.is_empty()
        || !args.rate_sweep.is_empty()
        || !args.overrides.is_empty()
    {
        bail!(
            "--warmup, --tgat-sweep, --nodes-sweep, --rate-sweep and --set do not apply to {name}"
        );
    }
    let mut exp = SwebExperiment::new(which);
    if let Some(p) = &args.policies {
        exp.policies = split_policies(p)?;
    }
    if let Some(n) = args.nodes {
        if n == 0 || n > 4096 {
            bail!("--nodes must be between 1 and 4096");
        }
        exp.cluster.nodes = n;
    }
    if let Some(rate) = args.rate {
        if !(rate.is_finite() && rate > 0.0) {
            bail!("--rate must be a positive number of requests per second");
        }
        exp.rates = vec![rate];
    }
    if let Some(d) = &args.duration {
        exp.duration_s = parse_duration(d)?;
        if exp.duration_s < 1.0 {
            bail!("--duration must be at least 1 s for {name}");
        }
    }
    if args.replications == 0 {
        bail!("--replications must be at least 1");
    }
    exp.replications = args.replications;
    exp.seed = args.seed;
    exp.threads = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let started = std::time::Instant::now();
    let report = exp.run().map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    print!("{}", capstan_sim::sweb::report::text(&report));
    if !args.quiet {
        eprintln!("{name}: {:.1} s wall", started.elapsed().as_secs_f64());
    }
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let json = serde_json::to_string_pretty(&report)? + "\n";
        std::fs::write(dir.join("results.json"), json)
            .with_context(|| format!("cannot write {}", dir.display()))?;
        let html = capstan_sim::sweb::report::html(&report).map_err(anyhow::Error::msg)?;
        std::fs::write(dir.join("report.html"), html)?;
        if !args.quiet {
            eprintln!("wrote {}/results.json, report.html", dir.display());
        }
    }
    Ok(())
}

#[derive(Subcommand, Debug)]
enum SimCommand {
    // No doc comment here: it would replace CacheArgs's about and long_about (with its TRACE
    // FORMATS section) in `capstan sim cache --help`.
    Cache(Box<CacheArgs>),
    /// Render a markdown file (crates/sim/BENCHMARKS-papers.md) from a template and results directories.
    ResultsMd(ResultsMdArgs),
    // No doc comment: TierArgs has its own about and long_about.
    Tier(Box<tier::TierArgs>),
}

#[derive(Args, Debug)]
#[command(
    long_about = "Render markdown from a template whose {{...}} directives are replaced by tables and numbers read from the JSON files of `capstan sim ... --out DIR` runs under --results:\n  {{table DIR}}            policy table of DIR/results.json\n  {{tgat DIR}}             T_gat table (WRR_num, WRR_time and the flat baselines)\n  {{sweep DIR}}            p90 per policy and value of DIR/sweep.json\n  {{p90 DIR POLICY}}       one number (also mean, hit, cpu, disk; le DIR POLICY MS)\n  {{text FILE}}            a file's trimmed text\n\nA directive naming a missing file, policy or field is an error (exit 1).",
    after_help = "Example:\n  capstan sim results-md --template crates/sim/BENCHMARKS-papers.template.md \\\n      --results out/sim --out crates/sim/BENCHMARKS-papers.md"
)]
pub struct ResultsMdArgs {
    /// The template (markdown with {{...}} directives).
    #[arg(long, value_name = "FILE")]
    template: PathBuf,
    /// Directory the directives' DIR and FILE names are relative to.
    #[arg(long, value_name = "DIR")]
    results: PathBuf,
    /// Where to write the markdown (default: stdout).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

fn run_results_md(args: ResultsMdArgs) -> Result<()> {
    let template = std::fs::read_to_string(&args.template)
        .with_context(|| format!("cannot read {}", args.template.display()))?;
    let md = capstan_sim::results_md::render(&template, &args.results)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.template.display()))?;
    match &args.out {
        Some(out) => {
            std::fs::write(out, md).with_context(|| format!("cannot write {}", out.display()))
        }
        None => {
            print!("{md}");
            Ok(())
        }
    }
}

/// Applies `--set PATH=VALUE` overrides through the scenario's TOML form (so they are checked
/// exactly as a scenario file is).
fn apply_overrides(scenario: Scenario, overrides: &[String]) -> Result<Scenario> {
    if overrides.is_empty() {
        return Ok(scenario);
    }
    let mut merged = toml::Table::try_from(&scenario).context("scenario as TOML")?;
    // Each override is merged as a table of its own, so that two fields of one table
    // (`switch.a`, `switch.b`) do not become two `[switch]` headers.
    let mut sets = toml::Table::new();
    for o in overrides {
        let (path, value) = o
            .split_once('=')
            .with_context(|| format!("--set `{o}`: expected PATH=VALUE"))?;
        let (path, value) = (path.trim(), value.trim());
        if path.is_empty() || path.split('.').any(str::is_empty) {
            bail!("--set `{o}`: bad field path");
        }
        let value: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
            .ok()
            .and_then(|mut t| t.remove("v"))
            .unwrap_or_else(|| toml::Value::String(value.to_string()));
        let mut keys: Vec<&str> = path.split('.').collect();
        let last = keys.pop().unwrap_or_default();
        let mut node = toml::Table::new();
        node.insert(last.to_string(), value);
        for k in keys.into_iter().rev() {
            let mut outer = toml::Table::new();
            outer.insert(k.to_string(), toml::Value::Table(node));
            node = outer;
        }
        merge_tables(&mut sets, node);
    }
    merge_tables(&mut merged, sets);
    let merged = toml::to_string(&merged).context("scenario as TOML")?;
    Scenario::from_toml(&merged).map_err(|e| anyhow::anyhow!("--set: {e}"))
}

fn merge_tables(into: &mut toml::Table, from: toml::Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge_tables(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

const DEFAULT_CACHE_POLICIES: &str = "belady,lru,lfu-da,gdsf,clfus,s3-fifo,sieve";

#[derive(Args, Debug)]
#[command(
    about = "Compare the cache's eviction policies on a request trace: hit ratios by cache size",
    long_about = "Replay a request trace through every eviction policy of the HTTP cache (lru, \
lfu-da, gdsf, clfus, s3-fifo, sieve — the very code the switch runs, driven as its store drives \
it: a hit touches, a miss admits and evicts victims until the policy is back within the budget) \
and through Belady's offline MIN, at cache sizes given as percents of the trace's working set \
(the bytes of the distinct cachable objects it requests).\n\n\
Belady (`belady`): evict the object whose next request is furthest in the future, and do not \
admit an object needed later than every object it would displace. Optimal for the document hit \
ratio when all objects have the same size; with variable sizes it is a heuristic upper reference \
that a size-aware policy (gdsf, clfus) can beat on DHR.\n\n\
Reports the document hit ratio (DHR = hits / requests) and byte hit ratio (BHR = bytes of hits / \
bytes requested) per policy and size as a table on stdout, and optionally as JSON (--json) and an \
HTML report with SVG plots (--report). Replays run in parallel on --jobs threads; each policy's \
speed is given in requests per CPU-second of its threads.\n\n\
TRACE FORMATS\n\
--trace FILE: a Common Log Format or Combined Log Format access log, one request per line:\n  \
127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /a.gif HTTP/1.0\" 200 2326\n\
The object is the path (query included); its size is the largest response byte count logged for \
it. Only GET requests are replayed; lines with another method, a \"-\" request, or a path whose \
every response was 0 bytes are counted as skipped. Lines that are not Common Log Format are \
counted and reported (with the first one's number), never fatal.\n\n\
--zipf ALPHA: a generated trace of --requests requests over --objects objects with Zipf(ALPHA) \
popularity (0 = uniform; object 0 most popular), seeded by --seed. Object sizes (--object-sizes):\n  \
cap        the CAP paper's Table 1 law: lognormal body (mu 7.640, sigma 1.705) spliced with a \
Pareto tail (alpha 1.383, k 2924 B), clamped to 1 B..1 GiB (default)\n  \
polygraph  Web Polygraph's content mix from the Bakhtiyari thesis: image exp(4.5 KB) 65 %, HTML \
exp(8.5 KB) 15 %, download logn(300 KB, 300 KB) 0.5 %, other logn(25 KB, 10 KB); 80/90/95/72 % of \
each type cachable, the rest always miss\n  \
unit       every object 1 byte (DHR = BHR; Belady is then the exact optimum)\n  \
const:N    every object N bytes\n\
--recurrence R (Polygraph's recurrence ratio): a request revisits an already requested object \
with probability R (chosen by popularity among those), else asks for a new one.",
    after_help = "Examples:\n  \
capstan sim cache --zipf 0.8 --objects 100000 --requests 2000000 --seed 1\n  \
capstan sim cache --zipf 0.9 --object-sizes polygraph --recurrence 0.55 --report out/polycache\n  \
capstan sim cache --zipf 0.8 --object-sizes unit --policies belady,lru,sieve --json unit.json\n  \
capstan sim cache --trace access.log --cache-sizes 0.5,1,2,5,10,20,50 --json out/log.json --report out/log\n\n\
JSON (--json FILE): {trace: {source, description, requests, objects, working_set_bytes, \
requested_bytes, uncachable_requests, lines, bad_lines, skipped_lines, first_bad_line}, \
cache_sizes: [{percent, bytes}], policies: [{policy, requests_per_s, points: [{percent, \
cache_bytes, hits, byte_hits, dhr, bhr, cpu_s, requests_per_s}]}], run: {threads, wall_s}}. \
Only the timing fields (cpu_s, requests_per_s, run) change between runs of the same input."
)]
#[command(group(ArgGroup::new("source").args(["trace", "zipf"])))]
pub struct CacheArgs {
    /// A Common Log Format access log to replay (see TRACE FORMATS).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Generate the trace instead: Zipf popularity exponent (0 = uniform).
    #[arg(long, value_name = "ALPHA", allow_negative_numbers = true)]
    zipf: Option<f64>,
    /// Objects of the generated trace.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 100_000,
        conflicts_with = "trace"
    )]
    objects: u64,
    /// Requests of the generated trace.
    #[arg(
        long,
        value_name = "M",
        default_value_t = 1_000_000,
        conflicts_with = "trace"
    )]
    requests: u64,
    /// Seed of the generated trace (same seed, same trace).
    #[arg(long, value_name = "S", default_value_t = 1, conflicts_with = "trace")]
    seed: u64,
    /// Object size law of the generated trace: cap, polygraph, unit or const:BYTES.
    #[arg(
        long,
        value_name = "LAW",
        default_value = "cap",
        conflicts_with = "trace"
    )]
    object_sizes: String,
    /// Polygraph recurrence ratio in [0, 1] for the generated trace (default: none).
    #[arg(long, value_name = "R", conflicts_with = "trace")]
    recurrence: Option<f64>,
    /// Policies to compare, comma-separated: belady and the cache's lru, lfu-da, gdsf, clfus,
    /// s3-fifo, sieve.
    #[arg(long, default_value = DEFAULT_CACHE_POLICIES)]
    policies: String,
    /// Cache sizes in percent of the working set, comma-separated, each in (0, 100].
    #[arg(
        long,
        value_name = "PERCENTS",
        value_delimiter = ',',
        default_value = "1,2,5,10,20,50"
    )]
    cache_sizes: Vec<f64>,
    /// Write the results as JSON to FILE (field names below).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Write the HTML report (SVG plots of DHR and BHR vs cache size) to FILE.html, or to
    /// DIR/report.html for any other path.
    #[arg(long, value_name = "DIR|FILE")]
    report: Option<PathBuf>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// No progress on stderr.
    #[arg(short, long)]
    quiet: bool,
}

fn load_trace(args: &CacheArgs) -> Result<simcache::Trace> {
    if let Some(path) = &args.trace {
        let text =
            std::fs::read(path).with_context(|| format!("cannot read trace {}", path.display()))?;
        // Logs are ASCII in practice; a stray byte spoils one line, not the file.
        let text = String::from_utf8_lossy(&text);
        return simcache::trace::from_clf(&text, &path.display().to_string())
            .map_err(anyhow::Error::msg);
    }
    let Some(alpha) = args.zipf else {
        bail!("no trace: give --trace FILE or --zipf ALPHA (see capstan sim cache --help)");
    };
    let sizes = ObjectSizes::parse(&args.object_sizes)
        .map_err(|e| anyhow::anyhow!("--object-sizes: {e}"))?;
    let g = Generated {
        alpha,
        objects: args.objects,
        requests: args.requests,
        seed: args.seed,
        sizes,
        recurrence: args.recurrence,
    };
    simcache::trace::generate(&g).map_err(|e| {
        let flag = if e.starts_with("zipf") {
            "--zipf: "
        } else {
            ""
        };
        anyhow::anyhow!("{flag}{e}")
    })
}

fn cache_study(args: &CacheArgs) -> Result<Study> {
    let mut contenders = Vec::new();
    for name in args
        .policies
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let c = Contender::parse(name).map_err(|e| anyhow::anyhow!("--policies: {e}"))?;
        if !contenders.contains(&c) {
            contenders.push(c);
        }
    }
    if contenders.is_empty() {
        bail!("--policies is empty");
    }
    let threads = args.jobs.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    if threads == 0 {
        bail!("--jobs must be at least 1");
    }
    let study = Study {
        contenders,
        percents: args.cache_sizes.clone(),
        threads,
    };
    study
        .validate()
        .map_err(|e| anyhow::anyhow!("--cache-sizes: {e}"))?;
    Ok(study)
}

fn run_cache(args: CacheArgs) -> Result<()> {
    let study = cache_study(&args)?;
    let trace = load_trace(&args)?;
    if trace.info.bad_lines > 0 {
        eprintln!(
            "capstan: warning: {} of {} lines are not Common Log Format and were not replayed \
             (first: {})",
            trace.info.bad_lines,
            trace.info.lines,
            trace.info.first_bad_line.as_deref().unwrap_or("?")
        );
    }
    let total =
        trace.requests.len() as u64 * (study.contenders.len() * study.percents.len()) as u64;
    let bar = if args.quiet {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {human_pos}/{human_len} requests replayed, eta {eta}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b
    };
    let report = study
        .run(&trace, &|done, _| bar.set_position(done))
        .map_err(anyhow::Error::msg)?;
    bar.finish_and_clear();
    print_cache_tables(&report);
    eprintln!(
        "{} replays of {} requests in {:.2} s wall on {} thread(s)",
        report.policies.len() * report.cache_sizes.len(),
        report.trace.requests,
        report.run.wall_s,
        report.run.threads
    );
    write_cache_outputs(&args, &report)
}

fn print_cache_tables(r: &simcache::CacheReport) {
    let t = &r.trace;
    println!("{}", t.description);
    println!(
        "{} requests, {} objects, working set {}, requested {}{}",
        t.requests,
        t.objects,
        simcache::report::human_bytes(t.working_set_bytes),
        simcache::report::human_bytes(t.requested_bytes),
        if t.source == "clf" {
            format!(
                "; {} lines, {} bad, {} skipped",
                t.lines, t.bad_lines, t.skipped_lines
            )
        } else {
            String::new()
        }
    );
    for (title, bhr) in [
        ("DHR (document hit ratio)", false),
        ("BHR (byte hit ratio)", true),
    ] {
        print!("\n{title:<26}");
        for s in &r.cache_sizes {
            print!(" {:>7}", format!("{}%", s.percent));
        }
        println!("{}", if bhr { "" } else { "  M req/s" });
        for p in &r.policies {
            print!("{:<26}", p.policy);
            for x in &p.points {
                print!(" {:>7.4}", if bhr { x.bhr } else { x.dhr });
            }
            if bhr {
                println!();
            } else {
                println!("  {:>7.2}", p.requests_per_s / 1e6);
            }
        }
    }
}

fn write_cache_outputs(args: &CacheArgs, report: &simcache::CacheReport) -> Result<()> {
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(report)? + "\n";
        write_creating_parent(path, &json)?;
        eprintln!("wrote {}", path.display());
    }
    if let Some(path) = &args.report {
        let file = if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("html"))
        {
            path.clone()
        } else {
            path.join("report.html")
        };
        let html = simcache::report::html(report).map_err(anyhow::Error::msg)?;
        write_creating_parent(&file, &html)?;
        eprintln!("wrote {}", file.display());
    }
    Ok(())
}

fn write_creating_parent(path: &std::path::Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_policy_lists() {
        assert_eq!(parse_duration("10m").unwrap(), 600.0);
        assert_eq!(parse_duration("90").unwrap(), 90.0);
        assert_eq!(parse_duration("500ms").unwrap(), 0.5);
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5y").is_err());
        let p = split_policies("cap,lard:t_low=10,t_high=30,random").unwrap();
        let labels: Vec<_> = p.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(labels, ["cap", "lard:t_low=10,t_high=30", "random"]);
        assert!(split_policies("t_low=3").is_err());
        assert!(split_policies("nope").is_err());
    }
}
