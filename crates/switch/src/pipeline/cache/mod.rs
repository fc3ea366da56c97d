//! The switch's HTTP cache layer: where a request meets `capstan-cache`.
//!
//! A `GET` or `HEAD` of a cachable class is looked up by its key (memory tier, then disk).
//! A fresh entry is answered at once; a stale one is served while one background request
//! refreshes it (`stale-while-revalidate`, grace), or revalidated with the node; a miss joins the
//! one fill in flight for its key (request coalescing) or starts it. The fill is a background
//! task that streams the node's response to every waiting client as it arrives and stores it
//! when RFC 9111 allows. Unsafe methods invalidate what they change (RFC 9111 §4.4).

mod fields;
pub(crate) mod report;
mod respond;
mod tier;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use capstan_cache::key::{primary_key, url_part, KeyRules};
use capstan_cache::rfc::{self, CacheRules, CacheStatus, Decision, Fwd, StoredTimes};
use capstan_cache::store::{Entry, Lookup};
use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Method, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Body;

use crate::config::cache::CacheConfig;
pub(crate) use crate::pipeline::cache::fields::request_host;
use crate::pipeline::cache::fields::{owned_headers, with_debug};
use crate::pipeline::dispatch::Forward;
use crate::pipeline::node_request::{Client, Road};
use crate::pipeline::response::error_response;
use crate::pipeline::response::ResponseBody;
use crate::state::cluster::Cluster;
use crate::state::switch::{ConnState, Switch};
use crate::upstream::body::UpstreamBody;

pub(crate) use crate::pipeline::response::CACHE_STATUS;
use crate::state::cache::fill::{Fill, FillHead, FillOutcome, FillReader};
use crate::state::cache::{bump, CacheLayer, Key};

/// What the cache does with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Not the cache's business.
    Pass,
    /// Look it up (GET, HEAD of a cachable class).
    Lookup,
    /// A client's `PURGE`.
    Purge,
    /// An unsafe method: forward, then invalidate what it changed.
    Invalidate,
}

impl Route {
    pub(crate) fn of(switch: &Switch, cluster: &Cluster, class: usize, parts: &Parts) -> Route {
        let (Some(_), Some(cfg)) = (&switch.cache, &cluster.config.cache) else {
            return Route::Pass;
        };
        match parts.method {
            // A GET with a body is unusual enough not to be the cache's business (and its body
            // would be lost on the way to a fill).
            Method::GET | Method::HEAD if has_body(&parts.headers) => Route::Pass,
            Method::GET | Method::HEAD => {
                let name = &cluster.classifier.classes()[class].name;
                let cachable = cfg.classes.as_ref().is_none_or(|c| c.contains(name));
                if cachable {
                    Route::Lookup
                } else {
                    Route::Pass
                }
            }
            Method::OPTIONS | Method::TRACE | Method::CONNECT => Route::Pass,
            ref m if m.as_str() == "PURGE" => Route::Purge,
            _ => Route::Invalidate,
        }
    }
}

fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers
            .get(header::CONTENT_LENGTH)
            .is_some_and(|v| v.as_bytes() != b"0")
}

impl Key {
    fn of(forward: &Forward, cfg: &CacheConfig, parts: &Parts) -> Key {
        let class_name = &forward.cluster.classifier.classes()[forward.class].name;
        let rules: &KeyRules = cfg.class_keys.get(class_name).unwrap_or(&cfg.key);
        let host = request_host(parts);
        let full = primary_key(
            "http",
            &host,
            forward.pq.path(),
            forward.pq.query(),
            &parts.headers,
            rules,
        );
        // The URL part keeps the key's own allocation; the rest (empty unless the key rules
        // add to it) is split off.
        let url_len = url_part(&full).len();
        let mut url = full;
        let extra = url.split_off(url_len);
        Key { url, extra }
    }

    fn fill_key(&self) -> String {
        format!("{}{}", self.url, self.extra)
    }
}

/// What the memory tier did not answer: the rest of the way is [`serve`]'s.
pub(crate) struct Missed {
    key: Key,
    now: SystemTime,
    /// `Hit` of an entry that must be revalidated first; else the memory tier's miss. `None`
    /// when the memory tier was not asked: another peer of the tier owns the key.
    found: Option<Lookup>,
}

