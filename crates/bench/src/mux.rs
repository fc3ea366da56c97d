//! Multiplexed connections for `--http3` (QUIC with quinn, HTTP/3 with h3) and `--http2`
//! (TLS with ALPN `h2`, HTTP/2 with hyper's client): several requests at once per connection.
//!
//! A lane keeps a [`Pool`] of connections; a request takes the least busy one with fewer than
//! `streams` requests in flight, or opens a new one while the lane has fewer than its limit.
//! So the open engine's `connections × streams` keep-alive workers share `connections`
//! connections, and a closed-loop run's clients share connections `streams` at a time. Without
//! keep-alive every request makes a connection of its own (a handshake per request, resumed
//! from the run's TLS session cache as a browser's would be).
//!
//! The connect time (`connect_ms`) is a connection's whole set-up: for HTTP/3 the QUIC
//! handshake (QUIC has no separate connect), for HTTP/2 the TCP connect, TLS handshake and
//! HTTP/2 preface. Each HTTP/3 connection has a UDP socket of its own (a quinn endpoint), bound
//! to the next source address when there are several (a client group behind `capstan wan`).

use std::cell::{Cell, RefCell};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Full};
use tokio::sync::Notify;

use crate::config::{BenchConfig, Protocol};
use crate::error::BenchError;
use crate::http::{ErrorKind, Response};

type H3Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;
type H2Sender = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// How a run opens its connections.
enum Transport {
    Quic(quinn::ClientConfig),
    Tls(tokio_rustls::TlsConnector),
}

/// What every multiplexed connection of a run needs, built once.
pub(crate) struct Client {
    transport: Transport,
    /// The TLS server name (the URL's host).
    server_name: String,
    /// `https://authority`, the prefix of every request's URI.
    origin: String,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    body: Option<Bytes>,
}

