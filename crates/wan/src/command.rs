//! `capstan wan run | up | down | stats`: arguments and what each subcommand does. The `capstan`
//! binary only forwards to [`main`], so this crate's tests can drive the commands themselves.

// The argument structs' doc comments are clap's `--help` text: `ge:P,R[,LOSS_BAD[,LOSS_GOOD]]`
// is meant literally, not as a rustdoc link.
#![allow(rustdoc::broken_intra_doc_links)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};

use crate::config::{PathSpec, WanConfig};
use crate::control::{self, StatsServer};
use crate::router::{Router, RouterPlan};
use crate::setup::{self, Setup, State};
use crate::signals;
use crate::stats::Report;

#[derive(Args, Debug)]
#[command(
    about = "Emulate WAN paths (delay, bandwidth, queueing, loss) between network namespaces; every IP packet, TCP and UDP (QUIC) alike"
)]
pub struct WanArgs {
    #[command(subcommand)]
    pub command: WanCommand,
}

#[derive(Subcommand, Debug)]
pub enum WanCommand {
    /// Run CMD in a client namespace whose traffic to the server side crosses the router.
    Run(RunArgs),
    /// Set up namespaces and router in the background for longer sessions.
    Up(UpArgs),
    /// Tear down a set-up made with `up` (and any left by killed runs).
    Down(DownArgs),
    /// Per path and direction: packets, bytes, drops by cause, queue depth, delay error.
    Stats(StatsArgs),
}

/// The paths to emulate: one from the flags, several from --path, or a TOML file.
#[derive(Args, Debug, Default)]
pub struct PathFlags {
    /// Round-trip latency, split evenly between the directions (e.g. 100ms).
    #[arg(long)]
    pub rtt: Option<String>,
    /// One-way latency, each direction (e.g. 50ms).
    #[arg(long)]
    pub delay: Option<String>,
    /// Bandwidth each direction (e.g. 10mbit, 1gbit, 56kbit; default unlimited).
    #[arg(long)]
    pub bandwidth: Option<String>,
    /// Loss each direction: 1% (independent) or ge:P,R[,LOSS_BAD[,LOSS_GOOD]] (Gilbert-Elliott).
    #[arg(long)]
    pub loss: Option<String>,
    /// Queue limit before the bandwidth bottleneck: 64KB, 64KiB or 100p (default 1000p).
    #[arg(long)]
    pub queue: Option<String>,
    /// Latency varies uniformly by ± this much (packets of one flow keep their order).
    #[arg(long)]
    pub jitter: Option<String>,
    /// Let jitter reorder the packets of a flow.
    #[arg(long)]
    pub reorder: bool,
    /// A client group with its own path: name=N,clients=K,rtt=…,up.bandwidth=…; repeatable.
    /// The flags above are defaults for every --path.
    #[arg(long = "path", value_name = "SPEC")]
    pub paths: Vec<String>,
    /// Paths from a TOML file (see README); excludes the flags above.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Seed for loss and jitter.
    #[arg(long)]
    pub seed: Option<u64>,
}

