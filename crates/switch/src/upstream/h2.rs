//! HTTP/2 to nodes: a `[[node]]` with `protocol = "h2"` is spoken to in HTTP/2, so gRPC and
//! other HTTP/2-only services can sit behind the switch (Envoy's `http2_protocol_options` on
//! a cluster, nginx's `grpc_pass`, HAProxy's `server … proto h2`).
//!
//! ```toml
//! [[node]]
//! address = "10.0.0.1:50051"
//! protocol = "h2"                     # cleartext, prior knowledge (h2c)
//!
//! [[node]]
//! address = "10.0.0.2:443"
//! protocol = "h2"                     # with `tls`: ALPN offers `h2` only
//! tls = { ca_file = "ca.pem", sni = "grpc.example.com" }
//! ```
//!
//! - **Connections.** hyper's `client::conn::http2` over the connector HTTP/1.1 nodes use:
//!   the same connect timeout, `TCP_NODELAY` and TLS settings. Each worker thread keeps one
//!   connection per node and multiplexes every request to that node over it; a connection
//!   that closes (GOAWAY, a reset, the node restarting) is replaced by the next request, and a
//!   request it never took is sent once more on the new one. Concurrent first requests share
//!   one handshake rather than racing to open several connections. New connect or TLS
//!   settings (a reload) start new connections; the old ones close when their streams end.
//! - **Requests.** Sent as HTTP/2 with the client's method, path and rewritten fields, as to
//!   any node; `TE: trailers` — the one `TE` HTTP/2 allows, and one gRPC servers insist on —
//!   is sent when the client sent it (to HTTP/1.1 nodes too, with `Connection: te`: hyper's
//!   HTTP/1.1 server writes trailers only to a client that asked). `:authority` is the host
//!   the client asked for (HTTP/2 carries it there rather than in `Host`), as HTTP/1.1 nodes
//!   get it in `Host`.
//! - **Trailers** pass both ways: the switch's bodies ([`crate::upstream::body`]) hand every frame on,
//!   trailer frames included, and `Trailer` is passed end to end. Toward an HTTP/1.1 client
//!   (or node), hyper writes trailers only on a chunked message whose head declared them in a
//!   `Trailer` field, and only to a client that sent `TE: trailers`: a node that declares none
//!   (gRPC servers do not) has its trailers dropped for HTTP/1.1 clients; gRPC needs HTTP/2
//!   end to end anyway. A response stored by the cache keeps its body, not its trailers.
//! - **Accounting** is the HTTP/1.1 path's: one placement per request (the node's active
//!   count, latency and policy feedback settled when the response body ends or is dropped),
//!   passive health, the outlier detector, retries and the access log.
//! - **Health checks** speak the node's protocol (hyper-util's client in HTTP/2-only mode), on
//!   a fresh connection per check as for HTTP/1.1 nodes: an HTTP/2-only node (most gRPC
//!   servers) would not answer HTTP/1.1.
//! - **Not with h2 nodes:** `[proxy_protocol] send` (one HTTP/2 connection carries many
//!   clients' requests, so no single client address can head it: refused at load), and
//!   upgrades or `CONNECT` tunnels (they need HTTP/1.1; such a request to an h2 node is
//!   answered `502`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use http::header::{self, HeaderMap, HeaderValue};
use http::uri::{Authority, Scheme};
use http::{Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tower_service::Service;

use crate::config::NodeProtocol;
use crate::state::cluster::{Cluster, NodeRuntime};
use crate::upstream::body::UpstreamBody;
use crate::upstream::connect::{ClientSettings, UpstreamError};

/// Whether the client asked for trailers (`TE: trailers`, possibly among other codings).
pub(crate) fn wants_trailers(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let name = coding.split(';').next().unwrap_or_default();
            name.trim().eq_ignore_ascii_case("trailers")
        })
}

/// Turns a request made for an h2 node into HTTP/2: `:authority` is the host the client asked
/// for (its `Host`, which HTTP/2 carries in `:authority` alone, RFC 9113 §8.3.1), `:scheme`
/// `https` over TLS.
pub(crate) fn adapt_request<B>(req: &mut Request<B>, tls: bool) {
    *req.version_mut() = Version::HTTP_2;
    let mut parts = req.uri().clone().into_parts();
    if tls {
        parts.scheme = Some(Scheme::HTTPS);
    }
    let host = req.headers().get(header::HOST).map(HeaderValue::as_bytes);
    if let Some(authority) = host.and_then(|h| Authority::try_from(h).ok()) {
        parts.authority = Some(authority);
        req.headers_mut().remove(header::HOST);
    }
    if let Ok(uri) = Uri::from_parts(parts) {
        *req.uri_mut() = uri;
    }
}

/// A sender on a node's HTTP/2 connection.
type Sender = hyper::client::conn::http2::SendRequest<UpstreamBody>;

