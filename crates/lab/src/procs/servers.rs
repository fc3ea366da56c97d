//! Real back-end servers for the WAN experiments: the Debian `apache2` (prefork, a process per
//! connection, as Banga & Druschel's Apache) and `nginx` (event-driven, standing in for their
//! Zeus), each started from a complete configuration of its own in a temporary directory, so
//! nothing under `/etc/apache2` or `/etc/nginx` (nor `envvars`, nor a system service) is used.
//!
//! ```no_run
//! # fn f() -> Result<(), capstan_lab::LabError> {
//! use capstan_lab::testing::{write_tree, RunningServer, ServerKind, ServerSpec};
//! use capstan_workload::tree::{DocTree, TreeKind};
//! let tree = DocTree::generate(TreeKind::Cap, 1, Some(2000)).unwrap();
//! write_tree(&tree, "/srv/cap".as_ref())?;
//! let spec = ServerSpec {
//!     kind: ServerKind::Apache2,
//!     docroot: "/srv/cap".into(),
//!     listen: "0.0.0.0:8080".parse().unwrap(),
//!     workers: 152, // the paper's limit on Apache server processes
//!     backlog: 1024,
//!     keep_alive: false,
//! };
//! let server = RunningServer::start(&spec, "/tmp/lab".as_ref())?;
//! println!("{} processes, {:.2} s CPU", server.processes(), server.cpu_seconds());
//! # Ok(()) }
//! ```
//!
//! Choices that matter for the experiments:
//! - Apache runs with `AcceptFilter http none`: Linux's default (`TCP_DEFER_ACCEPT`) would keep
//!   a connection out of the accept queue until its request arrives, which the paper's Apache
//!   did not do. nginx listens without `deferred` for the same reason.
//! - Apache's prefork pool starts with [`APACHE_START_SERVERS`] processes and grows with the
//!   busy connections up to `workers` (the paper's Figure 10 levels out at 152), with Apache's
//!   default spare limits (5 to 10 idle processes).
//! - Keep-alive, when on, times out after [`KEEP_ALIVE_TIMEOUT_S`] in both servers (Apache's
//!   default), and nginx's workers take [`NGINX_WORKER_CONNECTIONS`] connections each.
//! - As root both servers serve as `www-data`, so the document root and every directory above
//!   it must be searchable by others; [`RunningServer::start`] says so if they are not.
//!
//! [`tcp_counts`] reads the kernel's view of the listen port (ESTABLISHED, SYN-RECV, the accept
//! queue's length) from `/proc/net/tcp{,6}` of the calling thread's network namespace,
//! [`RunningServer::tcp_counts`] from the server's.
//!
//! The server runs in the network namespace of the thread that calls [`RunningServer::start`]
//! (a child inherits its creating thread's namespaces): to run it in a WAN emulation's server
//! namespace, call `start` on a thread that entered it (e.g. `capstan_wan::netns::spawn_in`).
//!
//! `cargo run -p capstan-lab --example real_backends` shows both servers under a burst and
//! Apache's pool growing to 152 processes (numbers in `BENCHMARKS.md`). Needs nginx ≥ 1.19.5
//! (`-e`) and Apache 2.4.

use std::fmt::Write as _;
use std::fs;
use std::io::{BufWriter, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use capstan_workload::tree::DocTree;

use crate::model::error::LabError;

/// Prefork processes Apache starts with (its default; fewer when `workers` is smaller).
pub const APACHE_START_SERVERS: u32 = 5;
/// Seconds an idle keep-alive connection is kept open (Apache's default), both servers.
pub const KEEP_ALIVE_TIMEOUT_S: u32 = 5;
/// Connections each nginx worker process takes at most.
pub const NGINX_WORKER_CONNECTIONS: u32 = 8192;
/// Prefork's compiled-in ceiling on `ServerLimit`.
const APACHE_MAX_WORKERS: u32 = 20_000;
const APACHE_MODULES: &str = "/usr/lib/apache2/modules";
/// How long a server may take to accept on its port after it is started.
const START_WITHIN: Duration = Duration::from_secs(15);
/// How long the master may take to stop on SIGTERM before its whole group is killed.
const STOP_WITHIN: Duration = Duration::from_secs(3);

/// Which real server to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerKind {
    /// Apache httpd with the prefork MPM: one process per connection.
    Apache2,
    /// nginx: a few event-driven worker processes.
    Nginx,
}

impl ServerKind {
    pub const ALL: [ServerKind; 2] = [ServerKind::Apache2, ServerKind::Nginx];

