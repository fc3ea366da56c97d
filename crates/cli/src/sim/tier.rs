//! `capstan sim tier`: the many-dispatcher experiment (`capstan_sim::tier`) from the command line.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use capstan_sim::tier::{report, TierExperiment, DEFAULT_POLICIES};
use capstan_sim::PolicyChoice;
use clap::Args;

#[derive(Args, Debug)]
#[command(
    about = "Simulate a tier of K switches (dispatchers) in front of the same nodes: local vs \
shared views, join-idle-queue, power-of-d, least-connections against K and load",
    long_about = "Simulate a tier of K dispatchers (switches) in front of N nodes, each dispatcher \
running its own instance of a policy (the switch's code), as several Capstan switches behind DNS \
round robin do. Requests arrive as a Poisson stream, each at a dispatcher chosen uniformly; every \
node serves first come, first served with exponential service times (mean --service).\n\n\
Views: a dispatcher on LOCAL counts knows only the requests it placed itself. On the SHARED view \
(`view=shared`; the default of power-of-d and join-idle-queue) it also knows the tier's counts, \
exchanged every --gossip-period (0 = an exact, always-current view) as the switch's gossip feeds \
them; a stale count is corrected by the dispatcher's own live requests. Policies on the shared \
view run once per gossip period.\n\n\
Runs every policy × gossip period × K × load × replication on --jobs threads and prints mean and \
p99 response time per K and load, with findings. With --out DIR it writes DIR/tier.json (format \
capstan-sim-tier/1: nodes, dispatchers, loads, gossip_periods_ms, service_ms, jobs_per_node, \
replications, seeds, series: [{policy, view, gossip_ms, points: [{dispatchers, load, mean, p50, \
p90, p99 (ms, {value, ci95}), to_idle, requests}]}]; deterministic: same seed, same bytes), \
DIR/run-info.json and DIR/report.html (plots of mean and p99 against K per load, every point).\n\n\
The default grid is the acceptance run: 1,000 nodes, K = 1, 2, 4, 8, 16, 32, 64, loads 0.5, 0.7 \
and 0.9, gossip every 100 ms (10 mean service times). --quick: 100 nodes, K = 1, 8, 64, loads \
0.5 and 0.9, 50 requests per node.",
    after_help = "Examples:\n  \
capstan sim tier --out out/tier\n  \
capstan sim tier --quick --out out/tier-quick\n  \
capstan sim tier --nodes 500 --dispatchers 1,4,16 --loads 0.9 --gossip-period 0,10ms,100ms,1s\n  \
capstan sim tier --policies 'random,join-idle-queue,join-idle-queue:choices=2,\
join-idle-queue:threshold=2' --out out/jiq"
)]
pub struct TierArgs {
    /// Nodes behind the tier [default: 1000; --quick: 100].
    #[arg(long)]
    nodes: Option<usize>,
    /// Tier sizes to run, comma-separated [default: 1,2,4,8,16,32,64; --quick: 1,8,64].
    #[arg(long, value_delimiter = ',', value_name = "K")]
    dispatchers: Vec<usize>,
    /// Offered loads per node in (0, 1), comma-separated [default: 0.5,0.7,0.9; --quick:
    /// 0.5,0.9].
    #[arg(long, value_delimiter = ',', value_name = "LOAD")]
    loads: Vec<f64>,
    /// Policies, comma-separated, parameters after a colon (as `capstan sim --policies`)
    /// [default: random, round-robin, least-connections local and shared, power-of-d local and
    /// shared, join-idle-queue local and shared].
    #[arg(long)]
    policies: Option<String>,
    /// How often the dispatchers exchange their counts (comma-separated: one series per period
    /// for each shared-view policy; 0 = exact) [default: 100ms].
    #[arg(long, value_delimiter = ',', value_name = "PERIOD")]
    gossip_period: Vec<String>,
    /// Mean service time of a request at a node.
    #[arg(long, default_value = "10ms")]
    service: String,
    /// Requests per node in each run [default: 100; --quick: 50].
    #[arg(long)]
    jobs_per_node: Option<u64>,
    /// Fraction of each run's requests not measured (warm-up).
    #[arg(long, default_value_t = 0.2)]
    warmup: f64,
    /// Independent replications (seeds SEED, SEED+1, …) per point.
    #[arg(long, default_value_t = 1)]
    replications: usize,
    /// First seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The small grid (see above): seconds, for a first look or a test.
    #[arg(long)]
    quick: bool,
    /// Worker threads [default: all cores].
    #[arg(long)]
    jobs: Option<usize>,
    /// Output directory (tier.json, run-info.json, report.html).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

fn seconds(text: &str, flag: &str) -> Result<f64> {
    capstan_bench::parse_duration(text)
        .map(|d| d.as_secs_f64())
        .map_err(|e| anyhow::anyhow!("{flag}: {e}"))
}

fn or<T: Clone>(given: &[T], default: &[T]) -> Vec<T> {
    if given.is_empty() {
        default.to_vec()
    } else {
        given.to_vec()
    }
}

/// The experiment the arguments describe, checked.
fn experiment(args: &TierArgs, policies: Vec<PolicyChoice>) -> Result<TierExperiment> {
    let quick = args.quick;
    let periods = or(&args.gossip_period, &["100ms".to_string()]);
    let exp = TierExperiment {
        nodes: args.nodes.unwrap_or(if quick { 100 } else { 1000 }),
        dispatchers: or(
            &args.dispatchers,
            if quick {
                &[1, 8, 64]
            } else {
                &[1, 2, 4, 8, 16, 32, 64]
            },
        ),
        loads: or(
            &args.loads,
            if quick { &[0.5, 0.9] } else { &[0.5, 0.7, 0.9] },
        ),
        policies,
        gossip_periods_s: periods
            .iter()
            .map(|p| seconds(p, "--gossip-period"))
            .collect::<Result<_>>()?,
        service_ms: seconds(&args.service, "--service")? * 1e3,
        jobs_per_node: args.jobs_per_node.unwrap_or(if quick { 50 } else { 100 }),
        warmup: args.warmup,
        replications: args.replications,
        seed: args.seed,
        threads: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    if !(0.0..1.0).contains(&exp.warmup) {
        bail!("--warmup must be a fraction in [0, 1)");
    }
    if exp.threads == 0 {
        bail!("--jobs must be at least 1");
    }
    exp.validate().map_err(anyhow::Error::msg)?;
    Ok(exp)
}

pub fn run(args: TierArgs, policies: Vec<PolicyChoice>) -> Result<()> {
    let exp = experiment(&args, policies)?;
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
    let (tier, info) = exp
        .run(&|done, _| bar.set_position(done as u64))
        .map_err(anyhow::Error::msg)?;
    bar.finish_and_clear();
    print!("{}", report::text(&tier));
    if !args.quiet {
        eprintln!(
            "{} runs, {} events in {:.1} s wall on {} thread(s)",
            info.runs, info.events, info.wall_s, info.threads
        );
    }
    if let Some(dir) = &args.out {
        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name), text)
                .with_context(|| format!("cannot write {}", dir.join(name).display()))
        };
        write("tier.json", serde_json::to_string_pretty(&tier)? + "\n")?;
        write("run-info.json", serde_json::to_string_pretty(&info)? + "\n")?;
        write(
            "report.html",
            report::html(&tier).map_err(anyhow::Error::msg)?,
        )?;
        if !args.quiet {
            eprintln!(
                "wrote {}/tier.json, run-info.json, report.html",
                dir.display()
            );
        }
    }
    Ok(())
}

/// The policy list as given, or the default.
pub fn policy_list(args: &TierArgs) -> &str {
    args.policies.as_deref().unwrap_or(DEFAULT_POLICIES)
}
