//! `[[discovery]]` dns sources against a real DNS server (dnsmasq on a loopback port, from
//! `capstan_discovery::dns::testing`): SRV records added, removed, reweighted and moved to
//! another port while clients keep requesting, and no request fails; SERVFAIL, a stopped
//! server and NXDOMAIN within `hold` keep the last set; bad records (port 0, a target that
//! does not exist, an unusable address) and an address two sources give are skipped, shown
//! and counted, and never become a node. Each test returns early with a note when dnsmasq is
//! not installed.

use crate::common;

use capstan_discovery::dns::testing::{servfail_lines, Dnsmasq};
use common::*;

/// An SRV record for `_http._tcp.web.test` (or the `service` given) whose target is
/// `TARGET.web.test` at the back-end's port, and that target's A record (127.0.0.1).
fn srv(service: &str, target: &str, port: u16, priority: u16, weight: u16) -> String {
    format!(
        "srv-host={service},{target}.web.test,{port},{priority},{weight}\n\
         host-record={target}.web.test,127.0.0.1\n"
    )
}

fn web(target: &str, backend: &Backend, weight: u16) -> String {
    srv(
        "_http._tcp.web.test",
        target,
        backend.addr.port(),
        0,
        weight,
    )
}

/// A switch following `name` at `server`, re-resolving at least every second (the records'
/// TTL is 1 s), with `extra` keys and sources.
fn dns_config(server: &Dnsmasq, name: &str, extra: &str) -> String {
    let mut text = config_for(&[], "");
    text.push_str(&format!(
        "[[discovery]]\ndns = \"{name}\"\nname = \"web\"\nresolvers = [\"{}\"]\n\
         min_ttl = \"100ms\"\ntimeout = \"200ms\"\ninterval = \"100ms\"\n{extra}\n",
        server.addr()
    ));
    text
}

fn node_name(b: &Backend) -> String {
    format!("web-{}", b.addr)
}

fn source<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    (status["discovery"].as_array())
        .and_then(|all| all.iter().find(|s| s["name"] == name))
        .unwrap_or(&serde_json::Value::Null)
}

fn skipped(status: &serde_json::Value, name: &str) -> String {
    source(status, name)["skipped"].to_string()
}

#[tokio::test]
async fn srv_changes_are_followed_while_clients_keep_requesting() {
    let (a, b, c, a2) = (
        Backend::start("a").await,
        Backend::start("b").await,
        Backend::start("c").await,
        Backend::start("a2").await,
    );
    let records = web("a", &a, 1) + &web("b", &b, 1);
    let Some(mut server) = Dnsmasq::start(&records, 1).await else {
        return;
    };
    let sw = start_switch(&dns_config(&server, "_http._tcp.web.test", "")).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let traffic = Traffic::start(addr, 4);
    wait_until("traffic on a and b", || a.hits() > 10 && b.hits() > 10).await;
    let status = status_json(admin).await;
    assert_eq!(source(&status, "web")["kind"], "dns", "{status}");
    assert_eq!(
        source(&status, "web")["target"],
        "_http._tcp.web.test",
        "{status}"
    );
    assert_eq!(node_status(&status, &node_name(&a))["source"], "web");

    // Added: c.
    let records = web("a", &a, 1) + &web("b", &b, 1) + &web("c", &c, 1);
    server.set_records(&records).await;
    wait_until("c to get requests", || c.hits() > 10).await;

    // A new weight for b applies in place: its counters go on.
    let served = node_status(&status_json(admin).await, &node_name(&b))["served"]
        .as_u64()
        .unwrap();
    let records = web("a", &a, 1) + &web("b", &b, 5) + &web("c", &c, 1);
    server.set_records(&records).await;
    let status = wait_for_status(admin, "b's new weight", |s| {
        node_status(s, &node_name(&b))["weight"] == 5
    })
    .await;
    let now = node_status(&status, &node_name(&b))["served"].as_u64();
    assert!(now >= Some(served), "{served} then {now:?}");

    // a's record moves to another port (a2): the new address joins, the old one drains.
    let records = web("a", &a2, 1) + &web("b", &b, 5) + &web("c", &c, 1);
    server.set_records(&records).await;
    wait_for_status(admin, "a to leave", |s| {
        node_status(s, &node_name(&a)).is_null()
    })
    .await;
    wait_until("a2 to get requests", || a2.hits() > 10).await;

    // Removed: c. No new request reaches it once it is out.
    let records = web("a", &a2, 1) + &web("b", &b, 5);
    server.set_records(&records).await;
    assert_left_and_starved(admin, &node_name(&c), &c, &[&a2, &b]).await;
    let metrics = get(admin, "/metrics").await.text();
    assert!(
        metrics.contains("capstan_discovery_nodes{source=\"web\"} 2"),
        "{metrics}"
    );

    let (ok, failed) = traffic.finish().await;
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
}

