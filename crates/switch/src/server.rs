//! Start-up and the run loop: building the switch, binding its listeners, starting a worker
//! per thread (each serving with [`crate::frontend`]) and the control tasks (health checks,
//! load gathering, the admin listener), signals (SIGHUP reloads, SIGTERM and SIGINT stop), and
//! waiting for the connections to drain.
//!
//! May use: every layer.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::frontend::listener::Endpoint;
use crate::net::io::Acceptor;
use crate::state::cluster::Cluster;
pub use crate::state::switch::Switch;

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
type QuicEndpoints = Vec<crate::frontend::quic::QuicEndpoint>;

/// A switch for a validated configuration, not yet serving, and every client address it is
/// to bind with what it speaks.
fn new_switch(mut config: Config) -> anyhow::Result<(Arc<Switch>, Endpoints, QuicEndpoints)> {
    let discovered = crate::control::discovery::add_initial_nodes(&mut config);
    if config.nodes.is_empty() {
        anyhow::bail!(
            "no node: no [[node]], and the [[discovery]] sources gave none yet (the warnings above say why)"
        );
    }
    config.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    let max_connections = config.limits.max_connections;
    let endpoints = Endpoint::all(&config);
    let quic = crate::frontend::quic::QuicEndpoint::all(&config, &endpoints);
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
    let tier = (config.tier.as_ref())
        .map(|t| crate::state::tier::Tier::new(t, &config.client_addresses()))
        .transpose()?;
    let cluster = Cluster::build(config, 1, None, 0).map_err(|e| anyhow::anyhow!("{e}"))?;
    let counters = endpoints
        .iter()
        .map(|(_, e)| (Arc::clone(&e.limits), e.tls_counters.clone()))
        .chain(quic.iter().map(|q| (Arc::clone(&q.limits), None)))
        .collect();
    let switch = Switch::new(
        cluster,
        (cache, tier),
        access_log,
        counters,
        max_connections,
    );
    crate::control::discovery::record_initial(&switch, discovered);
    Ok((switch, endpoints, quic))
}

/// Binds the UDP side of each QUIC listener on its TCP sibling's bound address (`bound`, in
/// the order of `endpoints`), so a configured port 0 gives both the same port.
fn bind_quic(
    quic: QuicEndpoints,
    endpoints: &Endpoints,
    bound: &[SocketAddr],
) -> anyhow::Result<Vec<(std::net::UdpSocket, crate::frontend::quic::QuicEndpoint)>> {
    quic.into_iter()
        .map(|q| {
            let at = (endpoints.iter().zip(bound))
                .find(|((_, e), _)| e.configured() == q.configured())
                .map_or(q.configured(), |(_, &addr)| addr);
            let socket = crate::frontend::quic::bind(at)
                .with_context(|| format!("cannot listen on udp://{at} (QUIC)"))?;
            Ok((socket, q))
        })
        .collect()
}

/// Binds the listeners and starts serving on the current runtime, as one worker. Returns once
/// everything is listening.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    let admin = config.admin;
    let (switch, endpoints, quic) = new_switch(config)?;
    let tcp = endpoints
        .iter()
        .map(|(addr, _)| bind(*addr, false))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let bound = tcp
        .iter()
        .map(|l| l.local_addr())
        .collect::<io::Result<Vec<_>>>()?;
    let quic = bind_quic(quic, &endpoints, &bound)?;
    let listeners = tcp.into_iter().zip(endpoints.into_iter().map(|(_, e)| e));
    let admin = admin.map(bind_admin).transpose()?;
    let mut running = serve_on(switch, listeners.collect(), admin, true)?;
    serve_quic(&mut running, quic)?;
    Ok(running)
}

/// Serves the QUIC listeners on the current runtime (the first worker's).
fn serve_quic(
    running: &mut Running,
    quic: Vec<(std::net::UdpSocket, crate::frontend::quic::QuicEndpoint)>,
) -> anyhow::Result<()> {
    for (socket, endpoint) in quic {
        let task = crate::frontend::quic::serve(&running.switch, socket, endpoint)?;
        running.tasks.push(task);
    }
    Ok(())
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
    let reaper = Arc::new(crate::frontend::serve::SilentReaper::default());
    for (listener, endpoint) in listeners {
        let listener = Acceptor::new(listener)?;
        listen_addrs.push(listener.local_addr()?);
        endpoint.limits.bound_to(listener.local_addr()?);
        let proxied = configured.accepts_on(endpoint.configured());
        let accepting = crate::frontend::serve::accept_loop(
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
        tasks.push(tokio::spawn(crate::control::discovery::follow_all(
            Arc::clone(&switch),
        )));
        if switch.cache.is_some() {
            tasks.push(tokio::spawn(sample_cache(Arc::clone(&switch))));
        }
        if switch.tier.is_some() {
            tasks.push(tokio::spawn(crate::control::tier::check_peers(Arc::clone(
                &switch,
            ))));
        }
        if let Some(socket) = crate::control::gossip::bind(&switch)? {
            tasks.push(tokio::spawn(crate::control::gossip::gossip(
                Arc::clone(&switch),
                socket,
            )));
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

/// Runs the switch until SIGTERM or SIGINT (SIGHUP reloads the configuration), with `threads`
/// workers, each a single-threaded runtime on its own thread accepting on its own `SO_REUSEPORT`
/// socket — the thread-per-core shape of nginx and HAProxy, which avoids cross-thread wake-ups
/// on the request path. Blocks until the switch has stopped.
pub fn run(config: Config, threads: usize) -> anyhow::Result<()> {
    let threads = threads.max(1);
    let admin = config.admin;
    let (switch, endpoints, quic) = new_switch(config)?;
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
    let quic = bind_quic(quic, &endpoints, &bound)?;
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
        let mut running = serve_on(Arc::clone(&switch), first, admin, true)?;
        serve_quic(&mut running, quic)?;
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
