//! `[[discovery]]` etcd sources against a real etcd on loopback (skipped with a note when etcd
//! is not installed), while clients keep requesting and none fails: keys put, deleted and
//! expired with their lease add and remove nodes; a restart of etcd keeps the last set and the
//! watch resumes; a registration shut down drains its node before it stops; a value that is
//! not a node is left out, listed in `/status` and counted, never a node; etcd down at start
//! leaves the source empty until it comes up.

use crate::common;

use std::time::Duration;

use capstan_discovery::etcd::{register, NodeValue, Settings};
use capstan_discovery::testing::{EtcdKv, EtcdServer};
use common::*;

const PREFIX: &str = "/capstan/nodes/";

fn etcd_config(server: &EtcdServer, static_nodes: &[&Backend]) -> String {
    let mut text = config_for(static_nodes, "");
    text.push_str(&format!(
        "[[discovery]]\netcd = [\"{}\"]\nprefix = \"{PREFIX}\"\ninterval = \"100ms\"\nhold = \"1s\"\ntimeout = \"2s\"\n",
        server.endpoint()
    ));
    text
}

fn key(b: &Backend) -> String {
    format!("{PREFIX}{}", b.name)
}

fn value(b: &Backend) -> String {
    format!("{{\"address\":\"{}\"}}", b.addr)
}

fn node_name(b: &Backend) -> String {
    format!("etcd-{}", b.addr)
}

fn source_status(status: &serde_json::Value) -> &serde_json::Value {
    &status["discovery"][0]
}

