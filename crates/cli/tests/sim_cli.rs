//! `capstan sim` as a process: help, list, a small run with its files, one-line errors.

use std::process::Command;

fn capstan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .output()
        .expect("run capstan")
}

#[test]
fn help_and_list() {
    let out = capstan(&["sim", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--policies",
        "--tgat-sweep",
        "--replications",
        "Examples:",
        "--list",
    ] {
        assert!(help.contains(needle), "help lacks {needle}");
    }
    let out = capstan(&["sim", "--list"]);
    assert!(out.status.success());
    let list = String::from_utf8_lossy(&out.stdout);
    for s in capstan_sim_names() {
        assert!(list.contains(s), "list lacks {s}");
    }
    assert!(list.contains("weighted-round-robin") && list.contains("cap-load"));
}

fn capstan_sim_names() -> [&'static str; 6] {
    [
        "publishing-static",
        "publishing-dynamic",
        "transaction",
        "commerce-secure",
        "commerce-mixed",
        "commerce",
    ]
}

#[test]
fn small_run_writes_reproducible_json_and_a_report() {
    let dir = std::env::temp_dir().join(format!("capstan-sim-cli-{}", std::process::id()));
    let run = |sub: &str| {
        let out_dir = dir.join(sub);
        let out = capstan(&[
            "sim",
            "transaction",
            "--policies",
            "cap,lard:t_low=5,t_high=20,weighted-round-robin:metric=service-time",
            "--nodes",
            "4",
            "--rate",
            "30",
            "--duration",
            "20s",
            "--replications",
            "2",
            "--quiet",
            "--out",
            out_dir.to_str().unwrap(),
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("lard:t_low=5,t_high=20"));
        out_dir
    };
    let a = run("a");
    let b = run("b");
    let ja = std::fs::read(a.join("results.json")).unwrap();
    assert_eq!(ja, std::fs::read(b.join("results.json")).unwrap());
    let v: serde_json::Value = serde_json::from_slice(&ja).unwrap();
    let p = &v["policies"][0];
    assert!(p["p90"]["value"].as_f64().unwrap() > 0.0);
    assert!(p["p50"].is_object() && p["p99"].is_object() && p["cdf"].is_array());
    let info: serde_json::Value =
        serde_json::from_slice(&std::fs::read(a.join("run-info.json")).unwrap()).unwrap();
    assert!(info["wall_s"].as_f64().is_some());
    let html = std::fs::read_to_string(a.join("report.html")).unwrap();
    assert!(html.contains("<svg"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_input_is_one_line() {
    for args in [
        &["sim", "nowhere"][..],
        &["sim", "commerce", "--policies", "bogus"],
        &["sim", "commerce", "--duration", "ten"],
        &["sim", "commerce", "--nodes", "0"],
        &["sim", "commerce", "--policies", "lard:t_low=90,t_high=10"],
        &["sim", "commerce", "--rate", "-3"],
    ] {
        let out = capstan(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("capstan: "), "{err}");
    }
}
