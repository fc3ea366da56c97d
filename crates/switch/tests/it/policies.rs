//! Each policy's placement, seen over HTTP through the switch's X-Capstan-Node header.

use crate::common;

use std::collections::HashMap;

use common::*;
use hyper::StatusCode;

#[tokio::test]
async fn every_policy_answers() {
    let nodes = cluster(3).await;
    for policy in capstan_core::PolicySpec::names() {
        let extra = if policy == "static-partitioning" {
            "[policy]\nname = \"static-partitioning\"\n[policy.partitions]\ncpu = [\"n0\"]\n"
                .to_string()
        } else {
            format!("[policy]\nname = \"{policy}\"\n")
        };
        let sw = start_switch(&config_for(&refs(&nodes), &extra)).await;
        for path in [
            "/a.html",
            "/cgi-bin/cpu_med.cgi",
            "/cgi-bin/disk_load.cgi?file=1",
        ] {
            let ans = get(sw.listen_addrs[0], path).await;
            assert_eq!(ans.status, StatusCode::OK, "{policy} {path}");
            assert!(ans.node().starts_with('n'), "{policy}");
        }
        let status = status_json(sw.admin_addr.unwrap()).await;
        assert_eq!(status["policy"], *policy);
    }
}

/// CAP gives every node an equal share of every class, within ±1 per class.
#[tokio::test]
async fn cap_spreads_every_class_evenly() {
    let nodes = cluster(4).await;
    let sw = start_switch(&config_for(&refs(&nodes), "[policy]\nname = \"cap\"\n")).await;
    let addr = sw.listen_addrs[0];
    // An uneven mix, interleaved: 13 static, 7 cpu, 5 disk, 3 cpu-disk.
    let mut left = [
        ("/f.html", 13),
        ("/cgi-bin/cpu_med.cgi", 7),
        ("/cgi-bin/disk_load.cgi", 5),
        ("/secure/cgi-bin/buy.cgi", 3),
    ];
    let mut paths = Vec::new();
    while left.iter().any(|(_, n)| *n > 0) {
        for (path, n) in left.iter_mut().filter(|(_, n)| *n > 0) {
            paths.push(*path);
            *n -= 1;
        }
    }
    let mut per_class: HashMap<String, HashMap<String, usize>> = HashMap::new();
    for path in &paths {
        let ans = get(addr, path).await;
        *per_class
            .entry(ans.class())
            .or_default()
            .entry(ans.node())
            .or_insert(0) += 1;
    }
    for (class, counts) in &per_class {
        let total: usize = counts.values().sum();
        let counts: Vec<usize> = (0..4)
            .map(|i| counts.get(&format!("n{i}")).copied().unwrap_or(0))
            .collect();
        let (min, max) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(max - min <= 1, "class {class}: {counts:?}");
        assert_eq!(counts.iter().sum::<usize>(), total);
    }
    assert_eq!(per_class.len(), 4, "{per_class:?}");
}

/// LARD sends a path to one node while that node is under T_high.
#[tokio::test]
async fn lard_keeps_a_path_on_one_node_until_the_threshold() {
    let nodes = cluster(3).await;
    let sw = start_switch(&config_for(
        &refs(&nodes),
        "[policy]\nname = \"lard\"\nt_low = 1\nt_high = 2\n",
    ))
    .await;
    let addr = sw.listen_addrs[0];
    // One at a time, nothing is ever busy: every request for a path goes to the same node.
    for path in ["/x.html", "/y.html", "/z.html"] {
        let placed = placements(addr, &[path; 6]).await;
        assert_eq!(tally(&placed).len(), 1, "{path}: {placed:?}");
    }
    // Many at once on one path, each held at its node until the end: its node passes T_high,
    // and the path moves. Each is at a node before the next is sent, so the requests overlap
    // however slowly this machine runs them.
    let held = || nodes.iter().map(Backend::held).sum::<u64>();
    let mut tasks = Vec::new();
    for i in 1..=8 {
        tasks.push(tokio::spawn(async move { get(addr, "/hold").await.node() }));
        wait_until("the request at a node", || held() == i).await;
    }
    for node in &nodes {
        node.release();
    }
    let mut seen = HashMap::new();
    for t in tasks {
        *seen.entry(t.await.unwrap()).or_insert(0) += 1;
    }
    assert!(seen.len() >= 2, "overloaded target was relieved: {seen:?}");
}

/// Static partitioning keeps each class within its subset of nodes.
#[tokio::test]
async fn static_partitioning_respects_its_subsets() {
    let nodes = cluster(4).await;
    let extra = "[policy]\nname = \"static-partitioning\"\n\
                 [policy.partitions]\ncpu = [\"n0\", \"n1\"]\ndisk = [\"n2\"]\nstatic = [\"n3\"]\n";
    let sw = start_switch(&config_for(&refs(&nodes), extra)).await;
    let addr = sw.listen_addrs[0];
    let cpu = tally(&placements(addr, &["/cgi-bin/cpu_light.cgi"; 8]).await);
    assert_eq!(cpu.keys().len(), 2);
    assert!(cpu.contains_key("n0") && cpu.contains_key("n1"), "{cpu:?}");
    let disk = tally(&placements(addr, &["/cgi-bin/disk_load.cgi"; 4]).await);
    assert_eq!(disk.keys().collect::<Vec<_>>(), ["n2"]);
    let stat = tally(&placements(addr, &["/a.html", "/b.html", "/c.gif"]).await);
    assert_eq!(stat.keys().collect::<Vec<_>>(), ["n3"]);
}

