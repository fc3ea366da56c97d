//! Requests without a body go to HTTP/1.1 nodes by the switch's own codec
//! (`crate::node_h1`): every way a node may delimit its answer arrives whole at the client, a
//! connection is reused only when its answer allows it, and a broken answer is a clean error.
//! A scripted node answers each request with the next of its canned responses.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use hyper::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Ends a canned response: the node closes the connection after writing it.
const HANG_UP: &str = "<hang up>";

/// A node that answers the n-th request it reads with the n-th canned response.
struct ScriptedNode {
    addr: SocketAddr,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ScriptedNode {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScriptedNode {
    async fn start(responses: &[&str]) -> ScriptedNode {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(AtomicU64::new(0));
        let script: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(
            responses.iter().rev().map(|r| r.to_string()).collect(),
        ));
        let task = {
            let accepted = accepted.clone();
            tokio::spawn(async move {
                while let Ok((stream, _)) = listener.accept().await {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    tokio::spawn(answer(stream, script.clone()));
                }
            })
        };
        ScriptedNode {
            addr,
            accepted,
            task,
        }
    }

    fn config(&self) -> String {
        format!(
            "listen = [\"127.0.0.1:0\"]\n[[node]]\nname = \"n0\"\naddress = \"{}\"\n",
            self.addr
        )
    }

    fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

async fn answer(mut stream: TcpStream, script: Arc<Mutex<Vec<String>>>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.drain(..end + 4);
            let Some(response) = script.lock().unwrap().pop() else {
                return;
            };
            let (bytes, hang_up) = match response.strip_suffix(HANG_UP) {
                Some(bytes) => (bytes.to_string(), true),
                None => (response, false),
            };
            if stream.write_all(bytes.as_bytes()).await.is_err() || hang_up {
                return;
            }
        }
    }
}

/// The body of a raw exchange's answer (after its head).
fn body_of(raw: &str) -> &str {
    raw.split_once("\r\n\r\n").map_or("", |(_, body)| body)
}

#[tokio::test]
async fn every_framing_arrives_whole_on_one_reused_connection() {
    let node = ScriptedNode::start(&[
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n7;x=1\r\n, world\r\n0\r\nX-Sum: 1\r\n\r\n",
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        "HTTP/1.1 204 No Content\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n",
        "HTTP/1.1 200 Fine Thanks\r\nContent-Length: 0\r\n\r\n",
    ])
    .await;
    let switch = start_switch(&node.config()).await;
    let addr = switch.listen_addrs[0];
    let a = get(addr, "/length").await;
    assert_eq!((a.status, a.text().as_str()), (StatusCode::OK, "hello"));
    let a = get(addr, "/chunked").await;
    assert_eq!(a.text(), "hello, world");
    let a = get(addr, "/continue").await;
    assert_eq!((a.status, a.text().as_str()), (StatusCode::OK, "ok"));
    let a = get(addr, "/none").await;
    assert_eq!((a.status, a.text().as_str()), (StatusCode::NO_CONTENT, ""));
    let head = send(addr, hyper::Request::head("/head"), bytes::Bytes::new()).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.header("content-length"), "9");
    let raw = raw_exchange(
        addr,
        b"GET /reason HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 200 Fine Thanks\r\n"), "{raw}");
    assert_eq!(node.accepted(), 1, "one connection carried all six");
}

#[tokio::test]
async fn a_body_until_close_arrives_whole_and_its_connection_is_not_reused() {
    let node = ScriptedNode::start(&[
        &format!("HTTP/1.1 200 OK\r\n\r\nall of it{HANG_UP}"),
        "HTTP/1.1 200 OK\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnext",
        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nthird",
    ])
    .await;
    let switch = start_switch(&node.config()).await;
    let addr = switch.listen_addrs[0];
    assert_eq!(get(addr, "/a").await.text(), "all of it");
    assert_eq!(get(addr, "/b").await.text(), "next");
    assert_eq!(get(addr, "/c").await.text(), "third");
    assert_eq!(
        node.accepted(),
        3,
        "neither answer left its connection reusable"
    );
}

#[tokio::test]
async fn with_both_transfer_encoding_and_content_length_the_chunks_decide() {
    let node = ScriptedNode::start(&[
        "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    ])
    .await;
    let switch = start_switch(&node.config()).await;
    let raw = raw_exchange(
        switch.listen_addrs[0],
        b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(
        !raw.to_ascii_lowercase().contains("content-length: 100"),
        "{raw}"
    );
    assert!(body_of(&raw).contains("abc"), "{raw}");
}

#[tokio::test]
async fn a_malformed_answer_is_a_502_and_a_body_cut_short_ends_the_client_connection() {
    let node = ScriptedNode::start(&[
        "HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        "NOT HTTP AT ALL\r\n\r\n",
        &format!("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc{HANG_UP}"),
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ])
    .await;
    let switch = start_switch(&node.config()).await;
    let addr = switch.listen_addrs[0];
    for path in ["/bad-length", "/two-lengths", "/garbage"] {
        let a = get(addr, path).await;
        assert_eq!(a.status, StatusCode::BAD_GATEWAY, "{path}: {}", a.text());
        assert!(a.text().contains("malformed"), "{path}: {}", a.text());
    }
    // The client's connection ends short of the length announced (hyper may not even have
    // sent the head): never a whole answer.
    let raw = raw_exchange(addr, b"GET /cut HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert!(body_of(&raw).len() < 10, "{raw}");
    assert_eq!(get(addr, "/after").await.text(), "ok", "the switch goes on");
}
