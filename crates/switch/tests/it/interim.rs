//! Interim (1xx) responses through the switch (RFC 9110 §15.2; `103 Early Hints`, RFC 8297),
//! on loopback: a node writes interim heads before its final response and the client sees
//! them first, in order, for HTTP/1.1 and HTTP/2 clients (raw bytes, hyper's clients with
//! `on_informational`, and `curl -i` when installed) from HTTP/1.1 nodes (a raw one, written
//! by hand on a `TcpListener`) and HTTP/2 nodes (hyper's server, sending with
//! `hyper::ext::InformationalSender`), with and without a request body, on and off the cache
//! path. Hop-by-hop fields of an interim head are not passed on; `100 Continue` from a node is
//! not (hyper answers a client's `Expect` itself); an HTTP/1.0 client gets none; a cache hit
//! gets none (interim heads are never stored); a request that joins another's cache fill gets
//! only the final response. Upgrades (101) are `upgrade.rs`'s and unchanged.

use crate::common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{raw_exchange, start_switch, status_json};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long any one exchange may take before the test calls it a hang.
const NO_HANG: Duration = Duration::from_secs(10);

const STYLE: &str = "</style.css>; rel=preload; as=style";
const SCRIPT: &str = "</app.js>; rel=preload; as=script";

/// The interim heads a node sends before its final response to `path`, as status and fields:
/// `/hints` and `/cached` one 103; `/two` a 102 and two 103s; `/continue` a 100 and a 103;
/// `/held` a 103 at once (the final response waits for [`Node::release`]); `/flood` twenty
/// 103s; others none.
fn interims(path: &str) -> Vec<(u16, Vec<(&'static str, &'static str)>)> {
    match path {
        "/hints" | "/cached" | "/held" => vec![(103, vec![("link", STYLE)])],
        "/two" => vec![
            (102, vec![]),
            (103, vec![("link", STYLE)]),
            (103, vec![("link", SCRIPT)]),
        ],
        "/continue" => vec![(100, vec![]), (103, vec![("link", STYLE)])],
        "/flood" => vec![(103, vec![("link", STYLE)]); 20],
        _ => vec![],
    }
}

/// The final response's `Cache-Control`: storable for `/cached` and `/held`, else not.
fn cache_control(path: &str) -> &'static str {
    match path {
        "/cached" | "/held" => "max-age=60",
        _ => "no-store",
    }
}

/// What a node saw, and the hold on `/held`.
#[derive(Default)]
struct Node {
    hits: Mutex<HashMap<String, u64>>,
    released: AtomicBool,
}

impl Node {
    fn hit(&self, path: &str) {
        *self
            .hits
            .lock()
            .unwrap()
            .entry(path.to_string())
            .or_insert(0) += 1;
    }

    fn hits(&self, path: &str) -> u64 {
        self.hits.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    /// Until [`Node::release`] (polled, failing the node's answer after `NO_HANG`).
    async fn wait_for_release(&self) {
        let deadline = tokio::time::Instant::now() + NO_HANG;
        while !self.released.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// An HTTP/1.1 node written by hand: reads request heads (and `Content-Length` bodies) on
/// keep-alive connections and writes each interim head, with a hop-by-hop field the switch
/// must drop (`Connection: x-hop` naming `X-Hop`), then a final `200` with body `hello`.
async fn raw_node() -> (SocketAddr, Arc<Node>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let node = Arc::new(Node::default());
    let shared = Arc::clone(&node);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve_raw(stream, Arc::clone(&shared)));
        }
    });
    (addr, node)
}

