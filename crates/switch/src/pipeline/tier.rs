//! A request meets the tier (`[tier]`): the hop header is taken off every request and honoured
//! only from a peer's address ([`admit`]); a peer's own requests — its health check, a PURGE
//! or BAN it fans out — are answered here ([`answer_peer`]); and PURGE and BAN made at this
//! switch are sent on to every other peer ([`fan_out`]). The hop of a cache key to its owner
//! is `crate::pipeline::cache::tier`'s.
//!
//! Nothing here runs without a `[tier]` section: the request path pays one branch.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use capstan_core::text::percent_decode;
use http::header::{self, HeaderName, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body_util::Empty;

use crate::pipeline::node_request::{read_mark, Carried};
use crate::pipeline::response::{error_response, ResponseBody};
use crate::state::switch::{ConnState, Switch};
use crate::state::tier::{Members, Tier, BAN_HEADER, CHECK_MARK, HEALTH_PATH, HOP_HEADER};
use crate::upstream::probe::{Failed, Peers};

/// The response header a peer's PURGE or BAN is acknowledged with.
const ACK_HEADER: &str = "capstan-tier-ack";

/// Marks a request a peer sent this switch (in the request's extensions): it is served here,
/// never sent on to another peer.
#[derive(Clone, Debug)]
pub(crate) struct Hopped {
    /// A peer's health check (the hop header says `check`).
    pub check: bool,
    /// The client the asking peer serves, as its hop mark carries it: the node is told of
    /// that client, not of the peer (see [`crate::pipeline::node_request`]).
    pub client: Option<Carried>,
}

/// Takes the hop header off the request; when it came from a peer's address, marks the
/// request [`Hopped`] (with the client its mark carries) and counts it. From anyone else the
/// header is forged and only removed, and so is the client it names.
pub(crate) fn admit(tier: &Tier, conn: &ConnState, parts: &mut Parts) {
    let Some(mark) = parts.headers.remove(HOP_HEADER) else {
        return;
    };
    let (sender, client) = read_mark(&mark);
    let ip = conn.peer.map(|p| p.client.ip());
    let members = tier.members();
    match ip.and_then(|ip| members.peer_at(ip, Some(sender))) {
        Some(peer) => {
            members.peers[peer]
                .hops_served
                .fetch_add(1, Ordering::Relaxed);
            let check = sender == CHECK_MARK;
            parts.extensions.insert(Hopped { check, client });
        }
        None => {
            tier.forged_hops.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(client = ?ip, "hop header from a client that is no peer: removed");
        }
    }
}

/// The answer to a peer's own request: its health check, a PURGE or BAN it fans out. `None`
/// for everything else (a hop of a cache key is served as any request, without a second hop).
pub(crate) async fn answer_peer(
    switch: &Arc<Switch>,
    parts: &Parts,
) -> Option<Response<ResponseBody>> {
    let hopped = parts.extensions.get::<Hopped>()?;
    if hopped.check && parts.uri.path() == HEALTH_PATH {
        return Some(ok_text("ok\n".into()));
    }
    let purge = parts.method.as_str() == "PURGE";
    let ban = parts.method.as_str() == "BAN";
    if !purge && !ban {
        return None;
    }
    let Some(layer) = &switch.cache else {
        return Some(error_response(
            StatusCode::NOT_FOUND,
            "this peer has no cache",
        ));
    };
    if purge {
        let url = purge_url(&request_host(parts), parts.uri.path_and_query());
        let purged = layer.purge(&url);
        return Some(acknowledged(format!(
            "{{\"url\":{},\"purged\":{purged}}}\n",
            serde_json::Value::String(url)
        )));
    }
    let query = parts.headers.get(BAN_HEADER).and_then(|v| v.to_str().ok());
    let matcher = match ban_matcher(query) {
        Ok(matcher) => matcher,
        Err(e) => return Some(error_response(StatusCode::BAD_REQUEST, &e)),
    };
    // A ban may delete many files of the disk tier: off the event loop, as the admin API's.
    let banning = Arc::clone(switch);
    let banned = tokio::task::spawn_blocking(move || {
        banning.cache.as_ref().map_or(0, |layer| layer.ban(matcher))
    })
    .await
    .unwrap_or(0);
    Some(acknowledged(format!("{{\"banned\":{banned}}}\n")))
}

/// A peer's PURGE or BAN done: the answer carries [`ACK_HEADER`], which a `2xx` from anything
/// that took the request for a client's (a node, a switch that does not list the sender) lacks.
fn acknowledged(body: String) -> Response<ResponseBody> {
    let mut resp = ok_text(body);
    resp.headers_mut().insert(
        HeaderName::from_static(ACK_HEADER),
        HeaderValue::from_static("1"),
    );
    resp
}

fn ok_text(body: String) -> Response<ResponseBody> {
    let mut resp = Response::new(ResponseBody::full(body));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The host a request names: the absolute-form authority, else `Host`.
fn request_host(parts: &Parts) -> String {
    match parts.uri.authority() {
        Some(a) => a.as_str().to_string(),
        None => (parts.headers.get(header::HOST))
            .and_then(|h| h.to_str().ok())
            .unwrap_or("")
            .to_string(),
    }
}

/// The URL a PURGE names, as the cache keys it (`http://host/path?query`, host lower-cased).
pub(crate) fn purge_url(host: &str, pq: Option<&http::uri::PathAndQuery>) -> String {
    let pq = pq.map_or("/", |pq| pq.as_str());
    format!("http://{}{pq}", host.to_ascii_lowercase())
}

/// Reads one `name=value` of a query string, percent-decoded.
pub(crate) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| percent_decode(v))
    })
}

