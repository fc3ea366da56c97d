//! One road to a node (issue 42): whichever way a request reaches a node — proxied, a cache
//! miss's fill, the revalidation of a stale entry, a fill several clients wait on, a tier hop
//! filled by the key's owner, a WebSocket tunnel, a retry after a refused node — the node
//! receives the same forwarding fields, for every client protocol (HTTP/1.1, HTTP/1.1 over
//! TLS, HTTP/2 over TLS, h2c, HTTP/3). Real switches and a recording node on loopback.
//!
//! What the node must see: no hop-by-hop field (an HTTP/1.1 client sends `Connection:
//! X-Secret, keep-alive`, `X-Secret`, `Keep-Alive`, `Proxy-Connection` and `TE: gzip`; HTTP/2
//! and HTTP/3 may not carry them), one `Via` entry per switch on the way, `X-Forwarded-For`
//! the client's address, `X-Forwarded-Proto` the client's scheme, and the client's end-to-end
//! field `X-Kept`. A tunnel is HTTP/1.1's (WebSocket over HTTP/2 and HTTP/3 is not served), so
//! its row has the two HTTP/1.1 clients; it keeps `Connection: upgrade` and `Upgrade`.
//! Beside the matrix: the scheme a front balancer's PROXY v2 header gives, and RFC 7239
//! `Forwarded` when `upstream.forwarded` is on.

use crate::common;

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use common::{start_switch, DeadAddr};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::net::TcpStream;

/// The client protocols of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proto {
    H1,
    H1Tls,
    H2Tls,
    H2c,
    H3,
}

const ALL: [Proto; 5] = [Proto::H1, Proto::H1Tls, Proto::H2Tls, Proto::H2c, Proto::H3];

impl Proto {
    fn https(self) -> bool {
        matches!(self, Proto::H1Tls | Proto::H2Tls | Proto::H3)
    }
    fn http1(self) -> bool {
        matches!(self, Proto::H1 | Proto::H1Tls)
    }
}

// ---------------------------------------------------------------------------------------------
// The recording node.

/// One request as the node received it.
#[derive(Clone, Debug)]
struct Seen {
    path: String,
    headers: HeaderMap,
}

/// A node that records every request's head. `/hold/…` answers once the test releases that
/// path; `/stale/…` is stored but stale at once (`max-age=0, must-revalidate`, an `ETag`) and
/// answers `304` to its validator; `/ws` accepts a WebSocket upgrade; anything else is `200`,
/// cachable for a minute.
struct Node {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    released: Arc<Mutex<HashSet<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Node {
    async fn start() -> Node {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let released = Arc::new(Mutex::new(HashSet::new()));
        let (recording, releasing) = (Arc::clone(&seen), Arc::clone(&released));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (seen, released) = (Arc::clone(&recording), Arc::clone(&releasing));
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        node_answer(req, Arc::clone(&seen), Arc::clone(&released))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Node {
            addr,
            seen,
            released,
            task,
        }
    }

    /// Every request for `path` the node received.
    fn seen(&self, path: &str) -> Vec<Seen> {
        (self.seen.lock().unwrap().iter())
            .filter(|s| s.path == path)
            .cloned()
            .collect()
    }

