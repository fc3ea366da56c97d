//! One contender of a WAN experiment, started for one run on `0.0.0.0` (so the client
//! namespace reaches it through the router), and what the lab reads from it while the load
//! runs: the kernel's view of its port, its processes, its emulated file cache and CPU time.
//! Every process is stopped when the [`Backend`] is dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use capstan_workload::tree::DocTree;

use super::protocols::{self, Protocol};
use crate::model::wan::{Sample, WanExperiment};
use crate::procs::cluster::{free_loopback_port, get, load_report};
use crate::procs::daemon::{tree_cpu, version, Daemon};
use crate::procs::servers::{self, RunningServer, ServerKind, ServerSpec};

/// Why a contender did not start.
pub(super) enum NotStarted {
    /// Its program is missing and cannot be installed: the contender is skipped.
    Skip(String),
    /// It was there but failed.
    Failed(String),
}

/// What serves: an emulated node (alone or behind the switch) or a real server.
enum Serving {
    Emulated {
        daemons: Vec<Daemon>,
        /// The node's report address (outside its process limit).
        report: SocketAddr,
    },
    Real(RunningServer),
}

/// A started contender.
pub(super) struct Backend {
    /// The port the load goes to, on every address of the root namespace.
    pub port: u16,
    /// The only path asked for (the trivial workload), or `None` for the whole tree.
    pub only_path: Option<String>,
    pub setup: String,
    pub version: String,
    /// The URL is https:// (a TLS listener; the generator gets --insecure).
    pub tls: bool,
    /// The generator's protocol and connection flags (the `switch-h*` contenders).
    pub client_args: Vec<String>,
    serving: Serving,
}

/// What a run shares between its contenders: the tree and, once a real server needs it, the
/// tree written to disk.
pub(super) struct Shared {
    pub exe: PathBuf,
    pub dir: PathBuf,
    pub tree: DocTree,
    pub docroot: Option<PathBuf>,
}

impl Shared {
    /// The tree on disk, written at the first call.
    fn docroot(&mut self) -> Result<PathBuf, NotStarted> {
        if let Some(d) = &self.docroot {
            return Ok(d.clone());
        }
        let d = self.dir.join("docroot");
        servers::write_tree(&self.tree, &d).map_err(|e| NotStarted::Failed(e.to_string()))?;
        self.docroot = Some(d.clone());
        Ok(d)
    }

    /// The tree's file closest to 1 KB: the paper's trivial workload asks for it alone.
    pub fn one_kb_file(&self) -> String {
        self.tree
            .files
            .iter()
            .min_by_key(|f| f.size.abs_diff(1024))
            .map(|f| f.path.clone())
            .unwrap_or_else(|| "/".into())
    }
}

fn port() -> Result<u16, NotStarted> {
    free_loopback_port()
        .map(|a| a.port())
        .map_err(|e| NotStarted::Failed(e.to_string()))
}

impl Backend {
    pub async fn start(
        name: &str,
        exp: &WanExperiment,
        shared: &mut Shared,
    ) -> Result<Backend, NotStarted> {
        match name {
            "origin-processes" => start_emulated(exp, shared, true, None).await,
            "origin-processes-1k" => {
                let path = shared.one_kb_file();
                start_emulated(exp, shared, true, Some(path)).await
            }
            "origin-events" => start_emulated(exp, shared, false, None).await,
            "switch" => start_switch(exp, shared).await,
            "switch-h1" => start_protocol(exp, shared, Protocol::H1).await,
            "switch-h2" => start_protocol(exp, shared, Protocol::H2).await,
            "switch-h3" => start_protocol(exp, shared, Protocol::H3).await,
            "apache2" => start_real(ServerKind::Apache2, exp, shared).await,
            "nginx" => start_real(ServerKind::Nginx, exp, shared).await,
            other => Err(NotStarted::Failed(format!("unknown contender {other:?}"))),
        }
    }

