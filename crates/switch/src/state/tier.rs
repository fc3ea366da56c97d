//! The tier as shared state: the peers (each switch of the tier by its client listener) with
//! their health-check state and counters, which one is this switch, the ring that gives every
//! cache key its owner, the hop client, and the hot-key counts behind local copies.
//!
//! The owner of a key is chosen by `capstan-core`'s consistent hashing over the peers'
//! addresses, among the peers that are up. Its load bound is off (ε = ∞): every switch must
//! name the same owner for a key without knowing the others' load, or one key would be filled
//! once per owner the switches disagree on.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use capstan_core::policy::ConsistentHash;
use capstan_core::{ClusterView, NodeId, NodeState, Policy, RequestInfo};
use http_body_util::Empty;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::sections::tier::TierConfig;
use crate::state::health::{CheckResult, CheckState};

/// The request header that marks a request one switch of the tier sends another: its value is
/// the sender's client listener. Honoured only from a peer's IP address; removed from anyone
/// else's request.
pub(crate) const HOP_HEADER: &str = "capstan-tier-hop";

/// The header a peer's BAN carries its matcher in (`prefix=URL-PREFIX` or `regex=PATTERN`).
pub(crate) const BAN_HEADER: &str = "capstan-tier-ban";

/// The path a peer's health check asks, answered by the switch itself for a check.
pub(crate) const HEALTH_PATH: &str = "/_capstan/tier/health";

/// The hop header's value on a peer's health check (a hop of a client's request names the
/// sender's listener instead, so a client asking for [`HEALTH_PATH`] is sent to a node even
/// when its request is hopped to the key's owner).
pub(crate) const CHECK_MARK: &str = "check";

/// Points per peer on the ring, as the `consistent-hash` policy's default.
const VIRTUAL_NODES: u32 = 160;

/// Hot-key counts kept at most; beyond, the counts start again (a burst of distinct keys must
/// not grow the map without bound).
const HOT_KEYS_MAX: usize = 4096;

/// One switch of the tier.
#[derive(Debug)]
pub(crate) struct PeerRuntime {
    pub address: SocketAddr,
    /// Health checks, and hop failures that take it out at once.
    pub check: CheckState,
    /// Requests this switch sent it as their key's owner.
    pub hops_sent: AtomicU64,
    /// Hops to it that failed before its answer's head (then the node was asked directly).
    pub hop_failures: AtomicU64,
    /// Requests it sent this switch as their key's owner, and its checks.
    pub hops_served: AtomicU64,
    /// PURGE and BAN fanned out to it, and how many of them it did not acknowledge.
    pub invalidations_sent: AtomicU64,
    pub invalidation_failures: AtomicU64,
    /// Gossip datagrams taken from it, and those dropped (malformed, or of an older round).
    pub gossip_reports: AtomicU64,
    pub gossip_dropped: AtomicU64,
    /// `Epoch` nanoseconds + 1 when its last datagram was taken (0: none yet).
    pub gossip_last_at: AtomicU64,
}

/// The tier's gossip as a whole (`crate::control::gossip`).
#[derive(Debug, Default)]
pub(crate) struct GossipCounters {
    /// Datagrams sent, and sends that failed.
    pub sent: AtomicU64,
    pub send_errors: AtomicU64,
    /// Datagrams dropped because they came from no peer's address.
    pub foreign: AtomicU64,
    /// Datagrams from a peer's address that did not decode.
    pub malformed: AtomicU64,
    /// Counts datagrams of a peer whose node list differs from this switch's, dropped until
    /// the peer's names have arrived (`crate::state::gossip`).
    pub unmapped: AtomicU64,
    /// Nodes left out of the reports (name longer than 255 bytes).
    pub unnamed: AtomicU64,
    /// Why gossip is not running (its socket could not be bound), when it is not.
    pub error: Mutex<Option<String>>,
}

