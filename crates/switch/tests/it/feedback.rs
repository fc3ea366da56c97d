//! Server-state feedback over real sockets: reports gathered into what policies see, derived WRR
//! weights equal to `core`'s (which the simulator also uses), silent nodes out and back, LARD on
//! gathered utilisation.

use crate::common;

use std::sync::atomic::Ordering;

use capstan_core::report::Window;
use capstan_core::{
    build_policy, GatherRules, Gatherer, LoadReport, NodeState, Policy, PolicyContext, PolicySpec,
    RequestInfo, StaticView, WeightSource,
};
use common::*;

fn every_node_reported(status: &serde_json::Value) -> bool {
    status["nodes"]
        .as_array()
        .is_some_and(|nodes| nodes.iter().all(|n| n["gathered"].is_object()))
}

/// The picks `core` makes with the same reports: the gatherer and the policy the simulator runs.
fn core_picks(service_ms: &[f64], count: usize) -> Vec<usize> {
    let names: Vec<String> = (0..service_ms.len()).map(|i| format!("n{i}")).collect();
    let classes = vec!["default".to_string()];
    let spec: PolicySpec =
        toml::from_str("name = \"weighted-round-robin\"\nmetric = \"service-time\"").unwrap();
    let ctx = PolicyContext {
        nodes: &names,
        classes: &classes,
    };
    let policy = build_policy(&spec, &ctx).unwrap();
    let source = policy.needs().weights;
    assert_eq!(source, WeightSource::ServiceTime);
    let mut gatherer = Gatherer::new(service_ms.len(), GatherRules::default(), 0);
    for (i, &ms) in service_ms.iter().enumerate() {
        let report = LoadReport {
            interval: Window {
                mean_service_ms: ms,
                ..Window::default()
            },
            ..LoadReport::default()
        };
        gatherer.record(i, &report, 1);
    }
    let live = vec![0; service_ms.len()];
    gatherer.end_round(1, source, &live, &vec![1; service_ms.len()]);
    let mut view = StaticView::uniform(service_ms.len());
    for (i, state) in view.nodes.iter_mut().enumerate() {
        gatherer.apply(i, state, source);
    }
    (0..count)
        .map(|_| pick(&*policy, &view))
        .collect::<Vec<_>>()
}

fn pick(policy: &dyn Policy, view: &StaticView) -> usize {
    let req = RequestInfo {
        class: 0,
        key: "/",
        key_hash: capstan_core::hash_key("/"),
    };
    policy.pick(&req, view).unwrap()
}

#[tokio::test]
async fn wrr_service_time_weights_come_from_reports_and_match_core() {
    let nodes = cluster(3).await;
    let service = [10.0, 30.0, 20.0];
    for (node, ms) in nodes.iter().zip(service) {
        node.service_ms.store(ms as u64, Ordering::Relaxed);
    }
    // One gathering round at start, then none for the test's life: the picks are deterministic.
    let extra = "[policy]\nname = \"weighted-round-robin\"\nmetric = \"service-time\"\n\
                 [load]\npath = \"/_capstan/load\"\ninterval = \"1h\"\n";
    let sw = start_switch(&config_for(&refs(&nodes), extra)).await;
    let status = wait_for_status(sw.admin_addr.unwrap(), "the first reports", |s| {
        every_node_reported(s) && s["nodes"][1]["effective_weight"] != 1
    })
    .await;
    let weights: Vec<u64> = (0..3)
        .map(|i| status["nodes"][i]["effective_weight"].as_u64().unwrap())
        .collect();
    // Mean 20 ms: 10·20/10, 10·20/30 ≈ 7, 10·20/20.
    assert_eq!(weights, vec![20, 7, 10], "{status}");
    let placed = placements(sw.listen_addrs[0], &["/x"; 37]).await;
    let live: Vec<usize> = placed
        .iter()
        .map(|(_, node)| node[1..].parse().unwrap())
        .collect();
    assert_eq!(live, core_picks(&service, 37));
}