    /// The server's state now; `t_s` is filled in by the caller.
    pub async fn sample(&self) -> Sample {
        let tcp = servers::tcp_counts(self.port).unwrap_or_default();
        let mut s = Sample {
            t_s: 0.0,
            established: tcp.established,
            accept_queue: tcp.accept_queue,
            syn_recv: tcp.syn_recv,
            finishing: tcp.finishing,
            send_queue_bytes: tcp.send_queue_bytes,
            processes: None,
            cache_bytes: None,
        };
        match &self.serving {
            Serving::Emulated { report, .. } => {
                if let Ok(r) = load_report(*report).await {
                    s.processes = r.processes.map(|p| p.in_use as u32);
                    s.cache_bytes = r.cache.map(|c| c.capacity_bytes);
                }
            }
            // The master only hands out work: the paper counts the serving processes.
            Serving::Real(server) => s.processes = Some(server.processes().saturating_sub(1)),
        }
        s
    }

    /// CPU seconds of every process that serves (the switch and its node together).
    pub fn cpu_seconds(&self) -> f64 {
        match &self.serving {
            Serving::Emulated { daemons, .. } => {
                daemons.iter().map(|d| tree_cpu(d.child.id())).sum()
            }
            Serving::Real(server) => server.cpu_seconds(),
        }
    }

    /// The emulated node's file cache hits and misses so far.
    pub async fn cache_counts(&self) -> Option<(u64, u64)> {
        let Serving::Emulated { report, .. } = &self.serving else {
            return None;
        };
        let c = load_report(*report).await.ok()?.cache?;
        Some((c.hits, c.misses))
    }
}

/// `capstan origin`'s arguments for the experiment's node.
fn origin_command(
    exe: &Path,
    exp: &WanExperiment,
    listen: SocketAddr,
    report: SocketAddr,
    processes: bool,
) -> Command {
    let s = &exp.server;
    let w = &exp.workload;
    let mut cmd = Command::new(exe);
    cmd.args([
        "origin",
        "--name",
        "origin",
        "--listen",
        &listen.to_string(),
    ])
    .args(["--report-listen", &report.to_string()])
    .args(["--tree", &w.tree, "--seed", &w.seed.to_string()])
    .args(["--threads", &s.threads.to_string()])
    .args(["--cache-fraction", &s.cache_fraction.to_string()])
    .args(["--backlog", &s.backlog.to_string(), "--warm-cache"])
    .env("RUST_LOG", "warn");
    if let Some(n) = w.files {
        cmd.args(["--files", &n.to_string()]);
    }
    if processes {
        cmd.args(["--process-limit", &s.process_limit.to_string()])
            .args(["--process-memory", &s.process_memory]);
    }
    cmd
}

/// Starts an emulated node and waits for its report address.
async fn node(
    exp: &WanExperiment,
    shared: &Shared,
    listen: SocketAddr,
    processes: bool,
) -> Result<(Daemon, SocketAddr), NotStarted> {
    let report = free_loopback_port().map_err(|e| NotStarted::Failed(e.to_string()))?;
    let mut cmd = origin_command(&shared.exe, exp, listen, report, processes);
    let log = shared.dir.join("origin.log");
    let mut d = Daemon::spawn("capstan origin", &mut cmd, log).map_err(NotStarted::Failed)?;
    d.ready(report, "/_capstan/load", Duration::from_secs(30))
        .await
        .map_err(NotStarted::Failed)?;
    Ok((d, report))
}

fn node_setup(exp: &WanExperiment, processes: bool) -> String {
    let s = &exp.server;
    let model = if processes {
        format!(
            "process per connection, {} processes of {} each",
            s.process_limit, s.process_memory
        )
    } else {
        "event-driven".to_string()
    };
    format!(
        "capstan origin (emulated, {model}; file cache {} × the tree, warm; backlog {}; {} thread(s))",
        s.cache_fraction, s.backlog, s.threads
    )
}