/// An HTTP/1.1 client to the peers, from this switch's own IP, with keep-alive connections.
pub(crate) type PeerClient = Client<HttpConnector, Empty<Bytes>>;

fn peer_client(config: &TierConfig, own: usize) -> PeerClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(config.hop_timeout));
    connector.set_local_address(config.source_ip(own));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .pool_timer(hyper_util::rt::TokioTimer::new())
        .build(connector)
}

/// Tells one `Tier` from the next (a reload makes a new one), so a thread's hop client is made
/// again for a new tier's settings.
static NEXT_TIER_ID: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// This thread's hop client, for the tier of that id ([`Tier::hop_client`]).
    static HOP_CLIENT: std::cell::RefCell<Option<(u64, PeerClient)>> =
        const { std::cell::RefCell::new(None) };
}

/// The tier this switch is part of.
pub(crate) struct Tier {
    /// Which tier this is, for the per-thread hop clients.
    id: u64,
    pub config: TierConfig,
    /// This switch's index in `peers`.
    pub own: usize,
    pub peers: Vec<PeerRuntime>,
    ring: ConsistentHash,
    /// Keep-alive connections to the peers, for health checks and fanned-out invalidations
    /// (hops: [`Tier::hop_client`]).
    pub client: PeerClient,
    /// Requests whose hop header was removed: not from a peer's address.
    pub forged_hops: AtomicU64,
    /// Hits on local copies of keys another peer owns.
    pub local_copy_hits: AtomicU64,
    /// Local copies stored.
    pub local_copies_stored: AtomicU64,
    pub gossip: GossipCounters,
    hot: Mutex<HashMap<String, (u32, Instant)>>,
}

/// The peers as a policy sees nodes: up or not, no load (the bound is off).
struct PeerView<'a>(&'a Tier);

impl ClusterView for PeerView<'_> {
    fn now_nanos(&self) -> u64 {
        0
    }
    fn node_count(&self) -> usize {
        self.0.peers.len()
    }
    fn node(&self, id: NodeId) -> NodeState {
        NodeState {
            available: self.0.is_live(id),
            ..NodeState::default()
        }
    }
}

impl Tier {
    /// The tier of a validated `[tier]`: `listen` (every client listener) finds this switch.
    pub(crate) fn new(config: &TierConfig, listen: &[SocketAddr]) -> anyhow::Result<Tier> {
        let own = config
            .own_index(listen)
            .ok_or_else(|| anyhow::anyhow!("tier.peers does not list this switch's listener"))?;
        let names: Vec<String> = config.addresses.iter().map(|a| a.to_string()).collect();
        let ring = ConsistentHash::new(&names, f64::INFINITY, VIRTUAL_NODES)
            .map_err(|e| anyhow::anyhow!("tier ring: {e}"))?;
        let client = peer_client(config, own);
        Ok(Tier {
            id: NEXT_TIER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            config: config.clone(),
            own,
            peers: (config.addresses.iter())
                .map(|&address| PeerRuntime {
                    address,
                    check: CheckState::default(),
                    hops_sent: AtomicU64::new(0),
                    hop_failures: AtomicU64::new(0),
                    hops_served: AtomicU64::new(0),
                    invalidations_sent: AtomicU64::new(0),
                    invalidation_failures: AtomicU64::new(0),
                    gossip_reports: AtomicU64::new(0),
                    gossip_dropped: AtomicU64::new(0),
                    gossip_last_at: AtomicU64::new(0),
                })
                .collect(),
            ring,
            client,
            forged_hops: AtomicU64::new(0),
            local_copy_hits: AtomicU64::new(0),
            local_copies_stored: AtomicU64::new(0),
            gossip: GossipCounters::default(),
            hot: Mutex::new(HashMap::new()),
        })
    }

