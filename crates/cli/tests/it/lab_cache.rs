//! The cache experiments as a user runs them: `capstan lab --list` shows them, a bad file is
//! one line, and `cache-mixed-inc --quick` against Capstan alone writes a consistent report
//! (hits + misses = responses; DHR within the offered hit ratio; BHR from the bytes; the
//! proxy's CPU, memory and disk I/O — its own and the block devices' — sampled every second;
//! the better-performer table; hit and miss CDFs that count every response and end at 1; the
//! response time against offered rate).

use std::path::PathBuf;
use std::time::Instant;

use serde_json::Value;

use crate::support::lab_run::capstan;

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("capstan-labcache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn list_help_and_bad_files() {
    let list = String::from_utf8(capstan(&["lab", "--list"]).stdout).unwrap();
    for needle in [
        "cache-mixed-inc",
        "cache-best-effort",
        "cache-image",
        "cache-html",
        "cache-download",
        "Tables 4.5–4.7",
    ] {
        assert!(list.contains(needle), "{list}");
    }
    assert!(!list.contains("broken"), "{list}");
    let help = String::from_utf8(capstan(&["lab", "--help"]).stdout).unwrap();
    assert!(
        help.contains("--contenders")
            && help.contains("--full")
            && help.contains("/proc/diskstats")
            && help.contains("saturation knee"),
        "{help}"
    );
    let dir = temp_dir("bad");
    let text = include_str!("../../../../experiments/cache-mixed-inc.toml");
    let cases = [
        (
            text.replace("\"varnish\", ", "\"squid\", "),
            "unknown contender",
        ),
        (text.replace("fill = \"2x\"", "fill = \"lots\""), "fill"),
        (text.replace("robots = 1600", "robots = 0"), "robots"),
    ];
    for (i, (body, says)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.toml"));
        std::fs::write(&path, body).unwrap();
        let out = capstan(&["lab", path.to_str().unwrap()]);
        assert!(!out.status.success());
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(says), "{err} should say {says}");
    }
    let out = capstan(&["lab", "cache-mixed-inc", "--contenders", "squid"]);
    assert!(!out.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn cache_mixed_inc_quick_against_capstan_is_consistent() {
    let dir = temp_dir("quick");
    let out_dir = dir.join("report");
    let started = Instant::now();
    let out = capstan(&[
        "lab",
        "cache-mixed-inc",
        "--quick",
        "--contenders",
        "capstan",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    eprintln!("cache-mixed-inc --quick took {:?}", started.elapsed());
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert!(html.contains("Table"));
    // The thesis's Table 4.4/4.7 layout and the surrogate plots are in the report.
    assert!(
        html.contains("Better performer per scenario and metric")
            && html.contains("<table class=verdicts>"),
        "{html}"
    );
    assert!(html.contains("proxy CPU over time") && html.contains("<svg"));
    let c = &r["contenders"][0];
    assert_eq!(c["name"], "capstan");
    assert!(c["skipped"].is_null(), "{c}");
    let res = &c["result"];
    assert_eq!(res["completed"], true);
    let phases = res["phases"].as_array().unwrap();
    let names: Vec<&str> = phases.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["warm", "fill", "link", "top1", "inc", "top2", "cool"]
    );
    let u = |p: &Value, k: &str| p[k].as_u64().unwrap();
    let f = |p: &Value, k: &str| p[k].as_f64().unwrap();
    for p in phases {
        let errors: u64 = p["errors"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(u(p, "hits") + u(p, "misses"), u(p, "responses"), "{p}");
        // Every request issued ends as a response or an error (the drain lets the last finish).
        assert_eq!(u(p, "responses") + errors, u(p, "requests"), "{p}");
        let bytes = u(p, "hit_bytes") + u(p, "miss_bytes");
        if bytes > 0 {
            assert!(
                close(f(p, "bhr"), u(p, "hit_bytes") as f64 / bytes as f64, 1e-9),
                "{p}"
            );
        }
        if u(p, "responses") > 200 {
            // A hit must have been offered: an infinite cache hits at least as often.
            assert!(f(p, "dhr") <= f(p, "offered_dhr") + 0.03, "{p}");
        }
    }
    let fill = &phases[1];
    assert!(u(fill, "fill_bytes") >= 2 * 4 * 1024 * 1024, "{fill}");
    let top1 = &phases[3];
    // Capstan's cache answers most of what it is offered once filled; 20 % of 1,600 req/s.
    assert!(f(top1, "dhr") > 0.3, "{top1}");
    assert!(close(f(top1, "offered_rps"), 320.0, 60.0), "{top1}");
    assert!(
        f(&top1["hit_ms"], "mean") < f(&top1["miss_ms"], "mean"),
        "{top1}"
    );
    assert!(!res["timeline"].as_array().unwrap().is_empty());
    // Surrogate metrics: a sample per second of the run, summarised per phase.
    let sur = &c["surrogates"];
    let samples = sur["samples"].as_array().unwrap();
    assert!(!samples.is_empty(), "{sur}");
    assert!(samples.iter().all(|s| f(s, "rss_mb") > 0.0), "{sur}");
    assert!(samples.iter().any(|s| f(s, "cpu_percent") > 0.0), "{sur}");
    assert_eq!(
        sur["phases"].as_array().unwrap().len(),
        phases.len(),
        "{sur}"
    );
    assert!(f(&sur["phases"][3], "cpu_s") > 0.0, "{sur}");
    // The block devices' rates from /proc/diskstats beside /proc/PID/io, every second.
    assert!(!sur["disk_devices"].is_null(), "{sur}");
    for key in [
        "disk_read_bytes_s",
        "disk_write_bytes_s",
        "disk_read_ops_s",
        "disk_write_ops_s",
    ] {
        assert!(
            samples
                .iter()
                .all(|s| s[key].as_f64().is_some_and(|v| v >= 0.0)),
            "{key}: {sur}"
        );
    }
    assert!(sur["phases"][3]["disk_write_mb_s"].is_f64(), "{sur}");
    assert!(html.contains("/proc/diskstats") && stdout.contains("rd op/s"));
    // Hit and miss response-time CDFs: they count every response, rise, and end at 1.
    let responses: u64 = phases.iter().map(|p| u(p, "responses")).sum();
    let hits: u64 = phases.iter().map(|p| u(p, "hits")).sum();
    assert_eq!(u(&res["hit_cdf"], "count"), hits, "{}", res["hit_cdf"]);
    assert_eq!(
        u(&res["hit_cdf"], "count") + u(&res["miss_cdf"], "count"),
        responses
    );
    for cdf in [&res["hit_cdf"], &res["miss_cdf"]] {
        let pts = cdf["points"].as_array().unwrap();
        assert!(pts.len() >= 2, "{cdf}");
        assert!(
            pts.windows(2)
                .all(|w| f(&w[0], "ms") <= f(&w[1], "ms")
                    && f(&w[0], "fraction") < f(&w[1], "fraction")),
            "{cdf}"
        );
        assert_eq!(f(pts.last().unwrap(), "fraction"), 1.0, "{cdf}");
    }
    // A hit's median is below a miss's (the origin's think time is in every miss).
    let median = |cdf: &Value| {
        cdf["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| f(p, "fraction") >= 0.5)
            .map(|p| f(p, "ms"))
            .unwrap()
    };
    assert!(median(&res["hit_cdf"]) < median(&res["miss_cdf"]));
    assert!(
        html.contains("hit response-time CDF") && html.contains("miss response-time CDF"),
        "{html}"
    );
    // Response time against offered rate over inc and top2, and its knee in the findings.
    assert!(
        html.contains("mean response time against offered rate")
            && html.contains("throughput against offered rate"),
        "{html}"
    );
    let findings = r["findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|x| {
            let x = x.as_str().unwrap();
            x.starts_with("capstan: ") && x.contains("saturation knee")
        }),
        "{findings:?}"
    );
    let verdicts = r["verdicts"].as_array().unwrap();
    assert!(
        verdicts.iter().any(|v| v["phase"] == "top1"),
        "{verdicts:?}"
    );
    assert!(stdout.contains("Better performer"), "{stdout}");
    assert!(
        stdout.contains("top1") && stdout.contains("(thesis)"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
