//! The real back-ends as the WAN experiments use them: apache2 and nginx started from the lab's
//! own configurations serve a Capstan document tree over real sockets, report their processes,
//! CPU time and the kernel's connection counts, and leave nothing behind when dropped.
//! Needs root (the servers run as www-data and apt-get may install them); skips with a note
//! otherwise.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use capstan_lab::testing::{
    ensure_installed, tcp_counts, write_tree, RunningServer, ServerKind, ServerSpec,
    APACHE_START_SERVERS,
};
use capstan_workload::tree::{DocTree, TreeKind};

fn is_root() -> bool {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// True when `kind` can run here; otherwise prints why the test is skipped.
fn available(kind: ServerKind, test: &str) -> bool {
    if !is_root() {
        eprintln!("note: {test} skipped: the real servers need root (they run as www-data)");
        return false;
    }
    match ensure_installed(kind) {
        Ok(_) => true,
        Err(why) => {
            eprintln!("note: {test} skipped: {why}");
            false
        }
    }
}

/// A scratch directory of this test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("servers-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spec(kind: ServerKind, docroot: &Path, workers: u32) -> ServerSpec {
    let port = capstan_lab::testing::free_loopback_port().unwrap().port();
    ServerSpec {
        kind,
        docroot: docroot.to_path_buf(),
        listen: SocketAddr::from(([0, 0, 0, 0], port)),
        workers,
        backlog: 128,
        keep_alive: false,
    }
}

/// One HTTP/1.0 GET on a fresh connection: the status and the body.
fn get(addr: SocketAddr, path: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = Vec::new();
    s.read_to_end(&mut response).unwrap();
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&response[..head_end]);
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, response[head_end + 4..].to_vec())
}

/// Polls `cond` every 20 ms until it holds or `within` passes.
fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The pids of the server's process group (the master and its children).
fn group_pids(pgrp: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            let rest = stat.rfind(')').map(|i| &stat[i + 1..]).unwrap_or("");
            rest.split_whitespace().nth(2) == Some(&pgrp.to_string())
        })
        .collect()
}

/// Gone, or a zombie waiting for an init that does not reap: no longer running either way.
fn not_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat[stat.rfind(')').unwrap() + 1..]
            .trim_start()
            .starts_with('Z'),
    }
}

fn serves_the_tree(kind: ServerKind) {
    let test = format!("serves_the_tree({kind})");
    if !available(kind, &test) {
        return;
    }
    let scratch = Scratch::new(kind.name());
    let docroot = scratch.0.join("docs");
    let tree = DocTree::generate(TreeKind::Cap, 7, Some(50)).unwrap();
    assert_eq!(write_tree(&tree, &docroot).unwrap(), tree.total_bytes());
    let spec = spec(kind, &docroot, 6);
    let server = RunningServer::start(&spec, &scratch.0).unwrap();
    let addr = spec.probe_addr();

    for file in tree.files.iter().step_by(7) {
        let (status, body) = get(addr, &file.path);
        assert_eq!(status, 200, "{kind} {}", file.path);
        assert_eq!(body.len() as u64, file.size, "{kind} {}", file.path);
        assert!(
            body == tree.content(file),
            "{kind} {}: other bytes",
            file.path
        );
    }
    assert_eq!(get(addr, "/cap/missing.html").0, 404);

    let least = match kind {
        ServerKind::Apache2 => 1 + APACHE_START_SERVERS.min(spec.workers),
        ServerKind::Nginx => 1 + spec.workers,
    };
    assert!(
        eventually(Duration::from_secs(10), || server.processes() >= least),
        "{kind}: {} processes, want at least {least}",
        server.processes()
    );
    let file = &tree.files[0];
    let busy = eventually(Duration::from_secs(20), || {
        (0..50).for_each(|_| assert_eq!(get(addr, &file.path).0, 200));
        server.cpu_seconds() > 0.0
    });
    assert!(busy, "{kind}: no CPU time after bursts of requests");

    held_connection_is_counted(&server, &spec);
    let (pids, dir) = (group_pids(server.pid()), scratch.0.clone());
    eprintln!(
        "{kind}: {} processes, {:.3} s CPU",
        pids.len(),
        server.cpu_seconds()
    );
    drop(server);
    assert!(eventually(Duration::from_secs(5), || pids
        .iter()
        .all(|p| not_running(*p))));
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("docs")],
        "only the docroot stays"
    );
}

/// A connection held open shows as ESTABLISHED on the server's port.
fn held_connection_is_counted(server: &RunningServer, spec: &ServerSpec) {
    let port = spec.listen.port();
    let before = tcp_counts(port).unwrap();
    let held = TcpStream::connect(spec.probe_addr()).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || tcp_counts(port)
            .unwrap()
            .established
            > before.established),
        "{}: {:?} before, {:?} with a connection held",
        server.kind(),
        before,
        tcp_counts(port).unwrap()
    );
    let own = server.tcp_counts().unwrap();
    assert!(own.established >= 1, "the server's own view: {own:?}");
    drop(held);
}

