//! HTTP/3 over QUIC (`quic = true` on a TLS `[[listener]]`): the UDP socket on the TCP
//! listener's address, quinn's endpoint on it, the defences in front of a new connection, and
//! each HTTP/3 request handed to [`crate::pipeline::handle`] like any other, its response
//! streamed back over its QUIC stream.
//!
//! Defences, in the order a new connection meets them:
//! - datagrams that cannot be QUIC (too short, fixed bit clear) are counted on the socket and
//!   dropped by quinn, which also drops anything else that is not a QUIC packet it can use;
//! - quinn's anti-amplification limit: before a client's address is validated the switch
//!   sends at most three times what it received from it (RFC 9000 §8.1);
//! - address validation: with more than `quic_retry_above` handshakes in progress, a client
//!   that has not proved its address (with a token from an earlier Retry) gets a stateless
//!   Retry first, so a flood of Initial packets from forged addresses costs no state;
//! - the connection limits of TCP connections: the listener's `max_connections`, the
//!   switch's `limits.max_connections` and the per-client-address limit; over any of them a
//!   new connection is refused (QUIC has no accept queue to leave it waiting in);
//! - the handshake must finish within `timeouts.header_read`;
//! - per connection: at most `quic_max_streams` request streams at once, closed after
//!   `timeouts.client_idle` without a packet; request heads limited like TCP ones;
//! - 0-RTT only with `quic_0rtt = true`, and then requests with unsafe methods wait until the
//!   handshake has finished (a replayed early request is then one of the safe methods only).
//!
//! One endpoint per listener, served by the switch's first worker thread. Shutdown sends each
//! connection a GOAWAY and lets its open streams finish (the switch waits for them, within
//! `timeouts.grace`, as it does for TCP connections); a reload serves new certificates from the
//! next handshake on and leaves open connections alone.

use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Method, Response};
use hyper::body::Body;

use crate::config::sections::listener::Congestion;
use crate::config::Config;
use crate::frontend::listener::Endpoint;
use crate::frontend::serve::OpenConnection;
use crate::net::client_body::{ClientBody, H3Body};
use crate::observe::quic_metrics::QuicCounters;
use crate::pipeline::response::ResponseBody;
use crate::state::connection_limits::ListenerLimits;
use crate::state::switch::{ClientTls, ConnState, Switch};

/// A QUIC listener: where it is, its limits and counters, and what it was started with.
pub(crate) struct QuicEndpoint {
    /// The address as configured (port 0 stays 0), to find the listener after a reload.
    configured: SocketAddr,
    pub limits: Arc<ListenerLimits>,
    pub counters: Arc<QuicCounters>,
    /// The TCP sibling's `Alt-Svc`, set once the UDP port is known.
    alt_svc: Arc<OnceLock<HeaderValue>>,
    alt_svc_max_age: u64,
    retry_above: usize,
    early_data: bool,
    /// The server configuration, built at start (its transport settings and the key of its
    /// Retry tokens stay), with the certificates of the configuration in force put in.
    server: Mutex<quinn::ServerConfig>,
}

