//! The TLS settings of every TLS node of a cluster, by address, with a fingerprint: what the
//! pools and checks build their clients from.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::net::SocketAddr;

use crate::config::sections::node_tls::NodeTls;

/// The TLS settings of every TLS node of a cluster, by address, and a fingerprint of them all:
/// clients built for one fingerprint are rebuilt when it changes.
#[derive(Default)]
pub struct TlsToNodes {
    by_address: HashMap<SocketAddr, NodeTls>,
    pub fingerprint: u64,
}

impl TlsToNodes {
    pub(crate) fn of(nodes: &[crate::config::NodeConfig]) -> TlsToNodes {
        let mut hasher = DefaultHasher::new();
        let mut by_address = HashMap::new();
        for node in nodes {
            if let Some(tls) = &node.tls {
                node.address.hash(&mut hasher);
                tls.hash(&mut hasher);
                by_address.insert(node.address, tls.clone());
            }
        }
        TlsToNodes {
            by_address,
            fingerprint: if nodes.iter().any(|n| n.tls.is_some()) {
                hasher.finish()
            } else {
                0
            },
        }
    }

    pub(crate) fn get(&self, address: SocketAddr) -> Option<&NodeTls> {
        self.by_address.get(&address)
    }

    /// The node's settings for a URI the connector was given (its userinfo, the PROXY
    /// protocol's client addresses, is not part of the node's address).
    pub(crate) fn for_uri(&self, uri: &http::Uri) -> Option<&NodeTls> {
        if self.by_address.is_empty() {
            return None;
        }
        let authority = uri.authority()?.as_str();
        let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
        self.get(host_port.parse().ok()?)
    }
}