/// A BAN's test of a URL.
pub(crate) type BanMatcher = Box<dyn Fn(&str) -> bool + Send>;

/// What a BAN matches: `prefix=URL-PREFIX` or `regex=PATTERN` (a query string, percent-encoded),
/// or why it is wrong.
pub(crate) fn ban_matcher(query: Option<&str>) -> Result<BanMatcher, String> {
    match (query_param(query, "prefix"), query_param(query, "regex")) {
        (Some(prefix), None) => Ok(Box::new(move |url: &str| url.starts_with(&prefix))),
        (None, Some(re)) => match regex::Regex::new(&re) {
            Ok(re) => Ok(Box::new(move |url: &str| re.is_match(url))),
            Err(e) => {
                let first = e.to_string();
                let first = first.lines().last().unwrap_or("").trim();
                Err(format!("bad regex `{re}`: {first}"))
            }
        },
        _ => Err("give exactly one of ?prefix=URL-PREFIX or ?regex=PATTERN".into()),
    }
}

/// An invalidation made at this switch, to be made at every other peer too.
pub(crate) enum Invalidation {
    /// `PURGE` of one URL: the host and the path and query.
    Purge { host: String, pq: String },
    /// `BAN` by a matcher's query string (`prefix=…` or `regex=…`, percent-encoded).
    Ban { query: String },
}

/// What one peer said to a fanned-out invalidation.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct PeerAnswer {
    pub peer: String,
    /// `ok`, or why not.
    pub result: String,
}

/// Which peers acknowledged an invalidation and which did not.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub(crate) struct FanOut {
    pub acknowledged: Vec<String>,
    pub failed: Vec<PeerAnswer>,
}

