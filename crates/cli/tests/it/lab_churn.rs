//! The churn experiment as a user runs it: `capstan lab churn --quick` starts nodes and a
//! switch, changes the switch's `[[discovery]]` file under load (scale-out, scale-in, rolling
//! restart, registry outage) and writes a report in which every change reached the switch and no
//! request failed; `--registry etcd` does the same with an etcd the lab starts and nodes that
//! register themselves (skipped with a note without etcd); `--list` names it and flags it does
//! not take are one-line errors.

use crate::support;

use serde_json::Value;
use support::run;

/// Runs `capstan lab churn --quick` with `extra` flags and checks its report: both runs
/// complete without a failed request, every change happened and reached the switch.
fn churn_quick(extra: &[&str], tag: &str) -> Value {
    let out_dir =
        std::env::temp_dir().join(format!("capstan-labchurn-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let mut args = vec![
        "lab",
        "churn",
        "--quick",
        "--out",
        out_dir.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for step in [
        "scale-out",
        "scale-in",
        "rolling restart",
        "registry outage",
    ] {
        assert!(stderr.contains(step), "progress names {step}: {stderr}");
    }
    let results: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    let runs = results["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{results}");
    for r in runs {
        assert!(r["completed"].as_u64().unwrap() > 1000, "{r}");
        assert_eq!(r["failed"], 0, "{}: {r}", r["membership"]);
    }
    let changes = results["changes"].as_array().unwrap();
    let nodes_after: Vec<u64> = changes
        .iter()
        .map(|c| c["nodes_after"].as_u64().unwrap())
        .collect();
    assert_eq!(nodes_after, [5, 3, 3, 3], "{results}");
    for c in changes {
        assert_eq!(c["errors"], 0, "{c}");
    }
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 3, "three plots over time");
    assert!(html.contains("registry outage"), "the changes are named");
    let _ = std::fs::remove_dir_all(&out_dir);
    results
}

#[test]
fn churn_quick_changes_membership_under_load_without_failed_requests() {
    let results = churn_quick(&[], "file");
    assert_eq!(results["registry"], "file", "the default registry");
    assert_eq!(results["runs"][1]["membership"], "discovery (file)");
}

#[test]
fn churn_quick_with_etcd_nodes_register_themselves_without_failed_requests() {
    let etcd = std::env::var("CAPSTAN_ETCD").unwrap_or_else(|_| "etcd".into());
    let installed = std::process::Command::new(&etcd)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        eprintln!("note: `{etcd}` is not installed (Debian: etcd-server); etcd churn test skipped");
        return;
    }
    let results = churn_quick(&["--registry", "etcd"], "etcd");
    assert_eq!(results["registry"], "etcd", "{results}");
    assert_eq!(results["runs"][1]["membership"], "discovery (etcd)");
    let findings = results["findings"].to_string();
    assert!(findings.contains("etcd was down"), "{findings}");
}

#[test]
fn churn_is_listed_and_refuses_flags_it_does_not_take() {
    let list = String::from_utf8(run(&["lab", "--list"]).stdout).unwrap();
    assert!(list.contains("churn"), "{list}");
    let out = run(&["lab", "churn", "--contenders", "nginx"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("churn takes --quick, --registry and --out only"),
        "{err}"
    );
    let out = run(&["lab", "validate", "--registry", "etcd"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("--registry applies to the churn experiment, not to validate"),
        "{err}"
    );
    let out = run(&["lab", "churn", "--registry", "consul"]);
    assert!(!out.status.success(), "only file and etcd");
}
