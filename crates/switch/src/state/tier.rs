//! The tier as shared state: the peers (each switch of the tier by its client listener) with
//! their health-check state and counters, which one is this switch, the ring that gives every
//! cache key its owner, the hop client, the hot-key counts behind local copies, and the state of
//! the discovery source that finds more peers.
//!
//! The owner of a key is chosen by `capstan-core`'s consistent hashing over the peers'
//! addresses, among the peers that are up. Its load bound is off (ε = ∞): every switch must
//! name the same owner for a key without knowing the others' load, or one key would be filled
//! once per owner the switches disagree on.
//!
//! The peer set may change at run time (`tier.discovery`): it lives in [`Members`], swapped whole,
//! so a request reads one consistent snapshot (peers, own index, ring) with one atomic load, and
//! a peer that stays keeps its runtime (checks, counters) across the swap.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
#[cfg(test)]
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
use capstan_core::policy::ConsistentHash;
use capstan_core::{ClusterView, NodeId, NodeState, Policy, RequestInfo};

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

impl PeerRuntime {
    fn new(address: SocketAddr) -> PeerRuntime {
        PeerRuntime {
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
        }
    }
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
    /// The gossip socket's last receive error other than "nothing queued", if any (a socket
    /// that cannot be bound stops the switch at start instead).
    pub error: Mutex<Option<String>>,
    /// Nodes taken out here because the tier's gossip said enough peers have them out
    /// (`tier.ejection`), and such ejections not made because they would have taken out too
    /// many nodes.
    pub tier_ejections: AtomicU64,
    pub tier_ejections_prevented: AtomicU64,
}

/// Where the tier's peers come from besides `tier.peers`: the `tier.discovery` source's state
/// and this switch's own registration (`tier.register`), as `/status` shows them.
#[derive(Clone, Debug, Default)]
pub(crate) struct PeerSourceState {
    /// The last look failed (the last good peer set stays).
    pub error: Option<String>,
    /// When the source last gave a good list.
    pub last_good: Option<Instant>,
    pub looks_ok: u64,
    pub looks_failed: u64,
    /// Entries of the last good list the source's kind dropped, and why (a value that is not
    /// an address, port 0).
    pub skipped: Vec<String>,
    /// Entries that gave an address no peer can have (a wildcard address), and why.
    pub unusable: Vec<String>,
    /// Entries skipped since start (each counted once when it appears).
    pub skipped_total: u64,
    /// The addresses the source gave last.
    pub found: Vec<SocketAddr>,
    /// This switch's registration: its key, once registered.
    pub registered_key: Option<String>,
    /// Times the key was put (again: a new lease after etcd lost the old one).
    pub registrations: u64,
    /// The registration's last failure, until it is registered again.
    pub registration_error: Option<String>,
}

/// The peers at one moment: each one's runtime (kept while it stays a peer), where it came
/// from, which is this switch, and the ring that names each key's owner among them. Swapped
/// whole when the set changes; a request reads one snapshot.
pub(crate) struct Members {
    /// In address order, so every switch that has the same set numbers it alike.
    pub peers: Vec<Arc<PeerRuntime>>,
    /// Where each peer came from: `static`, the discovery source's kind (`dns`, `etcd`,
    /// `file`), both (`static+etcd`), or `self` (this switch, listed by neither).
    pub sources: Vec<String>,
    /// This switch's index in `peers`.
    pub own: usize,
    ring: ConsistentHash,
}

/// The peers as a policy sees nodes: up or not, no load (the bound is off).
struct PeerView<'a>(&'a Members);

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

