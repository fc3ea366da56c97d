//! Upgrades through the switch over real sockets: a WebSocket-style echo spliced both ways,
//! the idle timeout, a node that declines, and `CONNECT` refused.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Reads up to the end of an HTTP head (`\r\n\r\n`), byte by byte so nothing after it is lost.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte))
            .await
            .expect("a head within 10 s")
            .unwrap();
        assert!(n == 1, "closed after {:?}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// A node that accepts WebSocket upgrades (answers `101`) and then echoes every byte; it
/// sends back the request head it saw as the first bytes after the `101`.
async fn echo_node() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(async move {
                let head = read_head(&mut stream).await;
                let lower = head.to_ascii_lowercase();
                if !lower.contains("upgrade: websocket") || !lower.contains("connection: upgrade") {
                    let _ = stream
                        .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    return;
                }
                let answer = format!(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                     Connection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\
                     \r\n{:04}{head}",
                    head.len()
                );
                stream.write_all(answer.as_bytes()).await.unwrap();
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

const UPGRADE: &[u8] = b"GET /chat HTTP/1.1\r\nHost: ws.example\r\nUpgrade: websocket\r\n\
    Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
    Sec-WebSocket-Version: 13\r\n\r\n";

fn switch_config(node: SocketAddr, extra: &str) -> String {
    format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n{extra}\n\
         [[node]]\nname = \"ws\"\naddress = \"{node}\"\n"
    )
}

#[tokio::test]
async fn websocket_echo_through_the_switch() {
    let node = echo_node().await;
    let sw = start_switch(&switch_config(node, "")).await;
    let mut client = TcpStream::connect(sw.listen_addrs[0]).await.unwrap();
    client.write_all(UPGRADE).await.unwrap();
    let head = read_head(&mut client).await;
    assert!(
        head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{head}"
    );
    let lower = head.to_ascii_lowercase();
    assert!(lower.contains("upgrade: websocket\r\n"), "{head}");
    assert!(lower.contains("connection: upgrade\r\n"), "{head}");
    assert!(
        lower.contains("sec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo="),
        "{head}"
    );
    // What the node saw: the upgrade fields kept, the WebSocket fields passed, the proxy's own.
    let mut len = [0u8; 4];
    client.read_exact(&mut len).await.unwrap();
    let mut seen = vec![0u8; std::str::from_utf8(&len).unwrap().parse().unwrap()];
    client.read_exact(&mut seen).await.unwrap();
    let seen = String::from_utf8(seen).unwrap().to_ascii_lowercase();
    assert!(seen.starts_with("get /chat http/1.1\r\n"), "{seen}");
    assert!(
        seen.contains("sec-websocket-key: dghlihnhbxbszsbub25jzq==\r\n"),
        "{seen}"
    );
    assert!(seen.contains("x-forwarded-for: 127.0.0.1\r\n"), "{seen}");
    // Bytes both ways, several times, in frames of any size.
    for message in [&b"hello"[..], &[7u8; 100_000][..], b"bye"] {
        client.write_all(message).await.unwrap();
        let mut back = vec![0u8; message.len()];
        tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut back))
            .await
            .expect("echo within 10 s")
            .unwrap();
        assert_eq!(back, message);
    }
    let metrics = get(sw.admin_addr.unwrap(), "/metrics").await.text();
    assert!(metrics.contains("capstan_tunnels_open 1"), "{metrics}");
    // The client closing ends the tunnel.
    drop(client);
    let admin = sw.admin_addr.unwrap();
    wait_for_metrics(admin, "the tunnel to close", |m| {
        m.contains("capstan_tunnels_open 0")
    })
    .await;
}

#[tokio::test]
async fn idle_tunnels_are_closed() {
    let node = echo_node().await;
    let sw = start_switch(&switch_config(node, "[upgrade]\nidle_timeout = \"200ms\"")).await;
    let mut client = TcpStream::connect(sw.listen_addrs[0]).await.unwrap();
    client.write_all(UPGRADE).await.unwrap();
    let head = read_head(&mut client).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut rest = Vec::new();
    // The node's greeting arrives, then nothing moves and the switch closes the tunnel.
    let closed = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest)).await;
    assert!(closed.is_ok(), "the idle tunnel stayed open");
}

#[tokio::test]
async fn a_node_that_does_not_upgrade_answers_normally() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "")).await;
    let raw = raw_exchange(
        sw.listen_addrs[0],
        b"GET /x HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\n\r\n",
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 200 OK\r\n"), "{raw}");
    assert!(raw.ends_with("\r\n\r\na"), "{raw}");
    assert!(!raw.to_ascii_lowercase().contains("upgrade"), "{raw}");
}

#[tokio::test]
async fn connect_is_refused_unless_enabled() {
    let a = Backend::start("a").await;
    let sw = start_switch(&config_for(&[&a], "")).await;
    let raw = raw_exchange(
        sw.listen_addrs[0],
        b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n",
    )
    .await;
    assert!(
        raw.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{raw}"
    );
    assert!(raw.contains("CONNECT is not enabled"), "{raw}");
    assert!(
        raw.to_ascii_lowercase().contains("\r\nallow: get,"),
        "{raw}"
    );
    assert_eq!(a.hits(), 0);
}

/// With `upgrade.connect = true` the node (a forward proxy) gets the `CONNECT` and, on `200`,
/// the tunnel.
#[tokio::test]
async fn connect_passes_to_a_node_when_enabled() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let node = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let head = read_head(&mut stream).await;
        assert!(
            head.starts_with("CONNECT example.org:443 HTTP/1.1\r\n"),
            "{head}"
        );
        stream
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .unwrap();
        let (mut r, mut w) = stream.split();
        let _ = tokio::io::copy(&mut r, &mut w).await;
    });
    let sw = start_switch(&switch_config(node, "[upgrade]\nconnect = true")).await;
    let mut client = TcpStream::connect(sw.listen_addrs[0]).await.unwrap();
    client
        .write_all(b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n")
        .await
        .unwrap();
    let head = read_head(&mut client).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    client.write_all(b"tunnelled").await.unwrap();
    let mut back = [0u8; 9];
    tokio::time::timeout(Duration::from_secs(10), client.read_exact(&mut back))
        .await
        .expect("echo within 10 s")
        .unwrap();
    assert_eq!(&back, b"tunnelled");
}