    fn release(&self, path: &str) {
        self.released.lock().unwrap().insert(path.to_string());
    }
}

async fn node_answer(
    req: Request<Incoming>,
    seen: Arc<Mutex<Vec<Seen>>>,
    released: Arc<Mutex<HashSet<String>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    seen.lock().unwrap().push(Seen {
        path: path.clone(),
        headers: req.headers().clone(),
    });
    let answer = |status: StatusCode, cache: &'static str, body: &'static str| {
        let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *resp.status_mut() = status;
        resp.headers_mut()
            .insert("cache-control", HeaderValue::from_static(cache));
        resp
    };
    if path.starts_with("/hold/") {
        let until = Instant::now() + Duration::from_secs(20);
        while !released.lock().unwrap().contains(&path) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    if path.starts_with("/stale/") {
        let revalidating = req
            .headers()
            .get("if-none-match")
            .is_some_and(|v| v == "\"v1\"");
        let (status, body) = match revalidating {
            true => (StatusCode::NOT_MODIFIED, ""),
            false => (StatusCode::OK, "stale soon"),
        };
        let mut resp = answer(status, "max-age=0, must-revalidate", body);
        resp.headers_mut()
            .insert("etag", HeaderValue::from_static("\"v1\""));
        return Ok(resp);
    }
    if path == "/ws" {
        let mut resp = answer(StatusCode::SWITCHING_PROTOCOLS, "no-store", "");
        resp.headers_mut()
            .insert("upgrade", HeaderValue::from_static("websocket"));
        resp.headers_mut()
            .insert("connection", HeaderValue::from_static("upgrade"));
        tokio::spawn(async move {
            // Held open until the client side goes.
            if let Ok(upgraded) = hyper::upgrade::on(req).await {
                let mut io = TokioIo::new(upgraded);
                let mut sink = tokio::io::sink();
                let _ = tokio::io::copy(&mut io, &mut sink).await;
            }
        });
        return Ok(resp);
    }
    Ok(answer(StatusCode::OK, "max-age=60", "ok"))
}

// ---------------------------------------------------------------------------------------------
// The fields the node must see.

/// Fields no node may receive from the switch (hop-by-hop ones, and ones the client named in
/// `Connection`); a tunnel's own `Connection: upgrade` and `Upgrade` are checked apart.
const NEVER: [&str; 7] = [
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "x-secret",
    "proxy-authorization",
    "capstan-tier-hop",
];

/// Checks one request the node received: `switches` Via entries, the client's address and
/// scheme, no hop-by-hop field.
fn assert_forwarded(seen: &Seen, what: &str, switches: usize, client: SocketAddr, https: bool) {
    let h = &seen.headers;
    let mut problems = Vec::new();
    for name in NEVER {
        if h.contains_key(name) {
            problems.push(format!("{name} present"));
        }
    }
    let tunnel = seen.path == "/ws";
    let lines = |name: &str| -> Vec<String> {
        (h.get_all(name).iter())
            .map(|v| v.to_str().unwrap_or("?").to_string())
            .collect()
    };
    if tunnel {
        if lines("connection") != ["upgrade"] || lines("upgrade") != ["websocket"] {
            problems.push("a tunnel carries Connection: upgrade and Upgrade: websocket".into());
        }
    } else {
        for name in ["connection", "upgrade"] {
            if h.contains_key(name) {
                problems.push(format!("{name} present"));
            }
        }
    }
    let via = lines("via");
    let entries: Vec<&str> = via
        .iter()
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .collect();
    if via.len() != 1
        || entries.len() != switches
        || !entries.iter().all(|e| e.ends_with(" capstan"))
    {
        problems.push(format!(
            "Via {via:?}, expected {switches} capstan entries on one line"
        ));
    }
    let xff = lines("x-forwarded-for");
    if xff != [client.ip().to_string()] {
        problems.push(format!("X-Forwarded-For {xff:?}, expected {}", client.ip()));
    }
    let scheme = if https { "https" } else { "http" };
    if lines("x-forwarded-proto") != [scheme] {
        let proto = lines("x-forwarded-proto");
        problems.push(format!("X-Forwarded-Proto {proto:?}, expected {scheme}"));
    }
    if lines("x-kept") != ["yes"] {
        problems.push("the end-to-end X-Kept was lost".into());
    }
    if h.contains_key("forwarded") {
        problems.push("Forwarded present (upstream.forwarded is off)".into());
    }
    assert!(
        problems.is_empty(),
        "{what}: the node received {h:?}\n{}",
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Switches.

fn pki(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/tls")
        .join(file)
}

/// A switch's client listeners: plain HTTP/1.1, h2c, TLS (HTTP/1.1 and HTTP/2) with HTTP/3 on
/// the same port.
#[derive(Clone, Copy, Debug)]
struct Listeners {
    h1: SocketAddr,
    h2c: SocketAddr,
    tls: SocketAddr,
}

/// A port on `ip` that nothing listens on now, from the kernel.
fn free_port(ip: &str) -> u16 {
    let probe = std::net::TcpListener::bind(format!("{ip}:0")).unwrap();
    probe.local_addr().unwrap().port()
}

/// A switch's TOML on `ip`: `listen` (at `port`, 0 for any), then `sections` (top-level keys
/// first, then tables), then the h2c and TLS listeners and the nodes. The TLS listener has a
/// port of its own: the in-process `start` binds a QUIC listener at the first listener
/// configured with the same address, so two at `IP:0` would put HTTP/3 on the wrong port.
fn switch_toml(ip: &str, port: u16, sections: &str, nodes: &[SocketAddr]) -> String {
    let tls_port = free_port(ip);
    let mut toml = format!("listen = [\"{ip}:{port}\"]\nadmin = \"127.0.0.1:0\"\n{sections}\n");
    toml.push_str(&format!(
        "[[listener]]\naddress = \"{ip}:0\"\nh2c = true\n\
         [[listener]]\naddress = \"{ip}:{tls_port}\"\nquic = true\n\
         [[listener.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n",
        pki("localhost.pem").display(),
        pki("localhost.key").display()
    ));
    for node in nodes {
        toml.push_str(&format!("[[node]]\naddress = \"{node}\"\n"));
    }
    toml
}

struct Switch {
    running: capstan_switch::Running,
    at: Listeners,
}

impl Switch {
    /// A switch on 127.0.0.1 with `sections` (TOML after the listeners) in front of `nodes`.
    async fn start(nodes: &[SocketAddr], sections: &str) -> Switch {
        Switch::start_on("127.0.0.1", 0, nodes, sections).await
    }

    async fn start_on(ip: &str, port: u16, nodes: &[SocketAddr], sections: &str) -> Switch {
        let running = start_switch(&switch_toml(ip, port, sections, nodes)).await;
        let a = &running.listen_addrs;
        let at = Listeners {
            h1: a[0],
            h2c: a[1],
            tls: a[2],
        };
        Switch { running, at }
    }

    async fn status(&self) -> serde_json::Value {
        let admin = self.running.admin_addr.expect("an admin listener");
        let answer = ask(Proto::H1, admin_listeners(admin), "/status").await;
        serde_json::from_slice(&answer.body).expect("/status is JSON")
    }
}

fn admin_listeners(admin: SocketAddr) -> Listeners {
    Listeners {
        h1: admin,
        h2c: admin,
        tls: admin,
    }
}

/// Waits until `check` holds, at most 10 s.
async fn until<F: std::future::Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Clients.

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    /// The client's own address on the connection.
    client: SocketAddr,
}

fn tls_client(alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki("ca.pem")).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::DEFAULT_VERSIONS)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

/// The request every client sends: what its protocol allows of the hop-by-hop fields, and
/// one end-to-end field.
fn client_request(
    proto: Proto,
    authority: &str,
    path: &str,
    upgrade: bool,
) -> Request<Empty<Bytes>> {
    let scheme = if proto.https() { "https" } else { "http" };
    let uri = match proto.http1() {
        true => path.to_string(),
        false => format!("{scheme}://{authority}{path}"),
    };
    let mut req = Request::builder().uri(uri).header("x-kept", "yes");
    if proto.http1() {
        req = req
            .header("host", authority)
            .header("x-secret", "1")
            .header("keep-alive", "timeout=5")
            .header("proxy-connection", "keep-alive")
            .header("te", "gzip");
        req = match upgrade {
            true => req
                .header("connection", "Upgrade, X-Secret, keep-alive")
                .header("upgrade", "websocket"),
            false => req.header("connection", "X-Secret, keep-alive"),
        };
    }
    req.body(Empty::new()).unwrap()
}

async fn ask(proto: Proto, at: Listeners, path: &str) -> Answer {
    ask_with(proto, at, path, false).await
}

/// One request over a new connection of `proto`; `upgrade` asks for a WebSocket.
async fn ask_with(proto: Proto, at: Listeners, path: &str, upgrade: bool) -> Answer {
    let asking = async {
        match proto {
            Proto::H3 => ask_h3(at.tls, path).await,
            _ => ask_tcp(proto, at, path, upgrade).await,
        }
    };
    tokio::time::timeout(Duration::from_secs(20), asking)
        .await
        .unwrap_or_else(|_| panic!("{proto:?} {path}: no answer within 20 s"))
}

async fn ask_tcp(proto: Proto, at: Listeners, path: &str, upgrade: bool) -> Answer {
    let addr = match proto {
        Proto::H1 => at.h1,
        Proto::H2c => at.h2c,
        _ => at.tls,
    };
    let tcp = TcpStream::connect(addr).await.unwrap();
    let client = tcp.local_addr().unwrap();
    let authority = "localhost";
    let req = client_request(proto, authority, path, upgrade);
    let resp = match proto {
        Proto::H1 => send_h1(tcp, req).await,
        Proto::H2c => send_h2(tcp, req).await,
        Proto::H1Tls | Proto::H2Tls => {
            let alpn: &[u8] = if proto == Proto::H1Tls {
                b"http/1.1"
            } else {
                b"h2"
            };
            let name = ServerName::try_from(authority.to_string()).unwrap();
            let tls = tokio_rustls::TlsConnector::from(tls_client(alpn))
                .connect(name, tcp)
                .await
                .unwrap();
            match proto {
                Proto::H1Tls => send_h1(tls, req).await,
                _ => send_h2(tls, req).await,
            }
        }
        Proto::H3 => unreachable!("HTTP/3 is not over TCP"),
    };
    let (head, body) = resp.into_parts();
    let body = match head.status {
        StatusCode::SWITCHING_PROTOCOLS => Bytes::new(),
        _ => body.collect().await.unwrap().to_bytes(),
    };
    Answer {
        status: head.status,
        headers: head.headers,
        body,
        client,
    }
}

async fn send_h1<S>(io: S, req: Request<Empty<Bytes>>) -> Response<Incoming>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .unwrap();
    tokio::spawn(conn.with_upgrades());
    sender.send_request(req).await.unwrap()
}

async fn send_h2<S>(io: S, req: Request<Empty<Bytes>>) -> Response<Incoming>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender.send_request(req).await.unwrap()
}

