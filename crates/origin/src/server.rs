//! Serving a node: the listeners (plain, TLS, the report address), the accept loops, one task
//! per connection, and the running node's handle ([`RunningOrigin`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use capstan_workload::DocTree;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config::{self, OriginConfig};
use crate::error::OriginError;
use crate::{processes, service, tls};

/// A node that is up and serving.
pub struct RunningOrigin {
    addr: SocketAddr,
    tls_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl RunningOrigin {
    /// The address actually bound (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The TLS listener's address actually bound, when there is one (`tls_listen`).
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// Stop accepting connections and wait for the accept loop to end. Connections already open
    /// finish their current requests on their own.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }

    /// Wait until the accept loop ends (it only ends on shutdown).
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Build the node (generate the tree; in real mode write it to disk and calibrate the CPU loop),
/// bind the listener and start serving in the background on the current runtime. This is the
/// in-process form (tests, the lab); [`serve_threads`] is the faster one-runtime-per-thread form
/// the `capstan origin` command uses.
pub async fn start(config: OriginConfig) -> Result<RunningOrigin, OriginError> {
    config.validate()?;
    let tree = DocTree::generate(config.tree, config.seed, config.files)?;
    let listener = bind(config.listen, false, config.backlog)?;
    let addr = local_addr(&listener, config.listen)?;
    let listener = from_std(listener, config.listen)?;
    let report = bind_report(&config)?;
    let tls = bind_tls(&config, 1)?;
    let node = service::Node::build(config, tree, addr).await?;
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(ticker(Arc::downgrade(&node)));
    if let Some((l, a)) = report {
        tokio::spawn(report_loop(node.clone(), from_std(l, a)?, stopped.clone()));
    }
    let (mut tls, tls_addr) = per_worker(tls, 1);
    spawn_tls(&node, tls.remove(0), &stopped)?;
    let task = tokio::spawn(accept_loop(node, listener, stopped, true));
    Ok(RunningOrigin {
        addr,
        tls_addr,
        stop,
        task,
    })
}

/// The addresses a node serves on, once it listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub addr: SocketAddr,
    /// The TLS listener (`tls_listen`), if any.
    pub tls: Option<SocketAddr>,
}

/// Serve with `threads` workers, each a single-threaded runtime on its own thread accepting on
/// its own `SO_REUSEPORT` socket (the thread-per-core shape of nginx, and of `capstan serve`),
/// sharing one node: its tree, its in-memory file bodies and its resource models. With a
/// process limit the workers accept from one shared socket instead, so that the connections
/// waiting for a process wait in one backlog, for whichever process frees first. Calls
/// `on_ready` with the bound address once every worker listens, then serves until the future
/// made by `until` (run on the first worker) completes, and returns its output.
pub fn serve_threads<T, F>(
    config: OriginConfig,
    threads: usize,
    on_ready: impl FnOnce(SocketAddr),
    until: impl FnOnce() -> F,
) -> Result<T, OriginError>
where
    F: std::future::Future<Output = T>,
{
    serve_threads_bound(config, threads, |b| on_ready(b.addr), until)
}

/// [`serve_threads`], telling `on_ready` every address the node serves on (the TLS listener's
/// too). With several workers each accepts TLS connections on its own `SO_REUSEPORT` socket as
/// well.
pub fn serve_threads_bound<T, F>(
    config: OriginConfig,
    threads: usize,
    on_ready: impl FnOnce(Bound),
    until: impl FnOnce() -> F,
) -> Result<T, OriginError>
where
    F: std::future::Future<Output = T>,
{
    config.validate()?;
    let threads = threads.max(1);
    let tree = DocTree::generate(config.tree, config.seed, config.files)?;
    let shared = config.process_limit.is_some();
    let first = bind_first(config.listen, threads > 1 && !shared, config.backlog)?;
    let addr = local_addr(&first, config.listen)?;
    let mut more = Vec::new();
    for _ in 1..threads {
        more.push(if shared {
            first
                .try_clone()
                .map_err(|error| OriginError::Bind { addr, error })?
        } else {
            bind(addr, true, config.backlog)?
        });
    }
    let report = bind_report(&config)?;
    let (mut tls_sockets, tls_addr) = per_worker(bind_tls(&config, threads)?, threads);
    let rt = single_thread_runtime()?;
    rt.block_on(async move {
        let node = service::Node::build(config, tree, addr).await?;
        let (stop, stopped) = watch::channel(false);
        let mut workers = Vec::new();
        let first_tls = tls_sockets.remove(0);
        for (i, (listener, tls)) in more.into_iter().zip(tls_sockets).enumerate() {
            let (node, stopped) = (node.clone(), stopped.clone());
            let worker = std::thread::Builder::new()
                .name(format!("capstan-origin-{}", i + 1))
                .spawn(move || -> Result<(), OriginError> {
                    single_thread_runtime()?.block_on(async move {
                        let listener = from_std(listener, addr)?;
                        spawn_tls(&node, tls, &stopped)?;
                        accept_loop(node, listener, stopped, false).await;
                        Ok(())
                    })
                })
                .map_err(|e| OriginError::Config(format!("cannot start a worker thread: {e}")))?;
            workers.push(worker);
        }
        tokio::spawn(ticker(Arc::downgrade(&node)));
        if let Some((l, a)) = report {
            tokio::spawn(report_loop(node.clone(), from_std(l, a)?, stopped.clone()));
        }
        spawn_tls(&node, first_tls, &stopped)?;
        let listener = from_std(first, addr)?;
        let main = tokio::spawn(accept_loop(node, listener, stopped, true));
        on_ready(Bound {
            addr,
            tls: tls_addr,
        });
        let out = until().await;
        let _ = stop.send(true);
        let _ = main.await;
        for w in workers {
            match w.join() {
                Ok(r) => r?,
                Err(_) => return Err(OriginError::Config("a worker thread panicked".into())),
            }
        }
        Ok(out)
    })
}

fn single_thread_runtime() -> Result<tokio::runtime::Runtime, OriginError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| OriginError::Config(format!("cannot start the runtime: {e}")))
}

