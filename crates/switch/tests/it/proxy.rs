//! Forwarding over real sockets: headers, versions, streaming, failures and health.

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use hyper::{Request, StatusCode};

#[tokio::test]
async fn forwards_and_rewrites_headers() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "")).await;
    let addr = sw.listen_addrs[0];
    let req = Request::get("/headers?x=1")
        .header("host", "www.example.org")
        .header("connection", "keep-alive, x-secret")
        .header("x-secret", "hop-by-hop")
        .header("x-forwarded-for", "10.1.2.3")
        .header("te", "trailers");
    let ans = send(addr, req, Bytes::new()).await;
    assert_eq!(ans.status, StatusCode::OK);
    let seen = ans.text();
    assert!(seen.starts_with("GET /headers?x=1 HTTP/1.1"), "{seen}");
    assert!(
        seen.contains("host: www.example.org\n"),
        "Host preserved: {seen}"
    );
    assert!(
        seen.contains("x-forwarded-for: 10.1.2.3, 127.0.0.1\n"),
        "{seen}"
    );
    assert!(seen.contains("x-forwarded-proto: http\n"), "{seen}");
    assert!(seen.contains("via: 1.1 capstan\n"), "{seen}");
    assert!(
        !seen.contains("x-secret"),
        "named hop-by-hop header removed: {seen}"
    );
    // The client's TE went with the hop-by-hop fields; as it accepts trailers, the switch
    // asks the node for them on its own hop (see `h2_nodes::accept_trailers`).
    assert!(seen.contains("\nte: trailers\n"), "{seen}");
    assert!(seen.contains("\nconnection: te\n"), "{seen}");
    // The back-end's own hop-by-hop headers do not reach the client.
    assert_eq!(ans.header("x-drop-me"), "");
    assert_eq!(ans.header("keep-alive"), "");
    assert_eq!(ans.header("via"), "1.1 capstan");
    assert_eq!(ans.node(), "a");
    assert_eq!(ans.class(), "static");
}

#[tokio::test]
async fn http10_client_and_chunked_response() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "")).await;
    let addr = sw.listen_addrs[0];
    // HTTP/1.0 without keep-alive: the switch answers and closes.
    let raw = raw_exchange(addr, b"GET /chunked HTTP/1.0\r\nHost: x\r\n\r\n").await;
    assert!(raw.starts_with("HTTP/1.0 200 OK\r\n"), "{raw}");
    let body = raw.split("\r\n\r\n").nth(1).unwrap();
    assert_eq!(
        body,
        "c".repeat(3000),
        "1.0 client gets the body unchunked until close"
    );
    // HTTP/1.1 gets the chunked body as chunked.
    let raw = raw_exchange(
        addr,
        b"GET /chunked HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(raw.contains("transfer-encoding: chunked\r\n"), "{raw}");
    assert!(raw.ends_with("0\r\n\r\n"), "{raw}");
}

#[tokio::test]
async fn keep_alive_on_both_sides() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "")).await;
    let addr = sw.listen_addrs[0];
    let raw = raw_exchange(
        addr,
        b"GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\nGET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(raw.matches("HTTP/1.1 200 OK").count(), 3, "{raw}");
    let status = status_json(sw.admin_addr.unwrap()).await;
    assert_eq!(
        status["accepted_connections"], 1,
        "one client connection for the three requests"
    );
}

#[tokio::test]
async fn streams_request_and_response_bodies() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "[limits]\nmax_body_bytes = 0\n")).await;
    let addr = sw.listen_addrs[0];
    let upload = Bytes::from(vec![7u8; 5 * 1024 * 1024 + 3]);
    let ans = send(addr, Request::post("/upload"), upload).await;
    assert_eq!(ans.text(), (5 * 1024 * 1024 + 3).to_string());
    let ans = get(addr, "/big?bytes=20000001").await;
    assert_eq!(ans.status, StatusCode::OK);
    assert_eq!(ans.body.len(), 20_000_001);
    assert_eq!(ans.header("content-length"), "20000001");
}