impl Members {
    /// The members for `listed` (address and where it came from; this switch is added when
    /// absent), reusing the runtimes of `before` for the peers that stay.
    fn build(
        own: SocketAddr,
        mut listed: Vec<(SocketAddr, String)>,
        before: Option<&Members>,
    ) -> anyhow::Result<Members> {
        if !listed.iter().any(|(a, _)| *a == own) {
            listed.push((own, "self".to_string()));
        }
        listed.sort_by_key(|(a, _)| *a);
        listed.dedup_by_key(|(a, _)| *a);
        let names: Vec<String> = listed.iter().map(|(a, _)| a.to_string()).collect();
        let ring = ConsistentHash::new(&names, f64::INFINITY, VIRTUAL_NODES)
            .map_err(|e| anyhow::anyhow!("tier ring: {e}"))?;
        let peers: Vec<Arc<PeerRuntime>> = (listed.iter())
            .map(|(address, _)| {
                (before.and_then(|b| b.peers.iter().find(|p| p.address == *address)))
                    .map_or_else(|| Arc::new(PeerRuntime::new(*address)), Arc::clone)
            })
            .collect();
        Ok(Members {
            own: listed.iter().position(|(a, _)| *a == own).expect("added"),
            sources: listed.into_iter().map(|(_, s)| s).collect(),
            peers,
            ring,
        })
    }

    /// Whether peer `id` may own keys: this switch always, another while its checks pass.
    pub(crate) fn is_live(&self, id: usize) -> bool {
        id == self.own || self.peers.get(id).is_some_and(|p| p.check.is_up())
    }

    /// The peers that may own keys now, this switch included (1 at least).
    pub(crate) fn live_count(&self) -> usize {
        (0..self.peers.len()).filter(|&id| self.is_live(id)).count()
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
        let at_ip = |p: &&Arc<PeerRuntime>| p.address.ip() == ip;
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
}

/// Tells one `Tier` from the next (a reload makes a new one), so a thread's pool of hop
/// connections (`crate::upstream::pool::send_to_peer`) is made again for a new tier's settings.
static NEXT_TIER_ID: AtomicU64 = AtomicU64::new(0);

/// The tier this switch is part of.
pub(crate) struct Tier {
    /// Which tier this is, for the per-thread pools of hop connections.
    id: u64,
    pub config: TierConfig,
    /// This switch's client listener, by which its peers know it.
    pub own_address: SocketAddr,
    /// The peers now (`tier.peers` and what the discovery source last gave, this switch
    /// always among them).
    members: ArcSwap<Members>,
    /// The discovery source's state and this switch's registration.
    pub source: Mutex<PeerSourceState>,
    /// Requests whose hop header was removed: not from a peer's address.
    pub forged_hops: AtomicU64,
    /// Hits on local copies of keys another peer owns.
    pub local_copy_hits: AtomicU64,
    /// Local copies stored.
    pub local_copies_stored: AtomicU64,
    pub gossip: GossipCounters,
    hot: Mutex<HashMap<String, (u32, Instant)>>,
}

impl Tier {
    /// The tier of a validated `[tier]`: `listen` (every client listener) finds this switch.
    pub(crate) fn new(config: &TierConfig, listen: &[SocketAddr]) -> anyhow::Result<Tier> {
        let own_address = config.own_address(listen).ok_or_else(|| {
            anyhow::anyhow!("tier: no client listener of this switch can be its peer address")
        })?;
        let members = Members::build(own_address, config.static_peers(), None)?;
        Ok(Tier {
            id: NEXT_TIER_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            config: config.clone(),
            own_address,
            members: ArcSwap::from_pointee(members),
            source: Mutex::new(PeerSourceState::default()),
            forged_hops: AtomicU64::new(0),
            local_copy_hits: AtomicU64::new(0),
            local_copies_stored: AtomicU64::new(0),
            gossip: GossipCounters::default(),
            hot: Mutex::new(HashMap::new()),
        })
    }

    /// Which tier this is: a reload makes a new one (per-thread hop pools are made again).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The peers now (a snapshot: a change of the set swaps in another).
    pub(crate) fn members(&self) -> Arc<Members> {
        self.members.load_full()
    }