impl QuicEndpoint {
    /// The QUIC listeners of `config`, each beside its TCP listener in `endpoints` (with whose
    /// per-client count it shares, as every listener without its own shares the switch-wide
    /// one).
    pub(crate) fn all(config: &Config, endpoints: &[(SocketAddr, Endpoint)]) -> Vec<QuicEndpoint> {
        let mut all = Vec::new();
        for l in &config.listeners {
            let Some(quic) = &l.quic else { continue };
            let Some((_, tcp)) = endpoints.iter().find(|(_, e)| e.configured() == l.address) else {
                continue;
            };
            let counters = Arc::new(QuicCounters::default());
            let limits =
                ListenerLimits::new(l.address, l.max_connections, tcp.limits.clients().cloned())
                    .quic(Arc::clone(&counters));
            // quinn's other defaults suit a lossy 100 ms path and are kept: a 1.25 MB stream
            // receive window (100 ms at 100 Mbit/s), loss declared after 3 packets or 9/8 of
            // a round trip (RFC 9002), 25 ms max_ack_delay, MTU discovery from 1,200 bytes.
            let mut transport = quinn::TransportConfig::default();
            transport
                .max_concurrent_bidi_streams(quic.max_streams.into())
                // The client's control stream and QPACK's two, and room for a spare.
                .max_concurrent_uni_streams(4u32.into())
                .max_idle_timeout(quinn::IdleTimeout::try_from(config.timeouts.client_idle).ok())
                .congestion_controller_factory(congestion(quic.congestion));
            let mut server = quinn::ServerConfig::with_crypto(Arc::clone(&quic.crypto) as _);
            server.transport_config(Arc::new(transport));
            all.push(QuicEndpoint {
                configured: l.address,
                limits: Arc::new(limits),
                counters,
                alt_svc: Arc::clone(&tcp.alt_svc),
                alt_svc_max_age: quic.alt_svc_max_age,
                retry_above: quic.retry_above,
                early_data: quic.early_data,
                server: Mutex::new(server),
            });
        }
        all
    }

    /// The address as configured.
    pub(crate) fn configured(&self) -> SocketAddr {
        self.configured
    }

    /// The server configuration for a new connection, with the certificates of the
    /// configuration in force (a reload's new files from the next handshake on).
    fn server_now(&self, config: &Config) -> Arc<quinn::ServerConfig> {
        let crypto = (config.listeners.iter())
            .find(|l| l.address == self.configured)
            .and_then(|l| l.quic.as_ref())
            .map(|q| Arc::clone(&q.crypto));
        let mut server = self.server.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(crypto) = crypto {
            server.crypto = crypto;
        }
        Arc::new(server.clone())
    }
}

/// RFC 9002 §7.2's initial window for QUIC's smallest datagrams (1,200 bytes): 10 of them, as
/// TCP's IW10 (RFC 6928) and quinn's CUBIC and NewReno start with.
const INITIAL_WINDOW: u64 = 10 * 1200;

/// The congestion controller of a listener's connections, `system` resolved with the kernel's
/// TCP choice: on a host whose TCP runs BBR, an HTTP/2 response rides BBR, and an HTTP/3 one
/// on quinn's default CUBIC would back off at every random loss that BBR ignores (at 2 % loss
/// on a 100 ms path, under 1 Mbit/s per connection against several). quinn's BBR starts with
/// 200 datagrams in flight; it gets the same initial window as the others, as TCP's.
fn congestion(chosen: Congestion) -> Arc<dyn quinn::congestion::ControllerFactory + Send + Sync> {
    let tcp = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").ok();
    match chosen.resolve(tcp.as_deref()) {
        Congestion::Bbr => {
            let mut bbr = quinn::congestion::BbrConfig::default();
            bbr.initial_window(INITIAL_WINDOW);
            Arc::new(bbr)
        }
        Congestion::NewReno => Arc::new(quinn::congestion::NewRenoConfig::default()),
        Congestion::Cubic | Congestion::System => {
            Arc::new(quinn::congestion::CubicConfig::default())
        }
    }
}

