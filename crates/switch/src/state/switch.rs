//! The running switch's shared state ([`Switch`]: the current cluster, the cache, the access
//! log and the switch-wide counters) and a client connection's ([`ConnState`]).

use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::Poll;

use arc_swap::ArcSwap;
use tokio::sync::{watch, Notify, Semaphore};

use crate::observe::tls_metrics::TlsCounters;
use crate::state::cluster::{Cluster, Epoch};
use crate::state::connection_limits::ListenerLimits;

/// What one client connection is doing, for its idle and header-read deadlines.
///
/// The socket only bumps counters (no clock reads on the I/O path); the connection's watchdog
/// ticks, and measures both deadlines in ticks.
#[derive(Default)]
pub(crate) struct ConnState {
    /// Bumped whenever bytes move either way or a request ends.
    pub(crate) activity: AtomicU64,
    /// Watchdog ticks so far.
    pub(crate) ticks: AtomicU64,
    /// The tick (plus one) at which the first byte of the next request head arrived; 0 while
    /// no head is being read.
    pub(crate) head_started: AtomicU64,
    /// The tick (plus one) since which a write to the client has been waiting for room in the
    /// socket (the client is not reading); 0 while no write waits.
    pub(crate) write_blocked: AtomicU64,
    in_flight: AtomicU32,
    /// Set once the TLS handshake is done, for a client that came over TLS (the node is told
    /// `X-Forwarded-Proto: https`; class rules may look at the SNI name).
    pub(crate) tls: std::sync::OnceLock<ClientTls>,
    /// The client's addresses and when it connected (absent for requests the switch makes
    /// itself, such as background cache refreshes).
    pub peer: Option<crate::net::peer::Peer>,
    /// `Alt-Svc` for every response on a TLS listener with a QUIC sibling (`h3=":PORT"`).
    pub(crate) alt_svc: Option<http::HeaderValue>,
}

impl ConnState {
    /// The state of a new connection from `peer`.
    pub fn of(peer: Option<crate::net::peer::Peer>) -> Self {
        ConnState {
            peer,
            ..ConnState::default()
        }
    }

    /// Also advertises HTTP/3 with `alt_svc` on every response.
    pub(crate) fn with_alt_svc(mut self, alt_svc: Option<http::HeaderValue>) -> Self {
        self.alt_svc = alt_svc;
        self
    }

