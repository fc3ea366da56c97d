//! Data placement (`partition = "K/N"`) over real loopback HTTP: a file on another node's disk
//! costs a remote (NFS) read, which the node's own report shows — in its disk busy time (exact,
//! from the model) and in its per-kind service times (measured by the node).

use crate::common;

use capstan_core::report::Partition;
use capstan_core::{hash_key, LoadReport};
use capstan_model::NodeParams;
use capstan_workload::TreeKind;
use common::*;

/// Two 500 KB files of the webstone-2000 tree: one that partition 0 of 2 holds, one it does not.
fn local_and_remote_500k() -> (String, String) {
    let names: Vec<String> = std::iter::once("/file500k.html".to_string())
        .chain((1..18).map(|i| format!("/file500k_{i}.html")))
        .collect();
    let first = Partition { index: 0, count: 2 };
    let holds = |p: &String| first.holds(hash_key(p));
    let local = names.iter().find(|p| holds(p)).expect("a local file");
    let remote = names.iter().find(|p| !holds(p)).expect("a remote file");
    (local.clone(), remote.clone())
}

async fn report(addr: std::net::SocketAddr) -> LoadReport {
    let r = get(addr, "/_capstan/load").await;
    assert_eq!(r.status, 200);
    LoadReport::parse(&r.body).expect("the report parses")
}

#[tokio::test]
async fn a_remote_file_costs_an_nfs_read_the_local_disk_does_not_see() {
    let mut c = config();
    c.tree = TreeKind::Webstone2000;
    c.partition = Some(Partition { index: 0, count: 2 });
    // No memory cache, so every request of a file reads it; one window covers the whole test.
    c.node.cache_fraction = 0.0;
    c.load_interval_ms = 600_000;
    let node = start(c).await;
    let a = node.addr();
    let (local, remote) = local_and_remote_500k();
    const EACH: u64 = 4;
    for _ in 0..EACH {
        for path in [&local, &remote] {
            let r = get(a, path).await;
            assert_eq!((r.status, r.body.len()), (200, 512_500), "{path}");
        }
    }
    let rep = report(a).await;
    assert_eq!(rep.partition, Some(Partition { index: 0, count: 2 }));

    // The model's own accounting: only the local reads used the local disk.
    let p = NodeParams::default();
    let local_read = p.disk.access_time_s(512_500);
    let disk = rep.since_start.disk_busy_s;
    assert!(
        (disk - EACH as f64 * local_read).abs() < 1e-6,
        "disk busy {disk} s, expected {EACH} local reads of {local_read} s"
    );

    // The node's own service times: a remote read is the penalty slower (60 % of 38.8 ms).
    let (l, r) = (&rep.classes["static"], &rep.classes["static-remote"]);
    assert_eq!((l.served, r.served), (EACH, EACH));
    let extra_ms = (p.remote_read_s(512_500) - local_read) * 1e3;
    let modelled_local_ms = (local_read + p.static_file(512_500, true).cpu_s) * 1e3
        + p.nic.transmit_time_s(512_500) * 1e3;
    // A wait may end up to its lead (at most 2 ms) early; late wake-ups only add.
    assert!(
        l.mean_service_ms > modelled_local_ms - 2.0,
        "local {} ms, modelled {modelled_local_ms}",
        l.mean_service_ms
    );
    // The remote read pays the whole penalty: its modelled time at least. (Not against the
    // local mean: a busy machine can stretch either by more than the penalty. That the local
    // reads pay none is the disk's accounting above.)
    assert!(
        r.mean_service_ms > modelled_local_ms + extra_ms - 2.0,
        "remote {} ms vs local {} ms: expected about {extra_ms} ms more",
        r.mean_service_ms,
        l.mean_service_ms
    );
    node.shutdown().await;
}

#[tokio::test]
async fn an_unpartitioned_node_reads_everything_locally_and_reports_kinds() {
    let mut c = config();
    c.tree = TreeKind::Webstone2000;
    c.node.cache_fraction = 0.0;
    c.load_interval_ms = 600_000;
    let node = start(c).await;
    let a = node.addr();
    let (local, remote) = local_and_remote_500k();
    get(a, &local).await;
    get(a, &remote).await;
    get(a, "/cgi-bin/cpu_light.cgi").await;
    get(a, "/secure/file5k.html").await;
    get(a, "/no-such-file").await;
    let rep = report(a).await;
    assert_eq!(rep.partition, None);
    let kinds: Vec<&str> = rep.classes.keys().map(String::as_str).collect();
    assert_eq!(kinds, ["cpu_light", "secure", "static"]);
    assert_eq!(rep.classes["static"].served, 2);
    assert_eq!(rep.interval.served, 5);
    let disk = rep.since_start.disk_busy_s;
    let p = NodeParams::default();
    let expected = 2.0 * p.disk.access_time_s(512_500) + p.disk.access_time_s(5125);
    assert!((disk - expected).abs() < 1e-6, "{disk} vs {expected}");
    node.shutdown().await;
}
