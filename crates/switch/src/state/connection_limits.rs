//! Connection limits below the switch-wide `limits.max_connections`: per listener
//! (`[[listener]] max_connections`, HAProxy's `bind … maxconn`) and per client address
//! (`limits.max_connections_per_client`, what HAProxy does with a stick-table's `conn_cur`).
//!
//! A full listener stops accepting: connections beyond its limit wait in the kernel's accept
//! queue and cost the switch nothing, while other listeners go on. A client address over its
//! limit cannot be made to wait that way (the accept queue is shared by every address), so its
//! new connection is accepted and turned away at once: a fixed `429` on plain HTTP listeners,
//! a bare close on TLS ones (a handshake only to refuse would be the cost the limit is there
//! to avoid). Both counts are released by `Drop`, and an address's entry leaves the map when
//! its last connection closes, so the map holds only addresses with connections open. The
//! counts live here, in the shared state; turning a connection away is the front end's
//! (`crate::frontend::turn_away`).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use serde::Serialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, TryAcquireError};

/// One client listener's limits and counters, shared by every worker that accepts on it.
pub(crate) struct ListenerLimits {
    configured: SocketAddr,
    /// The address actually bound (the configured one may have port 0).
    bound: OnceLock<SocketAddr>,
    max_connections: Option<usize>,
    slots: Option<Arc<Semaphore>>,
    /// The per-address limit that applies here: the listener's own, or the switch-wide one
    /// shared with every listener without its own.
    clients: Option<Arc<ClientLimiter>>,
    open: AtomicU64,
    accepted: AtomicU64,
    full_listener: AtomicU64,
    full_switch: AtomicU64,
    rejected_per_client: AtomicU64,
    /// A QUIC listener's own counters (its connections are counted above like TCP ones).
    pub(crate) quic: Option<Arc<crate::observe::quic_metrics::QuicCounters>>,
}

/// A listener as `/status` shows it.
#[derive(Serialize)]
pub struct ListenerStatus {
    pub address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<usize>,
    /// The per-client-address limit in force on this listener (0: none).
    pub max_connections_per_client: usize,
    pub open_connections: u64,
    pub accepted_connections: u64,
    /// Times accepting paused because the listener was full (its `max_connections`).
    pub full_listener: u64,
    /// Times accepting paused because the switch was full (`limits.max_connections`).
    pub full_switch: u64,
    /// Connections turned away because their client address was at its limit.
    pub rejected_per_client: u64,
    /// Client addresses with connections open, as the per-address limit counts them.
    pub client_addresses: usize,
    /// Handshake counts, on a TLS listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::observe::tls_metrics::TlsStatus>,
    /// On a QUIC listener (`ADDRESS/udp`): its datagrams, handshakes and requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic: Option<crate::observe::quic_metrics::QuicStatus>,
}

impl ListenerLimits {
    /// Limits for a listener; `clients` is the per-address limiter that applies to it.
    pub(crate) fn new(
        configured: SocketAddr,
        max_connections: Option<usize>,
        clients: Option<Arc<ClientLimiter>>,
    ) -> Self {
        ListenerLimits {
            configured,
            bound: OnceLock::new(),
            max_connections,
            slots: max_connections.map(|n| Arc::new(Semaphore::new(n))),
            clients,
            open: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            full_listener: AtomicU64::new(0),
            full_switch: AtomicU64::new(0),
            rejected_per_client: AtomicU64::new(0),
            quic: None,
        }
    }

    /// The per-address limiter that applies here, to share with a QUIC sibling.
    pub(crate) fn clients(&self) -> Option<&Arc<ClientLimiter>> {
        self.clients.as_ref()
    }

    /// The same limits on a QUIC listener, with its counters.
    pub(crate) fn quic(
        mut self,
        counters: Arc<crate::observe::quic_metrics::QuicCounters>,
    ) -> Self {
        self.quic = Some(counters);
        self
    }

    /// The listener's name in `/status` and `/metrics`: its address, with `/udp` after a
    /// QUIC listener's (it shares the address with a TCP one).
    pub(crate) fn label(&self) -> String {
        match self.quic {
            Some(_) => format!("{}/udp", self.address()),
            None => self.address().to_string(),
        }
    }

