//! Admission over real sockets: a node offered more concurrent requests than its limit sheds the
//! excess at once with `503` + `Retry-After`, queues what it can start, hides from the policy
//! while saturated, times out queued requests, and every count returns to zero afterwards —
//! also when clients go away while queued or in flight.

use crate::common;

use std::time::Duration;

use common::*;
use hyper::StatusCode;

/// Starts `n` requests for `path` at once.
fn spawn_gets(
    addr: std::net::SocketAddr,
    path: &'static str,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Answer>> {
    (0..n)
        .map(|_| tokio::spawn(async move { get(addr, path).await }))
        .collect()
}

/// The switch shed `answer`: `503`, saying `says`.
fn assert_shed(answer: &Answer, says: &str) {
    assert_eq!(
        answer.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        answer.text()
    );
    assert!(answer.text().contains(says), "{}", answer.text());
}

fn admission<'a>(status: &'a serde_json::Value, node: &str) -> &'a serde_json::Value {
    &node_status(status, node)["admission"]
}

#[tokio::test]
async fn excess_requests_are_shed_at_once_and_counts_return_to_zero() {
    let node = Backend::start("n0").await;
    let text = config_for(
        &[&node],
        "[admission]\nlimit = 2\nqueue = 2\nqueue_timeout = \"20s\"\n",
    );
    let sw = start_switch(&text).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());

    let calls = spawn_gets(addr, "/hold", 10);
    // Two reach the node, two wait in the queue, six are shed without waiting for anything.
    wait_until("two requests held at the node", || node.held() == 2).await;
    let status = wait_for_status(admin, "six requests shed", |s| {
        admission(s, "n0")["shed"]["queue_full"] == 6
    })
    .await;
    let gate = admission(&status, "n0");
    assert_eq!(gate["mode"], "fixed", "{gate}");
    assert_eq!(
        (gate["in_flight"].as_u64(), gate["queued"].as_u64()),
        (Some(2), Some(2)),
        "{gate}"
    );
    assert_eq!(node_status(&status, "n0")["active"], 2);
    // The shed answers come back while the others are still held: nobody waited for them.
    wait_until("six answers", || {
        calls.iter().filter(|c| c.is_finished()).count() == 6
    })
    .await;
    let (mut shed, mut rest) = (Vec::new(), Vec::new());
    for call in calls {
        match call.is_finished() {
            true => shed.push(call.await.unwrap()),
            false => rest.push(call),
        }
    }
    for answer in &shed {
        assert_shed(answer, "concurrency limit (2)");
        assert_eq!(answer.header("retry-after"), "20");
    }
    let metrics = get(admin, "/metrics").await.text();
    for line in [
        "capstan_requests_shed_total{node=\"n0\",reason=\"queue-full\"} 6",
        "capstan_node_queue_length{node=\"n0\"} 2",
        "capstan_node_concurrency_limit{node=\"n0\"} 2",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }

    // Released, the two held and the two queued are answered by the node.
    node.release();
    for call in rest {
        let answer = call.await.unwrap();
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    }
    assert_eq!(node.hits(), 4);
    let status = wait_for_status(admin, "every count back to zero", |s| {
        let gate = admission(s, "n0");
        gate["in_flight"] == 0 && gate["queued"] == 0 && node_status(s, "n0")["active"] == 0
    })
    .await;
    assert_eq!(admission(&status, "n0")["shed"]["queue_timeout"], 0);
}

#[tokio::test]
async fn a_saturated_node_is_hidden_from_the_policy_while_another_has_room() {
    let nodes = [Backend::start("n0").await, Backend::start("n1").await];
    // Consistent hashing sends one key to one node — unless that node has no room.
    let text = config_for(
        &[&nodes[0], &nodes[1]],
        "[policy]\nname = \"consistent-hash\"\n[admission]\nlimit = 1\nqueue = 0\n",
    );
    let sw = start_switch(&text).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());

    let first = tokio::spawn(async move { get(addr, "/hold").await });
    wait_until("the key's node holds a request", || {
        nodes[0].held() + nodes[1].held() == 1
    })
    .await;
    let owner = if nodes[0].held() == 1 { "n0" } else { "n1" };
    let second = tokio::spawn(async move { get(addr, "/hold").await });
    wait_until("the other node takes the same key", || {
        nodes[0].held() == 1 && nodes[1].held() == 1
    })
    .await;
    // Both saturated: the key's own node is picked, and sheds.
    let third = get(addr, "/hold").await;
    assert_eq!(
        third.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        third.text()
    );
    // ⌈queue_timeout⌉, 5 s by default.
    assert_eq!(third.header("retry-after"), "5");
    let status = status_json(admin).await;
    assert_eq!(
        admission(&status, owner)["shed"]["queue_full"],
        1,
        "{status}"
    );
    for node in &nodes {
        node.release();
    }
    for call in [first, second] {
        assert_eq!(call.await.unwrap().status, StatusCode::OK);
    }
    // With room again, the key goes back to its own node.
    assert_eq!(get(addr, "/hold").await.node(), owner);
}

