//! Runtime membership over the admin API, on real sockets: nodes join, drain and leave while
//! clients keep sending and no request fails; a drained node gets no new request; bad changes
//! are refused with the right status; LARD's placements survive reloads and membership changes.

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;

use bytes::Bytes;
use common::*;
use hyper::{Request, StatusCode};

async fn post(admin: SocketAddr, path: &str, body: &str) -> Answer {
    send(admin, Request::post(path), Bytes::from(body.to_string())).await
}

async fn delete(admin: SocketAddr, path: &str) -> Answer {
    send(admin, Request::delete(path), Bytes::new()).await
}

/// Starts `/hold` requests one at a time until one is held at `node`; returns them all.
async fn hold_one_at(
    addr: SocketAddr,
    node: &Backend,
    all: &[&Backend],
) -> Vec<tokio::task::JoinHandle<Answer>> {
    let mut holds = Vec::new();
    while node.held() == 0 {
        let total = |all: &[&Backend]| all.iter().map(|b| b.held()).sum::<u64>();
        let before = total(all);
        holds.push(tokio::spawn(async move { get(addr, "/hold").await }));
        wait_until("the hold request to arrive", || total(all) > before).await;
        assert!(holds.len() < 50, "no hold request reached {}", node.name);
    }
    holds
}

#[tokio::test]
async fn nodes_join_drain_and_leave_while_requests_flow_and_none_fails() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let c = Backend::start("c").await;
    let sw = start_switch(&config_for(&[&a, &b], "")).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let traffic = Traffic::start(addr, 4);
    wait_until("traffic on a and b", || a.hits() > 10 && b.hits() > 10).await;

    // Join: c takes requests at once.
    let body = format!("{{\"name\": \"c\", \"address\": \"{}\"}}", c.addr);
    let added = post(admin, "/nodes", &body).await;
    assert_eq!(added.status, StatusCode::CREATED, "{}", added.text());
    assert_eq!(status_json(admin).await["nodes"][2]["name"], "c");
    wait_until("c to get requests", || c.hits() > 10).await;

    // Drain b while a request is held there: b shows draining with the held request active,
    // and gets nothing new once what was on its way has arrived.
    let holds = hold_one_at(addr, &b, &[&a, &b, &c]).await;
    let drained = post(admin, "/nodes/b/drain", "").await;
    assert_eq!(drained.status, StatusCode::OK, "{}", drained.text());
    let held_at_b = b.held();
    let status = wait_for_status(admin, "only b's held requests to stay", |s| {
        node_status(s, "b")["active"].as_u64() == Some(held_at_b)
    })
    .await;
    assert_eq!(node_status(&status, "b")["draining"], true);
    assert_eq!(node_status(&status, "b")["state"], "draining");
    let (b_hits, a_hits, c_hits) = (b.hits(), a.hits(), c.hits());
    wait_until("more traffic on a and c", || {
        a.hits() > a_hits + 30 && c.hits() > c_hits + 30
    })
    .await;
    assert_eq!(b.hits(), b_hits, "a drained node gets no new request");

    // Remove b with its held request still in flight; the request finishes there.
    let removed = delete(admin, "/nodes/b").await;
    assert_eq!(removed.status, StatusCode::OK, "{}", removed.text());
    let removed: serde_json::Value = serde_json::from_slice(&removed.body).unwrap();
    assert_eq!(removed["active"].as_u64(), Some(held_at_b), "{removed}");
    let status = status_json(admin).await;
    assert!(node_status(&status, "b").is_null(), "{status}");
    for backend in [&a, &b, &c] {
        backend.release();
    }
    for hold in holds {
        let answer = hold.await.unwrap();
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    }

    // Undrain brings a drained node back.
    assert_eq!(
        post(admin, "/nodes/a/drain", "").await.status,
        StatusCode::OK
    );
    let undrained = post(admin, "/nodes/a/undrain", "").await;
    assert_eq!(undrained.status, StatusCode::OK, "{}", undrained.text());
    assert!(
        undrained.text().contains("\"draining\": false"),
        "{}",
        undrained.text()
    );
    let a_hits = a.hits();
    wait_until("a to get requests again", || a.hits() > a_hits + 10).await;

    let (ok, failed) = traffic.finish().await;
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
    assert!(ok > 100, "{ok}");
}

