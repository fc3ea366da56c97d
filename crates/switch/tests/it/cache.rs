//! The switch's HTTP cache over real sockets: RFC 9111 storage, freshness, validation, stale
//! answers, invalidation, ranges, HEAD, coalescing, streaming fills, eviction, PURGE and BAN.

use crate::cache_common;
use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use cache_common::{get, switch_with_cache, Origin, Poll, Script};
use common::{send, start_switch, status_json, Answer};
use http_body_util::BodyExt;
use hyper::{Request, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Answer {
    let mut req = Request::get(path).header("host", "site.test");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(addr, req, Bytes::new()).await
}

fn cache_status(a: &Answer) -> String {
    a.header("cache-status")
}

fn is_hit(a: &Answer) -> bool {
    let s = cache_status(a);
    s.starts_with("capstan; hit") || s.starts_with("capstan;hit")
}

#[tokio::test]
async fn a_fresh_response_is_stored_and_the_second_request_is_a_hit_with_age() {
    let origin = Origin::start().await;
    origin.script(
        "/a",
        Script::ok("hello", &[("cache-control", "max-age=60")]),
    );
    let sw = switch_with_cache(&origin, "").await;
    let first = get(sw.listen_addrs[0], "/a").await;
    assert_eq!(first.text(), "hello");
    let status = cache_status(&first);
    assert!(
        status.contains("fwd=uri-miss") && status.contains("stored"),
        "{status}"
    );
    let second = get(sw.listen_addrs[0], "/a").await;
    assert_eq!(second.text(), "hello");
    assert!(is_hit(&second), "{}", cache_status(&second));
    assert!(second.header("age").parse::<u64>().is_ok(), "Age is sent");
    assert_eq!(origin.hits("/a"), 1);
    let st = status_json(sw.admin_addr.unwrap()).await;
    assert_eq!(st["cache"]["hits"], 1);
    assert_eq!(st["cache"]["stored"], 1);
}

#[tokio::test]
async fn what_rfc_9111_forbids_is_not_stored() {
    let origin = Origin::start().await;
    origin.script(
        "/nostore",
        Script::ok("x", &[("cache-control", "no-store")]),
    );
    origin.script(
        "/private",
        Script::ok("x", &[("cache-control", "private, max-age=60")]),
    );
    origin.script(
        "/cookie",
        Script::ok(
            "x",
            &[("cache-control", "max-age=60"), ("set-cookie", "id=1")],
        ),
    );
    origin.script("/auth", Script::ok("x", &[("cache-control", "max-age=60")]));
    origin.script(
        "/auth-public",
        Script::ok("x", &[("cache-control", "public, max-age=60")]),
    );
    origin.script(
        "/teapot",
        Script {
            status: 418,
            ..Script::ok("x", &[])
        },
    );
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    for path in ["/nostore", "/private", "/cookie", "/teapot"] {
        get(addr, path).await;
        let again = get(addr, path).await;
        assert!(
            !is_hit(&again),
            "{path} must not be stored: {}",
            cache_status(&again)
        );
        assert_eq!(origin.hits(path), 2, "{path}");
    }
    for _ in 0..2 {
        get_with(addr, "/auth", &[("authorization", "Bearer t")]).await;
        get_with(addr, "/auth-public", &[("authorization", "Bearer t")]).await;
    }
    assert_eq!(
        origin.hits("/auth"),
        2,
        "Authorization without public is not stored"
    );
    assert_eq!(origin.hits("/auth-public"), 1, "public allows storing");
}

#[tokio::test]
async fn freshness_ends_at_max_age_and_s_maxage_wins() {
    let origin = Origin::start().await;
    origin.script("/short", Script::ok("v", &[("cache-control", "max-age=1")]));
    origin.script(
        "/shared",
        Script::ok("v", &[("cache-control", "max-age=0, s-maxage=60")]),
    );
    let sw = switch_with_cache(&origin, "grace = \"0s\"").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/short").await;
    get(addr, "/shared").await;
    assert!(
        is_hit(&get(addr, "/shared").await),
        "s-maxage overrides max-age"
    );
    // Keep asking: the entry is a hit until its second of freshness is over, then refetched.
    let poll = Poll::new("/short to go stale");
    while origin.hits("/short") < 2 {
        get(addr, "/short").await;
        poll.next().await;
    }
    assert_eq!(origin.hits("/shared"), 1);
}

#[tokio::test]
async fn request_directives_no_cache_max_age_and_only_if_cached() {
    let origin = Origin::start().await;
    origin.script("/d", Script::ok("v", &[("cache-control", "max-age=60")]));
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    let miss = get_with(addr, "/other", &[("cache-control", "only-if-cached")]).await;
    assert_eq!(miss.status, StatusCode::GATEWAY_TIMEOUT);
    get(addr, "/d").await;
    assert!(is_hit(
        &get_with(addr, "/d", &[("cache-control", "only-if-cached")]).await
    ));
    get_with(addr, "/d", &[("cache-control", "no-cache")]).await;
    assert_eq!(origin.hits("/d"), 2, "no-cache goes to the node");
    get_with(addr, "/d", &[("cache-control", "max-age=0")]).await;
    assert_eq!(origin.hits("/d"), 3, "max-age=0 refuses any age");
}

#[tokio::test]
async fn vary_keeps_variants_apart_and_vary_star_never_matches() {
    let origin = Origin::start().await;
    origin.script(
        "/v",
        Script::ok(
            "body",
            &[("cache-control", "max-age=60"), ("vary", "accept-encoding")],
        ),
    );
    origin.script(
        "/star",
        Script::ok("s", &[("cache-control", "max-age=60"), ("vary", "*")]),
    );
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    let gz = [("accept-encoding", "gzip")];
    let br = [("accept-encoding", "br")];
    get_with(addr, "/v", &gz).await;
    let other = get_with(addr, "/v", &br).await;
    assert!(
        cache_status(&other).contains("fwd=vary-miss"),
        "{}",
        cache_status(&other)
    );
    assert!(is_hit(&get_with(addr, "/v", &gz).await));
    assert!(is_hit(&get_with(addr, "/v", &br).await));
    assert_eq!(origin.hits("/v"), 2);
    get(addr, "/star").await;
    get(addr, "/star").await;
    assert_eq!(origin.hits("/star"), 2);
}

#[tokio::test]
async fn a_stale_entry_is_revalidated_and_a_304_updates_its_headers() {
    let origin = Origin::start().await;
    let mut script = Script::ok(
        "stored body",
        &[
            ("cache-control", "max-age=0"),
            ("etag", "\"v1\""),
            ("x-version", "1"),
        ],
    );
    script.not_modified_for = Some("\"v1\"".into());
    script.not_modified_headers = vec![
        ("etag".into(), "\"v1\"".into()),
        ("x-version".into(), "2".into()),
        ("cache-control".into(), "max-age=60".into()),
    ];
    origin.script("/r", script);
    let sw = switch_with_cache(&origin, "grace = \"0s\"").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/r").await;
    let revalidated = get(addr, "/r").await;
    assert_eq!(
        origin.last_header("/r", "if-none-match").as_deref(),
        Some("\"v1\"")
    );
    assert_eq!(revalidated.status, StatusCode::OK);
    assert_eq!(revalidated.text(), "stored body");
    assert_eq!(revalidated.header("x-version"), "2");
    let status = cache_status(&revalidated);
    assert!(
        status.contains("fwd=stale") && status.contains("fwd-status=304"),
        "{status}"
    );
    let third = get(addr, "/r").await;
    assert!(
        is_hit(&third),
        "the 304's max-age made it fresh: {}",
        cache_status(&third)
    );
    assert_eq!(third.header("x-version"), "2");
    assert_eq!(origin.hits("/r"), 2);
}

#[tokio::test]
async fn a_clients_conditional_request_is_answered_from_the_cache() {
    let origin = Origin::start().await;
    origin.script(
        "/c",
        Script::ok(
            "abc",
            &[("cache-control", "max-age=60"), ("etag", "\"e1\"")],
        ),
    );
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/c").await;
    let not_modified = get_with(addr, "/c", &[("if-none-match", "\"e1\"")]).await;
    assert_eq!(not_modified.status, StatusCode::NOT_MODIFIED);
    assert_eq!(not_modified.header("etag"), "\"e1\"");
    assert!(not_modified.body.is_empty());
    let changed = get_with(addr, "/c", &[("if-none-match", "\"other\"")]).await;
    assert_eq!(changed.status, StatusCode::OK);
    assert_eq!(origin.hits("/c"), 1);
}

#[tokio::test]
async fn stale_while_revalidate_serves_stale_then_refreshes_in_the_background() {
    let origin = Origin::start().await;
    origin.script(
        "/swr",
        Script::ok(
            "old",
            &[("cache-control", "max-age=1, stale-while-revalidate=60")],
        ),
    );
    let sw = switch_with_cache(&origin, "grace = \"0s\"").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/swr").await;
    origin.script(
        "/swr",
        Script::ok("new", &[("cache-control", "max-age=60")]),
    );
    // Once stale, the first answer is still the old body (no wait for the node) ...
    let poll = Poll::new("a background refresh of /swr");
    loop {
        let a = get(addr, "/swr").await;
        assert_eq!(
            a.text(),
            "old",
            "stale is served, never a wait for the new body"
        );
        if origin.hits("/swr") >= 2 {
            break;
        }
        poll.next().await;
    }
    // ... and the background refresh replaces it.
    let poll = Poll::new("the refreshed /swr to be stored");
    while get(addr, "/swr").await.text() != "new" {
        poll.next().await;
    }
}

#[tokio::test]
async fn stale_if_error_serves_stale_when_the_node_fails_or_is_gone() {
    let origin = Origin::start().await;
    origin.script(
        "/sie",
        Script::ok(
            "kept",
            &[("cache-control", "max-age=1, stale-if-error=600")],
        ),
    );
    let sw = switch_with_cache(&origin, "grace = \"0s\"").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/sie").await;
    origin.script(
        "/sie",
        Script {
            status: 503,
            ..Script::ok("down", &[])
        },
    );
    origin.wait_hits("/sie", 1).await;
    let poll = Poll::new("/sie to go stale and reach the failing node");
    while origin.hits("/sie") < 2 {
        let a = get(addr, "/sie").await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(a.text(), "kept");
        poll.next().await;
    }
    drop(origin);
    let a = get(addr, "/sie").await;
    assert_eq!(
        (a.status, a.text().as_str()),
        (StatusCode::OK, "kept"),
        "node gone"
    );
    let st = status_json(sw.admin_addr.unwrap()).await;
    assert!(st["cache"]["stale_on_error"].as_u64().unwrap() >= 2);
}

#[tokio::test]
async fn an_unsafe_method_invalidates_the_uri_and_its_location() {
    let origin = Origin::start().await;
    origin.script(
        "/item",
        Script::ok("item", &[("cache-control", "max-age=60")]),
    );
    origin.script(
        "/list",
        Script::ok("list", &[("cache-control", "max-age=60")]),
    );
    origin.script(
        "/item-edit",
        Script {
            status: 303,
            ..Script::ok("", &[("location", "/list")])
        },
    );
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/item").await;
    get(addr, "/list").await;
    let post = Request::post("/item").header("host", "site.test");
    send(addr, post, Bytes::from_static(b"x")).await;
    assert!(!is_hit(&get(addr, "/item").await), "POST invalidated /item");
    let edit = Request::post("/item-edit").header("host", "site.test");
    send(addr, edit, Bytes::from_static(b"x")).await;
    assert!(
        !is_hit(&get(addr, "/list").await),
        "Location on the same host invalidated"
    );
}

#[tokio::test]
async fn ranges_are_served_from_a_stored_full_response() {
    let origin = Origin::start().await;
    origin.script(
        "/r",
        Script::ok(
            "0123456789",
            &[
                ("cache-control", "max-age=60"),
                ("content-type", "text/plain"),
            ],
        ),
    );
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/r").await;
    let one = get_with(addr, "/r", &[("range", "bytes=2-4")]).await;
    assert_eq!(one.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(one.text(), "234");
    assert_eq!(one.header("content-range"), "bytes 2-4/10");
    let two = get_with(addr, "/r", &[("range", "bytes=0-1,8-")]).await;
    assert_eq!(two.status, StatusCode::PARTIAL_CONTENT);
    assert!(two
        .header("content-type")
        .starts_with("multipart/byteranges; boundary="));
    let text = two.text();
    assert!(
        text.contains("Content-Range: bytes 0-1/10")
            || text.contains("content-range: bytes 0-1/10"),
        "{text}"
    );
    assert!(text.contains("01") && text.contains("89"), "{text}");
    assert_eq!(two.header("content-length"), two.body.len().to_string());
    let bad = get_with(addr, "/r", &[("range", "bytes=50-60")]).await;
    assert_eq!(bad.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(bad.header("content-range"), "bytes */10");
    assert_eq!(origin.hits("/r"), 1, "ranges never went to the node");
}

#[tokio::test]
async fn head_is_answered_from_a_stored_get() {
    let origin = Origin::start().await;
    origin.script(
        "/h",
        Script::ok("twelve bytes", &[("cache-control", "max-age=60")]),
    );
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    let first = send(
        addr,
        Request::head("/h").header("host", "site.test"),
        Bytes::new(),
    )
    .await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(first.body.is_empty());
    let get_after = get(addr, "/h").await;
    assert!(
        is_hit(&get_after),
        "a HEAD miss filled the cache with a GET"
    );
    assert_eq!(get_after.text(), "twelve bytes");
    let head = send(
        addr,
        Request::head("/h").header("host", "site.test"),
        Bytes::new(),
    )
    .await;
    assert!(is_hit(&head));
    assert!(head.body.is_empty());
    assert_eq!(head.header("content-length"), "12");
    assert_eq!(origin.hits("/h"), 1);
}

#[tokio::test]
async fn concurrent_misses_make_one_node_request() {
    let origin = Origin::start().await;
    let mut held = Script::ok("shared", &[("cache-control", "max-age=60")]);
    held.hold = true;
    origin.script("/hot", held);
    let sw = switch_with_cache(&origin, "").await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let mut tasks = Vec::new();
    for _ in 0..100 {
        tasks.push(tokio::spawn(async move { get(addr, "/hot").await }));
    }
    // The node holds its answer until all 99 followers have joined the first request's fill.
    let poll = Poll::new("99 requests to join the fill");
    while status_json(admin).await["cache"]["coalesced"] != 99 {
        poll.next().await;
    }
    origin.release();
    let mut collapsed = 0;
    for t in tasks {
        let a = t.await.unwrap();
        assert_eq!(a.text(), "shared");
        collapsed += usize::from(cache_status(&a).contains("collapsed") || is_hit(&a));
    }
    assert_eq!(
        origin.hits("/hot"),
        1,
        "one node request for 100 concurrent misses"
    );
    assert_eq!(collapsed, 99);
}

/// A response the cache may not store is the request's own: requests that joined its fill
/// while it was in flight do not get it, but ask the node themselves.
#[tokio::test]
async fn a_response_the_cache_may_not_store_is_not_shared_with_coalesced_requests() {
    let origin = Origin::start().await;
    for (path, cache_control) in [
        ("/private", "private, max-age=60"),
        ("/nostore", "no-store"),
    ] {
        let mut held = Script::ok("for one client", &[("cache-control", cache_control)]);
        held.hold = true;
        origin.script(path, held);
    }
    let sw = switch_with_cache(&origin, "").await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let mut joined = 0;
    for path in ["/private", "/nostore"] {
        let tasks: Vec<_> = (0..5)
            .map(|_| tokio::spawn(async move { get(addr, path).await }))
            .collect();
        joined += 4;
        let poll = Poll::new("4 requests to join the fill");
        while status_json(admin).await["cache"]["coalesced"] != joined {
            poll.next().await;
        }
        origin.release();
        for t in tasks {
            let a = t.await.unwrap();
            assert_eq!(a.status, StatusCode::OK, "{path}");
            assert!(
                !cache_status(&a).contains("collapsed"),
                "{path}: {}",
                cache_status(&a)
            );
        }
        assert_eq!(origin.hits(path), 5, "{path}: every request asked the node");
    }
}

/// A request with `Authorization` never takes the response of another request's fill.
#[tokio::test]
async fn a_request_with_credentials_does_not_join_another_requests_fill() {
    let origin = Origin::start().await;
    let mut held = Script::ok("shared", &[("cache-control", "max-age=60")]);
    held.hold = true;
    origin.script("/page", held);
    let sw = switch_with_cache(&origin, "").await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let anonymous = tokio::spawn(async move { get(addr, "/page").await });
    origin.wait_hits("/page", 1).await;
    let authorized =
        tokio::spawn(
            async move { get_with(addr, "/page", &[("authorization", "Bearer t")]).await },
        );
    // It went to the node itself (which holds it like the first) rather than joining.
    origin.wait_hits("/page", 2).await;
    assert_eq!(status_json(admin).await["cache"]["coalesced"], 0);
    origin.release();
    for t in [anonymous, authorized] {
        let a = t.await.unwrap();
        assert_eq!(a.text(), "shared");
        assert!(
            !cache_status(&a).contains("collapsed"),
            "{}",
            cache_status(&a)
        );
    }
}

#[tokio::test]
async fn a_waiter_gets_bytes_before_the_node_has_finished_sending() {
    let origin = Origin::start().await;
    let mut gated = Script::ok(&"x".repeat(200_000), &[("cache-control", "max-age=60")]);
    gated.gate_after = Some(1000);
    origin.script("/stream", gated);
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    let client = common::client();
    let request = || {
        Request::get(format!("http://{addr}/stream"))
            .header("host", "site.test")
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap()
    };
    let leader = client.request(request()).await.unwrap();
    origin.wait_hits("/stream", 1).await;
    let waiter = client.request(request()).await.unwrap();
    assert!(waiter.headers()["cache-status"]
        .to_str()
        .unwrap()
        .contains("collapsed"));
    let mut body = waiter.into_body();
    // The origin holds the rest back until released: these bytes can only come from the fill.
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(!first.is_empty());
    assert_eq!(origin.hits("/stream"), 1);
    origin.release();
    let rest = body.collect().await.unwrap().to_bytes();
    assert_eq!(first.len() + rest.len(), 200_000);
    let all = leader.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(all.len(), 200_000);
}

#[tokio::test]
async fn a_lying_response_is_never_stored_and_the_client_connection_is_closed() {
    let origin = Origin::start().await;
    let mut liar = Script::ok(&"y".repeat(5000), &[("cache-control", "max-age=60")]);
    liar.cut_after = Some(1000);
    origin.script("/lie", liar);
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET /lie HTTP/1.1\r\nHost: site.test\r\n\r\n")
        .await
        .unwrap();
    // Read the head and the first 1000 body bytes; only then does the origin die.
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    let body_start = loop {
        let n = client.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed before the first bytes");
        raw.extend_from_slice(&buf[..n]);
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            if raw.len() - (i + 4) >= 1000 {
                break i + 4;
            }
        }
    };
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    origin.release();
    // Closed (EOF) or reset: either ends the read; a connection left open would time out.
    let _closed_or_reset =
        tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut raw))
            .await
            .expect("the switch closes the connection");
    assert!(
        raw.len() - body_start < 5000,
        "the connection closed before a full body"
    );
    origin.script(
        "/lie",
        Script::ok("honest", &[("cache-control", "max-age=60")]),
    );
    let next = get(addr, "/lie").await;
    assert_eq!(next.text(), "honest", "nothing corrupted was stored");
    assert_eq!(origin.hits("/lie"), 2);
}