/// Binds the UDP socket of a QUIC listener on `addr` (the TCP sibling's bound address, so a
/// configured port 0 gives both the same port).
pub(crate) fn bind(addr: SocketAddr) -> io::Result<std::net::UdpSocket> {
    let socket = std::net::UdpSocket::bind(addr)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// Starts serving HTTP/3 on `socket` on the current runtime; returns the accept task.
pub(crate) fn serve(
    switch: &Arc<Switch>,
    socket: std::net::UdpSocket,
    endpoint: QuicEndpoint,
) -> io::Result<tokio::task::JoinHandle<()>> {
    let bound = socket.local_addr()?;
    endpoint.limits.bound_to(bound);
    if endpoint.alt_svc_max_age > 0 {
        let value = format!("h3=\":{}\"; ma={}", bound.port(), endpoint.alt_svc_max_age);
        if let Ok(value) = HeaderValue::from_str(&value) {
            let _ = endpoint.alt_svc.set(value);
        }
    }
    let runtime: Arc<dyn quinn::Runtime> = Arc::new(quinn::TokioRuntime);
    let socket = Arc::new(CountingSocket {
        inner: runtime.wrap_udp_socket(socket)?,
        counters: Arc::clone(&endpoint.counters),
    });
    let mut config = quinn::EndpointConfig::default();
    // Every packet from a peer then has QUIC's fixed bit set, so one without it is garbage.
    config.grease_quic_bit(false);
    let server = endpoint.server_now(&switch.cluster.load().config);
    let quinn = quinn::Endpoint::new_with_abstract_socket(
        config,
        Some((*server).clone()),
        socket,
        runtime,
    )?;
    tracing::info!("listening on udp://{bound} (HTTP/3)");
    Ok(tokio::spawn(accept_loop(
        Arc::clone(switch),
        quinn,
        Arc::new(endpoint),
    )))
}

/// Accepts new connections until shutdown, each past the defences (see the module's doc).
async fn accept_loop(switch: Arc<Switch>, quinn: quinn::Endpoint, endpoint: Arc<QuicEndpoint>) {
    let mut stop = switch.shutdown.subscribe();
    loop {
        let incoming = tokio::select! {
            incoming = quinn.accept() => incoming,
            _ = stop.wait_for(|s| *s) => break,
        };
        let Some(incoming) = incoming else { break };
        let counters = &endpoint.counters;
        let handshaking = counters.handshaking.load(Ordering::Relaxed) as usize;
        if handshaking >= endpoint.retry_above
            && !incoming.remote_address_validated()
            && incoming.may_retry()
        {
            counters.retries.fetch_add(1, Ordering::Relaxed);
            let _ = incoming.retry();
            continue;
        }
        let Some(slots) = endpoint.limits.try_slots(&switch.connection_slots) else {
            counters.refused.fetch_add(1, Ordering::Relaxed);
            incoming.refuse();
            continue;
        };
        let client = incoming.remote_address();
        let Ok(client_slot) = endpoint.limits.admit_client(client.ip()) else {
            tracing::debug!(%client, "QUIC connection refused: its address is at max_connections_per_client");
            counters.refused.fetch_add(1, Ordering::Relaxed);
            incoming.refuse();
            continue;
        };
        let open = OpenConnection::new(&switch, &endpoint.limits, slots);
        let server = endpoint.server_now(&switch.cluster.load().config);
        let switch = Arc::clone(&switch);
        let endpoint = Arc::clone(&endpoint);
        tokio::spawn(async move {
            let _held = (open, client_slot);
            if let Some(conn) = handshake(&switch, &endpoint, incoming, server).await {
                serve_connection(&switch, &endpoint, conn).await;
            }
        });
    }
    // No new connections; open ones finish (each got its GOAWAY) and then the endpoint's
    // driver stops with the last of them.
}

/// A connection counted as handshaking while it lives.
struct Handshaking<'a>(&'a QuicCounters);

