//! Serving client connections: the accept loop (connection limits, PROXY headers, the
//! reaper of silent connections), TLS handshakes, HTTP/1.1 or HTTP/2 by what the connection
//! speaks, each connection's watchdog (header-read, idle and client-send deadlines) and
//! graceful shutdown. Every request goes to [`crate::pipeline::handle`].

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::frontend::listener::Endpoint;
use crate::net::io::{Acceptor, LazyStream};

use crate::state::switch::{ConnState, Switch};

/// One accepted client connection, counted open (switch-wide and on its listener) and holding
/// its slots under the connection limits until it is dropped, whatever ends it.
pub(crate) struct OpenConnection {
    switch: Arc<Switch>,
    _on_listener: crate::state::connection_limits::OpenOnListener,
    _slots: crate::state::connection_limits::Slots,
}

impl OpenConnection {
    pub(crate) fn new(
        switch: &Arc<Switch>,
        limits: &Arc<crate::state::connection_limits::ListenerLimits>,
        slots: crate::state::connection_limits::Slots,
    ) -> Self {
        switch.open_connections.fetch_add(1, Ordering::AcqRel);
        switch.accepted_connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            switch: Arc::clone(switch),
            _on_listener: limits.opened(),
            _slots: slots,
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.switch.connection_closed();
    }
}

/// A deadline that closes a client connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expired {
    HeaderRead,
    ClientSend,
    ClientIdle,
}

impl Expired {
    fn why(self) -> &'static str {
        match self {
            Expired::HeaderRead => "request head not received within the header-read timeout",
            Expired::ClientSend => "client did not read its response within timeouts.client_send",
            Expired::ClientIdle => "connection idle past the client idle timeout",
        }
    }
}

/// Watches one connection's deadlines, one tick at a time.
struct Watchdog {
    tick: Duration,
    idle_ticks: u64,
    header_ticks: u64,
    send_ticks: u64,
    last_activity: u64,
    quiet_ticks: u64,
    /// An HTTP/2 connection's streams, each with its own `client_send` deadline.
    streams: Option<Arc<crate::frontend::send_timeout::StreamSends>>,
}

impl Watchdog {
    fn new(idle: Duration, header_read: Duration, client_send: Duration) -> Self {
        let shortest = idle.min(header_read).min(client_send);
        let tick = (shortest / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let in_ticks = |d: Duration| (d.as_nanos() / tick.as_nanos().max(1)).max(1) as u64;
        Watchdog {
            tick,
            idle_ticks: in_ticks(idle),
            header_ticks: in_ticks(header_read),
            send_ticks: in_ticks(client_send),
            last_activity: 0,
            quiet_ticks: 0,
            streams: None,
        }
    }

    /// Also watches the streams of an HTTP/2 connection.
    fn with_streams(mut self, streams: Arc<crate::frontend::send_timeout::StreamSends>) -> Self {
        self.streams = Some(streams);
        self
    }

    /// Called once per tick: closes the connection (returning why) if a deadline has passed,
    /// else cuts the HTTP/2 streams whose client stopped taking their response. Counts both
    /// kinds of `client_send` cut.
    fn on_tick(
        &mut self,
        state: &ConnState,
        cuts: &crate::state::counters::ClientSendTimeouts,
    ) -> Option<Expired> {
        let expired = self.check(state);
        if expired == Some(Expired::ClientSend) {
            cuts.connections.fetch_add(1, Ordering::Relaxed);
        }
        if let (None, Some(streams)) = (expired, &self.streams) {
            let now = state.ticks.load(Ordering::Relaxed);
            let cut = streams.tick(now, self.send_ticks);
            cuts.h2_streams.fetch_add(cut, Ordering::Relaxed);
        }
        expired
    }

    /// Why the connection should be closed now, if it should.
    fn check(&mut self, state: &ConnState) -> Option<Expired> {
        let now = state.ticks.fetch_add(1, Ordering::Relaxed) + 1;
        let activity = state.activity.load(Ordering::Relaxed);
        if activity == self.last_activity {
            self.quiet_ticks += 1;
        } else {
            self.last_activity = activity;
            self.quiet_ticks = 0;
        }
        let head = state.head_started.load(Ordering::Relaxed);
        if head != 0 && now.saturating_sub(head - 1) > self.header_ticks {
            return Some(Expired::HeaderRead);
        }
        let blocked = state.write_blocked.load(Ordering::Relaxed);
        if blocked != 0 {
            // A client that does not read its response is not idle: `client_send` decides.
            return (now.saturating_sub(blocked - 1) > self.send_ticks)
                .then_some(Expired::ClientSend);
        }
        if self.quiet_ticks > self.idle_ticks {
            return Some(Expired::ClientIdle);
        }
        None
    }
}

/// A client socket that tells its [`ConnState`] when bytes move.
struct TrackedStream {
    inner: LazyStream,
    state: Arc<ConnState>,
}

impl AsyncRead for TrackedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.state.on_read();
        }
        polled
    }
}

