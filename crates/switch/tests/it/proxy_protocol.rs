//! PROXY protocol over real sockets: nodes get a v2 (or v1) header naming the client; a
//! trusted balancer's v1/v2 header sets the client address the switch uses; untrusted
//! senders and malformed headers are closed and counted.

use crate::common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// A raw TCP node: reports the first `header_len` bytes of every connection (the PROXY header),
/// then answers every request on it with `200 ok`.
async fn header_node(header_len: usize) -> (SocketAddr, mpsc::UnboundedReceiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut header = vec![0u8; header_len];
                if stream.read_exact(&mut header).await.is_err() {
                    return;
                }
                let _ = tx.send(header);
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let Ok(n) = stream.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        let ok = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                        if stream.write_all(ok).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, rx)
}

fn node_config(node: SocketAddr, extra: &str) -> String {
    format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n{extra}\n\
         [[node]]\nname = \"n\"\naddress = \"{node}\"\n"
    )
}

#[tokio::test]
async fn a_node_sees_the_clients_address_in_a_v2_header() {
    let (node, mut headers) = header_node(28).await;
    let sw = start_switch(&node_config(node, "[proxy_protocol]\nsend = \"v2\"")).await;
    let switch_addr = sw.listen_addrs[0];
    let mut client = TcpStream::connect(switch_addr).await.unwrap();
    let client_addr = client.local_addr().unwrap();
    for _ in 0..2 {
        client
            .write_all(b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n")
            .await
            .unwrap();
        let mut answer = vec![0u8; 512];
        let n = client.read(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer[..n]);
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("ok"), "{answer}");
    }
    let header = tokio::time::timeout(Duration::from_secs(10), headers.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&header[..12], b"\r\n\r\n\0\r\nQUIT\n", "v2 signature");
    assert_eq!(header[12], 0x21, "version 2, PROXY");
    assert_eq!(header[13], 0x11, "TCP over IPv4");
    assert_eq!(u16::from_be_bytes([header[14], header[15]]), 12);
    assert_eq!(&header[16..20], &[127, 0, 0, 1], "source address");
    assert_eq!(&header[20..24], &[127, 0, 0, 1], "destination address");
    let source_port = u16::from_be_bytes([header[24], header[25]]);
    let destination_port = u16::from_be_bytes([header[26], header[27]]);
    assert_eq!(source_port, client_addr.port());
    assert_eq!(destination_port, switch_addr.port());
    // Both requests of the client connection went over one node connection: one header.
    assert!(headers.try_recv().is_err());
    // Another client gets a connection (and a header) of its own.
    let mut other = TcpStream::connect(switch_addr).await.unwrap();
    other
        .write_all(b"GET /b HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    other.read_to_end(&mut answer).await.unwrap();
    let header = tokio::time::timeout(Duration::from_secs(10), headers.recv())
        .await
        .unwrap()
        .unwrap();
    let port = u16::from_be_bytes([header[24], header[25]]);
    assert_eq!(port, other.local_addr().unwrap().port());
}

#[tokio::test]
async fn a_node_gets_a_v1_line_when_asked() {
    let (node, mut headers) = header_node(6).await;
    let sw = start_switch(&node_config(node, "[proxy_protocol]\nsend = \"v1\"")).await;
    assert_eq!(get(sw.listen_addrs[0], "/").await.text(), "ok");
    let header = headers.recv().await.unwrap();
    assert_eq!(&header, b"PROXY ");
}

fn log_path(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-proxy-proto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    path
}

fn accepting_config(listen: SocketAddr, node: SocketAddr, trusted: &str, log: &PathBuf) -> String {
    format!(
        "listen = [\"{listen}\"]\nadmin = \"127.0.0.1:0\"\n\
         [proxy_protocol]\naccept_on = [\"{listen}\"]\ntrusted = [{trusted}]\n\
         [access_log]\npath = {log:?}\nformat = \"common\"\n\
         [[node]]\nname = \"a\"\naddress = \"{node}\"\n"
    )
}

#[tokio::test]
async fn a_trusted_balancers_v1_and_v2_headers_name_the_client() {
    let a = Backend::start("a").await;
    // Held for the switch: its listener binds there with address reuse.
    let reserved = DeadAddr::new();
    let listen = reserved.addr();
    let log = log_path("trusted.log");
    let sw = start_switch(&accepting_config(listen, a.addr, "\"127.0.0.0/8\"", &log)).await;
    let v1 = raw_exchange(
        listen,
        b"PROXY TCP4 203.0.113.9 192.0.2.1 40000 80\r\n\
          GET /headers HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(v1.starts_with("HTTP/1.1 200 OK"), "{v1}");
    assert!(v1.contains("x-forwarded-for: 203.0.113.9\n"), "{v1}");
    let mut v2 = capstan_switch::testing::encode_v2(
        "[2001:db8::7]:1234".parse().unwrap(),
        "[2001:db8::1]:80".parse().unwrap(),
    );
    v2.extend_from_slice(b"GET /headers HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n");
    let v2 = raw_exchange(listen, &v2).await;
    assert!(v2.contains("x-forwarded-for: 2001:db8::7\n"), "{v2}");
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    wait_until("2 lines in the access log", || {
        read_log().lines().count() >= 2
    })
    .await;
    let lines = read_log();
    assert!(lines.starts_with("203.0.113.9 - - ["), "{lines}");
    assert!(
        lines
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("2001:db8::7 - - ["),
        "{lines}"
    );
    drop(sw);
}

async fn rejected(admin: SocketAddr, reason: &str) -> String {
    let metrics = get(admin, "/metrics").await.text();
    let prefix = format!("capstan_proxy_protocol_rejected_total{{reason=\"{reason}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or("missing")
        .to_string()
}

#[tokio::test]
async fn untrusted_senders_and_malformed_headers_are_closed_and_counted() {
    let a = Backend::start("a").await;
    // Held for the switch: its listener binds there with address reuse.
    let reserved = DeadAddr::new();
    let listen = reserved.addr();
    let log = log_path("untrusted.log");
    let sw = start_switch(&accepting_config(listen, a.addr, "\"10.0.0.0/8\"", &log)).await;
    let admin = sw.admin_addr.unwrap();
    let answer = raw_exchange(
        listen,
        b"PROXY TCP4 203.0.113.9 192.0.2.1 40000 80\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n",
    )
    .await;
    assert_eq!(answer, "", "an untrusted sender gets nothing");
    assert_eq!(rejected(admin, "untrusted").await, "1");
    assert_eq!(a.hits(), 0);

    // Held for the switch: its listener binds there with address reuse.
    let reserved = DeadAddr::new();
    let listen = reserved.addr();
    let log = log_path("malformed.log");
    let sw = start_switch(&accepting_config(listen, a.addr, "\"127.0.0.1\"", &log)).await;
    let admin = sw.admin_addr.unwrap();
    for bad in [
        &b"PROXY TCP4 garbage\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
        b"\r\n\r\n\0\r\nQUIT\n\x31\x11\x00\x0cAAAABBBBCCDD",
    ] {
        assert_eq!(raw_exchange(listen, bad).await, "");
    }
    assert_eq!(rejected(admin, "malformed").await, "3");
    assert_eq!(rejected(admin, "untrusted").await, "0");
    assert_eq!(a.hits(), 0);
}

#[tokio::test]
async fn accept_on_must_be_a_listener_and_trusted_given() {
    let base = "listen = [\"127.0.0.1:8080\"]\n[[node]]\naddress = \"127.0.0.1:1\"\n";
    for (section, says) in [
        (
            "[proxy_protocol]\naccept_on = [\"127.0.0.1:9999\"]\ntrusted = [\"10.0.0.0/8\"]\n",
            "not one of the `listen` addresses",
        ),
        (
            "[proxy_protocol]\naccept_on = [\"127.0.0.1:8080\"]\n",
            "proxy_protocol.trusted",
        ),
        (
            "[proxy_protocol]\naccept_on = [\"127.0.0.1:8080\"]\ntrusted = [\"10.0.0.0/33\"]\n",
            "prefix length",
        ),
        ("[proxy_protocol]\nsend = \"v3\"\n", "unknown variant"),
    ] {
        let text = format!("{base}{section}");
        let err = capstan_switch::Config::parse(&text, Some("t.toml")).unwrap_err();
        assert!(err.to_string().contains(says), "{section}: {err}");
    }
}
