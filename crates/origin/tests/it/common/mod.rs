//! A minimal HTTP/1.1 client over a real loopback socket, and helpers to start nodes.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use capstan_origin::{OriginConfig, RunningOrigin};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Bytes,
    pub elapsed: Duration,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub async fn request(addr: SocketAddr, method: &str, path: &str, extra: &[(&str, &str)]) -> Reply {
    let t = Instant::now();
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut send, conn) = http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(conn);
    let mut b = http::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (k, v) in extra {
        b = b.header(*k, *v);
    }
    let resp = send
        .send_request(b.body(Empty::<Bytes>::new()).unwrap())
        .await
        .expect("response");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    Reply {
        status,
        headers,
        body,
        elapsed: t.elapsed(),
    }
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, &[]).await
}

pub async fn load(addr: SocketAddr) -> serde_json::Value {
    let r = get(addr, "/_capstan/load").await;
    assert_eq!(r.status, 200);
    serde_json::from_slice(&r.body).expect("load report is JSON")
}

pub fn config() -> OriginConfig {
    OriginConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        ..OriginConfig::default()
    }
}

pub async fn start(c: OriginConfig) -> RunningOrigin {
    capstan_origin::start(c).await.expect("origin starts")
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A fresh directory under the system temp dir, removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "capstan-origin-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
