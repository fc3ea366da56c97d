//! Real back-ends and a real switch on loopback, for the switch's tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use capstan_switch::{Config, Running};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

type BoxBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A small HTTP back-end that names itself in every answer.
///
/// Paths: `/slow?ms=N` answers after N ms; `/big?bytes=N` streams N bytes; `/upload` counts
/// the request body's bytes; `/headers` returns the request head as `name: value` lines;
/// `/chunked` answers with a chunked body; `/_capstan/load` reports `load_percent` as CPU
/// utilisation and `service_ms` as mean service time (503 while `reports_off`); `/_check`
/// answers with the status in `check_status` (200 at start); `/hold` answers only once
/// `release` is called (`/hold?bytes=N`: then with an N-byte body, as `/big`); anything else answers with the back-end's name. `hits` counts every
/// request but the load reports and checks.
pub struct Backend {
    pub name: String,
    pub addr: SocketAddr,
    pub hits: Arc<AtomicU64>,
    /// CPU utilisation in percent this back-end reports at `/_capstan/load`.
    pub load_percent: Arc<AtomicU64>,
    /// Mean service time, milliseconds, it reports.
    pub service_ms: Arc<AtomicU64>,
    /// While set, `/_capstan/load` answers 503 (the node's load daemon has stopped).
    pub reports_off: Arc<AtomicBool>,
    /// The status `/_check` answers with.
    pub check_status: Arc<AtomicU64>,
    /// `/hold` requests that have arrived.
    pub held: Arc<AtomicU64>,
    release: Arc<tokio::sync::watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Backend {
    pub async fn start(name: &str) -> Backend {
        Self::start_on("127.0.0.1:0".parse().unwrap(), name).await
    }

    pub async fn start_on(addr: SocketAddr, name: &str) -> Backend {
        let listener = TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hits = Arc::new(AtomicU64::new(0));
        let load_percent = Arc::new(AtomicU64::new(0));
        let service_ms = Arc::new(AtomicU64::new(0));
        let reports_off = Arc::new(AtomicBool::new(false));
        let check_status = Arc::new(AtomicU64::new(200));
        let held = Arc::new(AtomicU64::new(0));
        let release = Arc::new(tokio::sync::watch::channel(false).0);
        let task = {
            let name = name.to_string();
            let hits = Arc::clone(&hits);
            let load = Arc::clone(&load_percent);
            let service = Arc::clone(&service_ms);
            let off = Arc::clone(&reports_off);
            let check = Arc::clone(&check_status);
            let held = Arc::clone(&held);
            let release = Arc::clone(&release);
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let name = name.clone();
                    let hits = Arc::clone(&hits);
                    let load = Arc::clone(&load);
                    let service_ms = Arc::clone(&service);
                    let off = Arc::clone(&off);
                    let check = Arc::clone(&check);
                    let held = Arc::clone(&held);
                    let release = Arc::clone(&release);
                    tokio::spawn(async move {
                        let service = service_fn(move |req| {
                            let report = Report {
                                load_percent: load.load(Ordering::Relaxed),
                                service_ms: service_ms.load(Ordering::Relaxed),
                                off: off.load(Ordering::Relaxed),
                                check_status: check.load(Ordering::Relaxed) as u16,
                            };
                            if !matches!(req.uri().path(), "/_capstan/load" | "/_check") {
                                hits.fetch_add(1, Ordering::Relaxed);
                            }
                            let hold = (req.uri().path() == "/hold").then(|| {
                                held.fetch_add(1, Ordering::Relaxed);
                                release.subscribe()
                            });
                            backend_answer(name.clone(), report, hold, req)
                        });
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            })
        };
        Backend {
            name: name.to_string(),
            addr,
            hits,
            load_percent,
            service_ms,
            reports_off,
            check_status,
            held,
            release,
            task,
        }
    }

    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Lets every `/hold` request, now and later, answer.
    pub fn release(&self) {
        self.release.send_replace(true);
    }
}

fn query_number(req: &Request<Incoming>, key: &str) -> u64 {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// What a back-end's `/_capstan/load` says at one moment.
struct Report {
    load_percent: u64,
    service_ms: u64,
    off: bool,
    check_status: u16,
}

async fn backend_answer(
    name: String,
    report: Report,
    hold: Option<tokio::sync::watch::Receiver<bool>>,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, Infallible> {
    let full = |s: String| Full::new(Bytes::from(s)).boxed();
    if let Some(mut released) = hold {
        let _ = released.wait_for(|r| *r).await;
    }
    let resp = match req.uri().path() {
        "/_check" => {
            let mut resp = Response::new(full("check".into()));
            *resp.status_mut() =
                StatusCode::from_u16(report.check_status).unwrap_or(StatusCode::OK);
            resp
        }
        "/_capstan/load" if report.off => {
            let mut resp = Response::new(full("load daemon stopped".into()));
            *resp.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            resp
        }
        "/_capstan/load" => Response::new(full(format!(
            "{{\"interval\":{{\"cpu_util\":{},\"disk_util\":0.0,\"nic_util\":0.0,\
             \"mean_service_ms\":{}}}}}",
            report.load_percent as f64 / 100.0,
            report.service_ms
        ))),
        "/slow" => {
            tokio::time::sleep(Duration::from_millis(query_number(&req, "ms"))).await;
            Response::new(full(name))
        }
        path if path == "/big" || (path == "/hold" && query_number(&req, "bytes") > 0) => {
            let total = query_number(&req, "bytes");
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let stream = futures_stream(total, chunk);
            let mut resp = Response::new(StreamBody::new(stream).boxed());
            resp.headers_mut()
                .insert("content-length", total.to_string().parse().unwrap());
            resp
        }
        "/chunked" => {
            let stream = futures_stream(3 * 1000, Bytes::from(vec![b'c'; 1000]));
            Response::new(StreamBody::new(stream).boxed())
        }
        "/upload" => {
            let mut body = req.into_body();
            let mut n = 0u64;
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(f) => n += f.data_ref().map_or(0, |d| d.len() as u64),
                    Err(_) => break,
                }
            }
            Response::new(full(n.to_string()))
        }
        "/headers" => {
            let mut text = format!("{} {} {:?}\n", req.method(), req.uri(), req.version());
            for (k, v) in req.headers() {
                text.push_str(&format!("{}: {}\n", k, v.to_str().unwrap_or("?")));
            }
            let mut resp = Response::new(full(text));
            resp.headers_mut()
                .insert("connection", "keep-alive, x-drop-me".parse().unwrap());
            resp.headers_mut()
                .insert("x-drop-me", "hop".parse().unwrap());
            resp.headers_mut()
                .insert("keep-alive", "timeout=5".parse().unwrap());
            resp
        }
        _ => Response::new(full(name)),
    };
    Ok(resp)
}

/// A stream of `total` bytes in chunks, without holding them all.
fn futures_stream(
    total: u64,
    chunk: Bytes,
) -> impl futures_core::Stream<Item = Result<Frame<Bytes>, Infallible>> + Send {
    let mut left = total;
    futures_util::stream::poll_fn(move |_| {
        if left == 0 {
            return std::task::Poll::Ready(None);
        }
        let n = left.min(chunk.len() as u64) as usize;
        left -= n as u64;
        std::task::Poll::Ready(Some(Ok(Frame::data(chunk.slice(..n)))))
    })
}

/// `n` back-ends named `n0`, `n1`, ….
pub async fn cluster(n: usize) -> Vec<Backend> {
    let mut nodes = Vec::new();
    for i in 0..n {
        nodes.push(Backend::start(&format!("n{i}")).await);
    }
    nodes
}

/// The back-ends as `config_for` takes them.
pub fn refs(nodes: &[Backend]) -> Vec<&Backend> {
    nodes.iter().collect()
}

/// A switch started in this process from TOML text whose `listen` is port 0.
pub async fn start_switch(toml: &str) -> Running {
    let config = Config::parse(toml, Some("test.toml")).expect("test config is valid");
    capstan_switch::start(config).await.expect("switch starts")
}

/// TOML for `nodes`, with `extra` appended (policy, classes, timeouts, …).
pub fn config_for(nodes: &[&Backend], extra: &str) -> String {
    let mut text =
        String::from("listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\ndebug_headers = true\n");
    text.push_str(extra);
    text.push('\n');
    for node in nodes {
        text.push_str(&format!(
            "[[node]]\nname = \"{}\"\naddress = \"{}\"\n",
            node.name, node.addr
        ));
    }
    text
}

pub fn client() -> Client<HttpConnector, Full<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

pub struct Answer {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    pub fn node(&self) -> String {
        self.header("x-capstan-node")
    }
    pub fn class(&self) -> String {
        self.header("x-capstan-class")
    }
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default()
    }
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub async fn get(addr: SocketAddr, path: &str) -> Answer {
    send(addr, Request::get(path), Bytes::new()).await
}

pub async fn send(addr: SocketAddr, builder: hyper::http::request::Builder, body: Bytes) -> Answer {
    let builder = {
        let uri = builder.uri_ref().unwrap().to_string();
        builder.uri(format!("http://{addr}{uri}"))
    };
    let req = builder.body(Full::new(body)).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(30), client().request(req))
        .await
        .expect("answer within 30 s")
        .expect("request succeeds");
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.expect("body").to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

/// A loopback address that refuses connections for as long as this lives: a socket bound to
/// it that never listens. A port merely closed is soon handed out again, to the next
/// `bind(0)` of a test running beside this one or of the switch under test itself (which then
/// forwards to its own listener: a forwarding loop, now answered 508); the kernel hands a bound
/// port neither to `bind(0)` nor to a connection as its source port. A listener that allows address
/// reuse still may listen there (a back-end revived with [`Backend::start_on`], or a switch
/// whose configuration names the port), so it also reserves a port for one.
pub struct DeadAddr {
    addr: SocketAddr,
    _holder: socket2::Socket,
}

impl DeadAddr {
    /// A fresh port on 127.0.0.1 that nothing listens on.
    pub fn new() -> DeadAddr {
        Self::hold("127.0.0.1:0".parse().unwrap()).expect("a loopback port can be bound")
    }

