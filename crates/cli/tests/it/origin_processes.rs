//! `capstan origin --process-limit`: Apache-prefork-like serving, watched at the socket level —
//! connections beyond the limit wait in the listen backlog until a process frees, and each
//! process in use takes its memory from the modelled file cache.

use crate::support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::{accepts, eventually, free_addr, get, spawn, Proc};

/// The node's load report, from the report address (outside the process limit).
fn report(addr: SocketAddr) -> serde_json::Value {
    let reply = get(addr, "/_capstan/load");
    assert_eq!(reply.status, 200);
    serde_json::from_slice(&reply.body).expect("the report is JSON")
}

fn processes(addr: SocketAddr) -> (u64, u64) {
    let r = report(addr);
    let p = &r["processes"];
    (
        p["in_use"].as_u64().unwrap(),
        p["waiting"].as_u64().unwrap(),
    )
}

/// Sends a keep-alive GET on a new connection (the response is not read here).
fn send_get(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("the kernel completes the handshake");
    write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").unwrap();
    s
}

/// Reads one whole response (head and Content-Length body) within `limit`; its status.
fn read_response(s: &mut TcpStream, limit: Duration) -> u16 {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let n = s.read(&mut buf).expect("a response within the limit");
        assert!(n > 0, "the connection closed before a whole response");
        raw.extend_from_slice(&buf[..n]);
        let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("a content-length");
        if raw.len() >= end + 4 + length {
            return head.split_whitespace().nth(1).unwrap().parse().unwrap();
        }
    }
}

