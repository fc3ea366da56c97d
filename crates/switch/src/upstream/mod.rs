//! Upstream: everything the switch sends to a node or a tier peer goes through here — a
//! forwarded request ([`send`], which alone decides the node's protocol), a hop to a peer
//! ([`pool::send_to_peer`]), a tunnel's connection ([`tunnel`]), and the switch's own health
//! checks, load reports, peer checks and fanned-out invalidations ([`probe`]). The connection
//! pools, the switch's own HTTP/1.1 codec, the hyper and HTTP/2 paths, TLS to nodes, the PROXY
//! protocol header sent to them, and the body types that go up and come back. The callers say
//! what to send where; they build no clients of their own.
//!
//! May use: `net`, `config`, `observe`, `state`.

pub(crate) mod body;
pub(crate) mod connect;
pub(crate) mod h1;
pub(crate) mod h2;
pub(crate) mod pool;
pub(crate) mod probe;
pub(crate) mod proxy_protocol;
pub(crate) mod tls;
pub(crate) mod tunnel;

use http::header::HeaderMap;
use http::{Method, Request, Response, StatusCode, Uri, Version};
use hyper::body::Body;

use crate::config::NodeProtocol;
use crate::state::cluster::{Cluster, NodeRuntime};
use body::UpstreamBody;
use connect::UpstreamError;
use pool::{NodeBody, Pooled};

/// Where a node's interim (1xx) heads go; the pipeline implements it (the way back to the
/// client is its business).
pub(crate) trait InterimHeads: Sync {
    /// A head read in the sending task (the switch's own HTTP/1.1 codec).
    fn pass(&self, status: StatusCode, headers: HeaderMap);
    /// Gives hyper's client, which reads the node in a task of its own, the way back.
    fn attach(&self, req: &mut Request<UpstreamBody>);
}

/// One request for a node, its fields already built (`crate::pipeline::node_request`).
pub(crate) struct ToNode<'a> {
    pub method: &'a Method,
    /// Absolute, naming the node (with PROXY protocol to nodes, the client too: see
    /// [`proxy_protocol::authority_for`]).
    pub target: Uri,
    /// The fields; left in place for a retry when `keep_headers`.
    pub headers: &'a mut HeaderMap,
    pub keep_headers: bool,
    pub body: UpstreamBody,
    /// The client accepts trailers: the node is told it may send them (see
    /// [`h2::accept_trailers`]).
    pub te_trailers: bool,
}

/// What sending a request to a node comes to: its response head (and the pooled connection
/// to give back when the body ends), or why none came.
pub(crate) type Sent = Result<(Response<NodeBody>, Option<Pooled>), UpstreamError>;

/// Sends a request to `node` in the node's protocol — decided here, and only here: a request
/// without a body to an HTTP/1.1 node by the switch's own codec, its head encoded from the
/// fields where they are ([`pool::send_bodiless`]: a retry needs no copy of them); one with a
/// body by hyper's HTTP/1.1 client ([`pool::send`]); any to an HTTP/2 node over its shared
/// connection ([`h2::send`]). The pooled connection, if any, comes back with the response, to
/// return when the body ends.
pub(crate) async fn send(
    cluster: &Cluster,
    node: &NodeRuntime,
    req: ToNode<'_>,
    interim: &dyn InterimHeads,
) -> Sent {
    let protocol = node.config.protocol;
    if protocol == NodeProtocol::Http1 && req.body.is_end_stream() {
        let head = pool::bodiless_head(req.method, &req.target, req.headers, req.te_trailers);
        crate::observe::access_log::note_sent();
        // Read in this task: the way back to the client is asked for only when an interim
        // head arrives.
        let pass = |status, headers| interim.pass(status, headers);
        let sending = pool::send_bodiless(cluster, &req.target, &head, req.method, &pass);
        let (resp, pooled) = sending.await?;
        return Ok((resp, Some(pooled)));
    }
    let headers = match req.keep_headers {
        true => req.headers.clone(),
        false => std::mem::take(req.headers),
    };
    let mut up = Request::new(req.body);
    *up.method_mut() = req.method.clone();
    *up.uri_mut() = req.target;
    *up.version_mut() = Version::HTTP_11;
    *up.headers_mut() = headers;
    if protocol == NodeProtocol::H2 {
        h2::adapt_request(&mut up, node.config.tls.is_some());
    }
    if req.te_trailers {
        h2::accept_trailers(&mut up, protocol);
    }
    interim.attach(&mut up);
    crate::observe::access_log::note_sent();
    // Boxed: this path (a body, or an HTTP/2 node) needs a future of 2.5 KB where the
    // bodiless one above needs 0.7 KB, and unboxed it sized every request's future (5.1 KB,
    // moved into hyper's box per request) for the rarer case.
    Box::pin(send_hyper(cluster, node, up)).await
}

/// A request with a body, or to an HTTP/2 node: by hyper's clients, HTTP/1.1 on a connection
/// from this thread's pool ([`pool::send`], which comes back with the response so the
/// connection returns when the body ends), HTTP/2 over the node's shared connection
/// ([`h2::send`]).
async fn send_hyper(
    cluster: &Cluster,
    node: &NodeRuntime,
    req: Request<UpstreamBody>,
) -> Result<(Response<NodeBody>, Option<Pooled>), UpstreamError> {
    if node.config.protocol == NodeProtocol::H2 {
        return h2::send(cluster, node, req)
            .await
            .map(|resp| (resp.map(NodeBody::Hyper), None));
    }
    let (resp, pooled) = pool::send(cluster, req).await?;
    Ok((resp, Some(pooled)))
}
