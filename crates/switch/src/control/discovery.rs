//! Discovery: `[[discovery]]` sources of nodes beside the static `[[node]]`s. The one source
//! so far is a watched file (JSON `{"nodes":[{"address":"h:p","weight":2,"name":"a"}]}`, or TOML
//! `[[node]]` tables), looked at every `interval` by its (mtime, length, inode) — polling, no
//! inotify — and read again when that changes.
//!
//! A good list is applied through membership (`Switch::set_discovered`): nodes that stay keep
//! their runtime, new ones enter with slow start, removed ones drain. Static nodes are never
//! removed. A missing, unreadable or invalid file keeps the last good set (one warning per
//! change of error); an explicitly empty list is applied only after it has lasted `hold`.
//! Every tick also puts back nodes a reload dropped. The request path is not involved.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::config::{resolve_address, Config, DiscoverySource, NodeConfig};
use crate::state::cluster::Cluster;
use crate::state::switch::Switch;

/// One entry of a node file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    address: String,
    weight: Option<u32>,
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonFile {
    nodes: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TomlFile {
    #[serde(default)]
    node: Vec<Entry>,
}

/// The nodes a file's text lists, or why the whole file is refused. Resolves addresses
/// (may block on DNS: call off the event loop).
pub(crate) fn parse_nodes(source: &DiscoverySource, text: &str) -> Result<Vec<NodeConfig>, String> {
    let json = source.file.extension().is_some_and(|e| e == "json");
    let entries = match json {
        true => {
            serde_json::from_str::<JsonFile>(text)
                .map_err(|e| format!("bad JSON: {e}"))?
                .nodes
        }
        false => {
            toml::from_str::<TomlFile>(text)
                .map_err(|e| format!("bad TOML: {}", e.message().trim().replace('\n', " ")))?
                .node
        }
    };
    let mut nodes: Vec<NodeConfig> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.into_iter().enumerate() {
        let at = format!("node {} (`{}`)", i + 1, entry.address);
        let address = resolve_address(&entry.address).map_err(|e| format!("{at}: {e}"))?;
        if address.port() == 0 {
            return Err(format!("{at}: port 0 is not a node's port"));
        }
        let weight = entry.weight.unwrap_or(source.weight);
        if weight == 0 {
            return Err(format!("{at}: weight must be at least 1"));
        }
        let name = format!(
            "{}-{}",
            source.name,
            entry.name.as_deref().unwrap_or(&entry.address)
        );
        if let Some(c) = name
            .chars()
            .find(|c| c.is_whitespace() || c.is_control() || "/?#%".contains(*c))
        {
            return Err(format!("{at}: name `{name}` has {c:?}"));
        }
        if nodes.iter().any(|n| n.name == name || n.address == address) {
            return Err(format!("{at}: listed twice"));
        }
        nodes.push(NodeConfig {
            name,
            address,
            weight,
            public_url: None,
            report_address: None,
            tls: None,
            protocol: Default::default(),
        });
    }
    Ok(nodes)
}

/// Reads and parses a source's file (blocking).
fn read(source: &DiscoverySource) -> Result<Vec<NodeConfig>, String> {
    let text = std::fs::read_to_string(&source.file)
        .map_err(|e| format!("cannot read {}: {e}", source.file.display()))?;
    parse_nodes(source, &text).map_err(|e| format!("{}: {e}", source.file.display()))
}

/// What identifies a version of the file without reading it.
type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamp(source: &DiscoverySource) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(&source.file).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

/// What one source gave at start: its name, file, and the names of the nodes it added or
/// why it gave none.
pub(crate) type Initial = Vec<(DiscoverySource, Result<Vec<String>, String>)>;

/// At start: adds each source's nodes to the configuration, so the first cluster has them.
/// A source whose file cannot be used yet starts empty (its task keeps looking).
pub(crate) fn add_initial_nodes(config: &mut Config) -> Initial {
    let sources = config.discovery.clone();
    let mut initial = Vec::new();
    for source in sources {
        let added = read(&source).map(|nodes| {
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

/// Records what the sources gave at start, for `/status` and for their tasks.
pub(crate) fn record_initial(switch: &Switch, initial: Initial) {
    for (source, added) in initial {
        let path = source.file.display().to_string();
        switch
            .discovery
            .update(&source.name, &path, |s| match added {
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

/// Watches one source for as long as the switch runs.
pub(crate) async fn watch(switch: Arc<Switch>, initial: DiscoverySource) {
    let mut shutdown = switch.shutdown.subscribe();
    let mut last_stamp: Stamp = None;
    let mut first = true;
    // The last good list, applied or (when empty, within `hold`) waiting to be.
    let mut good: Option<Vec<NodeConfig>> = None;
    let mut empty_since: Option<Instant> = None;
    let name = initial.name.clone();
    let mut source = initial;
    let mut owned: Vec<String> = Vec::new();
    switch
        .discovery
        .update(&name, "", |s| owned = s.owned.clone());
    let mut last_error: Option<String> = None;
    // Why the cluster refused the last list (logged once per reason).
    let mut last_refusal: Option<String> = None;
    loop {
        // A reload may change the source's settings, or take it out (its nodes then leave
        // with the reload, and it rests until a reload brings it back).
        let configured = (switch.cluster.load().config.discovery.iter())
            .find(|s| s.name == name)
            .cloned();
        let Some(now_source) = configured else {
            tokio::select! {
                _ = tokio::time::sleep(source.interval) => continue,
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
        };
        if now_source != source {
            source = now_source;
            first = true;
        }
        let path = source.file.display().to_string();
        let now_stamp = {
            let s = source.clone();
            tokio::task::spawn_blocking(move || stamp(&s))
                .await
                .unwrap_or(None)
        };
        if first || now_stamp != last_stamp || now_stamp.is_none() {
            last_stamp = now_stamp;
            let s = source.clone();
            let read = tokio::task::spawn_blocking(move || read(&s))
                .await
                .unwrap_or_else(|e| Err(format!("reading failed: {e}")));
            let ok = read.is_ok();
            let error = read.as_ref().err().cloned();
            switch.discovery.update(&source.name, &path, |s| {
                match ok {
                    true => {
                        s.refreshes_ok += 1;
                        s.last_good = Some(Instant::now());
                    }
                    false => s.refreshes_error += 1,
                }
                s.error = error;
            });
            match read {
                Ok(nodes) => {
                    if last_error.take().is_some() {
                        tracing::info!(source = %source.name, "discovery: the file is good again");
                    }
                    match nodes.is_empty() {
                        true => {
                            empty_since.get_or_insert_with(Instant::now);
                        }
                        false => empty_since = None,
                    }
                    good = Some(nodes);
                }
                Err(e) => {
                    if last_error.as_deref() != Some(e.as_str()) {
                        tracing::warn!(
                            source = %source.name,
                            "discovery: {e}; keeping the last good list"
                        );
                    }
                    last_error = Some(e);
                }
            }
        }
        first = false;
        if let Some(nodes) = &good {
            let held = empty_since.is_some_and(|since| since.elapsed() < source.hold);
            if !held {
                match switch
                    .set_discovered(&source.name, &owned, nodes.clone())
                    .await
                {
                    Ok((now, _changed)) => {
                        last_refusal = None;
                        switch.discovery.update(&source.name, &path, |s| {
                            s.nodes = now.len();
                            s.owned = now.clone();
                        });
                        owned = now;
                    }
                    Err(e) => {
                        let e = e.to_string();
                        if last_refusal.as_deref() != Some(e.as_str()) {
                            tracing::warn!(source = %source.name, "discovery: {e}");
                        }
                        last_refusal = Some(e);
                    }
                }
            }
        }
        let tick = match empty_since {
            Some(since) if good.as_ref().is_some_and(Vec::is_empty) => source
                .interval
                .min(source.hold.saturating_sub(since.elapsed()))
                .max(Duration::from_millis(10)),
            _ => source.interval,
        };
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = shutdown.wait_for(|stop| *stop) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(file: &str) -> DiscoverySource {
        DiscoverySource {
            name: "pool".into(),
            file: file.into(),
            weight: 3,
            hold: Duration::from_secs(30),
            interval: Duration::from_secs(2),
        }
    }

    #[test]
    fn json_and_toml_lists_are_read_with_the_source_defaults() {
        let json = r#"{"nodes":[{"address":"127.0.0.1:9001","weight":2,"name":"a"},
                                {"address":"127.0.0.1:9002"}]}"#;
        let nodes = parse_nodes(&source("n.json"), json).unwrap();
        let seen: Vec<(&str, String, u32)> = nodes
            .iter()
            .map(|n| (n.name.as_str(), n.address.to_string(), n.weight))
            .collect();
        assert_eq!(
            seen,
            [
                ("pool-a", "127.0.0.1:9001".to_string(), 2),
                ("pool-127.0.0.1:9002", "127.0.0.1:9002".to_string(), 3)
            ]
        );
        let toml = "[[node]]\naddress = \"127.0.0.1:9003\"\n";
        let nodes = parse_nodes(&source("n.toml"), toml).unwrap();
        assert_eq!(nodes[0].name, "pool-127.0.0.1:9003");
        assert!(parse_nodes(&source("n.toml"), "").unwrap().is_empty());
        assert!(parse_nodes(&source("n.json"), r#"{"nodes":[]}"#)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn one_bad_entry_refuses_the_whole_file() {
        let bad = |file: &str, text: &str| parse_nodes(&source(file), text).unwrap_err();
        let e = bad(
            "n.json",
            r#"{"nodes":[{"address":"127.0.0.1:1"},{"address":"127.0.0.1:0"}]}"#,
        );
        assert_eq!(e, "node 2 (`127.0.0.1:0`): port 0 is not a node's port");
        let e = bad(
            "n.json",
            r#"{"nodes":[{"address":"127.0.0.1:1","weight":0}]}"#,
        );
        assert!(e.contains("weight must be at least 1"), "{e}");
        assert!(bad("n.json", r#"{"nodes":[{"address":"nowhere"}]}"#).contains("node 1"));
        assert!(bad("n.json", r#"{"nodes":[{"address":"#).starts_with("bad JSON"));
        assert!(bad("n.json", r#"{"nodes":[{"addr":"127.0.0.1:1"}]}"#).contains("unknown field"));
        let twice = r#"{"nodes":[{"address":"127.0.0.1:1"},{"address":"127.0.0.1:1"}]}"#;
        assert!(bad("n.json", twice).contains("listed twice"));
        assert!(bad("n.toml", "[[node]]\nadress = 1\n").starts_with("bad TOML"));
        assert!(bad(
            "n.json",
            r#"{"nodes":[{"address":"127.0.0.1:1","name":"a b"}]}"#
        )
        .contains("name `pool-a b`"));
    }
}
