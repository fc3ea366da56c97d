//! The HTTP side of etcd's v3 JSON gateway: `POST` of a JSON body to `/v3/…` on a member's
//! client port, with hyper-util's client (HTTP/1.1; the insecure client port hands HTTP/2 to
//! gRPC, HTTP/1.1 to the gateway). What the bodies mean is `wire`'s business.
//!
//! A request goes to the endpoint that answered last, then to each other one while they fail
//! for reasons another member may not have (no connection, no answer in time, a 5xx, a
//! malformed answer). An answer etcd gives on purpose (a 4xx: lease not found, a bad request,
//! no permission) is its answer and ends the round. Each attempt is bounded by the request
//! timeout; connecting by the connect timeout.
//!
//! Every failure is a [`Failed`]: each endpoint tried and, in words, what went wrong there
//! (`etcd http://127.0.0.1:2379: range /capstan/nodes/: connection refused`).
//!
//! An answer is read as a sequence of JSON values: one for a unary call, one per message for
//! a stream (the gateway ends each with a newline, so parsing is tried only when a newline or
//! the end has arrived: a large answer in many pieces is parsed once). A stream's
//! `{"result":…}` is unwrapped and its `{"error":…}` is a failure.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use serde_json::Value;
use tokio::time::Instant;

use super::wire;
use super::{check_endpoint, Error, Settings};

/// The largest answer read (a range of a big prefix, one watch response): as large as the
/// gRPC client this replaced would decode.
const MAX_ANSWER: usize = 256 << 20;

/// What went wrong at one endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Why {
    /// No connection: refused, unreachable, not resolved, not within the connect timeout.
    Connect(String),
    /// No whole answer within this long.
    NoAnswer(Duration),
    /// The connection failed while a request or its answer was under way.
    Transport(String),
    /// etcd (or whatever listens at its address) answered with an error: the HTTP status,
    /// the gRPC code if the gateway gave one, its message.
    Answered {
        status: u16,
        code: Option<i64>,
        message: String,
    },
    /// An answer etcd would not give: not JSON, not base64, a field missing.
    Malformed(String),
    /// A stream the server ended.
    Ended,
    /// A watch stream silent too long, or whose server stopped answering (see `watch`).
    Dead(String),
}

impl Why {
    /// Whether this is etcd's considered answer, which another member would give too.
    fn is_final(&self) -> bool {
        matches!(self, Why::Answered { status, .. } if (400..500).contains(status)
            && *status != 408 && *status != 429)
    }
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Connect(why) | Why::Transport(why) | Why::Dead(why) => f.write_str(why),
            Why::NoAnswer(within) => write!(f, "no answer within {within:?}"),
            Why::Answered {
                status, message, ..
            } => write!(f, "etcd answered {status}: {message}"),
            Why::Malformed(why) => write!(f, "malformed answer: {why}"),
            Why::Ended => f.write_str("etcd ended the stream"),
        }
    }
}

/// A request that failed at every endpoint tried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Failed {
    /// What was asked, in words (`range /capstan/nodes/`).
    doing: String,
    /// Each endpoint tried, in order, and why it failed there.
    attempts: Vec<(String, Why)>,
}

impl Failed {
    pub(super) fn new(endpoint: &str, doing: &str, why: Why) -> Failed {
        Failed {
            doing: doing.to_string(),
            attempts: vec![(endpoint.to_string(), why)],
        }
    }

    /// Whether etcd said the thing asked about does not exist (a lease, mostly).
    pub(super) fn not_found(&self) -> bool {
        matches!(self.attempts.last(), Some((_, Why::Answered { status, code, .. }))
            if *code == Some(5) || *status == 404)
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (endpoint, why)) in self.attempts.iter().enumerate() {
            match i {
                0 => write!(f, "etcd {endpoint}: {}: {why}", self.doing)?,
                _ => write!(f, "; {endpoint}: {why}")?,
            }
        }
        Ok(())
    }
}

