//! The request pipeline: one ordered list of phases that every client request passes, and
//! that [`handle`] and `proxy` below read as (Pingora's `ProxyHttp` phases and HAProxy's
//! analysers are the models). The cache, the tunnel and the tier are branches of this list,
//! not roads beside it; a new feature (a span per phase, a rate limit) is one phase here.
//!
//! 1. **checks** ([`checks`]): HTTP/2's rules, strict HTTP/1.1 parsing, limits; a request that
//!    fails one is answered at once (forwarding loops are found with the limits);
//! 2. **tier admission** ([`tier`]): the hop header is taken off every request and honoured
//!    only from a peer, whose own requests (health checks, PURGE and BAN fan-outs) are
//!    answered here;
//! 3. **classify**: the class rules of `capstan-core` give the request's class;
//! 4. **route**, in this order: a redirect ([`redirect`]), a tunnel ([`tunnel`]), the cache
//!    ([`cache`]: a lookup, whose hit is answered and never builds a node request; a client's
//!    PURGE), or forwarding (after which an unsafe method invalidates what it changed);
//! 5. **build the node request** ([`node_request`]): the one way what a node or a peer
//!    receives is made from the client's request — on the cache's branch for a fill or a
//!    revalidation, on the tier's for a hop, on the tunnel's for an upgrade;
//! 6. **dispatch** ([`dispatch`]): the policy picks a node, its admission gate admits, queues
//!    or sheds, the request goes up (`crate::upstream`), with retries;
//! 7. **respond** ([`response`]): the node's response streamed back (its interim 1xx heads
//!    first, [`interim`]), or the switch's own;
//! 8. **log**: the access-log line, written when the response body ends
//!    ([`response::Pending`]); the placement is settled by `Drop`, whatever ends the request.
//!
//! Inside the folder: `checks` and `redirect` use `response`; `tunnel` and `cache` use
//! `dispatch`, `node_request` and `response` (`cache` also `interim`); `dispatch` uses
//! `node_request`, `response` and `interim`; `node_request` and `interim` use `hop_by_hop`,
//! as do `dispatch` and `tunnel`; `cache` also uses `tier` (the hop header, PURGE and BAN to
//! every peer), which uses `node_request`, `response` and `hop_by_hop`; nothing here uses
//! `handle`.
//!
//! May use: `net`, `config`, `observe`, `state`, `upstream`.

pub(crate) mod cache;
pub(crate) mod checks;
pub(crate) mod dispatch;
pub(crate) mod hop_by_hop;
pub(crate) mod interim;
pub(crate) mod node_request;
pub(crate) mod redirect;
pub(crate) mod response;
pub(crate) mod tier;
pub(crate) mod tunnel;

use std::convert::Infallible;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use capstan_core::{ClassId, HeaderLookup, RequestFacts};
use futures_util::future::Either;
use http::header::{HeaderMap, HeaderValue};
use http::request::Parts;
use http::uri::PathAndQuery;
use http::{Method, Request, Response};
use hyper::body::Body;

use crate::config::Config;
use crate::net::client_body::ClientBody;
use crate::pipeline::dispatch::Forward;
use crate::pipeline::node_request::{Client, Road};
use crate::pipeline::response::ResponseBody;
use crate::pipeline::tier::Hopped;
use crate::state::cluster::Cluster;
use crate::state::switch::{ConnState, Switch};
use crate::upstream::body::UpstreamBody;

struct HeaderMapLookup<'a>(&'a HeaderMap);

impl HeaderLookup for HeaderMapLookup<'_> {
    fn header(&self, lower_case_name: &str) -> Option<&str> {
        self.0.get(lower_case_name).and_then(|v| v.to_str().ok())
    }
}

pub(crate) fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// Handles one client request.
pub(crate) async fn handle(
    switch: Arc<Switch>,
    conn: Arc<ConnState>,
    peer: HeaderValue,
    req: Request<ClientBody>,
) -> Result<Response<ResponseBody>, Infallible> {
    conn.request_started();
    let cluster = switch.cluster.load_full();
    let logged =
        crate::pipeline::response::Pending::begin(switch.access_log.as_ref(), &conn, &peer, &req);
    // One future awaited in one place, built in place: hyper moves this whole future into a
    // box per request, and two awaits of the proxy path (logged or not) made it hold two
    // copies (26 KB).
    let notes = logged.as_ref().and_then(|entry| entry.notes().cloned());
    let resp = match notes {
        None => Either::Left(proxy(&switch, &cluster, &conn, &peer, req)),
        Some(notes) => Either::Right(crate::observe::access_log::noting(
            notes,
            proxy(&switch, &cluster, &conn, &peer, req),
        )),
    }
    .await;
    let mut resp = match resp {
        Ok(resp) => resp,
        Err(resp) => {
            conn.request_done();
            resp
        }
    };
    if let Some(alt_svc) = &conn.alt_svc {
        resp.headers_mut()
            .insert(http::header::ALT_SVC, alt_svc.clone());
    }
    Ok(match logged {
        None => resp,
        Some(entry) => entry.attach(resp),
    })
}

