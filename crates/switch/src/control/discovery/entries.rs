//! One discovered entry made a node, with the checks every source kind shares: a resolvable
//! address with a port, a weight of at least 1, a name fit for URLs and headers, nothing
//! listed twice. A source's list is refused or trimmed by these, so no node with a bad address
//! ever reaches the cluster.

use std::net::SocketAddr;

use crate::config::{DiscoverySource, NodeConfig};

/// A node named `SOURCE-SUFFIX` at `address` (already resolved) for `source`; `at` names the
/// entry in errors (`node 2 (`10.0.0.5:0`)`).
pub(crate) fn node(
    source: &DiscoverySource,
    at: &str,
    address: SocketAddr,
    weight: Option<u32>,
    suffix: &str,
) -> Result<NodeConfig, String> {
    if address.port() == 0 {
        return Err(format!("{at}: port 0 is not a node's port"));
    }
    let weight = weight.unwrap_or(source.weight);
    if weight == 0 {
        return Err(format!("{at}: weight must be at least 1"));
    }
    let name = format!("{}-{suffix}", source.name);
    if let Some(c) = name
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "/?#%".contains(*c))
    {
        return Err(format!("{at}: name `{name}` has {c:?}"));
    }
    Ok(NodeConfig {
        name,
        address,
        weight,
        public_url: None,
        report_address: None,
        tls: None,
        protocol: Default::default(),
    })
}

/// Adds `node` to `nodes` unless its name or address is there already.
pub(crate) fn push_unique(
    nodes: &mut Vec<NodeConfig>,
    at: &str,
    node: NodeConfig,
) -> Result<(), String> {
    if nodes
        .iter()
        .any(|n| n.name == node.name || n.address == node.address)
    {
        return Err(format!("{at}: listed twice"));
    }
    nodes.push(node);
    Ok(())
}
