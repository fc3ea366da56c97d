//! Tunnels to nodes (WebSocket and other upgrades, `CONNECT`): which nodes can take one, and a
//! connection of the tunnel's own, opened as the pool opens its (the PROXY header, the node's
//! TLS, the node-socket clock), whose request is served with upgrades allowed. Splicing the two
//! ends is `crate::pipeline::tunnel`'s.

use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use crate::config::sections::proxy_protocol::SendVersion;
use crate::config::NodeProtocol;
use crate::net::peer::Peer;
use crate::state::cluster::{Cluster, FailureKind, NodeRuntime};
use crate::upstream::body::UpstreamBody;
use crate::upstream::proxy_protocol::{encode_v1, encode_v2};

/// Why `node` cannot take a tunnel, if it cannot: tunnels are an HTTP/1.1 mechanism here.
pub(crate) fn refused_by(node: &NodeRuntime) -> Option<String> {
    (node.config.protocol == NodeProtocol::H2).then(|| {
        format!(
            "node {} speaks HTTP/2 (protocol = \"h2\"): upgrades and CONNECT need an HTTP/1.1 \
             node",
            node.config.name
        )
    })
}

/// Connects to `node` (with the PROXY header naming `client` when configured, and the
/// node's TLS) and sends `req` on that connection of its own, which is served with upgrades
/// allowed: a tunnel is never pooled.
pub(crate) async fn open(
    cluster: &Cluster,
    node: &NodeRuntime,
    client: Option<Peer>,
    req: Request<UpstreamBody>,
) -> Result<Response<Incoming>, (FailureKind, String)> {
    let config = &cluster.config;
    let connect = tokio::net::TcpStream::connect(node.config.address);
    let mut stream = match tokio::time::timeout(config.timeouts.connect, connect).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return Err((FailureKind::Connect, format!("could not connect: {e}"))),
        Err(_) => return Err((FailureKind::Connect, "connect timed out".into())),
    };
    let _ = stream.set_nodelay(true);
    if let Some(peer) = &client {
        let header = match config.proxy_protocol.send {
            SendVersion::Off => None,
            SendVersion::V1 => Some(encode_v1(peer.client, peer.local)),
            SendVersion::V2 => Some(encode_v2(peer.client, peer.local)),
        };
        if let Some(header) = header {
            use tokio::io::AsyncWriteExt;
            if let Err(e) = stream.write_all(&header).await {
                return Err((FailureKind::Connect, format!("PROXY header not sent: {e}")));
            }
        }
    }
    let tls = cluster.node_tls.get(node.config.address);
    let tcp = match crate::net::node_clock::TimedTcp::plain(stream) {
        Ok(tcp) => tcp,
        Err(e) => return Err((FailureKind::Connect, e.to_string())),
    };
    let stream = match crate::upstream::tls::NodeStream::over(tcp, tls).await {
        Ok(stream) => stream,
        Err(e) => return Err((FailureKind::Connect, e.to_string())),
    };
    if let Some(notes) = crate::observe::access_log::current_notes() {
        crate::observe::access_log::note_connected(&notes);
    }
    let other = |e: hyper::Error| (FailureKind::Other, e.to_string());
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(other)?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!("tunnel's node connection: {e}");
        }
    });
    sender.send_request(req).await.map_err(other)
}
