//! TLS to nodes, on loopback: a node that is a real TLS server (tokio-rustls + hyper) with a
//! certificate from the committed test CA (`examples/tls/`, see its `gen.sh`) answers through
//! the switch, sees the configured SNI and ALPN `http/1.1`, gets the PROXY header before the
//! handshake and is health-checked over TLS; a reload with a new CA bundle takes effect at once
//! (new pools); a node whose certificate does not verify (another CA, another name) gets a 502
//! naming it, or the request is retried on another node; a bad `tls` table is a one-line
//! configuration error.

use crate::common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use capstan_switch::Config;
use common::*;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::AsyncReadExt;

fn pki(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/tls")
        .join(file)
}

/// What a TLS node saw on each connection and request.
#[derive(Default)]
struct Seen {
    /// The PROXY header line read before the handshake, per connection.
    proxy_lines: Vec<String>,
    /// SNI and ALPN of each completed handshake.
    handshakes: Vec<(Option<String>, Option<Vec<u8>>)>,
    /// Path and Host of each request.
    requests: Vec<(String, String)>,
}

/// A TLS node on loopback serving `cert` (a name in the test PKI); when `proxy_header`, every
/// connection starts with a PROXY v1 line, read before the handshake.
async fn tls_node(cert: &str, proxy_header: bool) -> (SocketAddr, Arc<Mutex<Seen>>) {
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
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let seen_by_node = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, seen) = (acceptor.clone(), Arc::clone(&seen_by_node));
            tokio::spawn(serve_tls(tcp, acceptor, seen, proxy_header));
        }
    });
    (addr, seen)
}

async fn serve_tls(
    mut tcp: tokio::net::TcpStream,
    acceptor: tokio_rustls::TlsAcceptor,
    seen: Arc<Mutex<Seen>>,
    proxy_header: bool,
) {
    if proxy_header {
        let mut line = Vec::new();
        while !line.ends_with(b"\r\n") && line.len() < 108 {
            match tcp.read_u8().await {
                Ok(byte) => line.push(byte),
                Err(_) => return,
            }
        }
        let line = String::from_utf8_lossy(&line).trim_end().to_string();
        seen.lock().unwrap().proxy_lines.push(line);
    }
    let Ok(tls) = acceptor.accept(tcp).await else {
        return;
    };
    {
        let conn = tls.get_ref().1;
        let handshake = (
            conn.server_name().map(str::to_string),
            conn.alpn_protocol().map(<[u8]>::to_vec),
        );
        seen.lock().unwrap().handshakes.push(handshake);
    }
    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let host = req
            .headers()
            .get("host")
            .and_then(|h| h.to_str().ok())
            .unwrap_or_default()
            .to_string();
        seen.lock()
            .unwrap()
            .requests
            .push((req.uri().path().to_string(), host));
        async move {
            Ok::<_, std::convert::Infallible>(Response::new(Full::new(Bytes::from("tls-node"))))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), service)
        .await;
}

/// A switch config with one TLS node called `secure` at `addr` and its `tls` table, then
/// `extra`.
fn config_with_tls_node(addr: SocketAddr, tls: &str, extra: &str) -> String {
    format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n{extra}\n\
         [[node]]\nname = \"secure\"\naddress = \"{addr}\"\ntls = {{ {tls} }}\n"
    )
}

#[tokio::test]
async fn a_tls_node_answers_sees_the_sni_and_is_checked_over_tls() {
    let (addr, seen) = tls_node("www.example.test", true).await;
    let tls = format!(
        "ca_file = \"{}\", sni = \"www.example.test\"",
        pki("ca.pem").display()
    );
    let extra = "[proxy_protocol]\nsend = \"v1\"\n\
                 [health]\ncheck_path = \"/_check\"\ncheck_interval = \"500ms\"\n\
                 check_timeout = \"500ms\"\n";
    let sw = start_switch(&config_with_tls_node(addr, &tls, extra)).await;
    let (listen, admin) = (sw.listen_addrs[0], sw.admin_addr.unwrap());

    let answer = get(listen, "/page").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    assert_eq!(answer.text(), "tls-node");

    // Health checks reach the node over TLS too.
    wait_for_status(admin, "a health check of the TLS node to pass", |s| {
        node_status(s, "secure")["check"]["passed"].as_u64() >= Some(1)
    })
    .await;

    let seen = seen.lock().unwrap();
    assert!(!seen.handshakes.is_empty());
    for (sni, alpn) in &seen.handshakes {
        assert_eq!(sni.as_deref(), Some("www.example.test"));
        assert_eq!(alpn.as_deref(), Some(&b"http/1.1"[..]));
    }
    // The PROXY header came on the TCP connection, before the handshake (a client's request
    // names the client, a check is the switch's own connection).
    assert!(
        seen.proxy_lines
            .iter()
            .any(|l| l.starts_with("PROXY TCP4 127.0.0.1 ")),
        "{:?}",
        seen.proxy_lines
    );
    assert!(seen.proxy_lines.iter().any(|l| l == "PROXY UNKNOWN"));
    // The request keeps the client's Host.
    let page = seen.requests.iter().find(|(path, _)| path == "/page");
    assert_eq!(page.map(|(_, host)| host.clone()), Some(listen.to_string()));
    assert!(seen.requests.iter().any(|(path, _)| path == "/_check"));
}

