//! What every way to a node shares: the settings an upstream client is built from, the error
//! of a request that got no response head, and the connector (connect timeout, PROXY header,
//! TLS) that opens node connections.

use std::sync::Arc;

use hyper_util::client::legacy::connect::HttpConnector;

use crate::state::cluster::Cluster;

/// What an upstream client is built from; a reload that changes none of it keeps the pools.
#[derive(Clone, Copy, PartialEq)]
pub(crate) struct ClientSettings {
    connect_timeout: std::time::Duration,
    upstream: crate::config::Upstream,
    proxy_protocol: crate::config::sections::proxy_protocol::SendVersion,
    /// [`crate::state::node_tls::TlsToNodes::fingerprint`]: new TLS settings, new pools.
    node_tls: u64,
}

impl ClientSettings {
    pub(crate) fn of(cluster: &Cluster) -> ClientSettings {
        let config = &cluster.config;
        ClientSettings {
            connect_timeout: config.timeouts.connect,
            upstream: config.upstream,
            proxy_protocol: config.proxy_protocol.send,
            node_tls: cluster.node_tls.fingerprint,
        }
    }
}

/// Why a request got no response head from a node.
pub(crate) struct UpstreamError {
    /// No connection could be made (refused, timed out, TLS handshake failed).
    pub connect: bool,
    pub error: crate::net::BoxError,
}

/// Connects to nodes for `cluster`: its connect timeout, PROXY protocol and TLS settings.
pub(crate) fn node_connector(cluster: &Cluster) -> crate::upstream::proxy_protocol::NodeConnector {
    let config = &cluster.config;
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(config.timeouts.connect));
    connector.set_nodelay(true);
    connector.enforce_http(true);
    crate::upstream::proxy_protocol::NodeConnector {
        inner: connector,
        send: config.proxy_protocol.send,
        tls: Arc::clone(&cluster.node_tls),
    }
}