impl Client {
    /// The run's client for `--http2` or `--http3`; makes one connection to the first address
    /// first, so that a server that does not speak the protocol fails the run at once with
    /// the reason rather than every request with a count.
    pub async fn new(cfg: &BenchConfig, addrs: &[SocketAddr]) -> Result<Client, BenchError> {
        let mut headers = Vec::new();
        for (k, v) in &cfg.headers {
            let name = http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes())
                .map_err(|_| BenchError::Config(format!("bad header name {k:?}")))?;
            let value = http::HeaderValue::from_str(v)
                .map_err(|_| BenchError::Config(format!("bad value for header {k:?}")))?;
            headers.push((name, value));
        }
        let (transport, flag) = match cfg.protocol {
            Protocol::Http3 => (Transport::Quic(crate::tls::quic_client(cfg)?), "--http3"),
            _ => (Transport::Tls(crate::tls::h2_client(cfg)?), "--http2"),
        };
        let client = Client {
            transport,
            server_name: cfg.target.host.trim_matches(['[', ']']).to_string(),
            origin: format!("https://{}", cfg.target.authority()),
            headers,
            body: cfg.body.clone().map(Bytes::from),
        };
        let addr = addrs[0];
        // The probe may wait for a whole handshake over a slow path; the connect timeout alone
        // (500 ms by default, for retried TCP connects) would be too short for that.
        let wait = cfg.connect_timeout.max(Duration::from_secs(3));
        let from = cfg.bind.first().copied();
        // A connection's tasks are local to a lane's thread; the probe gets a thread of its
        // own likewise, so the caller's runtime (any flavour) only waits for it.
        let probe = tokio::task::spawn_blocking(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| format!("cannot start the probe: {e}"))?;
            let local = tokio::task::LocalSet::new();
            let r = local.block_on(&rt, async {
                client.connect(addr, from, wait).await.map(|c| c.close())
            });
            r.map(|()| client).map_err(|e| e.message)
        });
        match probe.await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(why)) => Err(BenchError::Io(format!(
                "{flag}: no connection to {addr}: {why}"
            ))),
            Err(_) => Err(BenchError::Io(format!("{flag}: the probe panicked"))),
        }
    }

    /// A new connection from source address `from`, within `wait`.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        from: Option<IpAddr>,
        wait: Duration,
    ) -> Result<MuxConn, ConnectFailure> {
        let deadline = tokio::time::Instant::now() + wait;
        match &self.transport {
            Transport::Quic(config) => self.connect_quic(config, addr, from, deadline).await,
            Transport::Tls(tls) => self.connect_h2(tls, addr, from, deadline).await,
        }
    }

    async fn connect_quic(
        &self,
        config: &quinn::ClientConfig,
        addr: SocketAddr,
        from: Option<IpAddr>,
        deadline: tokio::time::Instant,
    ) -> Result<MuxConn, ConnectFailure> {
        let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
        let unspecified = match addr {
            SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        let bind = SocketAddr::new(from.unwrap_or(unspecified), 0);
        let endpoint = quinn::Endpoint::client(bind).map_err(|e| {
            failure(
                ErrorKind::ConnectError,
                format!("cannot open a UDP socket on {bind}: {e}"),
            )
        })?;
        let connecting = endpoint
            .connect_with(config.clone(), addr, &self.server_name)
            .map_err(|e| {
                failure(
                    ErrorKind::ConnectError,
                    format!("cannot start a QUIC connection: {e}"),
                )
            })?;
        let conn = match tokio::time::timeout_at(deadline, connecting).await {
            Err(_) => {
                return Err(failure(
                    ErrorKind::ConnectTimeout,
                    format!(
                        "no QUIC handshake within {wait:?} (nothing answers on UDP port {}, or \
                         the path drops it)",
                        addr.port()
                    ),
                ))
            }
            Ok(Err(e)) => return Err(handshake_failure(&e)),
            Ok(Ok(c)) => c,
        };
        let h3 = h3::client::new(h3_quinn::Connection::new(conn.clone()));
        let (mut driver, send) = match tokio::time::timeout_at(deadline, h3).await {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                return Err(failure(
                    ErrorKind::BadResponse,
                    format!("HTTP/3 set-up failed after the QUIC handshake: {e}"),
                ))
            }
            Err(_) => {
                return Err(failure(
                    ErrorKind::ConnectTimeout,
                    format!("HTTP/3 set-up did not finish within {wait:?}"),
                ))
            }
        };
        let closed = Rc::new(Cell::new(false));
        let flag = closed.clone();
        // The connection's control streams are driven here until it closes.
        tokio::task::spawn_local(async move {
            let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
            flag.set(true);
        });
        Ok(MuxConn::new(
            Sender::H3(send),
            Closer::Quic(conn, endpoint),
            closed,
        ))
    }

    async fn connect_h2(
        &self,
        tls: &tokio_rustls::TlsConnector,
        addr: SocketAddr,
        from: Option<IpAddr>,
        deadline: tokio::time::Instant,
    ) -> Result<MuxConn, ConnectFailure> {
        let wait = deadline.saturating_duration_since(tokio::time::Instant::now());
        let tcp = crate::http::connect(addr, from, wait)
            .await
            .map_err(|k| failure(k, format!("TCP connect failed: {}", k.name())))?;
        let name = rustls::pki_types::ServerName::try_from(self.server_name.clone())
            .map_err(|_| failure(ErrorKind::Tls, "bad TLS server name".into()))?;
        let stream = match tokio::time::timeout_at(deadline, tls.connect(name, tcp)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                return Err(failure(
                    ErrorKind::Tls,
                    format!("TLS handshake failed: {e}"),
                ))
            }
            Err(_) => {
                return Err(failure(
                    ErrorKind::ConnectTimeout,
                    format!("no TLS handshake within {wait:?}"),
                ))
            }
        };
        if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(failure(
                ErrorKind::Tls,
                "the server did not choose ALPN h2 (it does not offer HTTP/2 over TLS)".into(),
            ));
        }
        let io = hyper_util::rt::TokioIo::new(stream);
        let hs = hyper::client::conn::http2::Builder::new(LocalExec).handshake(io);
        let (send, conn) = match tokio::time::timeout_at(deadline, hs).await {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                return Err(failure(
                    ErrorKind::BadResponse,
                    format!("HTTP/2 set-up failed: {e}"),
                ))
            }
            Err(_) => {
                return Err(failure(
                    ErrorKind::ConnectTimeout,
                    format!("HTTP/2 set-up did not finish within {wait:?}"),
                ))
            }
        };
        let closed = Rc::new(Cell::new(false));
        let flag = closed.clone();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::task::spawn_local(async move {
            tokio::select! {
                _ = conn => {}
                _ = stop_rx => {}
            }
            flag.set(true);
        });
        Ok(MuxConn::new(
            Sender::H2(send),
            Closer::H2(RefCell::new(Some(stop_tx))),
            closed,
        ))
    }

    /// The request for `method` and `path` (path and query) with the run's headers.
    fn request<B>(&self, method: &str, path: &str, body: B) -> Result<http::Request<B>, ErrorKind> {
        let mut b = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.origin))
            .header(http::header::USER_AGENT, "capstan-bench");
        for (k, v) in &self.headers {
            b = b.header(k, v);
        }
        b.body(body).map_err(|_| ErrorKind::BadResponse)
    }

    /// One request on `conn`: sends it (with the run's body), reads the whole response.
    pub async fn roundtrip(
        &self,
        conn: &MuxConn,
        method: &str,
        path: &str,
        head: bool,
    ) -> Result<Response, ErrorKind> {
        match &conn.sender {
            Sender::H3(send) => self.roundtrip_h3(send.clone(), method, path, head).await,
            Sender::H2(send) => self.roundtrip_h2(send.clone(), method, path).await,
        }
    }

    async fn roundtrip_h3(
        &self,
        mut send: H3Sender,
        method: &str,
        path: &str,
        head: bool,
    ) -> Result<Response, ErrorKind> {
        let req = self.request(method, path, ())?;
        let mut stream = send.send_request(req).await.map_err(stream_error)?;
        if let Some(body) = &self.body {
            stream.send_data(body.clone()).await.map_err(stream_error)?;
        }
        stream.finish().await.map_err(stream_error)?;
        let mut resp = stream.recv_response().await.map_err(stream_error)?;
        let first_byte = Instant::now();
        // Interim responses (103 Early Hints): the final one follows on the same stream.
        while resp.status().is_informational() {
            resp = stream.recv_response().await.map_err(stream_error)?;
        }
        let mut body_bytes = 0u64;
        let declared = declared_length(&resp, head);
        if declared != Some(0) {
            while let Some(chunk) = stream.recv_data().await.map_err(stream_error)? {
                body_bytes += chunk.remaining() as u64;
            }
        }
        body_matches(declared, body_bytes)?;
        let (parts, ()) = resp.into_parts();
        Ok(response(&parts, first_byte, body_bytes))
    }

    async fn roundtrip_h2(
        &self,
        mut send: H2Sender,
        method: &str,
        path: &str,
    ) -> Result<Response, ErrorKind> {
        let body = Full::new(self.body.clone().unwrap_or_default());
        let req = self.request(method, path, body)?;
        std::future::poll_fn(|cx| send.poll_ready(cx))
            .await
            .map_err(|_| ErrorKind::Closed)?;
        let resp = send.send_request(req).await.map_err(|e| hyper_error(&e))?;
        let first_byte = Instant::now();
        let (parts, mut body) = resp.into_parts();
        let mut body_bytes = 0u64;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| hyper_error(&e))?;
            if let Some(d) = frame.data_ref() {
                body_bytes += d.len() as u64;
            }
        }
        Ok(response(&parts, first_byte, body_bytes))
    }
}

