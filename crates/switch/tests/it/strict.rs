//! The MUST rules of RFC 9112 / RFC 9110 for requests, at the socket: a request the switch must
//! refuse gets its status, the connection is closed, and nothing reaches a node. Some rules are
//! enforced by hyper's parser, some by the switch (`strict.rs`); each has a case here so that a
//! change in either shows.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends `bytes` and reads until the switch closes; `None` when it kept the connection open
/// for 5 s (so a refusal that forgot to close shows as a failure, not a hang).
async fn exchange_until_close(addr: SocketAddr, bytes: &[u8]) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    match tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await {
        Ok(_) => Some(String::from_utf8_lossy(&out).into_owned()),
        Err(_) => None,
    }
}

/// How many responses `answer` holds.
fn status_lines(answer: &str) -> usize {
    answer
        .split("\r\n")
        .filter(|l| {
            l.starts_with("HTTP/1.")
                && l.get(9..12)
                    .is_some_and(|c| c.bytes().all(|b| b.is_ascii_digit()))
        })
        .count()
}

/// Each request gets `status` and a closed connection, and never reaches the node.
async fn assert_refused(cases: &[(&str, &[u8])], status: &str) {
    let node = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&node], "")).await;
    let addr = sw.listen_addrs[0];
    for (what, bytes) in cases {
        let answer = exchange_until_close(addr, bytes)
            .await
            .unwrap_or_else(|| panic!("{what}: the connection was left open"));
        assert!(
            answer.starts_with("HTTP/1.") && answer[9..].starts_with(status),
            "{what}: {answer:?}"
        );
        assert_eq!(
            status_lines(&answer),
            1,
            "{what}: one answer, then closed: {answer:?}"
        );
    }
    assert_eq!(node.hits(), 0, "no refused request was forwarded");
    // The switch still serves.
    let ok = exchange_until_close(
        addr,
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await
    .unwrap();
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
}