#[tokio::test]
async fn bad_membership_changes_are_refused_with_a_reason() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let sw = start_switch(&config_for(&[&a, &b], "")).await;
    let admin = sw.admin_addr.unwrap();
    let one_line = |answer: &Answer| {
        let text = answer.text();
        assert_eq!(text.trim_end().lines().count(), 1, "{text}");
        text
    };
    for (method, path) in [
        ("POST", "/nodes/zz/drain"),
        ("POST", "/nodes/zz/undrain"),
        ("DELETE", "/nodes/zz"),
    ] {
        let builder = Request::builder().method(method).uri(path);
        let answer = send(admin, builder, Bytes::new()).await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{method} {path}");
        assert!(one_line(&answer).contains("no node `zz` (nodes: a, b)"));
    }
    let cases = [
        (
            "/nodes?name=x&address=nowhere",
            "",
            StatusCode::BAD_REQUEST,
            "has no port",
        ),
        (
            "/nodes",
            "{\"address\": \"127.0.0.1:notaport\"}",
            StatusCode::BAD_REQUEST,
            "bad address",
        ),
        (
            "/nodes",
            "{\"address\": 5}",
            StatusCode::BAD_REQUEST,
            "bad JSON body",
        ),
        (
            "/nodes",
            "{\"adress\": \"127.0.0.1:1\"}",
            StatusCode::BAD_REQUEST,
            "unknown field",
        ),
        (
            "/nodes",
            "",
            StatusCode::BAD_REQUEST,
            "give the node's address",
        ),
        (
            "/nodes?address=127.0.0.1:1&weight=0",
            "",
            StatusCode::BAD_REQUEST,
            "weight",
        ),
        (
            "/nodes?name=a/b&address=127.0.0.1:1",
            "",
            StatusCode::BAD_REQUEST,
            "node name",
        ),
        (
            "/nodes?name=a&address=127.0.0.1:1",
            "",
            StatusCode::CONFLICT,
            "`a` exists already",
        ),
        (
            "/nodes/a/rename",
            "",
            StatusCode::NOT_FOUND,
            "no such admin page",
        ),
    ];
    for (path, body, expected, reason) in cases {
        let answer = post(admin, path, body).await;
        assert_eq!(answer.status, expected, "{path} {body}: {}", answer.text());
        assert!(
            one_line(&answer).contains(reason),
            "{path} {body}: {}",
            answer.text()
        );
    }
    let listed = get(admin, "/nodes").await;
    assert_eq!(listed.status, StatusCode::METHOD_NOT_ALLOWED);

    assert_eq!(delete(admin, "/nodes/a").await.status, StatusCode::OK);
    let last = delete(admin, "/nodes/b").await;
    assert_eq!(last.status, StatusCode::CONFLICT);
    assert!(one_line(&last).contains("last node"));
    let status = status_json(admin).await;
    assert_eq!(status["nodes"].as_array().unwrap().len(), 1, "{status}");
    assert_eq!(
        status["generation"], 2,
        "only the one removal changed the cluster"
    );
}

#[tokio::test]
async fn a_node_the_policy_names_cannot_be_removed() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let extra = "[policy]\nname = \"static-partitioning\"\n\
                 [policy.partitions]\nstatic = [\"a\"]\n";
    let sw = start_switch(&config_for(&[&a, &b], extra)).await;
    let admin = sw.admin_addr.unwrap();
    let refused = delete(admin, "/nodes/a").await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text());
    assert!(
        refused
            .text()
            .contains("not possible with the current policy"),
        "{}",
        refused.text()
    );
    assert_eq!(delete(admin, "/nodes/b").await.status, StatusCode::OK);
}

