//! `capstan bench --wan` as users run it: the generator as a process behind the real delay
//! router (network namespaces, TUN devices) against a real `capstan origin`. Needs root, like
//! `crates/wan`'s tests; without it (or without iproute2, /dev/net/tun, namespaces) the
//! namespace tests say why and return (CI runs as root).

use crate::support;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use support::{capstan, free_addr, machine_busy, spawn, Proc};

fn missing() -> Option<&'static str> {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces, TUN devices)");
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("needs iproute2 (ip)");
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("needs /dev/net/tun");
    }
    // SAFETY: unshare(CLONE_NEWNET) only moves this short-lived probe thread into a new, empty
    // network namespace; the thread ends right after.
    let probe = std::thread::spawn(|| unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0);
    if !probe.join().unwrap_or(false) {
        return Some("cannot make network namespaces here (no CAP_SYS_ADMIN?)");
    }
    None
}

fn can_run(test: &str) -> bool {
    match missing() {
        None => true,
        Some(why) => {
            eprintln!("skipped {test}: {why}");
            false
        }
    }
}

/// One traffic test at a time: two at once on a small machine would measure each other.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// An emulated origin listening on 0.0.0.0 (so the router's server address reaches it); the
/// loopback URL of `path` on it.
fn origin() -> (Proc, String) {
    let addr: SocketAddr = free_addr();
    let listen = format!("0.0.0.0:{}", addr.port());
    let node = spawn(&["origin", "--listen", &listen, "--threads", "1"], addr);
    (
        node,
        format!("http://127.0.0.1:{}/file500.html", addr.port()),
    )
}

fn json_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "capstan-bench-wan-{}-{name}.json",
        std::process::id()
    ))
}

