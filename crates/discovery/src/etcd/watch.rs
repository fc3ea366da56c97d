//! Following a key prefix: a range at revision R, then a watch from R + 1; after a lost
//! connection, a new watch from the last revision seen + 1, so no event is missed or applied
//! twice. A revision compacted away meanwhile (etcd's watch answers `compact_revision`), or a
//! store that went back in time (restored from a backup), falls back to a fresh range.
//!
//! The task hands out a [`Snapshot`] (every key under the prefix → value) after the first
//! range, after each watch response that changed something, and after each reconnection (so
//! a caller that saw an error knows the watch is whole again). Errors are handed out as they happen;
//! the task then waits (doubling backoff) and reconnects. It ends only when the
//! [`PrefixWatch`] is dropped.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::gateway::{Gateway, Stream, Why};
use super::wire::{self, EventKind};
use super::{Backoff, Error, NodeValue, Settings};

/// Every key under the prefix and its value, as of `revision`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// etcd's revision this snapshot is at.
    pub revision: i64,
    /// Full key → value.
    pub entries: BTreeMap<String, Vec<u8>>,
}

impl Snapshot {
    /// The values read as nodes, by key; and, for each value that is not a node, why (its
    /// key named). A bad value never becomes a node.
    pub fn nodes(&self) -> (Vec<(String, NodeValue)>, Vec<String>) {
        let mut nodes = Vec::new();
        let mut errors = Vec::new();
        for (key, value) in &self.entries {
            match NodeValue::parse(key, value) {
                Ok(node) => nodes.push((key.clone(), node)),
                Err(e) => errors.push(e),
            }
        }
        (nodes, errors)
    }
}

/// A running watch: [`PrefixWatch::next`] gives its snapshots and errors. Dropping it stops it.
pub struct PrefixWatch {
    rx: mpsc::Receiver<Result<Snapshot, Error>>,
    task: tokio::task::JoinHandle<()>,
}

impl PrefixWatch {
    /// The next snapshot or error; `None` only if the watch was given bad settings and stopped
    /// (after handing out that error).
    pub async fn next(&mut self) -> Option<Result<Snapshot, Error>> {
        self.rx.recv().await
    }
}

impl Drop for PrefixWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts following every key under `prefix` (call within a Tokio runtime).
pub fn watch_prefix(settings: Settings, prefix: impl Into<String>) -> PrefixWatch {
    // Small: a caller that falls behind holds the watch back rather than piling snapshots up.
    let (tx, rx) = mpsc::channel(4);
    let task = tokio::spawn(run(settings, prefix.into(), tx));
    PrefixWatch { rx, task }
}

/// Every key under `prefix` now, in one range (no watch): for a caller that needs the list
/// once (a switch before it starts, `capstan check --resolve`).
pub async fn get_prefix(settings: &Settings, prefix: &str) -> Result<Snapshot, Error> {
    let gateway = Gateway::new(settings)?;
    let mut state = State::new(prefix.to_string());
    get_all(&gateway, &mut state).await?;
    Ok(state.snapshot)
}

/// What the watch knows between connections.
struct State {
    prefix: String,
    snapshot: Snapshot,
    /// Set when the next connection must start with a range (first, or history lost).
    need_get: bool,
    /// Whether this connection got as far as a running watch (then the backoff starts over).
    watching: bool,
}

impl State {
    fn new(prefix: String) -> State {
        State {
            prefix,
            snapshot: Snapshot::default(),
            need_get: true,
            watching: false,
        }
    }
}

async fn run(settings: Settings, prefix: String, tx: mpsc::Sender<Result<Snapshot, Error>>) {
    let mut state = State::new(prefix);
    let mut backoff = Backoff::new(&settings);
    loop {
        state.watching = false;
        let error = match session(&settings, &mut state, &tx).await {
            Ok(()) => return, // nobody listens any more
            Err(e) => e,
        };
        let invalid = matches!(error, Error::Invalid(_));
        if tx.send(Err(error)).await.is_err() || invalid {
            return;
        }
        if state.watching {
            backoff.reset();
        }
        backoff.wait().await;
    }
}

