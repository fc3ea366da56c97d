//! `[[discovery]]` file sources on real sockets and real files: nodes join and leave as the
//! file is rewritten (atomically, temp + rename) while clients keep requesting and none fails;
//! a half-written, deleted or invalid file keeps the last good set and shows in `/status`; an
//! explicitly empty list is applied only after `hold`.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use hyper::{Request, StatusCode};

/// A fresh directory for one test's files.
fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-discovery-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Replaces `path` the way a deploy tool should: a temporary file renamed over it.
fn write_atomically(path: &Path, text: &str) {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, text).unwrap();
    std::fs::rename(&temp, path).unwrap();
}

fn json_nodes(nodes: &[&Backend]) -> String {
    let entries: Vec<String> = nodes
        .iter()
        .map(|b| format!("{{\"address\": \"{}\"}}", b.addr))
        .collect();
    format!("{{\"nodes\": [{}]}}", entries.join(", "))
}

fn discovery_config(file: &Path, extra: &str, static_nodes: &[&Backend]) -> String {
    let mut text = config_for(static_nodes, "");
    text.push_str(&format!(
        "[[discovery]]\nfile = \"{}\"\ninterval = \"50ms\"\n{extra}\n",
        file.display()
    ));
    text
}

fn node_name(b: &Backend) -> String {
    format!("file-{}", b.addr)
}

fn source_status(status: &serde_json::Value) -> &serde_json::Value {
    &status["discovery"][0]
}

