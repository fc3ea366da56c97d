//! Following a key prefix: a Get at revision R, then a Watch from R + 1; after a lost
//! connection, a new Watch from the last revision seen + 1, so no event is missed or applied
//! twice. A revision compacted away meanwhile (or a store that went back in time: restored
//! from a backup) falls back to a fresh Get.
//!
//! The task hands out a [`Snapshot`] (every key under the prefix → value) after the first Get,
//! after each watch response that changed something, and after each reconnection (so a caller
//! that saw an error knows the watch is whole again). Errors are handed out as they happen;
//! the task then waits (doubling backoff) and reconnects. It ends only when the
//! [`PrefixWatch`] is dropped.

use std::collections::BTreeMap;

use etcd_client::{EventType, GetOptions, WatchOptions};
use tokio::sync::mpsc;

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

/// Every key under `prefix` now, in one Get (no watch): for a caller that needs the list once
/// (a switch before it starts, `capstan check --resolve`).
pub async fn get_prefix(settings: &Settings, prefix: &str) -> Result<Snapshot, Error> {
    let client = settings.connect().await?;
    let mut state = State {
        prefix: prefix.to_string(),
        snapshot: Snapshot::default(),
        need_get: true,
        watching: false,
    };
    get_all(settings, &client, &mut state).await?;
    Ok(state.snapshot)
}

/// What the watch knows between connections.
struct State {
    prefix: String,
    snapshot: Snapshot,
    /// Set when the next connection must start with a Get (first, or history lost).
    need_get: bool,
    /// Whether this connection got as far as a running watch (then the backoff starts over).
    watching: bool,
}

async fn run(settings: Settings, prefix: String, tx: mpsc::Sender<Result<Snapshot, Error>>) {
    let mut state = State {
        prefix,
        snapshot: Snapshot::default(),
        need_get: true,
        watching: false,
    };
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

/// One connection: (Get,) Watch, apply responses until something fails. `Ok` when the
/// receiver is gone.
async fn session(
    settings: &Settings,
    state: &mut State,
    tx: &mpsc::Sender<Result<Snapshot, Error>>,
) -> Result<(), Error> {
    let client = settings.connect().await?;
    loop {
        if !state.need_get {
            check_not_rewound(settings, &client, state).await?;
        }
        if state.need_get {
            get_all(settings, &client, state).await?;
        }
        let from = state.snapshot.revision + 1;
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(from)
            .with_progress_notify();
        let mut watch_client = client.watch_client();
        let (_watcher, mut stream) = settings
            .request(
                format!("watch {} from revision {from}", state.prefix),
                watch_client.watch(state.prefix.as_str(), Some(options)),
            )
            .await?;
        state.watching = true;
        // Whole again: the caller learns it even when nothing changed.
        if tx.send(Ok(state.snapshot.clone())).await.is_err() {
            return Ok(());
        }
        match follow(settings, state, &mut stream, tx).await? {
            Followed::ReceiverGone => return Ok(()),
            Followed::Compacted => state.need_get = true,
        }
    }
}

/// A Get of the whole prefix: the snapshot starts over at its revision.
async fn get_all(
    settings: &Settings,
    client: &etcd_client::Client,
    state: &mut State,
) -> Result<(), Error> {
    let mut kv = client.kv_client().max_decoding_message_size(256 << 20);
    let response = settings
        .request(
            format!("get {}", state.prefix),
            kv.get(state.prefix.as_str(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
    let revision = response.header().map_or(0, |h| h.revision());
    let entries = response
        .kvs()
        .iter()
        .map(|kv| (key_string(kv.key()), kv.value().to_vec()))
        .collect();
    state.snapshot = Snapshot { revision, entries };
    state.need_get = false;
    Ok(())
}

/// Before resuming: a store now at a lower revision than the one seen (restored from a
/// backup, or a new cluster at the same address) has another history; start over with a Get.
async fn check_not_rewound(
    settings: &Settings,
    client: &etcd_client::Client,
    state: &mut State,
) -> Result<(), Error> {
    let mut kv = client.kv_client();
    let response = settings
        .request(
            format!("get {}", state.prefix),
            kv.get(
                state.prefix.as_str(),
                Some(GetOptions::new().with_prefix().with_count_only()),
            ),
        )
        .await?;
    let now = response.header().map_or(0, |h| h.revision());
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
async fn follow(
    settings: &Settings,
    state: &mut State,
    stream: &mut etcd_client::WatchStream,
    tx: &mpsc::Sender<Result<Snapshot, Error>>,
) -> Result<Followed, Error> {
    loop {
        let response = match stream.message().await {
            Ok(Some(r)) => r,
            Ok(None) => return Err(settings.failed("watch", "the server ended the stream")),
            Err(e) => return Err(settings.failed("watch", e)),
        };
        if response.compact_revision() > 0 {
            tracing::info!(
                prefix = %state.prefix,
                "etcd compacted its history up to revision {} (after {}): reading the prefix \
                 afresh",
                response.compact_revision(),
                state.snapshot.revision
            );
            return Ok(Followed::Compacted);
        }
        if response.canceled() {
            let reason = response.cancel_reason().to_string();
            return Err(settings.failed("watch", format!("canceled by the server: {reason}")));
        }
        if response.events().is_empty() && !response.created() {
            // A progress notification: etcd sends one only to a watcher that has every event
            // up to the header's revision, so resuming from there misses nothing (and a quiet
            // prefix does not fall behind a compaction).
            let now = response.header().map_or(0, |h| h.revision());
            state.snapshot.revision = state.snapshot.revision.max(now);
            continue;
        }
        if apply(&mut state.snapshot, response.events())
            && tx.send(Ok(state.snapshot.clone())).await.is_err()
        {
            return Ok(Followed::ReceiverGone);
        }
    }
}

/// Applies one response's events; whether anything changed. Events at or below the
/// snapshot's revision are ones it already has (never expected from a watch started after it,
/// but a doubled event must not be applied twice). One revision's events (a transaction)
/// come in one response, so the revision moves only after the whole response.
fn apply(snapshot: &mut Snapshot, events: &[etcd_client::Event]) -> bool {
    let seen = snapshot.revision;
    let mut changed = false;
    for event in events {
        let Some(kv) = event.kv() else { continue };
        let revision = kv.mod_revision();
        if revision <= seen {
            continue;
        }
        snapshot.revision = snapshot.revision.max(revision);
        let key = key_string(kv.key());
        changed |= match event.event_type() {
            EventType::Put => {
                snapshot.entries.insert(key, kv.value().to_vec()).as_deref() != Some(kv.value())
            }
            EventType::Delete => snapshot.entries.remove(&key).is_some(),
        };
    }
    changed
}

/// Keys are shown as text (etcd allows any bytes; a non-UTF-8 key gets replacement marks).
fn key_string(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}