/// A listening socket with room for `backlog` connections waiting for `accept`; with
/// `reuse_port` several workers can each accept on the same address and the kernel spreads
/// connections among them.
fn bind(
    addr: SocketAddr,
    reuse_port: bool,
    backlog: u32,
) -> Result<std::net::TcpListener, OriginError> {
    let bind = || -> std::io::Result<std::net::TcpListener> {
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
        socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
        Ok(socket.into())
    };
    bind().map_err(|error| OriginError::Bind { addr, error })
}

/// The first socket of a listener, the one that takes the port; with `reuse_port` the node's
/// other workers join it on the same port afterwards.
///
/// `SO_REUSEPORT` lets *any* socket of the same user that also sets it join a port's group,
/// and the kernel then spreads new connections over the whole group: a node started on a port
/// a switch (or another node) already serves would start and silently take a share of its
/// connections. A socket bound without `SO_REUSEPORT` cannot join a group, and fails with
/// `EADDRINUSE` while any other socket listens on the port (with or without it; its
/// `SO_REUSEADDR` only passes over connections in `TIME_WAIT`). So with one worker the only
/// socket is bound plainly and the kernel itself refuses a taken port, now and for anyone
/// coming later; with several, a plain socket is bound first and closed again as a probe
/// before the shared ones are made, as `capstan serve` does. The probe leaves a window of
/// microseconds in which another process setting `SO_REUSEPORT` could still join; a port the
/// kernel picks (port 0) is never taken, so it is not probed.
fn bind_first(
    addr: SocketAddr,
    reuse_port: bool,
    backlog: u32,
) -> Result<std::net::TcpListener, OriginError> {
    if reuse_port && addr.port() != 0 {
        drop(bind(addr, false, 1)?);
    }
    bind(addr, reuse_port, backlog)
}

fn local_addr(l: &std::net::TcpListener, addr: SocketAddr) -> Result<SocketAddr, OriginError> {
    l.local_addr()
        .map_err(|error| OriginError::Bind { addr, error })
}

fn from_std(l: std::net::TcpListener, addr: SocketAddr) -> Result<TcpListener, OriginError> {
    TcpListener::from_std(l).map_err(|error| OriginError::Bind { addr, error })
}

/// The report address's socket (`report_listen`), if there is one.
fn bind_report(
    config: &OriginConfig,
) -> Result<Option<(std::net::TcpListener, SocketAddr)>, OriginError> {
    let Some(addr) = config.report_listen else {
        return Ok(None);
    };
    let listener = bind(addr, false, config::BACKLOG)?;
    let bound = local_addr(&listener, addr)?;
    tracing::info!("load report also on {bound}");
    Ok(Some((listener, bound)))
}

/// The TLS listener's sockets (`count` of them, sharing the port with `SO_REUSEPORT` when more
/// than one) and its acceptor, if the node has one.
struct TlsBinding {
    listeners: Vec<std::net::TcpListener>,
    addr: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
}

fn bind_tls(config: &OriginConfig, count: usize) -> Result<Option<TlsBinding>, OriginError> {
    let (Some(listen), Some(cert), Some(key)) =
        (config.tls_listen, &config.tls_cert, &config.tls_key)
    else {
        return Ok(None);
    };
    // The certificate first: a bad file is the likelier mistake, and says so in one line.
    let acceptor = tls::acceptor(cert, key)?;
    let first = bind_first(listen, count > 1, config.backlog)?;
    let addr = local_addr(&first, listen)?;
    let mut listeners = vec![first];
    for _ in 1..count {
        listeners.push(bind(addr, true, config.backlog)?);
    }
    tracing::info!("TLS listener on {addr}");
    Ok(Some(TlsBinding {
        listeners,
        addr,
        acceptor,
    }))
}

/// One worker's share of the TLS listener: its socket, the address, the acceptor.
type WorkerTls = (std::net::TcpListener, SocketAddr, tokio_rustls::TlsAcceptor);

