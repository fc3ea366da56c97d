//! `capstan agent` as users run it: a real process reading this machine's /proc, asked over real
//! loopback HTTP. The machine is shared, so the tests look for a *rise* the test itself causes
//! (a CPU hog, synchronous disk writes), polled with a deadline, never for exact levels.

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_core::LoadReport;
use support::*;

/// A running `capstan agent`, asked over loopback HTTP.
struct Agent {
    proc: Proc,
    addr: SocketAddr,
}

fn agent(extra: &[&str]) -> Agent {
    let addr = free_addr();
    let listen = addr.to_string();
    let mut args = vec!["agent", "--listen", &listen, "--interval", "400ms"];
    args.extend_from_slice(extra);
    Agent {
        proc: spawn(&args, addr),
        addr,
    }
}

impl Agent {
    /// The agent's report; a failure says whether the agent is still running and what it said.
    fn report(&mut self) -> LoadReport {
        // A reset or refused connection is asked again, polled for up to 10 s while the agent
        // runs, and said: CI saw a reset and then a refusal on a busy machine, the agent still
        // running. One that lasts fails with the agent's state and stderr.
        let mut last_refusal = None;
        let answered = poll_within(Duration::from_secs(10), || {
            match try_http(self.addr, "GET", "/_capstan/load") {
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionRefused
                    ) && matches!(self.proc.0.try_wait(), Ok(None)) =>
                {
                    eprintln!(
                        "note: GET /_capstan/load on {}: {e}; asking again",
                        self.addr
                    );
                    last_refusal = Some(e);
                    None
                }
                other => Some(other),
            }
        });
        let asked = answered.unwrap_or_else(|| Err(last_refusal.expect("asked at least once")));
        let r = match asked {
            Ok(r) => r,
            Err(e) => {
                let state = match self.proc.0.try_wait() {
                    Ok(Some(status)) => format!("the agent exited ({status})"),
                    _ => "the agent is still running".to_string(),
                };
                let _ = self.proc.0.kill();
                let _ = self.proc.0.wait();
                panic!(
                    "GET /_capstan/load on {}: {e}; {state}; its stderr: {}",
                    self.addr,
                    self.proc.stderr_text()
                );
            }
        };
        assert_eq!(r.status, 200, "{}", r.text());
        LoadReport::parse(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.text()))
    }

    /// The report once it covers a whole interval of samples.
    fn settled_report(&mut self) -> LoadReport {
        poll(
            "a report covering a whole interval",
            Duration::from_secs(10),
            || {
                let r = self.report();
                (r.interval.length_s >= 0.4).then_some(r)
            },
        )
    }
}

/// Polls `check` until it gives a value, at most `limit`.
fn poll<T>(what: &str, limit: Duration, check: impl FnMut() -> Option<T>) -> T {
    poll_within(limit, check).unwrap_or_else(|| panic!("timed out waiting for {what}"))
}