/// How the router thread runs.
#[derive(Args, Debug, Default)]
pub struct RouterFlags {
    /// Do not ask for real-time (SCHED_FIFO) scheduling of the router thread.
    #[arg(long)]
    pub no_realtime: bool,
    /// Longest the router spins before a departure (it sleeps on a timer until then).
    #[arg(long, default_value = "200us")]
    pub max_spin: String,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub paths: PathFlags,
    #[command(flatten)]
    pub router: RouterFlags,
    /// Run this shell command as the server, in a server namespace of its own.
    #[arg(long, value_name = "SHELL-COMMAND")]
    pub server_cmd: Option<String>,
    /// Wait until the server listens on this TCP port before starting CMD.
    #[arg(long, requires = "server_cmd")]
    pub server_port: Option<u16>,
    /// Write the final per-path report as JSON to this file.
    #[arg(long)]
    pub stats_out: Option<PathBuf>,
    /// Do not print the per-path report on exit.
    #[arg(long, short)]
    pub quiet: bool,
    /// The client command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

#[derive(Args, Debug)]
pub struct UpArgs {
    #[command(flatten)]
    pub paths: PathFlags,
    #[command(flatten)]
    pub router: RouterFlags,
    /// Set-up name (default: the file's `name`, else "wan"): namespace cwan-NAME.
    #[arg(long)]
    pub name: Option<String>,
    /// Put the server side in a namespace of its own (cwan-NAME-srv).
    #[arg(long)]
    pub server_namespace: bool,
    /// Stay in the foreground (the background process runs this way).
    #[arg(long)]
    pub foreground: bool,
}

#[derive(Args, Debug)]
pub struct DownArgs {
    /// The set-up to stop (default "wan").
    #[arg(long, default_value = "wan")]
    pub name: String,
    /// Stop every set-up made with `up`.
    #[arg(long, conflicts_with = "name")]
    pub all: bool,
}

#[derive(Args, Debug)]
pub struct StatsArgs {
    /// Only this set-up (`up` name, or run-PID).
    #[arg(long)]
    pub name: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs a `capstan wan` subcommand; the result is the process exit code.
pub fn main(args: WanArgs) -> Result<i32> {
    match args.command {
        WanCommand::Run(a) => run(a),
        WanCommand::Up(a) => up(a).map(|()| 0),
        WanCommand::Down(a) => down(a).map(|()| 0),
        WanCommand::Stats(a) => stats(a).map(|()| 0),
    }
}

impl PathFlags {
    /// Builds the configuration the flags describe.
    pub fn to_config(&self) -> Result<WanConfig> {
        let defaults = self.defaults()?;
        if let Some(file) = &self.config {
            if !defaults.is_empty() || !self.paths.is_empty() {
                bail!("give paths either with --config or with flags, not both");
            }
            let text = std::fs::read_to_string(file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            let mut config =
                WanConfig::from_toml(&text).map_err(|e| anyhow!("{}: {e}", file.display()))?;
            if let Some(seed) = self.seed {
                config.seed = seed;
            }
            return Ok(config);
        }
        let specs = if self.paths.is_empty() {
            vec![defaults.clone()]
        } else {
            let parsed: Result<Vec<PathSpec>, String> = self
                .paths
                .iter()
                .map(|p| PathSpec::parse(p).map(|s| defaults.clone().then(s)))
                .collect();
            parsed.map_err(|e| anyhow!(e))?
        };
        let paths: Result<Vec<_>, String> =
            specs.iter().enumerate().map(|(i, s)| s.build(i)).collect();
        let config = WanConfig {
            name: None,
            paths: paths.map_err(|e| anyhow!(e))?,
            seed: self.seed.unwrap_or(1),
        };
        config.validate().map_err(|e| anyhow!(e))?;
        Ok(config)
    }

    fn defaults(&self) -> Result<PathSpec> {
        let mut spec = PathSpec::default();
        let flags = [
            ("rtt", &self.rtt),
            ("delay", &self.delay),
            ("bandwidth", &self.bandwidth),
            ("loss", &self.loss),
            ("queue", &self.queue),
            ("jitter", &self.jitter),
        ];
        for (key, value) in flags {
            if let Some(v) = value {
                spec.set(key, v).map_err(|e| anyhow!("--{key}: {e}"))?;
            }
        }
        if self.reorder {
            spec.set("reorder", "true").map_err(|e| anyhow!(e))?;
        }
        Ok(spec)
    }
}

impl RouterFlags {
    fn plan(&self, state: &State, config: &WanConfig) -> Result<RouterPlan> {
        let max_lead =
            crate::units::parse_duration(&self.max_spin).map_err(|e| anyhow!("--max-spin: {e}"))?;
        Ok(RouterPlan {
            name: state.name.clone(),
            server: state.server_addr(),
            paths: config.paths.clone(),
            clients: state.client_addrs(),
            seed: config.seed,
            realtime: !self.no_realtime,
            max_lead,
        })
    }
}

/// A set-up with its router and stats socket; dropping it stops and removes everything.
struct Running {
    // Field order is drop order: the stats socket, then the router, then the namespaces.
    stats: StatsServer,
    router: Router,
    setup: Setup,
}

fn start(
    config: &WanConfig,
    name: Option<&str>,
    server_ns: bool,
    flags: &RouterFlags,
) -> Result<Running> {
    let mut setup = Setup::create(config, name, server_ns)?;
    let plan = flags.plan(&setup.state, config)?;
    let (client, server) = setup.take_devices()?;
    let router = Router::spawn(plan, client, server)?;
    let stats = StatsServer::start(&setup.state.stats_socket(), router.report_handle())?;
    Ok(Running {
        stats,
        router,
        setup,
    })
}

impl Running {
    /// Stops the router and removes the set-up; the router's final report.
    fn finish(self) -> Result<Report> {
        let Running {
            stats,
            router,
            mut setup,
        } = self;
        drop(stats);
        let report = router.stop();
        setup.remove()?;
        report
    }
}

/// The environment a client or server command finds the set-up in.
fn environment(state: &State) -> Vec<(String, String)> {
    let mut env = vec![
        ("CAPSTAN_WAN_SERVER".to_string(), state.server.clone()),
        (
            "CAPSTAN_WAN_NAMESPACE".to_string(),
            state.client_namespace.clone(),
        ),
    ];
    if let Some(first) = state.paths.first().and_then(|(_, a)| a.first()) {
        env.push(("CAPSTAN_WAN_CLIENT".into(), first.clone()));
    }
    for (name, addrs) in &state.paths {
        let key: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        env.push((format!("CAPSTAN_WAN_CLIENTS_{key}"), addrs.join(" ")));
    }
    env
}

/// Replaces `$NAME` and `${NAME}` of the set-up's variables in a (single-quoted) argument, so
/// `curl 'http://$CAPSTAN_WAN_SERVER/'` works without a shell.
fn expand(arg: &str, env: &[(String, String)]) -> String {
    let mut vars: Vec<&(String, String)> = env.iter().collect();
    // Longest names first: $CAPSTAN_WAN_CLIENT is a prefix of $CAPSTAN_WAN_CLIENTS_….
    vars.sort_by_key(|(k, _)| std::cmp::Reverse(k.len()));
    let mut out = arg.to_string();
    for (k, v) in vars {
        out = out
            .replace(&format!("${{{k}}}"), v)
            .replace(&format!("${k}"), v);
    }
    out
}

/// Starts `argv` inside network namespace `ns` (via `ip netns exec`).
fn spawn_in(ns: &str, argv: &[String], env: &[(String, String)]) -> Result<Child> {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]).args(argv);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2), which is
    // async-signal-safe; it asks the kernel to end the child if this process dies (even by
    // SIGKILL), so no command outlives the set-up it was started in.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGTERM as libc::c_ulong,
                0,
                0,
                0,
            );
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("cannot start {}", argv.join(" ")))
}