#[tokio::test]
async fn a_watched_file_adds_and_removes_nodes_and_bad_files_keep_the_last_good_set() {
    let (a, b, c) = (
        Backend::start("a").await,
        Backend::start("b").await,
        Backend::start("c").await,
    );
    let dir = temp_dir("flow");
    let file = dir.join("nodes.json");
    write_atomically(&file, &json_nodes(&[&a, &b]));
    // No static node: the file alone gives the cluster its nodes.
    let sw = start_switch(&discovery_config(&file, "", &[])).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let traffic = Traffic::start(addr, 4);
    wait_until("traffic on a and b", || a.hits() > 10 && b.hits() > 10).await;
    let status = status_json(admin).await;
    assert_eq!(source_status(&status)["state"], "ok", "{status}");
    assert_eq!(source_status(&status)["kind"], "file", "{status}");
    assert_eq!(source_status(&status)["nodes"], 2, "{status}");
    assert_eq!(
        node_status(&status, &node_name(&a))["source"],
        "file",
        "{status}"
    );

    // A third node joins.
    write_atomically(&file, &json_nodes(&[&a, &b, &c]));
    wait_until("c to get requests", || c.hits() > 10).await;
    let a_before = node_status(&status_json(admin).await, &node_name(&a))["served"]
        .as_u64()
        .unwrap();

    // b leaves: no new requests reach it once it is out of the cluster.
    write_atomically(&file, &json_nodes(&[&a, &c]));
    assert_left_and_starved(admin, &node_name(&b), &b, &[&a, &c]).await;

    // Half-written JSON: an error in /status, the nodes stay, requests keep succeeding.
    std::fs::write(&file, "{\"nodes\": [{\"address\": \"127.0.0.1:1").unwrap();
    let status = wait_for_status(admin, "the error state", |s| {
        source_status(s)["state"] == "error"
    })
    .await;
    let error = source_status(&status)["last_error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(error.contains("bad JSON"), "{error}");
    assert_eq!(source_status(&status)["nodes"], 2, "{status}");
    assert!(source_status(&status)["failures"].as_u64().unwrap() >= 1);
    assert!(!node_status(&status, &node_name(&a)).is_null(), "{status}");
    assert!(!node_status(&status, &node_name(&c)).is_null(), "{status}");
    let (a_hits, c_hits) = (a.hits(), c.hits());
    wait_until("traffic on a and c", || {
        a.hits() > a_hits + 10 && c.hits() > c_hits + 10
    })
    .await;

    // The file deleted: the same.
    std::fs::remove_file(&file).unwrap();
    let status = wait_for_status(admin, "the missing file", |s| {
        source_status(s)["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("cannot read"))
    })
    .await;
    assert_eq!(status["nodes"].as_array().unwrap().len(), 2, "{status}");
    let (a_hits, c_hits) = (a.hits(), c.hits());
    wait_until("traffic on a and c", || {
        a.hits() > a_hits + 10 && c.hits() > c_hits + 10
    })
    .await;

    // Back with a good file: ok again; a kept its runtime (its counters went on).
    write_atomically(&file, &json_nodes(&[&a, &c]));
    let status = wait_for_status(admin, "ok again", |s| source_status(s)["state"] == "ok").await;
    let a_now = node_status(&status, &node_name(&a))["served"]
        .as_u64()
        .unwrap();
    assert!(a_now > a_before, "{a_before} then {a_now}");
    let metrics = get(admin, "/metrics").await.text();
    assert!(
        metrics.contains("capstan_discovery_nodes{source=\"file\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("capstan_discovery_refreshes_total{source=\"file\",result=\"error\"}"),
        "{metrics}"
    );

    let (ok, failed) = traffic.finish().await;
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_empty_list_waits_for_hold_and_a_bad_entry_rejects_the_whole_file() {
    let (s, d) = (Backend::start("s").await, Backend::start("d").await);
    let dir = temp_dir("hold");
    let file = dir.join("nodes.toml");
    write_atomically(
        &file,
        &format!("[[node]]\naddress = \"{}\"\nweight = 2\n", d.addr),
    );
    let config = discovery_config(&file, "hold = \"600ms\"", &[&s]);
    let sw = start_switch(&config).await;
    let admin = sw.admin_addr.unwrap();
    let status = status_json(admin).await;
    assert_eq!(
        node_status(&status, &node_name(&d))["weight"],
        2,
        "{status}"
    );
    assert!(!node_status(&status, "s").is_null(), "{status}");
    assert!(node_status(&status, "s")["source"].is_null(), "{status}");

    // A bad entry (port 0): the whole file is refused with a clear message; d stays.
    write_atomically(
        &file,
        &format!(
            "[[node]]\naddress = \"{}\"\n[[node]]\naddress = \"127.0.0.1:0\"\n",
            s.addr
        ),
    );
    let status = wait_for_status(admin, "the error state", |s| {
        source_status(s)["state"] == "error"
    })
    .await;
    let error = source_status(&status)["last_error"].as_str().unwrap();
    assert!(error.contains("node 2 (`127.0.0.1:0`): port 0"), "{error}");
    assert!(!node_status(&status, &node_name(&d)).is_null(), "{status}");

    // An explicitly empty list: applied, but only once it has lasted `hold`.
    let emptied = Instant::now();
    write_atomically(&file, "# no nodes\n");
    wait_for_status(admin, "d to leave", |s| {
        node_status(s, &node_name(&d)).is_null()
    })
    .await;
    assert!(
        emptied.elapsed() >= Duration::from_millis(600),
        "applied after {:?}",
        emptied.elapsed()
    );
    // The static node is never removed.
    let status = status_json(admin).await;
    assert!(!node_status(&status, "s").is_null(), "{status}");
    assert_eq!(source_status(&status)["nodes"], 0, "{status}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_reload_keeps_discovered_nodes_and_their_counters() {
    let (s, d) = (Backend::start("s").await, Backend::start("d").await);
    let dir = temp_dir("reload");
    let file = dir.join("nodes.json");
    write_atomically(&file, &json_nodes(&[&d]));
    let config = dir.join("switch.toml");
    std::fs::write(&config, discovery_config(&file, "", &[&s])).unwrap();
    let sw = capstan_switch::start(capstan_switch::Config::load(&config).unwrap())
        .await
        .unwrap();
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    while d.hits() < 5 {
        assert_eq!(get(addr, "/slow?ms=1").await.status, StatusCode::OK);
    }
    let served = node_status(&status_json(admin).await, &node_name(&d))["served"]
        .as_u64()
        .unwrap();
    assert!(served >= 5, "{served}");

    let reload = send(admin, Request::post("/reload"), Bytes::new()).await;
    assert_eq!(reload.status, StatusCode::OK, "{}", reload.text());
    assert!(!reload.text().contains("left"), "{}", reload.text());
    let status = status_json(admin).await;
    let after = node_status(&status, &node_name(&d))["served"].as_u64();
    assert!(after >= Some(served), "{status}");

    // A new weight applies to the node in place: its counters go on.
    write_atomically(
        &file,
        &format!(
            "{{\"nodes\": [{{\"address\": \"{}\", \"weight\": 5}}]}}",
            d.addr
        ),
    );
    let status = wait_for_status(admin, "the new weight", |s| {
        node_status(s, &node_name(&d))["weight"] == 5
    })
    .await;
    let after = node_status(&status, &node_name(&d))["served"].as_u64();
    assert!(after >= Some(served), "{status}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_source_added_by_a_reload_starts_and_one_taken_out_stops() {
    let (s, d, e) = (
        Backend::start("s").await,
        Backend::start("d").await,
        Backend::start("e").await,
    );
    let dir = temp_dir("added");
    let (first, second) = (dir.join("first.json"), dir.join("second.json"));
    write_atomically(&first, &json_nodes(&[&d]));
    write_atomically(&second, &json_nodes(&[&e]));
    let config = dir.join("switch.toml");
    std::fs::write(&config, discovery_config(&first, "", &[&s])).unwrap();
    let sw = capstan_switch::start(capstan_switch::Config::load(&config).unwrap())
        .await
        .unwrap();
    let admin = sw.admin_addr.unwrap();

    let mut text = discovery_config(&first, "", &[&s]);
    text.push_str(&format!(
        "[[discovery]]\nname = \"more\"\nfile = \"{}\"\ninterval = \"50ms\"\n",
        second.display()
    ));
    std::fs::write(&config, &text).unwrap();
    let reload = send(admin, Request::post("/reload"), Bytes::new()).await;
    assert_eq!(reload.status, StatusCode::OK, "{}", reload.text());
    let more = format!("more-{}", e.addr);
    let status = wait_for_status(admin, "the added source's node", |s| {
        node_status(s, &more)["name"] == more.as_str()
    })
    .await;
    let sources: Vec<&str> = (status["discovery"].as_array().unwrap().iter())
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["file", "more"], "{status}");
    assert_eq!(
        status["discovery"][1]["target"],
        second.display().to_string()
    );

    // Taken out again: its node leaves with the reload, and the source with it.
    std::fs::write(&config, discovery_config(&first, "", &[&s])).unwrap();
    let reload = send(admin, Request::post("/reload"), Bytes::new()).await;
    assert_eq!(reload.status, StatusCode::OK, "{}", reload.text());
    // The source stops first and its nodes leave the cluster after it: wait for both.
    let status = wait_for_status(admin, "the source and its node to leave /status", |s| {
        s["discovery"].as_array().is_some_and(|a| a.len() == 1) && node_status(s, &more).is_null()
    })
    .await;
    assert_eq!(
        node_status(&status, &node_name(&d))["name"],
        node_name(&d).as_str()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