#[tokio::test]
async fn a_node_whose_reports_stop_is_taken_out_and_returns_when_they_resume() {
    let nodes = cluster(3).await;
    // Silent after a second without a report: a busy machine can hold the gatherer back
    // between two nodes' answers for a good part of that, and a healthy node taken out would
    // change the rotation counted below.
    let extra = "[policy]\nname = \"round-robin\"\n\
                 [load]\npath = \"/_capstan/load\"\ninterval = \"50ms\"\nsilent_after = \"1s\"\n";
    let sw = start_switch(&config_for(&refs(&nodes), extra)).await;
    let admin = sw.admin_addr.unwrap();
    let addr = sw.listen_addrs[0];
    wait_for_status(admin, "the first reports", every_node_reported).await;
    nodes[1].reports_off.store(true, Ordering::Relaxed);
    let status = wait_for_status(admin, "n1 to go silent", |s| {
        s["nodes"][1]["silent"] == true
    })
    .await;
    assert_eq!(status["nodes"][1]["available"], false, "{status}");
    let seen = tally(&placements(addr, &["/a"; 12]).await);
    assert!(
        !seen.contains_key("n1"),
        "a silent node gets nothing: {seen:?}"
    );
    nodes[1].reports_off.store(false, Ordering::Relaxed);
    wait_for_status(admin, "n1 to report again", |s| {
        s["nodes"][1]["silent"] == false
    })
    .await;
    let seen = tally(&placements(addr, &["/a"; 12]).await);
    assert_eq!(seen.get("n1"), Some(&4), "back in rotation: {seen:?}");
}

#[tokio::test]
async fn lard_on_utilisation_sends_new_keys_to_the_least_utilised_node() {
    let nodes = cluster(3).await;
    for (node, percent) in nodes.iter().zip([80, 10, 50]) {
        node.load_percent.store(percent, Ordering::Relaxed);
    }
    let extra = "[policy]\nname = \"lard\"\nload = \"utilisation\"\n\
                 [load]\npath = \"/_capstan/load\"\ninterval = \"1h\"\n";
    let sw = start_switch(&config_for(&refs(&nodes), extra)).await;
    wait_for_status(
        sw.admin_addr.unwrap(),
        "the first reports",
        every_node_reported,
    )
    .await;
    let paths: Vec<String> = (0..6).map(|i| format!("/k{i}")).collect();
    let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
    let seen = tally(&placements(sw.listen_addrs[0], &paths).await);
    assert_eq!(
        seen.get("n1"),
        Some(&6),
        "all new keys on the 10 % node: {seen:?}"
    );
}

#[tokio::test]
async fn a_report_that_is_not_one_counts_as_a_failure_and_leaves_state_alone() {
    let nodes = cluster(2).await;
    nodes[0].load_percent.store(250, Ordering::Relaxed); // 2.5: not a utilisation
    nodes[1].load_percent.store(30, Ordering::Relaxed);
    let extra = "[policy]\nname = \"cap-load\"\n\
                 [load]\npath = \"/_capstan/load\"\ninterval = \"50ms\"\nsilent_after = \"1h\"\n";
    let sw = start_switch(&config_for(&refs(&nodes), extra)).await;
    let status = wait_for_status(sw.admin_addr.unwrap(), "a refused and a good report", |s| {
        s["nodes"][0]["load_report_failures"].as_u64() > Some(0)
            && s["nodes"][1]["gathered"].is_object()
    })
    .await;
    assert!(status["nodes"][0]["gathered"].is_null(), "{status}");
    assert_eq!(status["nodes"][0]["load_reports"], 0, "{status}");
    assert_eq!(status["nodes"][1]["load"], 0.3, "{status}");
}

#[test]
fn a_node_state_carries_live_and_gathered_fields_apart() {
    // Documented split: the policy's live count is the dispatcher's, not the node's report.
    let mut gatherer = Gatherer::new(1, GatherRules::default(), 0);
    let report = LoadReport {
        active_requests: 9,
        ..LoadReport::default()
    };
    gatherer.record(0, &report, 5);
    let mut state = NodeState {
        active: 2,
        ..NodeState::default()
    };
    gatherer.apply(0, &mut state, WeightSource::Configured);
    assert_eq!((state.active, state.gathered.active), (2, 9));
}

#[tokio::test]
async fn a_nodes_report_may_come_from_another_address() {
    // The node is a web server; its load daemon (`capstan agent`) listens elsewhere.
    let server = Backend::start("web").await;
    let daemon = Backend::start("agent").await;
    daemon.load_percent.store(55, Ordering::Relaxed);
    server.load_percent.store(5, Ordering::Relaxed);
    let config = format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n\
         [load]\npath = \"/_capstan/load\"\ninterval = \"50ms\"\n\
         [[node]]\nname = \"web\"\naddress = \"{}\"\nreport_address = \"{}\"\n",
        server.addr, daemon.addr
    );
    let sw = start_switch(&config).await;
    let status = wait_for_status(sw.admin_addr.unwrap(), "the daemon's report", |s| {
        s["nodes"][0]["load"] == 0.55
    })
    .await;
    assert_eq!(status["nodes"][0]["gathered"]["cpu"], 0.55, "{status}");
}