/// The phases from the checks to the node's answer, in their order (see the module's doc):
/// `Ok` for a node's response (its body settles the request when it ends), `Err` for a
/// response the switch made itself. The cache, the tunnel and the tier are branches here.
async fn proxy(
    switch: &Arc<Switch>,
    cluster: &Arc<Cluster>,
    conn: &Arc<ConnState>,
    peer: &HeaderValue,
    mut req: Request<ClientBody>,
) -> Result<Response<ResponseBody>, Response<ResponseBody>> {
    // 1. checks
    if let Some(refusal) = check(&mut req, &cluster.config) {
        return Err(refusal);
    }
    let (mut parts, body) = req.into_parts();
    // 2. tier admission
    if let Some(tier) = &switch.tier {
        admit_from_tier(switch, tier, conn, &mut parts).await?;
    }
    // 3. classify
    let (class, pq) = classify(cluster, conn, &parts);
    // 4. route: a redirect, a tunnel, the cache (lookup, purge), or forwarding
    if let Some(redirect) = crate::pipeline::redirect::answer(switch, cluster, class, &pq) {
        crate::observe::access_log::note_decision("redirect");
        return Err(redirect);
    }
    let way = route(switch, cluster, class, &parts);
    // The client the node is told of: this connection's, or the one a peer's hop mark
    // carried (out of the request, which moves on).
    let carried = (switch.tier.as_ref())
        .and_then(|_| parts.extensions.get::<Hopped>())
        .and_then(|hopped| hopped.client.clone());
    let client = Client::of(conn, peer, carried.as_ref());
    let forward = Forward::of((switch, cluster, conn), class, pq, &mut parts);
    let invalidate = match way {
        Way::Tunnel(tunnel) => {
            // Boxed: only a tunnel takes this path (see `handle` on future sizes).
            let passing = crate::pipeline::tunnel::pass(&forward, parts, tunnel, client);
            return Err(Box::pin(passing).await);
        }
        Way::CacheLookup => {
            // A hit in memory is answered without a future of its own, and never builds a
            // node request; the rest (the disk, a fill, a revalidation, a hop to the key's
            // tier owner) goes on in `serve`, which builds and dispatches its requests itself.
            let missed = match crate::pipeline::cache::from_memory(&forward, &parts, client) {
                Ok(hit) => return Err(hit),
                Err(missed) => missed,
            };
            // Boxed, as the tunnel: the cache path's future is several KB, and an unboxed one
            // would be in every request's future, cached or not (see `handle`).
            let serving = crate::pipeline::cache::serve(forward, parts, missed, client);
            return Box::pin(serving).await;
        }
        Way::Purge => {
            let purging = crate::pipeline::cache::client_purge(&forward, &parts, peer);
            return Err(Box::pin(purging).await);
        }
        Way::Proxy { invalidate } => invalidate,
    };
    // 5. build the node request (a fill, a hop and a tunnel build theirs on their branch)
    forward.node_headers(&mut parts.headers, client, Road::Proxy);
    // Not kept across the dispatch's awaits (it would be in the request's future).
    drop(carried);
    // 6. dispatch: pick, admit, send, retry (awaited here: a future nested in another is
    // copied into it, and this one is KBs)
    let (up_body, retryable, body_limit_hit) = upstream_body(&forward, &parts, body);
    // Only an unsafe method through the cache needs the host.
    let host = invalidate.then(|| crate::pipeline::cache::request_host(&parts));
    let answer = forward
        .dispatch(parts.headers, up_body, retryable, body_limit_hit)
        .await;
    if let (Some(host), Ok(resp)) = (host, &answer) {
        crate::pipeline::cache::invalidate(&forward, &host, resp);
    }
    answer
}

/// Phase 1, checks: HTTP/2's rules, strict HTTP/1.1 parsing, limits; the refusal of a request
/// that fails one.
fn check(req: &mut Request<ClientBody>, config: &Config) -> Option<Response<ResponseBody>> {
    crate::pipeline::checks::http2::check_request(req)
        .or_else(|| crate::pipeline::checks::strict::check_request(req))
        .or_else(|| crate::pipeline::checks::limits::check_limits(req, config))
}

