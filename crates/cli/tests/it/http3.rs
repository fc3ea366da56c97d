//! HTTP/3 from clients as a user runs it: examples/tls.toml (its TLS listener has `quic = true`)
//! served by `capstan serve` to an HTTP/3 client (quinn + h3, trusting examples/tls/ca.pem):
//! GET and POST through to a node, a large response, many streams on one connection, SNI, a
//! node's 103 passed on, a cache hit, `Alt-Svc` on the HTTPS side, garbage datagrams counted,
//! Retry and the per-client limit, a reload and a shutdown while a stream is open (it
//! finishes), an idle connection closed, ngtcp2's client when installed; and the configuration
//! errors of `quic = true`. One switch serves the checks of the first test.

use crate::support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use support::*;

/// The test node: a small HTTP/1.1 server with keep-alive. `/slow` tells `arrived` and waits
/// for a word on `release` before it answers.
struct Node {
    addr: SocketAddr,
    cached_hits: Arc<AtomicU64>,
    arrived: mpsc::Receiver<()>,
    release: mpsc::Sender<()>,
}

const BIG: usize = 1_500_000;

fn node() -> Node {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let cached_hits = Arc::new(AtomicU64::new(0));
    let (arrived_tx, arrived) = mpsc::channel();
    let (release, release_rx) = mpsc::channel::<()>();
    let release_rx = Arc::new(Mutex::new(release_rx));
    let hits = Arc::clone(&cached_hits);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (hits, arrived, release) = (
                Arc::clone(&hits),
                arrived_tx.clone(),
                Arc::clone(&release_rx),
            );
            std::thread::spawn(move || serve_node(stream, &hits, &arrived, &release));
        }
    });
    Node {
        addr,
        cached_hits,
        arrived,
        release,
    }
}

fn serve_node(
    stream: TcpStream,
    hits: &AtomicU64,
    arrived: &mpsc::Sender<()>,
    release: &Mutex<mpsc::Receiver<()>>,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (method, path) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("").to_string(),
        );
        let (mut length, mut chunked, mut via) = (0usize, false, String::new());
        loop {
            let mut field = String::new();
            if reader.read_line(&mut field).unwrap_or(0) == 0 {
                return;
            }
            let field = field.trim_end().to_ascii_lowercase();
            if field.is_empty() {
                break;
            }
            if let Some(v) = field.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if let Some(v) = field.strip_prefix("via:") {
                via = v.trim().to_string();
            }
            if field.starts_with("transfer-encoding:") && field.contains("chunked") {
                chunked = true;
            }
        }
        let body = match chunked {
            true => read_chunked(&mut reader),
            false => {
                let mut body = vec![0; length];
                reader.read_exact(&mut body).unwrap();
                body
            }
        };
        let (cache, answer): (&str, Vec<u8>) = match (method.as_str(), path.as_str()) {
            ("POST", "/echo") => ("no-store", body),
            (_, "/big") => ("no-store", vec![b'b'; BIG]),
            (_, "/cached") => {
                hits.fetch_add(1, Ordering::SeqCst);
                ("max-age=600", b"cached once".to_vec())
            }
            (_, "/slow") => {
                let _ = arrived.send(());
                let _ = release.lock().unwrap().recv();
                ("no-store", b"slow but whole".to_vec())
            }
            _ => ("no-store", format!("{method} {path}").into_bytes()),
        };
        if path == "/early" {
            let hints = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";
            let _ = out.write_all(hints.as_bytes());
        }
        let head = format!(
            "HTTP/1.1 200 OK\r\nCache-Control: {cache}\r\nX-Request-Via: {via}\r\nContent-Length: {}\r\n\r\n",
            answer.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(&answer).is_err() {
            return;
        }
    }
}