    /// The Debian package and program name.
    pub fn name(&self) -> &'static str {
        match self {
            ServerKind::Apache2 => "apache2",
            ServerKind::Nginx => "nginx",
        }
    }

    /// Where Debian installs the program.
    pub fn binary(&self) -> PathBuf {
        PathBuf::from(format!("/usr/sbin/{}", self.name()))
    }
}

impl std::fmt::Display for ServerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One server to run.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    pub kind: ServerKind,
    /// Directory of files to serve.
    pub docroot: PathBuf,
    /// Address to listen on, e.g. `0.0.0.0:PORT` to be reachable from other network namespaces.
    pub listen: SocketAddr,
    /// Apache: `MaxRequestWorkers` (the paper's 152); nginx: `worker_processes`.
    pub workers: u32,
    /// Listen backlog (Apache `ListenBacklog`, nginx `listen ... backlog=`); the kernel caps it
    /// at `net.core.somaxconn`.
    pub backlog: u32,
    /// HTTP keep-alive on or off.
    pub keep_alive: bool,
}

impl ServerSpec {
    /// Checks what the servers would reject (or misread) before anything is started.
    pub fn validate(&self) -> Result<(), LabError> {
        let bad = |why: String| Err(LabError::Run(format!("{} spec: {why}", self.kind)));
        if self.workers == 0 {
            return bad("workers must be at least 1".into());
        }
        if self.kind == ServerKind::Apache2 && self.workers > APACHE_MAX_WORKERS {
            return bad(format!(
                "workers {} above prefork's limit {APACHE_MAX_WORKERS}",
                self.workers
            ));
        }
        if self.backlog == 0 {
            return bad("backlog must be at least 1".into());
        }
        if self.listen.port() == 0 {
            return bad("listen port must not be 0".into());
        }
        if !self.docroot.is_absolute() || !self.docroot.is_dir() {
            return bad(format!(
                "docroot {} is not an absolute directory",
                self.docroot.display()
            ));
        }
        let quoted = self.docroot.to_string_lossy();
        if quoted.contains(['"', '\n', ';', '{', '}', '\\', ' ']) {
            return bad(format!(
                "docroot {quoted} has characters the configs cannot quote"
            ));
        }
        Ok(())
    }

    /// The address a local client reaches the server through: loopback when it listens on
    /// every address.
    pub fn probe_addr(&self) -> SocketAddr {
        let ip = match self.listen.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        SocketAddr::new(ip, self.listen.port())
    }

    /// Apache's prefork settings: (StartServers, MinSpareServers, MaxSpareServers).
    fn prefork_pool(&self) -> (u32, u32, u32) {
        let start = APACHE_START_SERVERS.min(self.workers);
        (start, start, 10.min(self.workers).max(start))
    }
}

/// A real server running in its own process group. Dropping it sends SIGTERM to the master,
/// waits up to 3 s for the group to end, SIGKILLs whatever is left of the group and removes the
/// temporary directory (configuration, pid file, logs).
#[derive(Debug)]
pub struct RunningServer {
    child: Child,
    kind: ServerKind,
    dir: PathBuf,
    config: PathBuf,
    port: u16,
}