/// Runs hyper's HTTP/2 connection tasks on the lane's own (single-threaded) task set.
#[derive(Clone, Copy)]
struct LocalExec;

impl<F> hyper::rt::Executor<F> for LocalExec
where
    F: std::future::Future + 'static,
{
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}

/// The body length an HTTP/3 response's head promises: none for a HEAD request, a 204 or a
/// 304 (RFC 9110 §6.4.1), else its Content-Length if it has one. h3 does not check it itself.
fn declared_length(resp: &http::Response<()>, head: bool) -> Option<u64> {
    let status = resp.status().as_u16();
    if head || status == 204 || status == 304 {
        return Some(0);
    }
    (resp.headers().get(http::header::CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

/// A body of another length than its Content-Length is malformed (RFC 9114 §4.1.2), not a
/// success with fewer bytes: a stream that ended short counts as `closed`, like HTTP/1.1's
/// EOF before the whole body (HTTP/2's is caught by h2 itself), one that ran over as
/// `bad_response`.
fn body_matches(declared: Option<u64>, got: u64) -> Result<(), ErrorKind> {
    match declared {
        Some(n) if got < n => Err(ErrorKind::Closed),
        Some(n) if got > n => Err(ErrorKind::BadResponse),
        _ => Ok(()),
    }
}

/// The figures of a response the statistics take, from its head.
fn response(parts: &http::response::Parts, first_byte: Instant, body_bytes: u64) -> Response {
    let status = parts.status.as_u16();
    let h = &parts.headers;
    let text = |name: &str| {
        h.get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let cache = crate::http::cache_mark(h.iter().map(|(k, v)| (k.as_str(), v.as_bytes())));
    Response {
        status,
        first_byte,
        body_bytes,
        cache,
        node: text("x-capstan-node"),
        content_type: text("content-type").map(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        }),
        reusable: true,
        location: text("location").filter(|_| (300..400).contains(&status)),
    }
}

/// Why a connection could not be made: the error counted, and the words for the probe.
#[derive(Debug)]
pub(crate) struct ConnectFailure {
    pub kind: ErrorKind,
    pub message: String,
}

fn failure(kind: ErrorKind, message: String) -> ConnectFailure {
    ConnectFailure { kind, message }
}

fn handshake_failure(e: &quinn::ConnectionError) -> ConnectFailure {
    use quinn::ConnectionError as E;
    let (kind, hint) = match e {
        E::TimedOut => (
            ErrorKind::ConnectTimeout,
            " (nothing answered the QUIC handshake)",
        ),
        E::TransportError(_) | E::ConnectionClosed(_) => (
            ErrorKind::Tls,
            " (the QUIC/TLS handshake failed: does the server speak HTTP/3 with ALPN h3, and \
             is its certificate trusted? --insecure or --cacert as for https)",
        ),
        E::VersionMismatch => (ErrorKind::ConnectError, " (no common QUIC version)"),
        _ => (ErrorKind::ConnectError, ""),
    };
    failure(kind, format!("QUIC handshake failed: {e}{hint}"))
}

/// A failed HTTP/3 stream as the error kinds of the JSON result.
fn stream_error(e: h3::error::StreamError) -> ErrorKind {
    use h3::error::StreamError as S;
    match e {
        S::RemoteTerminate { .. } | S::StreamError { .. } => ErrorKind::Reset,
        S::ConnectionError { .. } | S::RemoteClosing { .. } => ErrorKind::Closed,
        S::HeaderTooBig { .. } => ErrorKind::BadResponse,
        _ => ErrorKind::Io,
    }
}

/// A failed HTTP/2 exchange as the error kinds of the JSON result.
fn hyper_error(e: &hyper::Error) -> ErrorKind {
    if e.is_closed() || e.is_canceled() || e.is_incomplete_message() {
        ErrorKind::Closed
    } else if e.is_parse() || e.is_user() {
        ErrorKind::BadResponse
    } else {
        ErrorKind::Reset
    }
}

/// How requests go out on a connection.
enum Sender {
    H3(H3Sender),
    H2(H2Sender),
}

/// How a connection is closed.
enum Closer {
    /// The QUIC connection and its UDP socket (the endpoint), kept as long as it.
    Quic(quinn::Connection, #[allow(dead_code)] quinn::Endpoint),
    /// Ends the task that drives the HTTP/2 connection (dropping it closes the socket).
    H2(RefCell<Option<tokio::sync::oneshot::Sender<()>>>),
}

/// One connection carrying several requests at once.
pub(crate) struct MuxConn {
    sender: Sender,
    closer: Closer,
    /// Requests in flight on it.
    active: Cell<usize>,
    /// Set when the connection has closed (by either side, or an error).
    closed: Rc<Cell<bool>>,
    /// Which of the run's targets it goes to.
    pub target: usize,
}

impl MuxConn {
    fn new(sender: Sender, closer: Closer, closed: Rc<Cell<bool>>) -> MuxConn {
        MuxConn {
            sender,
            closer,
            active: Cell::new(0),
            closed,
            target: 0,
        }
    }

    fn usable(&self) -> bool {
        let open = match (&self.sender, &self.closer) {
            (_, Closer::Quic(c, _)) => c.close_reason().is_none(),
            (Sender::H2(s), _) => !s.is_closed(),
            _ => true,
        };
        open && !self.closed.get()
    }

    /// Closes the connection now (HTTP/3: "no error").
    pub fn close(&self) {
        match &self.closer {
            Closer::Quic(c, _) => c.close(0x100u32.into(), b"done"),
            Closer::H2(stop) => {
                if let Some(tx) = stop.borrow_mut().take() {
                    let _ = tx.send(());
                }
            }
        }
    }
}

/// A connection being opened, counted in the pool until the attempt ends (also when the
/// request gives up and drops the attempt).
struct Opening<'a>(&'a Pool);

impl<'a> Opening<'a> {
    fn new(pool: &'a Pool) -> Opening<'a> {
        pool.opening.set(pool.opening.get() + 1);
        Opening(pool)
    }
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.0.opening.set(self.0.opening.get() - 1);
        // Whether it opened or failed, a waiting request may now open one or use it.
        self.0.freed.notify_waiters();
    }
}

/// A lane's multiplexed connections.
pub(crate) struct Pool {
    conns: RefCell<Vec<Rc<MuxConn>>>,
    /// Connections being opened: they count against the limit already.
    opening: Cell<usize>,
    /// Most connections at once.
    pub max: Cell<usize>,
    /// Requests in flight per connection.
    pub streams: usize,
    /// A stream ended or a connection opened: a waiting request may go on.
    freed: Notify,
}

impl Pool {
    pub fn new(max: usize, streams: usize) -> Pool {
        Pool {
            conns: RefCell::new(Vec::new()),
            opening: Cell::new(0),
            max: Cell::new(max.max(1)),
            streams: streams.max(1),
            freed: Notify::new(),
        }
    }

    /// The least busy open connection with a free stream, if any (closed ones are let go).
    fn pick(&self) -> Option<Rc<MuxConn>> {
        let mut conns = self.conns.borrow_mut();
        conns.retain(|c| c.usable());
        conns
            .iter()
            .filter(|c| c.active.get() < self.streams)
            .min_by_key(|c| c.active.get())
            .cloned()
    }

    /// A connection with a free stream, taken (give it back with [`Pool::release`]); `open`
    /// makes a new one when none is free and the pool has room, else the request waits for a
    /// stream to end.
    pub async fn acquire<F, Fut>(&self, open: F) -> Result<Rc<MuxConn>, ErrorKind>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<MuxConn, ErrorKind>>,
    {
        loop {
            if let Some(c) = self.pick() {
                c.active.set(c.active.get() + 1);
                return Ok(c);
            }
            let live = self.conns.borrow().len() + self.opening.get();
            if live < self.max.get() {
                let opening = Opening::new(self);
                let r = open().await;
                drop(opening);
                let c = Rc::new(r?);
                c.active.set(1);
                self.conns.borrow_mut().push(c.clone());
                return Ok(c);
            }
            self.freed.notified().await;
        }
    }

    /// A request on `conn` has ended; a failed one drops the connection from the pool when the
    /// connection is no longer usable (the next request opens a new one).
    pub fn release(&self, conn: &Rc<MuxConn>, failed: bool) {
        conn.active.set(conn.active.get().saturating_sub(1));
        if failed && !conn.usable() {
            self.conns.borrow_mut().retain(|c| !Rc::ptr_eq(c, conn));
        }
        self.freed.notify_one();
    }
}
