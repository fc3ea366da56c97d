//! HTTP/2 to nodes (`protocol = "h2"`), on loopback: a real HTTP/2 node (hyper's http2 server,
//! cleartext prior knowledge or TLS with ALPN `h2` from the committed test PKI) behind the
//! switch, and a real HTTP/2 client (hyper's http2 client) in front of it. Request trailers
//! reach the node and response trailers reach the client; a gRPC-shaped unary call
//! (`application/grpc`, a 5-byte length-prefixed message, `grpc-status` in the trailers)
//! round-trips — built by hand, as no gRPC tool is installed here (nghttp2's `nghttp`, a real
//! HTTP/2 client, is, and sends and sees trailers); concurrent streams share one
//! node connection; a node connection that dies before or during a response gives the client a
//! 502 or a reset stream, never a hang, and the next request reconnects; a refused connection
//! is retried on another node or is a 502; a reload can turn a node to h2; health checks speak
//! HTTP/2 to an HTTP/2-only node; an HTTP/1.1 client's chunked trailers reach an h2 node, and
//! declared trailers pass between HTTP/1.1 peers; an upgrade to an h2 node is a 502; bad
//! `protocol` values are one-line errors.

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use common::*;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, HeaderValue};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

type NodeBody = BoxBody<Bytes, Infallible>;

/// How long any one exchange may take before the test calls it a hang.
const NO_HANG: Duration = Duration::from_secs(10);

fn pki(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/tls")
        .join(file)
}

/// What an HTTP/2 node saw, and the means to cut its connections.
#[derive(Default)]
struct Node {
    /// Connections accepted (after the TLS handshake, when there is one).
    connections: AtomicUsize,
    /// ALPN of each TLS handshake.
    alpn: Mutex<Vec<Option<Vec<u8>>>>,
    /// Per request: path, HTTP version, `te` and `user-agent` fields.
    requests: Mutex<Vec<(String, String, String, String)>>,
    /// Per request: `:authority` and the `host` field.
    authorities: Mutex<Vec<(String, String)>>,
    /// The trailers of each request body that had some.
    request_trailers: Mutex<Vec<HeaderMap>>,
    /// Requests of `/hold` being answered right now, and the most seen at once.
    holding: AtomicUsize,
    /// The tasks serving connections, aborted to kill them.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// The body sender of the response `/stream` has under way.
    streaming: Mutex<Option<tokio::sync::mpsc::Sender<Frame<Bytes>>>>,
}

impl Node {
    /// Closes every connection the node has (the TCP connections drop with their tasks).
    fn kill_connections(&self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// An HTTP/2-only node on loopback; over TLS with ALPN `h2` (the test PKI's `cert`) when given.
async fn h2_node(cert: Option<&str>) -> (SocketAddr, Arc<Node>) {
    let acceptor = cert.map(tls_acceptor);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let node = Arc::new(Node::default());
    let state = Arc::clone(&node);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, state2) = (acceptor.clone(), Arc::clone(&state));
            let task = tokio::spawn(async move {
                match acceptor {
                    Some(acceptor) => {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                        state2.alpn.lock().unwrap().push(alpn);
                        serve_h2(tls, state2).await;
                    }
                    None => serve_h2(tcp, state2).await,
                }
            });
            state.tasks.lock().unwrap().push(task.abort_handle());
        }
    });
    (addr, node)
}

fn tls_acceptor(cert: &str) -> tokio_rustls::TlsAcceptor {
    let chain = CertificateDer::pem_file_iter(pki(&format!("{cert}.pem")))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(pki(&format!("{cert}.key"))).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

async fn serve_h2<IO>(io: IO, node: Arc<Node>)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    node.connections.fetch_add(1, Ordering::SeqCst);
    let service = service_fn(move |req: Request<Incoming>| answer(req, Arc::clone(&node)));
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .serve_connection(TokioIo::new(io), service)
        .await;
}

