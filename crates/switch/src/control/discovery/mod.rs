//! Discovery: following `[[discovery]]` sources of nodes beside the static `[[node]]`s.
//!
//! Each source kind only says what its source lists: a feed task sends a [`Look`] (the nodes,
//! or why there are none to be had) whenever the source may have changed (`file`: its stamp
//! changed; `dns`: the answer's TTL passed; `etcd`: its watch saw a change). Everything else
//! is common and lives here:
//!
//! - A good list is applied through membership (`Switch::set_discovered`): nodes that stay
//!   keep their runtime, new ones enter with slow start, removed ones drain. Static nodes and
//!   nodes added through the admin API are never removed.
//! - A failed look keeps the last good set; the failure is logged once per change of error
//!   and counted (`/status`, `/metrics`). An explicitly empty list is applied only after it
//!   has lasted `hold`.
//! - Every `interval` the last good list is put back (a reload may have dropped a node that
//!   clashed with a static one since removed) and the source's settings are compared with the
//!   running configuration: a changed source restarts its feed, a removed one stops, and a
//!   source added by a reload starts ([`follow_all`]).
//!
//! The request path is never involved: it sees a new cluster when one is swapped in.
//!
//! - Entries a kind dropped (a bad DNS record, an etcd value that is not a node:
//!   [`Listing::dropped`]) and entries that clash with another node's address or name are
//!   shown in `/status` (`skipped`), counted (`capstan_discovery_skipped`) and logged once
//!   each; the rest of the list applies.
//!
//! A new kind adds: its variant of `SourceKind` (config), a module here with a feed, and an
//! arm in [`spawn_feed`] and [`resolve_once`].
//!
//! Layers: `entries` (one entry made a node) and `look` (what a kind's feed reports) ← `file`,
//! `dns`, `etcd` (the kinds) ← this module.

mod dns;
mod entries;
mod etcd;
mod file;
mod look;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::{Config, DiscoverySource, NodeConfig, SourceKind};
use crate::state::cluster::Cluster;
use crate::state::switch::Switch;

pub(crate) use file::parse_nodes as parse_file;
pub use look::Listing;
pub(crate) use look::{Dropped, Look};

/// Starts the feed of a source's kind, sending its looks to `looks`. Used for the
/// `[[discovery]]` sources of nodes and for the tier's source of peers
/// (`crate::control::tier_peers`).
pub(crate) fn spawn_feed(
    source: &DiscoverySource,
    looks: mpsc::Sender<Look>,
    dropped: Dropped,
) -> JoinHandle<()> {
    match &source.kind {
        SourceKind::File(path) => tokio::spawn(file::feed(source.clone(), path.clone(), looks)),
        SourceKind::Dns(settings) => {
            tokio::spawn(dns::feed(dropped, source.clone(), settings.clone(), looks))
        }
        SourceKind::Etcd(e) => tokio::spawn(etcd::feed(dropped, source.clone(), e.clone(), looks)),
    }
}

/// One look at a source, blocking, in full: what `capstan check --resolve` prints. A DNS
/// lookup takes at most about 2 × `attempts` × `timeout`.
pub fn resolve_once(source: &DiscoverySource) -> Result<Listing, String> {
    match &source.kind {
        SourceKind::File(path) => file::read(source, path).map(|nodes| Listing {
            nodes,
            ..Listing::default()
        }),
        SourceKind::Dns(settings) => dns::look_once(source, settings),
        SourceKind::Etcd(e) => etcd::look_once(source, e),
    }
}

/// One look at a source, blocking (at start, before the first cluster is built); what it
/// dropped is logged.
pub(crate) fn look_once(source: &DiscoverySource) -> Look {
    let listing = resolve_once(source)?;
    for line in &listing.dropped {
        tracing::warn!(source = %source.name, "discovery: dropped {line}");
    }
    Ok(listing.nodes)
}

/// A task aborted when this handle is dropped, so a source's feed never outlives its
/// follower, nor a follower the switch's task that started it.
pub(crate) struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What one source gave at start: the source, and the names of the nodes it added or why it
/// gave none.
pub(crate) type Initial = Vec<(DiscoverySource, Result<Vec<String>, String>)>;