async fn start_emulated(
    exp: &WanExperiment,
    shared: &mut Shared,
    processes: bool,
    only_path: Option<String>,
) -> Result<Backend, NotStarted> {
    let port = port()?;
    let (daemon, report) = node(exp, shared, ([0, 0, 0, 0], port).into(), processes).await?;
    let mut setup = node_setup(exp, processes);
    if let Some(p) = &only_path {
        setup += &format!("; every request for {p} (the trivial workload)");
    }
    Ok(Backend {
        port,
        only_path,
        setup,
        version: format!("capstan {}", env!("CARGO_PKG_VERSION")),
        tls: false,
        client_args: Vec::new(),
        serving: Serving::Emulated {
            daemons: vec![daemon],
            report,
        },
    })
}

/// The switch on `0.0.0.0` in front of one process-per-connection node on loopback.
async fn start_switch(exp: &WanExperiment, shared: &mut Shared) -> Result<Backend, NotStarted> {
    let failed = |e: std::io::Error| NotStarted::Failed(e.to_string());
    let node_addr = free_loopback_port().map_err(failed)?;
    let (node_daemon, report) = node(exp, shared, node_addr, true).await?;
    let port = port()?;
    let admin = free_loopback_port().map_err(failed)?;
    let conf = shared.dir.join("switch.toml");
    let text = format!(
        "# The switch facing the WAN, one node behind it (written by capstan lab).\n\
         listen = [\"0.0.0.0:{port}\"]\nadmin = \"{admin}\"\n\n[policy]\nname = \"round-robin\"\n\n\
         [[node]]\nname = \"origin\"\naddress = \"{node_addr}\"\nreport_address = \"{report}\"\n\n\
         # As the paper's servers: no admission limit, nothing shed.\n[admission]\nlimit = \"off\"\n"
    );
    std::fs::write(&conf, text).map_err(failed)?;
    let mut cmd = Command::new(&shared.exe);
    cmd.args(["serve", "--config"])
        .arg(&conf)
        .args(["--threads", &exp.server.threads.to_string()])
        .env("RUST_LOG", "warn");
    let log = shared.dir.join("switch.log");
    let mut switch = Daemon::spawn("capstan serve", &mut cmd, log).map_err(NotStarted::Failed)?;
    let probe = shared.one_kb_file();
    switch
        .ready(
            ([127, 0, 0, 1], port).into(),
            &probe,
            Duration::from_secs(30),
        )
        .await
        .map_err(NotStarted::Failed)?;
    Ok(Backend {
        port,
        only_path: None,
        setup: format!(
            "capstan serve (round-robin, pooled keep-alive connections, no admission limit) \
             in front of {}",
            node_setup(exp, true)
        ),
        version: format!("capstan {}", env!("CARGO_PKG_VERSION")),
        tls: false,
        client_args: Vec::new(),
        serving: Serving::Emulated {
            daemons: vec![switch, node_daemon],
            report,
        },
    })
}

