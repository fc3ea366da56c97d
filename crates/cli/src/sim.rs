//! `capstan sim`: the discrete-event simulator of the web cluster.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use capstan_sim::scenario::{Scenario, NAMES};
use capstan_sim::{Experiment, PolicyChoice};
use clap::Args;

const DEFAULT_POLICIES: &str = "cap,weighted-round-robin,weighted-round-robin:metric=service-time,\
lard,static-partitioning,round-robin,random";

#[derive(Args, Debug)]
#[command(
    about = "Simulate the web cluster (CAP paper §4) with the same policies the switch runs",
    long_about = "Simulate a web cluster in virtual time: client sessions (CAP paper Table 1), a \
layer-4/7 web switch that sees server state only every T_gat, web nodes with a processor-shared \
CPU, FCFS disk, LRU memory cache (15 % of the site), NIC and SSL costs (Table 2), and back-end \
database servers. Every policy is the switch's own code from capstan-core.\n\n\
Writes DIR/results.json (deterministic: same seed, same bytes), DIR/run-info.json (wall time, \
events/s) and DIR/report.html (CDF and T_gat plots, tables), and prints a summary.",
    after_help = "Examples:\n  \
capstan sim --list\n  \
capstan sim transaction --duration 2m --replications 3 --out out/transaction\n  \
capstan sim commerce --policies cap,weighted-round-robin,lard,round-robin,random \\\n      \
--nodes 8 --rate 200 --duration 10m --replications 5 --seed 1 --out out/commerce\n  \
capstan sim publishing-static --policies 'lard:t_low=10,t_high=30,cap' --out out/pub\n  \
capstan sim commerce --tgat-sweep 0,1,2,5,10,20 --policies cap --out out/fig3\n  \
capstan sim my-site.toml --out out/mine     # TOML: base = \"commerce\", then overrides\n\n\
Policy parameters follow a colon (commas separate parameters too): the switch's own parameters \
(t_low, t_high, epsilon, max_load, seed, …), plus gather=SECONDS (T_gat for this policy; 0 = live \
state) and, for weighted-round-robin, metric=active|service-time|static."
)]
pub struct SimArgs {
    /// Scenario name (see --list) or path to a scenario TOML file.
    #[arg(value_name = "SCENARIO", required_unless_present = "list")]
    scenario: Option<String>,
    /// List the named scenarios and policies, then exit.
    #[arg(long)]
    list: bool,
    /// Policies to compare, comma-separated, with optional parameters (`lard:t_low=10,t_high=30`).
    #[arg(long, default_value = DEFAULT_POLICIES)]
    policies: String,
    /// Web server nodes.
    #[arg(long, default_value_t = 8)]
    nodes: usize,
    /// New client sessions per second.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Simulated time during which sessions arrive (e.g. 600, 90s, 10m, 1h).
    #[arg(long, default_value = "10m")]
    duration: String,
    /// Pages started before this are not measured (default: a tenth of the duration).
    #[arg(long)]
    warmup: Option<String>,
    /// Independent replications (seeds SEED, SEED+1, …) per policy.
    #[arg(long, default_value_t = 5)]
    replications: usize,
    /// First seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also run WRR_num and WRR_time at these T_gat values in seconds (the paper's Figure 3).
    #[arg(long, value_delimiter = ',', value_name = "SECONDS")]
    tgat_sweep: Vec<f64>,
    /// Worker threads (default: all cores).
    #[arg(long)]
    jobs: Option<usize>,
    /// Output directory.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
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
        NAMES.join(", ")
    )
}

fn list() {
    println!("Scenarios:");
    for n in NAMES {
        let s = Scenario::named(n).expect("named");
        println!("  {n:<20} {}", s.description);
    }
    println!("\nPolicies (the switch's; parameters after a colon):");
    for n in capstan_core::PolicySpec::NAMES {
        let extra = match *n {
            "weighted-round-robin" => "  metric=active|service-time|static (default active)",
            "lard" | "lard-r" => "  t_low, t_high (active connections)",
            "cap-load" => "  max_load",
            "consistent-hash" => "  epsilon, virtual_nodes",
            "static-partitioning" => "  ideal partitions (by class arrival share) unless given",
            "random" | "two-choices" => "  seed (default: derived from the run's seed)",
            "peak-ewma" => "  decay_time_secs",
            _ => "",
        };
        println!("  {n}{extra}");
    }
    println!("\nEvery policy also takes gather=SECONDS (T_gat; 0 = live server state).");
}

pub fn run(args: SimArgs) -> Result<()> {
    if args.list {
        list();
        return Ok(());
    }
    let scenario = load_scenario(args.scenario.as_deref().unwrap_or_default())?;
    let policies = split_policies(&args.policies)?;
    let duration_s = parse_duration(&args.duration)?;
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
    if args.nodes == 0 || args.nodes > 4096 {
        bail!("--nodes must be between 1 and 4096");
    }
    if !(args.rate.is_finite() && args.rate > 0.0) {
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
        nodes: args.nodes,
        rate: args.rate,
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
    let (report, info) = exp.run(&progress).map_err(anyhow::Error::msg)?;
    bar.finish_and_clear();
    println!(
        "{} · {} nodes · {} clients/s · {} s · {} replication(s)",
        report.scenario.name, report.nodes, report.rate, report.duration_s, report.replications
    );
    println!(
        "{:<44} {:>5} {:>16} {:>16} {:>16} {:>16} {:>6}",
        "policy", "layer", "mean ms", "p50 ms", "p90 ms", "p99 ms", "hit"
    );
    let f = |e: &capstan_sim::stats::Estimate| format!("{:.0} ± {:.0}", e.value, e.ci95);
    for p in &report.policies {
        println!(
            "{:<44} {:>5} {:>16} {:>16} {:>16} {:>16} {:>6.3}",
            p.policy,
            p.layer,
            f(&p.mean),
            f(&p.p50),
            f(&p.p90),
            f(&p.p99),
            p.cache_hit_rate.value
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
        "{} runs, {} events in {:.1} s wall ({:.2} M events per CPU-second, {} threads)",
        info.runs,
        info.events,
        info.wall_s,
        info.events_per_cpu_s / 1e6,
        info.threads
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