fn read_chunked(reader: &mut impl BufRead) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        reader.read_line(&mut size).unwrap();
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).unwrap();
        if size == 0 {
            return body;
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

/// examples/tls.toml with free ports, `node` for both nodes, certificate paths made absolute,
/// a cache, a short client idle timeout and a second QUIC listener at `strict`; returns it and
/// the (TLS and QUIC, admin) addresses.
fn example_config(node: SocketAddr, strict: SocketAddr) -> (PathBuf, SocketAddr, SocketAddr) {
    let example = repo_root().join("examples/tls.toml");
    let mut text = std::fs::read_to_string(example).unwrap();
    assert!(
        text.contains("quic = true"),
        "examples/tls.toml serves HTTP/3"
    );
    let (tls, admin) = (free_addr(), free_addr());
    for (from, to) in [
        ("127.0.0.1:8080", free_addr().to_string()),
        ("127.0.0.1:8443", tls.to_string()),
        ("127.0.0.1:8081", free_addr().to_string()),
        ("127.0.0.1:9900", admin.to_string()),
        ("127.0.0.1:9001", node.to_string()),
        ("127.0.0.1:9002", node.to_string()),
        (
            "\"tls/",
            format!("\"{}/", repo_root().join("examples/tls").display()),
        ),
    ] {
        assert!(text.contains(from), "examples/tls.toml has {from}");
        text = text.replace(from, &to);
    }
    text.push_str("\n[timeouts]\nclient_idle = \"3s\"\n\n[cache]\nmemory = \"16MiB\"\n");
    // A second QUIC listener: a Retry for every new client, one connection per client address.
    let pki = repo_root().join("examples/tls");
    text.push_str(&format!(
        "\n[[listener]]\naddress = \"{strict}\"\nquic = true\nquic_retry_above = 0\n\
         max_connections_per_client = 1\nalt_svc_max_age = \"off\"\n\
         [[listener.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n",
        pki.join("localhost.pem").display(),
        pki.join("localhost.key").display()
    ));
    let dir = std::env::temp_dir().join(format!("capstan-http3-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("tls-{}.toml", tls.port()));
    std::fs::write(&path, text).unwrap();
    (path, tls, admin)
}

/// A QUIC client endpoint trusting the example PKI; `keep_alive` keeps its connections from
/// going idle (the switch's `client_idle` is short here).
fn client(keep_alive: bool) -> quinn::Endpoint {
    let mut roots = rustls::RootCertStore::empty();
    let ca = std::fs::read(repo_root().join("examples/tls/ca.pem")).unwrap();
    use rustls::pki_types::pem::PemObject;
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut config = quinn::ClientConfig::new(Arc::new(quic));
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(Duration::from_secs(30).try_into().unwrap()));
    if keep_alive {
        transport.keep_alive_interval(Some(Duration::from_millis(200)));
    }
    config.transport_config(Arc::new(transport));
    let mut endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).unwrap();
    endpoint.set_default_client_config(config);
    endpoint
}

type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// An HTTP/3 connection to `addr` for the name `sni`; its driver runs in the background.
async fn connect(
    endpoint: &quinn::Endpoint,
    addr: SocketAddr,
    sni: &str,
) -> (quinn::Connection, SendRequest) {
    let conn = endpoint.connect(addr, sni).unwrap().await.unwrap();
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .unwrap();
    tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
    (conn, send)
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: Vec<u8>,
}

/// One request with an optional body, read to the end.
async fn request(send: &mut SendRequest, method: &str, url: &str, body: &[u8]) -> Answer {
    let length = (!body.is_empty()).then_some(body.len());
    request_declaring(send, method, url, body, length).await
}

/// [`request`] with the `content-length` given (`None`: none), whatever the body's length.
async fn request_declaring(
    send: &mut SendRequest,
    method: &str,
    url: &str,
    body: &[u8],
    length: Option<usize>,
) -> Answer {
    let mut req = http::Request::builder().method(method).uri(url);
    if let Some(length) = length {
        req = req.header("content-length", length);
    }
    let mut stream = send.send_request(req.body(()).unwrap()).await.unwrap();
    if !body.is_empty() {
        stream
            .send_data(Bytes::copy_from_slice(body))
            .await
            .unwrap();
    }
    stream.finish().await.unwrap();
    let resp = stream.recv_response().await.unwrap();
    let mut got = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await.unwrap() {
        while chunk.has_remaining() {
            let piece = chunk.chunk();
            got.extend_from_slice(piece);
            let n = piece.len();
            chunk.advance(n);
        }
    }
    Answer {
        status: resp.status().as_u16(),
        headers: resp.headers().clone(),
        body: got,
    }
}

/// A counter of the QUIC listener at `listener` in `/metrics`.
fn quic_metric(admin: SocketAddr, listener: SocketAddr, name: &str) -> u64 {
    let metrics = get(admin, "/metrics").text();
    let label = format!("listener=\"{listener}/udp\"");
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&label))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("{name} in /metrics:\n{metrics}"))
}