/// A node's connection, behind a lock held while connecting, so that concurrent first
/// requests share one handshake.
type Slot = Arc<tokio::sync::Mutex<Option<Sender>>>;

thread_local! {
    /// Each worker thread's connections, by node address, for the settings they were made
    /// with (a connection driven by one worker's runtime is best used from that runtime).
    static CONNECTIONS: RefCell<Option<(ClientSettings, HashMap<SocketAddr, Slot>)>> =
        const { RefCell::new(None) };
}

/// The slot of the node at `address` on this thread.
fn slot_for(cluster: &Cluster, address: SocketAddr) -> Slot {
    let settings = ClientSettings::of(cluster);
    CONNECTIONS.with(|cell| {
        let mut cached = cell.borrow_mut();
        if !matches!(&*cached, Some((s, _)) if *s == settings) {
            // New connect or TLS settings: the old connections close when their streams end.
            *cached = Some((settings, HashMap::new()));
        }
        let (_, slots) = cached.as_mut().expect("just filled");
        if !slots.contains_key(&address) {
            // Nodes that left the cluster are forgotten; their connections close once idle.
            slots.retain(|a, _| cluster.nodes.iter().any(|n| n.config.address == *a));
        }
        Arc::clone(slots.entry(address).or_default())
    })
}

/// Sends `req` on the node's connection, connecting first when there is none or it closed.
/// A request the connection never took (it closed in between) is sent once more on a new one.
pub(crate) async fn send(
    cluster: &Cluster,
    node: &NodeRuntime,
    mut req: Request<UpstreamBody>,
) -> Result<Response<Incoming>, UpstreamError> {
    let slot = slot_for(cluster, node.config.address);
    for attempt in 0..2 {
        let mut sender = {
            let mut held = slot.lock().await;
            match held.as_ref() {
                Some(sender) if !sender.is_closed() => sender.clone(),
                _ => {
                    *held = None;
                    let sender = connect(cluster, node).await?;
                    *held = Some(sender.clone());
                    sender
                }
            }
        };
        match sender.try_send_request(req).await {
            Ok(resp) => return Ok(resp),
            Err(mut failed) => match failed.take_message() {
                Some(unsent) if attempt == 0 => req = unsent,
                _ => return Err(other(failed.into_error())),
            },
        }
    }
    unreachable!("the second attempt returns")
}

fn other(e: hyper::Error) -> UpstreamError {
    UpstreamError {
        connect: false,
        error: Box::new(e),
    }
}

/// A new HTTP/2 connection to `node`: the connector of HTTP/1.1 nodes (connect timeout, TLS
/// with ALPN `h2`), then the HTTP/2 handshake; the connection runs in its own task.
async fn connect(cluster: &Cluster, node: &NodeRuntime) -> Result<Sender, UpstreamError> {
    let failed = |error: crate::net::BoxError| UpstreamError {
        connect: true,
        error,
    };
    let uri = Uri::builder()
        .scheme(Scheme::HTTP)
        .authority(node.authority.clone())
        .path_and_query("/")
        .build()
        .map_err(|e| failed(Box::new(e)))?;
    let io = crate::upstream::connect::node_connector(cluster)
        .call(uri)
        .await
        .map_err(failed)?;
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .handshake(io)
        .await
        .map_err(|e| failed(Box::new(e)))?;
    let name = node.config.name.clone();
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(node = %name, "HTTP/2 connection to the node ended: {e}");
        }
    });
    Ok(sender)
}

/// `TE: trailers` towards a node whose client accepts trailers (the hop-by-hop rewrite removed
/// the client's own): the switch passes trailers on, so on its hop it accepts them too.
/// hyper's HTTP/1.1 server writes response trailers only to a client that sent it, and gRPC
/// servers insist on it. HTTP/1.1 wants the `TE` connection option beside it (RFC 9110
/// §10.1.4); HTTP/2 has no `Connection`.
pub(crate) fn accept_trailers<B>(req: &mut Request<B>, protocol: NodeProtocol) {
    let headers = req.headers_mut();
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    if protocol == NodeProtocol::Http1 {
        headers.insert(header::CONNECTION, HeaderValue::from_static("te"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn te_trailers_is_found_among_codings() {
        let te = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::TE, HeaderValue::from_str(v).unwrap());
            wants_trailers(&h)
        };
        assert!(te("trailers"));
        assert!(te("gzip, Trailers"));
        assert!(te("deflate;q=0.5, trailers"));
        assert!(!te("gzip"));
        assert!(!wants_trailers(&HeaderMap::new()));
    }

    #[test]
    fn protocol_values() {
        assert_eq!(NodeProtocol::parse("h2"), Ok(NodeProtocol::H2));
        assert_eq!(NodeProtocol::parse("http/1.1"), Ok(NodeProtocol::Http1));
        let e = NodeProtocol::parse("h3").unwrap_err();
        assert!(e.starts_with("protocol: `h3` is not one of"), "{e}");
        assert!(!e.contains('\n'));
    }
}