/// The test's own etcd client, to put and delete keys as a registry's users would.
fn etcd(server: &EtcdServer) -> EtcdKv {
    server.kv()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_deletes_and_lease_expiry_move_nodes_under_load() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (a, b, c) = (
        Backend::start("a").await,
        Backend::start("b").await,
        Backend::start("c").await,
    );
    let kv = etcd(&server);
    kv.put(key(&a), value(&a)).unwrap();
    kv.put(key(&b), value(&b)).unwrap();
    // No static node: etcd alone gives the cluster its nodes (read once before the start).
    let sw = start_switch(&etcd_config(&server, &[])).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let status = status_json(admin).await;
    assert_eq!(source_status(&status)["kind"], "etcd", "{status}");
    assert_eq!(source_status(&status)["nodes"], 2, "{status}");
    let traffic = Traffic::start(addr, 4);
    wait_until("traffic on a and b", || a.hits() > 10 && b.hits() > 10).await;

    // c is put: it joins.
    kv.put(key(&c), value(&c)).unwrap();
    wait_until("c to get requests", || c.hits() > 10).await;

    // b is deleted: it drains, and gets no new requests.
    kv.delete(key(&b)).unwrap();
    assert_left_and_starved(admin, &node_name(&b), &b, &[&a, &c]).await;

    // b comes back under a lease nobody renews: it joins, and leaves when the lease expires.
    let lease = kv.lease_grant(2).unwrap();
    kv.put_leased(key(&b), value(&b), lease).unwrap();
    wait_for_status(admin, "b back", |s| {
        !node_status(s, &node_name(&b)).is_null()
    })
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !node_status(&status_json(admin).await, &node_name(&b)).is_null() {
        assert!(std::time::Instant::now() < deadline, "b outlived its lease");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A new weight applies in place: a keeps its counters.
    let served = node_status(&status_json(admin).await, &node_name(&a))["served"]
        .as_u64()
        .unwrap();
    let weighted = format!("{{\"address\":\"{}\",\"weight\":4}}", a.addr);
    kv.put(key(&a), weighted).unwrap();
    let status = wait_for_status(admin, "a's new weight", |s| {
        node_status(s, &node_name(&a))["weight"] == 4
    })
    .await;
    assert!(node_status(&status, &node_name(&a))["served"].as_u64() >= Some(served));
    assert_eq!(source_status(&status)["state"], "ok", "{status}");

    let (ok, failed) = traffic.finish().await;
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_restart_keeps_the_last_set_and_the_watch_resumes() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (a, b, c) = (
        Backend::start("a").await,
        Backend::start("b").await,
        Backend::start("c").await,
    );
    let kv = etcd(&server);
    kv.put(key(&a), value(&a)).unwrap();
    kv.put(key(&b), value(&b)).unwrap();
    let sw = start_switch(&etcd_config(&server, &[])).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let traffic = Traffic::start(addr, 4);
    wait_until("traffic on a and b", || a.hits() > 10 && b.hits() > 10).await;

    // etcd goes down: an error in /status, the nodes stay and keep serving.
    let mut server = tokio::task::spawn_blocking(move || {
        let mut server = server;
        server.stop();
        server
    })
    .await
    .unwrap();
    let status = wait_for_status(admin, "the error state", |s| {
        source_status(s)["state"] == "error"
    })
    .await;
    let error = source_status(&status)["last_error"].as_str().unwrap();
    assert!(error.starts_with("etcd http://127.0.0.1:"), "{error}");
    assert_eq!(source_status(&status)["nodes"], 2, "{status}");
    let (a_hits, b_hits) = (a.hits(), b.hits());
    wait_until("traffic on a and b while etcd is down", || {
        a.hits() > a_hits + 10 && b.hits() > b_hits + 10
    })
    .await;

    // Back on the same data: the watch resumes from its revision; changes made since show.
    let server = tokio::task::spawn_blocking(move || {
        server.restart().expect("etcd restarts");
        server
    })
    .await
    .unwrap();
    let kv = etcd(&server);
    kv.delete(key(&a)).unwrap();
    kv.put(key(&c), value(&c)).unwrap();
    let status = wait_for_status(admin, "a out and c in", |s| {
        node_status(s, &node_name(&a)).is_null() && !node_status(s, &node_name(&c)).is_null()
    })
    .await;
    assert!(!node_status(&status, &node_name(&b)).is_null(), "{status}");
    wait_for_status(admin, "ok again", |s| source_status(s)["state"] == "ok").await;
    wait_until("c to get requests", || c.hits() > 10).await;
    let metrics = get(admin, "/metrics").await.text();
    assert!(
        metrics.contains("capstan_discovery_refreshes_total{source=\"etcd\",result=\"error\"}"),
        "{metrics}"
    );
    let (ok, failed) = traffic.finish().await;
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_shut_down_drains_its_node_before_it_stops() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (a, b) = (Backend::start("a").await, Backend::start("b").await);
    let settings = Settings::new(vec![server.endpoint()]);
    let ttl = Duration::from_secs(2);
    let reg_a = register(settings.clone(), PREFIX, "a", value(&a).into_bytes(), ttl);
    let _reg_a = reg_a.await.unwrap();
    let json = NodeValue::new(b.addr.to_string()).to_json();
    let reg_b = register(settings, PREFIX, "b", json, ttl).await.unwrap();
    let sw = start_switch(&etcd_config(&server, &[])).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let traffic = Traffic::start(addr, 4);
    wait_until("traffic on a and b", || a.hits() > 10 && b.hits() > 10).await;
    // What `capstan origin --register` does on SIGTERM: delete the key, wait for the
    // switches to drain the node, then stop serving.
    reg_b.shutdown().await.unwrap();
    wait_for_status(admin, "b to leave", |s| {
        node_status(s, &node_name(&b)).is_null()
    })
    .await;
    let _dead = stop(b).await;
    let a_hits = a.hits();
    wait_until("more traffic on a", || a.hits() > a_hits + 50).await;
    let (ok, failed) = traffic.finish().await;
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_that_is_not_a_node_is_left_out_shown_and_counted() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let (s, a) = (Backend::start("s").await, Backend::start("a").await);
    let kv = etcd(&server);
    kv.put(key(&a), value(&a)).unwrap();
    let sw = start_switch(&etcd_config(&server, &[&s])).await;
    let admin = sw.admin_addr.unwrap();
    kv.put(format!("{PREFIX}junk"), "hello").unwrap();
    kv.put(format!("{PREFIX}zero"), "{\"address\":\"127.0.0.1:0\"}")
        .unwrap();
    // Another key with a's address (a copy left behind): a is not listed twice.
    kv.put(format!("{PREFIX}twin"), value(&a)).unwrap();
    let status = wait_for_status(admin, "three skipped", |st| {
        source_status(st)["skipped"].as_array().map(Vec::len) == Some(3)
    })
    .await;
    let skipped: Vec<&str> = source_status(&status)["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap())
        .collect();
    assert!(
        skipped[0].starts_with("key `/capstan/nodes/junk`: not a node: "),
        "{skipped:?}"
    );
    assert!(skipped[1].contains("key `/capstan/nodes/zero`") && skipped[1].contains("port 0"));
    assert!(
        skipped[2].starts_with("key `/capstan/nodes/twin`: listed twice"),
        "{skipped:?}"
    );
    // Only s (static) and a are nodes; the source is fine otherwise.
    let nodes = status["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2, "{status}");
    assert_eq!(source_status(&status)["state"], "ok", "{status}");
    let metrics = get(admin, "/metrics").await.text();
    assert!(
        metrics.contains("capstan_discovery_skipped{source=\"etcd\"} 3"),
        "{metrics}"
    );
    // Fixed: no longer skipped.
    kv.delete(format!("{PREFIX}junk")).unwrap();
    kv.delete(format!("{PREFIX}zero")).unwrap();
    kv.delete(format!("{PREFIX}twin")).unwrap();
    wait_for_status(admin, "nothing skipped", |st| {
        source_status(st)["skipped"] == serde_json::json!([])
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_down_at_start_starts_empty_and_its_nodes_join_when_it_comes_up() {
    let Some(mut server) = EtcdServer::start() else {
        return;
    };
    let (s, a) = (Backend::start("s").await, Backend::start("a").await);
    let kv = etcd(&server);
    kv.put(key(&a), value(&a)).unwrap();
    server.stop();
    let sw = start_switch(&etcd_config(&server, &[&s])).await;
    let admin = sw.admin_addr.unwrap();
    let status = status_json(admin).await;
    assert_eq!(source_status(&status)["state"], "error", "{status}");
    assert_eq!(status["nodes"].as_array().unwrap().len(), 1, "{status}");
    let server = tokio::task::spawn_blocking(move || {
        server.restart().expect("etcd starts");
        server
    })
    .await
    .unwrap();
    let status = wait_for_status(admin, "a to join", |st| {
        !node_status(st, &node_name(&a)).is_null()
    })
    .await;
    assert_eq!(source_status(&status)["state"], "ok", "{status}");
    drop(server);
}
