//! A 1,000-node cluster at 100 k HTTP requests/s, in small form (a fraction of a simulated
//! second): it runs, reports events, and its counts agree with each other. How fast it runs is
//! a benchmark (`crates/sim/bench.sh scale`), not asserted here.

use capstan_sim::run::requests_per_session;
use capstan_sim::{Experiment, PolicyChoice, Scenario};

const NODES: usize = 1000;
const REQUESTS_PER_S: f64 = 100_000.0;

fn experiment(policies: &[&str], duration_s: f64) -> Experiment {
    let scenario = Scenario::named("commerce").unwrap();
    let rate = REQUESTS_PER_S / requests_per_session(&scenario, 1);
    Experiment {
        scenario,
        policies: policies
            .iter()
            .map(|p| PolicyChoice::parse(p).unwrap())
            .collect(),
        nodes: NODES,
        rate,
        duration_s,
        warmup_s: duration_s / 10.0,
        replications: 2,
        seed: 1,
        tgat_sweep: vec![],
        threads: 2,
    }
}

#[test]
fn request_rate_converts_to_a_session_rate() {
    let s = Scenario::named("commerce").unwrap();
    let per_session = requests_per_session(&s, 1);
    // 3.86 pages per session (Table 1) × a few objects per page.
    assert!((5.0..40.0).contains(&per_session), "{per_session}");
    assert_eq!(per_session, requests_per_session(&s, 1));
}

#[test]
fn a_thousand_nodes_at_100k_requests_per_second() {
    // The policies that look at every node (LARD, least connections) and the ones that do not.
    let policies = ["cap", "lard", "least-connections", "weighted-round-robin"];
    let exp = experiment(&policies, 0.5);
    let (report, info) = exp.run(&|_, _| {}).unwrap();
    assert_eq!(report.nodes, NODES);
    assert_eq!(info.runs, policies.len() * 2);
    assert!(info.events > 0 && info.events_per_cpu_s > 0.0 && info.events_per_wall_s > 0.0);
    assert_eq!(
        report.events,
        report.policies.iter().map(|p| p.events).sum::<u64>()
    );
    assert_eq!(info.events, report.events);
    for p in &report.policies {
        assert_eq!(p.nodes.len(), NODES, "{}", p.policy);
        // The offered rate is reached once sessions are in their steady state (think times of
        // 2 s and more between pages); in half a second only first pages are made, about a
        // fourth of a session's requests. Never more than offered, though.
        assert!(
            (0.02 * REQUESTS_PER_S..1.2 * REQUESTS_PER_S).contains(&p.requests_per_s),
            "{}: {} requests/s",
            p.policy,
            p.requests_per_s
        );
        assert!(p.pages > 1000, "{}: {} pages", p.policy, p.pages);
        assert!(p.censored <= p.pages, "{}", p.policy);
        // Pages the nodes finished (per node, mean over two replications, rounded down) plus
        // the censored ones account for every measured page.
        let finished: u64 = p.nodes.iter().map(|n| n.pages).sum();
        let per_rep = (p.pages - p.censored) / 2;
        assert!(
            finished <= per_rep + 1 && finished + NODES as u64 >= per_rep,
            "{}: nodes finished {finished}, report says {per_rep} per replication",
            p.policy
        );
        // The load spreads over the cluster: most nodes served something.
        let busy = p.nodes.iter().filter(|n| n.pages > 0).count();
        assert!(
            busy > NODES / 2,
            "{}: only {busy} nodes served pages",
            p.policy
        );
    }
}