    pub fn request_started(&self) {
        self.head_started.store(0, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub fn request_done(&self) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        self.activity.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn on_read(&self) {
        self.activity.fetch_add(1, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.head_started.load(Ordering::Relaxed) == 0
        {
            let now = self.ticks.load(Ordering::Relaxed);
            self.head_started.store(now + 1, Ordering::Relaxed);
        }
    }

    pub(crate) fn on_write(&self) {
        self.activity.fetch_add(1, Ordering::Relaxed);
        self.write_blocked.store(0, Ordering::Relaxed);
    }

    pub(crate) fn on_write_blocked(&self) {
        if self.write_blocked.load(Ordering::Relaxed) == 0 {
            let now = self.ticks.load(Ordering::Relaxed);
            self.write_blocked.store(now + 1, Ordering::Relaxed);
        }
    }

    /// Notes what a write to the client came to.
    pub(crate) fn wrote(&self, polled: &Poll<io::Result<usize>>) {
        match polled {
            Poll::Ready(Ok(n)) if *n > 0 => self.on_write(),
            Poll::Pending => self.on_write_blocked(),
            _ => {}
        }
    }
}

/// The running switch: the current cluster and the switch-wide counters.
pub struct Switch {
    /// When the switch started: the zero of its nanosecond clock.
    pub epoch: Epoch,
    /// The cluster in force, swapped whole by a reload or a membership change.
    pub cluster: ArcSwap<Cluster>,
    /// Client connections open now, on every worker.
    pub open_connections: AtomicUsize,
    /// Client connections accepted since start.
    pub accepted_connections: AtomicU64,
    /// Successful reloads since start.
    pub reloads: AtomicU64,
    /// Keeps retries to a share of the requests (see `crate::state::retry`).
    pub retry_budget: crate::state::retry::RetryBudget,
    /// The HTTP cache, when the configuration has a `[cache]` section at start.
    pub cache: Option<crate::state::cache::CacheLayer>,
    /// The tier's peers, when the configuration has a `[tier]` section at start.
    pub(crate) tier: Option<crate::state::tier::Tier>,
    /// The access log, when the configuration has an `[access_log]` section at start.
    pub access_log: Option<Arc<crate::observe::access_log::AccessLog>>,
    /// Connections closed on PROXY protocol listeners.
    pub proxy_rejections: crate::state::counters::Rejections,
    /// WebSocket and CONNECT tunnels.
    pub tunnels: crate::state::counters::TunnelCounts,
    /// Responses cut by `timeouts.client_send` (see `crate::frontend::send_timeout`).
    pub client_send_timeouts: crate::state::counters::ClientSendTimeouts,
    /// Each `[[discovery]]` source's state (see `crate::control::discovery`).
    pub(crate) discovery: crate::state::discovery::DiscoveryBoard,
    /// One permit per open client connection, up to `limits.max_connections`.
    pub(crate) connection_slots: Arc<Semaphore>,
    /// Every client listener's limits and TLS handshake counters, shared with the front end's
    /// endpoints (see [`crate::state::connection_limits`]).
    listener_counters: Vec<(Arc<ListenerLimits>, Option<Arc<TlsCounters>>)>,
    /// Held while the cluster is rebuilt (a reload or a membership change), one at a time.
    pub(crate) reload_lock: tokio::sync::Mutex<()>,
    pub(crate) shutdown: watch::Sender<bool>,
    pub(crate) all_closed: Notify,
}

impl Switch {
    /// The shared state of a switch about to serve `cluster`: `listener_counters` are the
    /// limits and counters of every client listener, `max_connections` the switch-wide
    /// connection limit.
    pub(crate) fn new(
        cluster: Cluster,
        (cache, tier): (
            Option<crate::state::cache::CacheLayer>,
            Option<crate::state::tier::Tier>,
        ),
        access_log: Option<Arc<crate::observe::access_log::AccessLog>>,
        listener_counters: Vec<(Arc<ListenerLimits>, Option<Arc<TlsCounters>>)>,
        max_connections: usize,
    ) -> Arc<Switch> {
        let (shutdown, _) = watch::channel(false);
        Arc::new(Switch {
            epoch: Epoch::new(),
            cluster: ArcSwap::from_pointee(cluster),
            open_connections: AtomicUsize::new(0),
            accepted_connections: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
            retry_budget: Default::default(),
            cache,
            tier,
            access_log,
            proxy_rejections: Default::default(),
            tunnels: Default::default(),
            client_send_timeouts: Default::default(),
            discovery: Default::default(),
            connection_slots: Arc::new(Semaphore::new(max_connections)),
            listener_counters,
            reload_lock: tokio::sync::Mutex::new(()),
            shutdown,
            all_closed: Notify::new(),
        })
    }

    /// Stops accepting and lets in-flight requests finish (see `Running::wait`).
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    pub(crate) fn connection_closed(&self) {
        if self.open_connections.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.all_closed.notify_waiters();
        }
    }

    /// Every client listener's limits and counters, `listen` first, then `[[listener]]`s.
    pub fn listeners(&self) -> Vec<crate::state::connection_limits::ListenerStatus> {
        self.listener_counters
            .iter()
            .map(|(limits, tls_counters)| {
                let mut status = limits.status();
                status.tls = tls_counters.as_ref().map(|c| c.status());
                status
            })
            .collect()
    }

    /// Each TLS listener's address and handshake counters, for `/metrics`.
    pub fn tls_counters(&self) -> Vec<(String, Arc<crate::observe::tls_metrics::TlsCounters>)> {
        self.listener_counters
            .iter()
            .filter_map(|(limits, tls_counters)| {
                let counters = tls_counters.as_ref()?;
                Some((limits.address().to_string(), Arc::clone(counters)))
            })
            .collect()
    }

    /// Each QUIC listener's name (`ADDRESS/udp`) and counters, for `/metrics`.
    pub(crate) fn quic_counters(
        &self,
    ) -> Vec<(String, Arc<crate::observe::quic_metrics::QuicCounters>)> {
        (self.listener_counters.iter())
            .filter_map(|(limits, _)| Some((limits.label(), Arc::clone(limits.quic.as_ref()?))))
            .collect()
    }
}

/// What a TLS client told in its handshake, kept for its requests.
#[derive(Debug)]
pub(crate) struct ClientTls {
    /// The SNI name, lower case.
    pub sni: Option<Box<str>>,
}

impl ClientTls {
    pub(crate) fn of(conn: &rustls::ServerConnection) -> ClientTls {
        ClientTls {
            sni: conn.server_name().map(|n| n.to_ascii_lowercase().into()),
        }
    }
}