/// One connection: (range,) watch, apply responses until something fails. `Ok` when the
/// receiver is gone. A new client each time: no pooled connection of the lost one is reused.
async fn session(
    settings: &Settings,
    state: &mut State,
    tx: &mpsc::Sender<Result<Snapshot, Error>>,
) -> Result<(), Error> {
    let gateway = Gateway::new(settings)?;
    loop {
        if !state.need_get {
            check_not_rewound(&gateway, state).await?;
        }
        if state.need_get {
            get_all(&gateway, state).await?;
        }
        let from = state.snapshot.revision + 1;
        let doing = format!("watch {} from revision {from}", state.prefix);
        let body = wire::watch_prefix(&state.prefix, from);
        let mut stream = gateway.stream("/v3/watch", &doing, &body).await?;
        // etcd's first answer says the watch is created (or that `from` is compacted away).
        let first = stream.next().await?;
        let followed = match handle(state, &stream, first)? {
            Handled::Compacted => Followed::Compacted,
            Handled::Changed | Handled::Same => {
                state.watching = true;
                // Whole again: the caller learns it even when nothing changed.
                if tx.send(Ok(state.snapshot.clone())).await.is_err() {
                    return Ok(());
                }
                follow(settings, &gateway, state, &mut stream, tx).await?
            }
        };
        match followed {
            Followed::ReceiverGone => return Ok(()),
            Followed::Compacted => state.need_get = true,
        }
    }
}

/// A range of the whole prefix: the snapshot starts over at its revision.
async fn get_all(gateway: &Gateway, state: &mut State) -> Result<(), Error> {
    let doing = format!("range {}", state.prefix);
    let body = wire::range_prefix(&state.prefix, false);
    let range = gateway
        .call("/v3/kv/range", &doing, &body, wire::range)
        .await?;
    let entries = (range.kvs.into_iter())
        .map(|kv| (key_string(&kv.key), kv.value))
        .collect();
    state.snapshot = Snapshot {
        revision: range.revision,
        entries,
    };
    state.need_get = false;
    Ok(())
}

/// Before resuming: a store now at a lower revision than the one seen (restored from a
/// backup, or a new cluster at the same address) has another history; start over with a
/// range.
async fn check_not_rewound(gateway: &Gateway, state: &mut State) -> Result<(), Error> {
    let doing = format!("range {} (count only)", state.prefix);
    let body = wire::range_prefix(&state.prefix, true);
    let range = gateway
        .call("/v3/kv/range", &doing, &body, wire::range)
        .await?;
    let now = range.revision;
    if now < state.snapshot.revision {
        tracing::warn!(
            prefix = %state.prefix,
            "etcd is at revision {now}, below the {} seen before: reading the prefix afresh",
            state.snapshot.revision
        );
        state.need_get = true;
    }
    Ok(())
}

enum Followed {
    ReceiverGone,
    Compacted,
}