/// The first step of a GET or HEAD through the cache, synchronous: a response stored in
/// memory that may answer now (fresh, or stale with a permission) is answered here (`Ok`);
/// anything else is handed to [`serve`] (`Err`). A hit thus builds no future and allocates no
/// box for one: the rest of the way (disk, fill, revalidation) is a future of several KB.
pub(crate) fn from_memory(
    forward: &Forward,
    parts: &Parts,
    client: Client<'_>,
) -> Result<Response<ResponseBody>, Missed> {
    let layer = forward.switch.cache.as_ref().expect("routed to the cache");
    // Borrowed from the cluster: the hit path copies nothing of the configuration.
    let cfg = forward
        .cluster
        .config
        .cache
        .as_ref()
        .expect("routed to the cache");
    let key = Key::of(forward, cfg, parts);
    let now = SystemTime::now();
    if let Some(tier) = &forward.switch.tier {
        if tier::asks_owner(tier, parts, &key) {
            // One cache across the tier: the owner answers (or this switch's fresh local copy
            // of a hot key), on [`serve`]'s way.
            return Err(Missed {
                key,
                now,
                found: None,
            });
        }
    }
    match in_memory(forward, layer, (parts, client), &key, now) {
        Ok(answer) => Ok(answer),
        Err(found) => Err(Missed {
            key,
            now,
            found: Some(found),
        }),
    }
}

