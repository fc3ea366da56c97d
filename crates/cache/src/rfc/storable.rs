//! May this response be stored? RFC 9111 §3 (storing), §3.5 (`Authorization`), §3.1 (which
//! fields to keep), for a shared cache in front of its own origin.
//!
//! Deliberate choices beyond the RFC's minimum:
//! - only `GET` responses are stored; a `HEAD` is answered from a stored `GET`;
//! - `206` is never stored (no partial-content assembly) and `304` is not a response to store
//!   but an update of one ([`super::validate::merge_not_modified`]);
//! - `Set-Cookie` responses are refused unless [`CacheRules::store_set_cookie`], or the origin
//!   marked the field `private="set-cookie"` / `no-cache="set-cookie"` so it is removed before
//!   storing;
//! - `Vary: *` is refused: such a response can never be matched by a later request.
//!
//! The response directives are those of its first valid targeted field
//! ([`CacheRules::targeted_fields`], RFC 9213 §2.2), else its `Cache-Control`; with a targeted
//! field, `Expires` does not count as explicit freshness either. `private` (§5.2.2.7): a shared
//! cache never stores a response with the unqualified directive, whatever else it carries —
//! `s-maxage`, `public`, or `private` on another `Cache-Control` line (the lines are one list).
//! The qualified `private="f"` lets the rest be stored with `f` removed
//! ([`headers_to_store`]); a qualified form in a targeted field is read as unqualified.

use http::header::{
    AUTHORIZATION, CONNECTION, SET_COOKIE, TE, TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use http::{HeaderMap, HeaderName, Method, StatusCode};

use super::cache_control::{CacheControl, FieldScope};
use super::fields::list_items;
use super::rules::CacheRules;
use super::targeted::response_directives;

/// Why a response is not stored. [`NotStorable::reason`] gives a token for an RFC 9211
/// `Cache-Status: …; detail=` parameter and for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NotStorable {
    /// The request method is not `GET`.
    #[error("only GET responses are stored")]
    Method,
    /// The status is interim, not one we understand, or a `304`.
    #[error("status code not storable")]
    Status,
    /// `206 Partial Content`: partial responses are not stored.
    #[error("partial content is not stored")]
    Partial,
    /// The request carried `Cache-Control: no-store`.
    #[error("request no-store")]
    RequestNoStore,
    /// The response carried `Cache-Control: no-store`.
    #[error("response no-store")]
    NoStore,
    /// The response carried an unqualified `Cache-Control: private`.
    #[error("response private")]
    Private,
    /// The request had `Authorization` and the response did not allow sharing it.
    #[error("authorized request without public, s-maxage or must-revalidate")]
    Authorization,
    /// The response sets a cookie and the rules do not share those.
    #[error("response sets a cookie")]
    SetCookie,
    /// The response has `Vary: *`, which no later request can match.
    #[error("Vary: * never matches")]
    VaryStar,
    /// Neither explicit freshness, `public`, nor a heuristically cachable status.
    #[error("no explicit freshness and status not heuristically cachable")]
    NoFreshness,
}

impl NotStorable {
    /// A short sf-token naming the reason, e.g. `no-store`, for `Cache-Status` details.
    pub fn reason(&self) -> &'static str {
        match self {
            NotStorable::Method => "method",
            NotStorable::Status => "status",
            NotStorable::Partial => "partial",
            NotStorable::RequestNoStore => "request-no-store",
            NotStorable::NoStore => "no-store",
            NotStorable::Private => "private",
            NotStorable::Authorization => "authorization",
            NotStorable::SetCookie => "set-cookie",
            NotStorable::VaryStar => "vary-star",
            NotStorable::NoFreshness => "no-freshness",
        }
    }
}

