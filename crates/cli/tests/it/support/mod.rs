//! Running `capstan` as a process, and plain blocking HTTP to talk to it.
#![allow(dead_code)]

pub mod lab_run;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn capstan() -> Command {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
}

pub fn run(args: &[&str]) -> Output {
    let _slot = lab_slot(args);
    capstan().args(args).output().expect("capstan runs")
}

/// How many `capstan lab` runs of this test binary may go at once (`CAPSTAN_TEST_LABS`, 4
/// by default). The tests run on many threads because most of them wait on sockets and
/// timers; a lab run is different: it drives a cluster for tens of seconds, and eight at once
/// on two cores would measure the machine instead of the lab.
fn lab_limit() -> usize {
    std::env::var("CAPSTAN_TEST_LABS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(4)
}

/// A place among the lab runs that may go at once, held until dropped; `None` for anything
/// that is not a lab run (other commands, `lab --help`, `lab --list`).
pub fn lab_slot(args: &[&str]) -> Option<LabSlot> {
    let is_run = args.first() == Some(&"lab")
        && !args
            .iter()
            .any(|a| matches!(*a, "--help" | "-h" | "--list"));
    if !is_run {
        return None;
    }
    let (lock, freed) = &LAB_RUNS;
    let mut running = lock.lock().unwrap_or_else(|e| e.into_inner());
    while *running >= lab_limit() {
        running = freed.wait(running).unwrap_or_else(|e| e.into_inner());
    }
    *running += 1;
    Some(LabSlot)
}

static LAB_RUNS: (std::sync::Mutex<usize>, std::sync::Condvar) =
    (std::sync::Mutex::new(0), std::sync::Condvar::new());

/// A lab run's place (see [`lab_slot`]); given back on drop, even when the test panics.
pub struct LabSlot;

impl Drop for LabSlot {
    fn drop(&mut self) {
        let (lock, freed) = &LAB_RUNS;
        *lock.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
        freed.notify_one();
    }
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A free loopback port from the kernel (port 0), never the same one twice in this process.
///
/// Not from `capstan_lab::testing::free_loopback_port`: the `capstan lab` processes these tests
/// start pick their own nodes' and switches' ports from that range (20000–31999), each process
/// on its own, so a port this process had just probed free could be taken by a lab run's node
/// before the test's own process bound it, and the test would then talk to the lab's node. The
/// kernel hands out ports from its ephemeral range (32768 and up), which the lab never uses.
pub fn free_addr() -> SocketAddr {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..1000 {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port");
        if !given.contains(&addr.port()) {
            given.push(addr.port());
            return addr;
        }
    }
    panic!("the kernel gave only ports this process has already used");
}

/// A port free on every one of `hosts` (addresses of 127.0.0.0/8) now, never the same one twice
/// in this process: for tests that run processes on one port at several loopback addresses. A
/// port free on 127.0.0.1 alone may be held at 127.0.0.3 by another program, and a listener
/// that sets `SO_REUSEPORT` would then share it with that program instead of failing.
pub fn free_port_on(hosts: &[&str]) -> u16 {
    for _ in 0..200 {
        let port = free_addr().port();
        let free = hosts
            .iter()
            .all(|h| std::net::TcpListener::bind((*h, port)).is_ok());
        if free {
            return port;
        }
    }
    panic!("no port free on all of {hosts:?}");
}

/// A child process killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    pub fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{name}"), &self.pid().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{name}");
    }

    /// Waits for the process to exit, at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let started = Instant::now();
        while started.elapsed() < limit {
            if let Some(status) = self.0.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    pub fn stderr_text(&mut self) -> String {
        let mut s = String::new();
        if let Some(mut err) = self.0.stderr.take() {
            let _ = err.read_to_string(&mut s);
        }
        s
    }
}

/// Starts `capstan ARGS` and waits until `ready` accepts connections.
pub fn spawn(args: &[&str], ready: SocketAddr) -> Proc {
    let child = capstan()
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("capstan starts");
    let mut proc = Proc(child);
    let started = Instant::now();
    while !accepts(ready) {
        if let Some(status) = proc.0.try_wait().unwrap() {
            panic!(
                "capstan {args:?} exited early ({status}): {}",
                proc.stderr_text()
            );
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "capstan {args:?} did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    proc
}

/// Starts a `capstan origin` node.
pub fn origin(extra: &[&str]) -> (Proc, SocketAddr) {
    let addr = free_addr();
    let listen = addr.to_string();
    let mut args = vec!["origin", "--listen", &listen];
    args.extend_from_slice(extra);
    (spawn(&args, addr), addr)
}

pub struct Reply {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Whether something listens at `addr`. A connection to itself (TCP simultaneous open, possible
/// when the port lies in the ephemeral range and nothing listens) does not count.
pub fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect(addr).is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok())
}

/// One request on a fresh connection (`Connection: close`), read to the end.
pub fn http(addr: SocketAddr, method: &str, path: &str) -> Reply {
    try_http(addr, method, path).unwrap_or_else(|e| panic!("{method} {path} to {addr}: {e}"))
}

/// [`http`], with a failure to connect, send or read given back rather than a panic.
pub fn try_http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a reply head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    let mut body = raw[split + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        body = dechunk(&body);
    }
    Ok(Reply { status, head, body })
}

pub fn get(addr: SocketAddr, path: &str) -> Reply {
    http(addr, "GET", path)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = data.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&data[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[eol + 2..eol + 2 + size]);
        data = &data[eol + 2 + size + 2..];
    }
}

/// The 1-minute load average when it exceeds the cores: a pure timing claim (one measured
/// duration against another) is not judged then. As `lab_cli.rs` does.
pub fn machine_busy() -> bool {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<f64>().ok());
    match load {
        Some(l) if l > cores => {
            eprintln!("note: load average {l} > {cores} cores: timing bounds not judged");
            true
        }
        _ => false,
    }
}

/// Waits until `check` holds, polling, at most 10 s.
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A back-end answering every request with `total` bytes of `z` after `head_fields` (extra
/// header lines, each ending in CRLF), streamed in 256 KiB writes; for memory-bound tests.
pub fn big_body_backend(total: u64, head_fields: &'static str) -> SocketAddr {
    let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = backend.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in backend.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                let _ = write!(
                    s,
                    "HTTP/1.1 200 OK\r\n{head_fields}Content-Length: {total}\r\n\r\n"
                );
                let chunk = vec![b'z'; 256 * 1024];
                let mut left = total;
                while left > 0 {
                    let n = left.min(chunk.len() as u64) as usize;
                    if s.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n as u64;
                }
            });
        }
    });
    addr
}

/// Peak resident memory of a process, in KiB (`VmHWM`).
pub fn peak_rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap()
}

/// Downloads `path` on a fresh connection (`Connection: close`) without keeping it; returns
/// the bytes received, head included.
pub fn download_size(addr: SocketAddr, path: &str) -> u64 {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut received = 0u64;
    loop {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            return received;
        }
        received += n as u64;
    }
}
