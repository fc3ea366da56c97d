//! The cluster of one run: emulated nodes and the switch, each a child process of the `capstan`
//! binary, so each one's CPU use can be read from `/proc/PID/stat` and a crash of one cannot take
//! the lab down with it.

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::model::error::LabError;

/// One node's resources as the lab starts it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    pub name: String,
    pub speed: f64,
    pub cores: u32,
    /// `K/N`: the node's share of a partitioned tree (`capstan origin --partition`).
    pub partition: Option<String>,
}

/// Everything `capstan origin` needs besides its speed.
#[derive(Debug, Clone)]
pub struct NodeArgs {
    pub tree: String,
    pub files: Option<usize>,
    pub seed: u64,
    pub cpu_light_ms: Option<f64>,
    pub cpu_med_ms: Option<f64>,
    pub disk_load_ms: Option<f64>,
    pub cache_fraction: Option<f64>,
    pub threads: usize,
    /// Window of the node's `interval` load figures: the switch's T_gat, so each gather sees
    /// the time since the previous one.
    pub load_interval_ms: u64,
    pub remote_penalty: Option<f64>,
    /// A configuration file for every node (`capstan origin --config`).
    pub config: Option<PathBuf>,
    /// Every node registers itself in etcd under its name (`capstan origin --register`).
    pub register: Option<Registration>,
}

/// Where and how nodes register themselves: `capstan origin --register URL --deregister-wait
/// WAIT` (the key is the node's `--name`).
#[derive(Debug, Clone)]
pub struct Registration {
    /// `etcd://HOST:PORT/PREFIX`.
    pub url: String,
    /// How long a node keeps serving after SIGTERM has deleted its key.
    pub deregister_wait: Duration,
}

/// The secure class over TLS for real (`[workload.secure]`): the switch gets a TLS listener with
/// `cert`/`key`, and with `to_nodes` every node gets one too and the switch reaches the nodes
/// through it, verifying their certificate against `ca` for the name `localhost`.
#[derive(Debug, Clone)]
pub struct ClusterTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    pub to_nodes: bool,
}

/// The name the test certificate is issued for (and 127.0.0.1), sent as SNI to the nodes.
pub const TLS_NAME: &str = "localhost";

/// A child that is killed when dropped, so an error or Ctrl-C path never leaves nodes behind.
pub struct Proc {
    pub child: Child,
    pub name: String,
    pub log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The last non-empty line the child wrote to its log, for error messages.
    fn last_log_line(&self) -> String {
        std::fs::read_to_string(&self.log)
            .ok()
            .and_then(|s| {
                s.lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(str::to_string)
            })
            .unwrap_or_else(|| "no output".into())
    }

    fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "{} exited ({status}): {}",
                self.name,
                self.last_log_line()
            )),
            _ => None,
        }
    }
}

pub struct Cluster {
    pub nodes: Vec<(NodeSpec, SocketAddr, Proc)>,
    /// Each node's report address (`capstan origin --report-listen`, in the order of `nodes`):
    /// it answers `/_capstan/load` outside the node's process limit, so the lab can read the
    /// load of a node whose processes are all busy and whose backlog is full.
    pub reports: Vec<SocketAddr>,
    pub switch: Proc,
    pub listen: SocketAddr,
    pub admin: SocketAddr,
    /// The switch's TLS listener, when the secure class runs over TLS.
    pub tls_listen: Option<SocketAddr>,
}

/// A free loopback port that this process has not handed out before.
///
/// Binding port 0 and letting it go can give the same port twice in a row, and the kernel also
/// hands its ephemeral ports to outgoing connections, so ports come from below the usual
/// ephemeral range (32768 and up), starting at a place that differs per process, and each one is
/// checked by binding it. Another process could still take it in between (another lab running
/// beside this one, say); a node or switch that then finds its port taken is started again on
/// other ports (`on_fresh_ports`).
pub fn free_loopback_port() -> std::io::Result<SocketAddr> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const SPAN: u32 = 12_000;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let seed = std::process::id().wrapping_mul(2_654_435_761) % SPAN;
    let _ = NEXT.compare_exchange(u32::MAX, seed, Ordering::Relaxed, Ordering::Relaxed);
    for _ in 0..SPAN {
        let port = FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % SPAN;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port as u16)) {
            return listener.local_addr();
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "every loopback port from 20000 to 31999 is taken",
    ))
}