fn field(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// The node's answers: `/echo` returns the body and the request's trailers (as `x-echo-NAME`
/// trailers, beside `grpc-status`/`grpc-message`); `/pkg.Greeter/Hello` is a gRPC unary call;
/// `/hold` answers once 4 of them are in flight; `/stream` sends one chunk and then whatever
/// the test pushes; `/die` kills the node's connections without answering.
async fn answer(req: Request<Incoming>, node: Arc<Node>) -> Result<Response<NodeBody>, Infallible> {
    let path = req.uri().path().to_string();
    let headers = req.headers().clone();
    let authority = req.uri().authority().map(|a| a.to_string());
    node.authorities
        .lock()
        .unwrap()
        .push((authority.unwrap_or_default(), field(&headers, "host")));
    node.requests.lock().unwrap().push((
        path.clone(),
        format!("{:?}", req.version()),
        field(&headers, "te"),
        field(&headers, "user-agent"),
    ));
    let collected = req.into_body().collect().await;
    let Ok(collected) = collected else {
        return Ok(Response::new(Full::new(Bytes::new()).boxed()));
    };
    let request_trailers = collected.trailers().cloned().unwrap_or_default();
    if !request_trailers.is_empty() {
        let mut seen = node.request_trailers.lock().unwrap();
        seen.push(request_trailers.clone());
    }
    let body = collected.to_bytes();
    Ok(match path.as_str() {
        "/echo" => {
            let mut trailers = grpc_ok();
            for (name, value) in &request_trailers {
                let echoed = format!("x-echo-{name}");
                trailers.insert(
                    hyper::header::HeaderName::from_bytes(echoed.as_bytes()).unwrap(),
                    value.clone(),
                );
            }
            with_trailers("text/plain", body, trailers)
        }
        "/pkg.Greeter/Hello" => grpc_hello(&headers, &body),
        "/hold" => hold(&node).await,
        "/stream" => stream(&node).await,
        "/die" => {
            node.kill_connections();
            Response::new(Full::new(Bytes::new()).boxed())
        }
        _ => Response::new(Full::new(Bytes::from_static(b"h2-node")).boxed()),
    })
}

fn grpc_ok() -> HeaderMap {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    trailers.insert("grpc-message", HeaderValue::from_static("OK"));
    trailers
}

fn with_trailers(
    content_type: &'static str,
    body: Bytes,
    trailers: HeaderMap,
) -> Response<NodeBody> {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> =
        vec![Ok(Frame::data(body)), Ok(Frame::trailers(trailers))];
    let mut resp = Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed());
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static(content_type));
    resp
}

/// A gRPC message: the compressed flag, the length (big endian) and the bytes.
fn grpc_frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

/// The message of a one-message gRPC body, if it is one.
fn grpc_message(body: &[u8]) -> Option<&[u8]> {
    let (&flag, rest) = body.split_first()?;
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    (flag == 0 && rest.len() == 4 + len).then(|| &rest[4..])
}

/// `Hello`: answers `hello, NAME`, or `grpc-status: 3` (INVALID_ARGUMENT) for a body that is
/// not one gRPC message or a call without `te: trailers`.
fn grpc_hello(headers: &HeaderMap, body: &[u8]) -> Response<NodeBody> {
    let valid =
        field(headers, "content-type") == "application/grpc" && field(headers, "te") == "trailers";
    match grpc_message(body).filter(|_| valid) {
        Some(name) => {
            let reply = [b"hello, ".as_slice(), name].concat();
            with_trailers("application/grpc", grpc_frame(&reply), grpc_ok())
        }
        None => {
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("3"));
            with_trailers("application/grpc", Bytes::new(), trailers)
        }
    }
}

/// Waits (with a deadline) until 4 `/hold` requests are in flight on this node at once.
async fn hold(node: &Node) -> Response<NodeBody> {
    node.holding.fetch_add(1, Ordering::SeqCst);
    let deadline = tokio::time::Instant::now() + NO_HANG;
    while node.holding.load(Ordering::SeqCst) < 4 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let together = node.holding.load(Ordering::SeqCst) >= 4;
    Response::new(Full::new(Bytes::from(format!("together={together}"))).boxed())
}

