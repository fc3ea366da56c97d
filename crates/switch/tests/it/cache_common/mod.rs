//! A scriptable origin for the cache's tests: each path answers as the test says (status,
//! headers, body, an answer held until the test releases it, a body in pieces released by
//! the test, a body cut short once the test has seen its first bytes), answers
//! conditional requests with `304` when asked to, and counts and records what it was sent.
#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::Notify;

type BoxBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// How one path answers.
#[derive(Clone, Default)]
pub struct Script {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Answer only once the test calls [`Origin::release`].
    pub hold: bool,
    /// Answer `304` (with these headers) when `If-None-Match` carries this entity tag.
    pub not_modified_for: Option<String>,
    pub not_modified_headers: Vec<(String, String)>,
    /// Send the first this-many body bytes, then wait for [`Origin::release`] before the rest.
    pub gate_after: Option<usize>,
    /// Send only this many body bytes (with the full `Content-Length`), then fail once the
    /// test calls [`Origin::release`].
    pub cut_after: Option<usize>,
}

impl Script {
    pub fn ok(body: &str, headers: &[(&str, &str)]) -> Script {
        Script {
            status: 200,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
            ..Script::default()
        }
    }
}

#[derive(Default)]
struct Shared {
    scripts: Mutex<HashMap<String, Script>>,
    hits: Mutex<HashMap<String, u64>>,
    last_request: Mutex<HashMap<String, Vec<(String, String)>>>,
    gate: Notify,
    released: std::sync::atomic::AtomicBool,
}

impl Shared {
    async fn wait_for_release(&self) {
        loop {
            let notified = self.gate.notified();
            if self.released.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

/// The origin: one listener on loopback.
pub struct Origin {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Origin {
    pub async fn start() -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let task = {
            let shared = Arc::clone(&shared);
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let shared = Arc::clone(&shared);
                    tokio::spawn(async move {
                        let service = service_fn(move |req| answer(Arc::clone(&shared), req));
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            })
        };
        Origin { addr, shared, task }
    }

    pub fn script(&self, path: &str, script: Script) {
        self.shared
            .scripts
            .lock()
            .unwrap()
            .insert(path.to_string(), script);
    }

    /// Requests this path received.
    pub fn hits(&self, path: &str) -> u64 {
        *self.shared.hits.lock().unwrap().get(path).unwrap_or(&0)
    }

    /// A header of the last request this path received.
    pub fn last_header(&self, path: &str, name: &str) -> Option<String> {
        let last = self.shared.last_request.lock().unwrap();
        last.get(path)?
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    /// Lets gated bodies send the rest.
    pub fn release(&self) {
        self.shared
            .released
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.shared.gate.notify_waiters();
    }

    /// Polls until `path` has received `n` requests, at most 10 s.
    pub async fn wait_hits(&self, path: &str, n: u64) {
        let poll = Poll::new(&format!("{path} to receive {n} requests"));
        while self.hits(path) < n {
            poll.next().await;
        }
    }
}

/// Waiting for a condition: every call to [`Poll::next`] pauses one polling interval and
/// fails the test once the deadline (10 s) has passed.
pub struct Poll {
    what: String,
    deadline: tokio::time::Instant,
}

impl Poll {
    pub fn new(what: &str) -> Poll {
        Poll {
            what: what.to_string(),
            deadline: tokio::time::Instant::now() + Duration::from_secs(10),
        }
    }

    pub async fn next(&self) {
        assert!(
            tokio::time::Instant::now() < self.deadline,
            "timed out waiting for {}",
            self.what
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn answer(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<BoxBody>, Infallible> {
    let key = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let path = req.uri().path().to_string();
    let script = {
        let scripts = shared.scripts.lock().unwrap();
        scripts.get(&key).or_else(|| scripts.get(&path)).cloned()
    };
    *shared.hits.lock().unwrap().entry(path.clone()).or_default() += 1;
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    shared.last_request.lock().unwrap().insert(path, headers);
    let Some(script) = script else {
        let mut r = Response::new(full(b"no script\n".to_vec()));
        *r.status_mut() = StatusCode::NOT_FOUND;
        return Ok(r);
    };
    if script.hold {
        shared.wait_for_release().await;
    }
    let inm = req
        .headers()
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if let Some(tag) = &script.not_modified_for {
        if inm.contains(tag.as_str()) {
            let mut r = Response::new(full(Vec::new()));
            *r.status_mut() = StatusCode::NOT_MODIFIED;
            for (k, v) in &script.not_modified_headers {
                r.headers_mut().append(
                    k.parse::<hyper::header::HeaderName>().unwrap(),
                    v.parse().unwrap(),
                );
            }
            return Ok(r);
        }
    }
    let mut r = Response::new(body_of(&script, &shared));
    *r.status_mut() = StatusCode::from_u16(script.status).unwrap();
    for (k, v) in &script.headers {
        r.headers_mut().append(
            k.parse::<hyper::header::HeaderName>().unwrap(),
            v.parse().unwrap(),
        );
    }
    if script.gate_after.is_some() || script.cut_after.is_some() {
        r.headers_mut().insert(
            "content-length",
            script.body.len().to_string().parse().unwrap(),
        );
    }
    Ok(r)
}

fn full(bytes: Vec<u8>) -> BoxBody {
    Full::new(Bytes::from(bytes))
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn body_of(script: &Script, shared: &Arc<Shared>) -> BoxBody {
    let body = Bytes::from(script.body.clone());
    if let Some(cut) = script.cut_after {
        // The head and the first bytes go out; the origin dies once the test has seen them,
        // as a node that crashes mid-body does.
        let shared = Arc::clone(shared);
        let first = body.slice(..cut.min(body.len()));
        let stream = futures_util::stream::unfold(0u8, move |step| {
            let (shared, first) = (Arc::clone(&shared), first.clone());
            async move {
                match step {
                    0 => Some((Ok(Frame::data(first)), 1)),
                    1 => {
                        shared.wait_for_release().await;
                        Some((Err(std::io::Error::other("origin dies mid-body")), 2))
                    }
                    _ => None,
                }
            }
        });
        return StreamBody::new(stream).boxed();
    }
    if let Some(gate) = script.gate_after {
        let shared = Arc::clone(shared);
        let (first, rest) = (body.slice(..gate), body.slice(gate..));
        let stream = futures_util::stream::unfold(0u8, move |step| {
            let (shared, first, rest) = (Arc::clone(&shared), first.clone(), rest.clone());
            async move {
                match step {
                    0 => Some((Ok(Frame::data(first)), 1)),
                    1 => {
                        shared.wait_for_release().await;
                        Some((Ok(Frame::data(rest)), 2))
                    }
                    _ => None,
                }
            }
        });
        return StreamBody::new(stream).boxed();
    }
    full(body.to_vec())
}

/// A switch with one node (the origin) and a cache; `extra` goes into `[cache]`.
pub async fn switch_with_cache(origin: &Origin, extra: &str) -> capstan_switch::Running {
    let toml = format!(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n\
         [cache]\nmemory = \"16MiB\"\nmax_object = \"1MiB\"\n{extra}\n\
         [[node]]\nname = \"origin\"\naddress = \"{}\"\n",
        origin.addr
    );
    crate::common::start_switch(&toml).await
}

/// One `GET` for `site.test` on a connection of its own (a client of its own).
pub async fn get(addr: SocketAddr, path: &str) -> crate::common::Answer {
    crate::common::send(
        addr,
        Request::get(path).header("host", "site.test"),
        Bytes::new(),
    )
    .await
}