fn run(args: RunArgs) -> Result<i32> {
    let config = args.paths.to_config()?;
    signals::install();
    let running = start(&config, None, args.server_cmd.is_some(), &args.router)?;
    let state = running.setup.state.clone();
    let env = environment(&state);
    let mut server = match (&args.server_cmd, &state.server_namespace) {
        (Some(sh), Some(ns)) => Some(spawn_in(ns, &["sh".into(), "-c".into(), sh.clone()], &env)?),
        _ => None,
    };
    let outcome = (|| -> Result<i32> {
        if let (Some(port), Some(ns)) = (args.server_port, &state.server_namespace) {
            wait_for_listener(ns, port, server.as_mut())?;
        }
        let argv: Vec<String> = args.cmd.iter().map(|a| expand(a, &env)).collect();
        let client = spawn_in(&state.client_namespace, &argv, &env)?;
        supervise(client, &running.router)
    })();
    if let Some(s) = server.as_mut() {
        stop_child(s, libc::SIGTERM, Duration::from_secs(3));
    }
    let report = running.finish()?;
    if !args.quiet {
        eprint!("{}", report.table());
    }
    if let Some(path) = &args.stats_out {
        std::fs::write(path, serde_json::to_string_pretty(&report)?)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    outcome
}

/// Waits for the client to end, forwarding signals; returns the exit code to pass on.
fn supervise(mut client: Child, router: &Router) -> Result<i32> {
    let mut signalled = None;
    let mut kill_at = None;
    loop {
        if let Some(status) = client.try_wait()? {
            return Ok(signalled.map_or_else(|| exit_code(status), |s| 128 + s));
        }
        if let Some(sig) = signals::take() {
            signals::send(client.id(), sig);
            signalled = Some(sig);
            kill_at.get_or_insert(Instant::now() + Duration::from_secs(5));
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            signals::send(client.id(), libc::SIGKILL);
        }
        if !router.is_running() {
            stop_child(&mut client, libc::SIGTERM, Duration::from_secs(3));
            bail!("the router stopped unexpectedly");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Sends `sig`, then SIGKILL if the child has not ended within `grace`.
fn stop_child(child: &mut Child, sig: i32, grace: Duration) {
    if matches!(child.try_wait(), Ok(Some(_))) {
        return;
    }
    signals::send(child.id(), sig);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Polls until something accepts TCP connections on `port` inside namespace `ns`.
fn wait_for_listener(ns: &str, port: u16, mut server: Option<&mut Child>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let probe = crate::netns::spawn_in(ns, move || {
            std::net::TcpStream::connect_timeout(
                &([127, 0, 0, 1], port).into(),
                Duration::from_millis(200),
            )
            .is_ok()
        });
        if probe
            .join()
            .map_err(|_| anyhow!("probe thread panicked"))??
        {
            return Ok(());
        }
        if let Some(s) = server.as_deref_mut() {
            if let Some(status) = s.try_wait()? {
                bail!("the server command ended ({status}) before listening on port {port}");
            }
        }
        if Instant::now() >= deadline {
            bail!("the server did not listen on port {port} within 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn up(args: UpArgs) -> Result<()> {
    let mut config = args.paths.to_config()?;
    let name = args
        .name
        .clone()
        .or(config.name.clone())
        .unwrap_or_else(|| "wan".into());
    config.name = Some(name.clone());
    config.validate().map_err(|e| anyhow!(e))?;
    if !args.foreground {
        return up_in_background(&name);
    }
    signals::install();
    let running = start(&config, Some(&name), args.server_namespace, &args.router)?;
    let mut out = std::io::stdout();
    // The parent waits for this line; after it, stdout is closed by the parent.
    let _ = writeln!(
        out,
        "ready {}",
        serde_json::to_string(&running.setup.state)?
    );
    let _ = out.flush();
    let result = loop {
        if let Some(sig) = signals::take() {
            eprintln!("capstan wan: signal {sig}, tearing down");
            break Ok(());
        }
        if !running.router.is_running() {
            break Err(anyhow!("the router stopped unexpectedly"));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let report = running.finish()?;
    eprint!("{}", report.table());
    result
}

/// Starts `capstan wan up --foreground` detached and waits until its set-up is ready.
fn up_in_background(name: &str) -> Result<()> {
    setup::require_root()?;
    std::fs::create_dir_all(setup::RUN_DIR)?;
    let log_path = PathBuf::from(setup::RUN_DIR).join(format!("up-{name}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("cannot write {}", log_path.display()))?;
    let exe = std::env::current_exe().context("cannot find the capstan executable")?;
    let mut argv: Vec<String> = std::env::args().skip(1).collect();
    argv.push("--foreground".into());
    let mut child = Command::new(exe)
        .args(&argv)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .process_group(0)
        .spawn()
        .context("cannot start the background router")?;
    let stdout = child
        .stdout
        .take()
        .context("no pipe from the background router")?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let Some(json) = line.strip_prefix("ready ") else {
        let _ = child.wait();
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        let why = log
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message");
        bail!("set-up failed: {}", why.trim_start_matches("capstan: "));
    };
    let state: State = serde_json::from_str(json.trim())?;
    print_up_summary(&state, child.id(), &log_path);
    Ok(())
}

fn print_up_summary(state: &State, pid: u32, log: &std::path::Path) {
    println!(
        "set-up '{}' is up (router pid {pid}, log {})",
        state.name,
        log.display()
    );
    println!(
        "  server address   {}  ({})",
        state.server,
        state
            .server_namespace
            .as_deref()
            .unwrap_or("root namespace")
    );
    println!("  client namespace {}", state.client_namespace);
    for (path, addrs) in &state.paths {
        println!("  path {path:<12} clients {}", addrs.join(" "));
    }
    println!(
        "run clients with:  ip netns exec {} CMD   (bind a path's address to use that path)",
        state.client_namespace
    );
    println!("stop with:         capstan wan down --name {}", state.name);
}

fn down(args: DownArgs) -> Result<()> {
    setup::require_root()?;
    let targets: Vec<State> = setup::all_states()
        .into_iter()
        .filter(|s| s.id.starts_with("up-") && (args.all || s.name == args.name))
        .collect();
    let stale = setup::clean_stale();
    if targets.is_empty() {
        if args.all || !stale.is_empty() {
            println!("removed {} stale set-up(s)", stale.len());
            return Ok(());
        }
        bail!("no set-up named '{}' is up", args.name);
    }
    for s in targets.iter().filter(|s| s.is_alive()) {
        signals::send(s.pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while targets.iter().any(|s| s.dir().exists() && s.is_alive()) {
        if Instant::now() >= deadline {
            bail!("the router did not stop within 15 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    setup::clean_stale();
    for s in &targets {
        println!("set-up '{}' is down", s.name);
    }
    Ok(())
}

fn stats(args: StatsArgs) -> Result<()> {
    let states: Vec<State> = setup::live_states()
        .into_iter()
        .filter(|s| args.name.as_ref().is_none_or(|n| &s.name == n))
        .collect();
    if states.is_empty() {
        bail!(
            "{}",
            match &args.name {
                Some(n) => format!("no set-up named '{n}' is running"),
                None => "no capstan wan set-up is running".into(),
            }
        );
    }
    let reports: Vec<Report> = states
        .iter()
        .map(|s| control::query(&s.stats_socket()))
        .collect::<Result<_>>()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    } else {
        for r in &reports {
            print!("{}", r.table());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            server: "198.18.4.1".into(),
            client_namespace: "cwan-1-0".into(),
            paths: vec![
                ("lan".into(), vec!["198.18.4.2".into()]),
                (
                    "far-away".into(),
                    vec!["198.18.4.3".into(), "198.18.4.4".into()],
                ),
            ],
            ..State::default()
        }
    }

    #[test]
    fn environment_names_the_server_and_each_paths_clients() {
        let env = environment(&state());
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CAPSTAN_WAN_SERVER"), Some("198.18.4.1"));
        assert_eq!(get("CAPSTAN_WAN_CLIENT"), Some("198.18.4.2"));
        assert_eq!(
            get("CAPSTAN_WAN_CLIENTS_FAR_AWAY"),
            Some("198.18.4.3 198.18.4.4")
        );
    }

    #[test]
    fn arguments_name_the_set_up_without_a_shell() {
        let env = environment(&state());
        assert_eq!(
            expand("http://$CAPSTAN_WAN_SERVER:8080/", &env),
            "http://198.18.4.1:8080/"
        );
        assert_eq!(expand("${CAPSTAN_WAN_CLIENT}", &env), "198.18.4.2");
        assert_eq!(expand("$CAPSTAN_WAN_CLIENTS_LAN", &env), "198.18.4.2");
        assert_eq!(expand("$HOME", &env), "$HOME");
    }

    #[test]
    fn flags_and_path_specs_combine() {
        let flags = PathFlags {
            rtt: Some("100ms".into()),
            paths: vec!["name=a".into(), "name=b,rtt=10ms,clients=3".into()],
            ..PathFlags::default()
        };
        let c = flags.to_config().unwrap();
        assert_eq!(c.paths[0].up.latency, Duration::from_millis(50));
        assert_eq!(c.paths[1].up.latency, Duration::from_millis(5));
        assert_eq!(c.paths[1].clients, 3);
        let both = PathFlags {
            rtt: Some("1ms".into()),
            config: Some("x.toml".into()),
            ..PathFlags::default()
        };
        assert!(both
            .to_config()
            .unwrap_err()
            .to_string()
            .contains("not both"));
        let bad = PathFlags {
            bandwidth: Some("fast".into()),
            ..PathFlags::default()
        };
        assert_eq!(
            bad.to_config().unwrap_err().to_string(),
            "--bandwidth: bad rate 'fast'"
        );
    }
}