/// A response whose body the test feeds through `node.streaming`.
async fn stream(node: &Node) -> Response<NodeBody> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Frame<Bytes>>(4);
    tx.send(Frame::data(Bytes::from_static(b"first")))
        .await
        .unwrap();
    *node.streaming.lock().unwrap() = Some(tx);
    let frames = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|f| (Ok::<_, Infallible>(f), rx))
    });
    Response::new(StreamBody::new(frames).boxed())
}

/// A switch with an HTTP/1.1 listener and an h2c listener (`listen_addrs[1]`), and one node
/// called `grpc` at `addr` with `protocol = "h2"` and `node_extra`.
async fn switch_for(addr: SocketAddr, node_extra: &str, extra: &str) -> capstan_switch::Running {
    start_switch(&format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\ndebug_headers = true\n{extra}\n\
         [[listener]]\naddress = \"127.0.0.1:0\"\nh2c = true\n\
         [[node]]\nname = \"grpc\"\naddress = \"{addr}\"\nprotocol = \"h2\"\n{node_extra}\n"
    ))
    .await
}

type ClientBody = BoxBody<Bytes, Infallible>;

/// An HTTP/2 (prior knowledge) client connection to the switch.
async fn h2_client(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<ClientBody> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

/// A body of `data` followed by `trailers`.
fn body_with_trailers(data: &'static [u8], trailers: HeaderMap) -> ClientBody {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = vec![
        Ok(Frame::data(Bytes::from_static(data))),
        Ok(Frame::trailers(trailers)),
    ];
    StreamBody::new(futures_util::stream::iter(frames)).boxed()
}

fn empty() -> ClientBody {
    Full::new(Bytes::new()).boxed()
}

/// Sends `req` and reads the whole response: head, body and trailers.
async fn exchange(
    client: &mut hyper::client::conn::http2::SendRequest<ClientBody>,
    req: Request<ClientBody>,
) -> (StatusCode, HeaderMap, Bytes, HeaderMap) {
    tokio::time::timeout(NO_HANG, async {
        client.ready().await.unwrap();
        let resp = client.send_request(req).await.expect("a response head");
        let (parts, body) = resp.into_parts();
        let collected = body.collect().await.expect("a whole body");
        let trailers = collected.trailers().cloned().unwrap_or_default();
        (parts.status, parts.headers, collected.to_bytes(), trailers)
    })
    .await
    .expect("the exchange ends")
}

fn post(path: &str) -> hyper::http::request::Builder {
    Request::post(format!("http://grpc.example{path}"))
}

#[tokio::test]
async fn trailers_pass_both_ways_between_h2_client_and_h2_node() {
    let (addr, node) = h2_node(None).await;
    let sw = switch_for(addr, "", "").await;
    let mut client = h2_client(sw.listen_addrs[1]).await;
    let mut trailers = HeaderMap::new();
    trailers.insert("x-checksum", HeaderValue::from_static("abc123"));
    let req = post("/echo")
        .header("te", "trailers")
        .body(body_with_trailers(b"ping", trailers))
        .unwrap();
    let (status, headers, body, trailers) = exchange(&mut client, req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"ping");
    assert_eq!(field(&headers, "x-capstan-node"), "grpc");
    assert_eq!(field(&trailers, "grpc-status"), "0", "{trailers:?}");
    assert_eq!(field(&trailers, "grpc-message"), "OK");
    assert_eq!(
        field(&trailers, "x-echo-x-checksum"),
        "abc123",
        "request trailer reached the node"
    );
    let requests = node.requests.lock().unwrap().clone();
    assert_eq!(requests[0].1, "HTTP/2.0", "{requests:?}");
    // The host the client asked for is the `:authority`, and no `host` field contradicts it.
    let authorities = node.authorities.lock().unwrap().clone();
    assert_eq!(authorities[0], ("grpc.example".into(), String::new()));
    assert_eq!(
        requests[0].2, "trailers",
        "TE: trailers passed on: {requests:?}"
    );
}