/// Consistent hashing: removing one of n nodes moves about 1/n of the keys, and only those that
/// were on the removed node.
#[tokio::test]
async fn consistent_hash_moves_about_one_nth_of_keys_when_a_node_goes() {
    let nodes = cluster(4).await;
    let keys: Vec<String> = (0..200).map(|i| format!("/obj/{i}.html")).collect();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let policy = "[policy]\nname = \"consistent-hash\"\nepsilon = 10.0\n";
    let sw4 = start_switch(&config_for(&refs(&nodes), policy)).await;
    let before = placements(sw4.listen_addrs[0], &key_refs).await;
    let sw3 = start_switch(&config_for(&refs(&nodes[..3]), policy)).await;
    let after = placements(sw3.listen_addrs[0], &key_refs).await;
    let moved: Vec<_> = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b.1 != a.1)
        .collect();
    for (b, _) in &moved {
        assert_eq!(b.1, "n3", "only keys of the removed node move: {b:?}");
    }
    let share = moved.len() as f64 / keys.len() as f64;
    assert!(
        (0.12..=0.40).contains(&share),
        "moved {share:.2} of keys, ≈ 1/4 expected"
    );
    // And the mapping is stable: the same key, the same node.
    let again = placements(sw4.listen_addrs[0], &key_refs[..20]).await;
    assert_eq!(&before[..20], &again[..]);
}

/// Weighted round robin follows the configured weights.
#[tokio::test]
async fn weighted_round_robin_follows_weights() {
    let nodes = cluster(2).await;
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\ndebug_headers = true\n[policy]\nname = \"weighted-round-robin\"\n\
         [[node]]\nname = \"n0\"\naddress = \"{}\"\nweight = 3\n\
         [[node]]\nname = \"n1\"\naddress = \"{}\"\nweight = 1\n",
        nodes[0].addr, nodes[1].addr
    );
    let sw = start_switch(&text).await;
    let counts = tally(&placements(sw.listen_addrs[0], &["/"; 40]).await);
    assert_eq!(counts["n0"], 30, "{counts:?}");
    assert_eq!(counts["n1"], 10, "{counts:?}");
}

/// Least connections steers new requests away from a node busy with slow ones.
#[tokio::test]
async fn least_connections_avoids_the_busy_node() {
    let nodes = cluster(2).await;
    let sw = start_switch(&config_for(
        &refs(&nodes),
        "[policy]\nname = \"least-connections\"\n",
    ))
    .await;
    let addr = sw.listen_addrs[0];
    let first = get(addr, "/").await.node();
    // Three requests the nodes hold until the end: busy for as long as the test needs them.
    let slow: Vec<_> = (0..3)
        .map(|_| tokio::spawn(async move { get(addr, "/hold").await.node() }))
        .collect();
    wait_until("the three at the nodes", || {
        nodes.iter().map(Backend::held).sum::<u64>() == 3
    })
    .await;
    let status = status_json(sw.admin_addr.unwrap()).await;
    let active: Vec<u64> = (0..2)
        .map(|i| status["nodes"][i]["active"].as_u64().unwrap())
        .collect();
    assert_eq!(active.iter().sum::<u64>(), 3, "{active:?}");
    let busy = if active[0] > active[1] { "n0" } else { "n1" };
    let quick = tally(&placements(addr, &["/"; 4]).await);
    assert!(
        !quick.contains_key(busy) || active[0] == active[1],
        "{quick:?} busy {busy}"
    );
    let _ = first;
    for node in &nodes {
        node.release();
    }
    for t in slow {
        t.await.unwrap();
    }
}

/// CAP-load skips a node whose gathered load is over the bound, and takes it back when its load
/// drops.
#[tokio::test]
async fn cap_load_skips_nodes_reporting_high_load() {
    let nodes = cluster(3).await;
    nodes[1]
        .load_percent
        .store(97, std::sync::atomic::Ordering::Relaxed);
    // Never silent here (the default is three intervals, 150 ms, which a busy machine can
    // hold the gatherer back for): this test is about the load the nodes report.
    let extra = "[policy]\nname = \"cap-load\"\nmax_load = 0.9\n\
                 [load]\npath = \"/_capstan/load\"\ninterval = \"50ms\"\nsilent_after = \"1h\"\n";
    let sw = start_switch(&config_for(&refs(&nodes), extra)).await;
    let admin = sw.admin_addr.unwrap();
    let addr = sw.listen_addrs[0];
    wait_for_load(admin, 1, 0.97).await;
    let seen = tally(&placements(addr, &["/cgi-bin/cpu_light.cgi"; 12]).await);
    assert!(
        !seen.contains_key("n1"),
        "the loaded node is skipped: {seen:?}"
    );
    assert_eq!(seen.len(), 2, "{seen:?}");
    nodes[1]
        .load_percent
        .store(10, std::sync::atomic::Ordering::Relaxed);
    wait_for_load(admin, 1, 0.1).await;
    let seen = tally(&placements(addr, &["/cgi-bin/cpu_light.cgi"; 12]).await);
    assert_eq!(seen.get("n1"), Some(&4), "back in rotation: {seen:?}");
}

/// Polls `/status` until node `node` shows `load` (gathered), failing after 10 s.
async fn wait_for_load(admin: std::net::SocketAddr, node: usize, load: f64) {
    let what = format!("node {node} to show load {load}");
    wait_for_status(admin, &what, |s| s["nodes"][node]["load"] == load).await;
}
