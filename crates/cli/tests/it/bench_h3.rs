//! `capstan bench --http3` against a small HTTP/3 server made here with quinn and h3 (on the
//! bench's loopback test certificates): the closed and open engines over QUIC, the result's
//! protocol and connection counts, a body cut short of its Content-Length counted as an error,
//! a server that refuses h3 (a clear error, no hang) and the
//! flag's checks; then `--http2` and `--http3` against the switch's TLS listener with
//! `quic = true`.

use crate::support;

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::Value;
use support::*;

fn tls_file(name: &str) -> std::path::PathBuf {
    repo_root().join("crates/bench/tests/tls").join(name)
}

/// A QUIC server on loopback with ALPN `alpn`; `h3` serves every request a 1000-byte body
/// (`/short` with `Content-Length: 2000`).
/// Returns its address and the count of requests it answered. The thread lives as long as
/// the test process.
fn quic_server(alpn: &[u8]) -> (SocketAddr, Arc<AtomicU64>) {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(tls_file("server.pem"))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(tls_file("server.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    tls.alpn_protocols = vec![alpn.to_vec()];
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls).unwrap();
    let config = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = socket.local_addr().unwrap();
    let served = Arc::new(AtomicU64::new(0));
    let count = served.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let runtime = quinn::default_runtime().unwrap();
            let endpoint = quinn::Endpoint::new(
                quinn::EndpointConfig::default(),
                Some(config),
                socket,
                runtime,
            )
            .unwrap();
            while let Some(incoming) = endpoint.accept().await {
                tokio::spawn(serve_connection(incoming, count.clone()));
            }
        });
    });
    (addr, served)
}