/// The memory tier's answer for `key`: a stored response that may answer now, else what the
/// lookup found (an entry to revalidate, or a miss).
fn in_memory(
    forward: &Forward,
    layer: &CacheLayer,
    (parts, client): (&Parts, Client<'_>),
    key: &Key,
    now: SystemTime,
) -> Result<Response<ResponseBody>, Lookup> {
    let req = &parts.headers;
    match layer
        .store
        .lookup(&key.url, &key.extra, |e| e.vary_matches(req))
    {
        Lookup::Hit(entry) => match answer_stored(forward, (parts, client), key, entry, now) {
            Ok(answer) => Ok(answer),
            Err(stale) => Err(Lookup::Hit(stale)),
        },
        miss => Err(miss),
    }
}

/// Answers from a stored entry when it may answer now (RFC 9111 §4.2; a stale one with the
/// permission `Cache-Status` names, refreshed in the background when that is the permission);
/// `Err` gives back an entry that must be revalidated with the node first.
fn answer_stored(
    forward: &Forward,
    (parts, client): (&Parts, Client<'_>),
    key: &Key,
    entry: Arc<Entry>,
    now: SystemTime,
) -> Result<Response<ResponseBody>, Arc<Entry>> {
    let layer = forward.switch.cache.as_ref().expect("routed to the cache");
    let cfg = forward
        .cluster
        .config
        .cache
        .as_ref()
        .expect("routed to the cache");
    let rules = forward
        .cluster
        .cache_rules
        .as_ref()
        .expect("built with [cache]");
    let req = &parts.headers;
    let stored = entry.headers();
    let serve_stored = |stored: HeaderMap, why: Option<rfc::StaleWhy>| {
        let ttl = ttl_of(&entry.times, now);
        let status = match why {
            Some(why) => CacheStatus::stale(ttl, why),
            None => CacheStatus::hit(ttl),
        };
        let resp = respond::from_entry(&entry, stored, &parts.method, req, now, &status);
        with_debug(forward, resp)
    };
    match rfc::decide(&parts.method, req, &stored, &entry.times, now, rules) {
        Decision::Fresh => {
            bump(&layer.counters.hits);
            Ok(serve_stored(stored, None))
        }
        Decision::StaleAllowed { why } => {
            bump(&layer.counters.stale_hits);
            Ok(serve_stored(stored, Some(why)))
        }
        Decision::StaleWhileRevalidate { why } => {
            bump(&layer.counters.stale_hits);
            refresh_in_background(forward, (req, client), key, &entry, cfg.clone());
            Ok(serve_stored(stored, Some(why)))
        }
        Decision::Revalidate => Err(entry),
    }
}

/// The rest of a GET or HEAD through the cache after [`from_memory`]: the disk tier, then a
/// revalidation, a fill or a pass. `Err` for answers the switch made itself (hits, errors),
/// `Ok` for ones streaming from a node.
pub(crate) async fn serve(
    forward: Forward,
    parts: Parts,
    missed: Missed,
    client: Client<'_>,
) -> Result<Response<ResponseBody>, Response<ResponseBody>> {
    let switch = Arc::clone(&forward.switch);
    let layer = switch.cache.as_ref().expect("routed to the cache");
    // The fill path clones what its background task keeps.
    let cluster = Arc::clone(&forward.cluster);
    let cfg = cluster.config.cache.as_ref().expect("routed to the cache");
    let rules = cluster.cache_rules.as_ref().expect("built with [cache]");
    let Missed { key, now, found } = missed;
    let found = match found {
        Some(found) => found,
        None => {
            if let Some(answer) = tier::from_owners(&forward, &parts, &key, client).await {
                return answer;
            }
            // Every owner asked failed, or this switch owns the key now: served here.
            match in_memory(&forward, layer, (&parts, client), &key, now) {
                Ok(answer) => return Err(answer),
                Err(found) => found,
            }
        }
    };
    let req = &parts.headers;
    let found = match found {
        Lookup::Hit(entry) => Lookup::Hit(entry),
        miss => match layer.lookup_on_disk(&key, req).await {
            Some(entry) => match answer_stored(&forward, (&parts, client), &key, entry, now) {
                Ok(answer) => return Err(answer),
                Err(stale) => Lookup::Hit(stale),
            },
            None => miss,
        },
    };
    let vary_miss = matches!(found, Lookup::VaryMiss);
    let stale = match found {
        Lookup::Hit(entry) => Some(entry),
        Lookup::VaryMiss | Lookup::UriMiss if rfc::only_if_cached(req) => {
            return Err(error_response(
                StatusCode::GATEWAY_TIMEOUT,
                "only-if-cached: the cache holds no usable response",
            ));
        }
        Lookup::VaryMiss | Lookup::UriMiss => None,
    };
    let fwd_kind = match (&stale, vary_miss) {
        (Some(_), _) => Fwd::Stale,
        (None, true) => Fwd::VaryMiss,
        (None, false) => Fwd::UriMiss,
    };
    if req.contains_key(header::RANGE) && stale.is_none() {
        // A range of an object the cache does not hold goes to the node as asked (partials
        // are never stored); the next full request fills the cache.
        bump(&layer.counters.passes);
        return pass((forward, client), parts, Fwd::Miss, Some("range")).await;
    }
    if rfc::CacheControl::parse_request(req).no_store {
        bump(&layer.counters.passes);
        return pass((forward, client), parts, Fwd::Request, Some("no-store")).await;
    }
    match stale {
        Some(_) => bump(&layer.counters.revalidations),
        None => bump(&layer.counters.misses),
    }
    through_fill(
        (forward, client),
        parts,
        key,
        stale,
        cfg,
        rules.clone(),
        fwd_kind,
    )
    .await
}

fn ttl_of(times: &StoredTimes, now: SystemTime) -> i64 {
    times.ttl(now)
}

/// Forwards without the cache (a range miss, a `no-store` request), saying so in
/// `Cache-Status`.
async fn pass(
    (forward, client): (Forward, Client<'_>),
    parts: Parts,
    fwd: Fwd,
    detail: Option<&'static str>,
) -> Result<Response<ResponseBody>, Response<ResponseBody>> {
    let status = CacheStatus::forward(fwd, false, false, detail);
    let mut headers = parts.headers;
    forward.node_headers(&mut headers, client, Road::Proxy);
    let answer = forward
        .dispatch(headers, UpstreamBody::Empty, true, None)
        .await;
    let mark = |mut r: Response<ResponseBody>| {
        r.headers_mut().insert(&CACHE_STATUS, status.header_value());
        r
    };
    answer.map(mark).map_err(mark)
}

/// Joins the fill in flight for the key, or starts one; answers from it.
#[allow(clippy::too_many_arguments)]
async fn through_fill(
    (forward, client): (Forward, Client<'_>),
    parts: Parts,
    key: Key,
    stale: Option<Arc<Entry>>,
    cfg: &CacheConfig,
    rules: CacheRules,
    fwd_kind: Fwd,
) -> Result<Response<ResponseBody>, Response<ResponseBody>> {
    let layer = forward.switch.cache.as_ref().expect("routed to the cache");
    let fill_key = key.fill_key();
    // A request with credentials takes no one else's response (RFC 9111 §3.5: what a shared
    // cache may give it is decided against a stored response, which a fill is not yet).
    let may_join = cfg.coalesce && !parts.headers.contains_key(header::AUTHORIZATION);
    let joined = may_join.then(|| {
        let fills = layer.fills();
        fills
            .get(&fill_key)
            .and_then(|f| f.join(cfg.coalesce_max_waiters, true))
    });
    if let Some(Some(reader)) = joined {
        bump(&layer.counters.coalesced);
        return follow((forward, client), parts, reader, cfg, fwd_kind).await;
    }
    let fill = Fill::new();
    let reader = fill
        .join(usize::MAX, false)
        .expect("a new fill takes readers");
    if cfg.coalesce {
        layer.fills().insert(fill_key.clone(), Arc::clone(&fill));
    }
    let method = parts.method.clone();
    let client_req = parts.headers.clone();
    // The node's interim responses go to this client, the fill's leader, and never to the
    // store nor to the requests that join the fill (see `crate::pipeline::interim`).
    let interim = forward.interim();
    spawn_fill(
        (&forward, client),
        parts.headers,
        key,
        stale,
        (cfg.clone(), rules),
        Arc::clone(&fill),
        interim,
    );
    let Some(head) = fill
        .head(forward.cluster.config.timeouts.upstream * 2)
        .await
    else {
        return Err(error_response(
            StatusCode::GATEWAY_TIMEOUT,
            "the cache fill got no response head in time",
        ));
    };
    let status = leader_status(&head, fwd_kind);
    Err(with_debug(
        &forward,
        respond::from_fill(&head, reader, &method, &client_req, &status),
    ))
}

fn leader_status(head: &FillHead, fwd_kind: Fwd) -> CacheStatus {
    match head.outcome {
        FillOutcome::Fetched { stored, .. } => {
            let mut s = CacheStatus::forward(fwd_kind, stored, false, None);
            s.fwd_status = Some(head.status.as_u16());
            s.ttl = head.ttl;
            s
        }
        FillOutcome::Revalidated => {
            let mut s = CacheStatus::forward(Fwd::Stale, false, false, None);
            s.fwd_status = Some(304);
            s.ttl = head.ttl;
            s
        }
        FillOutcome::StaleOnError { why, node_status } => {
            let ttl = head.ttl.unwrap_or(0);
            match why {
                Some(why) => {
                    let mut s = CacheStatus::stale(ttl, why);
                    s.fwd_status = node_status;
                    s
                }
                None => CacheStatus::hit(ttl),
            }
        }
        FillOutcome::Error => CacheStatus::forward(fwd_kind, false, false, Some("node-error")),
    }
}

/// A waiter of someone else's fill: waits for the head (at most `coalesce_timeout`, then goes
/// to the node itself) and streams the body as it arrives.
async fn follow(
    (forward, client): (Forward, Client<'_>),
    parts: Parts,
    reader: FillReader,
    cfg: &CacheConfig,
    fwd_kind: Fwd,
) -> Result<Response<ResponseBody>, Response<ResponseBody>> {
    let Some(head) = reader.fill().head(cfg.coalesce_timeout).await else {
        drop(reader);
        return pass((forward, client), parts, fwd_kind, Some("coalesce-timeout")).await;
    };
    if !head.outcome.shareable() {
        drop(reader);
        let layer = forward.switch.cache.as_ref().expect("routed to the cache");
        bump(&layer.counters.passes);
        return pass((forward, client), parts, fwd_kind, Some("uncachable")).await;
    }
    let varies_otherwise = head.vary.as_ref().is_some_and(|leader| {
        rfc::vary_key(&head.headers, &parts.headers).as_ref() != Some(leader)
    });
    if varies_otherwise {
        drop(reader);
        return pass((forward, client), parts, Fwd::VaryMiss, None).await;
    }
    let mut status = leader_status(&head, fwd_kind);
    status.collapsed = true;
    Err(with_debug(
        &forward,
        respond::from_fill(&head, reader, &parts.method, &parts.headers, &status),
    ))
}

/// Serves stale and refreshes once in the background (unless a fill for the key is running).
fn refresh_in_background(
    forward: &Forward,
    (client_headers, client): (&HeaderMap, Client<'_>),
    key: &Key,
    entry: &Arc<Entry>,
    cfg: CacheConfig,
) {
    let layer = forward.switch.cache.as_ref().expect("routed to the cache");
    let fill_key = key.fill_key();
    let fill = {
        let mut fills = layer.fills();
        if fills.contains_key(&fill_key) {
            return;
        }
        let fill = Fill::new();
        fills.insert(fill_key, Arc::clone(&fill));
        fill
    };
    bump(&layer.counters.background_refreshes);
    let rules = cfg.rules();
    let key = Key {
        url: key.url.clone(),
        extra: key.extra.clone(),
    };
    // No client waits for a background refresh: its interim responses go nowhere.
    spawn_fill(
        (forward, client),
        client_headers.clone(),
        key,
        Some(Arc::clone(entry)),
        (cfg, rules),
        fill,
        None,
    );
}

/// Starts the task that fetches the key's response into `fill`; the node's interim responses
/// go to `interim` (the leader's client). The node's request is built here, in the client's
/// task, for the client of `forward` (see [`crate::pipeline::node_request`]).
fn spawn_fill(
    (forward, client): (&Forward, Client<'_>),
    client_headers: HeaderMap,
    key: Key,
    stale: Option<Arc<Entry>>,
    (cfg, rules): (CacheConfig, CacheRules),
    fill: Arc<Fill>,
    interim: Option<crate::pipeline::interim::Interim>,
) {
    let mut node_headers = client_headers.clone();
    let stored = stale.as_ref().map(|entry| entry.headers());
    let road = Road::Fill {
        stale: stored.as_ref(),
    };
    forward.node_headers(&mut node_headers, client, road);
    let task = Forward {
        switch: Arc::clone(&forward.switch),
        cluster: Arc::clone(&forward.cluster),
        // The fill's own connection state: its end must not count against a client's. It
        // names the client that started it (PROXY protocol to the node).
        conn: Arc::new(ConnState::of(forward.conn.peer)),
        class: forward.class,
        method: Method::GET,
        pq: forward.pq.clone(),
        client_version: http::Version::HTTP_11,
        // A fill is a GET for the cache: trailers are not stored.
        te_trailers: false,
        interim,
    };
    // The access log line of the request that started the fill names the node it went to.
    let notes = crate::observe::access_log::current_notes();
    tokio::spawn(async move {
        let fill_key = key.fill_key();
        let headers = (node_headers, client_headers);
        let running = run_fill(&task, headers, &key, stale, &cfg, &rules, &fill);
        crate::observe::access_log::with_notes(notes, running).await;
        if let Some(layer) = &task.switch.cache {
            layer.forget_fill(&fill_key, &fill);
        }
    });
}

/// The fill task: asks a node with `node_headers` (built by [`spawn_fill`]), then publishes
/// its answer to the readers and the store, by the rules the client's `client_headers` ask.
async fn run_fill(
    task: &Forward,
    (node_headers, client_headers): (HeaderMap, HeaderMap),
    key: &Key,
    stale: Option<Arc<Entry>>,
    cfg: &CacheConfig,
    rules: &CacheRules,
    fill: &Fill,
) {
    let layer = task
        .switch
        .cache
        .as_ref()
        .expect("a fill runs with a cache");
    let request_time = SystemTime::now();
    let answer = task
        .dispatch(node_headers, UpstreamBody::Empty, true, None)
        .await;
    let response_time = SystemTime::now();
    // A stored entry may answer for a node that failed or answered 5xx (RFC 5861 §4): when
    // still fresh, or stale with a permission `Cache-Status` names.
    let stale_usable = |status: Option<StatusCode>| {
        let entry = stale.as_ref()?;
        let failed = status.is_none_or(|s| s.is_server_error());
        let stored = entry.headers();
        let allowed = failed
            && rfc::stale_if_error_allows(
                &client_headers,
                &stored,
                &entry.times,
                response_time,
                rules,
            );
        allowed.then(|| {
            let why = rfc::stale_if_error_why(
                &client_headers,
                &stored,
                &entry.times,
                response_time,
                rules,
            );
            let outcome = FillOutcome::StaleOnError {
                why,
                node_status: status.map(|s| s.as_u16()),
            };
            (entry, outcome)
        })
    };
    let resp = match answer {
        Err(own) => {
            if let Some((entry, outcome)) = stale_usable(None) {
                bump(&layer.counters.stale_on_error);
                publish_entry(fill, entry, outcome, response_time);
            } else {
                publish_error(fill, own).await;
            }
            return;
        }
        Ok(resp) => resp,
    };
    if let Some((entry, outcome)) = stale_usable(Some(resp.status())) {
        bump(&layer.counters.stale_on_error);
        publish_entry(fill, entry, outcome, response_time);
        return;
    }
    if resp.status() == StatusCode::NOT_MODIFIED {
        if let Some(entry) = &stale {
            bump(&layer.counters.not_modified);
            let updated = revalidated(
                layer,
                entry,
                resp.headers(),
                request_time,
                response_time,
                rules,
            );
            publish_entry(fill, &updated, FillOutcome::Revalidated, response_time);
            return;
        }
    }
    let stored = stream_and_store(
        layer,
        task,
        fill,
        resp,
        key,
        &client_headers,
        cfg,
        rules,
        (request_time, response_time),
    )
    .await;
    if let (Some(old), false) = (&stale, stored) {
        // The node sent a new response that could not be stored: the old one is obsolete.
        layer.remove(old);
    }
}

/// Merges a `304`'s headers into the stored entry (RFC 9111 §4.3.4). A `304` whose
/// validators do not match the entry updates nothing (the entry is dropped) and the entry
/// answers this one request.
fn revalidated(
    layer: &CacheLayer,
    entry: &Arc<Entry>,
    not_modified: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
    rules: &CacheRules,
) -> Arc<Entry> {
    let mut fresh = not_modified.clone();
    rfc::ensure_date(&mut fresh, response_time);
    if !rfc::not_modified_applies(&entry.headers(), &fresh) {
        layer.remove(entry);
        return Arc::clone(entry);
    }
    let mut headers = entry.headers();
    rfc::merge_not_modified(&mut headers, &owned_headers(&fresh));
    let mut times = entry.times;
    times.refresh(
        entry.status,
        &headers,
        &fresh,
        request_time,
        response_time,
        rules,
    );
    match layer.store.update(entry, headers.clone(), times) {
        Some(updated) => {
            layer.write_through(&updated);
            updated
        }
        None => Arc::new(Entry::new(
            &entry.url,
            &entry.key_extra,
            entry.vary.clone(),
            entry.status,
            headers,
            entry.body.clone(),
            times,
        )),
    }
}

/// Publishes a stored entry as the fill's whole answer.
fn publish_entry(fill: &Fill, entry: &Entry, outcome: FillOutcome, now: SystemTime) {
    let mut headers = entry.headers();
    headers.insert(header::AGE, entry.times.age_header(now));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(entry.body.len()));
    let head = FillHead {
        status: entry.status,
        headers,
        vary: Some(entry.vary.clone()),
        outcome,
        ttl: Some(ttl_of(&entry.times, now)),
    };
    fill.publish(head, entry.body.clone());
}

/// Publishes the switch's own error response (no node answered) to every reader.
async fn publish_error(fill: &Fill, own: Response<ResponseBody>) {
    let (parts, body) = own.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let head = FillHead {
        status: parts.status,
        headers: parts.headers,
        vary: None,
        outcome: FillOutcome::Error,
        ttl: None,
    };
    fill.publish(head, bytes);
}

/// Streams a node's response into the fill and stores it when it is storable and complete.
/// Returns whether it was stored.
#[allow(clippy::too_many_arguments)]
async fn stream_and_store(
    layer: &CacheLayer,
    task: &Forward,
    fill: &Fill,
    resp: Response<ResponseBody>,
    key: &Key,
    client_headers: &HeaderMap,
    cfg: &CacheConfig,
    rules: &CacheRules,
    (request_time, response_time): (SystemTime, SystemTime),
) -> bool {
    let (mut parts, mut body) = resp.into_parts();
    parts
        .headers
        .remove(&crate::pipeline::response::X_CAPSTAN_NODE);
    parts
        .headers
        .remove(&crate::pipeline::response::X_CAPSTAN_CLASS);
    rfc::ensure_date(&mut parts.headers, response_time);
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let verdict = rfc::storability(
        &Method::GET,
        client_headers,
        parts.status,
        &parts.headers,
        rules,
    );
    let vary = rfc::vary_key(&parts.headers, client_headers);
    let shareable = verdict.is_ok() && vary.is_some();
    let mut storing = shareable && declared.is_none_or(|len| len <= cfg.max_object.0);
    if !storing {
        bump(&layer.counters.uncachable);
    }
    let times = StoredTimes::new(
        parts.status,
        &parts.headers,
        request_time,
        response_time,
        rules,
    );
    fill.set_head(
        FillHead {
            status: parts.status,
            headers: parts.headers.clone(),
            vary: vary.clone(),
            outcome: FillOutcome::Fetched {
                stored: storing,
                shareable,
            },
            ttl: storing.then(|| ttl_of(&times, response_time)),
        },
        storing,
    );
    let mut total = 0u64;
    loop {
        if !fill.room().await {
            // Nobody reads and nothing is stored: stop fetching. A reader that joins now finds
            // the fill ended rather than waiting for bytes that will never come.
            fill.finish(Err("the fill was abandoned: no reader left".into()));
            return false;
        }
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    total += data.len() as u64;
                    if storing && total > cfg.max_object.0 {
                        storing = false;
                        fill.stop_keeping();
                    }
                    fill.push(data);
                }
            }
            Some(Err(e)) => {
                fill.finish(Err(format!("the node's response body failed: {e}")));
                return false;
            }
        }
        if body.is_end_stream() {
            break;
        }
    }
    let stored = storing && store(layer, task, fill, &parts, key, vary, times);
    fill.finish(Ok(()));
    stored
}

/// Puts a completely received response into the store.
fn store(
    layer: &CacheLayer,
    task: &Forward,
    fill: &Fill,
    parts: &http::response::Parts,
    key: &Key,
    vary: Option<rfc::VaryKey>,
    times: StoredTimes,
) -> bool {
    let (Some(body), Some(vary)) = (fill.body(), vary) else {
        return false;
    };
    let cost = task.switch.epoch.now_nanos() / 1000;
    let entry = Entry::new(
        &key.url,
        &key.extra,
        vary,
        parts.status,
        owned_headers(&rfc::headers_to_store(&parts.headers)),
        body,
        times,
    );
    let inserted = layer.store.insert(entry, cost.max(1));
    match &inserted.stored {
        Ok(entry) => {
            bump(&layer.counters.stored);
            layer.write_through(entry);
            true
        }
        Err(_) => false,
    }
}

/// After an unsafe method succeeded: drop the target URI and same-host `Location` and
/// `Content-Location` (RFC 9111 §4.4).
pub(crate) fn invalidate(forward: &Forward, host: &str, resp: &Response<ResponseBody>) {
    let Some(layer) = &forward.switch.cache else {
        return;
    };
    let targets = rfc::invalidation_targets(
        &forward.method,
        resp.status(),
        host,
        forward.pq.as_str(),
        resp.headers(),
    );
    for target in targets {
        let url = format!("http://{}{target}", host.to_ascii_lowercase());
        if layer.drop_url(&url) > 0 {
            bump(&layer.counters.invalidations);
        }
    }
}

/// A `PURGE` on a client listener, allowed from `purge_from` networks only; with a `[tier]`,
/// made at every other peer too, and the answer says which acknowledged.
pub(crate) async fn client_purge(
    forward: &Forward,
    parts: &Parts,
    peer: &HeaderValue,
) -> Response<ResponseBody> {
    let cfg = forward
        .cluster
        .config
        .cache
        .as_ref()
        .expect("routed to the cache");
    let allowed = peer
        .to_str()
        .ok()
        .and_then(|p| p.parse::<IpAddr>().ok())
        .is_some_and(|ip| cfg.purge_from.iter().any(|n| n.contains(ip)));
    if !allowed {
        return error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "PURGE is not allowed from this address (see cache.purge_from)",
        );
    }
    let host = request_host(parts).to_ascii_lowercase();
    let url = format!("http://{host}{}", forward.pq.as_str());
    let layer = forward.switch.cache.as_ref().expect("routed to the cache");
    let purged = layer.purge(&url);
    let mut answer = serde_json::json!({ "url": url, "purged": purged });
    let what = crate::pipeline::tier::Invalidation::Purge {
        host,
        pq: forward.pq.as_str().to_string(),
    };
    if let Some(tier) = crate::pipeline::tier::fan_out(&forward.switch, what).await {
        answer["tier"] = serde_json::to_value(tier).unwrap_or_default();
    }
    let mut resp = Response::new(ResponseBody::full(format!("{answer}\n")));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
