//! The request pipeline, one request's way through the switch in the order it takes:
//!
//! 1. **checks** ([`checks`]): HTTP/2's rules, strict HTTP/1.1 parsing, limits and forwarding
//!    loops; a request that fails one is answered at once;
//! 2. **classify**: the class rules of `capstan-core` give the request's class;
//! 3. **route**: a redirect ([`redirect`]), a tunnel ([`tunnel`]), the cache ([`cache`]: a hit
//!    is answered, a miss fills through dispatch), or forwarding;
//! 4. **dispatch** ([`dispatch`]): the policy picks a node, its admission gate admits, queues or
//!    sheds, the request goes up (`crate::upstream`), with retries;
//! 5. **respond** ([`response`]): the node's response streamed back (its interim 1xx heads
//!    first, [`interim`]), or the switch's own;
//! 6. **log**: the access-log line, written when the response body ends ([`response::Pending`]).
//!
//! [`handle`] below is that list. Inside the folder: `checks` and `redirect` use `response`;
//! `tunnel` and `cache` use `dispatch` and `response` (`cache` also `interim`); `dispatch`
//! uses `response` and `interim`; `interim` uses `hop_by_hop`, as do `dispatch` and `tunnel`;
//! `cache` also uses `tier` (the hop header, PURGE and BAN to every peer), which uses
//! `response` and `hop_by_hop`; nothing here uses `handle`.
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

use capstan_core::{HeaderLookup, RequestFacts};
use futures_util::future::Either;
use http::header::{HeaderMap, HeaderValue};
use http::uri::PathAndQuery;
use http::{Method, Request, Response};
use hyper::body::Body;

use crate::net::client_body::ClientBody;
use crate::pipeline::dispatch::Forward;
use crate::pipeline::response::ResponseBody;
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

/// `Ok` for a node's response (its body settles the request when it ends), `Err` for a
/// response the switch made itself.
async fn proxy(
    switch: &Arc<Switch>,
    cluster: &Arc<Cluster>,
    conn: &Arc<ConnState>,
    peer: &HeaderValue,
    mut req: Request<ClientBody>,
) -> Result<Response<ResponseBody>, Response<ResponseBody>> {
    let config = &cluster.config;
    if let Some(refusal) = crate::pipeline::checks::http2::check_request(&req) {
        return Err(refusal);
    }
    if let Some(refusal) = crate::pipeline::checks::strict::check_request(&mut req) {
        return Err(refusal);
    }
    if let Some(refusal) = crate::pipeline::checks::limits::check_limits(&req, config) {
        return Err(refusal);
    }
    let (mut parts, body) = req.into_parts();
    if let Some(tier) = &switch.tier {
        crate::pipeline::tier::admit(tier, conn, &mut parts);
        if parts
            .extensions
            .get::<crate::pipeline::tier::Hopped>()
            .is_some()
        {
            // Boxed: only a peer's requests take this path (see `handle` on future sizes).
            let answer = Box::pin(crate::pipeline::tier::answer_peer(switch, &parts)).await;
            if let Some(answer) = answer {
                return Err(answer);
            }
        }
    }
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
    let tunnel = config
        .upgrade
        .enabled
        .then(|| crate::pipeline::tunnel::requested(&parts))
        .flatten();
    if let Some(redirect) = crate::pipeline::redirect::answer(switch, cluster, class, &pq) {
        crate::observe::access_log::note_decision("redirect");
        return Err(redirect);
    }
    let forward = Forward {
        switch: Arc::clone(switch),
        cluster: Arc::clone(cluster),
        conn: Arc::clone(conn),
        class,
        method: parts.method.clone(),
        pq,
        client_version: parts.version,
        client: crate::pipeline::node_request::Client::of(
            conn,
            peer,
            parts
                .extensions
                .get::<crate::pipeline::tier::Hopped>()
                .and_then(|hopped| hopped.client.as_ref()),
        ),
        te_trailers: crate::pipeline::node_request::accepts_trailers(&parts.headers),
        // An HTTP/3 request carries its way for interim responses; the others find hyper's.
        interim: match parts.version {
            http::Version::HTTP_3 => parts
                .extensions
                .remove::<crate::pipeline::interim::Interim>(),
            _ => None,
        },
    };
    if let Some(tunnel) = tunnel {
        return Err(Box::pin(crate::pipeline::tunnel::pass(&forward, parts, tunnel)).await);
    }
    let cache = crate::pipeline::cache::Route::of(switch, cluster, class, &parts);
    if let crate::pipeline::cache::Route::Lookup = cache {
        // A hit never leaves the switch: the forwarding headers are added only on the way to
        // a node (see `pipeline::cache::forwarded_headers`). One in memory is answered
        // without a future of its own.
        let missed = match crate::pipeline::cache::from_memory(&forward, &parts) {
            Ok(hit) => return Err(hit),
            Err(missed) => missed,
        };
        // Boxed, as the tunnel above: the cache path's future is several KB, and an unboxed
        // one would be in every request's future, cached or not (see `handle`).
        return Box::pin(crate::pipeline::cache::serve(forward, parts, missed)).await;
    }
    if let crate::pipeline::cache::Route::Purge = cache {
        return Err(Box::pin(crate::pipeline::cache::client_purge(&forward, &parts, peer)).await);
    }
    forward.node_headers(
        &mut parts.headers,
        crate::pipeline::node_request::Road::Proxy,
    );

    let empty_body = body.is_end_stream()
        || crate::pipeline::checks::limits::declared_length(&parts.headers) == Some(0);
    // Only a request that can be sent again unchanged may go to a second node.
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
    // Only an unsafe method through the cache needs the host (after the headers are gone).
    let host = (cache == crate::pipeline::cache::Route::Invalidate)
        .then(|| crate::pipeline::cache::request_host(&parts));
    let answer = forward
        .dispatch(parts.headers, up_body, retryable, body_limit_hit)
        .await;
    if let (Some(host), Ok(resp)) = (host, &answer) {
        crate::pipeline::cache::invalidate(&forward, &host, resp);
    }
    answer
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