/// One node of one slot, queue timeout 1 s.
async fn one_node_of_one_slot() -> (Backend, capstan_switch::Running) {
    let node = Backend::start("n0").await;
    let text = config_for(
        &[&node],
        "[admission]\nlimit = 1\nqueue = 4\nqueue_timeout = \"1s\"\n",
    );
    let sw = start_switch(&text).await;
    (node, sw)
}

#[tokio::test]
async fn a_queued_request_gives_up_after_the_queue_timeout() {
    let (node, sw) = one_node_of_one_slot().await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    // The slot goes to a large answer whose client never reads it.
    let _reader = get_without_reading(addr, "/hold?bytes=200000000").await;
    wait_until("the node holds the large answer", || node.held() == 1).await;
    let waiting = tokio::spawn(async move { get(addr, "/other").await });
    wait_for_status(admin, "a request queued", |s| {
        admission(s, "n0")["queued"] == 1
    })
    .await;
    // The node answers while the request waits, and its slot stays taken (the body waits for
    // its reader): the wait is the load's, and the request is shed at the queue timeout.
    node.release();
    let waited = waiting.await.unwrap();
    assert_shed(&waited, "queue timeout (1s)");
    assert_eq!(waited.header("retry-after"), "1");
    let status = status_json(admin).await;
    assert_eq!(
        admission(&status, "n0")["shed"]["queue_timeout"],
        1,
        "{status}"
    );
    assert_eq!(admission(&status, "n0")["queued"], 0, "{status}");
    assert_eq!(
        node.hits(),
        1,
        "the timed-out request never reached the node"
    );
}

#[tokio::test]
async fn a_request_waiting_for_a_node_that_answers_nothing_is_shed_saying_so() {
    let (node, sw) = one_node_of_one_slot().await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let held = tokio::spawn(async move { get(addr, "/hold").await });
    wait_until("the node holds a request", || node.held() == 1).await;
    let hung = get(addr, "/other").await;
    assert_shed(&hung, "node n0 stopped answering");
    assert_eq!(hung.header("retry-after"), "1");
    let status = status_json(admin).await;
    assert_eq!(
        admission(&status, "n0")["shed"]["queue_timeout"],
        1,
        "{status}"
    );
    node.release();
    assert_eq!(held.await.unwrap().status, StatusCode::OK);
    assert_eq!(node.hits(), 1, "the shed request never reached the node");
}

/// Two nodes of one slot and one queue place each (1 s), a request's key deciding its node.
/// A request waits a queue timeout in each queue: long enough for the status polls to see it
/// there on a busy machine.
async fn two_nodes_of_one_slot() -> ([Backend; 2], capstan_switch::Running) {
    let nodes = [Backend::start("n0").await, Backend::start("n1").await];
    let text = config_for(
        &[&nodes[0], &nodes[1]],
        "[policy]\nname = \"consistent-hash\"\n\
         [admission]\nlimit = 1\nqueue = 1\nqueue_timeout = \"1s\"\n",
    );
    let sw = start_switch(&text).await;
    (nodes, sw)
}