#[tokio::test]
async fn an_object_over_max_object_passes_through_whole_and_uncached() {
    let origin = Origin::start().await;
    origin.script(
        "/huge",
        Script::ok(&"z".repeat(3 << 20), &[("cache-control", "max-age=60")]),
    );
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    for _ in 0..2 {
        let a = get(addr, "/huge").await;
        assert_eq!(a.body.len(), 3 << 20);
    }
    assert_eq!(origin.hits("/huge"), 2);
    let st = status_json(sw.admin_addr.unwrap()).await;
    assert_eq!(st["cache"]["memory"]["objects"], 0);
}

#[tokio::test]
async fn eviction_keeps_the_store_within_its_budget_under_every_policy() {
    for policy in ["lru", "lfu-da", "gdsf", "clfus", "s3-fifo", "sieve"] {
        let origin = Origin::start().await;
        let toml = format!(
            "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n\
             [cache]\nmemory = \"1MiB\"\nmax_object = \"200KB\"\npolicy = \"{policy}\"\n\
             [[node]]\naddress = \"{}\"\n",
            origin.addr
        );
        let sw = start_switch(&toml).await;
        let addr = sw.listen_addrs[0];
        for round in 0..2 {
            for i in 0..30 {
                let path = format!("/obj{i}");
                let body = "o".repeat(100_000);
                origin.script(&path, Script::ok(&body, &[("cache-control", "max-age=60")]));
                let a = get(addr, &path).await;
                assert_eq!(a.body.len(), 100_000, "{policy} round {round}");
            }
        }
        let st = status_json(sw.admin_addr.unwrap()).await;
        let mem = &st["cache"]["memory"];
        assert!(mem["bytes"].as_u64().unwrap() <= 1 << 20, "{policy}: {mem}");
        assert!(mem["objects"].as_u64().unwrap() <= 10, "{policy}: {mem}");
        if policy == "lru" {
            assert!(mem["evictions"].as_u64().unwrap() >= 20, "{mem}");
            assert!(is_hit(&get(addr, "/obj29").await), "the newest is kept");
            assert!(!is_hit(&get(addr, "/obj0").await), "the oldest went first");
        }
    }
}

