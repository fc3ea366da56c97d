//! `capstan lab sclient-overload --quick` and `capstan lab sclient-bursty --quick` (Banga &
//! Druschel Figs. 6–8) as processes: a real process-per-connection node, the switch and the
//! S-Client generator; the reports' numbers must agree with each other and carry the paper's
//! beside ours.

use serde_json::Value;

use crate::support::lab_run;
use lab_run::{capstan, run_lab};

/// The S-Clients' connect timeout T the lab uses (the paper's 500 ms).
const T_S: f64 = 0.5;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

/// The runs of the one series: every level once, offered rate = level × capacity (for
/// S-Clients within one socket's 1/T of it: D is a whole number), responses inside the window
/// no more than all responses.
fn check_runs(r: &Value, slack_rps: f64) -> &Vec<Value> {
    let capacity = f(&r["capacity_rps"]);
    assert!(capacity > 0.0, "{r}");
    let series = r["series"].as_array().unwrap();
    assert_eq!(series.len(), 1);
    let runs = series[0]["runs"].as_array().unwrap();
    assert_eq!(runs.len(), r["levels"].as_array().unwrap().len());
    for run in runs {
        let level = f(&run["level"]);
        let offered = f(&run["offered_rps"]);
        assert!(
            (offered - level * capacity).abs() <= slack_rps + 0.01 * offered + 0.01,
            "{offered}/s offered at {level} × {capacity}/s"
        );
        let in_window = f(&run["throughput_rps"]) * f(&run["duration_s"]);
        assert!(in_window <= f(&run["completed"]) + 1.0, "{run}");
    }
    runs
}

fn findings(r: &Value) -> Vec<&str> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect()
}

#[test]
fn sclient_overload_quick() {
    let (r, html, stdout) = run_lab("sclient-overload", &["sclient-overload", "--quick"]);
    assert_eq!(r["engine"], "sclient");
    let capacity = f(&r["capacity_rps"]);
    let runs = check_runs(&r, 1.0 / T_S);
    for run in runs {
        let attempts = u(&run["connect_attempts"]);
        let abandoned = u(&run["connect_timeouts"]);
        let completed = u(&run["completed"]);
        let sockets = (f(&run["offered_rps"]) * T_S).round();
        let window = f(&run["duration_s"]);
        // Every response came over an attempt that was not abandoned.
        assert!(attempts >= abandoned + completed, "{run}");
        // Each socket tried at least once and at most once per T: bounds, not timing claims.
        assert!(
            attempts as f64 >= sockets,
            "{attempts} attempts, D = {sockets}"
        );
        assert!(
            attempts as f64 <= sockets * (window / T_S + 1.0),
            "{attempts} attempts, D = {sockets}, {window} s"
        );
    }
    // The point of S-Clients: the offered rate went far past what the closed-loop clients of
    // the capacity measurement could offer (their completion rate).
    let top = runs
        .iter()
        .map(|q| u(&q["connect_attempts"]) as f64 / f(&q["duration_s"]))
        .fold(0.0, f64::max);
    assert!(
        top > 4.0 * capacity,
        "{top} attempts/s vs capacity {capacity}/s"
    );
    // Something answered at the highest level: the node, or the switch for it (past capacity
    // it answers 503/502 itself once the node takes no more connections).
    let last = runs.last().unwrap();
    assert!(u(&last["completed"]) > 0, "{last}");
    // Throughput in the findings is successful responses only: those the status counts say.
    for run in runs {
        let status = run["status"].as_object().unwrap();
        let good: u64 = status
            .iter()
            .filter(|(k, _)| k.starts_with('2') || k.starts_with('3'))
            .map(|(_, v)| v.as_u64().unwrap())
            .sum();
        let all: u64 = status.values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(all, u(&run["completed"]), "{run}");
        assert!(good <= all, "{run}");
    }
    let found = findings(&r);
    assert!(found.iter().any(|f| f.starts_with("Fig. 6")), "{found:?}");
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("Closed loop vs S-Clients")),
        "{found:?}"
    );
    assert!(found.iter().any(|f| f.contains("75/s")), "{found:?}");
    assert!(
        found
            .iter()
            .any(|f| f.starts_with("Fig. 7") && f.contains("successful responses")),
        "{found:?}"
    );
    assert!(html.contains("S-Clients per level") && html.contains("2065"));
    assert!(stdout.contains("Fig. 7"), "{stdout}");
}

#[test]
fn sclient_bursty_quick() {
    let (r, html, _) = run_lab("sclient-bursty", &["sclient-bursty", "--quick"]);
    assert_eq!(r["engine"], "open");
    check_runs(&r, 0.0);
    let found = findings(&r);
    assert!(
        found.iter().any(|f| f.starts_with("Fig. 8 (6, 5)")),
        "{found:?}"
    );
    assert!(html.contains("12–20 %"), "the paper's numbers beside ours");
    // Not an S-Client run: no S-Client table.
    assert!(!html.contains("S-Clients per level"));
}

#[test]
fn bursts_with_the_sclient_engine_are_a_one_line_error() {
    let dir = lab_run::temp_dir("sclient-bad");
    let bad = dir.join("bad.toml");
    let base = capstan_lab::BUILTIN
        .iter()
        .find(|(n, _)| *n == "sclient-overload")
        .unwrap()
        .1;
    std::fs::write(
        &bad,
        base.replace(
            "drain = \"2s\"",
            "drain = \"2s\"\nburst = { peak = 6.0, fraction = 0.05, period_s = 10.0 }",
        ),
    )
    .unwrap();
    let out = capstan(&["lab", bad.to_str().unwrap(), "--quick"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("load.burst"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}