/// Applies watch responses to the snapshot until the stream fails or ends.
///
/// A dead stream is found three ways, as the gRPC client's HTTP/2 pings no longer do it:
/// the connection's TCP keepalive (a host gone without a word: `gateway`); while waiting,
/// every `request_timeout` (at least every second), a count-only range at the stream's own
/// member, which must answer within `request_timeout` (a member that hangs, or has lost its
/// cluster, while its socket stays open); and a bound on silence, `watch_silence`, above the
/// interval of the progress notifications the watch asks for (a stream that stopped while its
/// member still answers other requests: a stuck gateway or proxy between us).
async fn follow(
    settings: &Settings,
    gateway: &Gateway,
    state: &mut State,
    stream: &mut Stream,
    tx: &mpsc::Sender<Result<Snapshot, Error>>,
) -> Result<Followed, Error> {
    let every = settings.request_timeout.max(Duration::from_secs(1));
    let mut check = tokio::time::interval_at(Instant::now() + every, every);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut heard = Instant::now();
    loop {
        let answer = tokio::select! {
            answer = stream.next() => answer?,
            _ = tokio::time::sleep_until(heard + settings.watch_silence) => {
                let why = format!(
                    "no watch response within {:?} (progress notifications were asked for): \
                     taking the stream for dead",
                    settings.watch_silence
                );
                return Err(stream.failed(Why::Dead(why)).into());
            }
            _ = check.tick() => {
                still_answers(gateway, state, stream).await?;
                continue;
            }
        };
        heard = Instant::now();
        match handle(state, stream, answer)? {
            Handled::Compacted => return Ok(Followed::Compacted),
            Handled::Changed if tx.send(Ok(state.snapshot.clone())).await.is_err() => {
                return Ok(Followed::ReceiverGone)
            }
            Handled::Changed | Handled::Same => {}
        }
    }
}

/// Whether the member the watch stream comes from still answers a request in time.
async fn still_answers(gateway: &Gateway, state: &State, stream: &Stream) -> Result<(), Error> {
    let doing = format!("watch {} (checking that the member answers)", state.prefix);
    let body = wire::range_prefix(&state.prefix, true);
    let endpoint = stream.endpoint();
    gateway
        .call_one(endpoint, "/v3/kv/range", &doing, &body, wire::range)
        .await?;
    Ok(())
}

enum Handled {
    /// The snapshot changed.
    Changed,
    /// Nothing to hand out: the creation, a progress notification, events already seen.
    Same,
    /// History since the snapshot's revision is compacted away.
    Compacted,
}

/// Applies one watch response to the state.
fn handle(state: &mut State, stream: &Stream, answer: Value) -> Result<Handled, Error> {
    let response = wire::watch(answer).map_err(|e| stream.failed(Why::Malformed(e)))?;
    if response.compact_revision > 0 {
        tracing::info!(
            prefix = %state.prefix,
            "etcd compacted its history up to revision {} (after {}): reading the prefix afresh",
            response.compact_revision,
            state.snapshot.revision
        );
        return Ok(Handled::Compacted);
    }
    if response.canceled {
        let why = format!("canceled by the server: {}", response.cancel_reason);
        return Err(stream.failed(Why::Dead(why)).into());
    }
    if response.events.is_empty() && !response.created {
        // A progress notification: etcd sends one only to a watcher that has every event up
        // to the header's revision, so resuming from there misses nothing (and a quiet prefix
        // does not fall behind a compaction).
        state.snapshot.revision = state.snapshot.revision.max(response.revision);
        return Ok(Handled::Same);
    }
    match apply(&mut state.snapshot, &response.events) {
        true => Ok(Handled::Changed),
        false => Ok(Handled::Same),
    }
}

/// Applies one response's events; whether anything changed. Events at or below the
/// snapshot's revision are ones it already has (never expected from a watch started after it,
/// but a doubled event must not be applied twice). One revision's events (a transaction)
/// come in one response, so the revision moves only after the whole response.
fn apply(snapshot: &mut Snapshot, events: &[wire::Event]) -> bool {
    let seen = snapshot.revision;
    let mut changed = false;
    for event in events {
        let kv = &event.kv;
        if kv.mod_revision <= seen {
            continue;
        }
        snapshot.revision = snapshot.revision.max(kv.mod_revision);
        let key = key_string(&kv.key);
        changed |= match event.kind {
            EventKind::Put => {
                snapshot.entries.insert(key, kv.value.clone()).as_deref() != Some(&kv.value[..])
            }
            EventKind::Delete => snapshot.entries.remove(&key).is_some(),
        };
    }
    changed
}

/// Keys are shown as text (etcd allows any bytes; a non-UTF-8 key gets replacement marks).
fn key_string(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}