impl RunningServer {
    /// Writes the configuration into a fresh directory under `work_dir`, checks it with the
    /// server's own test (`-t`), starts the server and waits until it accepts connections on
    /// [`ServerSpec::probe_addr`].
    pub fn start(spec: &ServerSpec, work_dir: &Path) -> Result<RunningServer, LabError> {
        spec.validate()?;
        let program = ensure_installed(spec.kind).map_err(LabError::Run)?;
        if is_root() {
            searchable_by_others(&spec.docroot)?;
        }
        let dir = make_run_dir(spec, work_dir)?;
        let written = match spec.kind {
            ServerKind::Apache2 => write_apache_config(spec, &dir),
            ServerKind::Nginx => write_nginx_config(spec, &dir),
        };
        let config = match written {
            Ok(config) => config,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let child = match config_test(spec.kind, &program, &config, &dir)
            .and_then(|()| spawn_server(spec.kind, &program, &config, &dir))
        {
            Ok(child) => child,
            Err(e) => {
                let _ = fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let server = RunningServer {
            child,
            kind: spec.kind,
            dir,
            config,
            port: spec.listen.port(),
        };
        server.wait_accepting(spec.probe_addr())?;
        Ok(server)
    }

    /// The master process's id (also the process group's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// The configuration file the server runs with.
    pub fn config_path(&self) -> &Path {
        &self.config
    }

    /// [`tcp_counts`] of the server's port in the server's own network namespace (the one of
    /// the thread that started it).
    pub fn tcp_counts(&self) -> std::io::Result<TcpCounts> {
        tcp_counts_in(&self.net_dir(), self.port)
    }

    /// `/proc/PID/net` of the master: its network namespace's tables.
    fn net_dir(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/net", self.pid()))
    }

    /// The server's error log.
    pub fn error_log(&self) -> PathBuf {
        self.dir.join("error.log")
    }

    /// Server processes now: the master and every live process of its group (Apache: the
    /// prefork children, the paper's "server processes"; nginx: the workers).
    pub fn processes(&self) -> u32 {
        group_members(self.pid())
            .iter()
            .filter(|p| p.state != 'Z')
            .count() as u32
    }

    /// CPU seconds (user + system) of the master and all its children, including the children
    /// that have exited and been reaped (the master's `cutime`/`cstime`).
    pub fn cpu_seconds(&self) -> f64 {
        let pid = self.pid();
        let ticks: u64 = group_members(pid)
            .iter()
            .map(|p| p.utime + p.stime + if p.pid == pid { p.cutime + p.cstime } else { 0 })
            .sum();
        ticks as f64 / clock_ticks_per_second()
    }

    /// Polls until `addr` accepts a connection, the master exits or [`START_WITHIN`] passes.
    fn wait_accepting(&self, addr: SocketAddr) -> Result<(), LabError> {
        let end = Instant::now() + START_WITHIN;
        loop {
            if self.master_exited() {
                return Err(self.failure(&format!("exited before accepting on {addr}")));
            }
            // Another program may hold the port (then the server fails to bind and exits):
            // only the server's own listen socket counts.
            if self.owns_listener(addr.port())
                && TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
            {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(
                    self.failure(&format!("did not accept on {addr} within {START_WITHIN:?}"))
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// True when the master holds a socket listening on `port` (by the inodes of its
    /// namespace's `/proc/PID/net/tcp{,6}` and its descriptors).
    fn owns_listener(&self, port: u16) -> bool {
        let inodes = listen_inodes(&self.net_dir(), port);
        let Ok(fds) = fs::read_dir(format!("/proc/{}/fd", self.pid())) else {
            return false;
        };
        fds.flatten().any(|fd| {
            fs::read_link(fd.path()).is_ok_and(|target| {
                let target = target.to_string_lossy();
                let inode = target
                    .strip_prefix("socket:[")
                    .and_then(|t| t.strip_suffix(']'));
                inode.is_some_and(|i| inodes.iter().any(|n| n == i))
            })
        })
    }

    /// True once the master has exited, read without reaping it (so its pid, which is also
    /// the group id, cannot be reused before the group is killed).
    fn master_exited(&self) -> bool {
        proc_stat(self.pid()).is_none_or(|p| p.state == 'Z')
    }

    fn failure(&self, what: &str) -> LabError {
        // nginx writes its complaints to both; the error log has them with more context.
        let mut log = tail(&self.error_log(), 3);
        if log.is_empty() {
            log = tail(&self.dir.join("stderr.log"), 3);
        }
        LabError::Run(format!(
            "{} ({}) {what}: {log}",
            self.kind,
            self.config.display()
        ))
    }

    /// True once the master has exited (zombie or gone) and no other process of its group
    /// is alive.
    fn group_finished(&self) -> bool {
        group_members(self.pid())
            .iter()
            .all(|p| matches!(p.state, 'Z' | 'X'))
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let pid = self.pid() as libc::pid_t;
        // SAFETY: kill(2) on our own child, not yet reaped, so the pid is still ours.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let end = Instant::now() + STOP_WITHIN;
        while Instant::now() < end && !self.group_finished() {
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: killpg(2) on the group our unreaped child leads; the group id cannot have
        // been reused while the leader's pid is held by it (even as a zombie).
        unsafe {
            libc::killpg(pid, libc::SIGKILL);
        }
        let _ = self.child.wait();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The installed program, installing its Debian package when it is missing and we are root
/// (without starting the package's service); otherwise a one-line reason to skip.
pub fn ensure_installed(kind: ServerKind) -> Result<PathBuf, String> {
    ensure_package(kind.name(), &kind.binary())
}

/// `binary`, installing Debian's `package` when it is missing and we are root (without
/// starting the package's service); otherwise a one-line reason to skip.
pub fn ensure_package(package: &str, binary: &Path) -> Result<PathBuf, String> {
    static APT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let binary = binary.to_path_buf();
    if binary.exists() {
        return Ok(binary);
    }
    if !is_root() {
        return Err(format!(
            "{} is not installed and only root may install it",
            binary.display()
        ));
    }
    let _one_apt_at_a_time = APT.lock().unwrap_or_else(|e| e.into_inner());
    if binary.exists() {
        return Ok(binary);
    }
    let _no_service = NoServiceStart::new()?;
    if apt_get(&["install", "-y", "--no-install-recommends", package]).is_err() {
        // A fresh image has no package lists yet: fetch them once and try again.
        apt_get(&["update", "-q"])?;
        apt_get(&["install", "-y", "--no-install-recommends", package])?;
    }
    if binary.exists() {
        Ok(binary)
    } else {
        Err(format!(
            "apt-get installed {package} but {} is missing",
            binary.display()
        ))
    }
}

fn apt_get(args: &[&str]) -> Result<(), String> {
    let out = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let last = text.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    Err(format!(
        "apt-get {} failed ({}): {last}",
        args.join(" "),
        out.status
    ))
}

/// `/usr/sbin/policy-rc.d` answering 101 ("action forbidden") while a package is installed, so
/// its service is not started; removed again only if we created it.
struct NoServiceStart(Option<PathBuf>);

impl NoServiceStart {
    fn new() -> Result<NoServiceStart, String> {
        let path = PathBuf::from("/usr/sbin/policy-rc.d");
        if path.exists() {
            return Ok(NoServiceStart(None));
        }
        fs::write(&path, "#!/bin/sh\nexit 101\n")
            .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(0o755)))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(NoServiceStart(Some(path)))
    }
}

impl Drop for NoServiceStart {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            let _ = fs::remove_file(path);
        }
    }
}

/// Materialises every file of `tree` under `dir` (the same paths and bytes `capstan origin
/// --tree` serves), directories 0755 and files 0644 so `www-data` can read them. Returns the
/// bytes written.
pub fn write_tree(tree: &DocTree, dir: &Path) -> Result<u64, LabError> {
    let io = |p: &Path, e: std::io::Error| LabError::Run(format!("{}: {e}", p.display()));
    make_dir(dir).map_err(|e| io(dir, e))?;
    let mut total = 0;
    for file in &tree.files {
        let path = dir.join(relative_path(&file.path)?);
        if let Some(parent) = path.parent() {
            make_dir(parent).map_err(|e| io(parent, e))?;
        }
        let out = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        let mut out = BufWriter::with_capacity(1 << 16, out);
        for chunk in tree.chunks(file) {
            out.write_all(chunk).map_err(|e| io(&path, e))?;
        }
        let out = out.into_inner().map_err(|e| io(&path, e.into_error()))?;
        // The umask may have taken bits off the mode given at creation.
        out.set_permissions(fs::Permissions::from_mode(0o644))
            .map_err(|e| io(&path, e))?;
        total += file.size;
    }
    Ok(total)
}

/// A tree path (`/cap/obj000001.html`) as a path below the document root; anything that could
/// leave it is refused.
fn relative_path(url_path: &str) -> Result<PathBuf, LabError> {
    let rel = Path::new(url_path.trim_start_matches('/'));
    let plain = rel.components().all(|c| matches!(c, Component::Normal(_)));
    if rel.as_os_str().is_empty() || !plain {
        return Err(LabError::Run(format!(
            "tree path {url_path:?} is not a plain file path"
        )));
    }
    Ok(rel.to_path_buf())
}

fn make_dir(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755))
}

/// Connection counts of one local port, from the kernel's TCP tables.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpCounts {
    /// Connections in ESTABLISHED (accepted or still in the accept queue).
    pub established: u32,
    /// Half-open connections in SYN-RECV (the paper's SYN-RCVD queue).
    pub syn_recv: u32,
    /// Connections waiting to be accepted: the listen socket's receive queue.
    pub accept_queue: u32,
    /// Connections in CLOSE-WAIT or CLOSING.
    pub close_wait_or_closing: u32,
    /// Connections the server has closed while the kernel still delivers the rest of the
    /// response or waits for the client's FIN (FIN-WAIT-1, FIN-WAIT-2, LAST-ACK): state the
    /// kernel keeps for a server that closes at once, where Apache kept a process.
    pub finishing: u32,
    /// Bytes in the send queues of the port's connections (sent but not yet acknowledged, or
    /// not yet sent): the socket buffer memory WAN delay ties up (§5.5's 3.6 MB at 200 ms).
    pub send_queue_bytes: u64,
}

impl std::ops::AddAssign for TcpCounts {
    fn add_assign(&mut self, o: TcpCounts) {
        self.established += o.established;
        self.syn_recv += o.syn_recv;
        self.accept_queue += o.accept_queue;
        self.close_wait_or_closing += o.close_wait_or_closing;
        self.finishing += o.finishing;
        self.send_queue_bytes += o.send_queue_bytes;
    }
}

/// The sockets whose local port is `port` in `/proc/net/tcp` and `/proc/net/tcp6` of the
/// calling thread's network namespace (`/proc/thread-self/net`: `/proc/net` would show the
/// main thread's, wrong on a thread that entered another namespace). A missing `tcp6` (IPv6
/// disabled) counts as empty.
pub fn tcp_counts(port: u16) -> std::io::Result<TcpCounts> {
    tcp_counts_in(Path::new("/proc/thread-self/net"), port)
}

/// [`tcp_counts`] from one `/proc/.../net` directory.
fn tcp_counts_in(net: &Path, port: u16) -> std::io::Result<TcpCounts> {
    let mut counts = parse_tcp_table(&fs::read_to_string(net.join("tcp"))?, port);
    match fs::read_to_string(net.join("tcp6")) {
        Ok(text) => counts += parse_tcp_table(&text, port),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(counts)
}

/// Counts the lines of one `/proc/net/tcp{,6}` table whose local port is `port`; the header
/// and lines it cannot read are skipped.
pub fn parse_tcp_table(text: &str, port: u16) -> TcpCounts {
    let mut counts = TcpCounts::default();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(_slot), Some(local), Some(_remote), Some(state), Some(queues)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            continue;
        };
        let local_port = local
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        let (tx_queue, rx_queue) = queues
            .split_once(':')
            .map(|(tx, rx)| {
                (
                    u64::from_str_radix(tx, 16).ok(),
                    u32::from_str_radix(rx, 16).ok(),
                )
            })
            .unwrap_or((None, None));
        if local_port != Some(port) {
            continue;
        }
        if state != "0A" {
            counts.send_queue_bytes += tx_queue.unwrap_or(0);
        }
        match state {
            "01" => counts.established += 1,
            "03" => counts.syn_recv += 1,
            "08" | "0B" => counts.close_wait_or_closing += 1,
            "04" | "05" | "09" => counts.finishing += 1,
            "0A" => counts.accept_queue += rx_queue.unwrap_or(0),
            _ => {}
        }
    }
    counts
}

/// The inodes of the sockets listening on `port` in the network namespace of `net`.
fn listen_inodes(net: &Path, port: u16) -> Vec<String> {
    let want = format!(":{port:04X}");
    ["tcp", "tcp6"]
        .iter()
        .filter_map(|table| fs::read_to_string(net.join(table)).ok())
        .flat_map(|text| {
            let rows = text
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>());
            rows.filter(|f| f.len() > 9 && f[1].ends_with(&want) && f[3] == "0A")
                .map(|f| f[9].to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf(3) only reads a system constant.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// The docroot and every directory above it must let `www-data` through (others' `x` bit).
fn searchable_by_others(docroot: &Path) -> Result<(), LabError> {
    for dir in docroot.ancestors() {
        let mode = fs::metadata(dir)
            .map_err(|e| LabError::Run(format!("{}: {e}", dir.display())))?
            .permissions()
            .mode();
        if mode & 0o001 == 0 {
            return Err(LabError::Run(format!(
                "docroot {}: {} (mode {:o}) is not searchable by www-data",
                docroot.display(),
                dir.display(),
                mode & 0o7777
            )));
        }
    }
    Ok(())
}

/// A fresh directory for one server's configuration, pid file and logs.
fn make_run_dir(spec: &ServerSpec, work_dir: &Path) -> Result<PathBuf, LabError> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "{}-{}-{}-{}",
        spec.kind,
        spec.listen.port(),
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let dir = work_dir.join(name);
    let _ = fs::remove_dir_all(&dir);
    make_dir(&dir).map_err(|e| LabError::Run(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

fn write_file(path: &Path, text: &str) -> Result<(), LabError> {
    fs::write(path, text).map_err(|e| LabError::Run(format!("{}: {e}", path.display())))
}

/// A complete Apache configuration: prefork, static files, nothing from `/etc/apache2`.
fn write_apache_config(spec: &ServerSpec, dir: &Path) -> Result<PathBuf, LabError> {
    let d = dir.display();
    let (start, min_spare, max_spare) = spec.prefork_pool();
    let mut c = String::new();
    let _ = writeln!(
        c,
        "ServerRoot \"{d}\"\nServerName localhost\nDefaultRuntimeDir \"{d}\""
    );
    let _ = writeln!(c, "PidFile \"{d}/apache2.pid\"\nMutex file:{d} default");
    let _ = writeln!(c, "ErrorLog \"{d}/error.log\"\nLogLevel warn");
    for (name, file) in [
        ("mpm_prefork_module", "mod_mpm_prefork.so"),
        ("authz_core_module", "mod_authz_core.so"),
        ("mime_module", "mod_mime.so"),
    ] {
        let _ = writeln!(c, "LoadModule {name} {APACHE_MODULES}/{file}");
    }
    let _ = writeln!(c, "TypesConfig \"{}\"", mime_types(dir)?.display());
    if is_root() {
        c.push_str("User www-data\nGroup www-data\n");
    }
    let _ = writeln!(c, "Listen {}\nListenBacklog {}", spec.listen, spec.backlog);
    c.push_str("AcceptFilter http none\nAcceptFilter https none\n");
    let _ = writeln!(c, "StartServers {start}\nMinSpareServers {min_spare}");
    let _ = writeln!(
        c,
        "MaxSpareServers {max_spare}\nServerLimit {}",
        spec.workers
    );
    let _ = writeln!(
        c,
        "MaxRequestWorkers {}\nMaxConnectionsPerChild 0",
        spec.workers
    );
    let keep = if spec.keep_alive { "On" } else { "Off" };
    let _ = writeln!(
        c,
        "KeepAlive {keep}\nKeepAliveTimeout {KEEP_ALIVE_TIMEOUT_S}"
    );
    c.push_str("MaxKeepAliveRequests 100\nTimeout 60\nHostnameLookups Off\nEnableSendfile On\n");
    c.push_str("<Directory />\n  AllowOverride None\n  Require all denied\n</Directory>\n");
    let root = spec.docroot.display();
    let _ = writeln!(c, "DocumentRoot \"{root}\"");
    let _ = writeln!(
        c,
        "<Directory \"{root}\">\n  Options None\n  AllowOverride None\n  Require all granted\n</Directory>"
    );
    let path = dir.join("apache2.conf");
    write_file(&path, &c)?;
    Ok(path)
}

/// `/etc/mime.types` when the system has it (Debian's `media-types`), else a small one of ours.
fn mime_types(dir: &Path) -> Result<PathBuf, LabError> {
    let system = PathBuf::from("/etc/mime.types");
    if system.exists() {
        return Ok(system);
    }
    let own = dir.join("mime.types");
    write_file(
        &own,
        "text/html html htm\napplication/octet-stream bin\nimage/gif gif\nimage/jpeg jpg jpeg\n",
    )?;
    Ok(own)
}

/// A complete nginx configuration: static files, no access log, temp paths in `dir`.
fn write_nginx_config(spec: &ServerSpec, dir: &Path) -> Result<PathBuf, LabError> {
    let d = dir.display();
    let mut c = String::new();
    if is_root() {
        c.push_str("user www-data www-data;\n");
    }
    let _ = writeln!(c, "worker_processes {};\npid {d}/nginx.pid;", spec.workers);
    let _ = writeln!(c, "error_log {d}/error.log warn;");
    let _ = writeln!(c, "worker_rlimit_nofile {};", 2 * NGINX_WORKER_CONNECTIONS);
    let _ = writeln!(
        c,
        "events {{\n  worker_connections {NGINX_WORKER_CONNECTIONS};\n}}"
    );
    c.push_str("http {\n  access_log off;\n  sendfile on;\n  tcp_nopush on;\n");
    let keep = if spec.keep_alive {
        KEEP_ALIVE_TIMEOUT_S
    } else {
        0
    };
    let _ = writeln!(c, "  keepalive_timeout {keep};\n  keepalive_requests 100;");
    for temp in ["client_body", "proxy", "fastcgi", "uwsgi", "scgi"] {
        let _ = writeln!(c, "  {temp}_temp_path {d}/{temp}_temp;");
    }
    c.push_str(
        "  types {\n    text/html html htm;\n    image/gif gif;\n    image/jpeg jpg jpeg;\n  }\n",
    );
    c.push_str("  default_type application/octet-stream;\n  server {\n");
    let _ = writeln!(c, "    listen {} backlog={};", spec.listen, spec.backlog);
    let _ = writeln!(
        c,
        "    server_name _;\n    root {};",
        spec.docroot.display()
    );
    c.push_str("    location / { }\n  }\n}\n");
    let path = dir.join("nginx.conf");
    write_file(&path, &c)?;
    Ok(path)
}

/// The arguments that point the program at our configuration (and nothing else).
fn server_args(kind: ServerKind, config: &Path, dir: &Path) -> Vec<String> {
    let config = config.display().to_string();
    match kind {
        ServerKind::Apache2 => vec!["-f".into(), config, "-DFOREGROUND".into()],
        ServerKind::Nginx => vec![
            "-c".into(),
            config,
            "-p".into(),
            format!("{}/", dir.display()),
            "-e".into(),
            format!("{}/error.log", dir.display()),
            "-g".into(),
            "daemon off;".into(),
        ],
    }
}

/// The server's own configuration test (`-t`); its complaint becomes a one-line error.
fn config_test(
    kind: ServerKind,
    program: &Path,
    config: &Path,
    dir: &Path,
) -> Result<(), LabError> {
    let out = Command::new(program)
        .arg("-t")
        .args(server_args(kind, config, dir))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| LabError::Run(format!("cannot run {}: {e}", program.display())))?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr) + String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        // Only the complaints: not "syntax is ok", "test failed" nor Apache's "Action failed."
        .filter(|l| !l.is_empty() && !l.ends_with("syntax is ok") && !l.ends_with("failed."))
        .filter(|l| !l.contains("test failed"))
        .collect();
    Err(LabError::Run(format!(
        "{kind} rejects {}: {}",
        config.display(),
        lines[..lines.len().min(2)].join(" | ")
    )))
}

/// Starts the server in the foreground, in a process group of its own so it can be killed
/// whole; its stdout and stderr go to `stderr.log` in `dir`.
fn spawn_server(
    kind: ServerKind,
    program: &Path,
    config: &Path,
    dir: &Path,
) -> Result<Child, LabError> {
    let log = dir.join("stderr.log");
    let io = |e: std::io::Error| LabError::Run(format!("{}: {e}", log.display()));
    let out = fs::File::create(&log).map_err(io)?;
    let err = out.try_clone().map_err(io)?;
    Command::new(program)
        .args(server_args(kind, config, dir))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| LabError::Run(format!("cannot start {}: {e}", program.display())))
}

/// The last `n` non-empty lines of a log, joined into one line.
fn tail(path: &Path, n: usize) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// The fields of `/proc/PID/stat` the module uses.
#[derive(Debug, Clone, Copy)]
struct ProcStat {
    pid: u32,
    state: char,
    pgrp: u32,
    utime: u64,
    stime: u64,
    cutime: u64,
    cstime: u64,
}

fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces; fields are counted after its ')'.
    let f: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    Some(ProcStat {
        pid,
        state: f.first()?.chars().next()?,
        pgrp: num(2)? as u32,
        utime: num(11)?,
        stime: num(12)?,
        cutime: num(13)?,
        cstime: num(14)?,
    })
}

/// Every process (zombies included) of process group `pgrp`.
fn group_members(pgrp: u32) -> Vec<ProcStat> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .filter(|p| p.pgrp == pgrp)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from a loopback test: nginx listening on 0.0.0.0:8080 (0x1F90) with 3
    /// connections in its accept queue, one served, one half-open, one closing, one closed by
    /// the server with 1,440 bytes of its response still unacknowledged (FIN-WAIT-1), a client
    /// socket (local port 0xD431) that must not count, and IPv6 lines.
    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F90 00000000:0000 0A 00000000:00000003 00:00000000 00000000     0        0 41213 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F90 0100007F:D431 01 00000000:00000000 00:00000000 00000000    33        0 41300 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:D431 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 41299 1 0000000000000000 20 4 30 10 -1
   3: 0100007F:1F90 0100007F:D433 03 00000000:00000000 02:00000040 00000000     0        0 0 0 0000000000000000
   4: 0100007F:1F90 0100007F:D435 08 00000000:00000001 00:00000000 00000000    33        0 41302 1 0000000000000000 20 4 1 10 -1
   5: 0100007F:0050 00000000:0000 0A 00000000:00000009 00:00000000 00000000     0        0 41000 1 0000000000000000 100 0 0 10 0
   6: 0100007F:1F90 0100007F:D437 04 000005A0:00000000 01:00000014 00000000     0        0 0 3 0000000000000000 20 4 30 10 -1
";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000002 00:00000000 00000000     0        0 41214 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:E001 01 00000000:00000000 00:00000000 00000000     0        0 41401 1 0000000000000000 20 4 30 10 -1
   2: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:E003 0B 00000001:00000000 01:00000014 00000000     0        0 41402 2 0000000000000000 20 4 30 10 -1
garbage line
";

    #[test]
    fn parses_ipv4_table() {
        let c = parse_tcp_table(TCP, 8080);
        let want = TcpCounts {
            established: 1,
            syn_recv: 1,
            accept_queue: 3,
            close_wait_or_closing: 1,
            finishing: 1,
            send_queue_bytes: 1440,
        };
        assert_eq!(c, want);
        assert_eq!(parse_tcp_table(TCP, 80).accept_queue, 9);
        assert_eq!(
            parse_tcp_table(TCP, 0xD431).established,
            1,
            "the client side of it"
        );
        assert_eq!(parse_tcp_table(TCP, 1), TcpCounts::default());
    }

    #[test]
    fn parses_ipv6_table_and_adds_up() {
        let mut c = parse_tcp_table(TCP, 8080);
        c += parse_tcp_table(TCP6, 8080);
        assert_eq!(c.established, 2);
        assert_eq!(c.accept_queue, 5);
        assert_eq!(c.close_wait_or_closing, 2);
        assert_eq!(c.syn_recv, 1);
        assert_eq!((c.finishing, c.send_queue_bytes), (1, 1441));
    }

    #[test]
    fn tree_paths_stay_below_the_root() {
        assert_eq!(
            relative_path("/cap/obj000001.html").unwrap(),
            PathBuf::from("cap/obj000001.html")
        );
        for bad in ["/", "", "/a/../../etc/passwd", "/./a"] {
            assert!(relative_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bad_specs_are_refused_in_one_line() {
        let dir = std::env::temp_dir();
        let spec = |kind, workers, backlog, port: u16| ServerSpec {
            kind,
            docroot: dir.clone(),
            listen: SocketAddr::from(([0, 0, 0, 0], port)),
            workers,
            backlog,
            keep_alive: false,
        };
        for (s, want) in [
            (
                spec(ServerKind::Apache2, 0, 10, 8080),
                "workers must be at least 1",
            ),
            (
                spec(ServerKind::Nginx, 0, 10, 8080),
                "workers must be at least 1",
            ),
            (
                spec(ServerKind::Apache2, 20_001, 10, 8080),
                "above prefork's limit",
            ),
            (
                spec(ServerKind::Nginx, 1, 0, 8080),
                "backlog must be at least 1",
            ),
            (
                spec(ServerKind::Nginx, 1, 10, 0),
                "listen port must not be 0",
            ),
        ] {
            let e = RunningServer::start(&s, &dir).unwrap_err().to_string();
            assert!(e.contains(want) && !e.contains('\n'), "{e}");
        }
        let mut relative = spec(ServerKind::Nginx, 1, 10, 8080);
        relative.docroot = "docs".into();
        assert!(relative
            .validate()
            .unwrap_err()
            .to_string()
            .contains("not an absolute directory"));
    }

    #[test]
    fn probe_goes_through_loopback_for_wildcards() {
        let mut s = ServerSpec {
            kind: ServerKind::Nginx,
            docroot: "/".into(),
            listen: "0.0.0.0:81".parse().unwrap(),
            workers: 1,
            backlog: 1,
            keep_alive: true,
        };
        assert_eq!(s.probe_addr(), "127.0.0.1:81".parse().unwrap());
        s.listen = "[::]:81".parse().unwrap();
        assert_eq!(s.probe_addr(), "[::1]:81".parse().unwrap());
        s.listen = "10.0.0.2:81".parse().unwrap();
        assert_eq!(s.probe_addr(), s.listen);
    }

    #[test]
    fn prefork_pool_fits_small_worker_counts() {
        let mut s = ServerSpec {
            kind: ServerKind::Apache2,
            docroot: "/".into(),
            listen: "0.0.0.0:81".parse().unwrap(),
            workers: 152,
            backlog: 1,
            keep_alive: true,
        };
        assert_eq!(s.prefork_pool(), (5, 5, 10));
        s.workers = 2;
        assert_eq!(s.prefork_pool(), (2, 2, 2));
    }
}
