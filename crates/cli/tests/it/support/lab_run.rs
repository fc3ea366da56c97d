//! `capstan lab` run as a process into a fresh directory, and the checks every lab report must
//! pass (shared by the lab test files).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

pub fn capstan(args: &[&str]) -> std::process::Output {
    let _slot = super::lab_slot(args);
    Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(args)
        .output()
        .expect("run capstan")
}

pub fn temp_dir(name: &str) -> PathBuf {
    // Numbered too: the lab test modules share one process, and two may pick one name.
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!(
        "capstan-lab-test-{}-{n}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs an experiment into a fresh directory and returns its results.json.
pub fn run_lab(name: &str, args: &[&str]) -> (Value, String, String) {
    let dir = temp_dir(name);
    let out_dir = dir.join("report");
    let mut all = vec!["lab"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--out", out_dir.to_str().unwrap()]);
    let out = capstan(&all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{all:?}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("report: "), "{stdout}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    let _ = std::fs::remove_dir_all(dir);
    (json, html, stdout)
}

/// The numbers of a report agree with each other.
pub fn check_consistent(r: &Value, engine_closed: bool) {
    assert_eq!(r["schema"], "capstan-lab/1");
    let series = r["series"].as_array().unwrap();
    assert!(!series.is_empty());
    let levels: Vec<f64> = r["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_f64().unwrap())
        .collect();
    let reps = r["repetitions"].as_u64().unwrap() as usize;
    for s in series {
        let label = s["label"].as_str().unwrap();
        let runs = s["runs"].as_array().unwrap();
        // Every level once per repetition, but where the headline's rounds measure the series
        // (`[load.headline]`): once per round there.
        let windows: usize = levels
            .iter()
            .map(|&l| headline_rounds(r, label, l).unwrap_or(reps))
            .sum();
        assert_eq!(runs.len(), windows, "{label}");
        assert_eq!(
            s["points"].as_array().unwrap().len(),
            levels.len(),
            "{label}"
        );
        for run in runs {
            let level = run["level"].as_f64().unwrap();
            let tp = run["throughput_rps"].as_f64().unwrap();
            let dur = run["duration_s"].as_f64().unwrap();
            let completed = run["completed"].as_f64().unwrap();
            assert!(tp > 0.0, "{label} @ {level}: no throughput");
            // Responses inside the window ≤ all responses; the rest finished during the drain,
            // at most one per closed-loop client.
            let in_window = tp * dur;
            let slack = 0.05 * completed + if engine_closed { level } else { 0.0 } + 2.0;
            assert!(
                (completed - in_window).abs() <= slack,
                "{label} @ {level}: {tp} conn/s × {dur} s = {in_window} vs {completed} completed"
            );
            let nodes = run["nodes"].as_array().unwrap();
            assert!(!nodes.is_empty());
            for n in nodes {
                for k in ["cpu_util", "disk_util", "nic_util", "util"] {
                    let u = n[k].as_f64().unwrap();
                    assert!((0.0..=1.0).contains(&u), "{label}: {k} = {u}");
                }
            }
            let (lo, hi) = (
                run["util_min"].as_f64().unwrap(),
                run["util_max"].as_f64().unwrap(),
            );
            assert!(0.0 <= lo && lo <= hi && hi <= 1.0, "{label}: {lo} {hi}");
            let placed: u64 = nodes
                .iter()
                .flat_map(|n| n["placed"].as_object().unwrap().values())
                .map(|v| v.as_u64().unwrap())
                .sum();
            // The switch placed every request the generator completed (plus the warm-up's
            // stragglers and errors).
            assert!(
                placed as f64 >= 0.9 * completed,
                "{label}: placed {placed} of {completed}"
            );
            let cdf = run["cdf"].as_array().unwrap();
            assert!(cdf.len() > 10);
            for w in cdf.windows(2) {
                assert!(
                    w[0][0].as_f64() <= w[1][0].as_f64() && w[0][1].as_f64() <= w[1][1].as_f64()
                );
            }
            for k in ["switch_pct", "generator_pct"] {
                let c = run["cpu"][k].as_f64().unwrap();
                assert!((0.0..=800.0).contains(&c), "{label}: cpu {k} = {c}");
            }
        }
        for p in s["points"].as_array().unwrap() {
            assert!(p["throughput_mean"].as_f64().unwrap() > 0.0);
        }
    }
    assert!(!r["findings"].as_array().unwrap().is_empty());
}

/// The headline's rounds when they measure series `label` at `level`.
pub fn headline_rounds(r: &Value, label: &str, level: f64) -> Option<usize> {
    let h = r.get("headline")?;
    let covered = h["levels"].as_array()?.iter().any(|l| {
        l["level"].as_f64() == Some(level)
            && l["series"]
                .as_array()
                .is_some_and(|s| s.iter().any(|x| x == label))
    });
    covered.then(|| h["rounds"].as_u64().unwrap() as usize)
}