impl AsyncWrite for TrackedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.state.wrote(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.state.wrote(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A connection closed for sending nothing, with what counts it as open (see
/// [`crate::net::reaper`]).
type Silent = (
    LazyStream,
    OpenConnection,
    Option<crate::state::connection_limits::ClientSlot>,
);
pub(crate) type SilentReaper = crate::net::reaper::Reaper<Silent>;

pub(crate) async fn accept_loop(
    switch: Arc<Switch>,
    listener: Acceptor,
    endpoint: Arc<Endpoint>,
    proxied: bool,
    reaper: Arc<SilentReaper>,
) {
    let mut stop = switch.shutdown.subscribe();
    let listening = match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => {
            tracing::error!("listener lost its address: {e}");
            return;
        }
    };
    loop {
        // The slots come before the accept: while there are none, connections wait in the
        // kernel's accept queue rather than in the switch's memory.
        let slots = tokio::select! {
            slots = endpoint.limits.slots(&switch.connection_slots) => match slots {
                Some(slots) => slots,
                None => return,
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|s| *s) => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        // Counted open, and its slots held, until this task ends, however it ends.
        let open = OpenConnection::new(&switch, &endpoint.limits, slots);
        let switch = Arc::clone(&switch);
        let endpoint = Arc::clone(&endpoint);
        let reaper = Arc::clone(&reaper);
        // Every future below that is not needed while a connection waits is boxed: the task
        // is allocated at the size of its largest state, so anything inline here (a TLS
        // handshake, a 429 answer, hyper's connection) would be paid by every idle client.
        tokio::spawn(async move {
            let mut stream = stream;
            let Some(peer) = client_of(&switch, &mut stream, peer, listening, proxied).await else {
                return;
            };
            // After a PROXY header: the limit counts the client it names, not the balancer.
            let Ok(client_slot) = endpoint.limits.admit_client(peer.client.ip()) else {
                tracing::debug!(client = %peer.client, "turned away: its address is at max_connections_per_client");
                let answer = endpoint.scheme() == "http";
                return Box::pin(crate::frontend::turn_away::turn_away(stream, answer)).await;
            };
            if let Some(silent) = serve_connection(&switch, stream, peer, &endpoint).await {
                reaper.close((silent, open, client_slot));
            }
        });
    }
}

/// Who the client is: the socket's peer, or on a PROXY protocol listener the address in the
/// header a trusted balancer sent (`None`: the connection is to be closed).
async fn client_of(
    switch: &Switch,
    stream: &mut LazyStream,
    peer: SocketAddr,
    listening: SocketAddr,
    proxied: bool,
) -> Option<crate::net::peer::Peer> {
    let accepted = std::time::Instant::now();
    let cluster = switch.cluster.load_full();
    let config = &cluster.config;
    // A wildcard listener does not say which address was reached; a PROXY header sent on to a
    // node must (one system call, only then).
    let sends_proxy =
        config.proxy_protocol.send != crate::config::sections::proxy_protocol::SendVersion::Off;
    let listening = match listening.ip().is_unspecified() && sends_proxy {
        true => stream.local_addr().unwrap_or(listening),
        false => listening,
    };
    if !proxied {
        return Some(crate::net::peer::Peer {
            client: peer,
            local: listening,
            accepted,
            tls: false,
        });
    }
    let settings = &config.proxy_protocol;
    let header_read = config.timeouts.header_read;
    let rejections = &switch.proxy_rejections;
    let header = crate::frontend::proxy_accept::accept(
        stream,
        peer,
        listening,
        settings,
        header_read,
        rejections,
    );
    match Box::pin(header).await {
        Ok((client, local, tls)) => Some(crate::net::peer::Peer {
            client,
            local,
            accepted,
            tls,
        }),
        Err(why) => {
            tracing::debug!("PROXY protocol listener {listening}: {why}");
            None
        }
    }
}

/// Serves one client connection; a silent one (no bytes within `header_read`) comes back
/// unclosed, for the worker's reaper.
async fn serve_connection(
    switch: &Arc<Switch>,
    mut stream: LazyStream,
    client: crate::net::peer::Peer,
    endpoint: &Endpoint,
) -> Option<LazyStream> {
    let peer = client.client;
    use crate::frontend::listener::{negotiated, sniff_h2c, Protocol};
    use crate::state::switch::ClientTls;
    let (start, header_read) = {
        let cluster = switch.cluster.load();
        let config = &cluster.config;
        (endpoint.start(config), config.timeouts.header_read)
    };
    // A client that connects and stays silent gets `header_read` to start its request (or its
    // TLS handshake), as a started request gets to finish its head, not the whole idle timeout;
    // and it costs no buffers (hyper's, TLS's) meanwhile.
    match stream.first_bytes(header_read).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!(%peer, "closing client connection: no request within header_read");
            return Some(stream);
        }
        Err(e) => {
            tracing::debug!(%peer, "client connection ended before a request: {e}");
            return None;
        }
    }
    let state = Arc::new(ConnState::of(Some(client)).with_alt_svc(endpoint.alt_svc.get().cloned()));
    let io = TrackedStream {
        inner: stream,
        state: Arc::clone(&state),
    };
    match start.tls {
        Some(tls) => {
            let counters = endpoint.tls_counters.as_deref();
            let handshake = Box::pin(tls_handshake(io, tls, header_read, peer, counters));
            let tls_stream = handshake.await?;
            let protocol = negotiated(tls_stream.get_ref().1);
            let _ = state.tls.set(ClientTls::of(tls_stream.get_ref().1));
            Box::pin(serve_http(switch, tls_stream, peer, state, protocol)).await;
        }
        None if start.h2c => {
            let sniff = Box::pin(tokio::time::timeout(header_read, sniff_h2c(io)));
            let (protocol, io) = match sniff.await {
                Ok(Ok(sniffed)) => sniffed,
                _ => return None,
            };
            Box::pin(serve_http(switch, io, peer, state, protocol)).await;
        }
        None => Box::pin(serve_http(switch, io, peer, state, Protocol::Http1)).await,
    }
    None
}

/// The server side of a TLS handshake, counted on the listener's `counters` once it ends
/// (`None`: it failed or timed out, and the connection is to be closed).
async fn tls_handshake<I>(
    io: I,
    tls: Arc<rustls::ServerConfig>,
    header_read: Duration,
    peer: SocketAddr,
    counters: Option<&crate::observe::tls_metrics::TlsCounters>,
) -> Option<tokio_rustls::server::TlsStream<I>>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use crate::observe::tls_metrics::HandshakeFailure;
    let started = std::time::Instant::now();
    // The handshake is part of the request head's time.
    let accept = tokio_rustls::TlsAcceptor::from(tls).accept(io);
    let failure = match tokio::time::timeout(header_read, accept).await {
        Ok(Ok(stream)) => {
            if let Some(counters) = counters {
                counters.completed(stream.get_ref().1, started.elapsed());
            }
            return Some(stream);
        }
        Ok(Err(e)) => {
            tracing::debug!(%peer, "TLS handshake failed: {e}");
            HandshakeFailure::of(&e)
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            HandshakeFailure::Timeout
        }
    };
    if let Some(counters) = counters {
        counters.failed(failure);
    }
    None
}