#[tokio::test]
async fn purge_and_ban_on_the_admin_listener_and_purge_from_an_allowed_client() {
    let origin = Origin::start().await;
    for p in ["/p", "/img/1.png", "/img/2.png", "/q"] {
        origin.script(p, Script::ok("x", &[("cache-control", "max-age=60")]));
    }
    let sw = switch_with_cache(&origin, "purge_from = [\"127.0.0.0/8\"]").await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    for p in ["/p", "/img/1.png", "/img/2.png", "/q"] {
        get(addr, p).await;
    }
    let purged = send(
        admin,
        Request::post("/cache/purge?url=http://site.test/p"),
        Bytes::new(),
    )
    .await;
    assert_eq!(purged.status, StatusCode::OK, "{}", purged.text());
    assert!(purged.text().contains("\"purged\": 1"), "{}", purged.text());
    let banned = send(
        admin,
        Request::post("/cache/ban?regex=%5C.png%24"),
        Bytes::new(),
    )
    .await;
    assert!(banned.text().contains("\"banned\": 2"), "{}", banned.text());
    let bad = send(admin, Request::post("/cache/ban?regex=("), Bytes::new()).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let client_purge = send(
        addr,
        Request::builder()
            .method("PURGE")
            .uri("/q")
            .header("host", "site.test"),
        Bytes::new(),
    )
    .await;
    assert_eq!(
        client_purge.status,
        StatusCode::OK,
        "{}",
        client_purge.text()
    );
    for p in ["/p", "/img/1.png", "/q"] {
        assert!(!is_hit(&get(addr, p).await), "{p} was removed");
    }
}

