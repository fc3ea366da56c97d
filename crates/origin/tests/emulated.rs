//! The emulated node over real loopback HTTP. Timing bands are deliberately wide (this runs on a
//! shared 2-core machine); precise timing claims live in the benchmarks.

mod common;

use common::*;

#[tokio::test]
async fn cpu_med_alone_then_two_share_one_core() {
    let node = start(config()).await;
    let a = node.addr();
    let alone = get(a, "/cgi-bin/cpu_med.cgi").await;
    assert_eq!(alone.status, 200);
    let t1 = ms(alone.elapsed);
    assert!((95.0..300.0).contains(&t1), "alone: {t1} ms");

    let (x, y) = tokio::join!(
        get(a, "/cgi-bin/cpu_med.cgi"),
        get(a, "/cgi-bin/cpu_med.cgi")
    );
    let (tx, ty) = (ms(x.elapsed), ms(y.elapsed));
    // Processor sharing: both finish together at about 200 ms, not 100 and 200.
    for t in [tx, ty] {
        assert!((190.0..450.0).contains(&t), "shared: {tx} / {ty} ms");
    }
    assert!(
        (tx - ty).abs() < 60.0,
        "PS finishes both together: {tx} / {ty}"
    );
    node.shutdown().await;
}

#[tokio::test]
async fn two_cores_run_two_jobs_in_parallel() {
    let mut c = config();
    c.node.cores = 2;
    let node = start(c).await;
    let a = node.addr();
    let (x, y) = tokio::join!(
        get(a, "/cgi-bin/cpu_med.cgi"),
        get(a, "/cgi-bin/cpu_med.cgi")
    );
    for t in [ms(x.elapsed), ms(y.elapsed)] {
        assert!((95.0..180.0).contains(&t), "{t} ms");
    }
    node.shutdown().await;
}

#[tokio::test]
async fn disk_requests_queue_fcfs() {
    let node = start(config()).await;
    let a = node.addr();
    let path = "/cgi-bin/disk_load.cgi?file=/home/webston/apache/htdocs/file50k.html";
    let (x, y) = tokio::join!(get(a, path), get(a, path));
    assert_eq!((x.status, y.status), (200, 200));
    let mut t = [ms(x.elapsed), ms(y.elapsed)];
    t.sort_by(f64::total_cmp);
    // FCFS: one is served in ~100 ms, the other waits for it and finishes at ~200 ms.
    assert!((95.0..180.0).contains(&t[0]), "{t:?}");
    assert!((190.0..450.0).contains(&t[1]), "{t:?}");
    assert!(t[1] - t[0] > 70.0, "{t:?}");
    node.shutdown().await;
}

#[tokio::test]
async fn static_cache_hit_costs_no_disk_time_a_miss_does() {
    let node = start(config()).await;
    let a = node.addr();
    let miss = get(a, "/file50k.html").await;
    assert_eq!(miss.status, 200);
    assert_eq!(miss.body.len(), 51_250);
    assert_eq!(miss.header("x-capstan-cache"), Some("miss"));
    let after_miss = load(a).await["since_start"]["disk_busy_s"]
        .as_f64()
        .unwrap();
    // One access: 9 ms seek + 4.17 ms rotation + 0.05 ms controller + 2.56 ms transfer.
    assert!((after_miss - 0.015_779).abs() < 1e-4, "{after_miss}");

    let hit = get(a, "/file50k.html").await;
    assert_eq!(hit.header("x-capstan-cache"), Some("hit"));
    assert_eq!(hit.body, miss.body);
    let rep = load(a).await;
    let after_hit = rep["since_start"]["disk_busy_s"].as_f64().unwrap();
    assert_eq!(after_hit, after_miss, "a hit must not touch the disk");
    assert_eq!(rep["cache"]["hits"], 1);
    assert_eq!(rep["cache"]["misses"], 1);
    // The miss took its disk time on top of what the hit took.
    assert!(ms(miss.elapsed) > ms(hit.elapsed) + 5.0);
    node.shutdown().await;
}

#[tokio::test]
async fn the_five_megabyte_file_does_not_fit_the_cache() {
    // 15 % of the webstone tree is ~0.87 MB: the 5 MB file is never cached, so it always costs
    // disk time and 0.42 s on the modelled 100 Mbit/s link.
    let node = start(config()).await;
    let a = node.addr();
    let r = get(a, "/file5m.html").await;
    assert_eq!(r.body.len(), 5_248_000);
    assert!(ms(r.elapsed) > 400.0, "{}", ms(r.elapsed));
    let again = get(a, "/file5m.html").await;
    assert_eq!(again.header("x-capstan-cache"), Some("miss"));
    node.shutdown().await;
}