fn free_port() -> Result<SocketAddr, LabError> {
    free_loopback_port().map_err(|e| LabError::Run(format!("no free port: {e}")))
}

/// Starts a process on ports picked by [`free_port`] with `start`, again on other ports (up to
/// four more times) when another process took one of them between the pick and the bind.
async fn on_fresh_ports<T, F: std::future::Future<Output = Result<T, LabError>>>(
    mut start: impl FnMut() -> F,
) -> Result<T, LabError> {
    let mut attempt = 0;
    loop {
        match start().await {
            // The failed process has exited and is dropped with the error.
            Err(LabError::Run(e)) if e.contains("Address already in use") && attempt < 4 => {
                attempt += 1;
            }
            done => return done,
        }
    }
}

/// The node's `capstan origin` command line.
fn node_command(
    exe: &Path,
    spec: &NodeSpec,
    args: &NodeArgs,
    tls: Option<&ClusterTls>,
    report: SocketAddr,
) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("origin")
        .args([
            "--listen",
            "127.0.0.1:0",
            "--report-listen",
            &report.to_string(),
            "--name",
            &spec.name,
            "--tree",
            &args.tree,
        ])
        .args(["--seed", &args.seed.to_string()])
        .args([
            "--cores",
            &spec.cores.to_string(),
            "--speed",
            &spec.speed.to_string(),
        ])
        .args([
            "--threads",
            &args.threads.to_string(),
            "--load-interval-ms",
            &args.load_interval_ms.to_string(),
        ]);
    if let Some(f) = args.files {
        cmd.args(["--files", &f.to_string()]);
    }
    if let Some(c) = &args.config {
        cmd.arg("--config").arg(c);
    }
    if let Some(p) = &spec.partition {
        cmd.args(["--partition", p]);
    }
    if let Some(r) = args.remote_penalty {
        cmd.args(["--remote-penalty", &r.to_string()]);
    }
    if let Some(r) = &args.register {
        let wait = format!("{}ms", r.deregister_wait.as_millis());
        cmd.args(["--register", &r.url, "--deregister-wait", &wait]);
    }
    if let Some(t) = tls {
        cmd.args(["--tls-listen", "127.0.0.1:0", "--tls-cert"])
            .arg(&t.cert)
            .arg("--tls-key")
            .arg(&t.key);
    }
    for (flag, v) in [
        ("--cpu-light-ms", args.cpu_light_ms),
        ("--cpu-med-ms", args.cpu_med_ms),
        ("--disk-load-ms", args.disk_load_ms),
        ("--cache-fraction", args.cache_fraction),
    ] {
        if let Some(v) = v {
            cmd.args([flag, &v.to_string()]);
        }
    }
    cmd
}

/// Starts one node; returns the address the switch reaches it on (its TLS listener with
/// `tls`), its report address and the process.
fn start_node(
    exe: &Path,
    spec: &NodeSpec,
    args: &NodeArgs,
    tls: Option<&ClusterTls>,
    log_dir: &Path,
) -> Result<(SocketAddr, SocketAddr, Proc), LabError> {
    let log = log_dir.join(format!("{}.log", spec.name));
    let report = free_port()?;
    let err = std::fs::File::create(&log)
        .map_err(|e| LabError::Run(format!("cannot write {}: {e}", log.display())))?;
    let mut cmd = node_command(exe, spec, args, tls, report);
    cmd.env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err);
    let mut child = cmd.spawn().map_err(|e| {
        LabError::Run(format!(
            "cannot start {} ({}): {e}",
            spec.name,
            exe.display()
        ))
    })?;
    let stdout = child.stdout.take();
    let mut proc = Proc {
        child,
        name: spec.name.clone(),
        log,
    };
    // The node prints `listening on ADDR` once it serves (then `tls listening on ADDR` with a
    // TLS listener, then `registered KEY` once it registered itself); read those lines on a
    // thread so a node that hangs cannot hang the lab.
    let (tx, rx) = std::sync::mpsc::channel();
    let lines = 1 + usize::from(tls.is_some()) + usize::from(args.register.is_some());
    if let Some(out) = stdout {
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = String::new();
            for _ in 0..lines {
                let _ = r.read_line(&mut line);
            }
            let _ = tx.send(line);
            // Keep draining so the node never blocks on a full pipe.
            let mut sink = Vec::new();
            let _ = r.read_to_end(&mut sink);
        });
    }
    let text = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_default();
    let find = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .and_then(|a| a.parse::<SocketAddr>().ok())
    };
    let addr = match tls {
        Some(_) => find("tls listening on "),
        None => find("listening on "),
    };
    match addr {
        Some(a) => Ok((a, report, proc)),
        None => Err(LabError::Run(proc.exited().unwrap_or_else(|| {
            format!(
                "{} did not report its address: {}",
                spec.name,
                proc.last_log_line()
            )
        }))),
    }
}

