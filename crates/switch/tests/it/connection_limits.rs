//! Connection limits over real sockets: a listener's `max_connections` (the next connection
//! waits in the accept queue while other listeners serve), with the switch-wide limit at the
//! same time; `max_connections_per_client` (by socket address, by a listener's own limit, and
//! by the address a trusted PROXY header names); and `timeouts.client_send` disconnecting a
//! client that stops reading, releasing its node connection, and cutting an HTTP/2 stream
//! whose client stops granting it flow-control window (the connection stays).

use crate::common;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use hyper::StatusCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// A connection from `from` (any loopback address) to `to`.
async fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    let from: IpAddr = from.parse().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    socket.connect(to).await.unwrap()
}

/// Reads one response (head and `content-length` body) within 10 s.
async fn read_response(stream: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let read = async {
        loop {
            let text = String::from_utf8_lossy(&got).to_string();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")?
                            .parse()
                            .ok()
                    })
                    .unwrap_or(0usize);
                if body.len() >= length {
                    return text;
                }
            }
            let mut buf = [0u8; 4096];
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return text,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a response within 10 s")
}

/// A keep-alive connection from `from` that has been served one request and stays open.
async fn served_connection(from: &str, to: SocketAddr) -> TcpStream {
    let mut stream = connect_from(from, to).await;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_response(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    stream
}

/// Everything the switch sends on a new connection from `from` after a one-off request.
async fn one_off(from: &str, to: SocketAddr) -> String {
    let mut stream = connect_from(from, to).await;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn listener_field(status: &serde_json::Value, i: usize, field: &str) -> u64 {
    status["listeners"][i][field].as_u64().unwrap_or(u64::MAX)
}

#[tokio::test]
async fn a_full_listener_stops_accepting_while_another_serves() {
    let a = Backend::start("a").await;
    let extra = "[[listener]]\naddress = \"127.0.0.1:0\"\nmax_connections = 2\n";
    let sw = start_switch(&config_for(&[&a], extra)).await;
    let (plain, limited) = (sw.listen_addrs[0], sw.listen_addrs[1]);
    let admin = sw.admin_addr.unwrap();
    let mut held = vec![
        served_connection("127.0.0.1", limited).await,
        served_connection("127.0.0.1", limited).await,
    ];
    let mut waiting = TcpStream::connect(limited).await.unwrap();
    waiting
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    wait_for_status(admin, "the limited listener full", |s| {
        listener_field(s, 1, "open_connections") == 2 && listener_field(s, 1, "full_listener") >= 1
    })
    .await;
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(300), waiting.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "the third connection is not served: {early:?}"
    );
    assert_eq!(
        get(plain, "/").await.status,
        StatusCode::OK,
        "the other listener serves"
    );
    let metrics = get(admin, "/metrics").await.text();
    let open = format!("capstan_listener_connections_open{{listener=\"{limited}\"}} 2");
    assert!(metrics.contains(&open), "{metrics}");
    let full = format!("capstan_listener_full_total{{listener=\"{limited}\",limit=\"listener\"}}");
    assert!(metrics.contains(&full), "{metrics}");
    drop(held.remove(0));
    let answer = read_response(&mut waiting).await;
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "served once a slot freed: {answer}"
    );
    drop((held, waiting));
    wait_for_status(admin, "every connection closed", |s| {
        s["open_connections"] == 0 && listener_field(s, 1, "open_connections") == 0
    })
    .await;
}

#[tokio::test]
async fn the_listener_and_the_switch_wide_limits_hold_together() {
    let a = Backend::start("a").await;
    let extra = "[limits]\nmax_connections = 3\n\
                 [[listener]]\naddress = \"127.0.0.1:0\"\nmax_connections = 2\n";
    let sw = start_switch(&config_for(&[&a], extra)).await;
    let (plain, limited) = (sw.listen_addrs[0], sw.listen_addrs[1]);
    let admin = sw.admin_addr.unwrap();
    let mut on_limited = vec![
        served_connection("127.0.0.1", limited).await,
        served_connection("127.0.0.1", limited).await,
    ];
    let on_plain = served_connection("127.0.0.1", plain).await;
    // Three open: the switch is full, so the plain listener (no limit of its own) waits too.
    let mut waiting = TcpStream::connect(plain).await.unwrap();
    waiting
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let status = wait_for_status(admin, "the switch full", |s| {
        s["open_connections"] == 3 && listener_field(s, 0, "full_switch") >= 1
    })
    .await;
    assert_eq!(listener_field(&status, 1, "open_connections"), 2);
    let mut buf = [0u8; 64];
    let early = tokio::time::timeout(Duration::from_millis(300), waiting.read(&mut buf)).await;
    assert!(early.is_err(), "over the switch-wide limit: {early:?}");
    drop(on_limited.remove(0));
    let answer = read_response(&mut waiting).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    drop((on_limited, on_plain, waiting));
    wait_for_status(admin, "every connection closed", |s| {
        s["open_connections"] == 0
    })
    .await;
}