/// Phase 2, tier admission: the hop header is taken off; a peer's own request (its health
/// check, a PURGE or BAN it fans out) is answered here (`Err`).
async fn admit_from_tier(
    switch: &Arc<Switch>,
    tier: &crate::state::tier::Tier,
    conn: &ConnState,
    parts: &mut Parts,
) -> Result<(), Response<ResponseBody>> {
    crate::pipeline::tier::admit(tier, conn, parts);
    if parts.extensions.get::<Hopped>().is_none() {
        return Ok(());
    }
    // Boxed: only a peer's requests take this path (see `handle` on future sizes).
    match Box::pin(crate::pipeline::tier::answer_peer(switch, parts)).await {
        Some(answer) => Err(answer),
        None => Ok(()),
    }
}

/// Phase 3, classify: the request's class (noted for the access log) and its path and query.
fn classify(cluster: &Cluster, conn: &ConnState, parts: &Parts) -> (ClassId, PathAndQuery) {
    let pq = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    let class = cluster.classifier.classify(&RequestFacts {
        method: parts.method.as_str(),
        path: pq.path(),
        query: pq.query(),
        headers: &HeaderMapLookup(&parts.headers),
        tls: conn.tls.get().is_some(),
        sni: conn.tls.get().and_then(|t| t.sni.as_deref()),
    });
    crate::observe::access_log::note_class(&cluster.class_headers[class]);
    (class, pq)
}

/// Where phase 4 sends a request that is not redirected.
enum Way {
    /// A WebSocket or another upgrade, or `CONNECT`.
    Tunnel(crate::pipeline::tunnel::Tunnel),
    /// A GET or HEAD the cache looks up.
    CacheLookup,
    /// A client's `PURGE`.
    Purge,
    /// Forwarding to a node; `invalidate`: an unsafe method, after which the cache drops what
    /// it changed.
    Proxy { invalidate: bool },
}

/// Phase 4, route, after the redirect: a tunnel, the cache, or forwarding.
fn route(switch: &Switch, cluster: &Cluster, class: ClassId, parts: &Parts) -> Way {
    use crate::pipeline::cache::Route;
    let upgrade = cluster.config.upgrade.enabled;
    if let Some(tunnel) = upgrade
        .then(|| crate::pipeline::tunnel::requested(parts))
        .flatten()
    {
        return Way::Tunnel(tunnel);
    }
    match Route::of(switch, cluster, class, parts) {
        Route::Lookup => Way::CacheLookup,
        Route::Purge => Way::Purge,
        Route::Invalidate => Way::Proxy { invalidate: true },
        Route::Pass => Way::Proxy { invalidate: false },
    }
}

/// The body that goes up with the request (bounded by `limits.max_body_bytes`, with the flag
/// that says it went over), and whether the request may be sent again to a second node: only
/// one without a body, of an idempotent method.
fn upstream_body(
    forward: &Forward,
    parts: &Parts,
    body: ClientBody,
) -> (UpstreamBody, bool, Option<Arc<AtomicBool>>) {
    let config = &forward.cluster.config;
    let empty_body = body.is_end_stream()
        || crate::pipeline::checks::limits::declared_length(&parts.headers) == Some(0);
    let retryable = config.upstream.retry && empty_body && is_idempotent(&parts.method);
    let body_limit_hit = (!empty_body).then(|| Arc::new(AtomicBool::new(false)));
    let up_body = match &body_limit_hit {
        None => UpstreamBody::Empty,
        Some(flag) => UpstreamBody::Stream {
            inner: body,
            remaining: match config.limits.max_body_bytes {
                0 => u64::MAX,
                n => n,
            },
            exceeded: Arc::clone(flag),
        },
    };
    (up_body, retryable, body_limit_hit)
}

#[cfg(test)]
mod tests {
    /// The size of what an async fn with four owned arguments returns.
    fn future_size<A, B, C, D, R>(_: fn(A, B, C, D) -> R) -> usize {
        std::mem::size_of::<R>()
    }

    /// hyper moves every request's future into a box: a future that held the proxy path twice
    /// (logged and unlogged) or the cache path inline was 26 KB, copied per request.
    #[test]
    fn the_request_future_stays_small() {
        let size = future_size(super::handle as fn(_, _, _, _) -> _);
        assert!(size <= 8 * 1024, "the request future is {size} bytes");
    }
}
