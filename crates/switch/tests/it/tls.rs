//! TLS termination and HTTP/2 from clients, on loopback: certificates by SNI, ALPN, session
//! resumption, HTTP/2 streams dispatched one by one, certificate reload under a running
//! download, malformed HTTP/2 requests refused before they reach a node, and a client over
//! its address's connection limit closed before any handshake, and handshakes (completed by
//! version, ALPN and resumption; failed by reason) counted in `/metrics` and `/status`.
//! The certificates are the committed test PKI in `examples/tls/` (see its `gen.sh`).

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::client::TlsStream;

fn pki(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/tls")
        .join(file)
}

fn cert_der(file: &str) -> CertificateDer<'static> {
    CertificateDer::from_pem_file(pki(file)).expect("test certificate")
}

/// A client trusting the test CA, offering `alpn`, limited to `versions`.
fn client_config(
    alpn: &[&[u8]],
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert_der("ca.pem")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

fn h2_and_h1() -> Arc<rustls::ClientConfig> {
    client_config(&[b"h2", b"http/1.1"], rustls::DEFAULT_VERSIONS)
}

fn h1() -> Arc<rustls::ClientConfig> {
    client_config(&[b"http/1.1"], rustls::DEFAULT_VERSIONS)
}

async fn connect(
    addr: SocketAddr,
    name: &str,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from(name.to_string()).unwrap();
    tokio_rustls::TlsConnector::from(config)
        .connect(name, tcp)
        .await
}

/// The certificate the switch presented on a connection.
fn served(tls: &TlsStream<tokio::net::TcpStream>) -> CertificateDer<'static> {
    tls.get_ref().1.peer_certificates().unwrap()[0]
        .clone()
        .into_owned()
}

/// TOML for a TLS listener on port 0 with these certificates (paths into the test PKI, or
/// absolute), then `extra`, for `nodes`.
fn tls_config(nodes: &[&Backend], certs: &[(&str, &str)], extra: &str) -> String {
    let mut listener = String::from("[[listener]]\naddress = \"127.0.0.1:0\"\n");
    for (cert, key) in certs {
        let path = |f: &str| match Path::new(f).is_absolute() {
            true => f.to_string(),
            false => pki(f).display().to_string(),
        };
        listener.push_str(&format!(
            "[[listener.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n",
            path(cert),
            path(key)
        ));
    }
    listener.push_str(extra);
    config_for(nodes, &listener)
}

const THREE: [(&str, &str); 3] = [
    ("localhost.pem", "localhost.key"),
    ("www.example.test.pem", "www.example.test.key"),
    ("api.example.test.pem", "api.example.test.key"),
];

/// One HTTP/1.1 request on a TLS stream (`Connection: close`), answer read to the end.
async fn h1_over(mut tls: TlsStream<tokio::net::TcpStream>, path: &str) -> String {
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tls.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn sni_picks_the_certificate_and_alpn_offers_h2_and_http11() {
    let a = Backend::start("a").await;
    let sw = start_switch(&tls_config(&[&a], &THREE, "")).await;
    let addr = sw.listen_addrs[1];

    for (name, file) in [
        ("localhost", "localhost.pem"),
        ("www.example.test", "www.example.test.pem"),
        ("example.test", "www.example.test.pem"),
        ("eu.api.example.test", "api.example.test.pem"),
        // No SNI (an address): the default, the first certificate.
        ("127.0.0.1", "localhost.pem"),
    ] {
        let tls = connect(addr, name, h2_and_h1()).await.unwrap();
        assert_eq!(served(&tls), cert_der(file), "certificate for {name}");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "{name}");
    }
    // A name no certificate has gets the default, which the client rightly refuses.
    let unknown = connect(addr, "other.test", h2_and_h1()).await;
    assert!(
        unknown.is_err(),
        "the default certificate is not valid for other.test"
    );

    let h1_only = client_config(&[b"http/1.1"], rustls::DEFAULT_VERSIONS);
    let tls = connect(addr, "www.example.test", h1_only).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let answer = h1_over(tls, "/headers").await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("x-forwarded-proto: https"), "{answer}");
    assert!(answer.contains("GET /headers HTTP/1.1"), "{answer}");

    // No ALPN at all: HTTP/1.1.
    let tls = connect(
        addr,
        "localhost",
        client_config(&[], rustls::DEFAULT_VERSIONS),
    )
    .await
    .unwrap();
    assert!(h1_over(tls, "/").await.ends_with("\r\n\r\na"));

    // The plain listener beside it is still plain HTTP/1.1.
    let plain = get(sw.listen_addrs[0], "/headers").await;
    assert!(
        plain.text().contains("x-forwarded-proto: http\n"),
        "{}",
        plain.text()
    );
}

