//! Retrying on another node when a node takes the request and closes or resets the connection
//! without answering (HAProxy's `retry-on empty-response`), and the retry budget that stops
//! retries from multiplying an outage.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use hyper::{Request, StatusCode};
use tokio::io::AsyncReadExt;

/// A node that accepts, reads the request, and hangs up without a byte of answer; with
/// `reset`, it hangs up with a TCP RST instead of a FIN.
struct Hangup {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    /// What it read of each request.
    heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Hangup {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Hangup {
    async fn start(reset: bool) -> Hangup {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let heads = Arc::new(Mutex::new(Vec::new()));
        let (counted, read) = (Arc::clone(&requests), Arc::clone(&heads));
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let (counted, read) = (Arc::clone(&counted), Arc::clone(&read));
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    if let Ok(n @ 1..) = stream.read(&mut buf).await {
                        let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                        read.lock().unwrap().push(head);
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                    if reset {
                        let _ = socket2::SockRef::from(&stream)
                            .set_linger(Some(std::time::Duration::ZERO));
                    }
                });
            }
        });
        Hangup {
            addr,
            requests,
            heads,
            task,
        }
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

fn config(hangup: &Hangup, healthy: &Backend, extra: &str) -> String {
    format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\ndebug_headers = true\n{extra}\n\
         [[node]]\nname = \"hangup\"\naddress = \"{}\"\n\
         [[node]]\nname = \"b\"\naddress = \"{}\"\n",
        hangup.addr, healthy.addr
    )
}

#[tokio::test]
async fn gets_are_retried_when_a_node_closes_or_resets_without_answering() {
    for reset in [false, true] {
        let hangup = Hangup::start(reset).await;
        let b = Backend::start("b").await;
        let sw = start_switch(&config(&hangup, &b, "")).await;
        let addr = sw.listen_addrs[0];
        for i in 0..20 {
            let a = get(addr, &format!("/page{i}")).await;
            assert_eq!(a.status, StatusCode::OK, "reset={reset}: {}", a.text());
            assert_eq!(a.node(), "b");
        }
        assert!(
            hangup.requests() >= 5,
            "reset={reset}: round robin sent some to the node that hangs up: {}",
            hangup.requests()
        );
        let admin = sw.admin_addr.unwrap();
        let status = status_json(admin).await;
        assert_eq!(
            status["nodes"][0]["retries"].as_u64().unwrap(),
            hangup.requests(),
            "reset={reset}: every hang-up retried: {status}"
        );
        assert_eq!(status["nodes"][1]["retries"], 0);
        assert_eq!(status["retry_budget"]["exhausted"], 0);
        assert_eq!(status["retry_budget"]["percent"], 20);
        let metrics = get(admin, "/metrics").await.text();
        let line = format!(
            "capstan_node_retries_total{{node=\"hangup\"}} {}",
            hangup.requests()
        );
        assert!(metrics.contains(&line), "{line} in\n{metrics}");
    }
}

/// A retried request is sent again whole: the node that answers it sees the head the first
/// node was sent.
#[tokio::test]
async fn a_retried_get_reaches_the_next_node_with_the_same_head() {
    let hangup = Hangup::start(false).await;
    let b = Backend::start("b").await;
    let sw = start_switch(&config(&hangup, &b, "")).await;
    let addr = sw.listen_addrs[0];
    // The fields of a head, names in lower case, sorted: the order may differ.
    let fields = |head: &str| {
        let mut lines: Vec<String> = head
            .lines()
            .skip(1)
            .filter(|l| !l.is_empty())
            .map(|l| match l.split_once(": ") {
                Some((name, value)) => format!("{}: {value}", name.to_ascii_lowercase()),
                None => l.to_string(),
            })
            .collect();
        lines.sort();
        lines
    };
    let mut retried = 0;
    for i in 0..4 {
        let req = Request::builder()
            .uri(format!("/headers?{i}"))
            .header("x-trace", "t-1")
            .header("user-agent", "retry-test");
        let a = send(addr, req, Bytes::new()).await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.text());
        let seen_by_b = a.text();
        let first_try = hangup
            .heads
            .lock()
            .unwrap()
            .iter()
            .find(|h| h.starts_with(&format!("GET /headers?{i} HTTP/1.1\r\n")))
            .cloned();
        let Some(first_try) = first_try else { continue };
        retried += 1;
        assert_eq!(
            fields(&first_try),
            fields(&seen_by_b),
            "{first_try}\n{seen_by_b}"
        );
        let head = fields(&seen_by_b);
        for field in ["x-trace: t-1", "user-agent: retry-test"] {
            assert!(head.iter().any(|l| l == field), "{field} in {head:?}");
        }
        for name in ["host:", "x-forwarded-for:"] {
            let n = head.iter().filter(|l| l.starts_with(name)).count();
            assert_eq!(n, 1, "one {name} in {head:?}");
        }
    }
    assert!(
        retried >= 2,
        "round robin sent some first to the node that hangs up"
    );
}

#[tokio::test]
async fn requests_with_bodies_or_not_idempotent_get_502_naming_the_node() {
    let hangup = Hangup::start(false).await;
    let b = Backend::start("b").await;
    let sw = start_switch(&config(&hangup, &b, "")).await;
    let addr = sw.listen_addrs[0];
    for (what, method, body) in [
        ("POST without a body", "POST", ""),
        ("POST with a body", "POST", "abc"),
        ("PUT with a body", "PUT", "abc"),
    ] {
        let mut saw_502 = false;
        // Round robin: one of two requests goes to the node that hangs up.
        for _ in 0..2 {
            let req = Request::builder().method(method).uri("/upload");
            let a = send(addr, req, Bytes::from(body)).await;
            if a.status == StatusCode::BAD_GATEWAY {
                assert!(
                    a.text().contains("node hangup (") && a.text().contains("without a response"),
                    "{what}: {}",
                    a.text()
                );
                saw_502 = true;
            } else {
                assert_eq!(a.status, StatusCode::OK, "{what}: {}", a.text());
                assert_eq!(a.text(), body.len().to_string());
            }
        }
        assert!(saw_502, "{what}: not retried");
    }
    let status = status_json(sw.admin_addr.unwrap()).await;
    assert_eq!(status["nodes"][0]["retries"], 0, "{status}");
}

#[tokio::test]
async fn a_spent_retry_budget_lets_the_failure_through() {
    let hangup = Hangup::start(false).await;
    let b = Backend::start("b").await;
    let sw = start_switch(&config(
        &hangup,
        &b,
        "[upstream]\nretry_budget_percent = 0\nretry_budget_min_per_second = 0",
    ))
    .await;
    let addr = sw.listen_addrs[0];
    let mut failed = 0;
    for i in 0..4 {
        let a = get(addr, &format!("/p{i}")).await;
        if a.status == StatusCode::BAD_GATEWAY {
            assert!(a.text().contains("node hangup"), "{}", a.text());
            failed += 1;
        } else {
            assert_eq!(a.node(), "b");
        }
    }
    assert_eq!(failed, hangup.requests(), "no hang-up was retried");
    assert!(failed >= 1);
    let admin = sw.admin_addr.unwrap();
    let status = status_json(admin).await;
    assert_eq!(status["retry_budget"]["exhausted"], failed, "{status}");
    assert_eq!(status["nodes"][0]["retries"], 0);
    let metrics = get(admin, "/metrics").await.text();
    assert!(
        metrics.contains(&format!("capstan_retries_refused_total {failed}")),
        "{metrics}"
    );
}
