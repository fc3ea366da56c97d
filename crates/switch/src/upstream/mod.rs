//! Upstream: talking to the nodes. The connection pool, the switch's own HTTP/1.1 codec, the
//! hyper and HTTP/2 paths, TLS to nodes, the PROXY protocol header sent to them, and the body
//! types that go up to a node and come back.
//!
//! May use: `net`, `config`, `observe`, `state`.

pub(crate) mod body;
pub(crate) mod connect;
pub(crate) mod h1;
pub(crate) mod h2;
pub(crate) mod pool;
pub(crate) mod proxy_protocol;
pub(crate) mod tls;

use http::{Request, Response};

use crate::config::NodeProtocol;
use crate::state::cluster::{Cluster, NodeRuntime};
use body::UpstreamBody;
use connect::UpstreamError;
use pool::{NodeBody, Pooled};

/// Sends a request to `node` in its protocol: HTTP/1.1 on a connection from this thread's
/// pool ([`crate::upstream::pool`], which comes back with the response so the connection returns
/// when the body ends), HTTP/2 over the node's shared connection ([`crate::upstream::h2`]).
pub(crate) async fn send(
    cluster: &Cluster,
    node: &NodeRuntime,
    req: Request<UpstreamBody>,
) -> Result<(Response<NodeBody>, Option<Pooled>), UpstreamError> {
    if node.config.protocol == NodeProtocol::H2 {
        return crate::upstream::h2::send(cluster, node, req)
            .await
            .map(|resp| (resp.map(NodeBody::Hyper), None));
    }
    let (resp, pooled) = crate::upstream::pool::send(cluster, req).await?;
    Ok((resp, Some(pooled)))
}
