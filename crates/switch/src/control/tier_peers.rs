//! The tier's peers found by a discovery source (`tier.discovery`), and this switch's own
//! registration in etcd (`tier.register`).
//!
//! The source is followed by the same feeds as a `[[discovery]]` source of nodes
//! (`crate::control::discovery::spawn_feed`: a file looked at, DNS looked up again at its TTL,
//! an etcd prefix watched); each entry's address is a peer's client listener. What differs is
//! what a list does:
//!
//! - A good list becomes the peers together with `tier.peers` (the union), and this switch is
//!   always among them, whether the source lists it or not. The ring is rebuilt over the new
//!   set, so every switch that sees the same set names the same owner for a key; a peer that
//!   stays keeps its checks and counters.
//! - A failed look (the registry down, the file unreadable or bad) keeps the last good set:
//!   the tier never empties because a registry failed. `/status` says so (the source's state,
//!   its last error, the age of its last good list).
//! - An empty list (every key gone, NXDOMAIN) is applied only after it has lasted the source's
//!   `hold`, as for nodes: a registry that briefly answers nothing does not shrink the tier.
//! - An entry that gives no peer (a value that is not an address, port 0, a wildcard address)
//!   is skipped, logged once with the reason, counted, and shown in `/status`; the rest apply.
//!
//! **Registration.** With an etcd source and `tier.register`, this switch puts its listener
//! address under the prefix (key `PREFIX` + address, value `{"address":"IP:PORT"}`, as
//! `capstan origin --register` puts a node) with a lease of `tier.register_ttl`, renewed by
//! capstan-discovery's keeper, which puts the key again under a new lease when etcd lost the
//! old one (etcd restarted without its data, or the switch was cut off longer than the
//! lease). When etcd cannot be reached at start the switch serves anyway and keeps trying. On
//! a clean shutdown the key is deleted first, so the others take this switch out at once
//! rather than after its checks fail; a killed switch's key vanishes with its lease.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_discovery::etcd::{self, NodeValue, Registration};
use tokio::sync::mpsc;

use crate::config::{DiscoverySource, EtcdSource, SourceKind};
use crate::control::discovery::{spawn_feed, AbortOnDrop, Dropped, Look};
use crate::state::switch::Switch;
use crate::state::tier::Tier;

/// Follows the tier's discovery source (and keeps this switch registered) until shutdown; the
/// registration is deleted before it returns.
pub(crate) async fn follow(switch: Arc<Switch>) {
    let Some(tier) = switch.tier.as_ref() else {
        return;
    };
    let Some(source) = tier.config.source.clone() else {
        return;
    };
    let register = match (&source.kind, tier.config.register) {
        (SourceKind::Etcd(e), true) => Some(tokio::spawn(keep_registered(
            Arc::clone(&switch),
            e.clone(),
        ))),
        _ => None,
    };
    let mut stop = switch.shutdown_signal();
    tokio::select! {
        _ = follow_source(&switch, tier, &source) => {}
        _ = stop.wait_for(|s| *s) => {}
    }
    if let Some(register) = register {
        // It deletes the key on the same signal; wait for it to be done.
        let _ = register.await;
    }
}

/// Takes the source's looks for as long as the switch runs.
async fn follow_source(switch: &Arc<Switch>, tier: &Tier, source: &DiscoverySource) {
    let mut follower = Follower::default();
    loop {
        let (send, mut looks) = mpsc::channel(1);
        let on_dropped: Dropped = {
            let switch = Arc::clone(switch);
            Arc::new(move |now: Vec<String>| {
                if let Some(tier) = &switch.tier {
                    record_skipped(tier, true, now);
                }
            })
        };
        let _feed = AbortOnDrop(spawn_feed(source, send, on_dropped));
        loop {
            let wake = follower.next_wake(source);
            tokio::select! {
                look = looks.recv() => match look {
                    Some(look) => follower.take(tier, source, look),
                    None => break,
                },
                _ = tokio::time::sleep(wake) => {}
            }
            follower.apply(switch, tier, source);
        }
        // A feed should not end: start it again after a pause.
        tokio::time::sleep(source.interval).await;
    }
}

/// The source's last good list and what was said of it.
#[derive(Default)]
struct Follower {
    /// The last good list's addresses (not yet applied when empty within `hold`).
    good: Option<Vec<SocketAddr>>,
    /// Since when the good list has been empty.
    empty_since: Option<Instant>,
    /// The set last applied.
    applied: Option<Vec<SocketAddr>>,
    /// The last look's error, logged once.
    last_error: Option<String>,
}

impl Follower {
    /// How long to wait for a look: the source's interval, or until a held empty list is due.
    fn next_wake(&self, source: &DiscoverySource) -> Duration {
        match self.empty_since {
            Some(since) => (source.hold.saturating_sub(since.elapsed()))
                .min(source.interval)
                .max(Duration::from_millis(10)),
            None => source.interval,
        }
    }