#[tokio::test]
async fn purge_from_a_client_outside_purge_from_is_refused() {
    let origin = Origin::start().await;
    let sw = switch_with_cache(&origin, "").await;
    let refused = send(
        sw.listen_addrs[0],
        Request::builder()
            .method("PURGE")
            .uri("/q")
            .header("host", "site.test"),
        Bytes::new(),
    )
    .await;
    assert_eq!(refused.status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn key_rules_can_sort_the_query() {
    let origin = Origin::start().await;
    origin.script("/s", Script::ok("s", &[("cache-control", "max-age=60")]));
    let sw = switch_with_cache(&origin, "key = { query = \"sort\" }").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/s?b=2&a=1").await;
    assert!(is_hit(&get(addr, "/s?a=1&b=2").await));
    assert_eq!(origin.hits("/s"), 1);
}

#[tokio::test]
async fn metrics_and_status_page_show_the_cache() {
    let origin = Origin::start().await;
    origin.script("/m", Script::ok("m", &[("cache-control", "max-age=60")]));
    let sw = switch_with_cache(&origin, "").await;
    get(sw.listen_addrs[0], "/m").await;
    get(sw.listen_addrs[0], "/m").await;
    let admin = sw.admin_addr.unwrap();
    let metrics = get(admin, "/metrics").await.text();
    assert!(
        metrics.contains("capstan_cache_lookups_total{result=\"hit\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("capstan_cache_objects 1"), "{metrics}");
    let page = get(admin, "/").await.text();
    assert!(page.contains("hit ratio"), "{page}");
}

#[tokio::test]
async fn a_get_with_a_body_is_proxied_without_the_cache() {
    let origin = Origin::start().await;
    origin.script("/g", Script::ok("g", &[("cache-control", "max-age=60")]));
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    for _ in 0..2 {
        let a = send(
            addr,
            Request::get("/g").header("host", "site.test"),
            Bytes::from_static(b"body"),
        )
        .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(cache_status(&a), "", "not looked up");
    }
    assert_eq!(origin.hits("/g"), 2);
}

#[tokio::test]
async fn must_revalidate_is_never_served_stale_and_max_stale_is_honoured_otherwise() {
    let origin = Origin::start().await;
    origin.script(
        "/strict",
        Script::ok(
            "s",
            &[(
                "cache-control",
                "max-age=1, must-revalidate, stale-while-revalidate=60",
            )],
        ),
    );
    origin.script(
        "/lenient",
        Script::ok("l", &[("cache-control", "max-age=1")]),
    );
    let sw = switch_with_cache(&origin, "grace = \"0s\"").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/strict").await;
    get(addr, "/lenient").await;
    // Wait until the lenient entry is stale (a plain request would go to the node) ...
    let poll = Poll::new("/lenient to go stale");
    loop {
        let a = get_with(addr, "/lenient", &[("cache-control", "max-stale")]).await;
        if cache_status(&a).contains("ttl=-") {
            assert!(
                is_hit(&a),
                "max-stale accepts a stale entry: {}",
                cache_status(&a)
            );
            break;
        }
        poll.next().await;
    }
    assert_eq!(origin.hits("/lenient"), 1);
    // ... then must-revalidate refuses max-stale and stale-while-revalidate alike.
    let strict = get_with(addr, "/strict", &[("cache-control", "max-stale")]).await;
    assert!(!is_hit(&strict), "{}", cache_status(&strict));
    assert_eq!(origin.hits("/strict"), 2);
    let fresh_enough = get_with(addr, "/lenient", &[("cache-control", "min-fresh=30")]).await;
    assert!(
        !is_hit(&fresh_enough),
        "min-fresh=30 refuses an entry about to expire"
    );
}

#[tokio::test]
async fn heuristic_freshness_comes_from_last_modified() {
    let origin = Origin::start().await;
    // Modified ten days ago: 10 % of that is a day of heuristic freshness (capped by default
    // at one day), so the entry is fresh without any explicit lifetime.
    let ten_days_ago = std::time::SystemTime::now() - Duration::from_secs(10 * 86_400);
    let last_modified = httpdate::fmt_http_date(ten_days_ago);
    origin.script(
        "/old",
        Script::ok("old", &[("last-modified", last_modified.as_str())]),
    );
    origin.script("/none", Script::ok("none", &[]));
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/old").await;
    let again = get(addr, "/old").await;
    assert!(is_hit(&again), "{}", cache_status(&again));
    let ttl: i64 = cache_status(&again)
        .split("ttl=")
        .nth(1)
        .and_then(|t| t.split(';').next())
        .and_then(|t| t.trim().parse().ok())
        .expect("a ttl");
    assert!((86_000..=86_400).contains(&ttl), "about a day: {ttl}");
    get(addr, "/none").await;
    get(addr, "/none").await;
    assert_eq!(
        origin.hits("/none"),
        2,
        "no validator, no lifetime: not reused"
    );
}