/// Which node each key is on, one request per key.
async fn placed(addr: SocketAddr, keys: &[String]) -> HashMap<String, String> {
    let paths: Vec<&str> = keys.iter().map(String::as_str).collect();
    placements(addr, &paths).await.into_iter().collect()
}

#[tokio::test]
async fn lard_keeps_keys_on_their_nodes_across_reload_join_and_removal() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let c = Backend::start("c").await;
    let dir = std::env::temp_dir().join(format!("capstan-member-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lard.toml");
    let policy = "[policy]\nname = \"lard\"\n";
    std::fs::write(&path, config_for(&[&a, &b], policy)).unwrap();
    let sw = capstan_switch::start(capstan_switch::Config::load(&path).unwrap())
        .await
        .unwrap();
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let keys: Vec<String> = (0..24).map(|i| format!("/k{i}")).collect();
    let before = placed(addr, &keys).await;
    assert!(before.values().any(|n| n == "a") && before.values().any(|n| n == "b"));

    // A reload that adds c: every key stays where it was.
    std::fs::write(&path, config_for(&[&a, &b, &c], policy)).unwrap();
    let reload = post(admin, "/reload", "").await;
    assert_eq!(reload.status, StatusCode::OK, "{}", reload.text());
    assert!(reload.text().contains("(joined: c)"), "{}", reload.text());
    assert_eq!(placed(addr, &keys).await, before, "after the reload");

    // New keys use c; then b leaves at run time: keys on a and c stay, b's move.
    let fresh: Vec<String> = (0..6).map(|i| format!("/new{i}")).collect();
    let mut before = before;
    before.extend(placed(addr, &fresh).await);
    assert!(before.values().any(|n| n == "c"), "{before:?}");
    assert_eq!(delete(admin, "/nodes/b").await.status, StatusCode::OK);
    let all: Vec<String> = keys.iter().chain(&fresh).cloned().collect();
    let after = placed(addr, &all).await;
    for key in &all {
        match before[key].as_str() {
            "b" => assert_ne!(after[key], "b", "{key}"),
            node => assert_eq!(after[key], node, "{key} stays on {node}"),
        }
    }

    // b joins again at run time: nothing moves back or away.
    let body = format!("{{\"name\": \"b\", \"address\": \"{}\"}}", b.addr);
    assert_eq!(
        post(admin, "/nodes", &body).await.status,
        StatusCode::CREATED
    );
    assert_eq!(placed(addr, &all).await, after, "after b joined again");

    // A reload makes the file the truth again: b (added at run time) is listed in it, so it
    // stays; the keys stay too.
    let reload = post(admin, "/reload", "").await;
    assert_eq!(reload.status, StatusCode::OK, "{}", reload.text());
    assert_eq!(placed(addr, &all).await, after, "after the second reload");
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_reload_undoes_runtime_membership_changes() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let c = Backend::start("c").await;
    let dir = std::env::temp_dir().join(format!("capstan-member-undo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("switch.toml");
    std::fs::write(&path, config_for(&[&a, &b], "")).unwrap();
    let sw = capstan_switch::start(capstan_switch::Config::load(&path).unwrap())
        .await
        .unwrap();
    let admin = sw.admin_addr.unwrap();
    let body = format!("{{\"name\": \"c\", \"address\": \"{}\"}}", c.addr);
    assert_eq!(
        post(admin, "/nodes", &body).await.status,
        StatusCode::CREATED
    );
    assert_eq!(delete(admin, "/nodes/b").await.status, StatusCode::OK);
    assert_eq!(
        post(admin, "/nodes/a/drain", "").await.status,
        StatusCode::OK
    );
    let reload = post(admin, "/reload", "").await;
    assert_eq!(reload.status, StatusCode::OK, "{}", reload.text());
    assert!(
        reload.text().contains("(joined: b; left: c)"),
        "{}",
        reload.text()
    );
    let status = status_json(admin).await;
    let names: Vec<&str> = status["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "b"], "the file's nodes");
    assert_eq!(
        node_status(&status, "a")["draining"],
        true,
        "a drain outlives a reload"
    );
    let _ = std::fs::remove_dir_all(dir);
}