#[tokio::test]
async fn half_speed_doubles_times() {
    let fast = start(config()).await;
    let mut c = config();
    c.node.speed = 0.5;
    let slow = start(c).await;
    let tf = ms(get(fast.addr(), "/cgi-bin/cpu_light.cgi").await.elapsed);
    let ts = ms(get(slow.addr(), "/cgi-bin/cpu_light.cgi").await.elapsed);
    assert!((38.0..150.0).contains(&tf), "speed 1: {tf} ms");
    assert!((78.0..250.0).contains(&ts), "speed 0.5: {ts} ms");
    assert!(ts / tf > 1.5 && ts / tf < 2.6, "ratio {}", ts / tf);
    // The disk slows down too.
    let p = "/cgi-bin/disk_load.cgi?file=/file500.html";
    let df = ms(get(fast.addr(), p).await.elapsed);
    let ds = ms(get(slow.addr(), p).await.elapsed);
    assert!(ds / df > 1.5, "disk {df} vs {ds}");
    fast.shutdown().await;
    slow.shutdown().await;
}

#[tokio::test]
async fn load_report_matches_the_work_sent() {
    // One 100 ms request every 200 ms: the CPU should be about 50 % busy.
    let node = start(config()).await;
    let a = node.addr();
    let start = tokio::time::Instant::now();
    let mut pending = Vec::new();
    for i in 0..12u32 {
        tokio::time::sleep_until(start + std::time::Duration::from_millis(200 * i as u64)).await;
        pending.push(tokio::spawn(get(a, "/cgi-bin/cpu_med.cgi")));
    }
    for p in pending {
        assert_eq!(p.await.unwrap().status, 200);
    }
    let rep = load(a).await;
    let all = &rep["since_start"];
    // The model's own accounting is exact: 12 × 100 ms of CPU.
    let busy = all["cpu_busy_s"].as_f64().unwrap();
    assert!((busy - 1.2).abs() < 0.01, "cpu busy {busy}");
    assert_eq!(rep["served"], 12);
    let mean = rep["mean_service_ms"].as_f64().unwrap();
    assert!((99.0..200.0).contains(&mean), "mean service {mean}");
    let last = &rep["interval"];
    let u = last["cpu_util"].as_f64().unwrap();
    assert!((0.3..0.7).contains(&u), "interval cpu util {u}: {rep}");
    assert!(last["length_s"].as_f64().unwrap() >= 1.0);
    assert_eq!(rep["active_requests"], 0);
    assert_eq!(rep["resources"], "emulated");
    node.shutdown().await;
}

#[tokio::test]
async fn active_requests_are_counted() {
    let node = start(config()).await;
    let a = node.addr();
    let h = tokio::spawn(get(a, "/cgi-bin/cpu_med.cgi"));
    tokio::time::sleep(std::time::Duration::from_millis(40)).await;
    let rep = load(a).await;
    assert_eq!(rep["active_requests"], 1, "{rep}");
    h.await.unwrap();
    node.shutdown().await;
}

#[tokio::test]
async fn secure_objects_pay_ssl_costs() {
    let node = start(config()).await;
    let a = node.addr();
    get(a, "/file5k.html").await; // warm the memory cache so both are hits
    let plain = get(a, "/file5k.html").await;
    let secure = get(a, "/secure/file5k.html").await;
    assert_eq!(secure.status, 200);
    assert_eq!(secure.body, plain.body);
    // RSA handshake alone is 6.6 ms of CPU.
    assert!(ms(secure.elapsed) > ms(plain.elapsed) + 4.0);
    let cgi = get(a, "/secure/cgi-bin/cpu_light.cgi").await;
    assert!(ms(cgi.elapsed) > 45.0);
    node.shutdown().await;
}

#[tokio::test]
async fn every_tree_serves() {
    for tree in capstan_workload::TreeKind::ALL {
        let mut c = config();
        c.tree = tree;
        c.seed = 3;
        let node = start(c).await;
        let doc = capstan_workload::DocTree::generate(tree, 3, None).unwrap();
        let f = &doc.files[doc.files.len() / 3];
        let r = get(node.addr(), &f.path).await;
        assert_eq!(r.status, 200, "{tree} {}", f.path);
        assert_eq!(r.body.len() as u64, f.size);
        assert_eq!(r.header("content-type"), Some(f.content_type));
        assert!(r.header("etag").is_some() && r.header("last-modified").is_some());
        let cc = r.header("cache-control").unwrap();
        if f.cachable {
            assert!(cc.starts_with("public, max-age="), "{cc}");
        } else {
            assert_eq!(cc, "no-store");
        }
        node.shutdown().await;
    }
}

#[tokio::test]
async fn polygraph_objects_expire_at_their_next_modification() {
    let mut c = config();
    c.tree = capstan_workload::TreeKind::Polygraph;
    let node = start(c).await;
    let doc = capstan_workload::DocTree::generate(capstan_workload::TreeKind::Polygraph, 1, None)
        .unwrap();
    let f = doc.files.iter().find(|f| f.cachable).unwrap();
    let r = get(node.addr(), &f.path).await;
    let expires = httpdate::parse_http_date(r.header("expires").unwrap()).unwrap();
    let lm = httpdate::parse_http_date(r.header("last-modified").unwrap()).unwrap();
    assert!(expires > std::time::SystemTime::now() && lm < std::time::SystemTime::now());
    // A revalidation with the current ETag gets 304 and no body.
    let etag = r.header("etag").unwrap().to_string();
    let again = request(node.addr(), "GET", &f.path, &[("if-none-match", &etag)]).await;
    assert_eq!(again.status, 304);
    assert!(again.body.is_empty());
    node.shutdown().await;
}