impl From<Failed> for Error {
    fn from(failed: Failed) -> Error {
        Error::Etcd(failed.to_string())
    }
}

/// A client of the gateway at a cluster's endpoints. Cheap to clone (one connection pool).
#[derive(Clone)]
pub(super) struct Gateway {
    endpoints: Arc<[String]>,
    client: Client<HttpConnector, Full<Bytes>>,
    request_timeout: Duration,
    connect_timeout: Duration,
    /// The endpoint to try first: the last that answered.
    preferred: Arc<AtomicUsize>,
}

impl Gateway {
    /// A client for these settings (connects lazily: the first request tells whether etcd is
    /// there). An endpoint that cannot be used is an [`Error::Invalid`].
    pub(super) fn new(settings: &Settings) -> Result<Gateway, Error> {
        if settings.endpoints.is_empty() {
            return Err(Error::Invalid("no etcd endpoint given".into()));
        }
        for endpoint in &settings.endpoints {
            check_endpoint(endpoint).map_err(Error::Invalid)?;
        }
        let endpoints = (settings.endpoints.iter())
            .map(|e| e.trim_end_matches('/').to_string())
            .collect();
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(settings.connect_timeout));
        connector.set_nodelay(true);
        // TCP keepalive: a connection to a host that vanished (no FIN, no RST: powered off,
        // cut off) fails after a few unanswered probes instead of waiting forever. This is what
        // finds a dead watch stream when its host is gone; `watch` finds the other kinds.
        let probe = settings.request_timeout.max(Duration::from_secs(1));
        connector.set_keepalive(Some(probe));
        connector.set_keepalive_interval(Some(probe));
        connector.set_keepalive_retries(Some(3));
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(Gateway {
            endpoints,
            client,
            request_timeout: settings.request_timeout,
            connect_timeout: settings.connect_timeout,
            preferred: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// One unary request (or the first answer of a stream: a lease keepalive): `POST path`
    /// with `body`, tried at each endpoint in turn (see the module doc); the answer read by
    /// `decode` (one of `wire`'s), whose complaint makes a malformed answer.
    pub(super) async fn call<T>(
        &self,
        path: &str,
        doing: &str,
        body: &Value,
        decode: fn(Value) -> Result<T, String>,
    ) -> Result<T, Failed> {
        let body = Bytes::from(body.to_string());
        self.each_endpoint(doing, |endpoint| {
            let body = body.clone();
            async move { self.call_at(&endpoint, path, body, decode).await }
        })
        .await
    }

    /// Opens a stream (a watch): its answers are read with [`Stream::next`].
    pub(super) async fn stream(
        &self,
        path: &str,
        doing: &str,
        body: &Value,
    ) -> Result<Stream, Failed> {
        let body = Bytes::from(body.to_string());
        let (endpoint, messages) = self
            .each_endpoint(doing, |endpoint| {
                let body = body.clone();
                async move {
                    let deadline = Instant::now() + self.request_timeout;
                    let messages = self.open(&endpoint, path, body, deadline).await?;
                    Ok((endpoint, messages))
                }
            })
            .await?;
        Ok(Stream {
            endpoint,
            doing: doing.to_string(),
            messages,
        })
    }

    /// [`Gateway::call`] at one endpoint only (no other tried): for checking that the member
    /// a stream comes from still answers.
    pub(super) async fn call_one<T>(
        &self,
        endpoint: &str,
        path: &str,
        doing: &str,
        body: &Value,
        decode: fn(Value) -> Result<T, String>,
    ) -> Result<T, Failed> {
        let body = Bytes::from(body.to_string());
        let answer = self.call_at(endpoint, path, body, decode).await;
        answer.map_err(|why| Failed::new(endpoint, doing, why))
    }

    /// Runs `attempt` at each endpoint from the preferred one until one succeeds or gives a
    /// final answer.
    async fn each_endpoint<T, F, Fut>(&self, doing: &str, mut attempt: F) -> Result<T, Failed>
    where
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = Result<T, Why>>,
    {
        let count = self.endpoints.len();
        let start = self.preferred.load(Ordering::Relaxed) % count;
        let mut failed = Failed {
            doing: doing.to_string(),
            attempts: Vec::new(),
        };
        for i in 0..count {
            let at = (start + i) % count;
            let endpoint = self.endpoints[at].clone();
            match attempt(endpoint.clone()).await {
                Ok(answer) => {
                    self.preferred.store(at, Ordering::Relaxed);
                    return Ok(answer);
                }
                Err(why) => {
                    let last = why.is_final();
                    failed.attempts.push((endpoint, why));
                    if last {
                        break;
                    }
                }
            }
        }
        Err(failed)
    }

    /// A whole unary answer from one endpoint, within the request timeout, decoded.
    async fn call_at<T>(
        &self,
        endpoint: &str,
        path: &str,
        body: Bytes,
        decode: fn(Value) -> Result<T, String>,
    ) -> Result<T, Why> {
        let deadline = Instant::now() + self.request_timeout;
        let mut messages = self.open(endpoint, path, body, deadline).await?;
        match tokio::time::timeout_at(deadline, messages.next()).await {
            Ok(Ok(Some(answer))) => decode(answer).map_err(Why::Malformed),
            Ok(Ok(None)) => Err(Why::Malformed("an empty answer".into())),
            Ok(Err(why)) => Err(why),
            Err(_) => Err(Why::NoAnswer(self.request_timeout)),
        }
    }

    /// Sends the request; the answer's body if etcd says 200, else its error.
    async fn open(
        &self,
        endpoint: &str,
        path: &str,
        body: Bytes,
        deadline: Instant,
    ) -> Result<Messages, Why> {
        let request = hyper::Request::post(format!("{endpoint}{path}"))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body))
            .map_err(|e| Why::Connect(format!("cannot make the request: {e}")))?;
        let sent = tokio::time::timeout_at(deadline, self.client.request(request)).await;
        let response = match sent {
            Err(_) => return Err(Why::NoAnswer(self.request_timeout)),
            Ok(Err(e)) if e.is_connect() => return Err(self.connect_failed(&e)),
            Ok(Err(e)) => return Err(Why::Transport(words(&e))),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        let mut messages = Messages::new(response.into_body());
        if status == hyper::StatusCode::OK {
            return Ok(messages);
        }
        // The error's body, if it comes in time (etcd's JSON, or text from something else at
        // its address); the status alone otherwise.
        let text = match tokio::time::timeout_at(deadline, messages.rest()).await {
            Ok(Ok(bytes)) => bytes,
            _ => Vec::new(),
        };
        let (message, code) = match serde_json::from_slice::<Value>(&text) {
            Ok(json) => wire::error_of(&json).unwrap_or_else(|| (json.to_string(), None)),
            Err(_) => (String::from_utf8_lossy(&text).trim().to_string(), None),
        };
        let message = match message.is_empty() {
            true => status
                .canonical_reason()
                .unwrap_or("(no message)")
                .to_string(),
            false => wire::shorten_str(&message),
        };
        Err(Why::Answered {
            status: status.as_u16(),
            code,
            message,
        })
    }

    fn connect_failed(&self, e: &hyper_util::client::legacy::Error) -> Why {
        let timed_out = io_kinds(e).any(|k| k == std::io::ErrorKind::TimedOut);
        match timed_out {
            true => Why::Connect(format!("no connection within {:?}", self.connect_timeout)),
            false => Why::Connect(words(e)),
        }
    }
}

/// An open stream of answers from one endpoint.
pub(super) struct Stream {
    endpoint: String,
    doing: String,
    messages: Messages,
}

impl Stream {
    /// The endpoint this stream comes from.
    pub(super) fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The next answer (cancel-safe: dropping the future loses nothing). The stream's end is
    /// a failure too ([`Why::Ended`]): a watch does not end by itself.
    pub(super) async fn next(&mut self) -> Result<Value, Failed> {
        match self.messages.next().await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) => Err(self.failed(Why::Ended)),
            Err(why) => Err(self.failed(why)),
        }
    }

    /// A failure of this stream, naming its endpoint.
    pub(super) fn failed(&self, why: Why) -> Failed {
        Failed::new(&self.endpoint, &self.doing, why)
    }
}

