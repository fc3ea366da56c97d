//! `capstan bench --target` as a process: connections spread over two `capstan origin` nodes on
//! 127.0.0.2 and 127.0.0.3 as a DNS round-robin client's would, and when one is killed mid-run
//! the run goes on at the other, with per-target counts in the JSON.

use crate::support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::{spawn, Proc};

/// Requests node `addr` has served, from its load report.
fn served(addr: SocketAddr) -> u64 {
    let r = support::try_http(addr, "GET", "/_capstan/load");
    r.ok()
        .and_then(|r| serde_json::from_str::<serde_json::Value>(&r.text()).ok())
        .and_then(|v| v["served"].as_u64())
        .unwrap_or(0)
}

#[test]
fn spreads_over_targets_and_survives_one_dying() {
    let port = support::free_port_on(&["127.0.0.2", "127.0.0.3"]);
    let a: SocketAddr = format!("127.0.0.2:{port}").parse().unwrap();
    let b: SocketAddr = format!("127.0.0.3:{port}").parse().unwrap();
    let _node_a = spawn(&["origin", "--listen", &a.to_string()], a);
    let mut node_b = spawn(&["origin", "--listen", &b.to_string()], b);
    let dir = std::env::temp_dir().join(format!("capstan-bench-targets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("r.json");
    let targets = format!("{a},{b}");
    // The URL's host is only the Host header here: connections go to the targets.
    let mut bench = Proc(
        support::capstan()
            .args([
                "bench",
                &format!("http://www.example.test:{port}/file500.html"),
                "--clients",
                "8",
                "--keepalive",
                "--duration",
                "8s",
                "--target",
                &targets,
                "--json",
                json.to_str().unwrap(),
                "-q",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    support::eventually("both nodes serve part of the load", || {
        served(a) >= 50 && served(b) >= 50
    });
    let _ = node_b.0.kill();
    let _ = node_b.0.wait();
    let after_kill = served(a);
    support::eventually("the surviving node carries the run", || {
        served(a) >= after_kill + 200
    });
    let status = bench
        .wait_exit(Duration::from_secs(30))
        .expect("bench ends");
    assert!(status.success(), "{}", bench.stderr_text());
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let t = r["targets"].as_array().expect("per-target counts");
    assert_eq!(t.len(), 2, "{r}");
    assert_eq!(t[0]["address"], a.to_string());
    assert_eq!(t[1]["address"], b.to_string());
    let n = |i: usize, k: &str| t[i][k].as_u64().unwrap();
    // Round robin: the first eight connections went four and four, so each target had its
    // own connections before the kill.
    assert!(n(1, "connects") >= 4, "{t:?}");
    assert!(n(0, "connects") >= 4, "{t:?}");
    assert!(
        n(1, "requests") > 0 && n(0, "requests") > n(1, "requests"),
        "{t:?}"
    );
    // After the kill, new connections meant for B were refused and went to A.
    assert!(n(1, "refused") >= 1, "{t:?}");
    assert!(n(0, "reconnects") >= 1, "{t:?}");
    // Only requests in flight (or on an idle connection) at B were lost: at most one per client.
    let errors = r["errors_total"].as_u64().unwrap();
    assert!(errors <= 8, "{errors} errors: {r}");
    assert_eq!(errors, n(0, "errors") + n(1, "errors"), "{t:?}");
    assert_eq!(
        r["completed"].as_u64().unwrap(),
        n(0, "requests") + n(1, "requests")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_target_is_one_line() {
    let started = Instant::now();
    for bad in ["127.0.0.2", "127.0.0.2:0", "127.0.0.2:http"] {
        let out = support::run(&[
            "bench",
            "http://127.0.0.1:9/",
            "--rate",
            "1",
            "--target",
            bad,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad} accepted");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains("bad target"), "{err}");
    }
    assert!(started.elapsed() < Duration::from_secs(30));
}