/// At start: adds each source's nodes to the configuration, so the first cluster has them.
/// A source that cannot be used yet starts empty (its follower keeps looking).
pub(crate) fn add_initial_nodes(config: &mut Config) -> Initial {
    let sources = config.discovery.clone();
    let mut initial = Vec::new();
    for source in sources {
        let added = look_once(&source).map(|nodes| {
            let mut added = Vec::new();
            for node in nodes {
                match config
                    .nodes
                    .iter()
                    .find(|n| n.address == node.address || n.name == node.name)
                {
                    Some(other) => tracing::warn!(
                        source = %source.name,
                        "discovered {} skipped: node `{}` ({}) is configured already",
                        node.address,
                        other.name,
                        other.address
                    ),
                    None => {
                        added.push(node.name.clone());
                        config.nodes.push(node);
                    }
                }
            }
            added
        });
        if let Err(e) = &added {
            tracing::warn!(source = %source.name, "discovery: {e}; no nodes from it yet");
        }
        initial.push((source, added));
    }
    initial
}

/// Records what the sources gave at start, for `/status` and for their followers.
pub(crate) fn record_initial(switch: &Switch, initial: Initial) {
    for (source, added) in initial {
        switch.discovery.update(&source, |s| match added {
            Ok(owned) => {
                s.refreshes_ok += 1;
                s.last_good = Some(Instant::now());
                s.nodes = owned.len();
                s.owned = owned;
            }
            Err(e) => {
                s.refreshes_error += 1;
                s.error = Some(e);
            }
        });
    }
}

/// On reload: keeps the nodes of the sources the new configuration still has (the file
/// decides static nodes; a discovered node whose name or address a static one now has leaves).
pub(crate) fn keep_discovered(switch: &Switch, current: &Cluster, config: &mut Config) {
    for state in switch.discovery.snapshot() {
        if !config.discovery.iter().any(|s| s.name == state.name) {
            continue;
        }
        for node in current.nodes.iter().map(|n| &n.config) {
            let clash = config
                .nodes
                .iter()
                .any(|n| n.name == node.name || n.address == node.address);
            if state.owned.contains(&node.name) && !clash {
                config.nodes.push(node.clone());
            }
        }
    }
}

