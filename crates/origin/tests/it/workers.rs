//! The thread-per-core form (`serve_threads`) and file bodies kept in memory, over loopback HTTP.

use crate::common;

use std::net::SocketAddr;

use capstan_origin::{OriginError, Resources};
use capstan_workload::{DocTree, TreeKind};
use common::*;

/// Runs `serve_threads` on its own thread; returns the bound address, a trigger that stops it,
/// and the thread (whose result is the value the stop future returned).
fn spawn_workers(
    c: capstan_origin::OriginConfig,
    threads: usize,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<u32>,
    std::thread::JoinHandle<Result<u32, OriginError>>,
) {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<u32>();
    let handle = std::thread::spawn(move || {
        capstan_origin::serve_threads(
            c,
            threads,
            move |addr| ready_tx.send(addr).unwrap(),
            move || async move { stop_rx.await.unwrap_or(0) },
        )
    });
    let addr = ready_rx.recv().expect("workers start");
    (addr, stop_tx, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_share_one_node_and_stop_when_told() {
    let dir = TempDir::new("workers");
    let mut c = config();
    c.resources = Resources::Real;
    c.data_dir = Some(dir.0.clone());
    c.seed = 5;
    let (addr, stop, handle) = spawn_workers(c, 3);
    assert_ne!(addr.port(), 0);
    let tree = DocTree::generate(TreeKind::Webstone, 5, None).unwrap();

    // Many connections at once: the kernel spreads them over the three listening sockets, and
    // every worker serves the same tree with the same bytes.
    let mut tasks = Vec::new();
    for i in 0..24 {
        let path = ["/file500.html", "/file5k.html", "/file50k.html"][i % 3];
        tasks.push(tokio::spawn(async move { (path, get(addr, path).await) }));
    }
    for t in tasks {
        let (path, r) = t.await.unwrap();
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(
            r.body.as_ref(),
            tree.content(tree.get(path).unwrap()).as_slice()
        );
    }
    // One load report for the whole node, whichever worker answers it.
    let report = load(addr).await;
    assert_eq!(report["since_start"]["served"], 24);

    stop.send(7).unwrap();
    let out = tokio::task::spawn_blocking(move || handle.join().unwrap())
        .await
        .unwrap();
    assert_eq!(out.unwrap(), 7);
    // Every listening socket is closed.
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[test]
fn workers_report_a_port_in_use() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = config();
    c.listen = taken.local_addr().unwrap();
    let r = capstan_origin::serve_threads(c, 2, |_| panic!("not ready"), || async {});
    assert!(matches!(r, Err(OriginError::Bind { .. })), "{:?}", r.err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_bodies_are_kept_in_memory_within_the_budget() {
    let tree = DocTree::generate(TreeKind::Webstone, 6, None).unwrap();
    let original = tree.content(tree.get("/file5k.html").unwrap());
    let changed = vec![b'x'; original.len()];
    for (budget, expect_kept) in [(None, true), (Some(0), false)] {
        let dir = TempDir::new("bodies");
        let mut c = config();
        c.resources = Resources::Real;
        c.data_dir = Some(dir.0.clone());
        c.seed = 6;
        c.body_memory_mb = budget;
        let node = start(c).await;
        let a = node.addr();
        assert_eq!(get(a, "/file5k.html").await.body.as_ref(), original);
        // Change the file behind the node's back: a kept body does not see it, a file read per
        // request (no memory budget) does.
        std::fs::write(dir.0.join("file5k.html"), &changed).unwrap();
        let again = get(a, "/file5k.html").await;
        assert_eq!(again.status, 200);
        let want = if expect_kept { &original } else { &changed };
        assert_eq!(again.body.as_ref(), want.as_slice(), "budget {budget:?}");
        // HEAD still gives the length without a body.
        let head = request(a, "HEAD", "/file5k.html", &[]).await;
        assert_eq!(
            head.header("content-length"),
            Some(original.len().to_string().as_str())
        );
        assert!(head.body.is_empty());
        node.shutdown().await;
    }
}

#[tokio::test]
async fn emulated_bodies_are_the_tree_s_bytes_on_every_request() {
    let tree = DocTree::generate(TreeKind::Webstone, 1, None).unwrap();
    for budget in [None, Some(0)] {
        let mut c = config();
        c.body_memory_mb = budget;
        let node = start(c).await;
        for _ in 0..2 {
            let r = get(node.addr(), "/file500.html").await;
            assert_eq!(r.status, 200);
            assert_eq!(
                r.body.as_ref(),
                tree.content(tree.get("/file500.html").unwrap()).as_slice()
            );
        }
        node.shutdown().await;
    }
}

#[tokio::test]
async fn load_report_says_how_late_modelled_waits_ended() {
    let node = start(config()).await;
    let before = load(node.addr()).await;
    assert_eq!(before["timer"]["waits"], 0);
    assert_eq!(get(node.addr(), "/cgi-bin/cpu_light.cgi").await.status, 200);
    let after = load(node.addr()).await;
    // The CPU stage slept until its modelled completion (the NIC stage of so short a body is
    // usually over by the time the CPU stage's wait has ended, so it does not sleep).
    assert!(after["timer"]["waits"].as_u64().unwrap() >= 1, "{after}");
    let mean = after["timer"]["mean_late_us"].as_f64().unwrap();
    let max = after["timer"]["max_late_us"].as_f64().unwrap();
    assert!(mean >= 0.0 && max >= mean, "{after}");
    node.shutdown().await;

    let dir = TempDir::new("timer");
    let mut c = config();
    c.resources = Resources::Real;
    c.data_dir = Some(dir.0.clone());
    let real = start(c).await;
    assert!(load(real.addr()).await["timer"].is_null());
    real.shutdown().await;
}
