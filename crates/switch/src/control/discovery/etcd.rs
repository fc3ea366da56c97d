//! The `etcd` kind: every key under a prefix is a node, its value JSON
//! (`{"address":"HOST:PORT","weight":2,"name":"a"}`, as `capstan origin --register` puts it).
//! A watch (capstan-discovery) pushes a new list on every change, so nothing is polled: a key
//! put, deleted or expired with its lease reaches the cluster within the watch's latency. A
//! lost connection is a failed look (the follower keeps the last good list); the watch resumes
//! from the revision it saw and sends the list again once whole.
//!
//! A value that is not a node (bad JSON, a bad address, one that does not resolve, an address
//! or name another key has already) is dropped from the list, not the list refused: one bad
//! registrant does not freeze the others. Each is logged once when it appears, and listed in
//! the source's `skipped` (`/status`) and counted in `capstan_discovery_skipped` while it
//! lasts. `zone` and `classes` are read but not used by the switch yet.

use capstan_discovery::etcd::{self, Settings, Snapshot};
use tokio::sync::mpsc;

use super::entries;
use super::look::{Dropped, Listing, Look};
use crate::config::{resolve_address, DiscoverySource, EtcdSource, NodeConfig};

fn settings(etcd: &EtcdSource) -> Settings {
    Settings {
        connect_timeout: etcd.timeout,
        request_timeout: etcd.timeout,
        ..Settings::new(etcd.endpoints.clone())
    }
}

/// The nodes of a snapshot (resolves host names: blocking), and why each dropped key was.
fn nodes_of(source: &DiscoverySource, snapshot: &Snapshot) -> (Vec<NodeConfig>, Vec<String>) {
    let (values, mut dropped) = snapshot.nodes();
    let mut nodes: Vec<NodeConfig> = Vec::with_capacity(values.len());
    for (key, value) in values {
        let at = format!("key `{key}`");
        let made = resolve_address(&value.address)
            .map_err(|e| format!("{at}: {e}"))
            .and_then(|address| {
                let suffix = value.name.as_deref().unwrap_or(&value.address);
                entries::node(source, &at, address, value.weight, suffix)
            })
            .and_then(|mut node| {
                if let Some(report) = &value.report_address {
                    let report = resolve_address(report)
                        .map_err(|e| format!("{at}: report_address: {e}"))?;
                    node.report_address = Some(report);
                }
                entries::push_unique(&mut nodes, &at, node)
            });
        if let Err(e) = made {
            dropped.push(e);
        }
    }
    (nodes, dropped)
}

/// The list once, blocking (before the switch starts, `capstan check --resolve`): one Get on
/// a thread of its own, as the caller may be inside a runtime.
pub(super) fn look_once(source: &DiscoverySource, etcd: &EtcdSource) -> Result<Listing, String> {
    let (source, etcd) = (source.clone(), etcd.clone());
    let got = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime: {e}"))?;
        let snapshot = runtime
            .block_on(etcd::get_prefix(&settings(&etcd), &etcd.prefix))
            .map_err(|e| e.to_string())?;
        let (nodes, dropped) = nodes_of(&source, &snapshot);
        Ok(Listing {
            nodes,
            dropped,
            ..Listing::default()
        })
    })
    .join();
    got.unwrap_or_else(|_| Err("reading etcd failed (a panic)".into()))
}

/// Watches the prefix and sends a look on every change, and every error. Ends when the
/// receiver is gone, or the watch stops (settings it cannot use).
pub(super) async fn feed(
    on_dropped: Dropped,
    source: DiscoverySource,
    etcd: EtcdSource,
    looks: mpsc::Sender<Look>,
) {
    let mut watch = etcd::watch_prefix(settings(&etcd), etcd.prefix.clone());
    let mut dropped_before: Vec<String> = Vec::new();
    while let Some(next) = watch.next().await {
        let look = match next {
            Ok(snapshot) => {
                let s = source.clone();
                let made = tokio::task::spawn_blocking(move || nodes_of(&s, &snapshot)).await;
                match made {
                    Ok((nodes, dropped)) => {
                        report_dropped(&on_dropped, &source, &dropped, &dropped_before);
                        dropped_before = dropped;
                        Ok(nodes)
                    }
                    Err(e) => Err(format!("reading the etcd list failed: {e}")),
                }
            }
            Err(e) => Err(e.to_string()),
        };
        if looks.send(look).await.is_err() {
            return;
        }
    }
}

/// Logs the keys newly dropped (once each), and records the current ones for `/status`.
fn report_dropped(
    on_dropped: &Dropped,
    source: &DiscoverySource,
    now: &[String],
    before: &[String],
) {
    for e in now.iter().filter(|e| !before.contains(e)) {
        tracing::warn!(source = %source.name, "discovery: dropped {e}");
    }
    if now.is_empty() && !before.is_empty() {
        tracing::info!(source = %source.name, "discovery: no key is dropped any more");
    }
    if now != before {
        on_dropped(now.to_vec());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_values_are_left_out_and_named() {
        let source = DiscoverySource {
            name: "reg".into(),
            kind: crate::config::SourceKind::Etcd(EtcdSource {
                endpoints: vec!["http://127.0.0.1:2379".into()],
                prefix: "/n/".into(),
                timeout: std::time::Duration::from_secs(1),
            }),
            weight: 2,
            hold: std::time::Duration::from_secs(30),
            interval: std::time::Duration::from_secs(2),
        };
        let mut snapshot = Snapshot::default();
        for (k, v) in [
            (
                "/n/a",
                r#"{"address":"127.0.0.1:9001","weight":3,"name":"a"}"#,
            ),
            (
                "/n/b",
                r#"{"address":"127.0.0.1:9002","report_address":"127.0.0.1:9902"}"#,
            ),
            ("/n/c", "hello"),
            ("/n/d", r#"{"address":"127.0.0.1:0"}"#),
            ("/n/e", r#"{"address":"127.0.0.1:9001"}"#),
        ] {
            snapshot.entries.insert(k.into(), v.as_bytes().to_vec());
        }
        let (nodes, skipped) = nodes_of(&source, &snapshot);
        let seen: Vec<(&str, String, u32)> = nodes
            .iter()
            .map(|n| (n.name.as_str(), n.address.to_string(), n.weight))
            .collect();
        assert_eq!(
            seen,
            [
                ("reg-a", "127.0.0.1:9001".to_string(), 3),
                ("reg-127.0.0.1:9002", "127.0.0.1:9002".to_string(), 2)
            ]
        );
        assert_eq!(
            nodes[1].report_address,
            Some("127.0.0.1:9902".parse().unwrap())
        );
        assert_eq!(skipped.len(), 3, "{skipped:?}");
        assert!(
            skipped[0].starts_with("key `/n/c`: not a node"),
            "{skipped:?}"
        );
        assert!(skipped[1].contains("key `/n/d`") && skipped[1].contains("port 0"));
        assert!(
            skipped[2].contains("key `/n/e`: listed twice"),
            "{skipped:?}"
        );
    }
}