#[tokio::test]
async fn servfail_a_stopped_server_and_nxdomain_within_hold_keep_the_last_set() {
    let (a, b) = (Backend::start("a").await, Backend::start("b").await);
    let name = "_http._tcp.web.example";
    let good = srv(name, "a", a.addr.port(), 0, 1) + &srv(name, "b", b.addr.port(), 0, 1);
    let Some(upstream) = Dnsmasq::start_servfail_upstream().await else {
        return;
    };
    let Some(mut server) = Dnsmasq::start(&good, 1).await else {
        return;
    };
    let sw = start_switch(&dns_config(&server, name, "hold = \"1s\"")).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let traffic = Traffic::start(addr, 4);
    wait_until("traffic on a and b", || a.hits() > 10 && b.hits() > 10).await;

    // SERVFAIL: an error in /status, both nodes stay and keep serving.
    server.set_records(&servfail_lines(&upstream)).await;
    let status = wait_for_status(admin, "SERVFAIL", |s| {
        source(s, "web")["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("SERVFAIL"))
    })
    .await;
    assert_eq!(source(&status, "web")["state"], "error", "{status}");
    assert_eq!(source(&status, "web")["nodes"], 2, "{status}");
    let (a_hits, b_hits) = (a.hits(), b.hits());
    wait_until("traffic on a and b", || {
        a.hits() > a_hits + 10 && b.hits() > b_hits + 10
    })
    .await;

    // Stopped: no answer; the same.
    server.stop();
    let status = wait_for_status(admin, "no answer", |s| {
        source(s, "web")["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("no answer"))
    })
    .await;
    assert_eq!(status["nodes"].as_array().unwrap().len(), 2, "{status}");
    let (a_hits, b_hits) = (a.hits(), b.hits());
    wait_until("traffic on a and b", || {
        a.hits() > a_hits + 10 && b.hits() > b_hits + 10
    })
    .await;

    // Back: ok again, b gone from the records.
    let only_a = srv(name, "a", a.addr.port(), 0, 1);
    server.set_records(&only_a).await;
    wait_for_status(admin, "ok without b", |s| {
        source(s, "web")["state"] == "ok" && node_status(s, &node_name(&b)).is_null()
    })
    .await;

    // NXDOMAIN: the name is gone. An empty list, held for `hold` (1 s): meanwhile a stays
    // and the reason shows. (After `hold` it would apply, but the switch never removes its
    // last node.)
    server.set_records("local=/example/\n").await;
    let status = wait_for_status(admin, "the NXDOMAIN note", |s| {
        skipped(s, "web").contains("NXDOMAIN")
    })
    .await;
    assert!(!node_status(&status, &node_name(&a)).is_null(), "{status}");
    let metrics = get(admin, "/metrics").await.text();
    assert!(
        metrics.contains("capstan_discovery_refreshes_total{source=\"web\",result=\"error\"}"),
        "{metrics}"
    );

    let (ok, failed) = traffic.finish().await;
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
}

#[tokio::test]
async fn bad_records_and_an_address_two_sources_give_are_skipped_shown_and_counted() {
    let (a, b, s) = (
        Backend::start("a").await,
        Backend::start("b").await,
        Backend::start("s").await,
    );
    let name = "_http._tcp.web.test";
    let records = web("a", &a, 2)
        + &format!("srv-host={name},zero.web.test,0,0,1\nhost-record=zero.web.test,127.0.0.1\n")
        + &format!("srv-host={name},gone.web.test,{},0,1\n", b.addr.port())
        + &format!("srv-host={name},any.web.test,80,0,1\nhost-record=any.web.test,0.0.0.0\n")
        // A higher priority value: standby, no node while a serves.
        + &srv(name, "b", b.addr.port(), 10, 1);
    let Some(server) = Dnsmasq::start(&records, 1).await else {
        return;
    };
    // A second source gives a's address again (its A record with a's port).
    let second = format!(
        "[[discovery]]\ndns = \"a.web.test:{}\"\nname = \"dup\"\nresolvers = [\"{}\"]\n\
         min_ttl = \"100ms\"\ninterval = \"100ms\"\n",
        a.addr.port(),
        server.addr()
    );
    let mut config = dns_config(&server, name, &second);
    config.push_str(&format!(
        "[[node]]\nname = \"s\"\naddress = \"{}\"\n",
        s.addr
    ));
    let sw = start_switch(&config).await;
    let admin = sw.admin_addr.unwrap();
    let status = wait_for_status(admin, "the clash", |s| {
        skipped(s, "dup").contains("in the cluster already")
    })
    .await;
    let web_skipped = skipped(&status, "web");
    for why in [
        "zero.web.test:0: port 0",
        "gone.web.test",
        "NXDOMAIN",
        "0.0.0.0:80: unspecified address",
    ] {
        assert!(web_skipped.contains(why), "{why} in {web_skipped}");
    }
    // Nodes: s (static) and a, once; no address with port 0, none unspecified, b standby.
    let mut addresses: Vec<String> = (status["nodes"].as_array().unwrap().iter())
        .map(|n| n["address"].as_str().unwrap().to_string())
        .collect();
    addresses.sort();
    let mut expected = vec![a.addr.to_string(), s.addr.to_string()];
    expected.sort();
    assert_eq!(addresses, expected, "{status}");
    assert_eq!(node_status(&status, &node_name(&a))["weight"], 2);
    assert_eq!(source(&status, "dup")["nodes"], 0, "{status}");
    let metrics = wait_for_metrics(admin, "the skipped gauges", |m| {
        m.contains("capstan_discovery_skipped{source=\"web\"} 3")
            && m.contains("capstan_discovery_skipped{source=\"dup\"} 1")
    })
    .await;
    assert!(
        metrics.contains("capstan_discovery_nodes{source=\"web\"} 1"),
        "{metrics}"
    );
}