#[tokio::test]
async fn a_grpc_unary_call_round_trips() {
    let (addr, _node) = h2_node(None).await;
    let sw = switch_for(addr, "", "").await;
    let mut client = h2_client(sw.listen_addrs[1]).await;
    let call = |name: &'static [u8]| {
        post("/pkg.Greeter/Hello")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(grpc_frame(name)).boxed())
            .unwrap()
    };
    let (status, headers, body, trailers) = exchange(&mut client, call(b"capstan")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(field(&headers, "content-type"), "application/grpc");
    assert_eq!(grpc_message(&body), Some(&b"hello, capstan"[..]));
    assert_eq!(field(&trailers, "grpc-status"), "0", "{trailers:?}");
    // A call without `te: trailers` is refused by the node (as gRPC servers do): proof that
    // the switch passes the field rather than the node ignoring it.
    let bare = post("/pkg.Greeter/Hello")
        .header("content-type", "application/grpc")
        .body(Full::new(grpc_frame(b"x")).boxed())
        .unwrap();
    let (_, _, _, trailers) = exchange(&mut client, bare).await;
    assert_eq!(field(&trailers, "grpc-status"), "3");
}

#[tokio::test]
async fn concurrent_streams_share_one_node_connection() {
    let (addr, node) = h2_node(None).await;
    let sw = switch_for(addr, "", "").await;
    let client = h2_client(sw.listen_addrs[1]).await;
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let mut client = client.clone();
        calls.spawn(async move {
            let req = Request::get("http://grpc.example/hold")
                .body(empty())
                .unwrap();
            exchange(&mut client, req).await
        });
    }
    while let Some(done) = calls.join_next().await {
        let (status, _, body, _) = done.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            &body[..],
            b"together=true",
            "the 4 streams were at the node at once"
        );
    }
    assert_eq!(
        node.connections.load(Ordering::SeqCst),
        1,
        "one node connection"
    );
    let status = wait_for_status(sw.admin_addr.unwrap(), "the requests settled", |s| {
        node_status(s, "grpc")["active"] == 0
    })
    .await;
    assert_eq!(node_status(&status, "grpc")["protocol"], "h2");
    let served = node_status(&status, "grpc")["served"].as_u64().unwrap();
    assert!(served >= 4, "the node's counter: {status}");
}

#[tokio::test]
async fn a_node_connection_dying_gives_a_clean_error_and_the_next_request_reconnects() {
    let (addr, node) = h2_node(None).await;
    let sw = switch_for(addr, "", "").await;
    let mut client = h2_client(sw.listen_addrs[1]).await;
    // Before the response head: 502 naming the node.
    let req = Request::get("http://grpc.example/die")
        .body(empty())
        .unwrap();
    let (status, _, body, _) = exchange(&mut client, req).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body:?}");
    assert!(String::from_utf8_lossy(&body).contains("grpc"), "{body:?}");
    // During the body: the client's stream ends in an error (a reset), not a hang.
    let req = Request::get("http://grpc.example/stream")
        .body(empty())
        .unwrap();
    let cut = tokio::time::timeout(NO_HANG, async {
        client.ready().await.unwrap();
        let resp = client.send_request(req).await.expect("a response head");
        assert_eq!(resp.status(), StatusCode::OK);
        let mut body = resp.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"first");
        node.kill_connections();
        loop {
            match body.frame().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Some(e),
                None => return None,
            }
        }
    })
    .await
    .expect("the cut response ends");
    assert!(cut.is_some(), "a cut body is an error, not a clean end");
    // The switch reconnects for the next request.
    let req = Request::get("http://grpc.example/").body(empty()).unwrap();
    let (status, _, body, _) = exchange(&mut client, req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"h2-node");
    assert!(
        node.connections.load(Ordering::SeqCst) >= 2,
        "a new connection"
    );
    wait_for_status(sw.admin_addr.unwrap(), "active count released", |s| {
        node_status(s, "grpc")["active"] == 0
    })
    .await;
}

