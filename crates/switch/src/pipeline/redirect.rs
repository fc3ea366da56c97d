//! URL redirection (SWEB, §3): for the classes `[redirect]` names, the switch answers with a
//! redirect to the picked node's public address instead of proxying, so the node serves the
//! client directly. The redirected URL carries a marker query parameter; a request carrying it is
//! forwarded, never redirected a second time (SWEB's rule against a request bouncing between
//! brokers).

use std::sync::atomic::Ordering;

use capstan_core::ClassId;
use http::header::{HeaderValue, CACHE_CONTROL, LOCATION};
use http::uri::PathAndQuery;
use http::{Response, StatusCode};

use crate::config::Redirect;
use crate::pipeline::response::error_response;
use crate::pipeline::response::ResponseBody;
use crate::state::cluster::{Cluster, LiveView};
use crate::state::switch::Switch;

/// The redirect for this request, or `None` when it is to be forwarded.
pub(crate) fn answer(
    switch: &Switch,
    cluster: &Cluster,
    class: ClassId,
    pq: &PathAndQuery,
) -> Option<Response<ResponseBody>> {
    let redirect = cluster.config.redirect.as_ref()?;
    if !applies(redirect, cluster, class) || is_marked(pq, &redirect.mark) {
        return None;
    }
    let key = crate::state::request::key_of(pq, cluster.config.upstream.key);
    let info = crate::state::request::request_info(class, key);
    let view = LiveView {
        now_nanos: switch.epoch.now_nanos(),
        nodes: &cluster.nodes,
        exclude: None,
        weights: cluster.needs.weights,
        // A redirected client goes to the node itself: no admission gate stands in its way.
        hide: crate::state::cluster::Hide::Nothing,
        tier: switch.tier.as_ref(),
    };
    let Some(node) = cluster
        .policy
        .pick(&info, &view)
        .and_then(|id| cluster.nodes.get(id))
    else {
        return Some(error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "no node available (all are down or backed off)",
        ));
    };
    let base = node.config.public_url.as_deref()?;
    let location = marked_location(base, pq, &redirect.mark);
    let Ok(location) = HeaderValue::from_str(&location) else {
        return None;
    };
    node.redirects.fetch_add(1, Ordering::Relaxed);
    node.class_placed[class].fetch_add(1, Ordering::Relaxed);
    let status = StatusCode::from_u16(redirect.status).unwrap_or(StatusCode::FOUND);
    let mut resp = Response::new(ResponseBody::Full(None));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(LOCATION, location);
    // The choice depends on load at this moment: no cache may keep it.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    crate::pipeline::response::debug_headers(headers, cluster, class, Some(&node.name_header));
    Some(resp)
}

fn applies(redirect: &Redirect, cluster: &Cluster, class: ClassId) -> bool {
    match &redirect.classes {
        None => true,
        Some(names) => cluster
            .classifier
            .classes()
            .get(class)
            .is_some_and(|c| names.contains(&c.name)),
    }
}

/// Whether the query has the marker parameter (`mark` or `mark=…`).
fn is_marked(pq: &PathAndQuery, mark: &str) -> bool {
    pq.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| kv.split_once('=').map_or(kv, |(k, _)| k) == mark)
    })
}

/// `base` + the request's path and query + the marker.
fn marked_location(base: &str, pq: &PathAndQuery, mark: &str) -> String {
    let sep = if pq.query().is_some() { '&' } else { '?' };
    format!("{base}{}{sep}{mark}=1", pq.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_found_only_as_a_whole_parameter() {
        let pq = |s: &'static str| PathAndQuery::from_static(s);
        assert!(is_marked(
            &pq("/a?capstan-redirected=1"),
            "capstan-redirected"
        ));
        assert!(is_marked(
            &pq("/a?x=2&capstan-redirected"),
            "capstan-redirected"
        ));
        assert!(!is_marked(
            &pq("/a?x=capstan-redirected"),
            "capstan-redirected"
        ));
        assert!(!is_marked(&pq("/a"), "capstan-redirected"));
    }

    #[test]
    fn the_location_keeps_path_and_query_and_adds_the_marker() {
        let pq = PathAndQuery::from_static("/cgi-bin/x.cgi?file=a");
        assert_eq!(
            marked_location("http://n1:8080", &pq, "m"),
            "http://n1:8080/cgi-bin/x.cgi?file=a&m=1"
        );
        let pq = PathAndQuery::from_static("/big.html");
        assert_eq!(
            marked_location("http://n1", &pq, "m"),
            "http://n1/big.html?m=1"
        );
    }
}