async fn serve_raw(mut stream: TcpStream, node: Arc<Node>) {
    let mut buf = Vec::new();
    loop {
        let Some(head_len) = read_until_head(&mut stream, &mut buf).await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..head_len]).to_lowercase();
        buf.drain(..head_len);
        let body_len = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse::<usize>().unwrap());
        while buf.len() < body_len {
            if !read_more(&mut stream, &mut buf).await {
                return;
            }
        }
        buf.drain(..body_len);
        let target = head.split_whitespace().nth(1).unwrap_or("/");
        let path = target.split('?').next().unwrap_or("/").to_string();
        node.hit(&path);
        let mut out = String::new();
        for (code, fields) in interims(&path) {
            let reason = StatusCode::from_u16(code).unwrap();
            let reason = reason.canonical_reason().unwrap_or("");
            out.push_str(&format!("HTTP/1.1 {code} {reason}\r\n"));
            for (name, value) in fields {
                out.push_str(&format!("{name}: {value}\r\n"));
            }
            out.push_str("Connection: x-hop\r\nX-Hop: 1\r\n\r\n");
        }
        if stream.write_all(out.as_bytes()).await.is_err() {
            return;
        }
        if path == "/held" {
            node.wait_for_release().await;
        }
        let last = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nCache-Control: {}\r\n\r\nhello",
            cache_control(&path)
        );
        if stream.write_all(last.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads until `buf` holds a whole head; its length (`None`: the peer closed).
async fn read_until_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some(at + 4);
        }
        if !read_more(stream, buf).await {
            return None;
        }
    }
}

async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 4096];
    match stream.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

/// An HTTP/2 node (hyper's server, cleartext prior knowledge) that sends the interim heads with
/// `hyper::ext::InformationalSender` before its final `200`.
async fn h2_node() -> (SocketAddr, Arc<Node>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let node = Arc::new(Node::default());
    let shared = Arc::clone(&node);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let node = Arc::clone(&shared);
            let service =
                service_fn(move |req: Request<Incoming>| h2_answer(req, Arc::clone(&node)));
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    (addr, node)
}

async fn h2_answer(
    req: Request<Incoming>,
    node: Arc<Node>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    node.hit(&path);
    let _ = req.into_body().collect().await;
    let sender = hyper::ext::InformationalSender::current().expect("hyper's server gives one");
    for (code, fields) in interims(&path) {
        let mut head = Response::builder().status(code);
        for (name, value) in fields {
            head = head.header(name, value);
        }
        assert!(sender.send(head.body(()).unwrap()), "{code} taken");
    }
    if path == "/held" {
        node.wait_for_release().await;
    }
    let resp = Response::builder()
        .header("cache-control", cache_control(&path))
        .body(Full::new(Bytes::from_static(b"hello")))
        .unwrap();
    Ok(resp)
}

/// A switch with an HTTP/1.1 listener (`listen_addrs[0]`) and an h2c one (`listen_addrs[1]`)
/// in front of one node at `addr` (`protocol = "h2"` when `h2`), with a cache when `cache`.
async fn switch_for(addr: SocketAddr, h2: bool, cache: bool) -> capstan_switch::Running {
    let protocol = if h2 { "protocol = \"h2\"\n" } else { "" };
    let cache = if cache {
        "[cache]\nmemory = \"16MiB\"\nmax_object = \"1MiB\"\n"
    } else {
        ""
    };
    start_switch(&format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n{cache}\
         [[listener]]\naddress = \"127.0.0.1:0\"\nh2c = true\n\
         [[node]]\nname = \"node\"\naddress = \"{addr}\"\n{protocol}"
    ))
    .await
}

/// A raw HTTP/1.1 `GET` on a connection of its own; everything the switch answered.
async fn raw_get(addr: SocketAddr, path: &str, version: &str) -> String {
    let request = format!("GET {path} {version}\r\nHost: site.test\r\nConnection: close\r\n\r\n");
    raw_exchange(addr, request.as_bytes()).await
}

/// The heads of a raw answer (interim ones and the final one), each as its lower-cased text.
fn heads(raw: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut rest = raw;
    while rest.starts_with("HTTP/") {
        let Some(end) = rest.find("\r\n\r\n") else {
            break;
        };
        heads.push(rest[..end].to_lowercase());
        rest = &rest[end + 4..];
    }
    heads
}