    /// Takes the addresses the discovery source (of kind `kind`) gives now: the peers become
    /// them and `tier.peers`, this switch always among them. Peers that stay keep their
    /// state; new ones start up (as a switch at start: a hop that fails takes one out at
    /// once). Returns the addresses that joined and those that left.
    pub(crate) fn set_discovered(
        &self,
        found: &[SocketAddr],
        kind: &str,
    ) -> anyhow::Result<(Vec<SocketAddr>, Vec<SocketAddr>)> {
        let mut listed = self.config.static_peers();
        for a in found {
            match listed.iter_mut().find(|(l, _)| l == a) {
                Some((_, source)) => *source = format!("static+{kind}"),
                None => listed.push((*a, kind.to_string())),
            }
        }
        let before = self.members();
        let after = Members::build(self.own_address, listed, Some(&before))?;
        let was = |a: &SocketAddr| before.peers.iter().any(|p| p.address == *a);
        let is = |a: &SocketAddr| after.peers.iter().any(|p| p.address == *a);
        let joined = (after.peers.iter().map(|p| p.address))
            .filter(|a| !was(a))
            .collect();
        let left = (before.peers.iter().map(|p| p.address))
            .filter(|a| !is(a))
            .collect();
        self.members.store(Arc::new(after));
        Ok((joined, left))
    }

    /// Whether `key`'s owner is another peer than this switch (one lock-free load: the
    /// request path asks it for every cachable request).
    pub(crate) fn owner_is_other(&self, key: &str) -> bool {
        let m = self.members.load();
        m.owner(key) != m.own
    }

    /// Which dispatcher of the tier this switch is (see [`Members::dispatcher`]).
    pub(crate) fn dispatcher(&self) -> capstan_core::Dispatcher {
        self.members.load().dispatcher()
    }