#[tokio::test]
async fn same_seed_gives_byte_identical_trees() {
    let mk = |seed| {
        let mut c = config();
        c.tree = capstan_workload::TreeKind::Cap;
        c.seed = seed;
        c
    };
    let (a, b, other) = (
        start(mk(11)).await,
        start(mk(11)).await,
        start(mk(12)).await,
    );
    for i in [0usize, 7, 500, 1999] {
        let p = format!("/cap/obj{i:06}.html");
        let ra = get(a.addr(), &p).await;
        let rb = get(b.addr(), &p).await;
        assert_eq!(ra.status, 200);
        assert_eq!(ra.body, rb.body, "{p}");
        assert_eq!(ra.header("etag"), rb.header("etag"));
        let ro = get(other.addr(), &p).await;
        assert_ne!(ra.body, ro.body, "{p}");
    }
    a.shutdown().await;
    b.shutdown().await;
    other.shutdown().await;
}

#[tokio::test]
async fn clear_errors() {
    let node = start(config()).await;
    let a = node.addr();
    assert_eq!(get(a, "/nope.html").await.status, 404);
    assert_eq!(get(a, "/cgi-bin/disk_load.cgi").await.status, 400);
    assert_eq!(
        get(a, "/cgi-bin/disk_load.cgi?file=/missing.html")
            .await
            .status,
        404
    );
    let post = request(a, "POST", "/file500.html", &[]).await;
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
    let head = request(a, "HEAD", "/file5k.html", &[]).await;
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-length"), Some("5125"));
    node.shutdown().await;
}

#[tokio::test]
async fn bad_config_is_refused() {
    let mut c = config();
    c.node.cores = 0;
    let e = capstan_origin::start(c).await.err().unwrap();
    assert!(e.to_string().contains("cores"), "{e}");
    let mut c = config();
    c.files = Some(10);
    let e = capstan_origin::start(c).await.err().unwrap();
    assert!(e.to_string().contains("fixed file count"), "{e}");
}

/// `/cgi-bin/demand.cgi` (for checks against queueing theory): the stated demand, processor
/// shared or first come first served over the cores, exponential draws with the stated mean,
/// and one-line 400s for bad parameters.
#[tokio::test]
async fn demand_cgi_spends_the_stated_demand_ps_or_fcfs() {
    let node = start(config()).await;
    let a = node.addr();
    let ps = "/cgi-bin/demand.cgi?ms=100";
    let (x, y) = tokio::join!(get(a, ps), get(a, ps));
    assert_eq!((x.status, y.status), (200, 200));
    let (tx, ty) = (ms(x.elapsed), ms(y.elapsed));
    // Processor sharing (the default): both finish together at about 200 ms.
    assert!((tx - ty).abs() < 60.0 && tx > 190.0, "PS: {tx} / {ty}");
    let fcfs = "/cgi-bin/demand.cgi?ms=100&queue=fcfs";
    let (x, y) = tokio::join!(get(a, fcfs), get(a, fcfs));
    let mut t = [ms(x.elapsed), ms(y.elapsed)];
    t.sort_by(f64::total_cmp);
    // First come first served on the one core: ~100 ms, then ~200 ms.
    assert!(
        (95.0..180.0).contains(&t[0]) && t[1] - t[0] > 70.0,
        "FCFS: {t:?}"
    );
    // Exponential demands: mean 2 ms over 200 requests, as the node's CPU time counts them.
    let before = load(a).await["since_start"]["cpu_busy_s"].as_f64().unwrap();
    for _ in 0..200 {
        assert_eq!(get(a, "/cgi-bin/demand.cgi?ms=2&law=exp").await.status, 200);
    }
    let after = load(a).await["since_start"]["cpu_busy_s"].as_f64().unwrap();
    let mean_ms = (after - before) / 200.0 * 1e3;
    // 200 exponential draws: the mean's standard error is 0.14 ms.
    assert!((1.4..2.6).contains(&mean_ms), "mean demand {mean_ms} ms");
    // The load report counts them as their own kind.
    assert!(load(a).await["classes"].get("demand").is_some());
    for bad in ["", "?ms=0", "?ms=5&law=pareto", "?ms=5&queue=lifo"] {
        let r = get(a, &format!("/cgi-bin/demand.cgi{bad}")).await;
        assert_eq!(r.status, 400, "{bad}");
        let body = String::from_utf8_lossy(&r.body);
        assert!(
            body.starts_with("demand.cgi") && body.trim().lines().count() == 1,
            "{body}"
        );
    }
    node.shutdown().await;
}