#[tokio::test]
async fn connect_failure_retries_once_on_another_node() {
    let dead_addr = stop(Backend::start("dead").await).await;
    let b = Backend::start("b").await;
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\ndebug_headers = true\n\
         [health]\nfail_threshold = 100\n\
         [[node]]\nname = \"dead\"\naddress = \"{dead_addr}\"\n\
         [[node]]\nname = \"b\"\naddress = \"{}\"\n",
        b.addr
    );
    let sw = start_switch(&text).await;
    let addr = sw.listen_addrs[0];
    for _ in 0..4 {
        let ans = get(addr, "/x").await;
        assert_eq!(ans.status, StatusCode::OK);
        assert_eq!(ans.node(), "b");
    }
    // A POST with a body is not retried: the client learns which node failed.
    let mut saw_502 = false;
    for _ in 0..2 {
        let ans = send(addr, Request::post("/upload"), Bytes::from_static(b"abc")).await;
        if ans.status == StatusCode::BAD_GATEWAY {
            assert!(
                ans.text().contains("could not connect to node dead"),
                "{}",
                ans.text()
            );
            saw_502 = true;
        } else {
            assert_eq!(ans.text(), "3");
        }
    }
    assert!(
        saw_502,
        "round robin sends one of two POSTs to the dead node"
    );
    let status = status_json(sw.admin_addr.unwrap()).await;
    assert!(status["nodes"][0]["errors"]["connect"].as_u64().unwrap() >= 3);
}

#[tokio::test]
async fn single_dead_node_gives_502_then_503_once_backed_off() {
    let dead_addr = stop(Backend::start("dead").await).await;
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n\
         [health]\nfail_threshold = 2\nbackoff = \"1h\"\n\
         [[node]]\nname = \"dead\"\naddress = \"{dead_addr}\"\n"
    );
    let sw = start_switch(&text).await;
    let addr = sw.listen_addrs[0];
    for _ in 0..2 {
        let ans = get(addr, "/").await;
        assert_eq!(ans.status, StatusCode::BAD_GATEWAY);
        assert!(
            ans.text()
                .starts_with("502 Bad Gateway: could not connect to node dead"),
            "{}",
            ans.text()
        );
    }
    let ans = get(addr, "/").await;
    assert_eq!(ans.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(ans.text().contains("no node available"), "{}", ans.text());
    let status = status_json(sw.admin_addr.unwrap()).await;
    assert_eq!(status["nodes"][0]["available"], false);
}

/// A node whose address is the switch's own listener: the request goes round until the `Via`
/// hop limit, and the client gets 508 naming the loop (not a 503 once a queue timed out); every
/// switch on the way back added its `Via`.
#[tokio::test]
async fn a_node_that_leads_back_to_the_switch_gets_508_loop_detected() {
    let reserved = DeadAddr::new();
    let listen = reserved.addr();
    let sw = start_switch(&format!(
        "listen = [\"{listen}\"]\n[[node]]\nname = \"itself\"\naddress = \"{listen}\"\n"
    ))
    .await;
    let ans = get(sw.listen_addrs[0], "/").await;
    assert_eq!(ans.status, StatusCode::LOOP_DETECTED, "{}", ans.text());
    assert!(ans.text().contains("forwarding loop"), "{}", ans.text());
    assert_eq!(
        capstan_switch::testing::capstan_hops(&ans.headers),
        capstan_switch::testing::MAX_HOPS,
        "{:?}",
        ans.headers
    );
}

/// Switches in a chain are not a loop: each adds its `Via`, and the request gets through.
#[tokio::test]
async fn chained_switches_are_not_a_loop() {
    let b = Backend::start("b").await;
    let inner = start_switch(&config_for(&[&b], "")).await;
    let outer = start_switch(&format!(
        "listen = [\"127.0.0.1:0\"]\n[[node]]\nname = \"inner\"\naddress = \"{}\"\n",
        inner.listen_addrs[0]
    ))
    .await;
    let ans = get(outer.listen_addrs[0], "/headers").await;
    assert_eq!(ans.status, StatusCode::OK, "{}", ans.text());
    assert!(
        ans.text().contains("via: 1.1 capstan, 1.1 capstan\n"),
        "{}",
        ans.text()
    );
}