#[tokio::test]
async fn a_request_goes_to_a_free_node_before_it_waits_and_waits_elsewhere_when_its_node_hangs() {
    let (nodes, sw) = two_nodes_of_one_slot().await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let first = tokio::spawn(async move { get(addr, "/hold").await });
    wait_until("the key's node holds a request", || {
        nodes[0].held() + nodes[1].held() == 1
    })
    .await;
    let (owner, other) = match nodes[0].held() {
        1 => (0, 1),
        _ => (1, 0),
    };
    // The same key finds its node at its limit while the other node has a free slot: it goes
    // there at once rather than wait (HAProxy queues only when every server is full).
    let second = tokio::spawn(async move { get(addr, "/hold").await });
    wait_until("the other node holds the second request", || {
        nodes[other].held() == 1
    })
    .await;
    // Both are full now: the third waits in its key's node's queue. That node answers nothing
    // all the while (it hangs), so after the queue timeout the third waits again, at the other
    // node, and is served there once that node frees its slot.
    let third = tokio::spawn(async move { get(addr, "/hold").await });
    wait_for_status(admin, "the third request queued at its key's node", |s| {
        admission(s, &nodes[owner].name)["queued"] == 1
    })
    .await;
    wait_for_status(admin, "the third request queued at the other node", |s| {
        admission(s, &nodes[other].name)["queued"] == 1
    })
    .await;
    nodes[other].release();
    wait_until("the other node takes the third request", || {
        nodes[other].hits() == 2
    })
    .await;
    let status = status_json(admin).await;
    for node in &nodes {
        let shed = &admission(&status, &node.name)["shed"];
        assert_eq!(shed["queue_timeout"], 0, "nothing shed: {status}");
    }
    for node in &nodes {
        node.release();
    }
    assert_eq!(first.await.unwrap().node(), nodes[owner].name.as_str());
    assert_eq!(second.await.unwrap().node(), nodes[other].name.as_str());
    let moved = third.await.unwrap();
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.text());
    assert_eq!(moved.node(), nodes[other].name);
    assert_eq!(
        nodes[owner].hits(),
        1,
        "the key's node served only the first"
    );
}