/// An answer's body read as a sequence of JSON values (see the module doc).
struct Messages {
    body: Incoming,
    buffer: Vec<u8>,
    /// Set when what arrived may hold a whole value (a newline came, or the end).
    ready: bool,
    ended: bool,
}

impl Messages {
    fn new(body: Incoming) -> Messages {
        Messages {
            body,
            buffer: Vec::new(),
            ready: false,
            ended: false,
        }
    }

    /// The next value, unwrapped (`result`) and checked (`error`); `None` at the end.
    async fn next(&mut self) -> Result<Option<Value>, Why> {
        loop {
            if self.ready {
                if let Some(value) = self.parse_one()? {
                    return unwrap(value).map(Some);
                }
                if self.ended {
                    return match self.buffer.iter().all(u8::is_ascii_whitespace) {
                        true => Ok(None),
                        false => Err(Why::Malformed(format!(
                            "it ends within a JSON value: `{}`",
                            self.text()
                        ))),
                    };
                }
                self.ready = false;
            }
            match self.body.frame().await {
                None => (self.ended, self.ready) = (true, true),
                Some(Err(e)) => return Err(Why::Transport(words(&e))),
                Some(Ok(frame)) => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    }; // trailers
                    if self.buffer.len() + data.len() > MAX_ANSWER {
                        return Err(Why::Malformed(format!(
                            "an answer over {} MiB",
                            MAX_ANSWER >> 20
                        )));
                    }
                    self.ready = data.contains(&b'\n');
                    self.buffer.extend_from_slice(&data);
                }
            }
        }
    }

    /// The whole rest of the body, unparsed (an error's text), up to 64 KiB.
    async fn rest(&mut self) -> Result<Vec<u8>, Why> {
        while let Some(frame) = self.body.frame().await {
            let frame = frame.map_err(|e| Why::Transport(words(&e)))?;
            if let Ok(data) = frame.into_data() {
                self.buffer.extend_from_slice(&data);
                if self.buffer.len() > 64 << 10 {
                    break;
                }
            }
        }
        Ok(std::mem::take(&mut self.buffer))
    }

    /// The first whole value in the buffer, taken out of it; `None` if it holds none yet.
    fn parse_one(&mut self) -> Result<Option<Value>, Why> {
        let mut values = serde_json::Deserializer::from_slice(&self.buffer).into_iter::<Value>();
        match values.next() {
            None => {
                self.buffer.clear();
                Ok(None)
            }
            Some(Ok(value)) => {
                let used = values.byte_offset();
                self.buffer.drain(..used);
                Ok(Some(value))
            }
            Some(Err(e)) if e.is_eof() => Ok(None),
            Some(Err(e)) => Err(Why::Malformed(format!("not JSON ({e}): `{}`", self.text()))),
        }
    }

    /// What is in the buffer, as text for a message.
    fn text(&self) -> String {
        wire::shorten_str(String::from_utf8_lossy(&self.buffer).trim())
    }
}