    /// A slot on this listener and one of the switch's now, or `None` (counted) when either
    /// is full: a QUIC listener has no accept queue to leave a connection waiting in.
    pub(crate) fn try_slots(&self, switch_slots: &Arc<Semaphore>) -> Option<Slots> {
        let listener = match &self.slots {
            Some(slots) => match Arc::clone(slots).try_acquire_owned() {
                Ok(permit) => Some(permit),
                Err(_) => {
                    self.full_listener.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            },
            None => None,
        };
        match Arc::clone(switch_slots).try_acquire_owned() {
            Ok(switch) => Some(Slots {
                _listener: listener,
                _switch: switch,
            }),
            Err(_) => {
                self.full_switch.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// Records the bound address (the first worker to bind tells it).
    pub(crate) fn bound_to(&self, addr: SocketAddr) {
        let _ = self.bound.set(addr);
    }

    /// The bound address, or the configured one before binding.
    pub(crate) fn address(&self) -> SocketAddr {
        self.bound.get().copied().unwrap_or(self.configured)
    }

    /// Waits for a slot on this listener, then for one of the switch's (`None`: the switch
    /// is closing its semaphores). The listener's comes first, so a full listener never holds
    /// a switch-wide slot that another listener could use.
    pub(crate) async fn slots(&self, switch_slots: &Arc<Semaphore>) -> Option<Slots> {
        let listener = match &self.slots {
            Some(slots) => Some(acquire(slots, &self.full_listener).await?),
            None => None,
        };
        let switch = acquire(switch_slots, &self.full_switch).await?;
        Some(Slots {
            _listener: listener,
            _switch: switch,
        })
    }

    /// Counts an accepted connection as open until the returned guard is dropped.
    pub(crate) fn opened(self: &Arc<Self>) -> OpenOnListener {
        self.open.fetch_add(1, Ordering::AcqRel);
        self.accepted.fetch_add(1, Ordering::Relaxed);
        OpenOnListener {
            listener: Arc::clone(self),
        }
    }

    /// Takes a connection slot for `client` under the per-address limit; `Err` (counted)
    /// when the address is at its limit. `Ok(None)` when no per-address limit applies.
    pub(crate) fn admit_client(&self, client: IpAddr) -> Result<Option<ClientSlot>, AtClientLimit> {
        let Some(limiter) = &self.clients else {
            return Ok(None);
        };
        match ClientLimiter::admit(limiter, client) {
            Some(slot) => Ok(Some(slot)),
            None => {
                self.rejected_per_client.fetch_add(1, Ordering::Relaxed);
                Err(AtClientLimit)
            }
        }
    }

    pub(crate) fn status(&self) -> ListenerStatus {
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        ListenerStatus {
            address: self.label(),
            max_connections: self.max_connections,
            max_connections_per_client: self.clients.as_ref().map_or(0, |c| c.limit),
            open_connections: load(&self.open),
            accepted_connections: load(&self.accepted),
            full_listener: load(&self.full_listener),
            full_switch: load(&self.full_switch),
            rejected_per_client: load(&self.rejected_per_client),
            client_addresses: self.clients.as_ref().map_or(0, |c| c.addresses()),
            tls: None,
            quic: self.quic.as_ref().map(|q| q.status()),
        }
    }
}

/// A client address already holds its `max_connections_per_client` connections.
#[derive(Debug)]
pub(crate) struct AtClientLimit;

/// A permit from `slots`, counting in `waits` when there was none free at once.
async fn acquire(slots: &Arc<Semaphore>, waits: &AtomicU64) -> Option<OwnedSemaphorePermit> {
    match Arc::clone(slots).try_acquire_owned() {
        Ok(permit) => Some(permit),
        Err(TryAcquireError::Closed) => None,
        Err(TryAcquireError::NoPermits) => {
            waits.fetch_add(1, Ordering::Relaxed);
            Arc::clone(slots).acquire_owned().await.ok()
        }
    }
}

/// A connection's places under the listener's and the switch's limits.
pub(crate) struct Slots {
    _listener: Option<OwnedSemaphorePermit>,
    _switch: OwnedSemaphorePermit,
}

/// Counts one open connection on a listener while it lives.
pub(crate) struct OpenOnListener {
    listener: Arc<ListenerLimits>,
}

impl Drop for OpenOnListener {
    fn drop(&mut self) {
        self.listener.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Open connections per client address, at most `limit` each.
pub(crate) struct ClientLimiter {
    limit: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl ClientLimiter {
    /// A limiter, or `None` for a limit of 0 (no limit).
    pub(crate) fn new(limit: usize) -> Option<Arc<ClientLimiter>> {
        (limit > 0).then(|| {
            Arc::new(ClientLimiter {
                limit,
                open: Mutex::new(HashMap::new()),
            })
        })
    }

    /// A slot for one more connection from `client`, unless it already has `limit`.
    pub(crate) fn admit(this: &Arc<Self>, client: IpAddr) -> Option<ClientSlot> {
        // An IPv4 client on a dual-stack socket is the same client as over IPv4.
        let client = client.to_canonical();
        let mut open = this.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(client).or_insert(0);
        if *count >= this.limit {
            return None;
        }
        *count += 1;
        Some(ClientSlot {
            limiter: Arc::clone(this),
            client,
        })
    }

    /// Addresses with connections open now.
    pub(crate) fn addresses(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// One connection counted against its client address; released on drop.
pub(crate) struct ClientSlot {
    limiter: Arc<ClientLimiter>,
    client: IpAddr,
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.limiter.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.client);
            }
        }
    }
}

/// The listeners' counters for `/metrics`, copied at scrape time.
#[derive(Debug)]
pub(crate) struct ListenerCollector {
    listeners: Vec<(String, [u64; 6])>,
}

impl ListenerCollector {
    pub(crate) fn of(listeners: &[ListenerStatus]) -> Self {
        let listeners = listeners
            .iter()
            .map(|l| {
                let counts = [
                    l.open_connections,
                    l.accepted_connections,
                    l.full_listener,
                    l.full_switch,
                    l.rejected_per_client,
                    l.client_addresses as u64,
                ];
                (l.address.clone(), counts)
            })
            .collect();
        ListenerCollector { listeners }
    }
}

impl Collector for ListenerCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let label = |address: &str| vec![("listener".to_string(), address.to_string())];
        let mut family = |name: &str, help: &str, kind: MetricType, at: usize| {
            let mut family = encoder.encode_descriptor(name, help, None, kind)?;
            for (address, counts) in &self.listeners {
                let labels = label(address);
                let metric = family.encode_family(&labels)?;
                match kind {
                    MetricType::Gauge => ConstGauge::new(counts[at] as i64).encode(metric)?,
                    _ => ConstCounter::new(counts[at]).encode(metric)?,
                }
            }
            Ok::<_, std::fmt::Error>(())
        };
        family(
            "capstan_listener_connections_open",
            "Client connections open now on the listener",
            MetricType::Gauge,
            0,
        )?;
        family(
            "capstan_listener_connections_accepted",
            "Client connections accepted on the listener since start",
            MetricType::Counter,
            1,
        )?;
        family(
            "capstan_client_connections_rejected",
            "Client connections turned away because their address had max_connections_per_client open",
            MetricType::Counter,
            4,
        )?;
        family(
            "capstan_listener_client_addresses",
            "Client addresses with connections open, as the listener's per-address limit counts them",
            MetricType::Gauge,
            5,
        )?;
        let mut full = encoder.encode_descriptor(
            "capstan_listener_full",
            "Times the listener stopped accepting (connections waited in the accept queue) because \
             its max_connections (limit=listener) or limits.max_connections (limit=switch) was reached",
            None,
            MetricType::Counter,
        )?;
        for (address, counts) in &self.listeners {
            for (limit, n) in [("listener", counts[2]), ("switch", counts[3])] {
                let mut labels = label(address);
                labels.push(("limit".into(), limit.into()));
                ConstCounter::new(n).encode(full.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_leaves_the_map_with_its_last_connection() {
        let limiter = ClientLimiter::new(2).unwrap();
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        let first = ClientLimiter::admit(&limiter, a).unwrap();
        let second = ClientLimiter::admit(&limiter, mapped).unwrap();
        assert!(ClientLimiter::admit(&limiter, a).is_none(), "same client");
        let other = ClientLimiter::admit(&limiter, "192.0.2.2".parse().unwrap()).unwrap();
        assert_eq!(limiter.addresses(), 2);
        drop(first);
        assert!(ClientLimiter::admit(&limiter, a).is_some(), "one released");
        drop((second, other));
        assert_eq!(limiter.addresses(), 0);
        assert!(ClientLimiter::new(0).is_none());
    }
}
