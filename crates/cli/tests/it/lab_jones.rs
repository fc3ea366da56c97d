//! The Jones thesis's Figs. 6–9 and the switch at 1 vs 2 threads as `capstan lab` experiments,
//! run as a process in `--quick` form: each report must be internally consistent (every
//! utilisation within 0–1, the series each variant promises, the thesis's rows beside ours).

use serde_json::Value;

use crate::support::lab_run;
use lab_run::{capstan, check_consistent, run_lab, temp_dir};

fn series(r: &Value) -> &Vec<Value> {
    r["series"].as_array().unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Every per-node CPU / disk row is a utilisation, one row per node of each series and level.
fn check_node_utilisation(r: &Value) {
    let rows = r["figures"]["node_utilisation"].as_array().unwrap();
    let expected: usize = series(r)
        .iter()
        .map(|s| s["nodes"].as_u64().unwrap() as usize * s["points"].as_array().unwrap().len())
        .sum();
    assert_eq!(rows.len(), expected);
    for row in rows {
        for k in ["cpu", "disk", "nic", "busiest"] {
            assert!((0.0..=1.0).contains(&f(&row[k])), "{row}");
        }
        assert!(f(&row["busiest"]) + 1e-9 >= f(&row["cpu"]).max(f(&row["disk"])));
    }
}

/// The thesis's series are all in the comparison, and we measured each of its levels we ran.
fn check_paper_rows(r: &Value) {
    let rows = r["paper"]["rows"].as_array().unwrap();
    assert!(!rows.is_empty());
    let levels: Vec<f64> = r["levels"].as_array().unwrap().iter().map(f).collect();
    for row in rows {
        if levels.contains(&f(&row["level"])) {
            assert!(f(&row["ours"]) > 0.0, "{row}");
        }
    }
}

#[test]
fn node_alone_quick_measures_each_node_by_itself() {
    let (r, html, _) = run_lab("node-alone", &["node-alone", "--quick"]);
    check_consistent(&r, true);
    check_node_utilisation(&r);
    let s = series(&r);
    assert_eq!(s.len(), 4);
    for (k, s) in s.iter().enumerate() {
        assert_eq!(s["variant"], format!("node {}", k + 1));
        assert_eq!(s["nodes"], 1);
        for run in s["runs"].as_array().unwrap() {
            let nodes = run["nodes"].as_array().unwrap();
            assert_eq!(nodes.len(), 1);
            assert_eq!(nodes[0]["name"], format!("node{}", k + 1));
        }
    }
    let alone = &r["figures"]["nodes_alone"];
    assert_eq!(alone["paper"].as_array().unwrap().len(), 7);
    // Appendix D: node 46 (168.67) over node 44 (117.33).
    assert!((f(&alone["paper_spread"]) - 1.438).abs() < 0.001, "{alone}");
    assert_eq!(alone["ours"].as_array().unwrap().len(), 4);
    assert!(f(&alone["ours_spread"]) >= 1.0);
    assert_eq!(f(&alone["ours_level"]), 8.0);
    assert!(html.contains("Each node alone (Jones thesis Fig. 7)"));
}

#[test]
fn mix_6040_on_2_and_4_nodes_quick_gives_the_ratio_view() {
    let (r, html, _) = run_lab("mix-6040-2nodes", &["mix-6040-2nodes", "--quick"]);
    check_consistent(&r, true);
    check_node_utilisation(&r);
    check_paper_rows(&r);
    let s = series(&r);
    assert_eq!(s.len(), 4);
    for s in s {
        let nodes = s["nodes"].as_u64().unwrap() as usize;
        let want = if s["variant"] == "2 nodes" { 2 } else { 4 };
        assert_eq!(nodes, want, "{}", s["label"]);
        for run in s["runs"].as_array().unwrap() {
            assert_eq!(run["nodes"].as_array().unwrap().len(), want);
        }
    }
    let ratio = r["figures"]["ratio"].as_array().unwrap();
    for row in ratio {
        let per_node = f(&row["clients"]) / f(&row["nodes"]);
        assert!(
            (f(&row["clients_per_node"]) - per_node).abs() < 1e-3,
            "{row}"
        );
    }
    let two_at_4 = ratio
        .iter()
        .find(|x| x["variant"] == "2 nodes" && f(&x["clients"]) == 4.0)
        .expect("2 nodes at 4 clients");
    assert_eq!(f(&two_at_4["paper_gain_pct"]), 19.5);
    assert!(two_at_4["ours_gain_pct"].is_number());
    let claims = r["paper"]["claims"].as_array().unwrap();
    assert_eq!(claims.len(), 2);
    assert!(claims.iter().all(|c| c["ours_percent"].is_number()));
    assert!(html.contains("Gain against clients per node (Jones thesis Fig. 8)"));
}

#[test]
fn smp_vs_up_quick_runs_each_variant_with_its_own_cores() {
    let (r, html, _) = run_lab("smp-vs-up", &["smp-vs-up", "--quick"]);
    check_consistent(&r, true);
    check_node_utilisation(&r);
    check_paper_rows(&r);
    let s = series(&r);
    assert_eq!(s.len(), 2);
    let shape: Vec<(String, u64, u64)> = s
        .iter()
        .map(|s| {
            (
                s["variant"].as_str().unwrap().to_string(),
                s["nodes"].as_u64().unwrap(),
                s["cores"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [("SMP 2x2".to_string(), 2, 2), ("UP 4x1".to_string(), 4, 1)]
    );
    let ratios = r["figures"]["variant_ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 2);
    assert!(ratios.iter().all(|v| f(&v["ours"]) > 0.0));
    assert!(html.contains("One set-up over another"));
}

#[test]
fn switch_threads_quick_has_a_series_per_thread_count() {
    let (r, html, _) = run_lab("switch-threads", &["switch-threads", "--quick"]);
    check_consistent(&r, true);
    check_paper_rows(&r);
    let threads: Vec<u64> = series(&r)
        .iter()
        .map(|s| s["switch_threads"].as_u64().unwrap())
        .collect();
    assert_eq!(threads, [1, 2]);
    let measure = &r["paper"]["measures"][0];
    assert_eq!(f(&measure["paper"]), 800.0);
    assert!(f(&measure["ours"]) > 0.0);
    let ratio = &r["figures"]["variant_ratios"][0];
    assert!((f(&ratio["paper"]) - 0.552).abs() < 1e-9);
    assert!(f(&ratio["ours"]) > 0.0);
    assert!(html.contains("Jones thesis §4.4"));
}

/// A variant's cores, switch threads and lone node are checked before anything starts.
#[test]
fn bad_variant_machine_is_one_line() {
    let dir = temp_dir("jones-bad");
    let base = "name = \"x\"\ntitle = \"x\"\nfigure = \"x\"\n[nodes]\ncount = 2\n[switch]\npolicies = [\"cap\"]\n\
                [workload]\nkind = \"url\"\nurl = \"/a\"\n[load]\nengine = \"closed\"\nlevels = [1]\nduration = \"1s\"\n\
                [[variant]]\nname = \"v\"\n";
    for (extra, needle) in [
        ("corez = 2\n", "bad.toml:17: unknown field `corez`"),
        ("cores = 0\n", "variant \"v\": cores must be 1..=64, got 0"),
        ("switch_threads = 99\n", "switch_threads must be 1..=64"),
        ("alone = 3\n", "alone must name a node 1..=2, got 3"),
        ("alone = 1\nnodes = 2\n", "it takes no nodes or speeds"),
        ("cores = \"two\"\n", "bad.toml:17"),
    ] {
        let file = dir.join("bad.toml");
        std::fs::write(&file, format!("{base}{extra}")).unwrap();
        let out = capstan(&["lab", file.to_str().unwrap()]);
        assert!(!out.status.success(), "{extra}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{extra}: {err}");
        assert!(err.contains(needle), "{extra}: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
