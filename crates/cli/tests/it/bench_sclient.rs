//! `capstan bench --sockets D` (S-Clients, Banga & Druschel §4.2) as a process against a real
//! `capstan origin` on loopback. Overloaded: one process serving a slow request with a listen
//! backlog of 1, so the accept queue stays full, the kernel ignores new SYNs and attempts are
//! abandoned after T while the sockets keep trying. Healthy: every attempt is established and
//! answered, and the sockets still make one attempt per T (no connection storm).

use crate::support;

use std::net::SocketAddr;
use std::path::PathBuf;

use serde_json::Value;
use support::{free_addr, run, spawn, Proc};

/// An origin with the main socket on a free port; ready once its report address answers.
fn origin(extra: &[&str]) -> (Proc, SocketAddr) {
    let (main, report) = (free_addr(), free_addr());
    let (main_s, report_s) = (main.to_string(), report.to_string());
    let mut args = vec![
        "origin",
        "--listen",
        &main_s,
        "--report-listen",
        &report_s,
        "--threads",
        "1",
    ];
    args.extend_from_slice(extra);
    (spawn(&args, report), main)
}

fn json_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "capstan-sclient-{}-{name}.json",
        std::process::id()
    ))
}

/// Runs the S-Client engine; returns its text output and its JSON result.
fn sclient(url: &str, sockets: &str, t: &str, duration: &str, name: &str) -> (String, Value) {
    let json = json_path(name);
    let out = run(&[
        "bench",
        url,
        "--sockets",
        sockets,
        "--connect-timeout",
        t,
        "--duration",
        duration,
        "--drain",
        "5s",
        // A full backlog abandons attempts by design: the run is judged by its counts here.
        "--max-error-rate",
        "1",
        "--json",
        json.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(json);
    (stdout, r)
}

fn n(r: &Value, key: &str) -> u64 {
    r[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} missing in {r}"))
}

/// The counts of one result agree with each other: every attempt is offered; an attempt is
/// started (established, or failed at connect) or dropped (abandoned, or under way at the end);
/// a started one is completed, an error or unfinished.
fn check_sums(r: &Value, sockets: u64, t_s: f64, duration_s: f64) {
    assert_eq!(r["engine"], "sclient");
    let attempts = n(r, "connect_attempts");
    assert_eq!(n(r, "offered"), attempts, "{r}");
    assert_eq!(n(r, "started") + n(r, "dropped"), attempts, "{r}");
    assert!(n(r, "connect_timeouts") <= n(r, "dropped"), "{r}");
    assert!(
        n(r, "connections_opened") + n(r, "connect_timeouts") <= attempts,
        "{r}"
    );
    assert!(n(r, "connections_opened") <= n(r, "started"), "{r}");
    assert!(
        n(r, "completed") + n(r, "errors_total") + n(r, "unfinished") >= n(r, "started"),
        "{r}"
    );
    assert!(n(r, "completed") <= n(r, "connections_opened"), "{r}");
    let offered_rps = r["offered_rps"].as_f64().unwrap();
    assert!((offered_rps - sockets as f64 / t_s).abs() < 1e-6, "{r}");
    // Each socket starts at most one attempt per T (its first within the first T), whatever
    // the server does: a bound, not a timing claim.
    let most = sockets as f64 * (duration_s / t_s + 1.0);
    assert!(attempts as f64 <= most, "{attempts} attempts > {most}");
    assert!(
        attempts >= sockets,
        "{attempts} attempts from {sockets} sockets"
    );
}

#[test]
fn a_full_backlog_makes_attempts_abandoned_while_the_sockets_keep_trying() {
    // One process, busy for 3 s with the first request; the backlog of 1 holds a connection or
    // two more, then SYNs are ignored until it frees.
    let (_node, addr) = origin(&["--process-limit", "1", "--backlog", "1"]);
    let url = format!("http://{addr}/cgi-bin/demand.cgi?ms=3000");
    let (stdout, r) = sclient(&url, "20", "100ms", "1500ms", "full");
    check_sums(&r, 20, 0.1, 1.5);
    let (attempts, abandoned) = (n(&r, "connect_attempts"), n(&r, "connect_timeouts"));
    assert!(abandoned > 0, "no attempt abandoned: {r}");
    // Only the connections the process and the backlog hold were established.
    assert!(n(&r, "connections_opened") <= 4, "{r}");
    assert!(attempts > n(&r, "connections_opened") + 20, "{r}");
    assert!(stdout.contains("sclient engine"), "{stdout}");
    assert!(
        stdout.contains(&format!("connect timeouts abandoned {abandoned}")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("S-Client connect attempts {attempts} (",))
            && stdout.contains(&format!("abandoned {abandoned}")),
        "{stdout}"
    );
}

#[test]
fn a_healthy_origin_answers_every_attempt_at_one_per_t() {
    let (_node, addr) = origin(&[]);
    let url = format!("http://{addr}/file500.html");
    let (stdout, r) = sclient(&url, "4", "200ms", "1s", "healthy");
    check_sums(&r, 4, 0.2, 1.0);
    assert!(n(&r, "completed") > 0, "{r}");
    assert_eq!(n(&r, "errors_total"), 0, "{r}");
    assert!(r["status"]["2xx"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(n(&r, "unfinished"), 0, "{r}");
    assert!(stdout.contains("responses "), "{stdout}");
}

#[test]
fn bad_sclient_settings_are_one_line_errors() {
    for (args, needle) in [
        (vec!["--sockets", "0"], "sockets"),
        (vec!["--sockets", "many"], "--sockets"),
        (vec!["--sockets=-3"], "--sockets"),
        (vec!["--sockets", "10", "--rate", "5"], "cannot be used"),
        (vec!["--sockets", "10", "--clients", "5"], "cannot be used"),
        (
            vec!["--sockets", "10", "--connect-timeout", "0s"],
            "timeout",
        ),
        (
            vec!["--sockets", "10", "--connect-timeout", "soon"],
            "connect-timeout",
        ),
    ] {
        let out = run(&[&["bench", "http://127.0.0.1:9/"], args.as_slice()].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let out = run(&["bench", "https://127.0.0.1:9/", "--sockets", "5"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("http:// URLs only"), "{err}");
}