/// Serves HTTP/1.1 or HTTP/2 on a client connection (TLS already terminated, if any).
async fn serve_http<I>(
    switch: &Arc<Switch>,
    io: I,
    peer: SocketAddr,
    state: Arc<ConnState>,
    protocol: crate::frontend::listener::Protocol,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let cluster = switch.cluster.load_full();
    let config = &cluster.config;
    let t = &config.timeouts;
    let (idle, header_read, client_send) = (t.client_idle, t.header_read, t.client_send);
    let service = {
        let switch = Arc::clone(switch);
        let state = Arc::clone(&state);
        let peer = crate::pipeline::dispatch::peer_header(peer);
        // Boxed: hyper keeps a slot for the request future in every connection from the start,
        // so an unboxed future (the whole proxy path, several KB) would be paid by every idle
        // connection rather than only while a request runs.
        service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            Box::pin(crate::pipeline::handle(
                Arc::clone(&switch),
                Arc::clone(&state),
                peer.clone(),
                req.map(crate::net::client_body::ClientBody::Hyper),
            ))
        })
    };
    if let crate::frontend::listener::Protocol::Http2 = protocol {
        // A client can stall one stream without blocking the socket: each stream gets its own
        // `client_send` deadline (see `crate::frontend::send_timeout`).
        let streams = Arc::new(crate::frontend::send_timeout::StreamSends::default());
        let watched = {
            let streams = Arc::clone(&streams);
            service_fn(move |req| {
                let answer = hyper::service::Service::call(&service, req);
                let streams = Arc::clone(&streams);
                async move { answer.await.map(|resp| streams.watch(resp)) }
            })
        };
        // Many streams answered in one turn leave in one write (see `crate::net::cork`).
        let (io, cork) = crate::net::cork::cork(io);
        let conn = config
            .http2
            .builder()
            .serve_connection(TokioIo::new(io), watched);
        let conn = cork.flush_after_poll(conn);
        drop(cluster);
        // Between requests an HTTP/2 client may send PINGs and SETTINGS; only `client_idle`
        // without a request closes its connection.
        let deadlines = Watchdog::new(idle, idle, client_send).with_streams(streams);
        let graceful = |mut conn: Pin<&mut crate::net::cork::FlushAfterPoll<_, _>>| {
            hyper::server::conn::http2::Connection::graceful_shutdown(conn.conn())
        };
        return Box::pin(drive(switch, conn, graceful, &state, peer, deadlines)).await;
    }
    let mut builder = http1::Builder::new();
    builder
        .keep_alive(true)
        // Do not read from the client while its request is being answered only to notice that
        // it went away (HAProxy's default too, without `option abortonclose`): that read would
        // fail with EAGAIN on nearly every request and cost the registration with the event
        // loop that a one-request connection otherwise never needs (see `crate::net::io`). A
        // client that half-closes after its request still gets the answer.
        .half_close(true)
        .header_read_timeout(None)
        .max_header_size(config.limits.max_request_line + config.limits.max_header_bytes + 64);
    if config.limits.max_headers != 100 {
        builder.max_headers(config.limits.max_headers);
    }
    drop(cluster);
    // Upgrades (WebSocket) hand the connection to a tunnel (see `crate::pipeline::tunnel`).
    let conn = builder
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades();
    let graceful = http1::UpgradeableConnection::graceful_shutdown;
    let deadlines = Watchdog::new(idle, header_read, client_send);
    Box::pin(drive(switch, conn, graceful, &state, peer, deadlines)).await;
}

/// Runs a client connection to its end: until the protocol finishes it, the watchdog finds a
/// deadline passed, or (after a graceful close on shutdown) the last request is answered.
async fn drive<C, G>(
    switch: &Arc<Switch>,
    conn: C,
    graceful: G,
    state: &ConnState,
    peer: SocketAddr,
    mut watchdog: Watchdog,
) where
    C: std::future::Future<Output = hyper::Result<()>>,
    G: Fn(Pin<&mut C>),
{
    let mut conn = std::pin::pin!(conn);
    let mut stop = switch.shutdown.subscribe();
    let mut stopping = *stop.borrow();
    if stopping {
        graceful(conn.as_mut());
    }
    let mut ticker =
        tokio::time::interval_at(tokio::time::Instant::now() + watchdog.tick, watchdog.tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(%peer, "client connection ended: {e}");
                }
                return;
            }
            _ = stop.wait_for(|s| *s), if !stopping => {
                stopping = true;
                graceful(conn.as_mut());
            }
            _ = ticker.tick() => {
                if let Some(expired) = watchdog.on_tick(state, &switch.client_send_timeouts) {
                    tracing::debug!(%peer, "closing client connection: {}", expired.why());
                    return;
                }
            }
        }
    }
}