#[tokio::test]
async fn tls_12_and_13_sessions_resume() {
    let a = Backend::start("a").await;
    let sw = start_switch(&tls_config(&[&a], &THREE, "")).await;
    let addr = sw.listen_addrs[1];
    for version in [&rustls::version::TLS12, &rustls::version::TLS13] {
        let config = client_config(&[b"http/1.1"], &[version]);
        let first = connect(addr, "localhost", Arc::clone(&config))
            .await
            .unwrap();
        assert_eq!(first.get_ref().1.protocol_version(), Some(version.version));
        assert_eq!(
            first.get_ref().1.handshake_kind(),
            Some(rustls::HandshakeKind::Full)
        );
        // TLS 1.3 tickets come after the handshake: read the answer to receive them.
        assert!(h1_over(first, "/").await.starts_with("HTTP/1.1 200"));
        let second = connect(addr, "localhost", config).await.unwrap();
        assert_eq!(
            second.get_ref().1.handshake_kind(),
            Some(rustls::HandshakeKind::Resumed),
            "{:?} resumes",
            version.version
        );
        assert!(h1_over(second, "/").await.starts_with("HTTP/1.1 200"));
    }
}

type H2Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

async fn h2_client(addr: SocketAddr) -> H2Sender {
    let tls = connect(addr, "localhost", h2_and_h1()).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    tokio::spawn(conn);
    sender
}

async fn h2_send(sender: &mut H2Sender, req: Request<Full<Bytes>>) -> Answer {
    let resp = tokio::time::timeout(Duration::from_secs(20), sender.send_request(req))
        .await
        .expect("answer within 20 s")
        .expect("request succeeds");
    let (parts, body) = resp.into_parts();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

#[tokio::test]
async fn h2_streams_on_one_connection_are_dispatched_each_by_the_policy() {
    let nodes = cluster(2).await;
    let sw = start_switch(&tls_config(&refs(&nodes), &THREE, "")).await;
    let sender = h2_client(sw.listen_addrs[1]).await;

    // Eight streams at once, each held at its node until both nodes hold some: the policy
    // (round robin) placed them one by one, and they were in flight together.
    let mut streams = Vec::new();
    for _ in 0..8 {
        let mut sender = sender.clone();
        let req = Request::get("https://localhost/hold")
            .body(Full::new(Bytes::new()))
            .unwrap();
        streams.push(tokio::spawn(async move { h2_send(&mut sender, req).await }));
    }
    wait_until("eight streams in flight on two nodes", || {
        nodes[0].held() + nodes[1].held() == 8 && nodes[0].held() > 0 && nodes[1].held() > 0
    })
    .await;
    nodes[0].release();
    nodes[1].release();
    let mut seen = std::collections::HashMap::new();
    for stream in streams {
        let answer = stream.await.unwrap();
        assert_eq!(answer.status, StatusCode::OK);
        *seen.entry(answer.node()).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 2, "both nodes answered: {seen:?}");

    // Headers as the node sees them: HTTP/1.1, Host from :authority, https, Via 2.
    let mut sender = sender.clone();
    let req = Request::get("https://localhost:8443/headers?x=1")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let answer = h2_send(&mut sender, req).await;
    assert_eq!(answer.status, StatusCode::OK);
    let text = answer.text();
    assert!(text.starts_with("GET /headers?x=1 HTTP/1.1\n"), "{text}");
    assert!(text.contains("host: localhost:8443\n"), "{text}");
    assert!(text.contains("x-forwarded-proto: https\n"), "{text}");
    assert!(text.contains("via: 2 capstan\n"), "{text}");
    // The node's hop-by-hop fields do not reach the HTTP/2 client.
    assert!(answer.headers.get("x-drop-me").is_none());
    assert!(answer.headers.get("connection").is_none());

    // A request body crosses the downgrade whole.
    let req = Request::post("https://localhost/upload")
        .body(Full::new(Bytes::from(vec![b'u'; 300_000])))
        .unwrap();
    let answer = h2_send(&mut sender, req).await;
    assert_eq!(answer.text(), "300000");

    // :authority and Host naming different hosts: 400, not forwarded.
    let before = nodes[0].hits() + nodes[1].hits();
    let req = Request::get("https://localhost/")
        .header("host", "elsewhere.test")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let answer = h2_send(&mut sender, req).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text());
    assert_eq!(nodes[0].hits() + nodes[1].hits(), before);
}