/// Polls `check` until it gives a value; `None` once `limit` has passed without one.
fn poll_within<T>(limit: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let started = Instant::now();
    loop {
        if let Some(v) = check() {
            return Some(v);
        }
        if started.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Threads spinning until dropped.
struct Hog {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hog {
    fn start(threads: usize, work: impl Fn() + Send + Sync + Clone + 'static) -> Hog {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..threads)
            .map(|_| {
                let (stop, work) = (stop.clone(), work.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        work();
                    }
                })
            })
            .collect();
        Hog { stop, threads }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[test]
fn help_names_every_flag_with_its_default() {
    let out = run(&["agent", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--listen",
        "--name",
        "--interval",
        "--disk",
        "--net",
        "--link-mbps",
        "--nginx-status",
    ] {
        let at = help
            .find(&format!("{flag} <"))
            .unwrap_or_else(|| panic!("{flag} missing from help"));
        let text = &help[at..];
        let end = text.find("\n      --").unwrap_or(text.len());
        assert!(
            text[..end].contains("[default:"),
            "{flag} has no default in help"
        );
    }
    assert!(help.contains("/_capstan/load") && help.contains("/proc/diskstats"));
}

#[test]
fn bad_flags_are_one_line_and_non_zero() {
    for (args, needle) in [
        (&["--disk", "nosuchdisk9"][..], "no disk \"nosuchdisk9\""),
        (&["--net", "nosuchnet9"], "no interface \"nosuchnet9\""),
        (&["--interval", "10ms"], "at least 100 ms"),
        (&["--interval", "soon"], "--interval"),
        (&["--link-mbps", "0"], "link speed"),
        (&["--nginx-status", "https://x/s"], "only http://"),
        (&["--listen", "nowhere"], "--listen"),
    ] {
        let out = capstan().arg("agent").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn the_report_parses_and_the_cpu_utilisation_rises_under_a_cpu_hog() {
    let _alone = alone();
    let mut agent = agent(&["--name", "web1"]);
    let idle = agent.settled_report();
    assert_eq!(idle.resources, "agent");
    assert_eq!(idle.node, "web1");
    assert!(idle.cores >= 1);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let before = idle.interval.cpu_util;
    // Every CPU spinning keeps the machine busy whatever else runs on it.
    let _hog = Hog::start(cpus, || {
        std::hint::black_box((0..10_000u64).fold(0u64, |a, b| a.wrapping_mul(31).wrapping_add(b)));
    });
    let target = (before + 0.2).min(0.9);
    let busy = poll("cpu_util to rise", Duration::from_secs(20), || {
        let r = agent.report();
        (r.interval.cpu_util >= target).then_some(r)
    });
    eprintln!(
        "cpu_util idle {before:.2}, with {cpus} spinning threads {:.2}",
        busy.interval.cpu_util
    );
    if before >= 0.7 {
        eprintln!("note: the machine was already busy, so the rise could not be large");
    }
    assert!(busy.since_start.cpu_busy_s > 0.0);
}

/// `io_ticks` per block device, read directly, to tell whether this machine's disks show their
/// busy time at all.
fn disk_ticks_ms() -> std::collections::HashMap<String, u64> {
    let text = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some((f.get(2)?.to_string(), f.get(12)?.parse().ok()?))
        })
        .collect()
}

/// The most any one device's `io_ticks` moved between two readings.
fn most_ticks_moved(
    before: &std::collections::HashMap<String, u64>,
    after: &std::collections::HashMap<String, u64>,
) -> u64 {
    after
        .iter()
        .map(|(name, t)| t.saturating_sub(before.get(name).copied().unwrap_or(*t)))
        .max()
        .unwrap_or(0)
}

/// The CPU and disk tests each look for a rise they cause; run alone, neither sees the other's.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ALONE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Writes 1 MiB at the start of `path` over and over with O_DIRECT, so every write reaches the
/// device (buffered writes, even synced, may keep a virtual disk's in-flight time low).
fn direct_writer(path: std::path::PathBuf) -> Option<impl Fn() + Send + Sync + Clone + 'static> {
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .ok()?;
    // O_DIRECT needs a buffer aligned to the device's block size; 4096 covers every common one.
    const ALIGN: usize = 4096;
    const SIZE: usize = 1 << 20;
    let buf = Arc::new(vec![7u8; SIZE + ALIGN]);
    let skip = buf.as_ptr().align_offset(ALIGN);
    let file = Arc::new(std::sync::Mutex::new(file));
    let first = {
        let mut f = file.lock().unwrap();
        f.write_all(&buf[skip..skip + SIZE]).is_ok()
    };
    first.then_some(move || {
        let mut f = file.lock().unwrap();
        let _ = f.seek(SeekFrom::Start(0));
        let _ = f.write_all(&buf[skip..skip + SIZE]);
    })
}

#[test]
fn disk_utilisation_rises_under_direct_writes() {
    let _alone = alone();
    let mut agent = agent(&[]);
    let before = agent.settled_report().interval.disk_util;
    let path = std::env::temp_dir().join(format!("capstan-agent-disk-{}", std::process::id()));
    let _cleanup = RemoveOnDrop(path.clone());
    let Some(write) = direct_writer(path) else {
        eprintln!("note: O_DIRECT writes are not possible in the temp directory; skipped");
        return;
    };
    let ticks_before = disk_ticks_ms();
    let hog = Hog::start(1, write);
    let target = (before + 0.15).min(0.8);
    let started = Instant::now();
    let mut seen = 0.0f64;
    while started.elapsed() < Duration::from_secs(20) {
        seen = seen.max(agent.report().interval.disk_util);
        if seen >= target {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(hog);
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let moved_ms = most_ticks_moved(&ticks_before, &disk_ticks_ms());
    eprintln!(
        "disk_util idle {before:.2}, under direct writes {seen:.2}; the busiest device's io_ticks \
         moved {moved_ms} ms in {elapsed_ms} ms"
    );
    if seen < target && moved_ms * 4 < elapsed_ms {
        eprintln!("note: this machine's disks show little busy time (io_ticks); not asserted");
        return;
    }
    assert!(
        seen >= target,
        "disk_util stayed at {seen:.2} (idle {before:.2}) while io_ticks moved {moved_ms} ms \
         in {elapsed_ms} ms"
    );
}

struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An nginx with a stub_status page in a temporary directory, stopped when dropped.
struct Nginx {
    proc: Proc,
    dir: std::path::PathBuf,
    addr: SocketAddr,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.proc.0.kill();
        let _ = self.proc.0.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts nginx on `addr` with `examples/agent-nginx.conf` in its server block, the agent's
/// address put in for the example's, or `None` when this machine has no nginx.
fn nginx(addr: SocketAddr, agent: SocketAddr) -> Option<Nginx> {
    let dir = std::env::temp_dir().join(format!("capstan-agent-nginx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let example = std::fs::read_to_string(repo_root().join("examples/agent-nginx.conf")).unwrap();
    assert!(example.contains("127.0.0.1:9901"));
    let snippet = dir.join("agent-nginx.conf");
    std::fs::write(
        &snippet,
        example.replace("127.0.0.1:9901", &agent.to_string()),
    )
    .unwrap();
    let d = dir.display();
    let conf = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log;\nevents {{ worker_connections 64; }}\n\
         http {{\n access_log off;\n client_body_temp_path {d}/body;\n proxy_temp_path {d}/proxy;\n\
         fastcgi_temp_path {d}/fastcgi;\n uwsgi_temp_path {d}/uwsgi;\n scgi_temp_path {d}/scgi;\n\
         server {{\n  listen {addr};\n  include {snippet};\n\
         location / {{ return 200 \"ok\\n\"; }}\n }}\n}}\n",
        snippet = snippet.display()
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let child = std::process::Command::new("nginx")
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&path)
        .arg("-e")
        .arg(dir.join("error.log"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let nginx = Nginx {
        proc: Proc(child),
        dir,
        addr,
    };
    poll("nginx to listen", Duration::from_secs(10), || {
        accepts(addr).then_some(())
    });
    Some(nginx)
}

#[test]
fn nginx_requests_in_progress_and_handled_come_from_stub_status() {
    let (nginx_addr, addr) = (free_addr(), free_addr());
    let Some(nginx) = nginx(nginx_addr, addr) else {
        eprintln!("note: no nginx on this machine; skipped");
        return;
    };
    let url = format!("http://{nginx_addr}/nginx_status");
    let listen = addr.to_string();
    let proc = spawn(
        &[
            "agent",
            "--listen",
            &listen,
            "--interval",
            "400ms",
            "--nginx-status",
            &url,
        ],
        addr,
    );
    let mut agent = Agent { proc, addr };
    let idle = agent.settled_report();
    assert_eq!(
        idle.active_requests, 0,
        "the agent's own status request is not counted"
    );
    // Three clients in the middle of sending their request heads.
    let partial: Vec<std::net::TcpStream> = (0..3)
        .map(|_| {
            use std::io::Write;
            let mut s = std::net::TcpStream::connect(nginx.addr).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
            s
        })
        .collect();
    poll("3 requests in progress", Duration::from_secs(10), || {
        (agent.report().active_requests == 3).then_some(())
    });
    drop(partial);
    for _ in 0..10 {
        assert_eq!(get(nginx.addr, "/").status, 200);
    }
    // The three cut-off requests count as handled too (nginx counts a request once it starts).
    let served = poll("13 requests served", Duration::from_secs(10), || {
        let r = agent.report();
        (r.since_start.served >= 13).then_some(r.since_start.served)
    });
    assert_eq!(
        served, 13,
        "the agent's own status requests are not counted"
    );
    // Nothing more arrives: a few ticks later the count still stands.
    let later = agent.report().uptime_s + 1.0;
    let r = poll("a second to pass", Duration::from_secs(10), || {
        let r = agent.report();
        (r.uptime_s >= later).then_some(r)
    });
    assert_eq!((r.since_start.served, r.active_requests), (13, 0));
    // The switch's way: the report through the node's own address (the example's proxy_pass).
    let through = get(nginx.addr, "/_capstan/load");
    assert_eq!(through.status, 200, "{}", through.text());
    assert_eq!(LoadReport::parse(&through.body).unwrap().resources, "agent");
}