/// True when nothing has arrived on `s` yet (checked without waiting).
fn nothing_received(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 1];
    let quiet = matches!((&*s).read(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    quiet
}

fn start_node(extra: &[&str]) -> (Proc, SocketAddr, SocketAddr) {
    let (main, rep) = (free_addr(), free_addr());
    let (main_s, rep_s) = (main.to_string(), rep.to_string());
    let mut args = vec!["origin", "--listen", &main_s, "--report-listen", &rep_s];
    args.extend_from_slice(extra);
    // The main socket listens before the report socket does, so no probe of it (which would
    // take a process) is needed.
    let node = spawn(&args, rep);
    (node, main, rep)
}

#[test]
fn a_third_connection_waits_in_the_backlog_until_a_process_frees() {
    // Two workers share one listening socket, so the waiting connection waits in one backlog
    // for whichever process frees first.
    let (_node, main, rep) = start_node(&["--process-limit", "2", "--threads", "2"]);
    let mut first = send_get(main, "/file500.html");
    let mut second = send_get(main, "/file5k.html");
    assert_eq!(read_response(&mut first, Duration::from_secs(10)), 200);
    assert_eq!(read_response(&mut second, Duration::from_secs(10)), 200);
    assert_eq!(
        processes(rep).0,
        2,
        "both kept-alive connections hold a process"
    );

    let mut third = send_get(main, "/file500.html");
    eventually("the third connection to wait in the backlog", || {
        processes(rep) == (2, 1)
    });
    assert!(nothing_received(&third), "served beyond the process limit");
    let r = report(rep);
    assert_eq!(r["processes"]["limit"], 2);
    assert_eq!(r["processes"]["accepted"], 2);

    drop(first);
    assert_eq!(read_response(&mut third, Duration::from_secs(10)), 200);
    eventually("the freed process to serve the waiting connection", || {
        processes(rep) == (2, 0)
    });
    assert_eq!(report(rep)["processes"]["accepted"], 3);
    assert_eq!(report(rep)["processes"]["max_in_use"], 2);
    drop((second, third));
    eventually("every process to be idle again", || processes(rep).0 == 0);
}

#[test]
fn a_process_lingers_until_the_client_closes_its_side() {
    let (_node, main, rep) = start_node(&["--process-limit", "4", "--threads", "1"]);
    // HTTP/1.0: the node sends the response and its FIN, then waits for the client's FIN (as
    // Apache's lingering close does) before the process is free.
    let mut s = TcpStream::connect(main).unwrap();
    write!(s, "GET /file500.html HTTP/1.0\r\n\r\n").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut all = Vec::new();
    s.read_to_end(&mut all)
        .expect("the response and the node's FIN");
    assert!(all.starts_with(b"HTTP/1.0 200") || all.starts_with(b"HTTP/1.1 200"));
    assert_eq!(
        processes(rep).0,
        1,
        "the process waits for the client's FIN"
    );
    drop(s);
    eventually("the process to be freed by the client's FIN", || {
        processes(rep).0 == 0
    });
}

#[test]
fn each_process_in_use_takes_its_memory_from_the_file_cache() {
    let (_node, main, rep) = start_node(&[
        "--process-limit",
        "8",
        "--process-memory",
        "100KB",
        "--threads",
        "1",
    ]);
    let configured = report(rep)["cache"]["configured_bytes"].as_u64().unwrap();
    // WebStone's tree is 5.8 MB; 15 % of it is the cache.
    assert!(configured > 500_000, "{configured}");
    let capacity = || report(rep)["cache"]["capacity_bytes"].as_u64().unwrap();
    assert_eq!(capacity(), configured);

    let mut open = Vec::new();
    for n in 1..=3u64 {
        let mut s = send_get(main, "/file500.html");
        assert_eq!(read_response(&mut s, Duration::from_secs(10)), 200);
        open.push(s);
        let r = report(rep);
        assert_eq!(r["processes"]["in_use"], n);
        assert_eq!(r["processes"]["memory_bytes"], n * 100_000);
        assert_eq!(capacity(), configured - n * 100_000);
    }
    // The cache is a real LRU: a file that no longer fits is evicted, not just counted.
    let used = report(rep)["cache"]["used_bytes"].as_u64().unwrap();
    assert!(used <= capacity(), "{used} > {}", capacity());

    open.clear();
    let deadline = Instant::now() + Duration::from_secs(10);
    while capacity() != configured {
        assert!(
            Instant::now() < deadline,
            "the memory came back to the cache"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(report(rep)["processes"]["memory_bytes"], 0);
}

#[test]
fn without_a_limit_there_is_no_process_report() {
    let (main, rep) = (free_addr(), free_addr());
    let _node = spawn(
        &[
            "origin",
            "--listen",
            &main.to_string(),
            "--report-listen",
            &rep.to_string(),
        ],
        main,
    );
    eventually("the report address", || accepts(rep));
    let r = report(rep);
    assert!(r.get("processes").is_none(), "{r}");
    assert_eq!(r["cache"]["capacity_bytes"], r["cache"]["configured_bytes"]);
    assert_eq!(
        get(rep, "/file500.html").status,
        404,
        "the report address serves only the report"
    );
}

#[test]
fn bad_process_settings_are_one_line_errors() {
    for (args, needle) in [
        (vec!["--process-limit", "0"], "at least 1"),
        (
            vec!["--process-limit", "4", "--process-memory", "lots"],
            "--process-memory: bad size",
        ),
        (vec!["--process-memory", "1MB"], "--process-limit"),
        (vec!["--backlog", "0"], "backlog"),
    ] {
        let out = support::run(&[&["origin"], args.as_slice()].concat());
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn a_warm_cache_answers_the_first_request_from_memory() {
    // A cache as big as the tree: warmed, it holds every file before any request.
    let (main, rep) = (free_addr(), free_addr());
    let (main_s, rep_s) = (main.to_string(), rep.to_string());
    let common = [
        "origin",
        "--listen",
        &main_s,
        "--report-listen",
        &rep_s,
        "--cache-fraction",
        "1.0",
        "--threads",
        "1",
    ];
    let first_request = |extra: &[&str]| {
        let node = spawn(&[&common[..], extra].concat(), main);
        eventually("the report address", || accepts(rep));
        let used = report(rep)["cache"]["used_bytes"].as_u64().unwrap();
        let mut s = send_get(main, "/file5k.html");
        assert_eq!(read_response(&mut s, Duration::from_secs(10)), 200);
        let c = &report(rep)["cache"];
        drop(node);
        (
            used,
            c["hits"].as_u64().unwrap(),
            c["misses"].as_u64().unwrap(),
        )
    };
    let (used, hits, misses) = first_request(&["--warm-cache"]);
    assert!(used > 5_000_000, "the whole WebStone tree is held: {used}");
    assert_eq!((hits, misses), (1, 0));
    let (used, hits, misses) = first_request(&[]);
    assert_eq!(
        (used, hits, misses),
        (0, 0, 1),
        "cold: the first read misses"
    );
    let out = support::run(&["origin", "--warm-cache", "--resources", "real"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("warm_cache needs resources = emulated"),
        "{err}"
    );
}