/// The QUIC listener's open connections, as `/status` shows them.
fn quic_open(admin: SocketAddr, tls: SocketAddr) -> u64 {
    let status: serde_json::Value = serde_json::from_slice(&get(admin, "/status").body).unwrap();
    let name = format!("{tls}/udp");
    let listener = (status["listeners"].as_array().unwrap().iter())
        .find(|l| l["address"] == name.as_str())
        .unwrap_or_else(|| panic!("{name} in /status: {status}"));
    assert_eq!(listener["quic"]["protocol"], "h3");
    listener["open_connections"].as_u64().unwrap()
}

/// Waits until `check` holds, polling every `step` (the runtime keeps driving the QUIC
/// connections meanwhile), at most `within`.
async fn until(what: &str, within: Duration, step: Duration, mut check: impl FnMut() -> bool) {
    let started = Instant::now();
    while !check() {
        assert!(started.elapsed() < within, "timed out waiting: {what}");
        tokio::time::sleep(step).await;
    }
}

/// The switch under test and what talks to it.
struct Served {
    node: Node,
    tls: SocketAddr,
    strict: SocketAddr,
    admin: SocketAddr,
    endpoint: quinn::Endpoint,
}

impl Served {
    fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.tls.port())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tls_example_serves_http3() {
    let node = node();
    let strict = free_addr();
    let (path, tls, admin) = example_config(node.addr, strict);
    let mut switch = spawn(&["serve", "--config", path.to_str().unwrap()], tls);
    let endpoint = client(true);
    let t = Served {
        node,
        tls,
        strict,
        admin,
        endpoint,
    };
    let (conn, mut send) = connect(&t.endpoint, tls, "localhost").await;
    requests_and_bodies(&t, &mut send).await;
    cache_sni_and_alt_svc(&t, &mut send).await;
    early_hints(&t, &mut send).await;
    // A third-party client: ngtcp2's example client (Debian's ngtcp2-client), when installed.
    gtlsclient(tls);
    defences(&t, &mut send).await;
    reload_with_a_stream_open(&t, &send).await;
    // An idle connection is closed by the switch after client_idle (3 s here: long enough that
    // the keep-alive pings of the first connection keep it open on a busy machine).
    conn.close(0u32.into(), b"done");
    drop(send);
    idle_connection_closed(&t).await;
    shutdown_with_a_stream_open(&t, &mut switch).await;
}

/// GET, POST with and without `content-length` (and a false one), a large response, many
/// streams at once on one connection.
async fn requests_and_bodies(t: &Served, send: &mut SendRequest) {
    let got = request(send, "GET", &t.url("/hello"), b"").await;
    assert_eq!((got.status, got.body.as_slice()), (200, &b"GET /hello"[..]));
    let posted: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let got = request(send, "POST", &t.url("/echo"), &posted).await;
    assert_eq!(got.status, 200);
    assert!(got.body == posted, "the POST body came back whole");
    // Past the cache (a POST goes straight to a node), the node is told the client's version.
    let via = got.headers.get("x-request-via").unwrap().to_str().unwrap();
    assert!(via.contains("3 capstan"), "{via}");
    // Without content-length the body goes up chunked; with a false one it is refused.
    let got = request_declaring(send, "POST", &t.url("/echo"), b"streamed", None).await;
    assert_eq!((got.status, got.body.as_slice()), (200, &b"streamed"[..]));
    let got = request_declaring(send, "POST", &t.url("/echo"), b"short", Some(10)).await;
    assert!(got.status >= 400, "{}", got.status);
    let got = request(send, "GET", &t.url("/big"), b"").await;
    assert_eq!((got.status, got.body.len()), (200, BIG));

    let mut streams = tokio::task::JoinSet::new();
    for i in 0..40 {
        let (mut send, url) = (send.clone(), t.url(&format!("/many/{i}")));
        streams.spawn(async move { (i, request(&mut send, "GET", &url, b"").await) });
    }
    while let Some(done) = streams.join_next().await {
        let (i, got) = done.unwrap();
        assert_eq!(got.body, format!("GET /many/{i}").into_bytes());
    }
}

/// A node's `103 Early Hints` reaches the HTTP/3 client ahead of the final response.
async fn early_hints(t: &Served, send: &mut SendRequest) {
    let req = http::Request::get(t.url("/early")).body(()).unwrap();
    let mut stream = send.send_request(req).await.unwrap();
    stream.finish().await.unwrap();
    let first = stream.recv_response().await.unwrap();
    assert_eq!(first.status(), 103);
    let link = first.headers().get("link").unwrap();
    assert_eq!(link, "</style.css>; rel=preload");
    let last = stream.recv_response().await.unwrap();
    assert_eq!(last.status(), 200);
    let mut body = Vec::new();
    while let Some(mut chunk) = stream.recv_data().await.unwrap() {
        body.extend_from_slice(&chunk.copy_to_bytes(chunk.remaining()));
    }
    assert_eq!(body, b"GET /early");
}