/// The TLS listener's sockets dealt out one per worker (none for each without a listener),
/// and its address.
fn per_worker(
    tls: Option<TlsBinding>,
    threads: usize,
) -> (Vec<Option<WorkerTls>>, Option<SocketAddr>) {
    match tls {
        Some(t) => {
            let (addr, acceptor) = (t.addr, t.acceptor);
            let sockets = t.listeners.into_iter();
            (
                sockets.map(|l| Some((l, addr, acceptor.clone()))).collect(),
                Some(addr),
            )
        }
        None => ((0..threads).map(|_| None).collect(), None),
    }
}

/// Starts accepting on a worker's TLS socket, on the current runtime.
fn spawn_tls(
    node: &Arc<service::Node>,
    tls: Option<WorkerTls>,
    stopped: &watch::Receiver<bool>,
) -> Result<(), OriginError> {
    if let Some((l, addr, acceptor)) = tls {
        let l = from_std(l, addr)?;
        tokio::spawn(tls_accept_loop(node.clone(), l, acceptor, stopped.clone()));
    }
    Ok(())
}

/// Accepts TLS connections until stopped; each one's handshake and requests run on a task of
/// its own, so a slow handshake never holds up the accept loop.
async fn tls_accept_loop(
    node: Arc<service::Node>,
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    let (node, acceptor) = (node.clone(), acceptor.clone());
                    tokio::spawn(async move {
                        let Some(tls) = tls::handshake(&acceptor, stream, &node.tls).await else {
                            return;
                        };
                        let handle = move |req| service::handle(node.clone(), req, true);
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(tls), service_fn(handle))
                            .await;
                    });
                }
                Err(e) => {
                    tracing::warn!("accept failed on the TLS listener: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = async { stopped.wait_for(|s| *s).await.is_ok() } => break,
        }
    }
}

/// Accepts and serves connections until stopped. In process-per-connection mode a connection
/// is accepted only when a process is idle, and holds it until it closes. `watch_backlog`: this
/// loop's socket is the one whose backlog the load report counts.
async fn accept_loop(
    node: Arc<service::Node>,
    listener: TcpListener,
    mut stopped: watch::Receiver<bool>,
    watch_backlog: bool,
) {
    use std::os::fd::AsRawFd;
    let _watch = match &node.processes {
        Some(p) if watch_backlog => Some(p.watch_listener(listener.as_raw_fd())),
        _ => None,
    };
    loop {
        let idle = tokio::select! {
            p = idle_process(&node) => p,
            _ = async { stopped.wait_for(|s| *s).await.is_ok() } => break,
        };
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let slot = idle.and_then(|p| node.take_process(p));
                    let node = node.clone();
                    serve_connection(stream, move |req| service::handle(node.clone(), req, false), slot);
                }
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = async { stopped.wait_for(|s| *s).await.is_ok() } => break,
        }
    }
}

/// An idle process to accept with, in process-per-connection mode.
async fn idle_process(node: &service::Node) -> Option<tokio::sync::OwnedSemaphorePermit> {
    match &node.processes {
        Some(p) => Some(p.idle().await),
        None => None,
    }
}

/// Serves one connection's requests with `handle` on a task of its own; `slot` (the connection's
/// process, if any) is released when the connection ends.
fn serve_connection<F, Fut>(
    stream: tokio::net::TcpStream,
    handle: F,
    slot: Option<processes::ProcessSlot>,
) where
    F: Fn(hyper::Request<hyper::body::Incoming>) -> Fut + Send + 'static,
    Fut: std::future::Future<
            Output = Result<
                hyper::Response<http_body_util::Full<bytes::Bytes>>,
                std::convert::Infallible,
            >,
        > + Send
        + 'static,
{
    let _ = stream.set_nodelay(true);
    tokio::spawn(async move {
        let Some(slot) = slot else {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(handle))
                .await;
            return;
        };
        // A process is scarce: one whose client went quiet gives up, as Apache's does.
        let conn = http1::Builder::new()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(processes::IDLE_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service_fn(handle));
        if let Ok(parts) = conn.without_shutdown().await {
            processes::linger(parts.io.into_inner()).await;
        }
        drop(slot);
    });
}

/// Serves the report address: the load report only, with no process limit.
async fn report_loop(
    node: Arc<service::Node>,
    listener: TcpListener,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let node = node.clone();
                    serve_connection(stream, move |req| service::handle_report(node.clone(), req), None);
                }
                Err(e) => {
                    tracing::warn!("accept failed on the report address: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = async { stopped.wait_for(|s| *s).await.is_ok() } => break,
        }
    }
}

/// Run a node until Ctrl-C.
pub async fn run(config: OriginConfig) -> Result<(), OriginError> {
    let node = start(config).await?;
    tracing::info!("capstan origin listening on {}", node.addr());
    let _ = tokio::signal::ctrl_c().await;
    node.shutdown().await;
    Ok(())
}

/// Feed the load history a snapshot every quarter interval.
async fn ticker(node: std::sync::Weak<service::Node>) {
    let period = match node.upgrade() {
        Some(n) => Duration::from_secs_f64(n.stats.interval_s() / 4.0),
        None => return,
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(n) = node.upgrade() else { return };
        n.stats.tick(n.busy());
    }
}