#[tokio::test]
async fn h2_stream_limit_is_announced() {
    let a = Backend::start("a").await;
    let sw = start_switch(&tls_config(
        &[&a],
        &THREE,
        "[http2]\nmax_concurrent_streams = 3\n",
    ))
    .await;
    let (settings, _) = raw_h2c_settings(sw.listen_addrs[1], true).await;
    assert_eq!(
        settings.get(&0x3),
        Some(&3),
        "MAX_CONCURRENT_STREAMS: {settings:?}"
    );
    assert_eq!(
        settings.get(&0x6),
        Some(&32768),
        "MAX_HEADER_LIST_SIZE: {settings:?}"
    );
}

/// The SETTINGS the switch sends first on an HTTP/2 connection (over TLS when `tls`), and
/// the connection.
async fn raw_h2c_settings(
    addr: SocketAddr,
    tls: bool,
) -> (std::collections::HashMap<u16, u32>, Box<dyn RawIo>) {
    let mut io: Box<dyn RawIo> = match tls {
        true => Box::new(
            connect(
                addr,
                "localhost",
                client_config(&[b"h2"], rustls::DEFAULT_VERSIONS),
            )
            .await
            .unwrap(),
        ),
        false => Box::new(tokio::net::TcpStream::connect(addr).await.unwrap()),
    };
    io.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    io.write_all(&frame(0x4, 0, 0, &[])).await.unwrap();
    let (kind, _, _, payload) = read_frame(&mut io).await.expect("a SETTINGS frame");
    assert_eq!(kind, 0x4);
    let settings = payload
        .chunks(6)
        .map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
        .collect();
    (settings, io)
}

