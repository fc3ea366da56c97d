//! Where the churn run's switch finds its nodes: a JSON node list the lab rewrites (and breaks
//! on purpose for the outage), or an etcd the lab starts, under whose prefix every node
//! registers itself and which the outage kills and starts again.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::model::churn::RegistryKind;
use crate::model::error::LabError;
use crate::procs::cluster::Registration;
use crate::procs::etcd::EtcdProcess;

/// The etcd prefix the nodes register under.
const PREFIX: &str = "/capstan/churn/";

/// How long a node keeps serving after SIGTERM deleted its key: the switch drops it within
/// a few milliseconds of the delete, so this is plenty for its answers in flight.
const DEREGISTER_WAIT: Duration = Duration::from_secs(1);

/// The discovery run's registry.
pub(super) enum Registry {
    /// The node list file, written atomically.
    File { path: PathBuf },
    /// The lab's etcd; the nodes put and delete their keys themselves.
    Etcd { server: EtcdProcess },
}

impl Registry {
    /// The file in `dir` (written once the first nodes run), or a started etcd logging there.
    pub(super) async fn start(kind: RegistryKind, dir: &Path) -> Result<Registry, LabError> {
        Ok(match kind {
            RegistryKind::File => Registry::File {
                path: dir.join("nodes.json"),
            },
            RegistryKind::Etcd => Registry::Etcd {
                server: EtcdProcess::start(dir).await?,
            },
        })
    }

    pub(super) fn kind(&self) -> RegistryKind {
        match self {
            Registry::File { .. } => RegistryKind::File,
            Registry::Etcd { .. } => RegistryKind::Etcd,
        }
    }

    /// How a node registers itself here (`None`: the lab lists it).
    pub(super) fn registration(&self) -> Option<Registration> {
        match self {
            Registry::File { .. } => None,
            Registry::Etcd { server } => Some(Registration {
                url: format!("etcd://{}{PREFIX}", server.client()),
                deregister_wait: DEREGISTER_WAIT,
            }),
        }
    }

    /// The switch's `[[discovery]]` table (TOML), its nodes named `lab-NAME`.
    pub(super) fn discovery_toml(&self, interval_ms: u64) -> String {
        let source = match self {
            Registry::File { path } => format!("file = \"{}\"", path.display()),
            Registry::Etcd { server } => {
                format!("etcd = [\"{}\"]\nprefix = \"{PREFIX}\"", server.endpoint())
            }
        };
        format!("[[discovery]]\nname = \"lab\"\n{source}\ninterval = \"{interval_ms}ms\"\n")
    }

    /// Lists `nodes` (name, address) in the file; nothing to do for etcd, whose nodes
    /// registered themselves.
    pub(super) fn write(&self, nodes: &[(&str, SocketAddr)]) -> Result<(), LabError> {
        let Registry::File { path } = self else {
            return Ok(());
        };
        let entries: Vec<serde_json::Value> = (nodes.iter())
            .map(|(name, addr)| serde_json::json!({"address": addr.to_string(), "name": name}))
            .collect();
        replace(path, &serde_json::json!({ "nodes": entries }).to_string())
    }
}

/// Temp file and rename, as a deploy tool should.
pub(super) fn replace(path: &Path, text: &str) -> Result<(), LabError> {
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, text)
        .and_then(|()| std::fs::rename(&temp, path))
        .map_err(|e| LabError::Run(format!("cannot write {}: {e}", path.display())))
}

/// The file's outage: first a half-written list, then no file at all.
pub(super) fn break_file(path: &Path, half_way: bool) -> Result<(), LabError> {
    match half_way {
        true => replace(path, "{\"nodes\": [{\"address\": \"127.0.0.1:"),
        false => std::fs::remove_file(path)
            .map_err(|e| LabError::Run(format!("cannot remove {}: {e}", path.display()))),
    }
}