/// Follows every configured source for as long as the switch runs: starts a follower for
/// each source, and for each source a reload adds.
pub(crate) async fn follow_all(switch: Arc<Switch>) {
    let mut shutdown = switch.shutdown.subscribe();
    let mut running: Vec<(String, AbortOnDrop)> = Vec::new();
    loop {
        running.retain(|(_, task)| !task.0.is_finished());
        let configured = switch.cluster.load().config.discovery.clone();
        for source in configured {
            if !running.iter().any(|(name, _)| *name == source.name) {
                let name = source.name.clone();
                let task = tokio::spawn(follow(Arc::clone(&switch), source));
                running.push((name, AbortOnDrop(task)));
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

/// Follows one source until it leaves the configuration or the switch stops.
async fn follow(switch: Arc<Switch>, source: DiscoverySource) {
    let mut shutdown = switch.shutdown.subscribe();
    let mut follower = Follower::new(Arc::clone(&switch), source);
    let (mut looks, mut feed) = follower.start_feed();
    loop {
        let wake = follower.next_wake();
        let mut feed_ended = false;
        tokio::select! {
            look = looks.recv() => match look {
                Some(look) => follower.take(look),
                None => feed_ended = true,
            },
            _ = tokio::time::sleep(wake) => {
                match (switch.cluster.load().config.discovery.iter())
                    .find(|s| s.name == follower.source.name)
                {
                    None => break,
                    Some(now) if *now != follower.source => {
                        follower.source = now.clone();
                        (looks, feed) = follower.start_feed();
                    }
                    Some(_) => {}
                }
            }
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
        if feed_ended {
            // It should not end: start it again after a pause.
            tokio::time::sleep(follower.source.interval).await;
            (looks, feed) = follower.start_feed();
        }
        follower.apply().await;
    }
    drop(feed);
    // Its nodes left with the reload that removed it.
    switch.discovery.remove(&follower.source.name);
}

/// One source's follower: its last good list and what it has told the operator.
struct Follower {
    switch: Arc<Switch>,
    source: DiscoverySource,
    /// The last good list, applied or (when empty, within `hold`) waiting to be.
    good: Option<Vec<NodeConfig>>,
    /// Since when the good list has been empty.
    empty_since: Option<Instant>,
    /// The names of the nodes this source put into the cluster.
    owned: Vec<String>,
    /// The last look's error, logged once.
    last_error: Option<String>,
    /// Why the cluster refused the last list, logged once.
    last_refusal: Option<String>,
    /// The entries of the last applied list that clashed with other nodes, logged once each.
    clashes: Vec<String>,
}

impl Follower {
    fn new(switch: Arc<Switch>, source: DiscoverySource) -> Self {
        let mut owned = Vec::new();
        switch
            .discovery
            .update(&source, |s| owned = s.owned.clone());
        Follower {
            switch,
            source,
            good: None,
            empty_since: None,
            owned,
            last_error: None,
            last_refusal: None,
            clashes: Vec::new(),
        }
    }

    /// A new feed for the source as configured now; the old one (if any) is aborted when
    /// the caller drops its handle.
    fn start_feed(&self) -> (mpsc::Receiver<Look>, AbortOnDrop) {
        let (send, receive) = mpsc::channel(1);
        let (switch, source) = (Arc::clone(&self.switch), self.source.clone());
        let dropped: Dropped =
            Arc::new(move |now| switch.discovery.update(&source, |s| s.dropped = now));
        (
            receive,
            AbortOnDrop(spawn_feed(&self.source, send, dropped)),
        )
    }

    /// How long to wait for a look before the next timed wake: `interval`, or sooner when a
    /// held empty list becomes due.
    fn next_wake(&self) -> Duration {
        match self.empty_since {
            Some(since) if self.good.as_ref().is_some_and(Vec::is_empty) => self
                .source
                .interval
                .min(self.source.hold.saturating_sub(since.elapsed()))
                .max(Duration::from_millis(10)),
            _ => self.source.interval,
        }
    }

    /// Takes a look: a good list replaces the last one; an error keeps it.
    fn take(&mut self, look: Look) {
        let error = look.as_ref().err().cloned();
        self.switch.discovery.update(&self.source, |s| {
            match &error {
                None => {
                    s.refreshes_ok += 1;
                    s.last_good = Some(Instant::now());
                }
                Some(_) => s.refreshes_error += 1,
            }
            s.error = error;
        });
        let name = &self.source.name;
        match look {
            Ok(nodes) => {
                if self.last_error.take().is_some() {
                    tracing::info!(source = %name, "discovery: the source is good again");
                }
                match nodes.is_empty() {
                    true => {
                        self.empty_since.get_or_insert_with(Instant::now);
                    }
                    false => self.empty_since = None,
                }
                self.good = Some(nodes);
            }
            Err(e) => {
                if self.last_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(source = %name, "discovery: {e}; keeping the last good list");
                }
                self.last_error = Some(e);
            }
        }
    }

    /// Puts the last good list into the cluster, unless it is an empty one still held.
    async fn apply(&mut self) {
        let Some(nodes) = &self.good else { return };
        let held = (self.empty_since).is_some_and(|since| since.elapsed() < self.source.hold);
        if held {
            return;
        }
        let name = &self.source.name;
        match self
            .switch
            .set_discovered(name, &self.owned, nodes.clone())
            .await
        {
            Ok((now, _changed, clashes)) => {
                self.last_refusal = None;
                for clash in clashes.iter().filter(|c| !self.clashes.contains(c)) {
                    tracing::warn!(source = %name, "discovery: skipped {clash}");
                }
                self.clashes.clone_from(&clashes);
                self.switch.discovery.update(&self.source, |s| {
                    s.nodes = now.len();
                    s.owned = now.clone();
                    s.clashes = clashes;
                });
                self.owned = now;
            }
            Err(e) => {
                let e = e.to_string();
                if self.last_refusal.as_deref() != Some(e.as_str()) {
                    tracing::warn!(source = %name, "discovery: {e}");
                }
                self.last_refusal = Some(e);
            }
        }
    }
}
