//! `--resources real`: real files, a real CPU loop, real synchronous disk I/O.

use crate::common;

use capstan_origin::Resources;
use capstan_workload::{DocTree, TreeKind};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_node_serves_files_from_disk_and_runs_services() {
    let dir = TempDir::new("real");
    let mut c = config();
    c.resources = Resources::Real;
    c.data_dir = Some(dir.0.clone());
    c.seed = 4;
    let node = start(c).await;
    let a = node.addr();
    let tree = DocTree::generate(TreeKind::Webstone, 4, None).unwrap();
    let f = tree.get("/file5k.html").unwrap();
    // The file is really on disk, with the tree's bytes.
    assert_eq!(
        std::fs::read(dir.0.join("file5k.html")).unwrap(),
        tree.content(f)
    );
    let r = get(a, "/file5k.html").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body.as_ref(), tree.content(f).as_slice());
    assert!(r.header("x-origin-file-cache").is_none());

    let cpu = get(a, "/cgi-bin/cpu_light.cgi").await;
    assert_eq!(cpu.status, 200);
    // 40 ms of calibrated work cannot finish much faster than 40 ms.
    assert!(ms(cpu.elapsed) > 25.0, "{}", ms(cpu.elapsed));

    let disk = get(a, "/cgi-bin/disk_load.cgi?file=/file50k.html").await;
    assert_eq!(disk.status, 200, "{:?}", disk.body);
    // The synchronous copy was deleted again.
    let tmp = std::fs::read_dir(dir.0.join(".capstan-tmp"))
        .unwrap()
        .count();
    assert_eq!(tmp, 0);

    let rep = load(a).await;
    assert_eq!(rep["resources"], "real");
    assert!(
        rep["since_start"]["cpu_busy_s"].as_f64().unwrap() > 0.02,
        "{rep}"
    );
    assert!(rep["since_start"]["disk_busy_s"].as_f64().unwrap() > 0.0);
    assert!(rep["cache"].is_null());
    node.shutdown().await;
}

#[test]
fn same_seed_writes_byte_identical_trees() {
    let (d1, d2, d3) = (TempDir::new("a"), TempDir::new("b"), TempDir::new("c"));
    let t = DocTree::generate(TreeKind::Polygraph, 9, Some(300)).unwrap();
    capstan_origin::materialize(&t, &d1.0).unwrap();
    capstan_origin::materialize(
        &DocTree::generate(TreeKind::Polygraph, 9, Some(300)).unwrap(),
        &d2.0,
    )
    .unwrap();
    capstan_origin::materialize(
        &DocTree::generate(TreeKind::Polygraph, 10, Some(300)).unwrap(),
        &d3.0,
    )
    .unwrap();
    let mut differ = 0;
    for f in &t.files {
        let rel = f.path.trim_start_matches('/');
        let a = std::fs::read(d1.0.join(rel)).unwrap();
        assert_eq!(a, std::fs::read(d2.0.join(rel)).unwrap(), "{rel}");
        assert_eq!(a.len() as u64, f.size);
        if std::fs::read(d3.0.join(rel)).ok() != Some(a) {
            differ += 1;
        }
    }
    assert!(
        differ > 290,
        "another seed gives another tree ({differ} differ)"
    );
}
