//! The whole request path of the switch, as a client reaches it: bytes on a real loopback
//! connection to a running `capstan serve` (hyper's parser, the strict RFC 9112 rules, limits,
//! classification, dispatch, the cache, forwarding over the pool, chunked bodies both ways) in
//! front of a real HTTP/1.1 node.
//!
//! Oracles beyond "no panic" (any panic on any thread aborts under libFuzzer):
//! - the node never receives a message its own parser rejects (nothing malformed, no smuggled
//!   second request, is ever forwarded);
//! - the client always gets an answer or a close within 10 s (no hang), and what it gets starts
//!   with an HTTP/1.x status line.
#![no_main]

use std::convert::Infallible;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use libfuzzer_sys::fuzz_target;

struct World {
    _rt: tokio::runtime::Runtime,
    /// Kept, not forgotten: the leak checker runs after every input.
    _running: capstan_switch::Running,
    switch: SocketAddr,
}

/// The node: reads the whole request, answers 200; paths under `/c/` are cachable.
async fn node_answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let cachable = req.uri().path().starts_with("/c/");
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().len())
        .unwrap_or(0);
    let mut resp = Response::new(Full::new(Bytes::from(format!("read {body} bytes\n"))));
    if cachable {
        resp.headers_mut()
            .insert("cache-control", "max-age=60".parse().unwrap());
    }
    Ok(resp)
}

async fn run_node(listener: tokio::net::TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let conn = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(node_answer));
            if let Err(e) = conn.await {
                assert!(
                    !e.is_parse(),
                    "the switch forwarded a malformed message: {e}"
                );
            }
        });
    }
}

fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let running = rt.block_on(async {
            let node = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let node_addr = node.local_addr().unwrap();
            tokio::spawn(run_node(node));
            let text = format!(
                "listen = [\"127.0.0.1:0\"]\n[[node]]\naddress = \"{node_addr}\"\n\
                 [cache]\nmemory = \"8MiB\"\n[timeouts]\nheader_read = \"2s\"\n\
                 first_byte = \"2s\"\nupstream = \"4s\"\n"
            );
            let config = capstan_switch::Config::parse(&text, None).unwrap();
            capstan_switch::start(config).await.unwrap()
        });
        World {
            switch: running.listen_addrs[0],
            _running: running,
            _rt: rt,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let w = world();
    let mut s = TcpStream::connect(w.switch).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    // The switch may answer and close before reading everything; that is not a failure.
    if s.write_all(data).is_ok() {
        let _ = s.shutdown(Shutdown::Write);
    }
    let mut answer = Vec::new();
    match s.read_to_end(&mut answer) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return,
        Err(e) => panic!("no answer or close within 10 s: {e}"),
    }
    if !answer.is_empty() {
        assert!(
            answer.starts_with(b"HTTP/1.1 ") || answer.starts_with(b"HTTP/1.0 "),
            "not a status line: {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(80)])
        );
    }
});
