//! The `file` kind: a JSON `{"nodes":[{"address":"h:p","weight":2,"name":"a"}]}` or TOML
//! `[[node]]` list, looked at every `interval` by its (mtime, length, inode) — polling, no
//! inotify, so it works on any file system — and read again when that changes.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::mpsc;

use super::entries;
use super::look::Look;
use crate::config::{resolve_address, DiscoverySource, NodeConfig};

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
pub(crate) fn parse_nodes(
    source: &DiscoverySource,
    path: &Path,
    text: &str,
) -> Result<Vec<NodeConfig>, String> {
    let json = path.extension().is_some_and(|e| e == "json");
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
        let suffix = entry.name.as_deref().unwrap_or(&entry.address);
        let node = entries::node(source, &at, address, entry.weight, suffix)?;
        entries::push_unique(&mut nodes, &at, node)?;
    }
    Ok(nodes)
}

/// Reads and parses a source's file (blocking).
pub(super) fn read(source: &DiscoverySource, path: &Path) -> Look {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_nodes(source, path, &text).map_err(|e| format!("{}: {e}", path.display()))
}

/// What identifies a version of the file without reading it.
type Stamp = Option<(std::time::SystemTime, u64, u64)>;

fn stamp(path: &Path) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len(), meta.ino()))
}

/// Sends the file's list at once, then again each time its stamp changes, and every
/// `interval` while the file is missing. Ends when the receiver is gone.
pub(super) async fn feed(
    source: DiscoverySource,
    path: std::path::PathBuf,
    looks: mpsc::Sender<Look>,
) {
    let mut last_stamp: Stamp = None;
    let mut first = true;
    loop {
        let now_stamp = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || stamp(&path))
                .await
                .unwrap_or(None)
        };
        if first || now_stamp != last_stamp || now_stamp.is_none() {
            first = false;
            last_stamp = now_stamp;
            let (s, p) = (source.clone(), path.clone());
            let look = tokio::task::spawn_blocking(move || read(&s, &p))
                .await
                .unwrap_or_else(|e| Err(format!("reading failed: {e}")));
            if looks.send(look).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(source.interval.max(Duration::from_millis(10))).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> DiscoverySource {
        DiscoverySource {
            name: "pool".into(),
            kind: crate::config::SourceKind::File("n.json".into()),
            weight: 3,
            hold: Duration::from_secs(30),
            interval: Duration::from_secs(2),
        }
    }

    #[test]
    fn json_and_toml_lists_are_read_with_the_source_defaults() {
        let json = r#"{"nodes":[{"address":"127.0.0.1:9001","weight":2,"name":"a"},
                                {"address":"127.0.0.1:9002"}]}"#;
        let nodes = parse_nodes(&source(), Path::new("n.json"), json).unwrap();
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
        let nodes = parse_nodes(&source(), Path::new("n.toml"), toml).unwrap();
        assert_eq!(nodes[0].name, "pool-127.0.0.1:9003");
        assert!(parse_nodes(&source(), Path::new("n.toml"), "")
            .unwrap()
            .is_empty());
        assert!(
            parse_nodes(&source(), Path::new("n.json"), r#"{"nodes":[]}"#)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn one_bad_entry_refuses_the_whole_file() {
        let bad =
            |file: &str, text: &str| parse_nodes(&source(), Path::new(file), text).unwrap_err();
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
