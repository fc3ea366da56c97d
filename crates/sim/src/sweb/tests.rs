//! The SWEB model against hand-computed times, and the experiments' shape.

use super::model::{Cluster, Run};
use super::workload::{File, Workload};
use super::*;
use crate::event::nanos_round;
use crate::policy::PolicyChoice;

fn choice(text: &str) -> PolicyChoice {
    PolicyChoice::parse(text).unwrap()
}

/// One request for a 1.5 MB file whose home is node `home`, arriving at 0 (so at node 0).
fn one_request(home: usize) -> Workload {
    let mut w = Workload::skewed(6, 1.0, 1.0, 1_500_000, home as u64);
    w.arrivals.truncate(1);
    w
}

fn single_response(policy: &str, home: usize) -> (f64, u64) {
    let cluster = Cluster::default();
    let w = one_request(home);
    let out = Run::new(&cluster, &w, &choice(policy)).unwrap().run();
    assert_eq!(out.response_s.len(), 1);
    (out.response_s[0], out.redirects)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn a_lone_local_request_takes_preprocessing_disk_and_sending() {
    // 3 ms + 1.5 MB / 5 MB/s + (5 ms + 1.5 × 48.5 ms).
    let (t, redirects) = single_response("round-robin", 0);
    assert!(close(t, 0.003 + 0.3 + 0.07775), "{t}");
    assert_eq!(redirects, 0);
}

#[test]
fn a_lone_remote_request_reads_over_nfs_at_b2() {
    // 1.5 MB at 5 / 1.1 MB/s = 0.33 s.
    let (t, _) = single_response("round-robin", 2);
    assert!(close(t, 0.003 + 0.33 + 0.07775), "{t}");
}

#[test]
fn a_redirect_costs_two_round_trips_a_connection_and_preprocessing_twice() {
    // Preprocess 3 + redirect 4 at node 0, 2 × 10 + 4 ms away, preprocess 3 at the home.
    let (t, redirects) = single_response("home-node", 2);
    assert_eq!(redirects, 1);
    assert!(
        close(t, 0.003 + 0.004 + 0.024 + 0.003 + 0.3 + 0.07775),
        "{t}"
    );
    // SWEB judges the redirect not worth it for an idle cluster: 0.33 s remote beats
    // 24 ms + 0.3 s + σ on the CPU.
    let (t, redirects) = single_response("sweb", 2);
    assert_eq!(redirects, 0);
    assert!(close(t, 0.003 + 0.33 + 0.07775), "{t}");
}

#[test]
fn round_robin_never_redirects_and_home_node_serves_only_at_home() {
    let cluster = Cluster::default();
    let w = Workload::sizes(6, 10, SIZE_RANGE, 12.0, 10.0, 4);
    let rr = Run::new(&cluster, &w, &choice("round-robin"))
        .unwrap()
        .run();
    assert_eq!(rr.redirects, 0);
    assert!(rr.nodes.iter().all(|n| n.served == 20), "{:?}", rr.nodes);
    let home = Run::new(&cluster, &w, &choice("home-node")).unwrap().run();
    // Home nodes read only from their disks: no NFS traffic at all.
    assert!(home.nodes.iter().all(|n| n.nfs == 0.0));
    assert!(home.redirects > 0 && rr.nodes.iter().any(|n| n.nfs > 0.0));
}

#[test]
fn runs_are_reproducible() {
    let cluster = Cluster::default();
    let w = Workload::sizes(6, 10, SIZE_RANGE, 25.0, 10.0, 9);
    let a = Run::new(&cluster, &w, &choice("sweb")).unwrap().run();
    let b = Run::new(&cluster, &w, &choice("sweb")).unwrap().run();
    assert_eq!(a.response_s, b.response_s);
    assert_eq!(a.redirects, b.redirects);
}

#[test]
fn the_skewed_test_ranks_locality_last() {
    let mut exp = SwebExperiment::new(Which::SwebSkewed);
    exp.replications = 1;
    let r = exp.run().unwrap();
    let point = &r.points[0];
    let mean = |name: &str| {
        point
            .policies
            .iter()
            .find(|p| p.name == name)
            .unwrap()
            .mean_s
            .value
    };
    assert!(mean("home-node") > 5.0 * mean("round-robin"));
    assert!(mean("sweb") < mean("home-node"));
    assert_eq!(point.policies[0].requests, 360);
    assert!(!r.findings.is_empty());
}

#[test]
fn the_capacity_sweep_finds_round_robin_near_the_formula() {
    let mut exp = SwebExperiment::new(Which::SwebSizes);
    exp.replications = 1;
    exp.rates = vec![10.0];
    exp.policies = vec![choice("round-robin")];
    let r = exp.run().unwrap();
    let c = r.capacity.unwrap();
    let rr = &c.policies[0];
    // §3.3 with the model's numbers and d = 0: 6 / (0.05 + 0.275 + 0.003) = 18.3 rps. The
    // formula adds a node's local and remote reads as if one channel did both; in the model the
    // disk and the NFS link work in parallel, so the NFS links bound round robin instead: 5/6 of
    // each node's requests at 0.33 s, 6 / (5/6 · 0.33) = 21.8 rps.
    assert!((rr.formula_rps - 18.29).abs() < 0.05, "{}", rr.formula_rps);
    let measured = rr.max_sustained_rps.value;
    assert!((18.0..=23.0).contains(&measured), "{measured}");
}

#[test]
fn bad_experiments_are_refused() {
    let mut exp = SwebExperiment::new(Which::SwebSkewed);
    exp.replications = 0;
    assert!(exp.run().unwrap_err().contains("replications"));
    let mut exp = SwebExperiment::new(Which::SwebSkewed);
    exp.rates = vec![-1.0];
    assert!(exp.run().unwrap_err().contains("rates"));
    let mut exp = SwebExperiment::new(Which::SwebSkewed);
    exp.policies = vec![choice("sweb:sigma=-1")];
    assert!(exp.run().unwrap_err().contains("sigma"));
    exp.policies = vec![choice("sweb:gather=0")];
    assert!(exp.run().unwrap_err().contains("gather"));
}

#[test]
fn a_hand_built_workload_runs() {
    let w = Workload {
        files: vec![File {
            key: "/x".into(),
            hash: 0,
            bytes: 100,
        }],
        arrivals: vec![(0, 0), (nanos_round(0.5), 0)],
        duration: nanos_round(1.0),
    };
    let out = Run::new(&Cluster::default(), &w, &choice("round-robin"))
        .unwrap()
        .run();
    assert_eq!(out.response_s.len(), 2);
    assert_eq!(out.backlog_at_end, 0);
}
