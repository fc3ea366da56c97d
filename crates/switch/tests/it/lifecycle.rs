//! Reload, graceful shutdown and the admin listener.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::*;
use hyper::{Request, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

async fn post(addr: std::net::SocketAddr, path: &str) -> Answer {
    send(addr, Request::post(path), bytes::Bytes::new()).await
}

#[tokio::test]
async fn reload_swaps_policy_and_nodes_and_refuses_bad_files() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let path = temp_file("reload.toml", &config_for(&[&a], ""));
    let config = capstan_switch::Config::load(&path).unwrap();
    let sw = capstan_switch::start(config).await.unwrap();
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());

    // A keep-alive connection opened before the reload…
    let mut held = tokio::net::TcpStream::connect(addr).await.unwrap();
    held.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = held.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("x-capstan-node: a"));

    std::fs::write(&path, config_for(&[&a, &b], "[policy]\nname = \"cap\"\n")).unwrap();
    let ans = post(admin, "/reload").await;
    assert_eq!(ans.status, StatusCode::OK, "{}", ans.text());
    assert!(
        ans.text().contains("generation 2, policy cap, 2 nodes"),
        "{}",
        ans.text()
    );
    let seen = tally(&placements(addr, &["/", "/", "/", "/"]).await);
    assert_eq!(seen.len(), 2, "new node in use: {seen:?}");

    // …still works after it.
    held.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let n = held.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));

    std::fs::write(
        &path,
        "listen = [\"127.0.0.1:0\"]\n[[node]]\naddress = \"nowhere\"\n",
    )
    .unwrap();
    let ans = post(admin, "/reload").await;
    assert_eq!(ans.status, StatusCode::BAD_REQUEST);
    assert!(ans.text().contains("reload.toml:3:11"), "{}", ans.text());
    let status = status_json(admin).await;
    assert_eq!(status["policy"], "cap");
    assert_eq!(status["generation"], 2);
    assert_eq!(
        get(addr, "/").await.status,
        StatusCode::OK,
        "old configuration keeps serving"
    );
}

#[tokio::test]
async fn reload_without_a_file_is_refused() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "")).await;
    let ans = post(sw.admin_addr.unwrap(), "/reload").await;
    assert_eq!(ans.status, StatusCode::BAD_REQUEST);
    assert!(ans.text().contains("without a configuration file"));
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_requests() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "[timeouts]\ngrace = \"60s\"\n")).await;
    let addr = sw.listen_addrs[0];
    // In flight until released: at the node (polled for), not after some fixed pause.
    let in_flight = tokio::spawn(async move { get(addr, "/hold").await });
    wait_until("the request at the node", || a.held() == 1).await;
    let switch = sw.switch.clone();
    switch.shutdown();
    let waited = tokio::spawn(sw.wait());
    let deadline = Instant::now() + Duration::from_secs(10);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            Instant::now() < deadline,
            "no new connections once shutting down"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!in_flight.is_finished() && !waited.is_finished());
    let released = Instant::now();
    a.release();
    let ans = in_flight.await.unwrap();
    assert_eq!(ans.status, StatusCode::OK);
    assert_eq!(ans.text(), "a");
    waited.await.unwrap();
    // Done once the request is, not at the end of the grace period (60 s): a bound only a
    // switch that waited out its grace would exceed.
    assert!(
        released.elapsed() < Duration::from_secs(30),
        "{:?}",
        released.elapsed()
    );
}

#[tokio::test]
async fn grace_period_bounds_shutdown() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "[timeouts]\ngrace = \"300ms\"\n")).await;
    let addr = sw.listen_addrs[0];
    let _stuck = tokio::spawn(async move { get(addr, "/hold").await });
    wait_until("the request at the node", || a.held() == 1).await;
    let started = Instant::now();
    sw.switch.shutdown();
    sw.wait().await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test]
async fn admin_reports_status_and_metrics() {
    let a = Backend::start("a").await;
    let b = Backend::start("b").await;
    let sw = start_switch(&config_for(&[&a, &b], "[policy]\nname = \"cap\"\n")).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    placements(
        addr,
        &[
            "/x.html",
            "/y.html",
            "/cgi-bin/cpu_light.cgi",
            "/cgi-bin/cpu_light.cgi",
        ],
    )
    .await;

    let status = status_json(admin).await;
    assert_eq!(status["policy"], "cap");
    let nodes = status["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    for node in nodes {
        assert_eq!(node["served"], 2);
        assert_eq!(node["active"], 0);
        assert_eq!(node["available"], true);
        assert_eq!(node["classes"]["static"], 1);
        assert_eq!(node["classes"]["cpu"], 1);
        assert_eq!(node["latency_ms"]["count"], 2);
        assert!(node["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    }

    let metrics = get(admin, "/metrics").await;
    assert_eq!(metrics.status, StatusCode::OK);
    let text = metrics.text();
    for line in [
        "capstan_node_responses_total{node=\"a\"} 2",
        "capstan_requests_placed_total{node=\"b\",class=\"cpu\"} 1",
        "capstan_node_up{node=\"a\"} 1",
        "capstan_node_response_seconds_count{node=\"a\"} 2",
        "capstan_node_response_seconds_bucket{le=\"+Inf\",node=\"a\"} 2",
        "# EOF",
    ] {
        assert!(text.contains(line), "missing `{line}` in\n{text}");
    }
    // Prometheus buckets are cumulative: they never fall and never pass the count.
    let buckets: Vec<u64> = text
        .lines()
        .filter(|l| {
            l.starts_with("capstan_node_response_seconds_bucket") && l.contains("node=\"a\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(buckets.len() > 2, "{text}");
    assert!(buckets.windows(2).all(|w| w[0] <= w[1]), "{buckets:?}");
    assert_eq!(buckets.last(), Some(&2), "{buckets:?}");
    let page = get(admin, "/").await;
    assert!(page.text().contains("<h1>Capstan switch</h1>"));
    assert_eq!(get(admin, "/nope").await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        post(admin, "/status").await.status,
        StatusCode::METHOD_NOT_ALLOWED
    );
}
