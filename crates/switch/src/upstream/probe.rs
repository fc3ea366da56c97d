//! The switch's own requests, beside those it forwards: a node's health check, its load
//! report, a tier peer's health check, an invalidation fanned out to the peers. Their clients
//! are built here, as the pool and the tunnel build theirs, so no caller builds an HTTP client
//! of its own; and the protocol a node is checked in is decided here, as a forwarded
//! request's is (`crate::upstream::send`).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, USER_AGENT};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::sections::proxy_protocol::SendVersion;
use crate::config::NodeProtocol;
use crate::state::cluster::{Cluster, NodeRuntime};
use crate::state::tier::Tier;
use crate::upstream::proxy_protocol::NodeConnector;

type Probe<C> = Client<C, Empty<Bytes>>;

/// Why a probe got no response head.
#[derive(Debug)]
pub(crate) enum Failed {
    /// None within the caller's timeout.
    TimedOut,
    /// The connection or the exchange failed: the innermost cause.
    Error(String),
}

/// Sends `req` by `client`, waiting at most `timeout` for the response head.
async fn ask<C>(
    client: &Probe<C>,
    req: Request<Empty<Bytes>>,
    timeout: Duration,
) -> Result<Response<Incoming>, Failed>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    match tokio::time::timeout(timeout, client.request(req)).await {
        Err(_) => Err(Failed::TimedOut),
        Ok(Err(e)) => Err(Failed::Error(innermost(&e))),
        Ok(Ok(resp)) => Ok(resp),
    }
}

/// The deepest cause of an error (hyper's outer ones say only "client error").
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// Node health checks: a fresh connection per check, as HAProxy's (so a node that stops
/// accepting fails its check while pooled connections to it still work), with the PROXY
/// header nodes expect (LOCAL, HAProxy's `check-send-proxy`) and the node's TLS; in the
/// protocol the node is spoken to in (an HTTP/2-only node would not answer HTTP/1.1).
#[derive(Clone)]
pub(crate) struct NodeChecks {
    http1: Probe<NodeConnector>,
    h2: Probe<NodeConnector>,
}

impl NodeChecks {
    /// Clients for `cluster`'s TLS settings and PROXY header `send`.
    pub(crate) fn new(send: SendVersion, cluster: &Cluster) -> NodeChecks {
        let mut connector = HttpConnector::new();
        connector.enforce_http(true);
        connector.set_nodelay(true);
        let connector = NodeConnector {
            inner: connector,
            send,
            tls: Arc::clone(&cluster.node_tls),
        };
        let mut builder = Client::builder(TokioExecutor::new());
        builder.pool_max_idle_per_host(0);
        let http1 = builder.build(connector.clone());
        builder.http2_only(true).timer(TokioTimer::new());
        NodeChecks {
            http1,
            h2: builder.build(connector),
        }
    }

    /// `GET path` of `node` with `User-Agent: capstan-health-check`: the status of its answer
    /// within `timeout`.
    pub(crate) async fn get(
        &self,
        node: &NodeRuntime,
        path: &str,
        timeout: Duration,
    ) -> Result<StatusCode, Failed> {
        let uri = Uri::builder()
            .scheme("http")
            .authority(node.authority.clone())
            .path_and_query(path)
            .build()
            .map_err(|e| Failed::Error(format!("bad check URI: {e}")))?;
        let mut req = Request::get(uri)
            .body(Empty::new())
            .expect("a GET with a valid URI");
        req.headers_mut()
            .insert(USER_AGENT, HeaderValue::from_static("capstan-health-check"));
        let client = match node.config.protocol {
            NodeProtocol::Http1 => &self.http1,
            NodeProtocol::H2 => {
                *req.version_mut() = http::Version::HTTP_2;
                &self.h2
            }
        };
        ask(client, req, timeout).await.map(|resp| resp.status())
    }
}

/// Load reports (`load.path`): plain HTTP/1.1 at the node's report address (its load daemon,
/// or the node itself), kept alive between rounds.
#[derive(Clone)]
pub(crate) struct Reports(Probe<HttpConnector>);

impl Reports {
    pub(crate) fn new() -> Reports {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(1)));
        Reports(Client::builder(TokioExecutor::new()).build(connector))
    }

    /// `GET uri`, its response within `timeout`.
    pub(crate) async fn get(
        &self,
        uri: Uri,
        timeout: Duration,
    ) -> Result<Response<Incoming>, Failed> {
        let req = Request::get(uri)
            .body(Empty::new())
            .expect("a GET with a valid URI");
        ask(&self.0, req, timeout).await
    }
}

/// Requests to the tier's peers (beside hops, which go by the switch's own HTTP/1.1:
/// `crate::upstream::pool::send_to_peer`): HTTP/1.1 from this switch's own IP address, as
/// peers take hop-marked requests only from peers.
#[derive(Clone)]
pub(crate) struct Peers(Probe<HttpConnector>);

thread_local! {
    /// This worker's keep-alive client to the peers of the tier of that id.
    static SHARED: RefCell<Option<(u64, Peers)>> = const { RefCell::new(None) };
}

impl Peers {
    fn connector(tier: &Tier) -> HttpConnector {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_local_address(tier.config.source_ip(tier.own_address));
        connector
    }

    /// For peer health checks: a fresh connection per check, as node checks do, so a peer
    /// that stops accepting fails its check while pooled connections live.
    pub(crate) fn for_checks(tier: &Tier) -> Peers {
        let mut builder = Client::builder(TokioExecutor::new());
        builder.pool_max_idle_per_host(0);
        Peers(builder.build(Peers::connector(tier)))
    }

    /// For invalidations fanned out: keep-alive connections (connecting within
    /// `tier.hop_timeout`), one client per worker thread and tier.
    pub(crate) fn shared(tier: &Tier) -> Peers {
        SHARED.with(|cell| {
            let mut current = cell.borrow_mut();
            if let Some((id, peers)) = &*current {
                if *id == tier.id() {
                    return peers.clone();
                }
            }
            let mut connector = Peers::connector(tier);
            connector.set_connect_timeout(Some(tier.config.hop_timeout));
            let client = Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .pool_timer(TokioTimer::new())
                .build(connector);
            let peers = Peers(client);
            *current = Some((tier.id(), peers.clone()));
            peers
        })
    }

    /// Sends `req` to the peer its URI names, its response head within `timeout`.
    pub(crate) async fn send(
        &self,
        req: Request<Empty<Bytes>>,
        timeout: Duration,
    ) -> Result<Response<Incoming>, Failed> {
        ask(&self.0, req, timeout).await
    }
}