/// The cache answers a second GET itself; SNI picks the certificate; the HTTPS side of the
/// same address advertises HTTP/3.
async fn cache_sni_and_alt_svc(t: &Served, send: &mut SendRequest) {
    let first = request(send, "GET", &t.url("/cached"), b"").await;
    let second = request(send, "GET", &t.url("/cached"), b"").await;
    let status = second.headers.get("cache-status").unwrap();
    let status = status.to_str().unwrap();
    assert!(status.starts_with("capstan; hit"), "{status}");
    let fetched = t.node.cached_hits.load(Ordering::SeqCst);
    assert_eq!((first.body, fetched), (second.body, 1));

    // The client checks the certificate against the name it asked for.
    let (_www, mut www) = connect(&t.endpoint, t.tls, "www.example.test").await;
    assert_eq!(
        request(&mut www, "GET", &t.url("/www"), b"").await.status,
        200
    );

    let ca = repo_root().join("examples/tls/ca.pem");
    let out = std::process::Command::new("curl")
        .args(["-sS", "-D", "-", "-o", "/dev/null", "--max-time", "20"])
        .arg("--cacert")
        .arg(&ca)
        .arg(t.url("/alt"))
        .output();
    match out {
        Ok(out) => {
            let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
            let want = format!("alt-svc: h3=\":{}\"; ma=86400", t.tls.port());
            assert!(head.contains(&want), "{head}");
        }
        Err(e) => eprintln!("note: curl not runnable ({e}): Alt-Svc not checked"),
    }
}

/// Garbage datagrams counted (the listener goes on serving); a Retry for every client on the
/// listener with quic_retry_above = 0, whose one connection per address refuses a second.
async fn defences(t: &Served, send: &mut SendRequest) {
    let garbage = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    for datagram in [&[0u8; 40][..], b"\x00not quic at all", &[0x40, 1, 2]] {
        garbage.send_to(datagram, t.tls).unwrap();
    }
    until(
        "garbage counted",
        Duration::from_secs(10),
        Duration::from_millis(50),
        || quic_metric(t.admin, t.tls, "capstan_quic_garbage_datagrams_total") >= 3,
    )
    .await;
    let got = request(send, "GET", &t.url("/after-garbage"), b"").await;
    assert_eq!(got.status, 200);
    assert!(quic_metric(t.admin, t.tls, "capstan_quic_requests_total") >= 49);

    // quinn's client answers the Retry by itself.
    let (_first, mut first) = connect(&t.endpoint, t.strict, "localhost").await;
    let strict_url = format!("https://localhost:{}/strict", t.strict.port());
    assert_eq!(
        request(&mut first, "GET", &strict_url, b"").await.status,
        200
    );
    assert!(quic_metric(t.admin, t.strict, "capstan_quic_retries_total") >= 1);
    let second = t.endpoint.connect(t.strict, "localhost").unwrap().await;
    assert!(
        matches!(second, Err(quinn::ConnectionError::ConnectionClosed(_))),
        "{second:?}"
    );
    assert_eq!(
        quic_metric(t.admin, t.strict, "capstan_quic_refused_total"),
        1
    );
    assert_eq!(quic_metric(t.admin, t.tls, "capstan_quic_retries_total"), 0);
}

/// `/slow` sent on `send`, once the node has it.
async fn slow_request(t: &Served, send: &SendRequest) -> tokio::task::JoinHandle<Answer> {
    let (mut send, url) = (send.clone(), t.url("/slow"));
    let slow = tokio::spawn(async move { request(&mut send, "GET", &url, b"").await });
    t.node
        .arrived
        .recv_timeout(Duration::from_secs(10))
        .unwrap();
    slow
}

/// A reload (POST /reload) while a stream is open: the stream finishes.
async fn reload_with_a_stream_open(t: &Served, send: &SendRequest) {
    let slow = slow_request(t, send).await;
    let admin = t.admin;
    let reloaded = tokio::task::spawn_blocking(move || http(admin, "POST", "/reload"))
        .await
        .unwrap();
    assert_eq!(reloaded.status, 200, "{}", reloaded.text());
    t.node.release.send(()).unwrap();
    let got = slow.await.unwrap();
    assert_eq!(
        (got.status, got.body.as_slice()),
        (200, &b"slow but whole"[..])
    );
}