/// [`start_node`] (on a blocking thread: it waits for the node's first lines), again on another
/// report port when the one picked was taken meanwhile.
pub async fn start_node_on_fresh_ports(
    exe: &Path,
    spec: &NodeSpec,
    args: &NodeArgs,
    tls: Option<ClusterTls>,
    log_dir: &Path,
) -> Result<(SocketAddr, SocketAddr, Proc), LabError> {
    on_fresh_ports(|| {
        let (exe, spec, args) = (exe.to_path_buf(), spec.clone(), args.clone());
        let (tls, log_dir) = (tls.clone(), log_dir.to_path_buf());
        async move {
            tokio::task::spawn_blocking(move || {
                start_node(&exe, &spec, &args, tls.as_ref(), &log_dir)
            })
            .await
            .map_err(|e| LabError::Run(e.to_string()))?
        }
    })
    .await
}

/// Starts the nodes in parallel (each takes a moment to build its tree); the first failure
/// is the error, and the nodes already started are stopped with it.
async fn start_nodes(
    exe: &Path,
    specs: &[NodeSpec],
    args: &NodeArgs,
    tls: Option<&ClusterTls>,
    log_dir: &Path,
) -> Result<(Vec<(NodeSpec, SocketAddr, Proc)>, Vec<SocketAddr>), LabError> {
    let mut handles = Vec::new();
    for spec in specs {
        let (exe, spec, args, dir) = (
            exe.to_path_buf(),
            spec.clone(),
            args.clone(),
            log_dir.to_path_buf(),
        );
        let node_tls = tls.filter(|t| t.to_nodes).cloned();
        handles.push(tokio::spawn(async move {
            let started = start_node_on_fresh_ports(&exe, &spec, &args, node_tls, &dir).await;
            started.map(|(a, r, p)| (spec, a, r, p))
        }));
    }
    let mut nodes = Vec::new();
    let mut reports = Vec::new();
    let mut first_err = None;
    for h in handles {
        match h
            .await
            .map_err(|e| LabError::Run(e.to_string()))
            .and_then(|r| r)
        {
            Ok((spec, addr, report, proc)) => {
                nodes.push((spec, addr, proc));
                reports.push(report);
            }
            Err(e) => first_err = first_err.or(Some(e)),
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    Ok((nodes, reports))
}

/// Starts the nodes (in parallel: each takes a moment to build its tree) and the switch in
/// front of them with `switch_config` (TOML without listen/admin/nodes, which are added here).
pub async fn start(
    exe: &Path,
    specs: &[NodeSpec],
    args: &NodeArgs,
    switch_config: toml::Table,
    switch_threads: usize,
    tls: Option<&ClusterTls>,
    log_dir: &Path,
) -> Result<Cluster, LabError> {
    std::fs::create_dir_all(log_dir)
        .map_err(|e| LabError::Run(format!("cannot create {}: {e}", log_dir.display())))?;
    let (nodes, reports) = start_nodes(exe, specs, args, tls, log_dir).await?;
    let switch_config = &switch_config;
    let (switch, listen, admin, tls_listen) = on_fresh_ports(|| async {
        start_switch(
            exe,
            switch_config.clone(),
            switch_threads,
            tls,
            &nodes,
            &reports,
            log_dir,
        )
        .await
    })
    .await?;
    Ok(Cluster {
        nodes,
        reports,
        switch,
        listen,
        admin,
        tls_listen,
    })
}

/// Starts the switch in front of `nodes` on fresh ports: its process, listener, admin and TLS
/// listener addresses.
async fn start_switch(
    exe: &Path,
    mut switch_config: toml::Table,
    switch_threads: usize,
    tls: Option<&ClusterTls>,
    nodes: &[(NodeSpec, SocketAddr, Proc)],
    reports: &[SocketAddr],
    log_dir: &Path,
) -> Result<(Proc, SocketAddr, SocketAddr, Option<SocketAddr>), LabError> {
    let listen = free_port()?;
    let admin = free_port()?;
    switch_config.insert(
        "listen".into(),
        toml::Value::Array(vec![listen.to_string().into()]),
    );
    switch_config.insert("admin".into(), admin.to_string().into());
    let tls_listen = match tls {
        Some(t) => Some(add_tls_listener(&mut switch_config, t)?),
        None => None,
    };
    switch_config.insert("node".into(), node_tables(nodes, reports, tls));
    let mut ready: Vec<SocketAddr> = reports.to_vec();
    ready.extend([listen].into_iter().chain(tls_listen));
    let switch = spawn_switch(exe, &switch_config, switch_threads, admin, &ready, log_dir).await?;
    Ok((switch, listen, admin, tls_listen))
}

/// Starts a switch on fresh ports with `switch_config` (TOML without listen and admin, which
/// are added here, and with its nodes however it gets them: `[[node]]`s or `[[discovery]]`):
/// its process, listener and admin addresses.
pub async fn start_bare_switch(
    exe: &Path,
    switch_config: toml::Table,
    switch_threads: usize,
    log_dir: &Path,
) -> Result<(Proc, SocketAddr, SocketAddr), LabError> {
    std::fs::create_dir_all(log_dir)
        .map_err(|e| LabError::Run(format!("cannot create {}: {e}", log_dir.display())))?;
    let switch_config = &switch_config;
    on_fresh_ports(|| async {
        let (listen, admin) = (free_port()?, free_port()?);
        let mut config = switch_config.clone();
        config.insert(
            "listen".into(),
            toml::Value::Array(vec![listen.to_string().into()]),
        );
        config.insert("admin".into(), admin.to_string().into());
        let switch = spawn_switch(exe, &config, switch_threads, admin, &[listen], log_dir).await?;
        Ok((switch, listen, admin))
    })
    .await
}

/// Starts a switch with `switch_config` on the given listener and admin addresses (a tier's
/// switch, whose address its peers must know before it starts); its `switch.toml` and log go
/// into `log_dir`.
pub async fn start_switch_at(
    exe: &Path,
    mut switch_config: toml::Table,
    switch_threads: usize,
    listen: SocketAddr,
    admin: SocketAddr,
    log_dir: &Path,
) -> Result<Proc, LabError> {
    std::fs::create_dir_all(log_dir)
        .map_err(|e| LabError::Run(format!("cannot create {}: {e}", log_dir.display())))?;
    switch_config.insert(
        "listen".into(),
        toml::Value::Array(vec![listen.to_string().into()]),
    );
    switch_config.insert("admin".into(), admin.to_string().into());
    spawn_switch(
        exe,
        &switch_config,
        switch_threads,
        admin,
        &[listen],
        log_dir,
    )
    .await
}

/// Writes `switch.toml` into `log_dir`, starts `capstan serve` on it and waits until it
/// answers on `admin` and every address in `ready` accepts.
async fn spawn_switch(
    exe: &Path,
    switch_config: &toml::Table,
    switch_threads: usize,
    admin: SocketAddr,
    ready: &[SocketAddr],
    log_dir: &Path,
) -> Result<Proc, LabError> {
    let path = log_dir.join("switch.toml");
    std::fs::write(
        &path,
        toml::to_string(switch_config).map_err(|e| LabError::Run(e.to_string()))?,
    )
    .map_err(|e| LabError::Run(format!("cannot write {}: {e}", path.display())))?;
    let log = log_dir.join("switch.log");
    let err = std::fs::File::create(&log).map_err(|e| LabError::Run(e.to_string()))?;
    let child = Command::new(exe)
        .arg("serve")
        .arg("--config")
        .arg(&path)
        .args(["--threads", &switch_threads.to_string()])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()
        .map_err(|e| LabError::Run(format!("cannot start the switch: {e}")))?;
    let mut switch = Proc {
        child,
        name: "switch".into(),
        log,
    };
    wait_for_switch(&mut switch, admin, ready).await?;
    Ok(switch)
}

/// The switch's `[[node]]` tables: each node's address, its report address and, when the
/// switch reaches the nodes over TLS, its `tls` table.
fn node_tables(
    nodes: &[(NodeSpec, SocketAddr, Proc)],
    reports: &[SocketAddr],
    tls: Option<&ClusterTls>,
) -> toml::Value {
    let tables = nodes
        .iter()
        .zip(reports)
        .map(|((spec, addr, _), report)| {
            let mut t = toml::Table::new();
            t.insert("name".into(), spec.name.clone().into());
            t.insert("address".into(), addr.to_string().into());
            // The switch gathers load there too, so a node with a process limit is not
            // asked for its load through its own full backlog.
            t.insert("report_address".into(), report.to_string().into());
            if let Some(tls) = tls.filter(|t| t.to_nodes) {
                let mut node_tls = toml::Table::new();
                node_tls.insert("ca_file".into(), tls.ca.display().to_string().into());
                node_tls.insert("sni".into(), TLS_NAME.into());
                t.insert("tls".into(), toml::Value::Table(node_tls));
            }
            toml::Value::Table(t)
        })
        .collect();
    toml::Value::Array(tables)
}

/// Polls until the switch answers on its admin address and every address in `ready` (the
/// nodes' report sockets, which open just after their main ones, and the switch's listeners)
/// accepts, or fails with the switch's last log line after 20 s or when it exits.
async fn wait_for_switch(
    switch: &mut Proc,
    admin: SocketAddr,
    ready: &[SocketAddr],
) -> Result<(), LabError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(e) = switch.exited() {
            return Err(LabError::Run(e));
        }
        let mut up = get(admin, "/status").await.is_ok();
        for a in ready {
            up = up && tokio::net::TcpStream::connect(a).await.is_ok();
        }
        if up {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LabError::Run(format!(
                "the switch did not start: {}",
                switch.last_log_line()
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Adds a TLS listener on a free port to the switch's configuration (HTTP/1.1 only: the load
/// generator speaks it, and the secure class is measured as the CAP paper's HTTP/1.x clients).
fn add_tls_listener(config: &mut toml::Table, tls: &ClusterTls) -> Result<SocketAddr, LabError> {
    let addr = free_port()?;
    let mut cert = toml::Table::new();
    cert.insert("cert".into(), tls.cert.display().to_string().into());
    cert.insert("key".into(), tls.key.display().to_string().into());
    let mut listener = toml::Table::new();
    listener.insert("address".into(), addr.to_string().into());
    listener.insert("alpn".into(), toml::Value::Array(vec!["http/1.1".into()]));
    listener.insert(
        "certificate".into(),
        toml::Value::Array(vec![toml::Value::Table(cert)]),
    );
    config.insert(
        "listener".into(),
        toml::Value::Array(vec![toml::Value::Table(listener)]),
    );
    Ok(addr)
}

impl Cluster {
    /// Fails when a child died during the run (its log's last line says why).
    pub fn check_alive(&mut self) -> Result<(), LabError> {
        if let Some(e) = self.switch.exited() {
            return Err(LabError::Run(e));
        }
        for (_, _, p) in &mut self.nodes {
            if let Some(e) = p.exited() {
                return Err(LabError::Run(e));
            }
        }
        Ok(())
    }
}

/// A small `GET` over HTTP/1.0 (the answers are short JSON documents); returns the body.
pub async fn get(addr: SocketAddr, path: &str) -> Result<String, String> {
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").ok_or("no response head")?;
        let ok = head.starts_with("HTTP/1.") && head.split(' ').nth(1) == Some("200");
        if !ok {
            return Err(format!("GET {path}: {}", head.lines().next().unwrap_or("")));
        }
        Ok(body.to_string())
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .map_err(|_| format!("GET {path}: timed out"))?
}

pub use capstan_core::LoadReport;

/// A node's TLS handshake counts from its load report's `tls` object (a field the origin adds
/// to the wire format when it has a TLS listener); zero when there is none.
pub async fn node_tls_handshakes(addr: SocketAddr) -> Result<TlsCounts, String> {
    #[derive(Deserialize)]
    struct WithTls {
        #[serde(default)]
        tls: Option<TlsCounts>,
    }
    let body = get(addr, "/_capstan/load").await?;
    let r: WithTls = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    Ok(r.tls.unwrap_or_default())
}

/// A node's `/_capstan/load`, read with the wire format's own parser (the one the switch's
/// gatherer uses), so the lab refuses exactly the reports the switch would.
pub async fn load_report(addr: SocketAddr) -> Result<LoadReport, String> {
    let body = get(addr, "/_capstan/load").await?;
    LoadReport::parse(body.as_bytes()).map_err(|e| e.to_string())
}

/// The fields of the switch's `/status` the lab uses.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SwitchStatus {
    pub nodes: Vec<SwitchNode>,
    #[serde(default)]
    pub listeners: Vec<SwitchListener>,
}

impl SwitchStatus {
    /// Completed TLS handshakes over every TLS listener, and of them resumed ones.
    pub fn tls_handshakes(&self) -> (u64, u64) {
        self.listeners
            .iter()
            .filter_map(|l| l.tls.as_ref())
            .fold((0, 0), |(h, r), t| (h + t.handshakes, r + t.resumed))
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct SwitchListener {
    #[serde(default)]
    pub tls: Option<TlsCounts>,
}

/// Handshake counts of a TLS listener (the switch's `listeners[].tls`, the origin's `tls`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct TlsCounts {
    pub handshakes: u64,
    pub resumed: u64,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct SwitchNode {
    pub name: String,
    pub classes: std::collections::BTreeMap<String, u64>,
    /// The weight the policy uses now: configured, or derived from gathered state (WRR).
    #[serde(default)]
    pub effective_weight: u32,
    /// The node's utilisation as the switch last gathered it (0–1).
    #[serde(default)]
    pub load: f64,
    /// Load reports the switch has gathered from the node so far.
    #[serde(default)]
    pub load_reports: u64,
}

pub async fn switch_status(admin: SocketAddr) -> Result<SwitchStatus, String> {
    let body = get(admin, "/status").await?;
    serde_json::from_str(&body).map_err(|e| format!("bad switch status: {e}"))
}

/// CPU seconds (user + system, all threads) a process has used so far. Linux reports them in
/// clock ticks of USER_HZ, which the kernel ABI fixes at 100 per second on every architecture
/// Capstan builds for.
pub fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/stat"),
        None => "/proc/self/stat".into(),
    };
    let s = std::fs::read_to_string(path).ok()?;
    // The command name (field 2) may contain spaces; fields are counted after its ')'.
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = f.get(11)?.parse().ok()?;
    let stime: f64 = f.get(12)?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

#[cfg(test)]
mod tests {
    use super::{on_fresh_ports, LabError};
    use std::cell::Cell;

    #[tokio::test]
    async fn a_port_taken_meanwhile_is_tried_again_on_others_a_few_times() {
        let taken = || {
            LabError::Run(
                "node2 exited (exit status: 1): capstan: cannot listen on \
            127.0.0.1:22036: Address already in use (os error 98)"
                    .into(),
            )
        };
        let tries = Cell::new(0);
        let started = on_fresh_ports(|| async {
            tries.set(tries.get() + 1);
            if tries.get() < 3 {
                Err(taken())
            } else {
                Ok(tries.get())
            }
        })
        .await;
        assert_eq!(started.unwrap(), 3, "started on the third ports");

        tries.set(0);
        let given_up = on_fresh_ports(|| async {
            tries.set(tries.get() + 1);
            Err::<(), _>(taken())
        })
        .await;
        assert!(given_up.is_err());
        assert_eq!(tries.get(), 5, "one try and four more");

        tries.set(0);
        let other = on_fresh_ports(|| async {
            tries.set(tries.get() + 1);
            Err::<(), _>(LabError::Run("node1 exited: bad --tree".into()))
        })
        .await;
        assert!(matches!(other, Err(LabError::Run(e)) if e.contains("bad --tree")));
        assert_eq!(tries.get(), 1, "another failure is not tried again");
    }

    #[test]
    fn own_cpu_time_is_readable_and_grows() {
        let a = super::cpu_seconds(None).expect("/proc/self/stat");
        let mut x = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let b = super::cpu_seconds(None).unwrap();
        assert!(b >= a);
    }
}