/// A stream's `{"result":…}` unwrapped; an answer that is an error (`{"error":…}`) as one.
fn unwrap(mut value: Value) -> Result<Value, Why> {
    if let Some((message, code)) = wire::error_of(&value) {
        let status = value["error"]["http_code"].as_u64().unwrap_or(200);
        return Err(Why::Answered {
            status: u16::try_from(status).unwrap_or(200),
            code,
            message,
        });
    }
    match value.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => Ok(value),
    }
}

/// The kinds of the I/O errors in an error's chain.
fn io_kinds<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = std::io::ErrorKind> + 'a {
    std::iter::successors(Some(e), |e| e.source())
        .filter_map(|e| e.downcast_ref::<std::io::Error>().map(std::io::Error::kind))
}

/// An error from hyper in words: the common I/O failures said plainly, the rest as the chain
/// of causes (without hyper-util's `client error (Connect)` wrapper).
fn words(e: &(dyn std::error::Error + 'static)) -> String {
    use std::io::ErrorKind::*;
    for kind in io_kinds(e) {
        match kind {
            ConnectionRefused => return "connection refused".into(),
            ConnectionReset => return "connection reset".into(),
            ConnectionAborted => return "connection aborted".into(),
            BrokenPipe => return "connection closed while sending".into(),
            _ => {}
        }
    }
    let mut parts: Vec<String> = std::iter::successors(Some(e), |e| e.source())
        .filter(|e| !e.is::<hyper_util::client::legacy::Error>())
        .map(|e| e.to_string())
        .collect();
    parts.dedup();
    match parts.is_empty() {
        true => e.to_string(),
        false => parts.join(": "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_read_as_one_line_naming_each_endpoint() {
        let mut failed = Failed::new(
            "http://127.0.0.1:2379",
            "range /capstan/nodes/",
            Why::Connect("connection refused".into()),
        );
        assert_eq!(
            failed.to_string(),
            "etcd http://127.0.0.1:2379: range /capstan/nodes/: connection refused"
        );
        failed.attempts.push((
            "http://10.0.0.2:2379".into(),
            Why::NoAnswer(Duration::from_secs(5)),
        ));
        assert_eq!(
            failed.to_string(),
            "etcd http://127.0.0.1:2379: range /capstan/nodes/: connection refused; \
             http://10.0.0.2:2379: no answer within 5s"
        );
        let answered = Why::Answered {
            status: 401,
            code: Some(16),
            message: "etcdserver: user name is empty".into(),
        };
        assert_eq!(
            answered.to_string(),
            "etcd answered 401: etcdserver: user name is empty"
        );
        assert!(answered.is_final());
        assert!(!Why::Answered {
            status: 503,
            code: Some(14),
            message: "etcdserver: no leader".into()
        }
        .is_final());
        let gone = Failed::new(
            "http://h:1",
            "revoke lease 7",
            Why::Answered {
                status: 404,
                code: Some(5),
                message: "etcdserver: requested lease not found".into(),
            },
        );
        assert!(gone.not_found());
        assert!(!failed.not_found());
        assert_eq!(
            Why::Malformed("no header".into()).to_string(),
            "malformed answer: no header"
        );
        let e: Error = gone.into();
        assert!(matches!(e, Error::Etcd(m) if m.starts_with("etcd http://h:1: revoke lease 7: ")));
    }

    #[test]
    fn stream_results_are_unwrapped_and_stream_errors_are_failures() {
        let ok = serde_json::json!({"result": {"header": {"revision": "3"}}});
        assert_eq!(unwrap(ok).unwrap()["header"]["revision"], "3");
        let plain = serde_json::json!({"header": {}});
        assert_eq!(unwrap(plain.clone()).unwrap(), plain);
        let error = serde_json::json!({"error": {"grpc_code": 14, "http_code": 503,
            "message": "etcdserver: no leader"}});
        assert_eq!(
            unwrap(error).unwrap_err().to_string(),
            "etcd answered 503: etcdserver: no leader"
        );
    }

    #[test]
    fn io_errors_are_said_plainly() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(words(&refused), "connection refused");
        let other = std::io::Error::other("failed to lookup address information");
        assert_eq!(words(&other), "failed to lookup address information");
    }
}