    /// Binds `addr` without listening; fails while something still listens there.
    fn hold(addr: SocketAddr) -> std::io::Result<DeadAddr> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        // The stopped back-end's closed connections may linger in TIME_WAIT on the port.
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())?;
        let addr = socket.local_addr()?.as_socket().expect("an IP address");
        Ok(DeadAddr {
            addr,
            _holder: socket,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl std::fmt::Display for DeadAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.addr.fmt(f)
    }
}

/// Stops `backend` and holds its address dead (polled until its listener has closed, 10 s at
/// most).
pub async fn stop(backend: Backend) -> DeadAddr {
    let addr = backend.addr;
    drop(backend);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match DeadAddr::hold(addr) {
            Ok(dead) => return dead,
            Err(e) => assert!(
                std::time::Instant::now() < deadline,
                "{addr} is still listened on: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Counts of answers per node for the given paths, requested one after another.
pub async fn placements(addr: SocketAddr, paths: &[&str]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for path in paths {
        let a = get(addr, path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {}", a.text());
        out.push((path.to_string(), a.node()));
    }
    out
}

pub fn tally(placed: &[(String, String)]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for (_, node) in placed {
        *m.entry(node.clone()).or_insert(0) += 1;
    }
    m
}

/// Sends raw bytes on a fresh connection and returns everything the switch answered until it
/// closed the connection (or 10 s passed).
pub async fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

pub async fn status_json(admin: SocketAddr) -> serde_json::Value {
    let a = get(admin, "/status").await;
    assert_eq!(a.status, StatusCode::OK);
    serde_json::from_slice(&a.body).expect("status is JSON")
}

/// Polls `/status` until `ready` holds, or fails after 10 s saying `what`.
pub async fn wait_for_status(
    admin: SocketAddr,
    what: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let status = status_json(admin).await;
        if ready(&status) {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `/metrics` until `ready` holds for its text, or fails after 10 s saying `what` and
/// showing the text; returns the text.
pub async fn wait_for_metrics(
    admin: SocketAddr,
    what: &str,
    ready: impl Fn(&str) -> bool,
) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let metrics = get(admin, "/metrics").await.text();
        if ready(&metrics) {
            return metrics;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what} in\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `ready` until it holds, or fails after 10 s saying `what`.
pub async fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until the node called `name` (served by `gone`) has left `/status`, then until each
/// of `staying` has served 30 more requests, and checks that `gone` got at most 4 new ones
/// meanwhile (those already on their way when it left): a node that leaves the cluster gets
/// nothing new.
pub async fn assert_left_and_starved(
    admin: SocketAddr,
    name: &str,
    gone: &Backend,
    staying: &[&Backend],
) {
    wait_for_status(admin, &format!("{name} to leave"), |s| {
        node_status(s, name).is_null()
    })
    .await;
    let gone_hits = gone.hits();
    let before: Vec<u64> = staying.iter().map(|b| b.hits()).collect();
    wait_until("more traffic on the nodes that stay", || {
        staying.iter().zip(&before).all(|(b, &h)| b.hits() > h + 30)
    })
    .await;
    assert!(
        gone.hits() <= gone_hits + 4,
        "{name} got new requests after it left"
    );
}

/// The status entry of the node called `name` (`Null` when it is not listed).
pub fn node_status<'a>(status: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    status["nodes"]
        .as_array()
        .and_then(|nodes| nodes.iter().find(|n| n["name"] == name))
        .unwrap_or(&serde_json::Value::Null)
}

/// Clients sending `GET /slow?ms=2` one request after another on each of `clients` tasks until
/// stopped, counting answers that are not `200` (or not answers at all).
pub struct Traffic {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Traffic {
    pub fn start(addr: SocketAddr, clients: usize) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let ok = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let tasks = (0..clients)
            .map(|_| {
                let (stop, ok, failed) = (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&failed));
                tokio::spawn(async move {
                    let client = client();
                    while !stop.load(Ordering::Relaxed) {
                        let req = Request::get(format!("http://{addr}/slow?ms=2"))
                            .body(http_body_util::Full::new(Bytes::new()))
                            .unwrap();
                        let answered = match client.request(req).await {
                            Ok(resp) => {
                                let status = resp.status();
                                resp.into_body().collect().await.is_ok() && status == StatusCode::OK
                            }
                            Err(_) => false,
                        };
                        let counter = if answered { &ok } else { &failed };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Traffic {
            stop,
            ok,
            failed,
            tasks,
        }
    }

    pub async fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.unwrap();
        }
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}