/// The switch with a TLS listener on `0.0.0.0` (and `quic = true` when this build takes it)
/// in front of one event-driven node on loopback, loaded over `proto` (`switch-h*`). A build
/// whose `capstan check` refuses `quic = true` skips the HTTP/3 contender with its reason and
/// runs the others without it.
async fn start_protocol(
    exp: &WanExperiment,
    shared: &mut Shared,
    proto: Protocol,
) -> Result<Backend, NotStarted> {
    let failed = |e: std::io::Error| NotStarted::Failed(e.to_string());
    let node_addr = free_loopback_port().map_err(failed)?;
    let port = port()?;
    let plain = free_loopback_port().map_err(failed)?;
    let admin = free_loopback_port().map_err(failed)?;
    std::fs::write(shared.dir.join("localhost.pem"), protocols::CERT).map_err(failed)?;
    std::fs::write(shared.dir.join("localhost.key"), protocols::KEY).map_err(failed)?;
    let conf = shared.dir.join("switch-tls.toml");
    let report = free_loopback_port().map_err(failed)?;
    let text =
        |quic| protocols::switch_config(&shared.dir, port, plain, admin, node_addr, report, quic);
    std::fs::write(&conf, text(true)).map_err(failed)?;
    let mut note = "";
    if let Err(why) = check_config(&shared.exe, &conf) {
        if proto == Protocol::H3 {
            return Err(NotStarted::Skip(format!(
                "HTTP/3 not available in this build (capstan check refuses quic = true: {why})"
            )));
        }
        std::fs::write(&conf, text(false)).map_err(failed)?;
        note = ", without quic = true (this build refuses it)";
    }
    let mut cmd = origin_command(&shared.exe, exp, node_addr, report, false);
    let mut node_daemon = Daemon::spawn("capstan origin", &mut cmd, shared.dir.join("origin.log"))
        .map_err(NotStarted::Failed)?;
    node_daemon
        .ready(report, "/_capstan/load", Duration::from_secs(30))
        .await
        .map_err(NotStarted::Failed)?;
    let mut cmd = Command::new(&shared.exe);
    cmd.args(["serve", "--config"])
        .arg(&conf)
        .args(["--threads", &exp.server.threads.to_string()])
        .env("RUST_LOG", "warn");
    let log = shared.dir.join("switch.log");
    let mut switch = Daemon::spawn("capstan serve", &mut cmd, log).map_err(NotStarted::Failed)?;
    switch
        .ready(plain, &shared.one_kb_file(), Duration::from_secs(30))
        .await
        .map_err(NotStarted::Failed)?;
    Ok(Backend {
        port,
        only_path: None,
        setup: format!(
            "capstan serve (TLS listener{note}; round-robin, pooled keep-alive connections, no              admission limit) in front of {}; clients: {} over {}",
            node_setup(exp, false),
            proto.name(),
            proto.describe(&exp.client)
        ),
        version: format!("capstan {}", env!("CARGO_PKG_VERSION")),
        tls: true,
        client_args: proto.client_args(&exp.client),
        serving: Serving::Emulated {
            daemons: vec![switch, node_daemon],
            report,
        },
    })
}

/// `capstan check FILE`: Ok, or the first line of its complaint.
fn check_config(exe: &Path, conf: &Path) -> Result<(), String> {
    let out = Command::new(exe)
        .arg("check")
        .arg(conf)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(protocols::check_line(&String::from_utf8_lossy(&out.stderr)))
    }
}

async fn start_real(
    kind: ServerKind,
    exp: &WanExperiment,
    shared: &mut Shared,
) -> Result<Backend, NotStarted> {
    let program = servers::ensure_installed(kind).map_err(NotStarted::Skip)?;
    let docroot = shared.docroot()?;
    let port = port()?;
    let s = &exp.server;
    let workers = match kind {
        ServerKind::Apache2 => s.process_limit,
        ServerKind::Nginx => s.threads as u32,
    };
    let spec = ServerSpec {
        kind,
        docroot,
        listen: ([0, 0, 0, 0], port).into(),
        workers,
        backlog: s.backlog,
        keep_alive: false,
    };
    let server = RunningServer::start(&spec, &shared.dir)
        .map_err(|e| NotStarted::Failed(format!("{}: {e}", kind.name())))?;
    let probe = shared.one_kb_file();
    get(([127, 0, 0, 1], port).into(), &probe)
        .await
        .map_err(|e| NotStarted::Failed(format!("{}: {e}", kind.name())))?;
    let setup = match kind {
        ServerKind::Apache2 => format!(
            "apache2 (prefork MPM, MaxRequestWorkers {workers}, ListenBacklog {}, no keep-alive), \
             the tree on disk",
            s.backlog
        ),
        ServerKind::Nginx => format!(
            "nginx ({workers} worker process(es), backlog {}, no keep-alive), the tree on disk",
            s.backlog
        ),
    };
    Ok(Backend {
        port,
        only_path: None,
        setup,
        version: version(&program, "-v"),
        tls: false,
        client_args: Vec::new(),
        serving: Serving::Real(server),
    })
}