    /// This worker thread's client for hops to the owners of keys. A hop goes out on a
    /// connection of the runtime serving the request: connections of one shared client are
    /// pooled across runtimes, and one made on the control runtime (the peers' health checks)
    /// then carried every hop across threads (45 % of an asking switch's CPU, a hit through a
    /// peer 2.2 × a local hit's; `benches/tier_hop.sh`).
    pub(crate) fn hop_client(&self) -> PeerClient {
        HOP_CLIENT.with(|cell| {
            let mut current = cell.borrow_mut();
            match &*current {
                Some((id, client)) if *id == self.id => client.clone(),
                _ => {
                    let client = peer_client(&self.config, self.own);
                    *current = Some((self.id, client.clone()));
                    client
                }
            }
        })
    }

    /// Whether peer `id` may own keys: this switch always, another while its checks pass.
    pub(crate) fn is_live(&self, id: usize) -> bool {
        id == self.own || self.peers.get(id).is_some_and(|p| p.check.is_up())
    }

    /// The peer that owns `key` among the live ones (this switch when no other is live).
    pub(crate) fn owner(&self, key: &str) -> usize {
        let info = RequestInfo {
            class: 0,
            key,
            key_hash: capstan_core::hash_key(key),
        };
        self.ring.pick(&info, &PeerView(self)).unwrap_or(self.own)
    }

    /// The peer a request came from, when its TCP source is one of the peers' addresses (the
    /// peer its hop header names first, when that peer is at this IP).
    pub(crate) fn peer_at(&self, ip: IpAddr, named: Option<&str>) -> Option<usize> {
        let named = named.and_then(|n| n.parse::<SocketAddr>().ok());
        let at_ip = |p: &&PeerRuntime| p.address.ip() == ip;
        (self.peers.iter())
            .position(|p| Some(p.address) == named && p.address.ip() == ip)
            .or_else(|| self.peers.iter().position(|p| at_ip(&p)))
    }

    /// Which dispatcher of the tier this switch is, for policies that split the work among them
    /// (`join-idle-queue`): the live peers numbered in address order, the same numbering at
    /// every switch that sees the same peers up. A few atomic loads per peer; only a policy
    /// that asks pays them.
    pub(crate) fn dispatcher(&self) -> capstan_core::Dispatcher {
        let mut index = 0;
        let mut count = 0;
        let own = self.peers[self.own].address;
        for (id, p) in self.peers.iter().enumerate() {
            if self.is_live(id) {
                count += 1;
                index += usize::from(p.address < own);
            }
        }
        capstan_core::Dispatcher { index, count }
    }

    /// The peer a gossip datagram from `from` is: the one whose listener address (IP and port)
    /// it came from, as a switch sends its gossip from its listener's address. Never this
    /// switch.
    pub(crate) fn gossip_peer(&self, from: SocketAddr) -> Option<usize> {
        (self.peers.iter())
            .position(|p| p.address == from)
            .filter(|&id| id != self.own)
    }

    /// Takes peer `id` out at once after a failed hop; its health checks bring it back after
    /// `rise` passes.
    pub(crate) fn hop_failed(&self, id: usize, error: String) {
        let result = CheckResult {
            passed: false,
            status: None,
            error: Some(format!("hop: {error}")),
        };
        if self.peers[id].check.record(&result, self.config.rise, 1) == Some(false) {
            tracing::warn!(peer = %self.peers[id].address, "hop failed ({error}): peer taken out");
        }
    }

