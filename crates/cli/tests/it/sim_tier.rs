//! `capstan sim tier` as a process: the quick grid's JSON has every K and load, the same seed
//! gives the same bytes, Join-Idle-Queue on the shared view beats random at high load, and bad
//! arguments get one-line errors.

use std::path::PathBuf;
use std::process::Command;

fn capstan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .output()
        .expect("run capstan")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-sim-tier-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn quick(dir: &std::path::Path) -> serde_json::Value {
    let out = capstan(&[
        "sim",
        "tier",
        "--quick",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("K=64") && stdout.contains("join-idle-queue"),
        "{stdout}"
    );
    serde_json::from_slice(&std::fs::read(dir.join("tier.json")).unwrap()).unwrap()
}

fn mean(v: &serde_json::Value, policy: &str, k: u64, load: f64) -> f64 {
    let series = v["series"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["policy"] == policy)
        .unwrap_or_else(|| panic!("no series {policy}"));
    mean_of(series, k, load)
}

fn mean_of(series: &serde_json::Value, k: u64, load: f64) -> f64 {
    let point = series["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["dispatchers"] == k && p["load"].as_f64() == Some(load))
        .unwrap_or_else(|| panic!("{}: no point K = {k}, load {load}", series["policy"]));
    point["mean"]["value"].as_f64().unwrap()
}

#[test]
fn quick_grid_has_every_k_and_jiq_on_the_shared_view_beats_random_at_high_load() {
    let a = scratch("a");
    let v = quick(&a);
    assert_eq!(v["format"], "capstan-sim-tier/1");
    let ks: Vec<u64> = v["dispatchers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_u64().unwrap())
        .collect();
    assert_eq!(ks, vec![1, 8, 64]);
    let series = v["series"].as_array().unwrap();
    for s in series {
        let points: Vec<u64> = s["points"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["dispatchers"].as_u64().unwrap())
            .collect();
        for k in &ks {
            assert!(points.contains(k), "{}: no K = {k}", s["policy"]);
        }
    }
    // Every Join-Idle-Queue series on the shared view (one per gossip period) beats random.
    let shared_jiq: Vec<&serde_json::Value> = series
        .iter()
        .filter(|s| s["policy"] == "join-idle-queue")
        .collect();
    assert_eq!(shared_jiq.len(), 2, "one per default gossip period");
    for s in shared_jiq {
        assert_eq!(s["view"], "shared");
        for k in &ks {
            let j = mean_of(s, *k, 0.9);
            let r = mean(&v, "random", *k, 0.9);
            assert!(
                j < r,
                "K = {k}, gossip {} ms: join-idle-queue {j} ms, random {r} ms",
                s["gossip_ms"]
            );
        }
    }
    // Same seed, same bytes; the report has its plots.
    let b = scratch("b");
    quick(&b);
    assert_eq!(
        std::fs::read(a.join("tier.json")).unwrap(),
        std::fs::read(b.join("tier.json")).unwrap()
    );
    let html = std::fs::read_to_string(a.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("Findings"));
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&b);
}

#[test]
fn bad_arguments_get_one_line_errors() {
    for (args, needle) in [
        (vec!["--loads", "1.2"], "--loads"),
        (vec!["--dispatchers", "0"], "--dispatchers"),
        (vec!["--gossip-period", "soon"], "--gossip-period"),
        (vec!["--policies", "fastest"], "unknown policy"),
        (
            vec!["--policies", "join-idle-queue:dispatchers=4"],
            "dispatchers and dispatcher",
        ),
    ] {
        let mut all = vec!["sim", "tier", "--quick", "--quiet"];
        all.extend(args.iter());
        let out = capstan(&all);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(err.trim().lines().count() <= 2, "{args:?}: {err}");
    }
    let out = capstan(&["sim", "tier", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--gossip-period",
        "--quick",
        "capstan-sim-tier/1",
        "join-idle-queue",
    ] {
        assert!(help.contains(needle), "help lacks {needle}");
    }
}
