//! The churn experiment as a user runs it: `capstan lab churn --quick` starts nodes and a
//! switch, changes the switch's `[[discovery]]` file under load (scale-out, scale-in, rolling
//! restart, registry outage) and writes a report in which every change reached the switch and no
//! request failed; `--list` names it and flags it does not take are one-line errors.

mod support;

use serde_json::Value;
use support::run;

#[test]
fn churn_quick_changes_membership_under_load_without_failed_requests() {
    let out_dir = std::env::temp_dir().join(format!("capstan-labchurn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let out = run(&[
        "lab",
        "churn",
        "--quick",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
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
}

#[test]
fn churn_is_listed_and_refuses_flags_it_does_not_take() {
    let list = String::from_utf8(run(&["lab", "--list"]).stdout).unwrap();
    assert!(list.contains("churn"), "{list}");
    let out = run(&["lab", "churn", "--contenders", "nginx"]);
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("churn takes --quick, --registry and --out only"), "{err}");
}