    /// Counts one ask of a key another peer owns; true when it is hot (asked
    /// `local_copy_after` times within the current `local_copy_ttl` window).
    pub(crate) fn asked(&self, key: &str, now: Instant) -> bool {
        let after = self.config.local_copy_after;
        if after == 0 {
            return false;
        }
        let window = self.config.local_copy_ttl;
        let mut hot = self.hot.lock().unwrap_or_else(|p| p.into_inner());
        if hot.len() >= HOT_KEYS_MAX && !hot.contains_key(key) {
            hot.retain(|_, (_, since)| now.duration_since(*since) < window);
            if hot.len() >= HOT_KEYS_MAX {
                hot.clear();
            }
        }
        let entry = hot.entry(key.to_string()).or_insert((0, now));
        if now.duration_since(entry.1) >= window {
            *entry = (0, now);
        }
        entry.0 += 1;
        entry.0 >= after
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(peers: &[&str], own: &str) -> Tier {
        let mut config: TierConfig = toml::from_str(&format!(
            "peers = [{}]",
            peers
                .iter()
                .map(|p| format!("\"{p}\""))
                .collect::<Vec<_>>()
                .join(", ")
        ))
        .unwrap();
        config.resolve().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _guard = rt.enter();
        Tier::new(&config, &[own.parse().unwrap()]).unwrap()
    }

    const PEERS: [&str; 3] = ["127.0.0.2:8080", "127.0.0.3:8080", "127.0.0.4:8080"];

    #[test]
    fn every_switch_names_the_same_owner_and_keys_spread() {
        let tiers: Vec<Tier> = PEERS.iter().map(|own| tier(&PEERS, own)).collect();
        let mut owned = [0usize; 3];
        for i in 0..3000 {
            let key = format!("http://site/object/{i}");
            let owners: Vec<usize> = tiers.iter().map(|t| t.owner(&key)).collect();
            assert!(owners.iter().all(|&o| o == owners[0]), "{key}: {owners:?}");
            owned[owners[0]] += 1;
        }
        for n in owned {
            assert!((600..=1400).contains(&n), "uneven ownership {owned:?}");
        }
    }

    #[test]
    fn a_down_peers_keys_move_to_the_others_and_only_those() {
        let t = tier(&PEERS, PEERS[0]);
        let keys: Vec<String> = (0..1000).map(|i| format!("http://site/k{i}")).collect();
        let before: Vec<usize> = keys.iter().map(|k| t.owner(k)).collect();
        t.hop_failed(2, "refused".into());
        assert!(!t.is_live(2));
        for (key, was) in keys.iter().zip(&before) {
            let now = t.owner(key);
            assert_ne!(now, 2, "{key} still owned by the down peer");
            if *was != 2 {
                assert_eq!(now, *was, "{key} moved though its owner is up");
            }
        }
        assert!(before.contains(&2));
    }

    #[test]
    fn the_live_peers_are_numbered_in_address_order() {
        let t = tier(
            &["127.0.0.4:8080", "127.0.0.2:8080", "127.0.0.3:8080"],
            PEERS[2],
        );
        let d = t.dispatcher();
        assert_eq!((d.index, d.count), (2, 3));
        t.hop_failed(1, "refused".into());
        let d = t.dispatcher();
        assert_eq!((d.index, d.count), (1, 2));
    }

    #[test]
    fn alone_a_switch_owns_everything() {
        let t = tier(&PEERS, PEERS[1]);
        t.hop_failed(0, "refused".into());
        t.hop_failed(2, "refused".into());
        assert!((0..100).all(|i| t.owner(&format!("/k{i}")) == 1));
    }

    #[test]
    fn peers_are_known_by_ip_and_the_named_one_wins() {
        let t = tier(&["127.0.0.2:8080", "127.0.0.2:8081"], "127.0.0.2:8080");
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(t.peer_at(ip, Some("127.0.0.2:8081")), Some(1));
        assert_eq!(t.peer_at(ip, None), Some(0));
        assert_eq!(t.peer_at("127.0.0.1".parse().unwrap(), None), None);
    }

    #[test]
    fn a_key_is_hot_after_enough_asks_within_the_window() {
        let t = tier(&PEERS, PEERS[0]);
        let start = Instant::now();
        let asks: Vec<bool> = (0..8).map(|_| t.asked("/hot", start)).collect();
        assert_eq!(asks.iter().filter(|&&h| h).count(), 1);
        assert!(asks[7]);
        let later = start + Duration::from_secs(2);
        assert!(!t.asked("/hot", later), "a new window counts again");
    }
}