#[tokio::test]
async fn a_client_address_over_its_limit_gets_429_and_others_are_served() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(
        &[&a],
        "[limits]\nmax_connections_per_client = 2\n",
    ))
    .await;
    let addr = sw.listen_addrs[0];
    let admin = sw.admin_addr.unwrap();
    let mut held = vec![
        served_connection("127.0.0.1", addr).await,
        served_connection("127.0.0.1", addr).await,
    ];
    let refused = one_off("127.0.0.1", addr).await;
    assert!(
        refused.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
        "{refused}"
    );
    assert!(refused.contains("\r\nretry-after: 1\r\n"), "{refused}");
    assert!(refused.contains("\r\nconnection: close\r\n"), "{refused}");
    assert_eq!(a.hits(), 2, "the refused request never reached a node");
    let other = served_connection("127.0.0.2", addr).await;
    let status = status_json(admin).await;
    assert_eq!(listener_field(&status, 0, "rejected_per_client"), 1);
    assert_eq!(listener_field(&status, 0, "client_addresses"), 2);
    let metrics = get(admin, "/metrics").await.text();
    let rejected = format!("capstan_client_connections_rejected_total{{listener=\"{addr}\"}} 1");
    assert!(metrics.contains(&rejected), "{metrics}");
    drop(held.remove(0));
    wait_for_status(admin, "one of 127.0.0.1's connections closed", |s| {
        listener_field(s, 0, "open_connections") == 2
    })
    .await;
    held.push(served_connection("127.0.0.1", addr).await);
    drop((held, other));
    // The per-address map empties with the connections: it cannot grow with addresses seen.
    wait_for_status(admin, "every address released", |s| {
        listener_field(s, 0, "client_addresses") == 0 && s["open_connections"] == 0
    })
    .await;
}

#[tokio::test]
async fn a_listener_can_have_its_own_per_client_limit() {
    let a = Backend::start("a").await;
    let extra = "[[listener]]\naddress = \"127.0.0.1:0\"\nmax_connections_per_client = 1\n";
    let sw = start_switch(&config_for(&[&a], extra)).await;
    let (plain, strict) = (sw.listen_addrs[0], sw.listen_addrs[1]);
    // No switch-wide limit: the plain listener takes any number from one address.
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(served_connection("127.0.0.1", plain).await);
    }
    held.push(served_connection("127.0.0.1", strict).await);
    let refused = one_off("127.0.0.1", strict).await;
    assert!(refused.starts_with("HTTP/1.1 429"), "{refused}");
    held.push(served_connection("127.0.0.3", strict).await);
    let status = status_json(sw.admin_addr.unwrap()).await;
    assert_eq!(listener_field(&status, 0, "max_connections_per_client"), 0);
    assert_eq!(listener_field(&status, 1, "max_connections_per_client"), 1);
    assert_eq!(listener_field(&status, 1, "rejected_per_client"), 1);
}

/// A request behind a PROXY v1 line naming `client` as the source.
async fn proxied(to: SocketAddr, client: &str, close: bool) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(to).await.unwrap();
    let connection = if close { "close" } else { "keep-alive" };
    let text = format!(
        "PROXY TCP4 {client} 127.0.0.1 40000 {}\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: {connection}\r\n\r\n",
        to.port()
    );
    stream.write_all(text.as_bytes()).await.unwrap();
    let answer = read_response(&mut stream).await;
    (stream, answer)
}

#[tokio::test]
async fn behind_a_trusted_balancer_the_limit_counts_the_declared_client() {
    let a = Backend::start("a").await;
    // Held for the switch: its listener binds there with address reuse.
    let reserved = DeadAddr::new();
    let listen = reserved.addr();
    let text = format!(
        "listen = [\"{listen}\"]\nadmin = \"127.0.0.1:0\"\n\
         [limits]\nmax_connections_per_client = 1\n\
         [proxy_protocol]\naccept_on = [\"{listen}\"]\ntrusted = [\"127.0.0.1\"]\n\
         [[node]]\nname = \"a\"\naddress = \"{}\"\n",
        a.addr
    );
    let sw = start_switch(&text).await;
    // Every connection comes from the balancer's 127.0.0.1; the clients differ.
    let (_first, answer) = proxied(listen, "192.0.2.1", false).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (_second, answer) = proxied(listen, "192.0.2.2", false).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let (_, answer) = proxied(listen, "192.0.2.1", true).await;
    assert!(answer.starts_with("HTTP/1.1 429"), "{answer}");
    let status = status_json(sw.admin_addr.unwrap()).await;
    assert_eq!(listener_field(&status, 0, "rejected_per_client"), 1);
    assert_eq!(listener_field(&status, 0, "client_addresses"), 2);
}

