//! Idle and slow clients on real sockets: the patched hyper (vendor/hyper, CAPSTAN-PATCH.md)
//! gives a connection's read buffer back while it waits and reads heads through a stack
//! buffer. These tests cover what a broken patch would lose: requests after an idle pause,
//! heads split across many writes or larger than the stack buffer, pipelining, slow bodies.
//! The pauses here are the behaviour under test (a client that goes quiet), not synchronisation.
use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a client stays quiet between its actions.
const PAUSE: Duration = Duration::from_millis(300);

/// A client connection that reads whole responses (`content-length` bodies) off one stream,
/// keeping what it read past a response for the next one (pipelining).
struct RawClient {
    stream: TcpStream,
    pending: Vec<u8>,
}

/// One answer: the status line and the body.
struct RawAnswer {
    status_line: String,
    body: String,
}

impl RawClient {
    async fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        RawClient {
            stream,
            pending: Vec::new(),
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// Reads until `until` holds for what is buffered, failing after 10 s.
    async fn fill(&mut self, until: impl Fn(&[u8]) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut chunk = [0u8; 4096];
        while !until(&self.pending) {
            let n = tokio::time::timeout_at(deadline, self.stream.read(&mut chunk))
                .await
                .expect("an answer within 10 s")
                .unwrap();
            assert!(
                n > 0,
                "closed early: {}",
                String::from_utf8_lossy(&self.pending)
            );
            self.pending.extend_from_slice(&chunk[..n]);
        }
    }

    async fn answer(&mut self) -> RawAnswer {
        self.fill(|b| head_end(b).is_some()).await;
        let end = head_end(&self.pending).unwrap();
        let head = String::from_utf8_lossy(&self.pending[..end]).into_owned();
        let length = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().unwrap())
            })
            .unwrap_or_else(|| panic!("a content-length in {head}"));
        self.fill(|b| b.len() >= end + length).await;
        let body = String::from_utf8_lossy(&self.pending[end..end + length]).into_owned();
        self.pending.drain(..end + length);
        RawAnswer {
            status_line: head.lines().next().unwrap_or_default().to_string(),
            body,
        }
    }
}

fn assert_ok(answer: &RawAnswer) {
    assert!(
        answer.status_line.starts_with("HTTP/1.1 200"),
        "{} {}",
        answer.status_line,
        answer.body
    );
}

fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| i + 4)
}

async fn one_node_switch() -> (Backend, capstan_switch::Running) {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "[timeouts]\nclient_idle = \"60s\"\n")).await;
    (a, sw)
}

#[tokio::test]
async fn keep_alive_connection_serves_a_request_after_an_idle_pause() {
    let (_a, sw) = one_node_switch().await;
    let mut client = RawClient::connect(sw.listen_addrs[0]).await;
    for _ in 0..3 {
        client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let answer = client.answer().await;
        assert_ok(&answer);
        assert_eq!(answer.body, "a");
        tokio::time::sleep(PAUSE).await;
    }
}

#[tokio::test]
async fn head_split_across_many_writes_after_an_idle_pause() {
    let (_a, sw) = one_node_switch().await;
    let mut client = RawClient::connect(sw.listen_addrs[0]).await;
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(client.answer().await.body, "a");
    tokio::time::sleep(PAUSE).await;
    let head = b"GET /headers HTTP/1.1\r\nHost: x\r\nX-Split: one-byte-at-a-time\r\n\r\n";
    for piece in head.chunks(3) {
        client.send(piece).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let answer = client.answer().await;
    assert_ok(&answer);
    assert!(answer.body.starts_with("GET /headers"), "{}", answer.body);
    assert!(
        answer.body.contains("x-split: one-byte-at-a-time"),
        "{}",
        answer.body
    );
}

#[tokio::test]
async fn head_larger_than_the_stack_buffer_after_an_idle_pause() {
    let (_a, sw) = one_node_switch().await;
    let mut client = RawClient::connect(sw.listen_addrs[0]).await;
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(client.answer().await.body, "a");
    tokio::time::sleep(PAUSE).await;
    // 40 headers of ~300 bytes: a 12 KB head, more than hyper's 8 KB first read.
    let mut head = String::from("GET /headers HTTP/1.1\r\nHost: x\r\n");
    for i in 0..40 {
        head.push_str(&format!("X-Big-{i:02}: {}\r\n", "v".repeat(290)));
    }
    head.push_str("\r\n");
    assert!(head.len() > 12_000);
    client.send(head.as_bytes()).await;
    let answer = client.answer().await;
    assert_ok(&answer);
    for i in 0..40 {
        assert!(
            answer.body.contains(&format!("x-big-{i:02}: vvv")),
            "header {i} lost"
        );
    }
    // The connection goes on serving after the large head.
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(client.answer().await.body, "a");
}

#[tokio::test]
async fn pipelined_requests_in_one_write_are_all_answered_in_order() {
    let (_a, sw) = one_node_switch().await;
    let mut client = RawClient::connect(sw.listen_addrs[0]).await;
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(client.answer().await.body, "a");
    tokio::time::sleep(PAUSE).await;
    let mut burst = Vec::new();
    for i in 0..5 {
        burst.extend_from_slice(
            format!("GET /headers?n={i} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
        );
    }
    client.send(&burst).await;
    for i in 0..5 {
        let answer = client.answer().await;
        assert_ok(&answer);
        assert!(
            answer.body.starts_with(&format!("GET /headers?n={i} ")),
            "{}",
            answer.body
        );
    }
}

#[tokio::test]
async fn request_body_arriving_slowly_is_forwarded_whole() {
    let (_a, sw) = one_node_switch().await;
    let mut client = RawClient::connect(sw.listen_addrs[0]).await;
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(client.answer().await.body, "a");
    tokio::time::sleep(PAUSE).await;
    client
        .send(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 3000\r\n\r\n")
        .await;
    for _ in 0..10 {
        client.send(&[b'u'; 300]).await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let answer = client.answer().await;
    assert_ok(&answer);
    assert_eq!(answer.body, "3000");
    // And a chunked body in slow pieces, then one more request on the same connection.
    client
        .send(b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await;
    for _ in 0..5 {
        client.send(b"64\r\n").await;
        client.send(&[b'c'; 100]).await;
        client.send(b"\r\n").await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    client.send(b"0\r\n\r\n").await;
    assert_eq!(client.answer().await.body, "500");
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(client.answer().await.body, "a");
}

#[tokio::test]
async fn expect_100_continue_after_an_idle_pause() {
    let (_a, sw) = one_node_switch().await;
    let mut client = RawClient::connect(sw.listen_addrs[0]).await;
    client.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(client.answer().await.body, "a");
    tokio::time::sleep(PAUSE).await;
    client
        .send(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        .await;
    client.fill(|b| head_end(b).is_some()).await;
    let end = head_end(&client.pending).unwrap();
    let interim = String::from_utf8_lossy(&client.pending[..end]).into_owned();
    assert!(interim.starts_with("HTTP/1.1 100"), "{interim}");
    client.pending.drain(..end);
    client.send(b"hello").await;
    assert_eq!(client.answer().await.body, "5");
}
