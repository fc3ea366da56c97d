//! Limits and bad requests: each gets its own status, and nothing brings the switch down.

use crate::common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use hyper::{Request, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const LIMITS: &str = "[limits]\nmax_request_line = 100\nmax_header_bytes = 1024\nmax_headers = 20\nmax_body_bytes = 1000\n";

async fn switch_with_limits() -> (Backend, capstan_switch::Running) {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], LIMITS)).await;
    (a, sw)
}

#[tokio::test]
async fn long_request_target_gets_414() {
    let (_a, sw) = switch_with_limits().await;
    let ans = get(sw.listen_addrs[0], &format!("/{}", "x".repeat(200))).await;
    assert_eq!(ans.status, StatusCode::URI_TOO_LONG);
    assert!(ans.text().contains("limit is 100"), "{}", ans.text());
}

#[tokio::test]
async fn too_many_or_too_large_headers_get_431() {
    let (_a, sw) = switch_with_limits().await;
    let addr = sw.listen_addrs[0];
    let mut req = Request::get("/");
    for i in 0..25 {
        req = req.header(format!("x-h{i}"), "v");
    }
    let ans = send(addr, req, Bytes::new()).await;
    assert_eq!(ans.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    let ans = send(
        addr,
        Request::get("/").header("x-big", "v".repeat(1500)),
        Bytes::new(),
    )
    .await;
    assert_eq!(ans.status, StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);
    // Far past every limit: hyper's own parser refuses it, also with 431.
    let raw = raw_exchange(
        addr,
        format!(
            "GET / HTTP/1.1\r\nHost: x\r\nX-Huge: {}\r\n\r\n",
            "v".repeat(64 * 1024)
        )
        .as_bytes(),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 431"), "{raw}");
}

#[tokio::test]
async fn large_bodies_get_413_declared_or_chunked() {
    let (a, sw) = switch_with_limits().await;
    let addr = sw.listen_addrs[0];
    let ans = send(addr, Request::post("/upload"), Bytes::from(vec![0u8; 1001])).await;
    assert_eq!(ans.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(a.hits(), 0, "declared too large: never reaches the node");
    let ans = send(addr, Request::post("/upload"), Bytes::from(vec![0u8; 1000])).await;
    assert_eq!(ans.text(), "1000");
    let chunk = format!("3e8\r\n{}\r\n", "y".repeat(1000));
    let raw = raw_exchange(
        addr,
        format!(
            "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}{chunk}0\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 413"), "{raw}");
}

#[tokio::test]
async fn malformed_requests_get_400_and_the_switch_keeps_serving() {
    let (_a, sw) = switch_with_limits().await;
    let addr = sw.listen_addrs[0];
    for junk in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET / HTTP/9.9\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        b"\x00\x01\x02\x03\r\n\r\n",
    ] {
        let raw = raw_exchange(addr, junk).await;
        assert!(raw.starts_with("HTTP/1.1 400"), "{junk:?} → {raw}");
    }
    assert_eq!(get(addr, "/").await.status, StatusCode::OK);
}

#[tokio::test]
async fn slow_header_client_is_cut_off() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(
        &[&a],
        "[timeouts]\nheader_read = \"300ms\"\nclient_idle = \"60s\"\n",
    ))
    .await;
    let mut stream = tokio::net::TcpStream::connect(sw.listen_addrs[0])
        .await
        .unwrap();
    let started = Instant::now();
    // A byte every 100 ms: the connection stays busy but the head never completes.
    let mut closed = false;
    for _ in 0..50 {
        if stream.write_all(b"X").await.is_err() {
            closed = true;
            break;
        }
        let mut buf = [0u8; 64];
        match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {
                closed = true;
                break;
            }
            _ => {}
        }
    }
    assert!(closed, "the switch closed the slow client");
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_silent_connection_gets_header_read_to_start_its_request() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(
        &[&a],
        "[timeouts]\nheader_read = \"300ms\"\nclient_idle = \"60s\"\n",
    ))
    .await;
    let addr = sw.listen_addrs[0];
    // Silent from the start: closed once header_read has passed, not after client_idle.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let end = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buf)).await;
    assert!(
        matches!(end, Ok(Ok(0)) | Ok(Err(_))),
        "closed, not timed out: {end:?}"
    );
    // The silent one was handed over by the deferred accept with nothing to read, so its wait
    // went through the event loop. A client that pauses before its request is served as usual.
    let mut late = tokio::net::TcpStream::connect(addr).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    late.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    late.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn a_burst_of_silent_connections_is_closed_and_uncounted() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "[timeouts]\nheader_read = \"300ms\"\n")).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    // More than one of the reaper's batches, all timing out together.
    let mut silent = Vec::new();
    for _ in 0..100 {
        silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    for stream in &mut silent {
        let mut buf = [0u8; 64];
        let end = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await;
        assert!(
            matches!(end, Ok(Ok(0)) | Ok(Err(_))),
            "closed, not timed out: {end:?}"
        );
    }
    // Counted open until closed, and none left counted after.
    wait_for_status(admin, "no connection counted open", |s| {
        s["open_connections"] == 0
    })
    .await;
    assert_eq!(get(addr, "/").await.status, StatusCode::OK);
}

#[tokio::test]
async fn idle_keep_alive_connection_is_closed() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "[timeouts]\nclient_idle = \"300ms\"\n")).await;
    let mut stream = tokio::net::TcpStream::connect(sw.listen_addrs[0])
        .await
        .unwrap();
    // The idle time starts once the answer is sent, after the request: timed from before the
    // request, the close can come no sooner than client_idle, however late this task reads.
    let started = Instant::now();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = stream.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let rest = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
    assert!(
        matches!(rest, Ok(Ok(0)) | Ok(Err(_))),
        "closed, not timed out: {rest:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn a_back_end_sending_garbage_gets_502_not_a_crash() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let bad_addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"NOT HTTP AT ALL\r\n\r\n").await;
            });
        }
    });
    let text =
        format!("listen = [\"127.0.0.1:0\"]\n[[node]]\nname = \"bad\"\naddress = \"{bad_addr}\"\n");
    let sw = start_switch(&text).await;
    let ans = get(sw.listen_addrs[0], "/").await;
    assert_eq!(ans.status, StatusCode::BAD_GATEWAY);
    assert!(ans.text().contains("node bad"), "{}", ans.text());
    let ans = get(sw.listen_addrs[0], "/").await;
    assert_eq!(ans.status, StatusCode::BAD_GATEWAY, "still serving");
}