/// Runs `capstan bench ARGS --json FILE -q`; the parsed result.
fn bench(args: &[&str], name: &str) -> serde_json::Value {
    let file = json_path(name);
    let out = capstan()
        .arg("bench")
        .args(args)
        .args(["-q", "--json", file.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("capstan runs");
    assert!(
        out.status.success(),
        "capstan bench {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).expect("the result file");
    let _ = std::fs::remove_file(&file);
    serde_json::from_str(&text).expect("the result is JSON")
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("{v} is not a number"))
}

#[test]
fn a_50ms_path_adds_two_round_trips_to_a_connection_per_request_get() {
    if !can_run("a_50ms_path_adds_two_round_trips_to_a_connection_per_request_get") {
        return;
    }
    let _serial = serial();
    let (_node, url) = origin();
    let load = [url.as_str(), "--rate", "20", "--duration", "2s"];
    let direct = bench(&load, "direct");
    let wan = bench(&[&load[..], &["--wan", "rtt=50ms"]].concat(), "wan");

    // HTTP/1.0, a connection per request: SYN/SYN-ACK, then request/response — 2 × 50 ms that
    // the router adds (it never sends a packet early; late only adds more).
    let p50 = |r: &serde_json::Value| f(&r["latency_ms"]["corrected"]["p50"]);
    assert!(
        p50(&wan) >= 100.0,
        "p50 {} ms through the path, {} ms direct",
        p50(&wan),
        p50(&direct)
    );
    // Against the direct run (two measured medians: not judged on a busy machine, which can
    // slow either run by more than a round trip).
    if !machine_busy() {
        assert!(
            p50(&wan) - p50(&direct) >= 80.0,
            "p50 {} ms through the path, {} ms direct",
            p50(&wan),
            p50(&direct)
        );
    }
    assert!(
        f(&wan["connect_ms"]["p50"]) >= 45.0,
        "{}",
        wan["connect_ms"]
    );
    assert_eq!(wan["completed"], 40, "{wan}");
    assert!(direct.get("wan").is_none());

    // The router's report of the path is in the result.
    let w = &wan["wan"];
    let server = w["server"].as_str().unwrap();
    assert!(server.starts_with("198.1"), "{server}");
    assert_eq!(wan["target"].as_str(), Some(url.as_str()));
    let path = &w["paths"][0];
    assert_eq!(path["name"], "path1");
    assert_eq!(path["completed"], 40);
    assert_eq!(f(&path["share"]), 1.0);
    assert!(path["router"]["up_params"]
        .as_str()
        .unwrap()
        .contains("delay 25ms"));
    for dir in ["up", "down"] {
        // At least SYN, ACK + request, FIN per connection each way.
        let packets = path["router"][dir]["packets_out"].as_u64().unwrap();
        assert!(packets >= 3 * 40, "{dir}: {packets}");
        assert_eq!(path["router"][dir]["drops"]["loss"], 0);
    }
    assert!(w["router"]["pacer"]["router_cpu_s"].is_number());
}

#[test]
fn two_client_groups_cross_their_own_paths_in_one_run() {
    if !can_run("two_client_groups_cross_their_own_paths_in_one_run") {
        return;
    }
    let _serial = serial();
    let (_node, url) = origin();
    let r = bench(
        &[
            &url,
            "--clients",
            "2",
            "--duration",
            "2s",
            "--wan",
            "rtt=10ms",
            "--wan-group",
            "name=near,clients=1",
            "--wan-group",
            "name=far,clients=1,rtt=100ms",
        ],
        "groups",
    );
    let paths = r["wan"]["paths"].as_array().unwrap();
    let names: Vec<&str> = paths.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["near", "far"]);
    let p50 = |i: usize| f(&paths[i]["latency_ms"]["corrected"]["p50"]);
    // Two round trips of 100 ms against two of 10 ms: each path's at least (the router never
    // delivers early); their difference is two measured medians, not judged on a busy machine.
    assert!(
        p50(0) >= 20.0 && p50(1) >= 200.0,
        "near {} ms, far {} ms",
        p50(0),
        p50(1)
    );
    if !machine_busy() {
        assert!(
            p50(1) - p50(0) >= 150.0,
            "near {} ms, far {} ms",
            p50(0),
            p50(1)
        );
    }
    assert_ne!(paths[0]["clients"], paths[1]["clients"]);
    let completed: u64 = paths.iter().map(|p| p["completed"].as_u64().unwrap()).sum();
    assert_eq!(r["completed"].as_u64().unwrap(), completed);
    for p in paths {
        assert_eq!(f(&p["share"]), 0.5);
        assert!(
            p["router"]["down"]["packets_out"].as_u64().unwrap() > 0,
            "{p}"
        );
    }
}

fn failure(args: &[&str]) -> String {
    let out: Output = capstan().arg("bench").args(args).output().unwrap();
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    err
}

#[test]
fn bad_wan_settings_are_one_line_errors_before_anything_is_set_up() {
    let u = "http://127.0.0.1:9/";
    for (args, needle) in [
        (vec!["--wan", "rtt=fast"], "--wan: bad duration 'fast'"),
        (vec!["--wan", "speed=1"], "unknown path setting 'speed'"),
        (
            vec!["--wan-group", "name=a", "--wan-group", "name=a"],
            "two paths are named 'a'",
        ),
        (
            vec!["--wan-group", "name=m,bandwidth=x"],
            "--wan-group \"name=m,bandwidth=x\": bad rate 'x'",
        ),
        (
            vec!["--wan-config", "/nonexistent/wan.toml"],
            "cannot read /nonexistent/wan.toml",
        ),
    ] {
        let err = failure(&[&[u, "--rate", "1"], args.as_slice()].concat());
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let err = failure(&["http://example.org/", "--rate", "1", "--wan", "rtt=1ms"]);
    assert!(err.contains("a target on this machine"), "{err}");
    let err = failure(&[
        u,
        "--clients",
        "1",
        "--wan-group",
        "name=a",
        "--wan-group",
        "name=b",
    ]);
    assert!(
        err.contains("leaves client group 'b' without a client"),
        "{err}"
    );
    let log = std::env::temp_dir().join(format!("capstan-bench-wan-{}.log", std::process::id()));
    std::fs::write(
        &log,
        "127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /file500.html HTTP/1.0\" 200 500\n",
    )
    .unwrap();
    let replay = ["--replay", log.to_str().unwrap()];
    let groups = ["--wan-group", "name=a", "--wan-group", "name=b"];
    let err = failure(&[&[u][..], &replay, &groups].concat());
    let _ = std::fs::remove_file(&log);
    assert!(err.contains("--replay runs through one WAN path"), "{err}");
}

#[test]
fn without_root_the_error_says_so() {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        let err = failure(&["http://127.0.0.1:9/", "--rate", "1", "--wan", "rtt=1ms"]);
        assert!(err.contains("--wan needs root"), "{err}");
        return;
    }
    // As root: drop to nobody for the run (the binary must be readable by it).
    let exe = std::env::temp_dir().join(format!("capstan-nonroot-{}", std::process::id()));
    std::fs::copy(env!("CARGO_BIN_EXE_capstan"), &exe).unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&exe)
        .args([
            "bench",
            "http://127.0.0.1:9/",
            "--rate",
            "1",
            "--wan",
            "rtt=1ms",
        ])
        .output();
    let _ = std::fs::remove_file(&exe);
    let Ok(out) = out else {
        eprintln!("skipped the non-root half: no setpriv");
        return;
    };
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("--wan needs root") && err.contains("sudo"),
        "{err}"
    );
}