#[tokio::test]
async fn a_node_whose_certificate_does_not_verify_gets_a_502_naming_it() {
    let (addr, _seen) = tls_node("www.example.test", false).await;
    let cases = [
        // Signed by a CA the switch does not trust.
        (pki("other-ca.pem"), "www.example.test", "UnknownIssuer"),
        // The right CA, but the certificate is not for this name.
        (pki("ca.pem"), "api.example.test", "not valid for name"),
    ];
    for (ca, sni, why) in cases {
        let tls = format!("ca_file = \"{}\", sni = \"{sni}\"", ca.display());
        let sw = start_switch(&config_with_tls_node(addr, &tls, "")).await;
        let answer = get(sw.listen_addrs[0], "/").await;
        assert_eq!(answer.status, StatusCode::BAD_GATEWAY, "{}", answer.text());
        let text = answer.text();
        assert!(text.contains("node secure"), "{text}");
        assert!(text.contains("TLS handshake failed"), "{text}");
        assert!(text.contains(why), "{text}");
        sw.switch.shutdown();
    }

    // As a connect failure, it is retried on another node.
    let plain = Backend::start("plain").await;
    let tls = format!(
        "ca_file = \"{}\", sni = \"www.example.test\"",
        pki("other-ca.pem").display()
    );
    let mut text = config_with_tls_node(addr, &tls, "debug_headers = true");
    text.push_str(&format!(
        "[[node]]\nname = \"plain\"\naddress = \"{}\"\n",
        plain.addr
    ));
    let sw = start_switch(&text).await;
    for _ in 0..2 {
        let answer = get(sw.listen_addrs[0], "/").await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
        assert_eq!(answer.node(), "plain");
    }
    let status = status_json(sw.admin_addr.unwrap()).await;
    assert!(
        node_status(&status, "secure")["retries"].as_u64() >= Some(1),
        "{status}"
    );
}

#[tokio::test]
async fn verify_false_reaches_a_node_whatever_its_certificate() {
    let (addr, seen) = tls_node("localhost", false).await;
    let sw = start_switch(&config_with_tls_node(addr, "verify = false", "")).await;
    let answer = get(sw.listen_addrs[0], "/").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    // No `sni`: the node's IP address is the name, and an IP address is never sent as SNI.
    assert_eq!(seen.lock().unwrap().handshakes[0].0, None);
}

#[test]
fn a_bad_tls_table_is_a_located_one_line_error() {
    let cases = [
        (
            "ca_file = \"/nonexistent/ca.pem\"",
            "/nonexistent/ca.pem: cannot read",
        ),
        ("sni = \"a.example\"", "tls.ca_file: name a PEM bundle"),
        ("ca_file = \"x\", bogus = 1", "unknown field `bogus`"),
    ];
    for (tls, expected) in cases {
        let text = config_with_tls_node("127.0.0.1:1".parse().unwrap(), tls, "");
        let e = Config::parse(&text, Some("t.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.toml:"), "{e}");
        assert!(e.contains(expected), "{tls}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}

#[test]
fn the_node_tls_example_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/node-tls.toml");
    let config = Config::load(&path).expect("examples/node-tls.toml is valid");
    assert!(config.nodes.iter().any(|n| n.tls.is_some()));
}

#[tokio::test]
async fn a_reload_with_a_new_ca_bundle_rebuilds_the_pools() {
    let (addr, _seen) = tls_node("www.example.test", false).await;
    let dir = std::env::temp_dir().join(format!("capstan-node-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.pem");
    std::fs::copy(pki("other-ca.pem"), &ca).unwrap();
    let path = dir.join("switch.toml");
    let tls = format!("ca_file = \"{}\", sni = \"www.example.test\"", ca.display());
    std::fs::write(&path, config_with_tls_node(addr, &tls, "")).unwrap();
    let sw = capstan_switch::start(Config::load(&path).unwrap())
        .await
        .unwrap();
    let listen = sw.listen_addrs[0];
    assert_eq!(get(listen, "/").await.status, StatusCode::BAD_GATEWAY);

    // The same file name, a new content: the right CA.
    std::fs::copy(pki("ca.pem"), &ca).unwrap();
    sw.switch.reload().await.expect("reload succeeds");
    let answer = get(listen, "/").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text());
    let _ = std::fs::remove_dir_all(&dir);
}
