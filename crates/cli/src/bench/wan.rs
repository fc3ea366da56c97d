//! `capstan bench --wan`: the load generator behind `capstan wan`'s delay router (Banga &
//! Druschel §4.4), one client group per path.
//!
//! The bench runs twice, as two processes. The *outer* run checks every argument, then runs
//! `capstan wan run` in its own process (the router is its thread) with the paths of `--wan`,
//! `--wan-group` or `--wan-config`; the router's client command is this binary with the same
//! arguments plus `--wan-inner DIR`. The *inner* run, in the client namespace, points the
//! loopback target at `$CAPSTAN_WAN_SERVER`, runs one generator per client group — each bound
//! to its group's addresses, which is how the router tells the groups' paths apart — with the
//! load split by the groups' address counts, and writes their results to DIR. The outer run
//! then merges them, adds the router's per-path report (`--stats-out`) as `wan` and writes the
//! result, summary and report as any bench does.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, bail, Context, Result};
use capstan_bench::{BenchConfig, Engine, RunResult, WanPath, WanResult};
use capstan_wan::command::{PathFlags, RouterFlags, RunArgs, WanCommand};
use capstan_wan::config::{PathSpec, WanConfig};
use capstan_wan::stats::Report;
use capstan_wan::WanArgs;
use serde::{Deserialize, Serialize};

use super::args::BenchArgs;
use super::output::{end_progress_line, judge, progress_printer, runtime, write_outputs};

/// What the inner run leaves for the outer one: each group's result.
const GROUPS_FILE: &str = "groups.json";
/// The router's final report (`capstan wan run --stats-out`).
const ROUTER_FILE: &str = "router.json";

/// True when the arguments ask for the router.
pub fn requested(a: &BenchArgs) -> bool {
    a.wan.is_some() || !a.wan_group.is_empty() || a.wan_config.is_some()
}

/// The paths as `capstan wan run` takes them: `--wan` is the defaults of every `--wan-group`
/// (as `capstan wan run`'s flags are for its `--path`s), or the one path when there is no
/// group. Each spec is checked on its own first, so an error names the flag it came from.
fn path_flags(a: &BenchArgs) -> Result<PathFlags> {
    let mut flags = PathFlags {
        seed: Some(a.seed),
        config: a.wan_config.clone(),
        ..PathFlags::default()
    };
    let defaults = a.wan.as_deref().unwrap_or("");
    PathSpec::parse(defaults).map_err(|e| anyhow!("--wan: {e}"))?;
    for g in &a.wan_group {
        PathSpec::parse(g).map_err(|e| anyhow!("--wan-group {g:?}: {e}"))?;
        flags.paths.push(format!("{defaults},{g}"));
    }
    if flags.paths.is_empty() && a.wan_config.is_none() {
        flags.paths.push(defaults.to_string());
    }
    Ok(flags)
}

/// The emulation the arguments describe, checked (names, address budget, the TOML file).
fn wan_config(flags: &PathFlags) -> Result<WanConfig> {
    flags.to_config().map_err(|e| anyhow!("--wan: {e}"))
}

/// Each group's name, client addresses in the set-up's order, and share of the load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Group {
    name: String,
    clients: u32,
    share: f64,
}

fn groups(config: &WanConfig) -> Vec<Group> {
    let total: u32 = config.paths.iter().map(|p| p.clients).sum();
    config
        .paths
        .iter()
        .map(|p| Group {
            name: p.name.clone(),
            clients: p.clients,
            share: f64::from(p.clients) / f64::from(total.max(1)),
        })
        .collect()
}