impl Drop for Handshaking<'_> {
    fn drop(&mut self) {
        self.0.handshaking.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An accepted connection with what its requests need.
struct Established {
    conn: quinn::Connection,
    /// `Some` while 0-RTT data may still be arriving: becomes true when the handshake ends.
    confirmed: Option<tokio::sync::watch::Receiver<bool>>,
}

/// The handshake of a new connection, within `timeouts.header_read` (`None`: it failed).
async fn handshake(
    switch: &Switch,
    endpoint: &QuicEndpoint,
    incoming: quinn::Incoming,
    server: Arc<quinn::ServerConfig>,
) -> Option<Established> {
    let counters = &endpoint.counters;
    counters.handshaking.fetch_add(1, Ordering::Relaxed);
    let _handshaking = Handshaking(counters);
    let client = incoming.remote_address();
    let failed = |why: String| {
        tracing::debug!(%client, "QUIC handshake failed: {why}");
        counters.handshake_failures.fetch_add(1, Ordering::Relaxed);
        None
    };
    let connecting = match incoming.accept_with(server) {
        Ok(connecting) => connecting,
        Err(e) => return failed(e.to_string()),
    };
    let header_read = switch.cluster.load().config.timeouts.header_read;
    if endpoint.early_data {
        match connecting.into_0rtt() {
            Ok((conn, accepted)) => {
                let (tell, confirmed) = tokio::sync::watch::channel(false);
                tokio::spawn(async move {
                    accepted.await;
                    let _ = tell.send(true);
                });
                counters.handshakes.fetch_add(1, Ordering::Relaxed);
                return Some(Established {
                    conn,
                    confirmed: Some(confirmed),
                });
            }
            Err(connecting) => return finish(connecting, header_read, counters).await,
        }
    }
    finish(connecting, header_read, counters).await
}

async fn finish(
    connecting: quinn::Connecting,
    header_read: Duration,
    counters: &QuicCounters,
) -> Option<Established> {
    let why = match tokio::time::timeout(header_read, connecting).await {
        Ok(Ok(conn)) => {
            counters.handshakes.fetch_add(1, Ordering::Relaxed);
            return Some(Established {
                conn,
                confirmed: None,
            });
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => "timed out (timeouts.header_read)".to_string(),
    };
    tracing::debug!("QUIC handshake failed: {why}");
    counters.handshake_failures.fetch_add(1, Ordering::Relaxed);
    None
}

/// Serves the HTTP/3 requests of one connection until it ends: the client closes it, it is
/// idle past `timeouts.client_idle`, or (after its GOAWAY at shutdown) its last stream ends.
async fn serve_connection(switch: &Arc<Switch>, endpoint: &Arc<QuicEndpoint>, est: Established) {
    let Established { conn, confirmed } = est;
    let peer = conn.remote_address();
    let sni = (conn.handshake_data())
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name);
    let local = endpoint.limits.address();
    let state = ConnState::of(Some(crate::net::peer::Peer {
        client: peer,
        local,
        accepted: std::time::Instant::now(),
        tls: false,
    }));
    let _ = state.tls.set(ClientTls {
        sni: sni.map(|n| n.to_ascii_lowercase().into()),
    });
    let state = Arc::new(state);
    let max_head = {
        let limits = &switch.cluster.load().config.limits;
        (limits.max_request_line + limits.max_header_bytes + 64) as u64
    };
    let h3 = h3::server::builder()
        .max_field_section_size(max_head)
        .build::<_, Bytes>(h3_quinn::Connection::new(conn.clone()))
        .await;
    let mut h3 = match h3 {
        Ok(h3) => h3,
        Err(e) => {
            tracing::debug!(%peer, "HTTP/3 connection setup failed: {e}");
            return;
        }
    };
    let peer_header = crate::pipeline::dispatch::peer_header(peer);
    let mut stop = switch.shutdown.subscribe();
    // Requests of this connection not yet answered whole.
    let (open, mut none_open) = tokio::sync::watch::channel(0usize);
    let open = Arc::new(open);
    loop {
        let accepted = tokio::select! {
            accepted = h3.accept() => Some(accepted),
            _ = stop.wait_for(|s| *s) => None,
        };
        let Some(accepted) = accepted else {
            drain(&mut h3, &conn, &mut none_open).await;
            return;
        };
        let resolver = match accepted {
            Ok(Some(resolver)) => resolver,
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(%peer, "HTTP/3 connection ended: {e}");
                return;
            }
        };
        let request = H3Request {
            switch: Arc::clone(switch),
            state: Arc::clone(&state),
            peer_header: peer_header.clone(),
            counters: Arc::clone(&endpoint.counters),
            _open: OpenRequest::new(&open),
        };
        let confirmed = confirmed.clone();
        tokio::spawn(async move {
            let Ok((req, stream)) = resolver.resolve_request().await else {
                return;
            };
            request.counters.requests.fetch_add(1, Ordering::Relaxed);
            if let Some(mut confirmed) = confirmed.filter(|_| !is_safe(req.method())) {
                // Early data can be replayed: an unsafe request waits for the handshake.
                let _ = confirmed.wait_for(|done| *done).await;
            }
            Box::pin(request.answer(req, stream)).await;
        });
    }
}

