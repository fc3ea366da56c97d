//! Active health checks and slow start over real sockets: a node whose check fails is taken
//! out and comes back when it passes; a node that joins or returns gets a smaller share of the
//! requests while it slow-starts, then its full share.

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use common::*;
use hyper::{Request, StatusCode};

/// Checks often enough for a short test, with room for a busy machine: three slow answers in
/// a row would be needed to take a healthy node out.
const CHECKS: &str = "[health]\ncheck_path = \"/_check\"\ncheck_interval = \"200ms\"\n\
                      check_timeout = \"200ms\"\nrise = 2\nfall = 3\n";

#[tokio::test]
async fn failing_checks_take_a_node_out_and_passing_ones_bring_it_back() {
    let nodes = cluster(3).await;
    let dead_addr = DeadAddr::new();
    let mut text = config_for(&refs(&nodes), CHECKS);
    text.push_str(&format!(
        "[[node]]\nname = \"dead\"\naddress = \"{dead_addr}\"\n"
    ));
    let sw = start_switch(&text).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());

    // A node that refuses connections fails its checks with no status and the reason.
    let status = wait_for_status(admin, "the dead node to fail its checks", |s| {
        node_status(s, "dead")["check"]["state"] == "down"
    })
    .await;
    let dead = node_status(&status, "dead");
    assert_eq!(dead["state"], "check-down", "{dead}");
    assert_eq!(dead["available"], false, "{dead}");
    assert!(dead["check"]["last_status"].is_null(), "{dead}");
    assert!(dead["check"]["last_error"].is_string(), "{dead}");
    assert!(dead["check"]["consecutive"].as_u64() >= Some(3), "{dead}");

    // A node whose check answers 503 goes out after `fall` checks…
    nodes[1].check_status.store(503, Ordering::Relaxed);
    let status = wait_for_status(admin, "n1 to fail its checks", |s| {
        node_status(s, "n1")["state"] == "check-down"
    })
    .await;
    assert_eq!(node_status(&status, "n1")["check"]["last_status"], 503);
    assert_eq!(node_status(&status, "n0")["check"]["state"], "up");
    let before = nodes[1].hits();
    let seen = tally(&placements(addr, &["/a"; 12]).await);
    assert_eq!(seen.get("n1"), None, "n1 gets nothing while down: {seen:?}");
    assert_eq!(nodes[1].hits(), before);
    let metrics = get(admin, "/metrics").await.text();
    for line in [
        "capstan_node_check_up{node=\"n1\"} 0",
        "capstan_node_up{node=\"n1\"} 0",
        "capstan_node_check_up{node=\"n0\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
    assert!(metrics.contains("capstan_node_checks_total{node=\"n1\",result=\"failed\"}"));

    // …and comes back after `rise` passed checks, with its full share (no slow start here).
    nodes[1].check_status.store(204, Ordering::Relaxed);
    wait_for_status(admin, "n1 to pass its checks again", |s| {
        node_status(s, "n1")["state"] == "up"
    })
    .await;
    let seen = tally(&placements(addr, &["/a"; 12]).await);
    assert_eq!(seen.get("n1"), Some(&4), "back in rotation: {seen:?}");
    assert_eq!(seen.get("dead"), None, "{seen:?}");
}

#[tokio::test]
async fn without_a_check_path_no_node_is_checked() {
    let nodes = cluster(1).await;
    let sw = start_switch(&config_for(&refs(&nodes), "")).await;
    nodes[0].check_status.store(500, Ordering::Relaxed);
    assert_eq!(get(sw.listen_addrs[0], "/").await.status, StatusCode::OK);
    let status = status_json(sw.admin_addr.unwrap()).await;
    assert!(status["nodes"][0]["check"].is_null(), "{status}");
    let metrics = get(sw.admin_addr.unwrap(), "/metrics").await.text();
    assert!(!metrics.contains("capstan_node_check_up"), "{metrics}");
}

/// Requests per node for `count` requests sent one after another.
async fn share(addr: SocketAddr, count: usize) -> HashMap<String, usize> {
    let paths = vec!["/s"; count];
    tally(&placements(addr, &paths).await)
}