/// Rules hyper's parser already enforces: these pin that it still does.
#[tokio::test]
async fn framing_and_field_syntax_errors_get_400_from_the_parser() {
    // A second request follows each bad one on the same connection: it must not be answered.
    let next = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("space before colon", format!("GET / HTTP/1.1\r\nHost: x\r\nX-A : b\r\n\r\n{next}")),
        ("tab before colon", format!("GET / HTTP/1.1\r\nHost\t: x\r\n\r\n{next}")),
        (
            "final coding not chunked",
            format!("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n{next}"),
        ),
        (
            "only coding not chunked",
            format!("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n{next}"),
        ),
        (
            "chunked then another coding on a second line",
            format!("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n{next}"),
        ),
        (
            "transfer coding on HTTP/1.0",
            format!("POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{next}"),
        ),
        (
            "differing Content-Length lines",
            format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd{next}"),
        ),
        (
            "Content-Length list",
            format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 4\r\n\r\nabcd{next}"),
        ),
        ("negative Content-Length", format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{next}")),
        ("signed Content-Length", format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\nabc{next}")),
        ("hex Content-Length", format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x3\r\n\r\nabc{next}")),
        (
            "Content-Length past u64",
            format!("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n{next}"),
        ),
        ("bare CR in a value", format!("GET / HTTP/1.1\r\nHost: x\r\nX-A: b\rc\r\n\r\n{next}")),
        ("NUL in a value", format!("GET / HTTP/1.1\r\nHost: x\r\nX-A: b\0c\r\n\r\n{next}")),
        ("bare LF inside a value", format!("GET / HTTP/1.1\r\nHost: x\r\nX-A: b\nc\r\n\r\n{next}")),
        ("obs-fold", format!("GET / HTTP/1.1\r\nHost: x\r\nX-A: b\r\n c\r\n\r\n{next}")),
        ("obs-fold with a tab", format!("GET / HTTP/1.1\r\nHost: x\r\nX-A: b\r\n\tc\r\n\r\n{next}")),
        ("NUL in a field name", format!("GET / HTTP/1.1\r\nHost: x\r\nX-\0A: b\r\n\r\n{next}")),
    ]
    .into_iter()
    .map(|(what, text)| (what, text.into_bytes()))
    .collect();
    let cases: Vec<(&str, &[u8])> = cases.iter().map(|(w, b)| (*w, b.as_slice())).collect();
    assert_refused(&cases, "400").await;
}

/// Rules the switch enforces itself (hyper accepts these heads).
#[tokio::test]
async fn host_rules_get_400_from_the_switch() {
    let next = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let cases: Vec<(&str, String)> = vec![
        (
            "HTTP/1.1 without Host",
            format!("GET / HTTP/1.1\r\n\r\n{next}"),
        ),
        (
            "two Host lines",
            format!("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n{next}"),
        ),
        (
            "two differing Host lines",
            format!("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n{next}"),
        ),
        (
            "Host with a space",
            format!("GET / HTTP/1.1\r\nHost: a b\r\n\r\n{next}"),
        ),
        (
            "Host with userinfo",
            format!("GET / HTTP/1.1\r\nHost: u@a\r\n\r\n{next}"),
        ),
        (
            "Host with a bad port",
            format!("GET / HTTP/1.1\r\nHost: a:99999\r\n\r\n{next}"),
        ),
        (
            "Host with a path",
            format!("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n{next}"),
        ),
        (
            "two Hosts on HTTP/1.0",
            format!("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\nConnection: keep-alive\r\n\r\n{next}"),
        ),
        (
            "absolute-form with userinfo",
            format!("GET http://u:p@a/ HTTP/1.1\r\nHost: a\r\n\r\n{next}"),
        ),
    ];
    let cases: Vec<(&str, &[u8])> = cases.iter().map(|(w, t)| (*w, t.as_bytes())).collect();
    assert_refused(&cases, "400").await;
}

/// A coding other than chunked, even with chunked last, cannot be forwarded faithfully.
#[tokio::test]
async fn transfer_codings_other_than_chunked_get_501() {
    let body = "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
    assert_refused(&[("gzip, chunked", body.as_bytes())], "501").await;
}

/// What the rules allow stays allowed.
#[tokio::test]
async fn lawful_requests_still_pass() {
    let node = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&node], "")).await;
    let addr = sw.listen_addrs[0];
    let ask = |bytes: &'static [u8]| async move {
        exchange_until_close(addr, bytes)
            .await
            .expect("answered and closed")
    };
    let a = ask(b"GET /headers HTTP/1.0\r\n\r\n").await;
    assert!(a.starts_with("HTTP/1.0 200"), "HTTP/1.0 without Host: {a}");
    let a = ask(b"GET /headers HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n").await;
    assert!(
        a.starts_with("HTTP/1.1 200"),
        "empty Host (RFC 9112 3.2): {a}"
    );
    // Identical Content-Length lines are one length (RFC 9112 6.3).
    let a = ask(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc").await;
    assert!(
        a.starts_with("HTTP/1.1 200") && a.ends_with("\r\n\r\n3"),
        "{a}"
    );
    // A single LF may end a field line (RFC 9112 2.2 lets a recipient accept it); the switch
    // writes its own CRLFs toward the node, so nothing ambiguous is forwarded.
    let a = ask(b"GET /headers HTTP/1.1\nHost: x\nX-A: b\nConnection: close\n\n").await;
    assert!(
        a.starts_with("HTTP/1.1 200") && a.contains("x-a: b\n"),
        "{a}"
    );
}

/// Both `Transfer-Encoding` and `Content-Length`: hyper reads the body as chunked, drops the
/// length and closes the connection after the answer (RFC 9112 6.1 allows exactly this); the
/// node sees a body framed one way only.
#[tokio::test]
async fn chunked_with_a_content_length_is_read_as_chunked_and_the_connection_closed() {
    let node = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&node], "")).await;
    let request = b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let a = exchange_until_close(sw.listen_addrs[0], request)
        .await
        .expect("closed after the answer");
    assert!(a.starts_with("HTTP/1.1 200"), "{a}");
    assert!(a.ends_with("\r\n\r\n3"), "the node read 3 body bytes: {a}");
    assert_eq!(status_lines(&a), 1, "nothing after it: {a}");
    assert_eq!(node.hits(), 1);
}

/// RFC 9112 3.2.2: the authority of an absolute-form target replaces `Host`.
#[tokio::test]
async fn absolute_form_authority_replaces_host() {
    let node = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&node], "")).await;
    let addr = sw.listen_addrs[0];
    for request in [
        &b"GET http://www.example.org:8080/headers?q=1 HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n"[..],
        b"GET http://www.example.org:8080/headers?q=1 HTTP/1.1\r\nConnection: close\r\n\r\n",
    ] {
        let a = exchange_until_close(addr, request).await.unwrap();
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
        assert!(a.contains("GET /headers?q=1 HTTP/1.1\n"), "origin-form to the node: {a}");
        assert!(a.contains("host: www.example.org:8080\n"), "{a}");
        assert!(!a.contains("other.example"), "{a}");
    }
}
