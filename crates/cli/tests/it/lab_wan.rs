//! The WAN experiments as a user runs them: `capstan lab --list` shows them, a bad file or flag
//! is one line, and a small RTT sweep behind the real delay router (network namespaces, TUN
//! devices; root) writes a consistent report: every contender at every level, the RTT in the
//! response times, the process node's processes and the connections sampled while the load ran.
//! Without root, iproute2, /dev/net/tun or namespace rights the run test says why and returns
//! (CI runs as root).

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use support::{machine_busy, run};

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

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("capstan-labwan-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn one_line_error(args: &[&str], says: &str) {
    let out = run(args);
    assert!(!out.status.success(), "{args:?} should fail");
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    assert!(err.contains(says), "{args:?}: {err}");
}

#[test]
fn list_help_and_bad_files() {
    let list = String::from_utf8(run(&["lab", "--list"]).stdout).unwrap();
    for needle in [
        "wan-delay",
        "wan-loss",
        "wan-mix",
        "wan-loss-h3",
        "Figs. 9 and 10",
    ] {
        assert!(list.contains(needle), "{list}");
    }
    assert!(!list.contains("broken"), "{list}");
    let help = String::from_utf8(run(&["lab", "--help"]).stdout).unwrap();
    assert!(help.contains("wan-delay --quick"), "{help}");
    let dir = temp_dir("bad");
    let text = include_str!("../../../../experiments/wan-delay.toml");
    let cases = [
        (
            text.replace("\"nginx\"]", "\"squid\"]"),
            "unknown contender",
        ),
        (text.replace("\"150ms\"", "\"later\""), "level"),
        (text.replace("warmup_s = 10", "warmup_s = -1"), "warmup_s"),
        (
            text.replace("vary = \"rtt\"", "vary = \"jitter\""),
            "unknown variant",
        ),
    ];
    for (i, (body, says)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.toml"));
        std::fs::write(&path, body).unwrap();
        one_line_error(&["lab", path.to_str().unwrap()], says);
    }
    one_line_error(&["lab", "wan-delay", "--full"], "--full");
    one_line_error(
        &["lab", "wan-delay", "--contenders", "origin-events,squid"],
        "unknown contender",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A small sweep: two RTTs, the three contenders Capstan brings itself.
const SWEEP: &str = r#"
name = "wan-test"
kind = "wan"
title = "test sweep"
figure = "Banga & Druschel Fig. 9, in miniature"
contenders = ["origin-processes", "origin-events", "switch"]
vary = "rtt"
levels = ["0ms", "100ms"]
path = "bandwidth=100mbit"
rate = 100
duration_s = 3
warmup_s = 1
timeout_s = 10

[quick]
duration_s = 3

[workload]
tree = "cap"
files = 200

[server]
process_limit = 16
process_memory = "30KB"
cache_fraction = 1.2
"#;

#[test]
fn an_rtt_sweep_writes_a_consistent_report() {
    if let Some(why) = missing() {
        eprintln!("skipped an_rtt_sweep_writes_a_consistent_report: {why}");
        return;
    }
    let dir = temp_dir("sweep");
    let file = dir.join("sweep.toml");
    std::fs::write(&file, SWEEP).unwrap();
    let out_dir = dir.join("report");
    let out = run(&[
        "lab",
        file.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("report:"), "{stdout}");
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("throughput (Fig. 9)"));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    let contenders = r["contenders"].as_array().unwrap();
    assert_eq!(contenders.len(), 3, "{r}");
    let busy = machine_busy();
    for c in contenders {
        let name = c["name"].as_str().unwrap();
        assert!(c["skipped"].is_null(), "{name}: {}", c["skipped"]);
        let levels = c["levels"].as_array().unwrap();
        assert_eq!(levels.len(), 2, "{name}");
        for l in levels {
            let level = l["level"].as_str().unwrap();
            let at = format!("{name} at {level}");
            assert!(l["throughput_rps"].as_f64().unwrap() > 0.0, "{at}: {l}");
            assert!(
                l["spec"]
                    .as_str()
                    .unwrap()
                    .contains(&format!("rtt={level}")),
                "{at}"
            );
            assert!(!l["samples"].as_array().unwrap().is_empty(), "{at}");
        }
        // Every response crosses the path twice at least: the RTT is in the response time
        // (the router never delivers early).
        let p50 = |i: usize| levels[i]["p50_ms"].as_f64().unwrap();
        assert!(p50(1) >= 100.0, "{name}: {}", p50(1));
        // Without delay the median stays under that RTT: an upper bound on this machine's
        // clock, so not judged when the machine is busy.
        if !busy {
            assert!(p50(0) < 100.0, "{name}: {}", p50(0));
        }
        let processes = levels[0]["processes_mean"].clone();
        assert_eq!(
            processes.is_null(),
            name == "origin-events",
            "{name}: processes are reported by a process-per-connection node only"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// wan-loss-h3 in miniature: the three protocol contenders at 0 and 5 % loss.
const PROTOCOLS: &str = r#"
name = "wan-loss-h3-test"
kind = "wan"
title = "test protocols"
figure = "Banga & Druschel §5.6 over QUIC, in miniature"
contenders = ["switch-h1", "switch-h2", "switch-h3"]
vary = "loss"
levels = ["0%", "5%"]
path = "rtt=100ms,bandwidth=100mbit"
rate = 20
duration_s = 1
warmup_s = 1
timeout_s = 10

[quick]
duration_s = 1

[client]
connections = 8
streams = 4

[workload]
tree = "cap"
files = 100

[[paper]]
server = "Apache"
contender = "switch-h1"
level = "5%"
throughput_change_pct = -36.0
source = "§5.6"
"#;

#[test]
fn the_protocol_contenders_run_over_tls_and_quic_or_say_why_not() {
    if let Some(why) = missing() {
        eprintln!("skipped the_protocol_contenders_run_over_tls_and_quic_or_say_why_not: {why}");
        return;
    }
    let dir = temp_dir("protocols");
    let file = dir.join("protocols.toml");
    std::fs::write(&file, PROTOCOLS).unwrap();
    let out_dir = dir.join("report");
    let out = run(&[
        "lab",
        file.to_str().unwrap(),
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert!(html.contains("goodput") && html.contains("<svg"));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    let by_name = |n: &str| {
        r["contenders"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == n)
            .unwrap_or_else(|| panic!("{n} in {r}"))
            .clone()
    };
    for (name, protocol) in [
        ("switch-h1", "http/1.1"),
        ("switch-h2", "h2"),
        ("switch-h3", "h3"),
    ] {
        let c = by_name(name);
        if name == "switch-h3" && !c["skipped"].is_null() {
            // A build whose switch has no QUIC listener says so instead of numbers.
            let why = c["skipped"].as_str().unwrap();
            assert!(why.contains("not available in this build"), "{why}");
            assert!(c["levels"].as_array().unwrap().is_empty());
            continue;
        }
        assert!(c["skipped"].is_null(), "{name}: {}", c["skipped"]);
        let levels = c["levels"].as_array().unwrap();
        assert_eq!(levels.len(), 2, "{name}");
        for l in levels {
            let at = format!("{name} at {}", l["level"]);
            assert_eq!(l["protocol"], protocol, "{at}");
            assert!(l["goodput_mbps"].as_f64().unwrap() > 0.0, "{at}: {l}");
            // A keep-alive request crosses the 100 ms path at least once each way.
            assert!(l["p50_ms"].as_f64().unwrap() >= 100.0, "{at}: {l}");
            assert!(l["max_ms"].as_f64().unwrap() >= l["p50_ms"].as_f64().unwrap());
        }
    }
    let findings = r["findings"].as_array().unwrap();
    let text: Vec<&str> = findings.iter().filter_map(|f| f.as_str()).collect();
    assert!(
        text.iter().any(|f| f.starts_with("At 5% loss: http/1.1")),
        "{text:?}"
    );
    assert!(
        text.iter().any(|f| f.contains("paper, Apache at 5%")),
        "{text:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