trait RawIo: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> RawIo for T {}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The next frame: type, flags, stream, payload; `None` when the connection ended or 10 s
/// passed.
async fn read_frame(io: &mut Box<dyn RawIo>) -> Option<(u8, u8, u32, Vec<u8>)> {
    let read = async {
        let mut head = [0u8; 9];
        io.read_exact(&mut head).await.ok()?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        io.read_exact(&mut payload).await.ok()?;
        Some((head[3], head[4], stream, payload))
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .ok()?
}

/// An HPACK header block: GET, https, `path`, `:authority: localhost`, then `fields` as
/// literals without indexing (RFC 7541 §6.2.2), no Huffman coding.
fn header_block(path: &str, fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = vec![0x82, 0x87]; // :method GET, :scheme https
    let literal = |block: &mut Vec<u8>, value: &str| {
        assert!(value.len() < 127);
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    };
    block.push(0x04); // :path, name from the static table
    literal(&mut block, path);
    block.push(0x01); // :authority
    literal(&mut block, "localhost");
    for (name, value) in fields {
        block.push(0x00);
        literal(&mut block, name);
        literal(&mut block, value);
    }
    block
}

/// What the switch answered to a request on one stream.
#[derive(Debug, PartialEq)]
enum H2Answer {
    /// The first byte of the response header block: 0x88 is `:status 200`, 0x8c `:status 400`.
    Head(u8),
    /// RST_STREAM with this error code (1: PROTOCOL_ERROR).
    Reset(u32),
    /// GOAWAY with this error code: the whole connection refused.
    GoAway(u32),
}

async fn answer_on(io: &mut Box<dyn RawIo>, stream: u32) -> H2Answer {
    let code = |p: &[u8]| u32::from_be_bytes(p[..4].try_into().unwrap());
    loop {
        let (kind, _, id, payload) = read_frame(io).await.expect("an answer");
        match (kind, id == stream) {
            (0x1, true) => return H2Answer::Head(payload[0]),
            (0x3, true) => return H2Answer::Reset(code(&payload)),
            (0x7, _) => return H2Answer::GoAway(code(&payload[4..])),
            (0x4, false) if payload.is_empty() => {}
            (0x4, false) => io.write_all(&frame(0x4, 0x1, 0, &[])).await.unwrap(),
            _ => {}
        }
    }
}

#[tokio::test]
async fn malformed_h2_requests_are_refused_and_never_forwarded() {
    let a = Backend::start("a").await;
    let text = config_for(
        &[&a],
        "[[listener]]\naddress = \"127.0.0.1:0\"\nh2c = true\n",
    );
    let sw = start_switch(&text).await;
    let h2c = sw.listen_addrs[1];
    let (_, mut io) = raw_h2c_settings(h2c, false).await;

    // Connection-specific fields: the stream is reset (flags END_STREAM | END_HEADERS).
    let mut stream = 1;
    for field in [
        ("connection", "keep-alive"),
        ("keep-alive", "timeout=5"),
        ("proxy-connection", "keep-alive"),
        ("transfer-encoding", "chunked"),
        ("te", "gzip"),
        ("upgrade", "websocket"),
    ] {
        let block = header_block("/", &[field]);
        io.write_all(&frame(0x1, 0x5, stream, &block))
            .await
            .unwrap();
        let answer = answer_on(&mut io, stream).await;
        assert!(
            answer == H2Answer::Reset(1) || answer == H2Answer::Head(0x8c),
            "{field:?}: want RST_STREAM PROTOCOL_ERROR or 400, got {answer:?}"
        );
        stream += 2;
    }
    assert_eq!(a.hits(), 0, "nothing malformed reached the node");

    // The connection goes on: a good request on it is answered.
    let block = header_block("/", &[("te", "trailers")]);
    io.write_all(&frame(0x1, 0x5, stream, &block))
        .await
        .unwrap();
    assert_eq!(answer_on(&mut io, stream).await, H2Answer::Head(0x88));
    assert_eq!(a.hits(), 1);

    // An upper-case name, or CR LF smuggled into a value: the h2 crate refuses the whole
    // connection (its HPACK decoder takes them for a connection error).
    for field in [
        ("Content-Type", "text/plain"),
        ("x-split", "a\r\nx-injected: 1"),
    ] {
        let (_, mut io) = raw_h2c_settings(h2c, false).await;
        let block = header_block("/", &[field]);
        io.write_all(&frame(0x1, 0x5, 1, &block)).await.unwrap();
        let answer = answer_on(&mut io, 1).await;
        assert!(
            matches!(answer, H2Answer::Reset(1) | H2Answer::GoAway(1)),
            "{field:?}: {answer:?}"
        );
    }
    assert_eq!(a.hits(), 1, "nothing malformed reached the node");

    // HTTP/1.1 on the same h2c listener is still HTTP/1.1.
    assert_eq!(get(h2c, "/").await.text(), "a");
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-tls-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn reloaded_certificates_serve_new_handshakes_while_a_download_runs_on() {
    let a = Backend::start("a").await;
    let dir = temp_dir("reload");
    let (cert, key) = (dir.join("site.pem"), dir.join("site.key"));
    std::fs::copy(pki("localhost.pem"), &cert).unwrap();
    std::fs::copy(pki("localhost.key"), &key).unwrap();
    let path = dir.join("switch.toml");
    let text = tls_config(
        &[&a],
        &[(cert.to_str().unwrap(), key.to_str().unwrap())],
        "",
    );
    std::fs::write(&path, &text).unwrap();
    let config = capstan_switch::Config::load(&path).unwrap();
    let sw = capstan_switch::start(config).await.unwrap();
    let (addr, admin) = (sw.listen_addrs[1], sw.admin_addr.unwrap());

    // A long download over the old certificate, started before the reload.
    const TOTAL: u64 = 32 << 20;
    let mut download = connect(addr, "localhost", h1()).await.unwrap();
    assert_eq!(served(&download), cert_der("localhost.pem"));
    let request =
        format!("GET /big?bytes={TOTAL} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    download.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    let mut received = download.read(&mut buf).await.unwrap() as u64;
    assert!(received > 0);

    // A key that does not match: refused, the old certificate keeps serving.
    std::fs::copy(pki("localhost-renewed.pem"), &cert).unwrap();
    let refused = send(admin, Request::post("/reload"), Bytes::new()).await;
    assert_eq!(
        refused.status,
        StatusCode::BAD_REQUEST,
        "{}",
        refused.text()
    );
    assert!(
        refused.text().contains("does not match the certificate"),
        "{}",
        refused.text()
    );
    let tls = connect(addr, "localhost", h1()).await.unwrap();
    assert_eq!(served(&tls), cert_der("localhost.pem"));

    std::fs::copy(pki("localhost-renewed.key"), &key).unwrap();
    let reloaded = send(admin, Request::post("/reload"), Bytes::new()).await;
    assert_eq!(reloaded.status, StatusCode::OK, "{}", reloaded.text());
    assert!(!reloaded.text().contains("restart"), "{}", reloaded.text());
    let tls = connect(addr, "localhost", h1()).await.unwrap();
    assert_eq!(
        served(&tls),
        cert_der("localhost-renewed.pem"),
        "new handshakes get the new one"
    );
    assert!(h1_over(tls, "/").await.starts_with("HTTP/1.1 200"));

    // The download started before the reload finishes, whole.
    loop {
        let n = download.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        received += n as u64;
    }
    assert!(received > TOTAL, "head and {TOTAL} bytes, got {received}");
    let head_len = received - TOTAL;
    assert!(head_len < 1024, "{received}");
}

#[test]
fn bad_certificate_files_are_located_one_line_errors() {
    let dir = temp_dir("bad");
    std::fs::write(dir.join("garbage.pem"), "not a certificate\n").unwrap();
    let garbage = dir.join("garbage.pem").display().to_string();
    let cases = [
        ("missing.pem", "localhost.key", "missing.pem: cannot read"),
        (garbage.as_str(), "localhost.key", "no CERTIFICATE"),
        (
            "localhost.pem",
            "www.example.test.key",
            "does not match the certificate",
        ),
        ("localhost.pem", "localhost.pem", "no PRIVATE KEY"),
    ];
    for (cert, key, want) in cases {
        let text = tls_config(&[], &[(cert, key)], "").replace(
            "debug_headers = true\n",
            "debug_headers = true\n[[node]]\naddress = \"127.0.0.1:1\"\n",
        );
        let err = capstan_switch::Config::parse(&text, Some("t.toml")).unwrap_err();
        let line = err.to_string();
        assert!(line.contains(want), "{line}");
        assert!(!line.contains('\n'), "one line: {line}");
        assert!(line.starts_with("t.toml:"), "{line}");
    }
    for (extra, want, line) in [
        ("alpn = [\"spdy\"]\n", "ALPN protocol `spdy`", 3),
        ("tls_versions = [\"1.1\"]\n", "TLS version `1.1`", 3),
        ("h2c = true\n", "h2c is for plain listeners", 3),
        ("[http2]\nmax_concurrent_streams = 0\n", "at least 1", 4),
    ] {
        let text = format!(
            "[[listener]]\naddress = \"127.0.0.1:0\"\n{extra}[[listener.certificate]]\ncert = \"{}\"\nkey = \"{}\"\n[[node]]\naddress = \"127.0.0.1:1\"\n",
            pki("localhost.pem").display(),
            pki("localhost.key").display()
        );
        let err = capstan_switch::Config::parse(&text, Some("t.toml")).unwrap_err();
        assert!(err.to_string().contains(want), "{err}");
        assert_eq!(err.line, line, "{err}");
    }
}

#[tokio::test]
async fn class_rules_can_match_tls_and_the_sni_name() {
    let a = Backend::start("a").await;
    let rules = "[[class]]\nname = \"static\"\n[[class]]\nname = \"secure\"\ncpu_ms = 20.0\n\
                 [[class]]\nname = \"shop\"\n\
                 [[rule]]\nclass = \"shop\"\nsni = \"*.EXAMPLE.test\"\n\
                 [[rule]]\nclass = \"secure\"\ntls = true\n";
    let sw = start_switch(&tls_config(&[&a], &THREE, rules)).await;
    let tls_addr = sw.listen_addrs[1];
    assert_eq!(class_over_tls(tls_addr, "www.example.test").await, "shop");
    assert_eq!(class_over_tls(tls_addr, "localhost").await, "secure");
    assert_eq!(get(sw.listen_addrs[0], "/").await.class(), "static");
}

/// The class the switch gave a request over TLS with this SNI name (its `X-Capstan-Class`).
async fn class_over_tls(addr: SocketAddr, name: &str) -> String {
    let tls = connect(addr, name, h1()).await.unwrap();
    let answer = h1_over(tls, "/").await;
    answer
        .lines()
        .find_map(|l| l.strip_prefix("x-capstan-class: "))
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_tls_client_over_its_address_limit_is_closed_before_any_handshake() {
    let a = Backend::start("a").await;
    let extra = "[limits]\nmax_connections_per_client = 1\n";
    let text = tls_config(&[&a], &THREE[..1], "");
    let sw = start_switch(&format!("{text}{extra}")).await;
    let (tls_addr, admin) = (sw.listen_addrs[1], sw.admin_addr.unwrap());
    let held = connect(tls_addr, "localhost", h1())
        .await
        .expect("first handshake");
    let refused = connect(tls_addr, "localhost", h1()).await;
    assert!(refused.is_err(), "no handshake for the second connection");
    let status = status_json(admin).await;
    assert_eq!(status["listeners"][1]["rejected_per_client"], 1, "{status}");
    // Closed before any handshake: not a failed one.
    let failures = &status["listeners"][1]["tls"]["failures"];
    assert_eq!(failures["io"], 0, "{status}");
    assert_eq!(failures["protocol"], 0, "{status}");
    drop(held);
    wait_for_status(admin, "the address released", |s| {
        s["listeners"][1]["client_addresses"] == 0
    })
    .await;
    let again = connect(tls_addr, "localhost", h1())
        .await
        .expect("handshake");
    assert!(h1_over(again, "/").await.starts_with("HTTP/1.1 200"));
}

/// Polls `/metrics` until it has every line of `want` (each a full sample, value included),
/// or fails after 10 s showing what it had.
async fn wait_for_samples(admin: SocketAddr, want: &[String]) -> String {
    wait_for_metrics(admin, &format!("{want:?}"), |metrics| {
        want.iter()
            .all(|line| metrics.lines().any(|have| have == line))
    })
    .await
}

#[tokio::test]
async fn tls_handshakes_and_failures_are_counted_per_listener() {
    let a = Backend::start("a").await;
    let sw = start_switch(&tls_config(&[&a], &THREE, "")).await;
    let (addr, admin) = (sw.listen_addrs[1], sw.admin_addr.unwrap());
    use rustls::version::{TLS12, TLS13};

    let h2_13 = connect(addr, "localhost", client_config(&[b"h2"], &[&TLS13]))
        .await
        .unwrap();
    assert_eq!(h2_13.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let h1_12 = connect(addr, "localhost", client_config(&[b"http/1.1"], &[&TLS12]))
        .await
        .unwrap();
    assert!(h1_over(h1_12, "/").await.starts_with("HTTP/1.1 200"));
    let no_alpn = connect(addr, "localhost", client_config(&[], &[&TLS13]))
        .await
        .unwrap();
    assert!(h1_over(no_alpn, "/").await.starts_with("HTTP/1.1 200"));
    // The same client configuration keeps the ticket (read after the handshake in TLS 1.3).
    let keeps_tickets = client_config(&[b"http/1.1"], &[&TLS13]);
    let first = connect(addr, "localhost", Arc::clone(&keeps_tickets))
        .await
        .unwrap();
    assert!(h1_over(first, "/").await.starts_with("HTTP/1.1 200"));
    let second = connect(addr, "localhost", keeps_tickets).await.unwrap();
    assert_eq!(
        second.get_ref().1.handshake_kind(),
        Some(rustls::HandshakeKind::Resumed)
    );
    assert!(h1_over(second, "/").await.starts_with("HTTP/1.1 200"));

    // Plain HTTP to the TLS port, and a client refusing the default certificate it got for
    // a name no certificate has.
    let answer = raw_exchange(addr, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").await;
    assert!(!answer.contains("HTTP/1.1 200"), "{answer}");
    assert!(connect(addr, "other.test", h1()).await.is_err());

    let sample = |labels: &str, n: u64| {
        format!("capstan_tls_handshakes_total{{listener=\"{addr}\",{labels}}} {n}")
    };
    let failures = |reason: &str, n: u64| {
        format!(
            "capstan_tls_handshake_failures_total{{listener=\"{addr}\",reason=\"{reason}\"}} {n}"
        )
    };
    let metrics = wait_for_samples(
        admin,
        &[
            sample(r#"version="1.3",alpn="h2",resumed="false""#, 1),
            sample(r#"version="1.2",alpn="http/1.1",resumed="false""#, 1),
            sample(r#"version="1.3",alpn="none",resumed="false""#, 1),
            sample(r#"version="1.3",alpn="http/1.1",resumed="false""#, 1),
            sample(r#"version="1.3",alpn="http/1.1",resumed="true""#, 1),
            sample(r#"version="1.2",alpn="h2",resumed="true""#, 0),
            failures("protocol", 1),
            failures("alert", 1),
            failures("timeout", 0),
            failures("no_certificate", 0),
        ],
    )
    .await;
    let count = format!("capstan_tls_handshake_duration_seconds_count{{listener=\"{addr}\"}}");
    assert!(
        metrics.lines().any(|l| l.starts_with(&count)),
        "duration histogram: {metrics}"
    );
    let plain = sw.listen_addrs[0];
    assert!(
        !metrics.contains(&format!("listener=\"{plain}\",version")),
        "a plain listener has no TLS counters"
    );
    drop(h2_13);

    let status = status_json(admin).await;
    let tls = &status["listeners"][1]["tls"];
    assert_eq!(tls["handshakes"], 5, "{status}");
    assert_eq!(tls["resumed"], 1, "{status}");
    assert_eq!(tls["versions"]["1.2"], 1, "{status}");
    assert_eq!(tls["alpn"]["h2"], 1, "{status}");
    assert_eq!(tls["alpn"]["none"], 1, "{status}");
    assert_eq!(tls["failures"]["protocol"], 1, "{status}");
    assert_eq!(tls["failures"]["alert"], 1, "{status}");
    assert!(status["listeners"][0].get("tls").is_none(), "{status}");
    let page = get(admin, "/").await.text();
    assert!(
        page.contains(&format!("TLS {addr}: 5 handshakes (1 resumed;")),
        "{page}"
    );
}

#[tokio::test]
async fn a_stalled_handshake_counts_as_a_timeout() {
    let a = Backend::start("a").await;
    let timeouts = "[timeouts]\nheader_read = \"300ms\"\n";
    let sw = start_switch(&tls_config(&[&a], &THREE[..1], timeouts)).await;
    let (addr, admin) = (sw.listen_addrs[1], sw.admin_addr.unwrap());
    // A handshake record's header announcing 80 bytes, and nothing more.
    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x00, 0x50])
        .await
        .unwrap();
    let timeout =
        format!("capstan_tls_handshake_failures_total{{listener=\"{addr}\",reason=\"timeout\"}} 1");
    wait_for_samples(admin, &[timeout]).await;
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(10), stalled.read_to_end(&mut rest));
    assert!(
        closed.await.is_ok(),
        "the switch closed the stalled connection"
    );
    let status = status_json(admin).await;
    assert_eq!(status["listeners"][1]["tls"]["handshakes"], 0, "{status}");
}