#[tokio::test]
async fn backed_off_node_returns_after_the_backoff() {
    let a = Backend::start("a").await;
    let dead_addr = stop(Backend::start("b").await).await;
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\ndebug_headers = true\n\
         [health]\nfail_threshold = 1\nbackoff = \"300ms\"\n\
         [[node]]\nname = \"a\"\naddress = \"{}\"\n\
         [[node]]\nname = \"b\"\naddress = \"{dead_addr}\"\n",
        a.addr
    );
    let sw = start_switch(&text).await;
    let addr = sw.listen_addrs[0];
    for _ in 0..4 {
        assert_eq!(get(addr, "/").await.node(), "a");
    }
    assert_eq!(
        status_json(sw.admin_addr.unwrap()).await["nodes"][1]["available"],
        false
    );
    let _revived = Backend::start_on(dead_addr.addr(), "b").await;
    wait_for_status(sw.admin_addr.unwrap(), "b's back-off to end", |s| {
        s["nodes"][1]["available"] == true
    })
    .await;
    let nodes: Vec<String> = placements(addr, &["/", "/", "/", "/"])
        .await
        .into_iter()
        .map(|(_, n)| n)
        .collect();
    assert!(
        nodes.contains(&"b".to_string()),
        "node b is back: {nodes:?}"
    );
}

#[tokio::test]
async fn upstream_timeout_gives_504() {
    let a = Backend::start("a").await;
    // A second: the answer after it must beat it, and a busy machine can hold a quick
    // node's answer back for a good part of a shorter timeout.
    let sw = start_switch(&config_for(&[&a], "[timeouts]\nupstream = \"1s\"\n")).await;
    let addr = sw.listen_addrs[0];
    let ans = get(addr, "/slow?ms=20000").await;
    assert_eq!(ans.status, StatusCode::GATEWAY_TIMEOUT);
    assert!(
        ans.text().contains("sent no response within 1s"),
        "{}",
        ans.text()
    );
    let ans = get(addr, "/slow?ms=10").await;
    assert_eq!(
        ans.status,
        StatusCode::OK,
        "a timeout does not take the node out"
    );
}

/// A client that shuts down its sending side right after its request (as some HTTP/1.0 clients
/// and scripts do) still gets the whole answer, even when the node takes a while.
#[tokio::test]
async fn a_client_that_half_closes_after_its_request_gets_the_answer() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "")).await;
    let mut stream = tokio::net::TcpStream::connect(sw.listen_addrs[0])
        .await
        .unwrap();
    stream
        .write_all(b"GET /slow?ms=200 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .expect("answered within 10 s")
        .unwrap();
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
}

/// Client sockets are read and written directly until a call would block, and only then join
/// the event loop: a head that arrives in pieces, and a second request on the same connection
/// after a pause, both wait on the event loop and must still be served.
#[tokio::test]
async fn requests_that_arrive_in_pieces_and_after_pauses_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "")).await;
    let mut stream = tokio::net::TcpStream::connect(sw.listen_addrs[0])
        .await
        .unwrap();
    stream.set_nodelay(true).unwrap();
    for piece in [&b"GET /first HTTP/1.1\r\n"[..], b"Host: x\r\n", b"\r\n"] {
        stream.write_all(piece).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut buf = vec![0u8; 16 * 1024];
    let n = stream.read(&mut buf).await.unwrap();
    let first = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    stream
        .write_all(b"GET /headers?n=2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out))
        .await
        .expect("answered within 10 s")
        .unwrap();
    let second = String::from_utf8_lossy(&out);
    assert!(second.starts_with("HTTP/1.1 200"), "{second}");
    assert!(second.contains("GET /headers?n=2"), "{second}");
}