/// The status code on a head's first line.
fn code(head: &str) -> u16 {
    head.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Asserts that a raw HTTP/1.1 answer is the 103 of `/hints` (its `Link` kept, its hop-by-hop
/// fields dropped) and then the final `200` with body `hello`.
fn assert_hints_then_ok(raw: &str) {
    let heads = heads(raw);
    assert_eq!(heads.len(), 2, "one interim and one final head: {raw:?}");
    assert!(
        heads[0].starts_with("http/1.1 103 early hints\r\n"),
        "{raw:?}"
    );
    assert!(heads[0].contains(&format!("link: {STYLE}")), "{raw:?}");
    assert!(!heads[0].contains("x-hop"), "hop-by-hop fields go: {raw:?}");
    assert_eq!(code(&heads[1]), 200, "{raw:?}");
    assert!(raw.ends_with("\r\n\r\nhello"), "{raw:?}");
}

/// What an HTTP/2 client (hyper's, with `on_informational`) saw for a `GET` of `path`: each
/// interim head as status and `Link`, then the final status and body.
async fn h2_get(addr: SocketAddr, path: &str) -> (Vec<(u16, String)>, StatusCode, Bytes) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut req = Request::get(format!("http://site.test{path}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let noted = Arc::clone(&seen);
    hyper::ext::on_informational(&mut req, move |head| {
        let link = head.headers().get("link").map(|v| v.to_str().unwrap());
        let link = link.unwrap_or_default().to_string();
        noted.lock().unwrap().push((head.status().as_u16(), link));
    });
    let (status, body) = tokio::time::timeout(NO_HANG, async {
        let resp = send.send_request(req).await.expect("a response");
        let status = resp.status();
        (status, resp.into_body().collect().await.unwrap().to_bytes())
    })
    .await
    .expect("no hang");
    let seen = seen.lock().unwrap().clone();
    (seen, status, body)
}

fn hints() -> Vec<(u16, String)> {
    vec![(103, STYLE.to_string())]
}

#[tokio::test]
async fn an_http1_client_gets_an_http1_nodes_103_before_the_200() {
    let (addr, node) = raw_node().await;
    let sw = switch_for(addr, false, false).await;
    assert_hints_then_ok(&raw_get(sw.listen_addrs[0], "/hints", "HTTP/1.1").await);
    // Several, in the order the node sent them, on a connection that goes on.
    let mut stream = TcpStream::connect(sw.listen_addrs[0]).await.unwrap();
    let two = "GET /two HTTP/1.1\r\nHost: site.test\r\n\r\n";
    let last = "GET /plain HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n";
    stream
        .write_all(format!("{two}{last}").as_bytes())
        .await
        .unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(NO_HANG, stream.read_to_end(&mut raw))
        .await
        .unwrap()
        .unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let codes: Vec<u16> = raw
        .match_indices("HTTP/1.1 ")
        .map(|(at, _)| code(&raw[at..]))
        .collect();
    assert_eq!(codes, [102, 103, 103, 200, 200], "{raw:?}");
    let (style, script) = (raw.find(STYLE).unwrap(), raw.find(SCRIPT).unwrap());
    assert!(style < script, "{raw:?}");
    assert_eq!(node.hits("/two"), 1);
}

#[tokio::test]
async fn a_request_with_a_body_gets_the_103_too() {
    // Requests with a body go to the node through hyper's HTTP/1.1 client.
    let (addr, node) = raw_node().await;
    let sw = switch_for(addr, false, false).await;
    let request = "POST /hints HTTP/1.1\r\nHost: site.test\r\nContent-Length: 4\r\n\
                   Connection: close\r\n\r\nping";
    assert_hints_then_ok(&raw_exchange(sw.listen_addrs[0], request.as_bytes()).await);
    assert_eq!(node.hits("/hints"), 1);
}

#[tokio::test]
async fn a_nodes_100_continue_is_not_passed_on() {
    let (addr, _node) = raw_node().await;
    let sw = switch_for(addr, false, false).await;
    assert_hints_then_ok(&raw_get(sw.listen_addrs[0], "/continue", "HTTP/1.1").await);
    let (addr, _node) = h2_node().await;
    let sw = switch_for(addr, true, false).await;
    assert_hints_then_ok(&raw_get(sw.listen_addrs[0], "/continue", "HTTP/1.1").await);
}

#[tokio::test]
async fn an_http1_client_gets_an_http2_nodes_103_before_the_200() {
    let (addr, node) = h2_node().await;
    let sw = switch_for(addr, true, false).await;
    assert_hints_then_ok(&raw_get(sw.listen_addrs[0], "/hints", "HTTP/1.1").await);
    let request = "POST /hints HTTP/1.1\r\nHost: site.test\r\nContent-Length: 4\r\n\
                   Connection: close\r\n\r\nping";
    assert_hints_then_ok(&raw_exchange(sw.listen_addrs[0], request.as_bytes()).await);
    assert_eq!(node.hits("/hints"), 2);
}

#[tokio::test]
async fn an_http2_client_gets_an_http1_nodes_103_before_the_200() {
    let (addr, _node) = raw_node().await;
    let sw = switch_for(addr, false, false).await;
    let (seen, status, body) = h2_get(sw.listen_addrs[1], "/hints").await;
    assert_eq!(
        (seen, status, &body[..]),
        (hints(), StatusCode::OK, &b"hello"[..])
    );
    let (seen, _, _) = h2_get(sw.listen_addrs[1], "/two").await;
    let codes: Vec<u16> = seen.iter().map(|(code, _)| *code).collect();
    assert_eq!(codes, [102, 103, 103]);
    assert_eq!(seen[2].1, SCRIPT);
}

#[tokio::test]
async fn an_http2_client_gets_an_http2_nodes_103_before_the_200() {
    let (addr, _node) = h2_node().await;
    let sw = switch_for(addr, true, false).await;
    let (seen, status, body) = h2_get(sw.listen_addrs[1], "/hints").await;
    assert_eq!(
        (seen, status, &body[..]),
        (hints(), StatusCode::OK, &b"hello"[..])
    );
    let (seen, _, _) = h2_get(sw.listen_addrs[1], "/continue").await;
    assert_eq!(seen, hints(), "no 100 Continue from the node");
}

#[tokio::test]
async fn an_http10_client_gets_no_interim_response() {
    for h2 in [false, true] {
        let (addr, _node) = if h2 {
            h2_node().await
        } else {
            raw_node().await
        };
        let sw = switch_for(addr, h2, false).await;
        let raw = raw_get(sw.listen_addrs[0], "/hints", "HTTP/1.0").await;
        let heads = heads(&raw);
        assert_eq!(heads.len(), 1, "only the final head: {raw:?}");
        assert_eq!(code(&heads[0]), 200, "{raw:?}");
        assert!(raw.ends_with("hello"), "{raw:?}");
    }
}

fn cache_status(raw_head: &str) -> String {
    raw_head
        .lines()
        .find_map(|l| l.strip_prefix("cache-status: "))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn interim_responses_reach_the_filling_client_and_are_never_stored() {
    for h2 in [false, true] {
        let (addr, node) = if h2 {
            h2_node().await
        } else {
            raw_node().await
        };
        let sw = switch_for(addr, h2, true).await;
        let first = raw_get(sw.listen_addrs[0], "/cached", "HTTP/1.1").await;
        assert_hints_then_ok(&first);
        let status = cache_status(&heads(&first)[1]);
        assert!(
            status.contains("fwd=uri-miss") && status.contains("stored"),
            "{status}"
        );
        // A hit: the final response only.
        let second = raw_get(sw.listen_addrs[0], "/cached", "HTTP/1.1").await;
        let heads2 = heads(&second);
        assert_eq!(
            heads2.len(),
            1,
            "no interim head from the cache: {second:?}"
        );
        assert!(
            cache_status(&heads2[0]).starts_with("capstan; hit"),
            "{second:?}"
        );
        let (seen, status, _) = h2_get(sw.listen_addrs[1], "/cached").await;
        assert_eq!(
            (seen, status),
            (vec![], StatusCode::OK),
            "a hit over HTTP/2"
        );
        assert_eq!(node.hits("/cached"), 1);
        // An HTTP/2 client that fills the cache gets the 103 too.
        let (seen, status, _) = h2_get(sw.listen_addrs[1], "/cached?h2").await;
        assert_eq!((seen, status), (hints(), StatusCode::OK));
    }
}

#[tokio::test]
async fn a_request_that_joins_a_fill_gets_the_final_response_only() {
    for h2 in [false, true] {
        let (addr, node) = if h2 {
            h2_node().await
        } else {
            raw_node().await
        };
        let sw = switch_for(addr, h2, true).await;
        let (listen, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());
        // The leader: its 103 arrives while the node holds the final response.
        let mut leader = TcpStream::connect(listen).await.unwrap();
        let request = "GET /held HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n";
        leader.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        let interim = tokio::time::timeout(NO_HANG, read_until_head(&mut leader, &mut raw));
        let head_len = interim
            .await
            .expect("the 103 before the node answers")
            .unwrap();
        assert!(raw[..head_len].starts_with(b"HTTP/1.1 103 Early Hints\r\n"));
        // The follower joins the fill, then the node answers.
        let follower = tokio::spawn(raw_get(listen, "/held", "HTTP/1.1"));
        let deadline = tokio::time::Instant::now() + NO_HANG;
        while status_json(admin).await["cache"]["coalesced"] != 1 {
            assert!(tokio::time::Instant::now() < deadline, "the follower joins");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        node.release();
        tokio::time::timeout(NO_HANG, leader.read_to_end(&mut raw))
            .await
            .unwrap()
            .unwrap();
        assert_hints_then_ok(&String::from_utf8(raw).unwrap());
        let followed = follower.await.unwrap();
        let heads = heads(&followed);
        assert_eq!(heads.len(), 1, "the final head only: {followed:?}");
        assert_eq!(code(&heads[0]), 200);
        assert!(
            cache_status(&heads[0]).contains("collapsed"),
            "{followed:?}"
        );
        assert!(followed.ends_with("hello"));
        assert_eq!(node.hits("/held"), 1);
    }
}

#[tokio::test]
async fn no_more_than_16_interim_responses_go_ahead_of_one_response() {
    let (addr, node) = raw_node().await;
    let sw = switch_for(addr, false, false).await;
    // The next response on the connection has its own count.
    let flood = "GET /flood HTTP/1.1\r\nHost: site.test\r\n\r\n";
    let hints_last = "GET /hints HTTP/1.1\r\nHost: site.test\r\nConnection: close\r\n\r\n";
    let raw = raw_exchange(
        sw.listen_addrs[0],
        format!("{flood}{hints_last}").as_bytes(),
    )
    .await;
    let codes: Vec<u16> = raw
        .match_indices("HTTP/1.1 ")
        .map(|(at, _)| code(&raw[at..]))
        .collect();
    let mut expected = vec![103; 16];
    expected.extend([200, 103, 200]);
    assert_eq!(codes, expected, "{raw:?}");
    let (seen, status, _) = h2_get(sw.listen_addrs[1], "/flood").await;
    assert_eq!((seen.len(), status), (16, StatusCode::OK));
    assert_eq!(node.hits("/flood"), 2);
}

/// `curl -i` shows interim heads; the 103 comes before the 200 over HTTP/1.1 and HTTP/2.
#[tokio::test]
async fn curl_shows_the_103_before_the_200() {
    let Ok(version) = std::process::Command::new("curl").arg("--version").output() else {
        eprintln!("curl is not installed: skipping the curl check");
        return;
    };
    assert!(version.status.success());
    for h2 in [false, true] {
        let (addr, _node) = if h2 {
            h2_node().await
        } else {
            raw_node().await
        };
        let sw = switch_for(addr, h2, false).await;
        let h1 = format!("http://{}/hints", sw.listen_addrs[0]);
        let h2c = format!("http://{}/hints", sw.listen_addrs[1]);
        for (url, flag, first) in [
            (h1, "--http1.1", "HTTP/1.1 103"),
            (h2c, "--http2-prior-knowledge", "HTTP/2 103"),
        ] {
            let out = tokio::process::Command::new("curl")
                .args(["-si", "--max-time", "10", flag, &url])
                .output()
                .await
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let lower = text.to_lowercase();
            assert!(text.starts_with(first), "{flag}: {text:?}");
            let hints = lower
                .find(&format!("link: {STYLE}"))
                .expect("the Link field");
            let ok = lower.find(" 200").expect("the final response");
            assert!(hints < ok, "{flag}: {text:?}");
            assert!(text.ends_with("hello"), "{flag}: {text:?}");
        }
    }
}