/// A request of a connection counted open until it is dropped (answered whole, or given up).
struct OpenRequest(Arc<tokio::sync::watch::Sender<usize>>);

impl OpenRequest {
    fn new(open: &Arc<tokio::sync::watch::Sender<usize>>) -> Self {
        open.send_modify(|n| *n += 1);
        OpenRequest(Arc::clone(open))
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// Graceful shutdown of one connection: GOAWAY (no new requests), the open ones answered
/// whole, a moment for their last bytes to be acknowledged (a close drops unsent stream data,
/// and quinn does not say when a stream's data is acknowledged: up to three round trips, at
/// most a second, or until the client closes first), then the close.
async fn drain(
    h3: &mut h3::server::Connection<h3_quinn::Connection, Bytes>,
    conn: &quinn::Connection,
    none_open: &mut tokio::sync::watch::Receiver<usize>,
) {
    let peer = conn.remote_address();
    if let Err(e) = h3.shutdown(0).await {
        tracing::debug!(%peer, "HTTP/3 GOAWAY: {e}");
    }
    loop {
        tokio::select! {
            // Goes on reading the control stream and refusing streams past the GOAWAY.
            accepted = h3.accept() => match accepted {
                Ok(Some(_refused)) => continue,
                _ => break,
            },
            _ = none_open.wait_for(|n| *n == 0) => break,
        }
    }
    let linger = (conn.rtt() * 3).clamp(Duration::from_millis(20), Duration::from_secs(1));
    let _ = tokio::time::timeout(linger, conn.closed()).await;
    conn.close(0u32.into(), b"shutting down");
}

/// Methods a replayed 0-RTT request may carry (RFC 9110 §9.2.1).
fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

type H3Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;
type H3Send = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// One HTTP/3 request on its way through the pipeline.
struct H3Request {
    switch: Arc<Switch>,
    state: Arc<ConnState>,
    peer_header: HeaderValue,
    counters: Arc<QuicCounters>,
    _open: OpenRequest,
}

impl H3Request {
    async fn answer(self, req: http::Request<()>, stream: H3Stream) {
        let (mut send, recv) = stream.split();
        let length = (req.headers().get(http::header::CONTENT_LENGTH))
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let mut body = H3Body::new(recv, length);
        body.peek();
        let mut req = req.map(|()| ClientBody::H3(Box::new(body)));
        let (interim, mut heads) = tokio::sync::mpsc::unbounded_channel();
        req.extensions_mut()
            .insert(crate::pipeline::interim::Interim::channel(interim));
        let client_send = self.switch.cluster.load().config.timeouts.client_send;
        let handling = crate::pipeline::handle(self.switch, self.state, self.peer_header, req);
        let mut handling = std::pin::pin!(handling);
        // Interim heads (a node's 103) go out as they come, ahead of the final one.
        let answered = loop {
            tokio::select! {
                biased;
                Some(head) = heads.recv() => {
                    let sent = tokio::time::timeout(client_send, send.send_response(head)).await;
                    if !matches!(sent, Ok(Ok(()))) {
                        tracing::debug!("HTTP/3 interim response not sent");
                    }
                }
                answered = &mut handling => break answered,
            }
        };
        let resp = match answered {
            Ok(resp) => resp,
            Err(never) => match never {},
        };
        if let Err(e) = send_response(&mut send, resp, client_send).await {
            tracing::debug!("HTTP/3 response not sent whole: {e}");
            self.counters.streams_reset.fetch_add(1, Ordering::Relaxed);
            send.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
        }
    }
}

/// Fields HTTP/3 forbids in a message (RFC 9114 §4.2): an HTTP/1.1 node's may say them.
const CONNECTION_SPECIFIC: [&str; 5] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
];

/// Sends the response head, its body frame by frame (each write within `client_send`: a
/// client that stops reading has its stream reset) and its trailers, then ends the stream.
async fn send_response(
    send: &mut H3Send,
    resp: Response<ResponseBody>,
    client_send: Duration,
) -> Result<(), String> {
    let (mut parts, mut body) = resp.into_parts();
    for name in CONNECTION_SPECIFIC {
        parts.headers.remove(name);
    }
    parts.version = http::Version::HTTP_3;
    let in_time = |what: &'static str| {
        move |_| format!("{what}: client did not read within timeouts.client_send")
    };
    tokio::time::timeout(
        client_send,
        send.send_response(Response::from_parts(parts, ())),
    )
    .await
    .map_err(in_time("head"))?
    .map_err(|e| e.to_string())?;
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        let frame = match frame {
            None => break,
            Some(Ok(frame)) => frame,
            Some(Err(e)) => return Err(format!("response body: {e}")),
        };
        match frame.into_data() {
            Ok(data) => {
                if data.is_empty() {
                    continue;
                }
                tokio::time::timeout(client_send, send.send_data(data))
                    .await
                    .map_err(in_time("body"))?
                    .map_err(|e| e.to_string())?;
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    tokio::time::timeout(client_send, send.send_trailers(trailers))
                        .await
                        .map_err(in_time("trailers"))?
                        .map_err(|e| e.to_string())?;
                    break;
                }
            }
        }
    }
    // The body ended: the access log's line is written as `body` is dropped.
    drop(body);
    tokio::time::timeout(client_send, send.finish())
        .await
        .map_err(in_time("end"))?
        .map_err(|e| e.to_string())
}

