//! Listeners, client connections (with idle and header-read deadlines), graceful shutdown and
//! reload.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;

use crate::frontend::listener::Endpoint;
use crate::net::io::{Acceptor, LazyStream};

use crate::config::Config;
use crate::state::cluster::Cluster;
pub use crate::state::switch::{ConnState, Switch};

/// One accepted client connection, counted open (switch-wide and on its listener) and holding
/// its slots under the connection limits until it is dropped, whatever ends it.
struct OpenConnection {
    switch: Arc<Switch>,
    _on_listener: crate::state::connection_limits::OpenOnListener,
    _slots: crate::state::connection_limits::Slots,
}

impl OpenConnection {
    fn new(
        switch: &Arc<Switch>,
        endpoint: &Endpoint,
        slots: crate::state::connection_limits::Slots,
    ) -> Self {
        switch.open_connections.fetch_add(1, Ordering::AcqRel);
        switch.accepted_connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection {
            switch: Arc::clone(switch),
            _on_listener: endpoint.limits.opened(),
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

/// A switch serving on the current runtime (one worker; see [`run`] for one per core).
pub struct Running {
    /// The switch's shared state (cluster, counters, shutdown and reload).
    pub switch: Arc<Switch>,
    /// The bound client listeners (useful when the configuration asked for port 0).
    pub listen_addrs: Vec<SocketAddr>,
    /// The bound admin listener, when there is one.
    pub admin_addr: Option<SocketAddr>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Waits until shutdown has been asked for, then for open connections (of every worker) to
    /// finish, at most the grace period.
    pub async fn wait(self) {
        let mut rx = self.switch.shutdown.subscribe();
        let _ = rx.wait_for(|stop| *stop).await;
        let grace = self.switch.cluster.load().config.timeouts.grace;
        let drained = async {
            loop {
                let notified = self.switch.all_closed.notified();
                if self.switch.open_connections.load(Ordering::Acquire) == 0 {
                    break;
                }
                notified.await;
            }
        };
        if tokio::time::timeout(grace, drained).await.is_err() {
            tracing::warn!(
                open = self.switch.open_connections.load(Ordering::Relaxed),
                "grace period over; closing the remaining connections"
            );
        }
        for task in self.tasks {
            task.abort();
        }
    }
}

/// Every client address to bind, and what it speaks.
type Endpoints = Vec<(SocketAddr, Endpoint)>;

/// A switch for a validated configuration, not yet serving, and every client address it is
/// to bind with what it speaks.
fn new_switch(config: Config) -> anyhow::Result<(Arc<Switch>, Endpoints)> {
    config.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    let max_connections = config.limits.max_connections;
    let endpoints = Endpoint::all(&config);
    let cache = config
        .cache
        .as_ref()
        .map(crate::state::cache::CacheLayer::new)
        .transpose()?;
    let access_log = config
        .access_log
        .as_ref()
        .map(|log| crate::observe::access_log::AccessLog::open(log).map(Arc::new))
        .transpose()?;
    let cluster = Cluster::build(config, 1, None, 0).map_err(|e| anyhow::anyhow!("{e}"))?;
    let counters = endpoints
        .iter()
        .map(|(_, e)| (Arc::clone(&e.limits), e.tls_counters.clone()))
        .collect();
    let switch = Switch::new(cluster, cache, access_log, counters, max_connections);
    Ok((switch, endpoints))
}

/// Binds the listeners and starts serving on the current runtime, as one worker. Returns once
/// everything is listening.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    let admin = config.admin;
    let (switch, endpoints) = new_switch(config)?;
    let listeners = endpoints
        .into_iter()
        .map(|(addr, endpoint)| Ok((bind(addr, false)?, endpoint)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let admin = admin.map(bind_admin).transpose()?;
    serve_on(switch, listeners, admin, true)
}

/// Serves already-bound listeners on the current runtime.
/// The primary worker also serves the admin listener and gathers node loads.
fn serve_on(
    switch: Arc<Switch>,
    listeners: Vec<(std::net::TcpListener, Endpoint)>,
    admin: Option<std::net::TcpListener>,
    primary: bool,
) -> anyhow::Result<Running> {
    let mut tasks = Vec::new();
    let mut listen_addrs = Vec::new();
    let configured = switch.cluster.load().config.proxy_protocol.clone();
    // This worker's silent connections are closed by its own reaper (see [`crate::net::reaper`]).
    let reaper = Arc::new(SilentReaper::default());
    for (listener, endpoint) in listeners {
        let listener = Acceptor::new(listener)?;
        listen_addrs.push(listener.local_addr()?);
        endpoint.limits.bound_to(listener.local_addr()?);
        let proxied = configured.accepts_on(endpoint.configured());
        let accepting = accept_loop(
            Arc::clone(&switch),
            listener,
            Arc::new(endpoint),
            proxied,
            Arc::clone(&reaper),
        );
        tasks.push(tokio::spawn(accepting));
    }
    tasks.push(tokio::spawn(reaper.run()));
    if primary {
        tasks.push(tokio::spawn(crate::control::gather::gather_loads(
            Arc::clone(&switch),
        )));
        tasks.push(tokio::spawn(crate::control::health::check_nodes(
            Arc::clone(&switch),
        )));
        if switch.cache.is_some() {
            tasks.push(tokio::spawn(sample_cache(Arc::clone(&switch))));
        }
    }
    let admin_addr = match admin {
        Some(listener) => {
            let listener = TcpListener::from_std(listener)?;
            let bound = listener.local_addr()?;
            tasks.push(tokio::spawn(crate::control::admin::serve(
                Arc::clone(&switch),
                listener,
            )));
            Some(bound)
        }
        None => None,
    };
    Ok(Running {
        switch,
        listen_addrs,
        admin_addr,
        tasks,
    })
}

/// Samples the cache's hit ratio for the status page's chart.
async fn sample_cache(switch: Arc<Switch>) {
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    let mut stop = switch.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        if let Some(cache) = &switch.cache {
            cache.sample(switch.epoch.now_nanos() as f64 / 1e9);
        }
    }
}

/// A listening socket; with `reuse_port` several workers can each accept on the same address
/// and the kernel spreads connections among them.
fn bind(addr: SocketAddr, reuse_port: bool) -> anyhow::Result<std::net::TcpListener> {
    let bind = || -> io::Result<std::net::TcpListener> {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        socket.set_reuse_address(true)?;
        if reuse_port {
            socket.set_reuse_port(true)?;
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(4096)?;
        Ok(socket.into())
    };
    bind().with_context(|| format!("cannot listen on {addr}"))
}

fn bind_admin(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    bind(addr, false).with_context(|| "admin listener".to_string())
}

/// A connection closed for sending nothing, with what counts it as open (see
/// [`crate::net::reaper`]).
type Silent = (
    LazyStream,
    OpenConnection,
    Option<crate::state::connection_limits::ClientSlot>,
);
type SilentReaper = crate::net::reaper::Reaper<Silent>;

async fn accept_loop(
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
        let open = OpenConnection::new(&switch, &endpoint, slots);
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
                return Box::pin(crate::state::connection_limits::turn_away(stream, answer)).await;
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
        });
    }
    let settings = &config.proxy_protocol;
    let header_read = config.timeouts.header_read;
    let rejections = &switch.proxy_rejections;
    let header = crate::upstream::proxy_protocol::accept(
        stream,
        peer,
        listening,
        settings,
        header_read,
        rejections,
    );
    match Box::pin(header).await {
        Ok((client, local)) => Some(crate::net::peer::Peer {
            client,
            local,
            accepted,
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
    let state = Arc::new(ConnState::of(Some(client)));
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
        service_fn(move |req| {
            Box::pin(crate::pipeline::handle(
                Arc::clone(&switch),
                Arc::clone(&state),
                peer.clone(),
                req,
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

/// Runs the switch until SIGTERM or SIGINT (SIGHUP reloads the configuration), with `threads`
/// workers, each a single-threaded runtime on its own thread accepting on its own `SO_REUSEPORT`
/// socket — the thread-per-core shape of nginx and HAProxy, which avoids cross-thread wake-ups
/// on the request path. Blocks until the switch has stopped.
pub fn run(config: Config, threads: usize) -> anyhow::Result<()> {
    let threads = threads.max(1);
    let admin = config.admin;
    let (switch, endpoints) = new_switch(config)?;
    // SO_REUSEPORT would also let this switch share a port with another process of the same
    // user, splitting its traffic silently; a plain bind first makes a taken port an error.
    let listen = endpoints
        .iter()
        .map(|(addr, _)| Ok(bind(*addr, false)?.local_addr()?))
        .collect::<anyhow::Result<Vec<SocketAddr>>>()?;
    let first = listen
        .iter()
        .zip(&endpoints)
        .map(|(&addr, (_, endpoint))| Ok((bind(addr, threads > 1)?, endpoint.clone())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let bound: Vec<SocketAddr> = first
        .iter()
        .map(|(l, _)| l.local_addr())
        .collect::<io::Result<_>>()?;
    let mut workers = Vec::new();
    for _ in 1..threads {
        workers.push(
            bound
                .iter()
                .zip(&endpoints)
                .map(|(&addr, (_, endpoint))| Ok((bind(addr, true)?, endpoint.clone())))
                .collect::<anyhow::Result<Vec<_>>>()?,
        );
    }
    let admin = admin.map(bind_admin).transpose()?;
    for (addr, (_, endpoint)) in bound.iter().zip(&endpoints) {
        let scheme = endpoint.scheme();
        tracing::info!("listening on {scheme}://{addr} ({threads} worker threads)");
    }
    if let Some(admin) = &admin {
        tracing::info!(
            "admin on http://{}/ (status page, /status, /metrics, POST /reload, /nodes)",
            admin.local_addr()?
        );
    }
    let mut handles = Vec::new();
    for (i, listeners) in workers.into_iter().enumerate() {
        let switch = Arc::clone(&switch);
        let handle = std::thread::Builder::new()
            .name(format!("capstan-worker-{}", i + 1))
            .spawn(move || -> anyhow::Result<()> {
                single_thread_runtime()?.block_on(async move {
                    serve_on(switch, listeners, None, false)?.wait().await;
                    Ok(())
                })
            })
            .context("cannot start a worker thread")?;
        handles.push(handle);
    }
    let served = single_thread_runtime()?.block_on(async {
        let running = serve_on(Arc::clone(&switch), first, admin, true)?;
        spawn_signal_handlers(Arc::clone(&switch))?;
        running.wait().await;
        anyhow::Ok(())
    });
    if served.is_err() {
        switch.shutdown();
    }
    for handle in handles {
        match handle.join() {
            Ok(result) => result?,
            Err(_) => anyhow::bail!("a worker thread panicked"),
        }
    }
    served?;
    tracing::info!("stopped");
    Ok(())
}

fn single_thread_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")
}

fn spawn_signal_handlers(switch: Arc<Switch>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut usr1 = signal(SignalKind::user_defined1())?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => {
                    if let Err(e) = switch.reload().await {
                        tracing::error!("reload refused, the old configuration keeps serving: {e}");
                    }
                    continue;
                }
                _ = usr1.recv() => {
                    if let Some(log) = &switch.access_log {
                        tracing::info!("SIGUSR1: reopening the access log");
                        log.reopen();
                    }
                    continue;
                }
            }
        }
        tracing::info!("shutting down: no new connections, finishing in-flight requests");
        switch.shutdown();
    });
    Ok(())
}