    /// Takes a look: a good list replaces the last one (its unusable entries skipped); an
    /// error keeps it.
    fn take(&mut self, tier: &Tier, source: &DiscoverySource, look: Look) {
        let mut state = tier.source.lock().unwrap_or_else(|p| p.into_inner());
        match look {
            Ok(nodes) => {
                state.looks_ok += 1;
                state.last_good = Some(Instant::now());
                if let Some(e) = state.error.take() {
                    tracing::info!(source = %source.name, "tier peers: the source is good again (it failed: {e})");
                }
                self.last_error = None;
                let mut found = Vec::new();
                let mut unusable = Vec::new();
                for node in nodes {
                    match usable(node.address) {
                        Ok(a) => found.push(a),
                        Err(e) => unusable.push(format!("{}: {e}", node.address)),
                    }
                }
                drop(state);
                record_skipped(tier, false, unusable);
                match found.is_empty() {
                    true => {
                        self.empty_since.get_or_insert_with(Instant::now);
                    }
                    false => self.empty_since = None,
                }
                self.good = Some(found);
            }
            Err(e) => {
                state.looks_failed += 1;
                if self.last_error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(source = %source.name, "tier peers: {e}; keeping the last good peer set");
                }
                state.error = Some(e.clone());
                self.last_error = Some(e);
            }
        }
    }

    /// Makes the last good list the peers, unless it is an empty one still held or the set
    /// already.
    fn apply(&mut self, switch: &Switch, tier: &Tier, source: &DiscoverySource) {
        let Some(found) = &self.good else { return };
        let held = self
            .empty_since
            .is_some_and(|since| since.elapsed() < source.hold);
        if held || self.applied.as_ref() == Some(found) {
            return;
        }
        match tier.set_discovered(found, source.kind.name()) {
            Ok((joined, left)) => {
                for a in &joined {
                    tracing::info!(peer = %a, source = %source.name, "tier peer joined");
                }
                for a in &left {
                    tracing::info!(peer = %a, source = %source.name, "tier peer left");
                }
                self.applied = Some(found.clone());
                tier.source.lock().unwrap_or_else(|p| p.into_inner()).found = found.clone();
                crate::control::tier::share_admission(switch, tier);
            }
            Err(e) => tracing::warn!(source = %source.name, "tier peers: {e}"),
        }
    }
}

/// A discovered address that can be a peer: a client listener others can reach.
fn usable(address: SocketAddr) -> Result<SocketAddr, String> {
    if address.ip().is_unspecified() {
        return Err("a wildcard address is no peer's listener".into());
    }
    Ok(address)
}

/// Records the entries the source's kind dropped (`by_kind`: from the feed) or the follower
/// found unusable (not `by_kind`), replacing the last such list; logs and counts each new one
/// once.
fn record_skipped(tier: &Tier, by_kind: bool, lines: Vec<String>) {
    let mut state = tier.source.lock().unwrap_or_else(|p| p.into_inner());
    let state = &mut *state;
    let (list, other) = match by_kind {
        true => (&mut state.skipped, &state.unusable),
        false => (&mut state.unusable, &state.skipped),
    };
    for line in lines
        .iter()
        .filter(|l| !list.contains(l) && !other.contains(l))
    {
        tracing::warn!("tier peers: skipped {line}");
        state.skipped_total += 1;
    }
    *list = lines;
}

/// Keeps this switch registered under the etcd source's prefix until shutdown, then deletes
/// its key. Registering again after a failure is the keeper's job once registered; before,
/// this retries with a doubling pause (at most the lease's length).
async fn keep_registered(switch: Arc<Switch>, source: EtcdSource) {
    let Some(tier) = switch.tier.as_ref() else {
        return;
    };
    let mut stop = switch.shutdown_signal();
    let mut pause = Duration::from_millis(250);
    let registration = loop {
        tokio::select! {
            got = register_once(tier, &source) => match got {
                Ok(r) => break r,
                Err(e) => {
                    let mut state = tier.source.lock().unwrap_or_else(|p| p.into_inner());
                    if state.registration_error.as_deref() != Some(e.as_str()) {
                        tracing::warn!("tier: cannot register this switch in etcd ({e}); retrying");
                    }
                    state.registration_error = Some(e);
                }
            },
            _ = stop.wait_for(|s| *s) => return,
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        pause = (pause * 2).min(tier.config.register_ttl);
    };
    let mut status = registration.status();
    {
        let mut state = tier.source.lock().unwrap_or_else(|p| p.into_inner());
        state.registered_key = Some(registration.key().to_string());
        state.registration_error = None;
    }
    tracing::info!(
        "tier: registered this switch in etcd as {}",
        registration.key()
    );
    loop {
        tokio::select! {
            changed = status.changed() => {
                if changed.is_err() {
                    break;
                }
                let now = status.borrow_and_update().clone();
                let mut state = tier.source.lock().unwrap_or_else(|p| p.into_inner());
                state.registrations = now.registrations;
                state.registration_error = now.error;
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    deregister(tier, registration).await;
}

/// Puts this switch's key under a new lease.
async fn register_once(tier: &Tier, source: &EtcdSource) -> Result<Registration, String> {
    let settings = etcd::Settings {
        connect_timeout: source.timeout,
        request_timeout: source.timeout,
        ..etcd::Settings::new(source.endpoints.clone())
    };
    let address = tier.own_address.to_string();
    let value = NodeValue::new(address.clone()).to_json();
    let registration = etcd::register(
        settings,
        &source.prefix,
        &address,
        value,
        tier.config.register_ttl,
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut state = tier.source.lock().unwrap_or_else(|p| p.into_inner());
    state.registrations = 1;
    Ok(registration)
}

/// Deletes this switch's key on the way out (its lease expires anyway if that fails).
async fn deregister(tier: &Tier, registration: Registration) {
    let key = registration.key().to_string();
    let timeout = tier.config.hop_timeout.max(Duration::from_secs(2));
    match tokio::time::timeout(timeout, registration.shutdown()).await {
        Ok(Ok(())) => tracing::info!("tier: deregistered {key}"),
        Ok(Err(e)) => {
            tracing::warn!("tier: could not delete {key} ({e}); it vanishes when its lease expires")
        }
        Err(_) => {
            tracing::warn!("tier: deleting {key} took too long; it vanishes when its lease expires")
        }
    }
}