/// Decides whether a response may be stored, per RFC 9111 §3 for a shared cache, with the
/// response directives of [`response_directives`] (a targeted field, else `Cache-Control`).
///
/// `Ok` does not mean the response will be answered without validation: one with no
/// freshness (no explicit lifetime and no heuristic basis) is stored with a zero lifetime and
/// [`super::decide::decide`] revalidates it on every use.
///
/// `method`/`req` are the request that produced the response; `status`/`resp` the final
/// response. The checks run in a fixed order, so the reason reported is the first that applies.
///
/// `Ok` assumes the caller stores [`headers_to_store`]`(resp)`, not `resp` itself: a qualified
/// `private="f"` or `no-cache="f"` is accepted only because that strips `f`.
pub fn storability(
    method: &Method,
    req: &HeaderMap,
    status: StatusCode,
    resp: &HeaderMap,
    rules: &CacheRules,
) -> Result<(), NotStorable> {
    if method != Method::GET {
        return Err(NotStorable::Method);
    }
    if status == StatusCode::PARTIAL_CONTENT {
        return Err(NotStorable::Partial);
    }
    if !status_understood(status) || status == StatusCode::NOT_MODIFIED {
        return Err(NotStorable::Status);
    }
    if CacheControl::parse(req).no_store {
        return Err(NotStorable::RequestNoStore);
    }
    let (cc, targeted) = response_directives(resp, &rules.targeted_fields);
    // §5.2.2.3: must-understand overrides no-store when the status is understood, which it is
    // by now.
    if cc.no_store && !cc.must_understand {
        return Err(NotStorable::NoStore);
    }
    if cc.private == Some(FieldScope::All) {
        return Err(NotStorable::Private);
    }
    if req.contains_key(AUTHORIZATION) && !authorized_sharing_allowed(&cc) {
        return Err(NotStorable::Authorization);
    }
    if resp.contains_key(SET_COOKIE) && !rules.store_set_cookie && !stripped(&cc, "set-cookie") {
        return Err(NotStorable::SetCookie);
    }
    if vary_star(resp) {
        return Err(NotStorable::VaryStar);
    }
    let expires = targeted.is_none() && resp.contains_key(http::header::EXPIRES);
    let explicit = cc.has_explicit_lifetime() || expires;
    if explicit || cc.public || is_heuristically_cacheable(status) {
        Ok(())
    } else {
        Err(NotStorable::NoFreshness)
    }
}

/// RFC 9111 §3.5: a shared cache may reuse a response to an authorized request only when the
/// origin said so with `public`, `s-maxage` or `must-revalidate`.
pub(crate) fn authorized_sharing_allowed(cc: &CacheControl) -> bool {
    cc.public || cc.s_maxage.is_some() || cc.must_revalidate
}

/// Whether a field named in a qualified `private` / `no-cache` is removed before storing.
fn stripped(cc: &CacheControl, name: &str) -> bool {
    let named = |scope: &Option<FieldScope>| {
        matches!(scope, Some(FieldScope::Fields(_)))
            && scope.as_ref().is_some_and(|s| s.covers(name))
    };
    named(&cc.private) || named(&cc.no_cache)
}

fn vary_star(resp: &HeaderMap) -> bool {
    list_items(resp, http::header::VARY)
        .iter()
        .any(|item| *item == b"*")
}

/// Status codes defined as heuristically cacheable (RFC 9110 §15.1): a response with one of
/// these may be stored and given a heuristic lifetime without explicit freshness.
pub fn is_heuristically_cacheable(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200 | 203 | 204 | 206 | 300 | 301 | 308 | 404 | 405 | 410 | 414 | 501
    )
}

/// Final status codes whose semantics this cache knows (those defined by RFC 9110). RFC 9111 §3
/// forbids storing a response whose status the cache does not understand.
pub fn status_understood(status: StatusCode) -> bool {
    matches!(
        status.as_u16(),
        200..=206 | 300..=305 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505
    )
}