#[tokio::test]
async fn a_drained_node_sends_its_waiters_to_another_node_at_once() {
    let nodes = [Backend::start("n0").await, Backend::start("n1").await];
    // A queue timeout far longer than the test: only the drain can move the waiter in time.
    let text = config_for(
        &[&nodes[0], &nodes[1]],
        "[policy]\nname = \"consistent-hash\"\n\
         [admission]\nlimit = 1\nqueue = 1\nqueue_timeout = \"60s\"\n",
    );
    let sw = start_switch(&text).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let held = spawn_gets(addr, "/hold", 2);
    wait_until("both nodes hold a request", || {
        nodes[0].held() == 1 && nodes[1].held() == 1
    })
    .await;
    let third = tokio::spawn(async move { get(addr, "/hold").await });
    let status = wait_for_status(admin, "the third request queued", |s| {
        admission(s, "n0")["queued"] == 1 || admission(s, "n1")["queued"] == 1
    })
    .await;
    let (owner, other) = match admission(&status, "n0")["queued"] == 1 {
        true => (0, 1),
        false => (1, 0),
    };
    let drain = format!(
        "POST /nodes/{}/drain HTTP/1.1\r\nHost: admin\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n",
        nodes[owner].name
    );
    let answer = raw_exchange(admin, drain.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    wait_for_status(admin, "the waiter moved to the other node's queue", |s| {
        admission(s, &nodes[other].name)["queued"] == 1
            && admission(s, &nodes[owner].name)["queued"] == 0
    })
    .await;
    nodes[other].release();
    let moved = third.await.unwrap();
    assert_eq!(moved.status, StatusCode::OK, "{}", moved.text());
    assert_eq!(moved.node(), nodes[other].name);
    nodes[owner].release();
    for call in held {
        assert_eq!(call.await.unwrap().status, StatusCode::OK);
    }
}

/// Sends a GET for `path` and never reads the answer: the switch's slot on the node stays
/// taken while the response waits to be written.
async fn get_without_reading(addr: std::net::SocketAddr, path: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

#[tokio::test]
async fn a_request_that_waited_out_one_queue_under_load_does_not_wait_in_another() {
    let nodes = [Backend::start("n0").await, Backend::start("n1").await];
    let text = config_for(
        &[&nodes[0], &nodes[1]],
        "[policy]\nname = \"consistent-hash\"\n\
         [admission]\nlimit = 1\nqueue = 1\nqueue_timeout = \"2s\"\n",
    );
    let sw = start_switch(&text).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    // Two large answers their clients never read hold both nodes' slots.
    let path = "/hold?bytes=200000000";
    let _readers = [
        get_without_reading(addr, path).await,
        get_without_reading(addr, path).await,
    ];
    wait_until("both nodes hold a request", || {
        nodes[0].held() == 1 && nodes[1].held() == 1
    })
    .await;
    let third = tokio::spawn(async move { get(addr, "/hold").await });
    wait_for_status(admin, "the third request queued", |s| {
        admission(s, "n0")["queued"] == 1 || admission(s, "n1")["queued"] == 1
    })
    .await;
    // The nodes answer now, so the queue timeout is the load's, not a hung node's: every slot
    // stays taken (the bodies wait for their readers), and the third, timed out, finds no free
    // slot elsewhere. It is shed then, not queued again at the other node.
    for node in &nodes {
        node.release();
    }
    let third = third.await.unwrap();
    assert_shed(&third, "queue timeout (2s)");
    let status = status_json(admin).await;
    let timeouts: Vec<u64> = ["n0", "n1"]
        .iter()
        .map(|n| {
            admission(&status, n)["shed"]["queue_timeout"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(
        timeouts.iter().sum::<u64>(),
        1,
        "one queue timeout: {status}"
    );
    assert_eq!(
        nodes[0].hits() + nodes[1].hits(),
        2,
        "the third reached no node"
    );
}

#[tokio::test]
async fn clients_that_go_away_release_their_slots_and_places_in_the_queue() {
    let node = Backend::start("n0").await;
    // The switch closes connections idle for a second, in flight or queued alike: that is the
    // client going away, seen from the switch. (Long enough for the status polls to see them
    // in flight and queued first, on a busy machine.)
    let text = config_for(
        &[&node],
        "[timeouts]\nclient_idle = \"1s\"\n\
         [admission]\nlimit = 1\nqueue = 5\nqueue_timeout = \"30s\"\n",
    );
    let sw = start_switch(&text).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let mut streams = Vec::new();
    for _ in 0..4 {
        use tokio::io::AsyncWriteExt;
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /hold HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        streams.push(stream);
    }
    wait_for_status(admin, "one in flight, three queued", |s| {
        let gate = admission(s, "n0");
        gate["in_flight"] == 1 && gate["queued"] == 3
    })
    .await;
    let status = wait_for_status(admin, "the abandoned requests to leave every count", |s| {
        let gate = admission(s, "n0");
        gate["in_flight"] == 0 && gate["queued"] == 0 && node_status(s, "n0")["active"] == 0
    })
    .await;
    let shed = &admission(&status, "n0")["shed"];
    assert_eq!(
        (shed["queue_full"].as_u64(), shed["queue_timeout"].as_u64()),
        (Some(0), Some(0))
    );
    // The freed slot serves the next client.
    node.release();
    let answer = tokio::time::timeout(Duration::from_secs(10), get(addr, "/after"))
        .await
        .expect("an answer");
    assert_eq!(answer.status, StatusCode::OK);
}

#[tokio::test]
async fn the_default_is_an_adaptive_limit_shown_in_status_and_metrics() {
    let node = Backend::start("n0").await;
    let sw = start_switch(&config_for(&[&node], "")).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    for _ in 0..5 {
        assert_eq!(get(addr, "/x").await.status, StatusCode::OK);
    }
    let status = status_json(admin).await;
    let gate = admission(&status, "n0");
    assert_eq!(gate["mode"], "adaptive", "{gate}");
    assert_eq!(gate["limit"], 20, "the initial limit: {gate}");
    assert_eq!(gate["probing"], false, "{gate}");
    assert_eq!(gate["queue_cap"], 100, "{gate}");
    let metrics = get(admin, "/metrics").await.text();
    assert!(
        metrics.contains("capstan_node_concurrency_limit{node=\"n0\"} 20"),
        "{metrics}"
    );
}

#[tokio::test]
async fn admission_off_forwards_everything_and_shows_no_limit() {
    let node = Backend::start("n0").await;
    let text = config_for(&[&node], "[admission]\nlimit = \"off\"\n");
    let sw = start_switch(&text).await;
    let (addr, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
    let calls = spawn_gets(addr, "/hold", 40);
    wait_until("all forty at the node", || node.held() == 40).await;
    let status = status_json(admin).await;
    let gate = admission(&status, "n0");
    assert_eq!(gate["mode"], "off", "{gate}");
    assert!(gate["limit"].is_null(), "{gate}");
    assert_eq!(node_status(&status, "n0")["active"], 40);
    let metrics = get(admin, "/metrics").await.text();
    assert!(
        !metrics.contains("capstan_node_concurrency_limit"),
        "{metrics}"
    );
    node.release();
    for call in calls {
        assert_eq!(call.await.unwrap().status, StatusCode::OK);
    }
}
