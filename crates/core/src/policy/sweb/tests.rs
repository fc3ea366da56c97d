//! SWEB's costs against hand-computed values. Defaults unless a test says otherwise: b_disk =
//! b_net = 5 MB/s, 10 % remote penalty, σ = 30 %, redirect 2 × 10 + 4 = 24 ms, 1 ms + 10 ms/MB of
//! CPU. The object `/big` is 1 MB and its key hash 1 makes node 1 its home (of 4).

use super::*;
use crate::policy::support::testing::check_common_behaviour;
use crate::view::{ReceivedAt, StaticView};

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn build(params: SwebParams) -> Sweb {
    let nodes = names(&["a", "b", "c", "d"]);
    let classes = names(&["static", "cgi"]);
    Sweb::new(
        &params,
        &PolicyContext {
            nodes: &nodes,
            classes: &classes,
        },
    )
    .unwrap()
}

fn params() -> SwebParams {
    SwebParams {
        sizes: [("/big".to_string(), 1_000_000)].into(),
        ..SwebParams::default()
    }
}

fn big() -> RequestInfo<'static> {
    RequestInfo {
        class: 0,
        key: "/big",
        key_hash: 1,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn assert_cost(got: Cost, redirect_s: f64, data_s: f64, cpu_s: f64) {
    assert!(
        close(got.redirect_s, redirect_s) && close(got.data_s, data_s) && close(got.cpu_s, cpu_s),
        "got {got:?}, want redirect {redirect_s} data {data_s} cpu {cpu_s}"
    );
}

#[test]
fn local_file_costs_disk_time_and_remote_file_costs_the_penalty() {
    let sweb = build(params());
    let view = StaticView::uniform(4);
    // Behind a switch the home node decides: no redirect, no σ.
    assert_cost(sweb.estimate(&big(), &view, 1), 0.0, 0.2, 0.011);
    // Remote: 1 MB × 1.1 / 5 MB/s; σ on 11 ms of CPU; a redirect.
    assert_cost(sweb.estimate(&big(), &view, 2), 0.024, 0.22, 0.0143);
    assert_eq!(sweb.pick(&big(), &view), Some(1));
}

#[test]
fn disk_and_network_loads_stretch_the_transfer() {
    let sweb = build(params());
    let mut view = StaticView::uniform(4);
    view.nodes[1].gathered.disk = 0.5;
    view.nodes[2].gathered.net = 0.75;
    assert_cost(sweb.estimate(&big(), &view, 1), 0.0, 0.4, 0.011);
    assert_cost(sweb.estimate(&big(), &view, 2), 0.024, 0.88, 0.0143);
}

#[test]
fn loaded_cpu_costs_more_than_idle_cpu() {
    let sweb = build(SwebParams {
        placement: Placement::Shared,
        ..params()
    });
    let mut view = StaticView::uniform(4);
    let at0 = |v: &StaticView| sweb.estimate(&big(), &ReceivedAt::new(v, 0), 0);
    assert_cost(at0(&view), 0.0, 0.2, 0.011);
    view.nodes[0].gathered.cpu = 0.5;
    assert_cost(at0(&view), 0.0, 0.2, 0.022);
    view.nodes[0].gathered.cpu = 0.75;
    assert_cost(at0(&view), 0.0, 0.2, 0.044);
    // A saturated CPU is capped at 100× rather than infinite.
    view.nodes[0].gathered.cpu = 1.0;
    assert_cost(at0(&view), 0.0, 0.2, 1.1);
}

#[test]
fn sigma_applies_only_to_nodes_other_than_the_decider() {
    // No redirect term, so σ alone separates the receiving node from the others.
    let sweb = build(SwebParams {
        placement: Placement::Shared,
        client_rtt_ms: 0.0,
        connect_ms: 0.0,
        ..params()
    });
    let mut view = StaticView::uniform(4);
    let pick = |v: &StaticView| sweb.pick(&big(), &ReceivedAt::new(v, 0));
    assert_cost(
        sweb.estimate(&big(), &ReceivedAt::new(&view, 0), 0),
        0.0,
        0.2,
        0.011,
    );
    assert_cost(
        sweb.estimate(&big(), &ReceivedAt::new(&view, 0), 3),
        0.0,
        0.2,
        0.0143,
    );
    // At 20 % CPU the receiver's own load (×1.25) is still under an idle node's σ (×1.3) …
    view.nodes[0].gathered.cpu = 0.2;
    assert_eq!(pick(&view), Some(0));
    // … at 25 % (×1.333) it is over, and the next node in ring order wins the tie among equals.
    view.nodes[0].gathered.cpu = 0.25;
    assert_eq!(pick(&view), Some(1));
}

#[test]
fn the_redirect_cost_keeps_a_request_where_it_arrived() {
    let view = StaticView::uniform(4);
    let at0 = ReceivedAt::new(&view, 0);
    let sweb = build(params());
    // Node 0 fetches remotely: 0.22 + 0.011 = 0.231 s. Home node 1: 0.024 + 0.2 + 0.0143 =
    // 0.2383 s. Locality does not pay for the redirect.
    assert_cost(sweb.estimate(&big(), &at0, 0), 0.0, 0.22, 0.011);
    assert_cost(sweb.estimate(&big(), &at0, 1), 0.024, 0.2, 0.0143);
    assert_eq!(sweb.pick(&big(), &at0), Some(0));
    // Without the redirect cost the home's faster disk wins (0.2143 < 0.231).
    let free_redirect = build(SwebParams {
        client_rtt_ms: 0.0,
        connect_ms: 0.0,
        ..params()
    });
    assert_eq!(free_redirect.pick(&big(), &at0), Some(1));
}

#[test]
fn unavailable_nodes_are_skipped() {
    let sweb = build(params());
    let mut view = StaticView::uniform(4);
    view.nodes[1].available = false;
    // The home is down: the others cost the same, and the ring after the home breaks the tie.
    assert_eq!(sweb.pick(&big(), &view), Some(2));
    view.nodes[2].available = false;
    assert_eq!(sweb.pick(&big(), &view), Some(3));
    for n in &mut view.nodes {
        n.available = false;
    }
    assert_eq!(sweb.pick(&big(), &view), None);
}

#[test]
fn sizes_come_from_the_table_then_the_oracle_then_the_default() {
    let sweb = build(SwebParams {
        sizes: [
            ("/maps/**".to_string(), 1_500_000),
            ("/maps/*.txt".to_string(), 100),
            ("/maps/index.html".to_string(), 2_000),
        ]
        .into(),
        oracle: [(
            "cgi".to_string(),
            ResourceProfile {
                cpu_ms: 40.0,
                disk_ms: 5.0,
                net_kb: 50.0,
            },
        )]
        .into(),
        ..SwebParams::default()
    });
    let req = |class, key| RequestInfo {
        class,
        key,
        key_hash: 1,
    };
    assert_eq!(sweb.size_of(&req(0, "/maps/index.html")), 2_000);
    assert_eq!(
        sweb.size_of(&req(0, "/maps/a.txt")),
        100,
        "longer glob first"
    );
    assert_eq!(sweb.size_of(&req(0, "/maps/x/y.tif")), 1_500_000);
    assert_eq!(sweb.size_of(&req(1, "/cgi-bin/q")), 50_000);
    assert_eq!(sweb.size_of(&req(0, "/unknown")), 8_886);
    assert_eq!(
        sweb.size_of(&req(7, "/unknown")),
        8_886,
        "class out of range"
    );
    // The cgi class's own CPU and disk demands: 40 ms + 50 KB × 10 ms/MB of CPU; its 5 ms of
    // disk work beside the 50 KB / 5 MB/s transfer at the home node.
    let view = StaticView::uniform(4);
    assert_cost(
        sweb.estimate(&req(1, "/cgi-bin/q"), &view, 1),
        0.0,
        0.01 + 0.005,
        0.0405,
    );
}

#[test]
fn per_node_capacities_override_the_defaults() {
    let sweb = build(SwebParams {
        nodes: [(
            "b".to_string(),
            SwebNode {
                disk_mb_s: Some(10.0),
                speed: Some(2.0),
                ..SwebNode::default()
            },
        )]
        .into(),
        ..params()
    });
    assert_cost(
        sweb.estimate(&big(), &StaticView::uniform(4), 1),
        0.0,
        0.1,
        0.0055,
    );
}

#[test]
fn bad_parameters_are_refused_with_the_field_named() {
    let nodes = names(&["a", "b"]);
    let classes = names(&["static"]);
    let ctx = PolicyContext {
        nodes: &nodes,
        classes: &classes,
    };
    let cases = [
        (
            SwebParams {
                sigma: -0.1,
                ..SwebParams::default()
            },
            "sweb: sigma",
        ),
        (
            SwebParams {
                disk_mb_s: 0.0,
                ..SwebParams::default()
            },
            "sweb: disk_mb_s of node `a`",
        ),
        (
            SwebParams {
                nodes: [("z".to_string(), SwebNode::default())].into(),
                ..SwebParams::default()
            },
            "sweb: nodes names node `z`",
        ),
        (
            SwebParams {
                oracle: [("cpu".to_string(), ResourceProfile::default())].into(),
                ..SwebParams::default()
            },
            "sweb: oracle names class `cpu`",
        ),
        (
            SwebParams {
                sizes: [("/a/[".to_string(), 1)].into(),
                ..SwebParams::default()
            },
            "sweb: sizes pattern `/a/[`",
        ),
    ];
    for (params, message) in cases {
        match Sweb::new(&params, &ctx) {
            Err(PolicyError::Invalid(m)) => assert!(m.starts_with(message), "{m}"),
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("built: {message}"),
        }
    }
}

#[test]
fn needs_content_and_gathered_load() {
    let needs = build(params()).needs();
    assert!(needs.request_content && needs.gathered_load);
}

#[test]
fn shared_behaviour() {
    check_common_behaviour(&build(params()), 4);
}