/// A connection without keep-alives is closed by the switch after `client_idle`.
async fn idle_connection_closed(t: &Served) {
    let quiet = client(false);
    let (idle, mut idle_send) = connect(&quiet, t.tls, "localhost").await;
    assert_eq!(
        request(&mut idle_send, "GET", &t.url("/once"), b"")
            .await
            .status,
        200
    );
    until(
        "idle connection closed",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || quic_open(t.admin, t.tls) == 0,
    )
    .await;
    drop(idle);
}

/// SIGTERM while a stream is open: GOAWAY, and the stream finishes before the switch exits.
async fn shutdown_with_a_stream_open(t: &Served, switch: &mut Proc) {
    let (_conn, send) = connect(&t.endpoint, t.tls, "localhost").await;
    let slow = slow_request(t, &send).await;
    switch.signal("TERM");
    // The switch stops accepting on its TCP side at once; the QUIC stream is still open.
    until(
        "shutdown began",
        Duration::from_secs(10),
        Duration::from_millis(20),
        || !accepts(t.tls),
    )
    .await;
    t.node.release.send(()).unwrap();
    let got = slow.await.unwrap();
    assert_eq!(
        (got.status, got.body.as_slice()),
        (200, &b"slow but whole"[..])
    );
    until(
        "the switch exited",
        Duration::from_secs(20),
        Duration::from_millis(20),
        || switch.0.try_wait().unwrap().is_some(),
    )
    .await;
    let status = switch.0.try_wait().unwrap();
    assert!(
        status.is_some_and(|s| s.success()),
        "the switch exited cleanly: {status:?}"
    );
}

/// GET with `gtlsclient` (ngtcp2 and GnuTLS; it does not check the certificate), or a note.
fn gtlsclient(tls: SocketAddr) {
    let dir = std::env::temp_dir().join(format!("capstan-http3-gtls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("https://localhost:{}/gtls-check", tls.port());
    let port = tls.port().to_string();
    let args = ["--exit-on-all-streams-close", "-q", "--timeout=10s"];
    let out = std::process::Command::new("gtlsclient")
        .args(args)
        .arg(format!("--download={}", dir.display()))
        .args(["localhost", &port, &url])
        .output();
    let Ok(out) = out else {
        eprintln!("note: gtlsclient (Debian's ngtcp2-client) is not installed; its check skipped");
        return;
    };
    let got = std::fs::read_to_string(dir.join("gtls-check"));
    assert!(
        got.as_deref().ok() == Some("GET /gtls-check"),
        "gtlsclient: {got:?} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn quic_needs_tls_13_and_certificates() {
    let dir = std::env::temp_dir().join(format!("capstan-http3-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pki = repo_root().join("examples/tls");
    let cert = format!(
        "[[listener.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n",
        pki.join("localhost.pem").display(),
        pki.join("localhost.key").display()
    );
    let listen = free_addr();
    for (listener, want) in [
        ("quic = true\n".to_string(), "quic = true needs TLS"),
        (
            format!("quic = true\ntls_versions = [\"1.2\"]\n{cert}"),
            "quic = true needs TLS 1.3",
        ),
        (
            format!("quic_max_streams = 10\n{cert}"),
            "quic_max_streams needs quic = true",
        ),
        (
            format!("quic = true\nalt_svc_max_age = \"soon\"\n{cert}"),
            "alt_svc_max_age: want seconds",
        ),
        (
            format!("quic = true\nquic_congestion = \"vegas\"\n{cert}"),
            "quic_congestion: want \"system\"",
        ),
    ] {
        let path = dir.join("bad.toml");
        let text = format!(
            "[[listener]]\naddress = \"{listen}\"\n{listener}[[node]]\naddress = \"127.0.0.1:9\"\n"
        );
        std::fs::write(&path, text).unwrap();
        let out = run(&["check", path.to_str().unwrap()]);
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(want), "{want}: {stderr}");
    }
    let path = dir.join("good.toml");
    let text = format!(
        "[[listener]]\naddress = \"{listen}\"\nquic = true\nalt_svc_max_age = \"off\"\nquic_0rtt = true\nquic_congestion = \"bbr\"\n{cert}[[node]]\naddress = \"127.0.0.1:9\"\n"
    );
    std::fs::write(&path, text).unwrap();
    let out = run(&["check", path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("HTTP/3 on udp://{listen}"))
            && stdout.contains("no Alt-Svc, 0-RTT on, congestion control bbr"),
        "{stdout}"
    );
}