async fn serve_connection(incoming: quinn::Incoming, served: Arc<AtomicU64>) {
    let Ok(conn) = incoming.await else { return };
    let Ok(mut h3) = h3::server::Connection::<_, Bytes>::new(h3_quinn::Connection::new(conn)).await
    else {
        return;
    };
    while let Ok(Some(resolver)) = h3.accept().await {
        let served = served.clone();
        tokio::spawn(async move {
            let Ok((req, mut stream)) = resolver.resolve_request().await else {
                return;
            };
            while let Ok(Some(mut b)) = stream.recv_data().await {
                b.advance(b.remaining());
            }
            // /short declares more than it sends and ends its stream cleanly: a response cut
            // short that no transport error gives away.
            let declared = if req.uri().path() == "/short" {
                "2000"
            } else {
                "1000"
            };
            let resp = http::Response::builder()
                .status(200)
                .header("content-length", declared)
                .header("content-type", "text/plain")
                .body(())
                .unwrap();
            if stream.send_response(resp).await.is_ok()
                && stream
                    .send_data(Bytes::from(vec![b'x'; 1000]))
                    .await
                    .is_ok()
                && stream.finish().await.is_ok()
            {
                served.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

fn bench_json(args: &[&str], name: &str) -> Value {
    let json = std::env::temp_dir().join(format!(
        "capstan-bench-h3-{}-{name}.json",
        std::process::id()
    ));
    let mut all: Vec<&str> = args.to_vec();
    let path = json.display().to_string();
    all.extend(["--quiet", "--json", &path]);
    let out = run(&all);
    assert!(
        out.status.success(),
        "capstan {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

#[test]
fn http3_closed_and_open_loops_against_a_quinn_server() {
    let (addr, served) = quic_server(b"h3");
    let url = format!("https://localhost:{}/file", addr.port());
    let ca = tls_file("ca.pem").display().to_string();
    // Closed loop, verified by --cacert: 4 clients sharing connections 2 streams at a time.
    let r = bench_json(
        &[
            "bench",
            &url,
            "--http3",
            "--cacert",
            &ca,
            "--clients",
            "4",
            "-k",
            "--streams",
            "2",
            "--duration",
            "1s",
        ],
        "closed",
    );
    assert_eq!(r["protocol"], "h3", "{r}");
    assert_eq!(r["errors_total"], 0, "{r}");
    let completed = r["completed"].as_u64().unwrap();
    assert!(completed > 0, "{r}");
    assert_eq!(r["bytes"].as_u64().unwrap(), completed * 1000, "{r}");
    assert_eq!(r["connections_opened"], 2, "4 clients, 2 streams each: {r}");
    assert_eq!(r["status"]["2xx"].as_u64().unwrap(), completed, "{r}");
    // Open loop without keep-alive, --insecure: a QUIC handshake per request.
    let r = bench_json(
        &[
            "bench",
            &url,
            "--http3",
            "--insecure",
            "--rate",
            "40",
            "--duration",
            "1s",
        ],
        "open",
    );
    assert_eq!(r["protocol"], "h3", "{r}");
    assert_eq!(r["errors_total"], 0, "{r}");
    let completed = r["completed"].as_u64().unwrap();
    assert!(completed >= 30, "40/s for 1 s: {r}");
    assert_eq!(r["connections_opened"].as_u64().unwrap(), completed, "{r}");
    assert!(served.load(Ordering::Relaxed) >= completed);
}

#[test]
fn an_http3_body_shorter_than_its_content_length_is_an_error() {
    let (addr, served) = quic_server(b"h3");
    let url = format!("https://localhost:{}/short", addr.port());
    let r = bench_json(
        &[
            "bench",
            &url,
            "--http3",
            "--insecure",
            "--clients",
            "2",
            "-k",
            "--duration",
            "1s",
            // Every request fails by design: the errors are what is checked.
            "--max-error-rate",
            "1",
        ],
        "short",
    );
    let errors = r["errors_total"].as_u64().unwrap();
    assert!(errors > 0 && served.load(Ordering::Relaxed) > 0, "{r}");
    assert_eq!(r["errors"]["closed"], errors, "cut short = closed: {r}");
    assert_eq!(r["bytes"], 0, "no short body counted as goodput: {r}");
}

#[test]
fn a_server_without_h3_fails_the_run_with_the_handshake_error() {
    let (addr, served) = quic_server(b"h2");
    let url = format!("https://127.0.0.1:{}/", addr.port());
    let start = Instant::now();
    let out = run(&[
        "bench",
        &url,
        "--http3",
        "--insecure",
        "--rate",
        "10",
        "--duration",
        "1s",
        "--quiet",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("QUIC handshake failed"), "{err}");
    assert!(err.contains("h3"), "the error names the protocol: {err}");
    assert!(start.elapsed() < Duration::from_secs(20), "no hang");
    assert_eq!(served.load(Ordering::Relaxed), 0);
    // Nothing on UDP at all: the probe gives up after its wait and says so.
    let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
    let url = format!("https://127.0.0.1:{}/", silent.local_addr().unwrap().port());
    let out = run(&[
        "bench",
        &url,
        "--http3",
        "--insecure",
        "--rate",
        "10",
        "--quiet",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("no QUIC handshake within"), "{err}");
}

#[test]
fn http3_flags_are_checked() {
    for (args, want) in [
        (
            vec!["bench", "http://127.0.0.1:9/", "--http3", "--rate", "1"],
            "--http3 needs an https:// URL",
        ),
        (
            vec![
                "bench",
                "https://127.0.0.1:9/",
                "--streams",
                "4",
                "--rate",
                "1",
                "--insecure",
            ],
            "--streams applies to --http2 and --http3 only",
        ),
        (
            vec![
                "bench",
                "https://127.0.0.1:9/",
                "--http3",
                "--rate",
                "1",
                "--follow-redirects",
            ],
            "it does not go with --http3",
        ),
    ] {
        let out = run(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn http2_and_http3_against_the_switchs_tls_and_quic_listener() {
    let (_node, node) = origin(&[]);
    let tls = free_addr();
    let tls_dir = repo_root().join("examples/tls");
    let config = format!(
        "listen = [\"{plain}\"]\ndebug_headers = true\n[[listener]]\naddress = \"{tls}\"\nquic = true\n\
         [[listener.certificate]]\ncert = \"{d}/localhost.pem\"\nkey = \"{d}/localhost.key\"\n\
         [[node]]\nname = \"a\"\naddress = \"{node}\"\n",
        plain = free_addr(),
        d = tls_dir.display(),
    );
    let path = std::env::temp_dir().join(format!("capstan-bench-h2-{}.toml", tls.port()));
    std::fs::write(&path, config).unwrap();
    let _switch = spawn(&["serve", "--config", path.to_str().unwrap()], tls);
    let url = format!("https://localhost:{}/file5k.html", tls.port());
    let ca = tls_dir.join("ca.pem").display().to_string();
    let r = bench_json(
        &[
            "bench",
            &url,
            "--http2",
            "--cacert",
            &ca,
            "--clients",
            "4",
            "-k",
            "--streams",
            "2",
            "--duration",
            "1s",
        ],
        "h2",
    );
    assert_eq!(r["protocol"], "h2", "{r}");
    assert_eq!(r["errors_total"], 0, "{r}");
    assert!(r["completed"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["connections_opened"], 2, "4 clients, 2 streams each: {r}");
    assert_eq!(
        r["nodes"]["a"], r["completed"],
        "every response through the switch: {r}"
    );
    // The same address over UDP: the switch's QUIC listener, driven open loop over 2
    // connections of 4 streams.
    let r = bench_json(
        &[
            "bench",
            &url,
            "--http3",
            "--cacert",
            &ca,
            "--rate",
            "50",
            "-k",
            "--connections",
            "2",
            "--streams",
            "4",
            "--duration",
            "1s",
        ],
        "h3-switch",
    );
    assert_eq!(r["protocol"], "h3", "{r}");
    assert_eq!(r["errors_total"], 0, "{r}");
    assert!(r["completed"].as_u64().unwrap() >= 40, "50/s for 1 s: {r}");
    assert!(r["connections_opened"].as_u64().unwrap() <= 2, "{r}");
    assert_eq!(
        r["nodes"]["a"], r["completed"],
        "every response through the switch: {r}"
    );
    // A body four times quinn's stream receive window arrives whole: the switch's writer
    // waits for flow-control credit rather than ending the stream early (the bench would
    // count a short body as `closed`).
    let big = format!("https://localhost:{}/file5m.html", tls.port());
    let r = bench_json(
        &[
            "bench",
            &big,
            "--http3",
            "--cacert",
            &ca,
            "--clients",
            "1",
            "-k",
            "--duration",
            "1s",
        ],
        "h3-big",
    );
    assert_eq!(r["errors_total"], 0, "{r}");
    let completed = r["completed"].as_u64().unwrap();
    assert!(completed > 0, "{r}");
    assert_eq!(r["bytes"].as_u64().unwrap(), completed * 5_248_000, "{r}");
}