/// The response fields worth keeping in the store (RFC 9111 §3.1): without the connection-
/// specific fields (`Connection` and the fields it lists, `Keep-Alive`, `Proxy-Connection`,
/// `TE`, `Trailer`, `Transfer-Encoding`, `Upgrade` — the stored body is unframed, so the caller
/// re-frames it with `Content-Length`), and without the fields a qualified `private` (shared
/// caches must not store them) or `no-cache` (not to be reused without revalidation) names.
pub fn headers_to_store(resp: &HeaderMap) -> HeaderMap {
    let cc = CacheControl::parse(resp);
    let connection_listed: Vec<String> = list_items(resp, CONNECTION)
        .iter()
        .filter_map(|n| std::str::from_utf8(n).ok())
        .map(str::to_ascii_lowercase)
        .collect();
    let drop = |name: &HeaderName| {
        let n = name.as_str();
        is_hop_by_hop(name) || connection_listed.iter().any(|l| l == n) || stripped(&cc, n)
    };
    let mut out = HeaderMap::with_capacity(resp.len());
    for (name, value) in resp {
        if !drop(name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// Fields that describe one connection, never the stored representation.
pub(crate) fn is_hop_by_hop(name: &HeaderName) -> bool {
    name == CONNECTION
        || name == TE
        || name == TRAILER
        || name == TRANSFER_ENCODING
        || name == UPGRADE
        || name.as_str() == "keep-alive"
        || name.as_str() == "proxy-connection"
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    }

    fn check(
        method: Method,
        req: &[(&'static str, &'static str)],
        status: u16,
        resp: &[(&'static str, &'static str)],
    ) -> Result<(), NotStorable> {
        storability(
            &method,
            &headers(req),
            StatusCode::from_u16(status).unwrap(),
            &headers(resp),
            &CacheRules::default(),
        )
    }

    #[test]
    fn only_get_is_stored() {
        // RFC 9111 §3: the method must be understood and cacheable; we store GET only.
        assert_eq!(check(Method::GET, &[], 200, &[]), Ok(()));
        assert_eq!(check(Method::HEAD, &[], 200, &[]), Err(NotStorable::Method));
        assert_eq!(
            check(Method::POST, &[], 200, &[("cache-control", "max-age=60")]),
            Err(NotStorable::Method)
        );
    }

    #[test]
    fn partial_and_not_modified_and_unknown_status_refused() {
        // RFC 9111 §3: final status understood; §3.3 partials are not stored here.
        assert_eq!(check(Method::GET, &[], 206, &[]), Err(NotStorable::Partial));
        assert_eq!(check(Method::GET, &[], 304, &[]), Err(NotStorable::Status));
        assert_eq!(
            check(Method::GET, &[], 299, &[("cache-control", "max-age=9")]),
            Err(NotStorable::Status)
        );
        assert_eq!(check(Method::GET, &[], 103, &[]), Err(NotStorable::Status));
    }

    #[test]
    fn no_store_in_request_or_response_refused() {
        // RFC 9111 §3, §5.2.1.5, §5.2.2.5
        let ns = [("cache-control", "no-store")];
        assert_eq!(
            check(Method::GET, &ns, 200, &[]),
            Err(NotStorable::RequestNoStore)
        );
        assert_eq!(check(Method::GET, &[], 200, &ns), Err(NotStorable::NoStore));
        let mu = [("cache-control", "no-store, must-understand")];
        assert_eq!(
            check(Method::GET, &[], 200, &mu),
            Ok(()),
            "§5.2.2.3 must-understand"
        );
    }

    #[test]
    fn private_refused_by_shared_cache() {
        // RFC 9111 §5.2.2.7
        let p = [("cache-control", "private, max-age=60")];
        assert_eq!(check(Method::GET, &[], 200, &p), Err(NotStorable::Private));
        let q = [("cache-control", "private=\"x-user\", max-age=60")];
        assert_eq!(
            check(Method::GET, &[], 200, &q),
            Ok(()),
            "qualified: strip the field"
        );
    }

    #[test]
    fn authorization_alone_not_stored() {
        // RFC 9111 §3.5
        let auth = [("authorization", "Basic eDp5")];
        assert_eq!(
            check(Method::GET, &auth, 200, &[("cache-control", "max-age=60")]),
            Err(NotStorable::Authorization)
        );
    }

    #[test]
    fn authorization_with_public_or_s_maxage_or_must_revalidate_stored() {
        // RFC 9111 §3.5
        let auth = [("authorization", "Bearer t")];
        for cc in ["public", "s-maxage=10", "max-age=5, must-revalidate"] {
            assert_eq!(
                check(Method::GET, &auth, 200, &[("cache-control", cc)]),
                Ok(()),
                "{cc}"
            );
        }
    }

    #[test]
    fn set_cookie_refused_unless_rules_allow_or_field_stripped() {
        let resp = headers(&[("set-cookie", "a=b"), ("cache-control", "max-age=60")]);
        let get = Method::GET;
        let req = HeaderMap::new();
        let ok = StatusCode::OK;
        let rules = CacheRules::default();
        assert_eq!(
            storability(&get, &req, ok, &resp, &rules),
            Err(NotStorable::SetCookie)
        );
        let allow = CacheRules {
            store_set_cookie: true,
            ..CacheRules::default()
        };
        assert_eq!(storability(&get, &req, ok, &resp, &allow), Ok(()));
        let named = headers(&[
            ("set-cookie", "a=b"),
            ("cache-control", "max-age=60, no-cache=\"Set-Cookie\""),
        ]);
        assert_eq!(storability(&get, &req, ok, &named, &rules), Ok(()));
        assert!(!headers_to_store(&named).contains_key(SET_COOKIE));
    }

    #[test]
    fn vary_star_refused() {
        // RFC 9111 §4.1: Vary: * always fails to match.
        let v = [
            ("vary", "accept-encoding, *"),
            ("cache-control", "max-age=60"),
        ];
        assert_eq!(check(Method::GET, &[], 200, &v), Err(NotStorable::VaryStar));
    }

    #[test]
    fn needs_explicit_freshness_or_heuristic_status() {
        // RFC 9111 §3: Expires, max-age, s-maxage, public, or heuristically cacheable status.
        assert_eq!(
            check(Method::GET, &[], 302, &[]),
            Err(NotStorable::NoFreshness)
        );
        assert_eq!(
            check(Method::GET, &[], 307, &[("etag", "\"v1\"")]),
            Err(NotStorable::NoFreshness),
            "a validator alone does not make a 307 storable"
        );
        for resp in [
            ("cache-control", "max-age=5"),
            ("cache-control", "s-maxage=5"),
            ("cache-control", "public"),
            ("expires", "Thu, 01 Jan 2099 00:00:00 GMT"),
        ] {
            assert_eq!(check(Method::GET, &[], 302, &[resp]), Ok(()), "{resp:?}");
        }
        for status in [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501] {
            assert_eq!(check(Method::GET, &[], status, &[]), Ok(()), "{status}");
        }
        assert_eq!(
            check(Method::GET, &[], 500, &[]),
            Err(NotStorable::NoFreshness)
        );
    }

    #[test]
    fn headers_to_store_drops_hop_by_hop_and_connection_listed() {
        // RFC 9111 §3.1, RFC 9110 §7.6.1
        let resp = headers(&[
            ("connection", "keep-alive, x-trace"),
            ("keep-alive", "timeout=5"),
            ("x-trace", "abc"),
            ("transfer-encoding", "chunked"),
            ("cache-control", "private=\"x-user\""),
            ("x-user", "alice"),
            ("content-type", "text/html"),
        ]);
        let kept = headers_to_store(&resp);
        let names: Vec<&str> = kept.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["cache-control", "content-type"]);
    }

    #[test]
    fn reasons_are_sf_tokens() {
        // RFC 9211 §2.8: detail is a token or string; ours are tokens.
        let all = [
            NotStorable::Method,
            NotStorable::Status,
            NotStorable::Partial,
            NotStorable::RequestNoStore,
            NotStorable::NoStore,
            NotStorable::Private,
            NotStorable::Authorization,
            NotStorable::SetCookie,
            NotStorable::VaryStar,
            NotStorable::NoFreshness,
        ];
        for r in all {
            let s = r.reason();
            assert!(s.starts_with(|c: char| c.is_ascii_alphabetic()));
            assert!(
                s.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{s}"
            );
        }
    }

    #[test]
    fn private_wins_over_s_maxage_and_public() {
        // RFC 9111 §5.2.2.7, §5.2.2.10: s-maxage does not make a private response shareable.
        for cc in [
            "s-maxage=60, private",
            "private, s-maxage=60",
            "public, private, max-age=60",
            "s-maxage=60, private, must-revalidate",
        ] {
            assert_eq!(
                check(Method::GET, &[], 200, &[("cache-control", cc)]),
                Err(NotStorable::Private),
                "{cc}"
            );
        }
        let auth = [("authorization", "Bearer t")];
        assert_eq!(
            check(
                Method::GET,
                &auth,
                200,
                &[("cache-control", "s-maxage=60, private")]
            ),
            Err(NotStorable::Private),
            "private checked before the §3.5 exception"
        );
    }

    #[test]
    fn private_on_a_second_cache_control_line_counts() {
        // RFC 9110 §5.3: field lines combine into one list.
        let two = [
            ("cache-control", "s-maxage=60"),
            ("cache-control", "private"),
        ];
        assert_eq!(
            check(Method::GET, &[], 200, &two),
            Err(NotStorable::Private)
        );
        let mixed = [
            ("cache-control", "private=\"x-user\", max-age=60"),
            ("cache-control", "PRIVATE"),
        ];
        assert_eq!(
            check(Method::GET, &[], 200, &mixed),
            Err(NotStorable::Private),
            "the unqualified form wins over a qualified one"
        );
        let empty_list = [("cache-control", "private=\"\", max-age=60")];
        assert_eq!(
            check(Method::GET, &[], 200, &empty_list),
            Err(NotStorable::Private),
            "an empty field list reads as the whole response"
        );
    }

    #[test]
    fn qualified_private_strips_named_fields_across_lines() {
        // RFC 9111 §5.2.2.7: a shared cache MUST NOT store the named fields; the rest may be.
        let resp = headers(&[
            ("cache-control", "private=\"x-user\""),
            (
                "cache-control",
                "max-age=60, private=\"X-Session, x-other\"",
            ),
            ("x-user", "a"),
            ("x-session", "b"),
            ("content-type", "text/plain"),
        ]);
        assert_eq!(
            storability(
                &Method::GET,
                &HeaderMap::new(),
                StatusCode::OK,
                &resp,
                &CacheRules::default()
            ),
            Ok(())
        );
        let kept = headers_to_store(&resp);
        assert!(!kept.contains_key("x-user") && !kept.contains_key("x-session"));
        assert!(kept.contains_key("content-type"));
        assert_eq!(
            kept.get_all("cache-control").iter().count(),
            2,
            "Cache-Control kept"
        );
    }

    #[test]
    fn no_freshness_information_is_stored_for_heuristic_statuses() {
        // RFC 9111 §3, §4.2.2: storable, with a zero lifetime (see decide's tests).
        for status in [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501] {
            assert_eq!(check(Method::GET, &[], status, &[]), Ok(()), "{status}");
        }
        for status in [302, 303, 307, 500, 502, 503] {
            assert_eq!(
                check(Method::GET, &[], status, &[]),
                Err(NotStorable::NoFreshness),
                "{status}"
            );
        }
    }

    #[test]
    fn targeted_no_store_beside_cache_control_max_age_not_stored() {
        // RFC 9213 §2.2: CDN-Cache-Control decides; Cache-Control is ignored for this cache.
        let resp = [
            ("cache-control", "max-age=60"),
            ("cdn-cache-control", "no-store"),
        ];
        assert_eq!(
            check(Method::GET, &[], 200, &resp),
            Err(NotStorable::NoStore)
        );
        let private = [
            ("cache-control", "max-age=60"),
            ("cdn-cache-control", "private=\"x-user\""),
        ];
        assert_eq!(
            check(Method::GET, &[], 200, &private),
            Err(NotStorable::Private),
            "qualified private in a targeted field: not stored at all"
        );
    }

    #[test]
    fn targeted_field_allows_what_cache_control_refuses() {
        // RFC 9213 §2.2: Cache-Control aimed at browsers does not bind a CDN-role cache.
        for cc in ["no-store", "private", "no-store, private"] {
            let resp = [("cache-control", cc), ("cdn-cache-control", "max-age=60")];
            assert_eq!(check(Method::GET, &[], 200, &resp), Ok(()), "{cc}");
            assert!(
                headers_to_store(&headers(&resp)).contains_key("cache-control"),
                "Cache-Control is kept untouched for downstream"
            );
        }
        let invalid = [
            ("cache-control", "no-store"),
            ("cdn-cache-control", "max-age=60, "),
        ];
        assert_eq!(
            check(Method::GET, &[], 200, &invalid),
            Err(NotStorable::NoStore),
            "an invalid targeted field is ignored"
        );
        let expires_only = [
            ("expires", "Thu, 01 Jan 2099 00:00:00 GMT"),
            ("cdn-cache-control", "must-revalidate"),
        ];
        assert_eq!(
            check(Method::GET, &[], 302, &expires_only),
            Err(NotStorable::NoFreshness),
            "Expires is ignored beside a valid targeted field"
        );
    }

    #[test]
    fn targeted_field_names_come_from_the_rules() {
        // RFC 9213 §2.2: only fields on the target list change behaviour.
        let resp = headers(&[
            ("cache-control", "max-age=60"),
            ("capstan-cdn-cache-control", "no-store"),
        ]);
        let get = Method::GET;
        let req = HeaderMap::new();
        let ok = StatusCode::OK;
        assert_eq!(
            storability(&get, &req, ok, &resp, &CacheRules::default()),
            Ok(())
        );
        let own = CacheRules {
            targeted_fields: vec![
                super::super::rules::targeted_field("Capstan-CDN-Cache-Control").unwrap(),
                super::super::rules::targeted_field("CDN-Cache-Control").unwrap(),
            ],
            ..CacheRules::default()
        };
        assert_eq!(
            storability(&get, &req, ok, &resp, &own),
            Err(NotStorable::NoStore)
        );
    }
}