/// A raw node answering a request for `/small` with `small` (keeping the connection), and any
/// other with a 1 GiB body, written until the switch closes the connection; `released` is set
/// when a write fails (the switch let go of the connection).
async fn endless_node() -> (SocketAddr, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let released = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&released);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let flag = Arc::clone(&flag);
            tokio::spawn(async move {
                let mut head = Vec::new();
                loop {
                    head.clear();
                    while !head.ends_with(b"\r\n\r\n") {
                        let mut byte = [0u8; 1];
                        if stream.read_exact(&mut byte).await.is_err() {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    if !head.starts_with(b"GET /small ") {
                        break;
                    }
                    let small = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nsmall";
                    if stream.write_all(small).await.is_err() {
                        return;
                    }
                }
                let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 1073741824\r\n\r\n";
                let chunk = vec![b'x'; 64 * 1024];
                let mut result = stream.write_all(answer).await;
                while result.is_ok() {
                    result = stream.write_all(&chunk).await;
                }
                flag.store(true, Ordering::Relaxed);
            });
        }
    });
    (addr, released)
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_after_client_send() {
    let (node, released) = endless_node().await;
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n\
         [timeouts]\nclient_send = \"1s\"\nclient_idle = \"60s\"\n\
         [[node]]\nname = \"n\"\naddress = \"{node}\"\n"
    );
    // (client_send is a second, so that the status poll below sees the request under way
    // before it is cut, on a busy machine too.)
    let sw = start_switch(&text).await;
    let admin = sw.admin_addr.unwrap();
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut client = socket.connect(sw.listen_addrs[0]).await.unwrap();
    client
        .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    wait_for_status(admin, "the request under way", |s| {
        node_status(s, "n")["active"] == 1
    })
    .await;
    // The client never reads. Once the switch's writes make no progress for client_send, it
    // closes the client connection and lets go of the node's (client_idle is far away).
    wait_until("the node connection released", || {
        released.load(Ordering::Relaxed)
    })
    .await;
    wait_for_status(admin, "the counters back to zero", |s| {
        s["open_connections"] == 0 && node_status(s, "n")["active"] == 0
    })
    .await;
    let metrics = get(admin, "/metrics").await.text();
    assert_eq!(send_timeouts(&metrics, "connection"), 1, "{metrics}");
    assert_eq!(send_timeouts(&metrics, "h2_stream"), 0, "{metrics}");
    drop(client);
}

/// The `capstan_client_send_timeouts_total` sample for `cut`, from `/metrics` text.
fn send_timeouts(metrics: &str, cut: &str) -> u64 {
    let prefix = format!("capstan_client_send_timeouts_total{{cut=\"{cut}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{metrics}"))
}

/// An HTTP/2 (h2c) connection to `addr` whose streams' windows start at `stream_window` bytes.
async fn h2c_client(
    addr: SocketAddr,
    stream_window: u32,
) -> hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>> {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .initial_stream_window_size(stream_window)
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    sender
}

fn h2_get(path: &str) -> hyper::Request<http_body_util::Empty<bytes::Bytes>> {
    hyper::Request::get(format!("http://x{path}"))
        .body(http_body_util::Empty::new())
        .unwrap()
}

#[tokio::test]
async fn an_h2_stream_whose_client_grants_no_window_is_cut_after_client_send() {
    use http_body_util::BodyExt;
    let (node, released) = endless_node().await;
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n\
         [timeouts]\nclient_send = \"1s\"\nclient_idle = \"60s\"\n\
         [[listener]]\naddress = \"127.0.0.1:0\"\nh2c = true\n\
         [[node]]\nname = \"n\"\naddress = \"{node}\"\n"
    );
    let sw = start_switch(&text).await;
    let (admin, h2c) = (sw.admin_addr.unwrap(), sw.listen_addrs[1]);
    // A 16 KiB stream window, never released (the body is not read): the 1 GiB response
    // stalls on flow control while the connection itself stays healthy and its socket drains.
    let mut stalled = h2c_client(h2c, 16 * 1024).await;
    let resp = stalled.send_request(h2_get("/big")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    wait_for_status(admin, "the request under way", |s| {
        node_status(s, "n")["active"] == 1
    })
    .await;
    // After client_send without progress the switch drops the node side of that stream.
    wait_until("the node connection released", || {
        released.load(Ordering::Relaxed)
    })
    .await;
    wait_for_status(admin, "the node's active count back to zero", |s| {
        node_status(s, "n")["active"] == 0
    })
    .await;
    let metrics = wait_for_metrics(admin, "the stream cut counted", |m| {
        m.contains("capstan_client_send_timeouts_total{cut=\"h2_stream\"} 1")
    })
    .await;
    assert_eq!(send_timeouts(&metrics, "connection"), 0, "{metrics}");
    // Once the client reads again it gets what was in flight, then the stream's reset.
    let read = tokio::time::timeout(Duration::from_secs(10), resp.into_body().collect()).await;
    let error = read
        .expect("the stream ends")
        .expect_err("the stream is reset");
    assert!(format!("{error:?}").contains("INTERNAL_ERROR"), "{error:?}");
    // Other streams, on this connection and on another, are served as before.
    for sender in [&mut stalled, &mut h2c_client(h2c, 65_535).await] {
        let resp = sender.send_request(h2_get("/small")).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"small");
    }
    let status = status_json(admin).await;
    assert_eq!(node_status(&status, "n")["active"], 0, "{status}");
}