/// The listener's UDP socket, counting what arrives and what cannot be QUIC (see
/// [`crate::observe::quic_metrics`]) before quinn reads it.
#[derive(Debug)]
struct CountingSocket {
    inner: Arc<dyn quinn::AsyncUdpSocket>,
    counters: Arc<QuicCounters>,
}

/// Shorter than this a datagram cannot be a QUIC packet: header protection samples 16 bytes
/// starting 4 after the packet number's first (RFC 9001 §5.4.2), behind at least a byte of
/// flags.
const SHORTEST_PACKET: usize = 21;
/// RFC 9000 §17.2, §17.3: set in every QUIC v1 packet.
const FIXED_BIT: u8 = 0x40;

impl quinn::AsyncUdpSocket for CountingSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn quinn::UdpPoller>> {
        Arc::clone(&self.inner).create_io_poller()
    }

    fn try_send(&self, transmit: &quinn::udp::Transmit) -> io::Result<()> {
        self.inner.try_send(transmit)
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [quinn::udp::RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let polled = self.inner.poll_recv(cx, bufs, meta);
        if let Poll::Ready(Ok(n)) = &polled {
            let (mut datagrams, mut garbage) = (0, 0);
            for (buf, meta) in bufs.iter().zip(meta.iter()).take(*n) {
                let stride = meta.stride.max(1);
                for datagram in buf[..meta.len].chunks(stride) {
                    datagrams += 1;
                    if datagram.len() < SHORTEST_PACKET || datagram[0] & FIXED_BIT == 0 {
                        garbage += 1;
                    }
                }
            }
            self.counters
                .datagrams
                .fetch_add(datagrams, Ordering::Relaxed);
            if garbage > 0 {
                self.counters.garbage.fetch_add(garbage, Ordering::Relaxed);
            }
        }
        polled
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    fn max_transmit_segments(&self) -> usize {
        self.inner.max_transmit_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}
