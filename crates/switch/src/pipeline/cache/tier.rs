//! One cache across the tier: a cachable request whose key another live peer owns is looked up
//! in this switch's local copies, else sent to the owner — one hop, marked with the hop header
//! so the owner serves it from its cache or its one fill and never sends it further. A hop
//! that fails before the owner's answer begins (refused, reset, `hop_timeout`) takes the owner
//! out and gives the request back to be served here, through a node.
//!
//! Hot keys: a key asked here `local_copy_after` times within one `local_copy_ttl` has the
//! owner's next answer kept here as well (when storable, with a `Content-Length` within
//! `max_object`), fresh for at most `local_copy_ttl`; only a fresh local copy is served, so
//! a stale one never makes this switch ask a node itself.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use capstan_cache::rfc::{self, CacheStatus, Decision, StoredTimes};
use capstan_cache::store::{Entry, Lookup};
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use http_body_util::BodyExt;

use crate::pipeline::dispatch::Forward;
use crate::pipeline::node_request::Client;
use crate::pipeline::response::ResponseBody;
use crate::state::cache::{bump, CacheLayer, Key};
use crate::state::tier::{PeerRuntime, Tier};

/// Debug header (with `debug_headers`) naming the peer that owns a hopped request's key.
static TIER_OWNER: HeaderName = HeaderName::from_static("x-capstan-tier-owner");

/// Whether this request's key is another live peer's to answer: the tier shares its cache,
/// the request did not come from a peer (a hopped request is never sent further), and the
/// key's owner is not this switch.
pub(super) fn asks_owner(tier: &Tier, parts: &Parts, key: &Key) -> bool {
    tier.config.share_cache
        && parts
            .extensions
            .get::<crate::pipeline::tier::Hopped>()
            .is_none()
        && tier.owner_is_other(&key.fill_key())
}

/// The answer for a request whose key another peer owns, from this switch's local copy or the
/// owner. A hop that fails takes its peer out, so the key's next owner is asked; `None` when
/// that is this switch (or every peer failed): the request is served here.
pub(super) async fn from_owners(
    forward: &Forward,
    parts: &Parts,
    key: &Key,
    client: Client<'_>,
) -> Option<Result<Response<ResponseBody>, Response<ResponseBody>>> {
    let tier = forward.switch.tier.as_ref()?;
    for _ in 0..tier.members().peers.len() {
        let owner = {
            let members = tier.members();
            let owner = members.owner(&key.fill_key());
            if owner == members.own {
                return None;
            }
            Arc::clone(&members.peers[owner])
        };
        if let Some(answer) = through_owner(forward, parts, key, &owner, client).await {
            return Some(answer);
        }
    }
    None
}

/// The answer for a request whose key peer `owner` owns; `None` when the hop failed and the
/// request is to be served here.
async fn through_owner(
    forward: &Forward,
    parts: &Parts,
    key: &Key,
    owner: &PeerRuntime,
    client: Client<'_>,
) -> Option<Result<Response<ResponseBody>, Response<ResponseBody>>> {
    let tier = forward.switch.tier.as_ref()?;
    let layer = forward.switch.cache.as_ref()?;
    if let Some(hit) = local_copy(forward, layer, parts, key) {
        tier.local_copy_hits.fetch_add(1, Ordering::Relaxed);
        return Some(Err(hit));
    }
    let hot = parts.method == Method::GET && tier.asked(&key.fill_key(), Instant::now());
    let peer_rt = owner;
    peer_rt.hops_sent.fetch_add(1, Ordering::Relaxed);
    let request_time = SystemTime::now();
    // A target that is no URI (it was one on the way in) is served here.
    let (target, head) = hop_request(forward, tier, owner.address, parts, client)?;
    let hop =
        crate::upstream::pool::send_to_peer(&forward.cluster, tier, &target, &head, &parts.method);
    let answer = tokio::time::timeout(tier.config.hop_timeout, hop).await;
    let failed = match answer {
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(e)) => Err(crate::pipeline::tier::innermost(&*e.error)),
        Err(_) => Err(format!(
            "no answer within {}",
            humantime::format_duration(tier.config.hop_timeout)
        )),
    };
    let resp = match failed {
        Ok(resp) => resp,
        Err(why) => {
            peer_rt.hop_failures.fetch_add(1, Ordering::Relaxed);
            tier.hop_failed(owner, why);
            return None;
        }
    };
    let mut resp = resp.map(|body| ResponseBody::Upstream {
        inner: body,
        on_end: None,
    });
    crate::pipeline::hop_by_hop::strip(resp.headers_mut());
    if forward.cluster.config.debug_headers {
        if let Ok(owner) = HeaderValue::from_str(&peer_rt.address.to_string()) {
            resp.headers_mut().insert(&TIER_OWNER, owner);
        }
    }
    if hot {
        return Some(Ok(keep_local_copy(
            forward,
            layer,
            tier,
            parts,
            key,
            resp,
            request_time,
        )
        .await));
    }
    Some(Ok(resp))
}