async fn ask_h3(addr: SocketAddr, path: &str) -> Answer {
    let mut tls = (*tls_client(b"h3")).clone();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    let client = endpoint.local_addr().unwrap();
    let conn = endpoint.connect(addr, "localhost").unwrap().await.unwrap();
    let (mut driver, mut send) = h3::client::new(h3_quinn::Connection::new(conn))
        .await
        .unwrap();
    let driving =
        tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    let (head, _) = client_request(Proto::H3, "localhost", path, false).into_parts();
    let req = Request::from_parts(head, ());
    let mut stream = send.send_request(req).await.unwrap();
    stream.finish().await.unwrap();
    let resp = stream.recv_response().await.unwrap();
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await.unwrap() {
        while chunk.has_remaining() {
            let piece = chunk.chunk();
            body.extend_from_slice(piece);
            let n = piece.len();
            chunk.advance(n);
        }
    }
    driving.abort();
    Answer {
        status: resp.status(),
        headers: resp.headers().clone(),
        body: Bytes::from(body),
        client,
    }
}

// ---------------------------------------------------------------------------------------------
// The matrix, one road per test, every client protocol in each.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxied() {
    let node = Node::start().await;
    let switch = Switch::start(&[node.addr], "").await;
    for proto in ALL {
        let path = format!("/proxied/{proto:?}");
        let answer = ask(proto, switch.at, &path).await;
        assert_eq!(answer.status, StatusCode::OK, "{proto:?}");
        let seen = node.seen(&path);
        assert_eq!(seen.len(), 1, "{proto:?}");
        assert_forwarded(
            &seen[0],
            &format!("proxied, {proto:?}"),
            1,
            answer.client,
            proto.https(),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_miss_fills_as_a_proxied_request_goes() {
    let node = Node::start().await;
    let switch = Switch::start(&[node.addr], "[cache]\nmemory = \"16MiB\"\n").await;
    for proto in ALL {
        let path = format!("/miss/{proto:?}");
        let answer = ask(proto, switch.at, &path).await;
        assert_eq!(answer.status, StatusCode::OK, "{proto:?}");
        let status = answer
            .headers
            .get("cache-status")
            .unwrap()
            .to_str()
            .unwrap();
        assert!(status.contains("fwd=uri-miss"), "{proto:?}: {status}");
        let again = ask(proto, switch.at, &path).await;
        let status = again.headers.get("cache-status").unwrap().to_str().unwrap();
        assert!(status.contains("hit"), "{proto:?}: {status}");
        let seen = node.seen(&path);
        assert_eq!(seen.len(), 1, "{proto:?}: the hit reached no node");
        assert_forwarded(
            &seen[0],
            &format!("cache miss, {proto:?}"),
            1,
            answer.client,
            proto.https(),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_entry_is_revalidated_as_a_proxied_request_goes() {
    let node = Node::start().await;
    let switch = Switch::start(&[node.addr], "[cache]\nmemory = \"16MiB\"\n").await;
    for proto in ALL {
        let path = format!("/stale/{proto:?}");
        let first = ask(proto, switch.at, &path).await;
        assert_eq!(first.status, StatusCode::OK, "{proto:?}");
        let second = ask(proto, switch.at, &path).await;
        assert_eq!(second.status, StatusCode::OK, "{proto:?}");
        assert_eq!(
            second.body, "stale soon",
            "{proto:?}: the stored body, revalidated"
        );
        let seen = node.seen(&path);
        assert_eq!(seen.len(), 2, "{proto:?}");
        let revalidation = &seen[1];
        assert_eq!(
            revalidation
                .headers
                .get("if-none-match")
                .map(|v| v.as_bytes()),
            Some(&b"\"v1\""[..]),
            "{proto:?}: the revalidation asks with the stored validator"
        );
        let what = format!("revalidation, {proto:?}");
        assert_forwarded(revalidation, &what, 1, second.client, proto.https());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coalesced_fill_goes_once_as_its_first_clients_request() {
    const CLIENTS: usize = 3;
    let node = Node::start().await;
    let switch = Switch::start(&[node.addr], "[cache]\nmemory = \"16MiB\"\n").await;
    for proto in ALL {
        let path = format!("/hold/{proto:?}");
        let coalesced_before = switch.status().await["cache"]["coalesced"]
            .as_u64()
            .unwrap();
        let asks: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let (at, path) = (switch.at, path.clone());
                tokio::spawn(async move { ask(proto, at, &path).await })
            })
            .collect();
        until(
            "the fill at the node and every other client waiting on it",
            || async {
                let coalesced = switch.status().await["cache"]["coalesced"]
                    .as_u64()
                    .unwrap();
                node.seen(&path).len() == 1 && coalesced == coalesced_before + CLIENTS as u64 - 1
            },
        )
        .await;
        node.release(&path);
        for asked in asks {
            let answer = asked.await.unwrap();
            assert_eq!(answer.status, StatusCode::OK, "{proto:?}");
            assert_eq!(answer.body, "ok", "{proto:?}");
        }
        let seen = node.seen(&path);
        assert_eq!(seen.len(), 1, "{proto:?}: one fill for {CLIENTS} clients");
        // Every client is at 127.0.0.1 (the port differs).
        let client = SocketAddr::from(([127, 0, 0, 1], 0));
        assert_forwarded(
            &seen[0],
            &format!("coalesced fill, {proto:?}"),
            1,
            client,
            proto.https(),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_tunnel_is_opened_as_a_proxied_request_goes() {
    let node = Node::start().await;
    let switch = Switch::start(&[node.addr], "").await;
    for proto in [Proto::H1, Proto::H1Tls] {
        let answer = ask_with(proto, switch.at, "/ws", true).await;
        assert_eq!(answer.status, StatusCode::SWITCHING_PROTOCOLS, "{proto:?}");
        let seen = node.seen("/ws");
        let last = seen.last().expect("the upgrade reached the node");
        assert_forwarded(
            last,
            &format!("tunnel, {proto:?}"),
            1,
            answer.client,
            proto.https(),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_a_refused_node_sends_the_same_request() {
    let node = Node::start().await;
    let dead = DeadAddr::new();
    // Round robin over a refusing node and the recording one: of two requests at least one
    // goes to the refusing node first and is retried. A switch per protocol: passive health
    // takes the refusing node out after its failures.
    let sections = "[policy]\nname = \"round-robin\"\n";
    for proto in ALL {
        let switch = Switch::start(&[dead.addr(), node.addr], sections).await;
        for i in 0..2 {
            let path = format!("/retry/{proto:?}/{i}");
            let answer = ask(proto, switch.at, &path).await;
            assert_eq!(answer.status, StatusCode::OK, "{proto:?} {i}");
            let seen = node.seen(&path);
            assert_eq!(seen.len(), 1, "{proto:?} {i}");
            let what = format!("retry, {proto:?}");
            assert_forwarded(&seen[0], &what, 1, answer.client, proto.https());
        }
        assert!(
            retries(&switch).await >= 1,
            "{proto:?}: no request was retried"
        );
    }
}

/// Retries counted over every node, from `/status`.
async fn retries(switch: &Switch) -> u64 {
    let status = switch.status().await;
    (status["nodes"].as_array().unwrap().iter())
        .map(|n| n["retries"].as_u64().unwrap())
        .sum()
}

/// Two switches of one tier on 127.0.0.2 and .3, sharing their cache: a key asked at the first
/// that the second owns hops there, and the owner's fill tells the node of the first switch's
/// client (its address and scheme, carried in the hop's mark), with both switches' `Via`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tier_hop_is_filled_by_the_owner_as_the_asking_switch_would() {
    let node = Node::start().await;
    let (a, b) = (
        SocketAddr::from(([127, 0, 0, 2], free_port("127.0.0.2"))),
        SocketAddr::from(([127, 0, 0, 3], free_port("127.0.0.3"))),
    );
    let tier = format!(
        "debug_headers = true\n[cache]\nmemory = \"16MiB\"\n\
         [tier]\npeers = [\"{a}\", \"{b}\"]\nhealth_interval = \"100ms\"\n\
         health_timeout = \"300ms\"\nfall = 2\nrise = 1\nhop_timeout = \"2s\"\n\
         local_copy_after = 0\n"
    );
    let asking = Switch::start_on("127.0.0.2", a.port(), &[node.addr], &tier).await;
    let owner = Switch::start_on("127.0.0.3", b.port(), &[node.addr], &tier).await;
    for switch in [&asking, &owner] {
        until("the other peer up", || async {
            let status = switch.status().await;
            let peers = status["tier"]["peers"].as_array().unwrap().clone();
            peers
                .iter()
                .all(|p| p["state"] == "self" || p["state"] == "up")
        })
        .await;
    }
    let b_name = b.to_string();
    for proto in ALL {
        // The first key the owner holds: keys the asking switch owns are filled there.
        let mut hopped = None;
        for i in 0..64 {
            let path = format!("/tier/{proto:?}/{i}");
            let answer = ask(proto, asking.at, &path).await;
            assert_eq!(answer.status, StatusCode::OK, "{proto:?} {path}");
            let owner = answer.headers.get("x-capstan-tier-owner");
            if owner.is_some_and(|o| o.to_str().unwrap() == b_name) {
                hopped = Some((path, answer));
                break;
            }
            // Filled by the asking switch itself: one switch on the way.
            let seen = node.seen(&path);
            assert_eq!(seen.len(), 1, "{proto:?} {path}");
            let what = format!("tier, filled where asked, {proto:?}");
            assert_forwarded(&seen[0], &what, 1, answer.client, proto.https());
        }
        let (path, answer) = hopped.expect("a key the other peer owns among 64");
        let seen = node.seen(&path);
        assert_eq!(seen.len(), 1, "{proto:?} {path}");
        let what = format!("tier hop filled by the owner, {proto:?}");
        assert_forwarded(&seen[0], &what, 2, answer.client, proto.https());
    }
}

/// `upstream.forwarded = true`: the node also gets an RFC 7239 `Forwarded` element for the
/// client, on the proxied road and a cache fill alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_is_added_when_the_operator_asks() {
    let node = Node::start().await;
    let on = "[upstream]\nforwarded = true\n";
    let proxying = Switch::start(&[node.addr], on).await;
    let caching = Switch::start(&[node.addr], &format!("{on}[cache]\nmemory = \"16MiB\"\n")).await;
    for proto in [Proto::H1, Proto::H1Tls, Proto::H3] {
        for (road, switch) in [("proxied", &proxying), ("fill", &caching)] {
            let path = format!("/fwd/{road}/{proto:?}");
            let answer = ask(proto, switch.at, &path).await;
            assert_eq!(answer.status, StatusCode::OK, "{proto:?} {path}");
            let seen = node.seen(&path);
            let scheme = if proto.https() { "https" } else { "http" };
            let expected = format!("for={};proto={scheme}", answer.client.ip());
            let forwarded: Vec<_> = seen[0].headers.get_all("forwarded").iter().collect();
            assert_eq!(forwarded, [expected.as_str()], "{proto:?} {path}");
        }
    }
}

/// Behind a balancer whose PROXY v2 header says the client came over TLS (`PP2_TYPE_SSL` with
/// `PP2_CLIENT_SSL`): the node is told the header's client and `https`, proxied or filled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_header_that_says_tls_makes_the_scheme_https() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node = Node::start().await;
    for (road, cache) in [("proxied", ""), ("fill", "[cache]\nmemory = \"16MiB\"\n")] {
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port("127.0.0.1")));
        let toml = format!(
            "listen = [\"{listen}\"]\n[proxy_protocol]\naccept_on = [\"{listen}\"]\n\
             trusted = [\"127.0.0.0/8\"]\n{cache}[[node]]\naddress = \"{}\"\n",
            node.addr
        );
        let _switch = start_switch(&toml).await;
        let mut wire = capstan_switch::testing::encode_v2(
            "203.0.113.9:40000".parse().unwrap(),
            "192.0.2.1:443".parse().unwrap(),
        );
        // The address block grows by one TLV: PP2_TYPE_SSL, the client flag set, verified.
        let tlv = [0x20, 0, 5, 0x01, 0, 0, 0, 0];
        let len = u16::from_be_bytes([wire[14], wire[15]]) + tlv.len() as u16;
        wire[14..16].copy_from_slice(&len.to_be_bytes());
        wire.extend_from_slice(&tlv);
        let path = format!("/tls-behind-balancer/{road}");
        wire.extend_from_slice(
            format!(
                "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close, X-Secret\r\n\
                 X-Secret: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n\
                 TE: gzip\r\nX-Kept: yes\r\n\r\n"
            )
            .as_bytes(),
        );
        let mut stream = TcpStream::connect(listen).await.unwrap();
        stream.write_all(&wire).await.unwrap();
        let mut answer = Vec::new();
        let reading = stream.read_to_end(&mut answer);
        tokio::time::timeout(Duration::from_secs(10), reading)
            .await
            .expect("an answer within 10 s")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "{road}: {answer}");
        let seen = node.seen(&path);
        assert_eq!(seen.len(), 1, "{road}");
        let client = SocketAddr::from(([203, 0, 113, 9], 40000));
        let what = format!("PROXY v2 with TLS, {road}");
        assert_forwarded(&seen[0], &what, 1, client, true);
    }
}
