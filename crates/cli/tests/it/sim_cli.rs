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
    for needle in ["sweb-skewed", "sweb-sizes", "home-node", "sigma"] {
        assert!(list.contains(needle), "list lacks {needle}");
    }
    let out = capstan(&["sim", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("sweb-skewed") && help.contains("capstan-sim-sweb/1"));
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

/// A 1,000-node cluster at 100 k requests/s, for a fifth of a simulated second: the summary
/// and the JSON files carry events and events/s, and the replications ran on every core.
#[test]
fn thousand_nodes_by_request_rate_reports_events() {
    let dir = scratch("scale");
    let out = capstan(&[
        "sim",
        "commerce",
        "--policies",
        "cap,lard",
        "--nodes",
        "1000",
        "--request-rate",
        "100k",
        "--duration",
        "200ms",
        "--replications",
        "2",
        "--quiet",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("M events/s per CPU-second") && err.contains("per simulated second"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("req/s"));
    let json = |f: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(dir.join(f)).unwrap()).unwrap()
    };
    let (report, info) = (json("results.json"), json("run-info.json"));
    assert_eq!(report["nodes"], 1000);
    let events = report["events"].as_u64().unwrap();
    assert!(events > 0);
    assert_eq!(info["events"].as_u64(), Some(events));
    assert!(info["events_per_cpu_s"].as_f64().unwrap() > 0.0);
    assert!(info["events_per_wall_s"].as_f64().unwrap() > 0.0);
    let policy_events: u64 = report["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["events"].as_u64().unwrap())
        .sum();
    assert_eq!(policy_events, events);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(info["threads"].as_u64(), Some(cores.min(4) as u64));
    let help = capstan(&["sim", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("--request-rate") && help.contains("default: all cores"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs a SWEB experiment with one replication and returns its JSON.
fn sweb_run(name: &str) -> serde_json::Value {
    let dir = std::env::temp_dir().join(format!("capstan-sim-{name}-{}", std::process::id()));
    let out = capstan(&[
        "sim",
        name,
        "--replications",
        "1",
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
        stdout.contains("Findings:") && stdout.contains("Paper:"),
        "{stdout}"
    );
    let json = std::fs::read(dir.join("results.json")).unwrap();
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("Paper vs Capstan"));
    let _ = std::fs::remove_dir_all(&dir);
    serde_json::from_slice(&json).unwrap()
}

fn mean_response(point: &serde_json::Value, name: &str) -> f64 {
    let policies = point["policies"].as_array().unwrap();
    let p = policies.iter().find(|p| p["name"] == name).unwrap();
    p["mean_s"]["value"].as_f64().unwrap()
}

#[test]
fn sweb_skewed_ranks_file_locality_last() {
    let v = sweb_run("sweb-skewed");
    assert_eq!(v["format"], "capstan-sim-sweb/1");
    let point = &v["points"][0];
    let names: Vec<&str> = point["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["sweb", "round-robin", "home-node"]);
    let locality = mean_response(point, "home-node");
    assert!(mean_response(point, "sweb") < locality);
    assert!(mean_response(point, "round-robin") < locality);
    assert!(!v["findings"].as_array().unwrap().is_empty());
}

#[test]
fn sweb_sizes_sweeps_rates_and_measures_the_sustained_maximum() {
    let v = sweb_run("sweb-sizes");
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 6, "5 to 30 rps");
    for point in points {
        assert_eq!(point["policies"].as_array().unwrap().len(), 3);
        assert!(mean_response(point, "sweb") > 0.0);
    }
    let capacity = &v["capacity"];
    assert!(capacity["paper_example_rps"].as_f64().unwrap() > 18.0);
    for p in capacity["policies"].as_array().unwrap() {
        let rps = p["max_sustained_rps"]["value"].as_f64().unwrap();
        assert!((10.0..=26.0).contains(&rps), "{p}");
    }
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
        &["sim", "commerce", "--request-rate", "lots"],
        &["sim", "commerce", "--request-rate", "0k"],
        &["sim", "commerce", "--request-rate", "100k", "--rate", "5"],
        &["sim", "sweb-skewed", "--tgat-sweep", "1"],
        &["sim", "sweb-sizes", "--policies", "sweb:gather=0"],
        &["sim", "sweb-sizes", "--policies", "sweb:sigma=-2"],
        &["sim", "sweb-skewed", "--rate", "0"],
    ] {
        let out = capstan(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("capstan: "), "{err}");
    }
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-simcache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn cache_help_documents_formats_and_flags() {
    let out = capstan(&["sim", "cache", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--trace",
        "--zipf",
        "--objects",
        "--requests",
        "--seed",
        "--object-sizes",
        "--recurrence",
        "--policies",
        "--cache-sizes",
        "--json",
        "--report",
        "--jobs",
        "--quiet",
        "Common Log Format",
        "polygraph",
        "Belady",
        "working_set_bytes",
        // The long description, with the trace formats, not only the flags' lines.
        "TRACE FORMATS",
        "Combined Log Format",
        "\"GET /a.gif HTTP/1.0\" 200 2326",
        "const:N",
    ] {
        assert!(help.contains(needle), "sim cache --help lacks {needle}");
    }
    let out = capstan(&["sim", "--help"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("cache"));
}

#[test]
fn cache_zipf_run_writes_json_and_a_report() {
    let dir = scratch("zipf");
    let json = dir.join("r.json");
    let out = capstan(&[
        "sim",
        "cache",
        "--zipf",
        "0.8",
        "--objects",
        "3000",
        "--requests",
        "60000",
        "--object-sizes",
        "unit",
        "--cache-sizes",
        "1,5,20",
        "--json",
        json.to_str().unwrap(),
        "--report",
        dir.join("rep").to_str().unwrap(),
        "-q",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("DHR") && stdout.contains("BHR") && stdout.contains("s3-fifo"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["trace"]["requests"], 60000);
    let policies = v["policies"].as_array().unwrap();
    assert_eq!(policies.len(), 7, "belady and the six policies");
    assert_eq!(policies[0]["policy"], "belady");
    for (i, size) in v["cache_sizes"].as_array().unwrap().iter().enumerate() {
        assert!(size["bytes"].as_u64().unwrap() >= 1);
        let belady = policies[0]["points"][i]["dhr"].as_f64().unwrap();
        for p in policies {
            let pt = &p["points"][i];
            for key in ["dhr", "bhr"] {
                let r = pt[key].as_f64().unwrap();
                assert!((0.0..=1.0).contains(&r), "{} {key} {r}", p["policy"]);
            }
            let dhr = pt["dhr"].as_f64().unwrap();
            assert!(dhr <= belady, "{} beats belady at unit sizes", p["policy"]);
        }
    }
    let html = std::fs::read_to_string(dir.join("rep/report.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 2, "DHR and BHR plots");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cache_clf_trace_counts_bad_lines() {
    let dir = scratch("clf");
    let log = dir.join("access.log");
    let good = |i: usize, path: &str, bytes: u64| {
        format!(
            "10.0.0.{i} - - [10/Oct/2000:13:55:{:02} -0700] \"GET {path} HTTP/1.0\" 200 {bytes}\n",
            i % 60
        )
    };
    let mut text = String::new();
    for i in 0..200 {
        text += &good(i, &format!("/obj{}", i % 7), 1000 + (i % 7) as u64);
        if i % 50 == 0 {
            text += "garbage that is not a log line\n";
        }
    }
    std::fs::write(&log, text).unwrap();
    let json = dir.join("clf.json");
    let out = capstan(&[
        "sim",
        "cache",
        "--trace",
        log.to_str().unwrap(),
        "--policies",
        "lru,sieve,belady",
        "--json",
        json.to_str().unwrap(),
        "--report",
        dir.join("clf.html").to_str().unwrap(),
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("4 of 204 lines"));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let t = &v["trace"];
    assert_eq!(
        (t["requests"].as_u64(), t["bad_lines"].as_u64()),
        (Some(200), Some(4))
    );
    assert_eq!(t["objects"], 7);
    assert!(dir.join("clf.html").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn cache_bad_input_is_one_line() {
    let dir = scratch("bad");
    let empty = dir.join("empty.log");
    std::fs::write(&empty, "").unwrap();
    let (empty, missing) = (empty.to_str().unwrap(), dir.join("none.log"));
    let missing = missing.to_str().unwrap();
    for args in [
        &["sim", "cache"][..],
        &["sim", "cache", "--trace", missing],
        &["sim", "cache", "--trace", empty],
        &["sim", "cache", "--trace", empty, "--zipf", "1"],
        &["sim", "cache", "--zipf", "1", "--policies", "fifo"],
        &["sim", "cache", "--zipf", "1", "--cache-sizes", "0,10"],
        &["sim", "cache", "--zipf", "1", "--cache-sizes", "ten"],
        &["sim", "cache", "--zipf", "1", "--object-sizes", "huge"],
        &["sim", "cache", "--zipf", "-1"],
        &["sim", "cache", "--zipf", "1", "--objects", "0"],
        &["sim", "cache", "--zipf", "1", "--recurrence", "2"],
        &["sim", "cache", "--zipf", "1", "--jobs", "0"],
    ] {
        let out = capstan(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("capstan: "), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