/// A server started on a thread inside another network namespace runs there: reachable from
/// that namespace, absent from this one, counted by its own tables.
#[test]
fn runs_in_the_namespace_of_the_starting_thread() {
    let kind = ServerKind::Nginx;
    if !available(kind, "runs_in_the_namespace_of_the_starting_thread") {
        return;
    }
    let scratch = Scratch::new("netns");
    let docroot = scratch.0.join("docs");
    let tree = DocTree::generate(TreeKind::Cap, 3, Some(5)).unwrap();
    write_tree(&tree, &docroot).unwrap();
    let spec = spec(kind, &docroot, 1);
    let (work, inner) = (scratch.0.clone(), spec.clone());
    let started = std::thread::spawn(move || {
        // SAFETY: unshare(2) moves only this thread into a new network namespace.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(format!("unshare: {}", std::io::Error::last_os_error()));
        }
        let up = std::process::Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status();
        if !up.is_ok_and(|s| s.success()) {
            return Err("ip link set lo up failed".to_string());
        }
        let server = RunningServer::start(&inner, &work).map_err(|e| e.to_string())?;
        let (status, body) = get(inner.probe_addr(), &tree.files[0].path);
        assert_eq!((status, body.len() as u64), (200, tree.files[0].size));
        let held = TcpStream::connect(inner.probe_addr()).unwrap();
        Ok((server, held))
    })
    .join()
    .unwrap();
    let (server, _held) = match started {
        Ok(started) => started,
        Err(why) => {
            eprintln!("note: runs_in_the_namespace_of_the_starting_thread skipped: {why}");
            return;
        }
    };
    assert!(
        TcpStream::connect(spec.probe_addr()).is_err(),
        "not in this namespace"
    );
    assert_eq!(tcp_counts(spec.listen.port()).unwrap().established, 0);
    assert!(eventually(Duration::from_secs(5), || server
        .tcp_counts()
        .unwrap()
        .established
        >= 1));
}

#[test]
fn apache2_serves_the_tree() {
    serves_the_tree(ServerKind::Apache2);
}

#[test]
fn nginx_serves_the_tree() {
    serves_the_tree(ServerKind::Nginx);
}

/// Connections that hold a process each (requests never finished) make prefork grow to its
/// limit and no further; the rest wait in the accept queue, as in the paper's Figure 10.
#[test]
fn apache2_grows_to_its_worker_limit_then_queues() {
    let kind = ServerKind::Apache2;
    if !available(kind, "apache2_grows_to_its_worker_limit_then_queues") {
        return;
    }
    let scratch = Scratch::new("grow");
    let docroot = scratch.0.join("docs");
    write_tree(
        &DocTree::generate(TreeKind::Cap, 1, Some(5)).unwrap(),
        &docroot,
    )
    .unwrap();
    let spec = spec(kind, &docroot, 8);
    let server = RunningServer::start(&spec, &scratch.0).unwrap();
    let started = Instant::now();
    let held: Vec<TcpStream> = (0..14)
        .map(|_| {
            let mut s = TcpStream::connect(spec.probe_addr()).unwrap();
            s.write_all(b"GET /cap/").unwrap();
            s
        })
        .collect();
    let mut most = 0;
    let full = eventually(Duration::from_secs(30), || {
        most = most.max(server.processes());
        most == 1 + spec.workers && tcp_counts(spec.listen.port()).unwrap().accept_queue > 0
    });
    let counts = tcp_counts(spec.listen.port()).unwrap();
    assert!(full, "{most} processes at most, {counts:?}");
    eprintln!(
        "apache2: {most} processes for {} held connections after {:?}; {counts:?}",
        held.len(),
        started.elapsed()
    );
    assert_eq!(counts.established, held.len() as u32);
    assert_eq!(counts.accept_queue, held.len() as u32 - spec.workers);
    assert_eq!(
        server.processes(),
        1 + spec.workers,
        "never beyond the limit"
    );
}

/// A server that cannot listen (the port is taken) is reported in one line with its log's
/// complaint, and leaves no process behind.
#[test]
fn port_in_use_is_a_one_line_error() {
    for kind in ServerKind::ALL {
        if !available(kind, &format!("port_in_use_is_a_one_line_error({kind})")) {
            continue;
        }
        let scratch = Scratch::new(&format!("busy-{kind}"));
        let spec = spec(kind, &scratch.0, 1);
        let _taken = TcpListener::bind(spec.listen).unwrap();
        let e = RunningServer::start(&spec, &scratch.0)
            .unwrap_err()
            .to_string();
        eprintln!("{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains(kind.name()) && e.contains("in use"), "{e}");
        let left = std::fs::read_dir(&scratch.0).unwrap().count();
        assert_eq!(left, 0, "{kind}: its temp dir is removed");
    }
}

/// An address no interface has (TEST-NET-1) cannot be listened on: one line, from the
/// server's own words.
#[test]
fn foreign_address_is_a_one_line_error() {
    for kind in ServerKind::ALL {
        if !available(
            kind,
            &format!("foreign_address_is_a_one_line_error({kind})"),
        ) {
            continue;
        }
        let scratch = Scratch::new(&format!("foreign-{kind}"));
        let mut spec = spec(kind, &scratch.0, 1);
        spec.listen = SocketAddr::from(([192, 0, 2, 1], spec.listen.port()));
        let e = RunningServer::start(&spec, &scratch.0)
            .unwrap_err()
            .to_string();
        eprintln!("{e}");
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains("assign requested address"), "{e}");
    }
}

/// As root the servers read as www-data: a docroot below a private directory is refused
/// before anything starts, naming the directory.
#[test]
fn private_docroot_is_refused() {
    if !is_root() {
        eprintln!("note: private_docroot_is_refused skipped: needs root");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("private");
    let private = scratch.0.join("private");
    let docroot = private.join("docs");
    std::fs::create_dir_all(&docroot).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let e = RunningServer::start(&spec(ServerKind::Nginx, &docroot, 1), &scratch.0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not searchable by www-data") && e.contains("private"),
        "{e}"
    );
}