/// Checks that `node` is slow-starting, sends `count` requests and checks that `node` got less
/// than half of what each other node got — if its share of picks (which ramps up on the wall
/// clock) was still under `max_share` when they were done, so that it was under it for all of
/// them: on a machine slow enough that the requests outlast that much of the ramp, what they
/// saw is not asserted.
async fn assert_smaller_share_while_slow_starting(
    addr: SocketAddr,
    admin: SocketAddr,
    node: &str,
    count: usize,
    max_share: f64,
) {
    let status = status_json(admin).await;
    let entry = node_status(&status, node);
    assert_eq!(entry["state"], "slow-start", "{entry}");
    assert!(entry["slow_start"]["share"].as_f64() < Some(0.5), "{entry}");
    let seen = share(addr, count).await;
    let status = status_json(admin).await;
    let entry = node_status(&status, node);
    if entry["state"] != "slow-start" || entry["slow_start"]["share"].as_f64() >= Some(max_share) {
        eprintln!("note: {node}'s share passed {max_share} before {count} requests: {entry}");
        return;
    }
    let others: Vec<usize> = seen
        .iter()
        .filter(|(name, _)| name.as_str() != node)
        .map(|(_, &n)| n)
        .collect();
    let mine = seen.get(node).copied().unwrap_or(0);
    assert!(
        others.iter().all(|&n| mine * 2 < n),
        "{node} slow-starting should get less than half of the others: {seen:?}"
    );
}

#[tokio::test]
async fn an_undrained_node_slow_starts_under_round_robin() {
    let nodes = cluster(3).await;
    let extra = "[health]\nslow_start = \"3s\"\n";
    let sw = start_switch(&config_for(&refs(&nodes), extra)).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let drain = send(admin, Request::post("/nodes/n2/drain"), Bytes::new()).await;
    assert_eq!(drain.status, StatusCode::OK, "{}", drain.text());
    let undrain = send(admin, Request::post("/nodes/n2/undrain"), Bytes::new()).await;
    assert_eq!(undrain.status, StatusCode::OK, "{}", undrain.text());
    // Round robin: a node offered on a share s of its picks gets 20 s of 60 requests, each
    // other node (60 - 20 s) / 2; less than half of theirs while s < 0.6.
    assert_smaller_share_while_slow_starting(addr, admin, "n2", 60, 0.4).await;
    wait_for_status(admin, "n2's slow start to end", |s| {
        node_status(s, "n2")["state"] == "up"
    })
    .await;
    let seen = share(addr, 60).await;
    assert_eq!(seen.get("n2"), Some(&20), "its full share: {seen:?}");
}

#[tokio::test]
async fn a_joining_node_slow_starts_under_weighted_round_robin() {
    let nodes = cluster(3).await;
    let extra = "[policy]\nname = \"weighted-round-robin\"\n[health]\nslow_start = \"3s\"\n";
    let sw = start_switch(&config_for(&refs(&nodes[..2]), extra)).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let body = format!(
        "{{\"name\": \"n2\", \"address\": \"{}\", \"weight\": 2}}",
        nodes[2].addr
    );
    let added = send(admin, Request::post("/nodes"), Bytes::from(body)).await;
    assert_eq!(added.status, StatusCode::CREATED, "{}", added.text());
    // Weight 2 of 1, 1, 2: 30 s of 60 requests against (60 - 30 s) / 2; less than half of
    // theirs while s < 0.4.
    assert_smaller_share_while_slow_starting(addr, admin, "n2", 60, 0.25).await;
    wait_for_status(admin, "n2's slow start to end", |s| {
        node_status(s, "n2")["state"] == "up"
    })
    .await;
    // Weights 1, 1, 2: half of the requests, give or take the credits the ramp left behind.
    let seen = share(addr, 60).await;
    let n2 = seen.get("n2").copied().unwrap_or(0);
    assert!((28..=32).contains(&n2), "its full weighted share: {seen:?}");
}