/// The request sent to the owner, as its target and head (`None` if the target is no URI):
/// the client's, built for the hop (`Via`, and the hop mark naming this switch and carrying
/// the client's address and scheme, see [`crate::pipeline::node_request`]).
fn hop_request(
    forward: &Forward,
    tier: &Tier,
    owner: std::net::SocketAddr,
    parts: &Parts,
    client: Client<'_>,
) -> Option<(http::Uri, Vec<u8>)> {
    let mut headers = parts.headers.clone();
    let from = tier.own_address;
    let road = crate::pipeline::node_request::Road::Hop { from };
    forward.node_headers(&mut headers, client, road);
    if !headers.contains_key(header::HOST) {
        // The owner keys the request by its host as this switch did: an absolute-form target
        // becomes origin-form on the way.
        let host = crate::pipeline::cache::fields::request_host(parts);
        if let Ok(host) = HeaderValue::from_str(&host) {
            headers.insert(header::HOST, host);
        }
    }
    let pq = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let target: http::Uri = format!("http://{owner}{pq}").parse().ok()?;
    let head = crate::upstream::pool::bodiless_head(&parts.method, &target, &headers, false);
    Some((target, head))
}

/// A fresh local copy of a key another peer owns, answered as a hit.
fn local_copy(
    forward: &Forward,
    layer: &CacheLayer,
    parts: &Parts,
    key: &Key,
) -> Option<Response<ResponseBody>> {
    let req = &parts.headers;
    let Lookup::Hit(entry) = layer
        .store
        .lookup(&key.url, &key.extra, |e| e.vary_matches(req))
    else {
        return None;
    };
    let rules = forward.cluster.cache_rules.as_ref()?;
    let stored = entry.headers();
    let now = SystemTime::now();
    if rfc::decide(&parts.method, req, &stored, &entry.times, now, rules) != Decision::Fresh {
        return None;
    }
    bump(&layer.counters.hits);
    let status = CacheStatus::hit(entry.times.ttl(now));
    let resp = crate::pipeline::cache::respond::from_entry(
        &entry,
        stored,
        &parts.method,
        req,
        now,
        &status,
    );
    Some(crate::pipeline::cache::fields::with_debug(forward, resp))
}

/// Reads the owner's answer for a hot key and keeps it here for at most `local_copy_ttl` when
/// it may be stored; answers the client from what was read either way.
async fn keep_local_copy(
    forward: &Forward,
    layer: &CacheLayer,
    tier: &Tier,
    parts: &Parts,
    key: &Key,
    resp: Response<ResponseBody>,
    request_time: SystemTime,
) -> Response<ResponseBody> {
    let Some(cfg) = forward.cluster.config.cache.as_ref() else {
        return resp;
    };
    let Some(rules) = forward.cluster.cache_rules.as_ref() else {
        return resp;
    };
    let declared = (resp.headers().get(header::CONTENT_LENGTH))
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let fits = declared.is_some_and(|len| len <= cfg.max_object.0);
    let storable = resp.status() == StatusCode::OK
        && rfc::storability(
            &Method::GET,
            &parts.headers,
            resp.status(),
            resp.headers(),
            rules,
        )
        .is_ok();
    if !fits || !storable {
        return resp;
    }
    let (head, body) = resp.into_parts();
    let Ok(collected) = body.collect().await else {
        return crate::pipeline::response::error_response(
            StatusCode::BAD_GATEWAY,
            "the owning peer's answer broke off",
        );
    };
    let body = collected.to_bytes();
    let response_time = SystemTime::now();
    if let Some(vary) = rfc::vary_key(&head.headers, &parts.headers) {
        let mut times = StoredTimes::new(
            head.status,
            &head.headers,
            request_time,
            response_time,
            rules,
        );
        let cap = times.corrected_initial_age + tier.config.local_copy_ttl;
        times.freshness_lifetime = times.freshness_lifetime.min(cap);
        let mut stored_headers = rfc::headers_to_store(&head.headers);
        stored_headers.remove(&TIER_OWNER);
        let entry = Entry::new(
            &key.url,
            &key.extra,
            vary,
            head.status,
            crate::pipeline::cache::fields::owned_headers(&stored_headers),
            body.clone(),
            times,
        );
        let cost = forward.switch.epoch.now_nanos() / 1000;
        if layer.store.insert(entry, cost.max(1)).stored.is_ok() {
            tier.local_copies_stored.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut resp = Response::from_parts(head, ResponseBody::full(body));
    if parts.method == Method::HEAD {
        *resp.body_mut() = ResponseBody::Full(None);
    }
    resp
}