#[tokio::test]
async fn an_h2_node_over_tls_negotiates_alpn_h2() {
    let (addr, node) = h2_node(Some("www.example.test")).await;
    let tls = format!(
        "tls = {{ ca_file = \"{}\", sni = \"www.example.test\" }}",
        pki("ca.pem").display()
    );
    let sw = switch_for(addr, &tls, "").await;
    let mut client = h2_client(sw.listen_addrs[1]).await;
    let req = post("/echo")
        .header("te", "trailers")
        .body(body_with_trailers(b"over tls", HeaderMap::new()))
        .unwrap();
    let (status, _, body, trailers) = exchange(&mut client, req).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"over tls");
    assert_eq!(field(&trailers, "grpc-status"), "0");
    assert_eq!(*node.alpn.lock().unwrap(), [Some(b"h2".to_vec())]);
}

#[tokio::test]
async fn an_http1_client_reaches_an_h2_node() {
    let (addr, node) = h2_node(None).await;
    let sw = switch_for(addr, "", "").await;
    let request = "GET /plain HTTP/1.1\r\nHost: www.example.org\r\nConnection: close\r\n\r\n";
    let answer = raw_exchange(sw.listen_addrs[0], request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("h2-node"), "{answer}");
    assert_eq!(node.requests.lock().unwrap()[0].1, "HTTP/2.0");
    // The client's Host became the `:authority`.
    let authorities = node.authorities.lock().unwrap().clone();
    assert_eq!(authorities[0], ("www.example.org".into(), String::new()));
}

/// HTTP/1.1 client, chunked: its request trailers reach the h2 node. hyper writes response
/// trailers to an HTTP/1.1 client only when the head declared them (`Trailer`), which the node
/// did not: the response ends cleanly without them (documented in `h2_nodes`).
#[tokio::test]
async fn an_http1_clients_chunked_trailers_reach_an_h2_node() {
    let (addr, node) = h2_node(None).await;
    let sw = switch_for(addr, "", "").await;
    let request = "POST /echo HTTP/1.1\r\nHost: grpc.example\r\nTransfer-Encoding: chunked\r\n\
                   Trailer: x-checksum\r\nTE: trailers\r\nConnection: close\r\n\r\n\
                   4\r\nping\r\n0\r\nx-checksum: abc123\r\n\r\n";
    let answer = raw_exchange(sw.listen_addrs[0], request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\r\n4\r\nping\r\n0\r\n\r\n"), "{answer}");
    let seen = node.request_trailers.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(field(&seen[0], "x-checksum"), "abc123");
    assert_eq!(node.requests.lock().unwrap()[0].2, "trailers");
}

/// An HTTP/1.1 node that echoes the body and the request's trailers as response trailers,
/// declared up front in `Trailer` (as HTTP/1.1 wants).
async fn http1_trailer_node() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let service = service_fn(|req: Request<Incoming>| async move {
                let collected = req.into_body().collect().await.unwrap();
                let mut trailers = collected.trailers().cloned().unwrap_or_default();
                trailers.insert("grpc-status", HeaderValue::from_static("0"));
                let mut resp = with_trailers("text/plain", collected.to_bytes(), trailers);
                resp.headers_mut().insert(
                    "trailer",
                    HeaderValue::from_static("x-checksum, grpc-status"),
                );
                Ok::<_, Infallible>(resp)
            });
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), service),
            );
        }
    });
    addr
}