/// Splits the run over the groups by their shares: rates, closed-loop clients (largest
/// remainder), connection and in-flight limits; each group gets its own seed.
fn split(config: &BenchConfig, groups: &[Group]) -> Result<Vec<BenchConfig>> {
    let clients = match &config.engine {
        Engine::Closed { clients, .. } => Some(apportion(*clients, groups)?),
        Engine::Replay { .. } if groups.len() > 1 => {
            bail!("--replay runs through one WAN path; give --wan without --wan-group")
        }
        _ => None,
    };
    let scale = |n: usize, share: f64| ((n as f64 * share).ceil() as usize).max(1);
    Ok(groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut c = config.clone();
            c.engine = match &config.engine {
                Engine::Open { rate } => Engine::Open {
                    rate: rate * g.share,
                },
                Engine::Sessions {
                    rate,
                    model,
                    parallel,
                    think_scale,
                } => Engine::Sessions {
                    rate: rate * g.share,
                    model: *model,
                    parallel: *parallel,
                    think_scale: *think_scale,
                },
                Engine::Closed { think, .. } => Engine::Closed {
                    clients: clients.as_ref().map_or(1, |c| c[i]),
                    think: *think,
                },
                Engine::SClient { sockets } => Engine::SClient {
                    sockets: scale(*sockets, g.share),
                },
                replay => replay.clone(),
            };
            c.connections = scale(config.connections, g.share);
            c.max_inflight = config.max_inflight.map(|m| scale(m, g.share));
            c.seed = config.seed.wrapping_add(i as u64);
            c
        })
        .collect())
}

/// `n` closed-loop clients over the groups by share, largest remainder first; every group
/// needs at least one.
fn apportion(n: usize, groups: &[Group]) -> Result<Vec<usize>> {
    let exact: Vec<f64> = groups.iter().map(|g| n as f64 * g.share).collect();
    let mut out: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let left = n - out.iter().sum::<usize>();
    for &i in order.iter().take(left) {
        out[i] += 1;
    }
    if let Some(i) = out.iter().position(|&c| c == 0) {
        bail!(
            "--clients {n} leaves client group '{}' without a client; give at least {}",
            groups[i].name,
            groups
                .iter()
                .map(|g| (1.0 / g.share).ceil() as usize)
                .max()
                .unwrap_or(1)
        );
    }
    Ok(out)
}

/// The router reaches only the server side's address: the target must be this machine.
fn check_target(config: &BenchConfig) -> Result<()> {
    let host = config.target.host.as_str();
    let loopback = host == "localhost"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        bail!(
            "--wan needs a target on this machine (http://127.0.0.1:PORT/ or localhost), got \
             {host}; the server must listen on 0.0.0.0 to be reached through the router"
        );
    }
    if config.target.tls && !config.insecure {
        bail!("--wan with https:// needs --insecure: the server is reached at the router's address, not its certificate's name");
    }
    Ok(())
}

/// The outer run: checks, runs `capstan wan run` with the inner run as its command, writes
/// the merged result.
pub fn outer(a: &BenchArgs, config: &BenchConfig) -> Result<()> {
    let flags = path_flags(a)?;
    let wan = wan_config(&flags)?;
    check_target(config)?;
    split(config, &groups(&wan))?;
    capstan_wan::setup::require_root().map_err(|_| {
        anyhow!("--wan needs root (the router makes network namespaces and TUN devices); run it with sudo")
    })?;
    let dir = ScratchDir::create()?;
    let code = capstan_wan::main(WanArgs {
        command: WanCommand::Run(RunArgs {
            paths: flags,
            router: router_defaults(),
            server_cmd: None,
            server_port: None,
            stats_out: Some(dir.0.join(ROUTER_FILE)),
            quiet: true,
            cmd: inner_command(&dir.0)?,
        }),
    })
    .map_err(|e| anyhow!("--wan: {e:#}"))?;
    if code != 0 {
        // The inner run has said why on standard error.
        drop(dir);
        std::process::exit(code);
    }
    let result = collect(&dir.0, &config.target.url())?;
    write_outputs(&result, a.json.as_deref(), a.report.as_deref(), a.quiet)?;
    judge(&result, a.max_error_rate)
}

/// The router's settings as `capstan wan run` defaults them.
fn router_defaults() -> RouterFlags {
    #[derive(clap::Parser)]
    struct Defaults {
        #[command(flatten)]
        router: RouterFlags,
    }
    <Defaults as clap::Parser>::parse_from(["capstan"]).router
}

/// This binary with this run's arguments, plus `--wan-inner DIR`.
fn inner_command(dir: &Path) -> Result<Vec<String>> {
    let exe = std::env::current_exe().context("cannot find the capstan executable")?;
    let mut cmd = vec![exe.display().to_string()];
    for arg in std::env::args_os().skip(1) {
        cmd.push(
            arg.into_string()
                .map_err(|a| anyhow!("argument {a:?} is not UTF-8"))?,
        );
    }
    cmd.push("--wan-inner".into());
    cmd.push(dir.display().to_string());
    Ok(cmd)
}