    /// Takes `peer` out at once after a failed hop; its health checks bring it back after
    /// `rise` passes.
    pub(crate) fn hop_failed(&self, peer: &PeerRuntime, error: String) {
        let result = CheckResult {
            passed: false,
            status: None,
            error: Some(format!("hop: {error}")),
        };
        if peer.check.record(&result, self.config.rise, 1) == Some(false) {
            tracing::warn!(peer = %peer.address, "hop failed ({error}): peer taken out");
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
        config.resolve(None).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _guard = rt.enter();
        Tier::new(&config, &[own.parse().unwrap()]).unwrap()
    }

    fn addr(a: &str) -> SocketAddr {
        a.parse().unwrap()
    }

    const PEERS: [&str; 3] = ["127.0.0.2:8080", "127.0.0.3:8080", "127.0.0.4:8080"];

    #[test]
    fn every_switch_names_the_same_owner_and_keys_spread() {
        let tiers: Vec<Tier> = PEERS.iter().map(|own| tier(&PEERS, own)).collect();
        let mut owned = [0usize; 3];
        for i in 0..3000 {
            let key = format!("http://site/object/{i}");
            let owners: Vec<usize> = tiers.iter().map(|t| t.members().owner(&key)).collect();
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
        let m = t.members();
        let keys: Vec<String> = (0..1000).map(|i| format!("http://site/k{i}")).collect();
        let before: Vec<usize> = keys.iter().map(|k| m.owner(k)).collect();
        t.hop_failed(&m.peers[2], "refused".into());
        assert!(!m.is_live(2));
        for (key, was) in keys.iter().zip(&before) {
            let now = m.owner(key);
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
        let m = t.members();
        assert_eq!(m.peers[0].address, addr("127.0.0.2:8080"), "address order");
        t.hop_failed(&m.peers[1], "refused".into());
        let d = t.dispatcher();
        assert_eq!((d.index, d.count), (1, 2));
        assert_eq!(m.live_count(), 2);
    }

    #[test]
    fn alone_a_switch_owns_everything() {
        let t = tier(&PEERS, PEERS[1]);
        let m = t.members();
        t.hop_failed(&m.peers[0], "refused".into());
        t.hop_failed(&m.peers[2], "refused".into());
        assert!((0..100).all(|i| m.owner(&format!("/k{i}")) == 1));
    }

    #[test]
    fn peers_are_known_by_ip_and_the_named_one_wins() {
        let t = tier(&["127.0.0.2:8080", "127.0.0.2:8081"], "127.0.0.2:8080");
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        let m = t.members();
        assert_eq!(m.peer_at(ip, Some("127.0.0.2:8081")), Some(1));
        assert_eq!(m.peer_at(ip, None), Some(0));
        assert_eq!(m.peer_at("127.0.0.1".parse().unwrap(), None), None);
    }

    #[test]
    fn discovered_peers_join_the_static_ones_and_this_switch_stays() {
        let t = tier(&["127.0.0.2:8080"], "127.0.0.2:8080");
        t.members().peers[0]
            .hops_sent
            .fetch_add(5, Ordering::Relaxed);
        let found = [addr("127.0.0.3:8080"), addr("127.0.0.2:8080")];
        let (joined, left) = t.set_discovered(&found, "etcd").unwrap();
        assert_eq!((joined, left), (vec![addr("127.0.0.3:8080")], vec![]));
        let m = t.members();
        assert_eq!(m.sources, ["static+etcd", "etcd"]);
        assert_eq!(m.peers[0].hops_sent.load(Ordering::Relaxed), 5, "kept");
        // The source forgets every peer, this one included: the tier is this switch and
        // the static peers, never empty.
        let (joined, left) = t.set_discovered(&[], "etcd").unwrap();
        assert_eq!((joined, left), (vec![], vec![addr("127.0.0.3:8080")]));
        assert_eq!(t.members().sources, ["static"]);
        // A switch listed by nobody has itself.
        let mut config: TierConfig =
            toml::from_str("discovery = { file = \"peers.json\" }").unwrap();
        config.resolve(None).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let lone = Tier::new(&config, &[addr("127.0.0.5:8080")]).unwrap();
        let m = lone.members();
        assert_eq!((m.peers.len(), m.sources[0].as_str()), (1, "self"));
        lone.set_discovered(&[addr("127.0.0.3:8080")], "dns")
            .unwrap();
        let m = lone.members();
        assert_eq!(m.sources, ["dns", "self"]);
        assert_eq!(m.peers[m.own].address, addr("127.0.0.5:8080"));
    }

    #[test]
    fn a_joining_peer_takes_only_its_share_of_the_keys() {
        let t = tier(&PEERS[..2], PEERS[0]);
        let keys: Vec<String> = (0..1000).map(|i| format!("http://site/k{i}")).collect();
        let owner = |t: &Tier, k: &str| {
            let m = t.members();
            m.peers[m.owner(k)].address
        };
        let before: Vec<SocketAddr> = keys.iter().map(|k| owner(&t, k)).collect();
        t.set_discovered(&[addr(PEERS[2])], "file").unwrap();
        let mut moved = 0;
        for (k, was) in keys.iter().zip(&before) {
            let now = owner(&t, k);
            if now != *was {
                assert_eq!(now, addr(PEERS[2]), "{k} moved to a peer that was there");
                moved += 1;
            }
        }
        assert!((200..=450).contains(&moved), "{moved} keys moved");
    }

    #[test]
    fn a_key_is_hot_after_enough_asks_within_the_window() {
        let t = tier(&PEERS, PEERS[0]);
        let start = Instant::now();
        let asks: Vec<bool> = (0..8).map(|_| t.asked("/hot", start)).collect();
        assert_eq!(asks.iter().filter(|&&h| h).count(), 1);
        assert!(asks[7]);
        let later = start + std::time::Duration::from_secs(2);
        assert!(!t.asked("/hot", later), "a new window counts again");
    }
}