/// Sends an invalidation to every other peer (up or not: a peer that is down and comes back
/// would otherwise serve what was purged), marked as a hop so none sends it on; waits for
/// their answers at most `hop_timeout` each, all at once.
pub(crate) async fn fan_out(switch: &Switch, what: Invalidation) -> Option<FanOut> {
    let tier = switch.tier.as_ref()?;
    let own = tier.own_address.to_string();
    let members = tier.members();
    let mut sent = tokio::task::JoinSet::new();
    for (id, peer) in members.peers.iter().enumerate() {
        if id == members.own {
            continue;
        }
        peer.invalidations_sent.fetch_add(1, Ordering::Relaxed);
        let req = match invalidation_request(peer.address, &own, &what) {
            Ok(req) => req,
            Err(e) => return Some(refused_by_all(&members, &e)),
        };
        let (client, timeout) = (Peers::shared(tier), tier.config.hop_timeout);
        sent.spawn(async move { (id, ask(client, req, timeout).await) });
    }
    let mut answers = FanOut::default();
    while let Some(Ok((id, result))) = sent.join_next().await {
        let peer = &members.peers[id];
        match result {
            Ok(()) => answers.acknowledged.push(peer.address.to_string()),
            Err(e) => {
                peer.invalidation_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer = %peer.address, "invalidation not acknowledged: {e}");
                answers.failed.push(PeerAnswer {
                    peer: peer.address.to_string(),
                    result: e,
                });
            }
        }
    }
    answers.acknowledged.sort();
    answers.failed.sort_by(|a, b| a.peer.cmp(&b.peer));
    Some(answers)
}

fn refused_by_all(members: &Members, e: &str) -> FanOut {
    FanOut {
        acknowledged: Vec::new(),
        failed: (members.peers.iter().enumerate())
            .filter(|(id, _)| *id != members.own)
            .map(|(_, p)| PeerAnswer {
                peer: p.address.to_string(),
                result: e.to_string(),
            })
            .collect(),
    }
}

fn invalidation_request(
    peer: SocketAddr,
    own: &str,
    what: &Invalidation,
) -> Result<Request<Empty<Bytes>>, String> {
    let (method, host, pq, ban) = match what {
        Invalidation::Purge { host, pq } => ("PURGE", host.as_str(), pq.as_str(), None),
        Invalidation::Ban { query } => ("BAN", "", "/", Some(query.as_str())),
    };
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).expect("a token"))
        .uri(format!("http://{peer}{pq}"))
        .header(HeaderName::from_static(HOP_HEADER), own);
    if !host.is_empty() {
        req = req.header(header::HOST, host);
    }
    if let Some(query) = ban {
        req = req.header(HeaderName::from_static(BAN_HEADER), query);
    }
    req.body(Empty::new())
        .map_err(|e| format!("cannot send it: {e}"))
}

/// One fanned-out request: acknowledged by a `2xx`.
async fn ask(client: Peers, req: Request<Empty<Bytes>>, timeout: Duration) -> Result<(), String> {
    match client.send(req, timeout).await {
        Err(Failed::TimedOut) => Err(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        )),
        Err(Failed::Error(e)) => Err(e),
        Ok(resp) if resp.status().is_success() && resp.headers().contains_key(ACK_HEADER) => Ok(()),
        Ok(resp) if resp.status().is_success() => Err(format!(
            "status {} without acknowledgement (does the peer list this switch in its tier.peers?)",
            resp.status().as_u16()
        )),
        Ok(resp) => Err(format!("status {}", resp.status().as_u16())),
    }
}

/// The deepest cause of an error (hyper's outer ones say only "client error").
pub(crate) fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ban_matchers_read_prefix_or_regex() {
        let m = ban_matcher(Some("prefix=http%3A%2F%2Fsite%2Fimg%2F")).unwrap();
        assert!(m("http://site/img/a.png"));
        assert!(!m("http://site/css/a.css"));
        let m = ban_matcher(Some("regex=%5C.png%24")).unwrap();
        assert!(m("http://site/a.png") && !m("http://site/a.pngx"));
        assert!(ban_matcher(Some("regex=(")).is_err_and(|e| e.contains("bad regex")));
        assert!(ban_matcher(None).is_err());
        assert!(ban_matcher(Some("prefix=a&regex=b")).is_err());
    }

    #[test]
    fn purge_urls_are_keyed_as_the_cache_keys_them() {
        let pq: http::uri::PathAndQuery = "/a?b=1".parse().unwrap();
        assert_eq!(purge_url("Site:8080", Some(&pq)), "http://site:8080/a?b=1");
        assert_eq!(purge_url("site", None), "http://site/");
    }
}