/// A directory for the two runs' files, removed when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn create() -> Result<ScratchDir> {
        let dir = std::env::temp_dir().join(format!("capstan-bench-wan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(ScratchDir(dir))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One group's result as the inner run leaves it.
#[derive(Serialize, Deserialize)]
struct GroupResult {
    group: Group,
    addresses: Vec<String>,
    server: String,
    result: RunResult,
}

/// Merges the groups' results and adds the router's report.
fn collect(dir: &Path, target: &str) -> Result<RunResult> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    let groups: Vec<GroupResult> = serde_json::from_str(&read(GROUPS_FILE)?)
        .context("the inner run's results do not parse")?;
    let router: Report =
        serde_json::from_str(&read(ROUTER_FILE)?).context("the router's report does not parse")?;
    let results: Vec<RunResult> = groups.iter().map(|g| g.result.clone()).collect();
    let mut merged = capstan_bench::merge(&results)?;
    merged.shards.dedup();
    merged.target = target.to_string();
    merged.wan = Some(wan_result(&groups, &router)?);
    Ok(merged)
}

fn wan_result(groups: &[GroupResult], router: &Report) -> Result<WanResult> {
    let mut whole = serde_json::to_value(router)?;
    if let Some(o) = whole.as_object_mut() {
        o.remove("paths");
    }
    let mut paths = Vec::new();
    for g in groups {
        let report = router
            .paths
            .iter()
            .find(|p| p.name == g.group.name)
            .ok_or_else(|| anyhow!("the router has no path '{}'", g.group.name))?;
        let r = &g.result;
        paths.push(WanPath {
            name: g.group.name.clone(),
            clients: g.addresses.clone(),
            share: g.group.share,
            offered_rps: r.offered_rps,
            completed: r.completed,
            completed_rps: r.completed_rps,
            errors_total: r.errors_total,
            latency_ms: r.latency_ms.clone(),
            connect_ms: r.connect_ms.clone(),
            ttfb_ms: r.ttfb_ms.clone(),
            router: serde_json::to_value(report)?,
        });
    }
    Ok(WanResult {
        server: groups.first().map(|g| g.server.clone()).unwrap_or_default(),
        router: whole,
        paths,
    })
}

/// The inner run, in the client namespace: one generator per group, results to `dir`.
pub fn inner(a: &BenchArgs, mut config: BenchConfig, dir: &Path) -> Result<()> {
    let server = std::env::var("CAPSTAN_WAN_SERVER")
        .map_err(|_| anyhow!("--wan-inner is for capstan bench --wan's own use"))?;
    let namespace = std::env::var("CAPSTAN_WAN_NAMESPACE").unwrap_or_default();
    let state = capstan_wan::setup::live_states()
        .into_iter()
        .find(|s| s.client_namespace == namespace)
        .ok_or_else(|| anyhow!("cannot find the WAN set-up of namespace '{namespace}'"))?;
    config.target.host = server.clone();
    let groups = groups(&wan_config(&path_flags(a)?)?);
    let mut configs = split(&config, &groups)?;
    let mut addresses = Vec::new();
    for (c, g) in configs.iter_mut().zip(&groups) {
        let addrs = state
            .paths
            .iter()
            .find(|(name, _)| *name == g.name)
            .map(|(_, a)| a.clone())
            .ok_or_else(|| anyhow!("the set-up has no client group '{}'", g.name))?;
        c.bind = addrs.iter().filter_map(|s| s.parse().ok()).collect();
        addresses.push(addrs);
    }
    let results = run_groups(configs, a.quiet)?;
    let out: Vec<GroupResult> = results
        .into_iter()
        .zip(groups)
        .zip(addresses)
        .map(|((result, group), addresses)| GroupResult {
            group,
            addresses,
            server: server.clone(),
            result,
        })
        .collect();
    let path = dir.join(GROUPS_FILE);
    std::fs::write(&path, serde_json::to_string(&out)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Runs the groups' generators at once; one progress line sums them.
fn run_groups(configs: Vec<BenchConfig>, quiet: bool) -> Result<Vec<RunResult>> {
    let rt = runtime()?;
    let printer = progress_printer(quiet);
    let latest = Arc::new(Mutex::new(vec![None; configs.len()]));
    let results = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for (i, c) in configs.into_iter().enumerate() {
            let progress = printer.clone().map(|print| {
                let latest = latest.clone();
                Arc::new(move |p: &capstan_bench::Progress| {
                    let mut all = latest.lock().unwrap_or_else(|e| e.into_inner());
                    all[i] = Some(p.clone());
                    if i == 0 {
                        print(&sum_progress(&all));
                    }
                }) as capstan_bench::ProgressFn
            });
            set.spawn(async move { (i, capstan_bench::run(c, progress).await) });
        }
        let mut out = Vec::new();
        while let Some(joined) = set.join_next().await {
            let (i, r) = joined.map_err(|e| anyhow!("a generator failed: {e}"))?;
            out.push((i, r?));
        }
        out.sort_by_key(|(i, _)| *i);
        Ok::<_, anyhow::Error>(out.into_iter().map(|(_, r)| r).collect())
    })?;
    end_progress_line(quiet);
    Ok(results)
}

fn sum_progress(all: &[Option<capstan_bench::Progress>]) -> capstan_bench::Progress {
    let mut p = capstan_bench::Progress::default();
    for q in all.iter().flatten() {
        p.elapsed_s = p.elapsed_s.max(q.elapsed_s);
        p.duration_s = p.duration_s.max(q.duration_s);
        p.offered += q.offered;
        p.started += q.started;
        p.completed += q.completed;
        p.errors += q.errors;
        p.dropped += q.dropped;
        p.inflight += q.inflight;
        p.rps += q.rps;
        p.p99_ms = p.p99_ms.max(q.p99_ms);
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_bench::Target;

    fn group(name: &str, clients: u32, share: f64) -> Group {
        Group {
            name: name.into(),
            clients,
            share,
        }
    }

    fn open(rate: f64) -> BenchConfig {
        BenchConfig::open(Target::parse("http://127.0.0.1:8080/").unwrap(), rate)
    }

    #[test]
    fn load_splits_by_the_groups_addresses() {
        let wan = WanConfig {
            name: None,
            paths: ["name=lan,clients=3", "name=modem,clients=1"]
                .iter()
                .enumerate()
                .map(|(i, s)| PathSpec::parse(s).unwrap().build(i).unwrap())
                .collect(),
            seed: 1,
        };
        let g = groups(&wan);
        assert_eq!((g[0].share, g[1].share), (0.75, 0.25));
        let mut c = open(100.0);
        c.connections = 10;
        let parts = split(&c, &g).unwrap();
        assert_eq!(parts[0].engine, Engine::Open { rate: 75.0 });
        assert_eq!(parts[1].engine, Engine::Open { rate: 25.0 });
        assert_eq!((parts[0].connections, parts[1].connections), (8, 3));
        assert_eq!((parts[0].seed, parts[1].seed), (1, 2));
    }

    #[test]
    fn closed_loop_clients_go_by_largest_remainder() {
        let g = [group("a", 1, 0.5), group("b", 1, 0.3), group("c", 1, 0.2)];
        assert_eq!(apportion(10, &g).unwrap(), [5, 3, 2]);
        assert_eq!(apportion(4, &g).unwrap(), [2, 1, 1]);
        let e = apportion(2, &g).unwrap_err().to_string();
        assert!(
            e.contains("'c' without a client") && e.contains("at least 5"),
            "{e}"
        );
    }

    #[test]
    fn only_a_loopback_target_can_be_reached_through_the_router() {
        assert!(check_target(&open(1.0)).is_ok());
        let mut c = open(1.0);
        c.target = Target::parse("http://localhost:9/").unwrap();
        assert!(check_target(&c).is_ok());
        c.target = Target::parse("http://example.org/").unwrap();
        let e = check_target(&c).unwrap_err().to_string();
        assert!(
            e.contains("on this machine") && e.contains("0.0.0.0"),
            "{e}"
        );
        c.target = Target::parse("https://127.0.0.1/").unwrap();
        assert!(check_target(&c)
            .unwrap_err()
            .to_string()
            .contains("--insecure"));
    }
}
