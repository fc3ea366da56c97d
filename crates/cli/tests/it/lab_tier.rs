//! The tier experiment as a user runs it, at its hidden `--smoke` scale (second-long windows):
//! `capstan lab tier` starts nodes and tiers of one and two switches on 127.0.0.10/.11, drives
//! them through `capstan bench --target`, and writes a report whose JSON shows the load spread
//! over both switches, the cache variants (the sharded one marked unavailable exactly when
//! `capstan check` refuses `[tier]`), a killed switch whose connections moved to the other, and
//! the policies run with local and shared views.

use crate::support;

use serde_json::Value;
use support::run;

#[test]
fn smoke_run_writes_the_report() {
    let out_dir = std::env::temp_dir().join(format!("capstan-labtier-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out_dir);
    let out = run(&[
        "lab",
        "tier",
        "--smoke",
        "--engine",
        "both",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("results.json")).unwrap())
            .unwrap();
    // Capacity: K = 1 then 2; with two switches both carried part of the load.
    let cap = r["capacity"].as_array().unwrap();
    let ks: Vec<u64> = cap
        .iter()
        .map(|c| c["switches"].as_u64().unwrap())
        .collect();
    assert_eq!(ks, [1, 2], "{r}");
    assert_eq!(cap[0]["ratio_to_k_times_one"], 1.0);
    let two = cap[1]["targets"].as_array().unwrap();
    assert_eq!(two.len(), 2, "{r}");
    assert_eq!(
        two[0]["address"].as_str().unwrap().split(':').next(),
        Some("127.0.0.10")
    );
    assert_eq!(
        two[1]["address"].as_str().unwrap().split(':').next(),
        Some("127.0.0.11")
    );
    for t in two {
        assert!(t["requests"].as_u64().unwrap() > 0, "{t}");
    }
    // Cache: three variants; the sharded one runs exactly when this build takes [tier].
    let cache = r["cache"].as_array().unwrap();
    let names: Vec<&str> = cache
        .iter()
        .map(|c| c["variant"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["independent", "one-big", "sharded"]);
    let supported = r["tier_supported"].as_bool().unwrap();
    assert_eq!(cache[2]["available"].as_bool().unwrap(), supported, "{r}");
    if !supported {
        assert!(cache[2]["note"]
            .as_str()
            .unwrap()
            .contains("not available in this build"));
    }
    for c in cache.iter().filter(|c| c["available"] == true) {
        let dhr = c["dhr"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&dhr), "{c}");
        assert!(c["responses"].as_u64().unwrap() > 0, "{c}");
    }
    // The kill: the killed switch refused the connections meant for it afterwards, and they
    // went to the survivor; only requests on connections to it failed.
    let kill = &r["kill"];
    let t = kill["targets"].as_array().unwrap();
    assert_eq!(kill["killed"], t[1]["address"], "{kill}");
    assert!(t[1]["refused"].as_u64().unwrap() >= 1, "{kill}");
    assert!(t[0]["reconnects"].as_u64().unwrap() >= 1, "{kill}");
    assert!(
        kill["errors"].as_u64().unwrap() <= t[1]["connects"].as_u64().unwrap(),
        "at most one failure per connection to the killed switch: {kill}"
    );
    // The policies: with [tier], each of CAP, LARD, LC and JIQ ran (the three that read
    // counts with both views) and answered; without it, there is no shared view to compare.
    match supported {
        true => {
            let rows = r["views"]["rows"].as_array().unwrap();
            let runs: Vec<String> = (rows.iter())
                .map(|w| {
                    format!(
                        "{} {}",
                        w["policy"].as_str().unwrap(),
                        w["view"].as_str().unwrap()
                    )
                })
                .collect();
            assert_eq!(
                runs,
                [
                    "cap -",
                    "lard local",
                    "lard shared",
                    "least-connections local",
                    "least-connections shared",
                    "join-idle-queue local",
                    "join-idle-queue shared"
                ],
                "{r}"
            );
            for w in rows {
                assert!(w["responses"].as_u64().unwrap() > 0, "{w}");
                assert!(w["p90_ms"].as_f64().unwrap() > 0.0, "{w}");
            }
            assert!(r["views"]["capacity_rps"].as_f64().unwrap() > 0.0, "{r}");
            // --engine both: LC and JIQ with both views in the simulator too, each with a
            // verdict on whether the worlds agree.
            let sim = &r["sim"]["rows"].as_array().unwrap();
            assert_eq!(sim.len(), 4, "{r}");
            for m in sim.iter() {
                assert!(m["sim_p90_ms"].as_f64().unwrap() > 0.0, "{m}");
                assert!(m["lab_p90_ms"].as_f64().unwrap() > 0.0, "{m}");
            }
            assert_eq!(r["sim"]["agreement"].as_array().unwrap().len(), 2, "{r}");
        }
        false => assert!(r["views"].is_null(), "{r}"),
    }
    assert!(!r["not_measured"].as_array().unwrap().is_empty());
    assert!(!r["findings"].as_array().unwrap().is_empty());
    let html = std::fs::read_to_string(out_dir.join("index.html")).unwrap();
    assert_eq!(
        html.matches("<svg").count(),
        3 + usize::from(supported),
        "capacity, cache, kill and (with [tier]) policy plots"
    );
    assert!(html.contains("Not measured yet"));
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn listed_and_flags_it_does_not_take_are_one_line() {
    let list = String::from_utf8(run(&["lab", "--list"]).stdout).unwrap();
    assert!(list.contains("tier"), "{list}");
    let out = run(&["lab", "tier", "--contenders", "nginx"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("tier takes --quick, --engine live|both and --out only"),
        "{err}"
    );
    let out = run(&["lab", "tier", "--engine", "sim"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("capstan sim tier"), "{err}");
}

#[test]
fn smoke_is_for_tier_only() {
    let out = run(&["lab", "churn", "--smoke"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("--smoke applies to the tier experiment"),
        "{err}"
    );
}