/// Between HTTP/1.1 peers, declared trailers pass both ways (`Trailer` is end to end).
#[tokio::test]
async fn declared_trailers_pass_between_http1_client_and_http1_node() {
    let addr = http1_trailer_node().await;
    let sw = start_switch(&format!(
        "listen = [\"127.0.0.1:0\"]\n[[node]]\nname = \"h1\"\naddress = \"{addr}\"\n"
    ))
    .await;
    let request = "POST /echo HTTP/1.1\r\nHost: h1.example\r\nTransfer-Encoding: chunked\r\n\
                   Trailer: x-checksum\r\nTE: trailers\r\nConnection: close\r\n\r\n\
                   4\r\nping\r\n0\r\nx-checksum: abc123\r\n\r\n";
    let answer = raw_exchange(sw.listen_addrs[0], request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let tail = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    assert!(tail.contains("ping\r\n0\r\n"), "{answer}");
    assert!(
        answer.contains("x-checksum: abc123\r\n"),
        "request trailer echoed: {answer}"
    );
    assert!(
        answer.contains("grpc-status: 0\r\n"),
        "response trailer: {answer}"
    );
}

/// Upgrades need HTTP/1.1: to an h2 node they are answered 502, and the node is not blamed.
#[tokio::test]
async fn an_upgrade_to_an_h2_node_is_a_502() {
    let (addr, node) = h2_node(None).await;
    let sw = switch_for(addr, "", "").await;
    let request = "GET /ws HTTP/1.1\r\nHost: grpc.example\r\nConnection: upgrade, close\r\n\
                   Upgrade: websocket\r\n\r\n";
    let answer = raw_exchange(sw.listen_addrs[0], request.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(answer.contains("speaks HTTP/2"), "{answer}");
    assert!(node.requests.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_h2_only_node_is_health_checked_over_h2() {
    let (addr, node) = h2_node(None).await;
    // A check that fails (counted below) only if no answer came in half a second: the first
    // one opens the h2 connection, which a busy machine can slow down well past 100 ms.
    let extra = "[health]\ncheck_path = \"/_check\"\ncheck_interval = \"500ms\"\n\
                 check_timeout = \"500ms\"\n";
    let sw = switch_for(addr, "", extra).await;
    let status = wait_for_status(sw.admin_addr.unwrap(), "passed checks", |s| {
        node_status(s, "grpc")["check"]["passed"].as_u64() >= Some(2)
    })
    .await;
    assert_eq!(
        node_status(&status, "grpc")["check"]["failed"],
        0,
        "{status}"
    );
    let requests = node.requests.lock().unwrap().clone();
    let check = requests.iter().find(|r| r.0 == "/_check").unwrap();
    assert_eq!(
        (check.1.as_str(), check.3.as_str()),
        ("HTTP/2.0", "capstan-health-check")
    );
}

#[test]
fn bad_protocol_values_are_one_line_errors() {
    let node = |extra: &str| {
        format!(
            "listen = [\"127.0.0.1:0\"]\n{extra}\n[[node]]\naddress = \"127.0.0.1:1\"\n\
             protocol = \"h2\"\n"
        )
    };
    let bad =
        "listen = [\"127.0.0.1:0\"]\n[[node]]\naddress = \"127.0.0.1:1\"\nprotocol = \"h3\"\n";
    let e = capstan_switch::Config::parse(bad, Some("t.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("protocol: `h3` is not one of"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    assert!(e.contains("t.toml:4"), "located: {e}");
    let proxied = node("[proxy_protocol]\nsend = \"v1\"\n");
    let e = capstan_switch::Config::parse(&proxied, None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("proxy_protocol.send cannot be used with node"),
        "{e}"
    );
    assert!(!e.contains('\n'), "{e}");
    let ok = capstan_switch::Config::parse(&node(""), None).unwrap();
    assert!(
        ok.describe().contains("protocol h2: HTTP/2 cleartext (h2c"),
        "{}",
        ok.describe()
    );
}

#[test]
fn the_grpc_example_loads_and_check_shows_the_protocols() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/grpc.toml");
    let config = capstan_switch::Config::load(&path).expect("examples/grpc.toml is valid");
    let shown = config.describe();
    assert!(
        shown.contains("protocol h2: HTTP/2 cleartext (h2c"),
        "{shown}"
    );
    assert!(
        shown.contains("protocol h2: HTTP/2 over TLS (ALPN h2)"),
        "{shown}"
    );
}

/// A real HTTP/2 client (nghttp2's `nghttp`, prior knowledge) through the switch: its request
/// trailer reaches the node and the node's trailers come back.
#[tokio::test]
async fn nghttp_sends_and_sees_trailers_through_the_switch() {
    if std::process::Command::new("nghttp")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("note: nghttp (nghttp2-client) is not installed; test skipped");
        return;
    }
    let (addr, node) = h2_node(None).await;
    let sw = switch_for(addr, "", "").await;
    let data = std::env::temp_dir().join(format!("capstan-h2-nodes-{}.txt", std::process::id()));
    std::fs::write(&data, "ping").unwrap();
    let url = format!("http://{}/echo", sw.listen_addrs[1]);
    let run = tokio::process::Command::new("nghttp")
        .args([
            "-v",
            "-H",
            "te: trailers",
            "--trailer",
            "x-checksum: abc123",
        ])
        .arg(format!("--data={}", data.display()))
        .arg(&url)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(NO_HANG, run)
        .await
        .expect("nghttp ends")
        .unwrap();
    let _ = std::fs::remove_file(&data);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("grpc-status: 0"), "{text}");
    assert!(text.contains("x-echo-x-checksum: abc123"), "{text}");
    let seen = node.request_trailers.lock().unwrap().clone();
    assert_eq!(field(&seen[0], "x-checksum"), "abc123");
}

/// A reload that turns a node to `protocol = "h2"` speaks HTTP/2 to it from the next request.
#[tokio::test]
async fn a_reload_switches_a_node_to_h2() {
    let (addr, node) = h2_node(None).await;
    let dir = std::env::temp_dir().join(format!("capstan-h2-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("switch.toml");
    let config = |protocol: &str| {
        format!(
            "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n\
             [[node]]\nname = \"grpc\"\naddress = \"{addr}\"\nprotocol = \"{protocol}\"\n"
        )
    };
    std::fs::write(&path, config("http/1.1")).unwrap();
    let sw = capstan_switch::start(capstan_switch::Config::load(&path).unwrap())
        .await
        .unwrap();
    let listen = sw.listen_addrs[0];
    // HTTP/1.1 to an HTTP/2-only node: it closes the connection, the client gets a 502.
    assert_eq!(get(listen, "/").await.status, StatusCode::BAD_GATEWAY);
    std::fs::write(&path, config("h2")).unwrap();
    sw.switch.reload().await.expect("reload succeeds");
    let answer = get(listen, "/").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    assert_eq!(answer.text(), "h2-node");
    assert_eq!(node.requests.lock().unwrap()[0].1, "HTTP/2.0");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An h2 node that refuses connections is a connect failure: the request goes to another node
/// (as for HTTP/1.1 nodes), or, with none left, gets a 502 naming the cause.
#[tokio::test]
async fn a_refused_h2_connection_is_retried_elsewhere_or_a_502() {
    let closed = DeadAddr::new();
    let (addr, _node) = h2_node(None).await;
    let sw = start_switch(&format!(
        "listen = [\"127.0.0.1:0\"]\n[policy]\nname = \"round-robin\"\n\
         [[node]]\nname = \"gone\"\naddress = \"{closed}\"\nprotocol = \"h2\"\n\
         [[node]]\nname = \"grpc\"\naddress = \"{addr}\"\nprotocol = \"h2\"\n"
    ))
    .await;
    for _ in 0..2 {
        let answer = get(sw.listen_addrs[0], "/").await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    }
    let alone = start_switch(&format!(
        "listen = [\"127.0.0.1:0\"]\n\
         [[node]]\nname = \"gone\"\naddress = \"{closed}\"\nprotocol = \"h2\"\n"
    ))
    .await;
    let answer = get(alone.listen_addrs[0], "/").await;
    assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
    assert!(
        answer.text().contains("could not connect to node gone"),
        "{}",
        answer.text()
    );
}
