//! Node-count and arrival-rate sweeps (CAP Table 1's ranges) in quick form, and the BENCHMARKS-papers.md
//! generator on a small results set.

use capstan_sim::sweep::{run_sweep, Axis};
use capstan_sim::{Experiment, PolicyChoice, Scenario};

fn quick(policies: &[&str]) -> Experiment {
    Experiment {
        scenario: Scenario::named("commerce").unwrap(),
        policies: policies
            .iter()
            .map(|p| PolicyChoice::parse(p).unwrap())
            .collect(),
        nodes: 4,
        rate: 20.0,
        duration_s: 20.0,
        warmup_s: 2.0,
        replications: 2,
        seed: 3,
        tgat_sweep: vec![],
        threads: 2,
    }
}

#[test]
fn nodes_sweep_has_one_point_per_value_and_policy_matching_a_plain_run() {
    let exp = quick(&["cap", "round-robin"]);
    let (sweep, info) = run_sweep(&exp, Axis::Nodes, &[2.0, 4.0], &|_, _| {}).unwrap();
    assert_eq!(info.runs, 2 * 2 * 2);
    assert_eq!(sweep.series.len(), 2);
    for s in &sweep.series {
        let xs: Vec<f64> = s.points.iter().map(|p| p.x).collect();
        assert_eq!(xs, [2.0, 4.0]);
        for p in &s.points {
            assert!(p.pages > 100 && p.p90.value > 0.0 && p.mean.value > 0.0);
            assert!((0.0..=1.0).contains(&p.within_5s) && p.max_cpu <= 1.0 + 1e-9);
        }
    }
    // The 4-node point is exactly the plain 4-node experiment.
    let (plain, _) = exp.run(&|_, _| {}).unwrap();
    for (s, p) in sweep.series.iter().zip(&plain.policies) {
        assert_eq!(s.policy, p.policy);
        assert_eq!(s.points[1].p90, p.p90);
        assert_eq!(s.points[1].pages, p.pages);
    }
    let html = capstan_sim::sweep_report::sweep_html(&sweep).unwrap();
    assert_eq!(html.matches("<svg").count(), 1);
    assert!(html.contains("round-robin"));
}

#[test]
fn rate_sweep_load_grows_with_the_rate() {
    let exp = quick(&["cap"]);
    let (sweep, _) = run_sweep(&exp, Axis::Rate, &[10.0, 30.0], &|_, _| {}).unwrap();
    let pts = &sweep.series[0].points;
    assert!(pts[1].pages > pts[0].pages, "{:?}", pts);
    assert!(pts[1].max_cpu > pts[0].max_cpu);
    let json = serde_json::to_value(&sweep).unwrap();
    assert_eq!(json["format"], "capstan-sim-sweep/1");
    assert_eq!(json["axis"], "rate");
}

#[test]
fn bad_sweep_values_are_refused() {
    let exp = quick(&["cap"]);
    for (axis, v) in [
        (Axis::Nodes, vec![]),
        (Axis::Nodes, vec![0.0]),
        (Axis::Nodes, vec![2.5]),
        (Axis::Rate, vec![-1.0]),
        (Axis::Rate, vec![f64::NAN]),
    ] {
        let e = run_sweep(&exp, axis, &v, &|_, _| {}).unwrap_err();
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn results_md_renders_tables_and_numbers_from_a_small_results_set() {
    let root = std::env::temp_dir().join(format!("capstan-results-md-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut exp = quick(&["cap", "round-robin"]);
    exp.replications = 1;
    exp.tgat_sweep = vec![0.0, 2.0];
    let (report, _) = exp.run(&|_, _| {}).unwrap();
    std::fs::create_dir_all(root.join("c")).unwrap();
    std::fs::write(
        root.join("c/results.json"),
        serde_json::to_string(&report).unwrap(),
    )
    .unwrap();
    let (sweep, _) = run_sweep(&quick(&["cap"]), Axis::Nodes, &[2.0, 3.0], &|_, _| {}).unwrap();
    std::fs::create_dir_all(root.join("n")).unwrap();
    std::fs::write(
        root.join("n/sweep.json"),
        serde_json::to_string(&sweep).unwrap(),
    )
    .unwrap();
    std::fs::write(root.join("wall.txt"), "42 s\n").unwrap();
    let template = "# T\n\n{{table c}}\n\ncap p90 {{p90 c cap}} ms, hit {{hit c cap}}, \
                    P(≤5 s) {{le c round-robin 5000}}\n\n{{tgat c}}\n\n{{sweep n}}\n\nwall {{text wall.txt}}\n";
    let md = capstan_sim::results_md::render(template, &root).unwrap();
    let cap = &report.policies[0];
    assert!(
        md.contains(&format!("cap p90 {:.0} ms", cap.p90.value)),
        "{md}"
    );
    assert!(md.contains(&format!("hit {:.3}", cap.cache_hit_rate.value)));
    assert!(md.contains(&format!(
        "| cap | {} | {:.0} ± {:.0} |",
        cap.layer, cap.mean.value, cap.mean.ci95
    )));
    assert!(md.contains(
        "| T_gat s | WRR_num p90 ms | WRR_time p90 ms | cap p90 ms | round-robin p90 ms |"
    ));
    assert_eq!(
        md.matches("\n| 2 | ").count(),
        2,
        "tgat and nodes rows: {md}"
    );
    assert!(md.contains("| nodes | cap p90 ms |") && md.contains("wall 42 s"));
    assert!(!md.contains("{{"));
    // Stale templates fail loudly, naming the directive.
    for bad in [
        "{{p90 c lard}}",
        "{{table missing}}",
        "{{bogus}}",
        "{{tgat n}}",
        "{{p90 c",
    ] {
        let e = capstan_sim::results_md::render(bad, &root).unwrap_err();
        assert!(!e.contains('\n'), "{e}");
    }
    let _ = std::fs::remove_dir_all(&root);
}
