//! Same seed, same bytes: the JSON report must not depend on thread timing or wall time.

use capstan_sim::{Experiment, PolicyChoice, Scenario};

fn experiment(threads: usize) -> Experiment {
    Experiment {
        scenario: Scenario::named("commerce").unwrap(),
        policies: ["cap", "weighted-round-robin", "lard", "random", "peak-ewma"]
            .iter()
            .map(|p| PolicyChoice::parse(p).unwrap())
            .collect(),
        nodes: 4,
        rate: 60.0,
        duration_s: 20.0,
        warmup_s: 2.0,
        replications: 2,
        seed: 9,
        tgat_sweep: vec![0.0, 2.0],
        threads,
    }
}

#[test]
fn same_seed_same_json_whatever_the_threads() {
    let (a, _) = experiment(2).run(&|_, _| {}).unwrap();
    let (b, _) = experiment(1).run(&|_, _| {}).unwrap();
    let ja = serde_json::to_string_pretty(&a).unwrap();
    let jb = serde_json::to_string_pretty(&b).unwrap();
    assert_eq!(ja, jb);
    assert!(a.policies.iter().all(|p| p.pages > 1000), "{ja}");
    let mut other = experiment(2);
    other.seed = 10;
    let (c, _) = other.run(&|_, _| {}).unwrap();
    assert_ne!(ja, serde_json::to_string_pretty(&c).unwrap());
    // The report renders, with both plots.
    let html = capstan_sim::report::html(&a).unwrap();
    assert!(html.matches("<svg").count() == 2, "plots missing");
}

#[test]
fn every_scenario_and_core_policy_runs() {
    for name in capstan_sim::scenario::NAMES {
        let exp = Experiment {
            scenario: Scenario::named(name).unwrap(),
            policies: capstan_core::PolicySpec::names()
                .iter()
                .map(|p| PolicyChoice::parse(p).unwrap())
                .collect(),
            nodes: 4,
            rate: 20.0,
            duration_s: 10.0,
            warmup_s: 1.0,
            replications: 1,
            seed: 1,
            tgat_sweep: vec![],
            threads: 2,
        };
        let (r, _) = exp.run(&|_, _| {}).unwrap();
        for p in &r.policies {
            assert!(p.pages > 50, "{name} {}: {} pages", p.policy, p.pages);
            assert!(p.p90.value >= p.p50.value && p.p99.value >= p.p90.value);
            assert!(p
                .nodes
                .iter()
                .all(|u| u.cpu <= 1.0 + 1e-9 && u.disk <= 1.0 + 1e-9));
        }
    }
}
