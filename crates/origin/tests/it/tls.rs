//! The TLS listener (`tls_listen`): with real resources `/secure/…` is served over TLS only (its
//! cost is the real handshake and encryption), in the clear it is refused with 403; emulated
//! nodes keep the modelled SSL costs on either listener. Real sockets, the test PKI of
//! `examples/tls/`.

use crate::common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use capstan_origin::{OriginConfig, Resources};
use capstan_workload::{DocTree, TreeKind};
use common::*;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

fn pki(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/tls")
        .join(name)
}

fn with_tls(mut c: OriginConfig) -> OriginConfig {
    c.tls_listen = Some("127.0.0.1:0".parse().unwrap());
    c.tls_cert = Some(pki("localhost.pem"));
    c.tls_key = Some(pki("localhost.key"));
    c
}

/// One GET over a new TLS connection that trusts the test CA and asks for `localhost`.
async fn https_get(addr: SocketAddr, path: &str) -> (u16, Bytes) {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(pki("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .expect("TLS handshake with the node");
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get(path)
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_node_serves_secure_over_tls_only() {
    let dir = TempDir::new("tls-real");
    let mut c = with_tls(config());
    c.resources = Resources::Real;
    c.data_dir = Some(dir.0.clone());
    c.seed = 3;
    // One window from the start, so the report's classes count every request of the test.
    c.load_interval_ms = 60_000;
    let node = start(c).await;
    let tls = node.tls_addr().expect("a TLS listener");
    assert_ne!(tls, node.addr());
    let tree = DocTree::generate(TreeKind::Webstone, 3, None).unwrap();
    let want = tree.content(tree.get("/file5k.html").unwrap());

    let (status, body) = https_get(tls, "/secure/file5k.html").await;
    assert_eq!(status, 200);
    assert_eq!(body.as_ref(), want.as_slice());
    let (status, body) = https_get(tls, "/secure/cgi-bin/cpu_light.cgi").await;
    assert_eq!(status, 200, "{body:?}");
    // Everything else is served over TLS too.
    assert_eq!(https_get(tls, "/file5k.html").await.0, 200);

    // In the clear: refused, saying why; plain objects are still served.
    let plain = get(node.addr(), "/secure/file5k.html").await;
    assert_eq!(plain.status, 403);
    let text = String::from_utf8_lossy(&plain.body);
    assert!(
        text.contains("needs TLS") && text.contains("--tls-listen"),
        "{text}"
    );
    assert_eq!(get(node.addr(), "/file5k.html").await.status, 200);

    let rep = load(node.addr()).await;
    assert!(rep["tls"]["handshakes"].as_u64().unwrap() >= 3, "{rep}");
    assert_eq!(rep["tls"]["failed"], 0, "{rep}");
    // The refused request is not a served secure one: two secure requests, both over TLS.
    assert_eq!(rep["classes"]["secure"]["served"], 2, "{rep}");
    // The report is still core's wire format, which readers parse with the field skipped.
    let raw = get(node.addr(), "/_capstan/load").await.body;
    assert!(capstan_core::report::LoadReport::parse(&raw).is_ok());
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulated_node_keeps_modelled_ssl_on_both_listeners() {
    let node = start(with_tls(config())).await;
    let tls = node.tls_addr().unwrap();
    assert_eq!(get(node.addr(), "/secure/file5k.html").await.status, 200);
    let (status, _) = https_get(tls, "/secure/file5k.html").await;
    assert_eq!(status, 200);
    // Plain HTTP on the TLS port is a failed handshake, counted, not a hang.
    let mut s = tokio::net::TcpStream::connect(tls).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let rep = load(node.addr()).await;
        if rep["tls"]["failed"] == 1 {
            assert_eq!(rep["tls"]["handshakes"], 1, "{rep}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{rep}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    node.shutdown().await;
}

#[tokio::test]
async fn bad_tls_settings_are_one_line_errors() {
    let mut c = with_tls(config());
    c.tls_key = None;
    let e = capstan_origin::start(c).await.err().unwrap().to_string();
    assert!(e.contains("tls_cert and tls_key"), "{e}");
    let mut c = config();
    c.tls_cert = Some(pki("localhost.pem"));
    let e = capstan_origin::start(c).await.err().unwrap().to_string();
    assert!(e.contains("need tls_listen"), "{e}");
    for (cert, key, needle) in [
        ("missing.pem", "localhost.key", "cannot read"),
        ("localhost.key", "localhost.key", "CERTIFICATE"),
        ("localhost.pem", "ca.pem", "private key"),
        ("localhost.pem", "www.example.test.key", "unusable"),
    ] {
        let mut c = with_tls(config());
        c.tls_cert = Some(pki(cert));
        c.tls_key = Some(pki(key));
        let e = capstan_origin::start(c).await.err().unwrap().to_string();
        assert!(e.contains(needle) && !e.contains('\n'), "{cert}/{key}: {e}");
    }
}
