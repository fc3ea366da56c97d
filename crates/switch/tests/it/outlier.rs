//! Hung nodes over real sockets: a node that accepts and never answers misses the first-byte
//! timeout, the request is answered by another node, and after the configured failures in a
//! row the outlier detector ejects it — never more than `max_ejected_percent` of the nodes —
//! and takes it back when its ejection ends and it answers again.

use crate::common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::*;
use hyper::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A node that accepts connections and reads requests but answers none while it is hung (a
/// SIGSTOPped process, seen from the switch); once resumed, it answers `200 hung-node`.
struct HungNode {
    addr: SocketAddr,
    requests: Arc<AtomicU64>,
    resume: Arc<tokio::sync::watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HungNode {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl HungNode {
    async fn start() -> HungNode {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let resume = Arc::new(tokio::sync::watch::channel(false).0);
        let (counted, resumed) = (Arc::clone(&requests), Arc::clone(&resume));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counted = Arc::clone(&counted);
                let resumed = resumed.subscribe();
                tokio::spawn(serve_when_resumed(stream, counted, resumed));
            }
        });
        HungNode {
            addr,
            requests,
            resume,
            task,
        }
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn resume(&self) {
        self.resume.send_replace(true);
    }
}

/// Reads requests (one head per read is enough for these tests) and answers each only once
/// the node is resumed.
async fn serve_when_resumed(
    mut stream: tokio::net::TcpStream,
    counted: Arc<AtomicU64>,
    mut resumed: tokio::sync::watch::Receiver<bool>,
) {
    let mut buf = [0u8; 8192];
    loop {
        match stream.read(&mut buf).await {
            Ok(n) if n > 0 => {}
            _ => return,
        }
        counted.fetch_add(1, Ordering::Relaxed);
        if resumed.wait_for(|r| *r).await.is_err() {
            return;
        }
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nhung-node";
        if stream.write_all(answer).await.is_err() {
            return;
        }
    }
}

fn config(good: &[&Backend], hung: &[&HungNode], extra: &str) -> String {
    let mut text = config_for(good, extra);
    for (i, node) in hung.iter().enumerate() {
        text.push_str(&format!(
            "[[node]]\nname = \"hung{i}\"\naddress = \"{}\"\n",
            node.addr
        ));
    }
    text
}

/// Failures count alone here: no admission limit in the way. The first-byte timeout is what
/// a hung node's requests wait out; a healthy node on loopback answers in a millisecond, so
/// only a machine that held it back for a whole second could make it miss (and be ejected).
const FAST_DETECTION: &str = "[admission]\nlimit = \"off\"\n\
                              [timeouts]\nfirst_byte = \"1s\"\nupstream = \"10s\"\n";

#[tokio::test]
async fn a_hung_node_is_ejected_and_its_requests_are_answered_elsewhere() {
    let good = [Backend::start("n0").await, Backend::start("n1").await];
    let hung = HungNode::start().await;
    let extra =
        format!("{FAST_DETECTION}[outlier]\nconsecutive_failures = 2\nbase_ejection = \"60s\"\n");
    let sw = start_switch(&config(&[&good[0], &good[1]], &[&hung], &extra)).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());

    // Round robin sends every third request to the hung node; each waits out the first-byte
    // timeout there and is answered by another node.
    for i in 0..9 {
        let answer = get(addr, &format!("/r{i}")).await;
        assert_eq!(answer.status, StatusCode::OK, "/r{i}: {}", answer.text());
        assert!(
            answer.node() == "n0" || answer.node() == "n1",
            "{}",
            answer.node()
        );
    }
    let status = status_json(admin).await;
    let node = node_status(&status, "hung0");
    assert_eq!(node["state"], "ejected", "{node}");
    assert_eq!(node["available"], false, "{node}");
    assert_eq!(node["outlier"]["ejections"], 1, "{node}");
    assert!(
        node["outlier"]["ejected_remaining_ms"].as_f64() > Some(1000.0),
        "{node}"
    );
    assert_eq!(node["errors"]["timeout"], 2, "{node}");
    assert_eq!(node["retries"], 2, "{node}");
    assert_eq!(hung.requests(), 2);
    let metrics = get(admin, "/metrics").await.text();
    for line in [
        "capstan_node_ejected{node=\"hung0\"} 1",
        "capstan_node_ejections_total{node=\"hung0\"} 1",
        "capstan_node_ejected{node=\"n0\"} 0",
        "capstan_node_up{node=\"hung0\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
    // Ejected, it is sent nothing more.
    for i in 0..9 {
        assert_eq!(get(addr, &format!("/s{i}")).await.status, StatusCode::OK);
    }
    assert_eq!(hung.requests(), 2, "no request went to the ejected node");
}

#[tokio::test]
async fn ejection_never_takes_out_more_than_the_max_percent() {
    let good = Backend::start("n0").await;
    let hung = [
        HungNode::start().await,
        HungNode::start().await,
        HungNode::start().await,
    ];
    let extra = format!(
        "{FAST_DETECTION}[outlier]\nconsecutive_failures = 1\nbase_ejection = \"60s\"\n\
         max_ejected_percent = 50\n"
    );
    let sw = start_switch(&config(&[&good], &[&hung[0], &hung[1], &hung[2]], &extra)).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let ejected = |s: &serde_json::Value| {
        s["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["state"] == "ejected")
            .count()
    };
    let prevented = |s: &serde_json::Value| {
        s["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["outlier"]["prevented"].as_u64().unwrap())
            .sum::<u64>()
    };
    // Every hung node fails every request it gets; two of four nodes may be out at once.
    let mut i = 0;
    loop {
        let _ = get(addr, &format!("/r{i}")).await;
        i += 1;
        let status = status_json(admin).await;
        assert!(ejected(&status) <= 2, "more than half out: {status}");
        if prevented(&status) >= 1 {
            assert_eq!(ejected(&status), 2, "{status}");
            assert_eq!(node_status(&status, "n0")["state"], "up", "{status}");
            break;
        }
        assert!(
            i < 40,
            "no ejection was prevented after {i} requests: {status}"
        );
    }
    let metrics = get(admin, "/metrics").await.text();
    assert!(
        metrics.contains("capstan_node_ejections_prevented_total"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_node_that_answers_again_is_taken_back_when_its_ejection_ends() {
    let good = Backend::start("n0").await;
    let hung = HungNode::start().await;
    // Ejected for two seconds and slow-starting for one: each state lasts long enough for the
    // status polls below to see it on a busy machine.
    let extra = format!(
        "{FAST_DETECTION}[outlier]\nconsecutive_failures = 1\nbase_ejection = \"2s\"\n\
         [health]\nslow_start = \"1s\"\n"
    );
    let sw = start_switch(&config(&[&good], &[&hung], &extra)).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    // Requests alternate; the first that meets the hung node ejects it.
    for i in 0..2 {
        assert_eq!(get(addr, &format!("/r{i}")).await.status, StatusCode::OK);
    }
    wait_for_status(admin, "the hung node ejected", |s| {
        node_status(s, "hung0")["state"] == "ejected"
    })
    .await;
    // SIGCONT, so to speak: the request it held is answered, and the next ones too.
    hung.resume();
    wait_for_status(admin, "the ejection to end (slow start)", |s| {
        node_status(s, "hung0")["state"] == "slow-start"
    })
    .await;
    // Slow start offers it a tenth of the picks at first, then more: poll until it has served.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut answered_by_it = 0;
    let mut i = 0;
    while answered_by_it < 2 {
        let answer = get(addr, &format!("/b{i}")).await;
        i += 1;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
        if answer.text() == "hung-node" {
            answered_by_it += 1;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the returned node served {answered_by_it} of {i} requests"
        );
    }
    let status = status_json(admin).await;
    let node = node_status(&status, "hung0");
    assert_eq!(node["outlier"]["consecutive_failures"], 0, "{node}");
    assert_eq!(node["outlier"]["ejections"], 1, "{node}");
}

#[tokio::test]
async fn a_request_that_cannot_be_retried_gets_a_504_naming_the_node_after_the_first_byte_timeout()
{
    let hung = HungNode::start().await;
    let good = Backend::start("n0").await;
    let extra = format!("{FAST_DETECTION}[policy]\nname = \"round-robin\"\n");
    let sw = start_switch(&config(&[&good], &[&hung], &extra)).await;
    let addr = sw.listen_addrs[0];
    let mut saw_504 = false;
    for _ in 0..2 {
        let answer = send(
            addr,
            hyper::Request::post("/form"),
            bytes::Bytes::from_static(b"a=1"),
        )
        .await;
        if answer.status == StatusCode::GATEWAY_TIMEOUT {
            assert!(
                answer.text().contains("node hung0") && answer.text().contains("1s"),
                "{}",
                answer.text()
            );
            saw_504 = true;
        } else {
            assert_eq!(answer.status, StatusCode::OK);
        }
    }
    assert!(saw_504, "one of two POSTs went to the hung node");
}
