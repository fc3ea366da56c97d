//! Validation in both directions: the cache asking the origin whether its copy is still good
//! (RFC 9111 §4.3.1, §4.3.3, §4.3.4), and the cache answering a client's own conditional
//! request from a stored response (RFC 9110 §13.2.2, RFC 9111 §4.3.2).

use http::header::{
    CACHE_CONTROL, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_LOCATION, CONTENT_RANGE, DATE, ETAG,
    EXPIRES, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_UNMODIFIED_SINCE, LAST_MODIFIED, VARY,
};
use http::{HeaderMap, HeaderName, Method};

use super::fields::{etag_list, header_date, list_items, single_date, stored_etag, EntityTag};
use super::storable::is_hop_by_hop;

/// The conditional fields for revalidating a stored response with the origin (RFC 9111
/// §4.3.1): `If-None-Match` from its `ETag`, `If-Modified-Since` from a valid `Last-Modified`.
/// Empty when the response has no validator: the caller then does a plain fetch.
pub fn revalidation_headers(stored_resp: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::new();
    if let Some(etag) = stored_resp.get(ETAG) {
        if EntityTag::parse(etag.as_bytes()).is_some() {
            out.insert(IF_NONE_MATCH, etag.clone());
        }
    }
    if let Some(lm) = stored_resp.get(LAST_MODIFIED) {
        if header_date(stored_resp, LAST_MODIFIED).is_some() {
            out.insert(IF_MODIFIED_SINCE, lm.clone());
        }
    }
    out
}

/// Whether a `304` from the origin is about this stored response (RFC 9111 §4.3.4): its `ETag`
/// must match the stored one (weak comparison), or failing an `ETag` its `Last-Modified` must
/// equal the stored one; a 304 with neither validator applies. When false, the caller discards
/// the 304 and fetches the representation unconditionally.
pub fn not_modified_applies(stored_resp: &HeaderMap, not_modified: &HeaderMap) -> bool {
    if let Some(new) = not_modified.get(ETAG) {
        return match (EntityTag::parse(new.as_bytes()), stored_etag(stored_resp)) {
            (Some(new), Some(old)) => new.weak_eq(&old),
            _ => false,
        };
    }
    if not_modified.contains_key(LAST_MODIFIED) {
        return match (
            header_date(not_modified, LAST_MODIFIED),
            header_date(stored_resp, LAST_MODIFIED),
        ) {
            (Some(new), Some(old)) => new == old,
            _ => false,
        };
    }
    true
}

/// Fields a 304 must not change in the stored response: the stored body's length, framing and
/// coding were fixed when it was stored (RFC 9111 §3.2: `Content-Length`, fields the cache's
/// stored form depends on, fields processed and removed such as `Content-Range`).
fn keeps_stored(name: &HeaderName) -> bool {
    name == CONTENT_LENGTH
        || name == CONTENT_RANGE
        || name == CONTENT_ENCODING
        || is_hop_by_hop(name)
}

/// Updates a stored response's fields from a `304 Not Modified` (RFC 9111 §3.2, §4.3.4): each
/// field in the 304 replaces all stored lines of that field, except the framing and coding
/// fields (`Content-Length`, `Content-Range`, `Content-Encoding`, `Transfer-Encoding` and other
/// connection fields, and fields the 304's `Connection` lists) which must keep describing the
/// stored body. The stored `Age` is dropped unless the 304 carries one: age is tracked by
/// [`super::freshness::StoredTimes`], and a leftover `Age` would be counted twice.
pub fn merge_not_modified(stored: &mut HeaderMap, fresh_304: &HeaderMap) {
    let connection_listed: Vec<&[u8]> = list_items(fresh_304, http::header::CONNECTION);
    stored.remove(http::header::AGE);
    for name in fresh_304.keys() {
        if keeps_stored(name)
            || connection_listed
                .iter()
                .any(|l| l.eq_ignore_ascii_case(name.as_str().as_bytes()))
        {
            continue;
        }
        stored.remove(name);
        for value in fresh_304.get_all(name) {
            stored.append(name.clone(), value.clone());
        }
    }
}

/// The outcome of a client's preconditions against a stored response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conditional {
    /// No precondition applies or all passed: serve the stored response (or range).
    None,
    /// Answer `304 Not Modified` with [`not_modified_headers`].
    NotModified,
    /// Answer `412 Precondition Failed`.
    PreconditionFailed,
}

/// Evaluates a client's preconditions against a stored response in RFC 9110 §13.2.2 order:
///
/// 1. `If-Match` (strong comparison; `*` matches) false → 412;
/// 2. without `If-Match`, a stored `Last-Modified` after `If-Unmodified-Since` → 412;
/// 3. `If-None-Match` (weak comparison; `*` matches) true → 304 for GET/HEAD, 412 otherwise;
/// 4. without `If-None-Match`, for GET/HEAD, `If-Modified-Since` not older than the stored
///    `Last-Modified` (or, lacking one, its `Date`, RFC 9111 §4.3.2) → 304.
///
/// Date preconditions with an invalid date or several field lines are ignored (§13.1.3–4).
/// Call it only for a stored response whose status is 2xx and that the cache is about to serve
/// (fresh, or just validated): RFC 9110 §13.2.1 applies preconditions to 2xx responses only.
/// RFC 9111 §4.3.2 leaves `If-Match`/`If-Unmodified-Since` to the origin; a reverse proxy serving
/// its origin's current representation evaluates them as that origin would, as nginx does.
pub fn client_conditional(
    req_method: &Method,
    req: &HeaderMap,
    stored_resp: &HeaderMap,
) -> Conditional {
    let etag = stored_etag(stored_resp);
    let get_or_head = req_method == Method::GET || req_method == Method::HEAD;
    if let Some(if_match) = etag_list(req, IF_MATCH) {
        if !if_match.matches(etag.as_ref(), |a, b| a.strong_eq(b)) {
            return Conditional::PreconditionFailed;
        }
    } else if let Some(ius) = single_date(req, IF_UNMODIFIED_SINCE) {
        if header_date(stored_resp, LAST_MODIFIED).is_some_and(|lm| lm > ius) {
            return Conditional::PreconditionFailed;
        }
    }
    if let Some(if_none_match) = etag_list(req, IF_NONE_MATCH) {
        return match (
            if_none_match.matches(etag.as_ref(), |a, b| a.weak_eq(b)),
            get_or_head,
        ) {
            (false, _) => Conditional::None,
            (true, true) => Conditional::NotModified,
            (true, false) => Conditional::PreconditionFailed,
        };
    }
    if get_or_head {
        if let Some(ims) = single_date(req, IF_MODIFIED_SINCE) {
            let modified =
                header_date(stored_resp, LAST_MODIFIED).or_else(|| header_date(stored_resp, DATE));
            if modified.is_some_and(|m| m <= ims) {
                return Conditional::NotModified;
            }
        }
    }
    Conditional::None
}

/// The stored fields a `304` sent to a client carries (RFC 9110 §15.4.5): `Cache-Control`,
/// `Content-Location`, `Date`, `ETag`, `Expires`, `Vary`, and `Last-Modified` when there is no
/// `ETag` (the one other field useful to the client's cache update). The caller adds `Age`.
pub fn not_modified_headers(stored_resp: &HeaderMap) -> HeaderMap {
    let mut names = vec![CACHE_CONTROL, CONTENT_LOCATION, DATE, ETAG, EXPIRES, VARY];
    if !stored_resp.contains_key(ETAG) {
        names.push(LAST_MODIFIED);
    }
    let mut out = HeaderMap::new();
    for name in names {
        for value in stored_resp.get_all(&name) {
            out.append(name.clone(), value.clone());
        }
    }
    out
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

    const LM: &str = "Tue, 14 Nov 2023 22:13:20 GMT";
    const BEFORE: &str = "Tue, 14 Nov 2023 22:13:19 GMT";
    const AFTER: &str = "Tue, 14 Nov 2023 22:13:21 GMT";

    fn stored() -> HeaderMap {
        headers(&[
            ("etag", "\"v1\""),
            ("last-modified", LM),
            ("content-length", "10"),
        ])
    }

    fn cond(method: Method, req: &[(&'static str, &'static str)]) -> Conditional {
        client_conditional(&method, &headers(req), &stored())
    }

    #[test]
    fn revalidation_headers_from_validators() {
        // RFC 9111 §4.3.1
        let h = revalidation_headers(&stored());
        assert_eq!(h.get(IF_NONE_MATCH).unwrap(), "\"v1\"");
        assert_eq!(h.get(IF_MODIFIED_SINCE).unwrap(), LM);
        assert!(revalidation_headers(&headers(&[("content-type", "a/b")])).is_empty());
        let bad = headers(&[("last-modified", "yesterday"), ("etag", "no-quotes")]);
        assert!(
            revalidation_headers(&bad).is_empty(),
            "unusable validators not sent"
        );
    }

    #[test]
    fn merge_304_keeps_content_length() {
        // RFC 9111 §3.2: Content-Length is not updated from a 304.
        let mut s = stored();
        s.insert("cache-control", HeaderValue::from_static("max-age=10"));
        s.append("x-multi", HeaderValue::from_static("a"));
        s.append("x-multi", HeaderValue::from_static("b"));
        let nm = headers(&[
            ("content-length", "0"),
            ("cache-control", "max-age=99"),
            ("x-multi", "c"),
            ("transfer-encoding", "chunked"),
        ]);
        merge_not_modified(&mut s, &nm);
        assert_eq!(s.get(CONTENT_LENGTH).unwrap(), "10");
        assert_eq!(s.get(CACHE_CONTROL).unwrap(), "max-age=99");
        let multi: Vec<_> = s.get_all("x-multi").iter().collect();
        assert_eq!(multi, vec!["c"], "replaced, not appended");
        assert!(!s.contains_key("transfer-encoding"));
        assert_eq!(s.get(ETAG).unwrap(), "\"v1\"", "absent from the 304: kept");
    }

    #[test]
    fn merge_304_drops_stale_age() {
        let mut s = headers(&[("age", "500")]);
        merge_not_modified(&mut s, &headers(&[("date", LM)]));
        assert!(!s.contains_key("age"));
    }

    #[test]
    fn not_modified_applies_by_validator() {
        // RFC 9111 §4.3.4
        assert!(not_modified_applies(
            &stored(),
            &headers(&[("etag", "W/\"v1\"")])
        ));
        assert!(!not_modified_applies(
            &stored(),
            &headers(&[("etag", "\"v2\"")])
        ));
        assert!(not_modified_applies(
            &stored(),
            &headers(&[("last-modified", LM)])
        ));
        assert!(!not_modified_applies(
            &stored(),
            &headers(&[("last-modified", AFTER)])
        ));
        assert!(not_modified_applies(&stored(), &HeaderMap::new()));
    }

    #[test]
    fn if_match_strong_comparison_fails_with_412() {
        // RFC 9110 §13.1.1, §13.2.2 step 1
        assert_eq!(
            cond(Method::GET, &[("if-match", "\"v1\"")]),
            Conditional::None
        );
        assert_eq!(cond(Method::GET, &[("if-match", "*")]), Conditional::None);
        assert_eq!(
            cond(Method::GET, &[("if-match", "\"v2\"")]),
            Conditional::PreconditionFailed
        );
        assert_eq!(
            cond(Method::GET, &[("if-match", "W/\"v1\"")]),
            Conditional::PreconditionFailed,
            "weak tags never match strongly"
        );
    }

    #[test]
    fn if_unmodified_since_412_when_modified_after() {
        // RFC 9110 §13.1.4, §13.2.2 step 2
        assert_eq!(
            cond(Method::GET, &[("if-unmodified-since", LM)]),
            Conditional::None
        );
        assert_eq!(
            cond(Method::GET, &[("if-unmodified-since", BEFORE)]),
            Conditional::PreconditionFailed
        );
        assert_eq!(
            cond(
                Method::GET,
                &[("if-match", "\"v1\""), ("if-unmodified-since", BEFORE)]
            ),
            Conditional::None,
            "ignored when If-Match is present"
        );
        assert_eq!(
            cond(Method::GET, &[("if-unmodified-since", "garbage")]),
            Conditional::None
        );
    }

    #[test]
    fn if_none_match_weak_comparison_and_star() {
        // RFC 9110 §13.1.2, §13.2.2 step 3
        assert_eq!(
            cond(Method::GET, &[("if-none-match", "W/\"v1\"")]),
            Conditional::NotModified
        );
        assert_eq!(
            cond(Method::HEAD, &[("if-none-match", "\"x\", \"v1\"")]),
            Conditional::NotModified
        );
        assert_eq!(
            cond(Method::GET, &[("if-none-match", "*")]),
            Conditional::NotModified
        );
        assert_eq!(
            cond(Method::GET, &[("if-none-match", "\"v2\"")]),
            Conditional::None
        );
        assert_eq!(
            cond(Method::PUT, &[("if-none-match", "*")]),
            Conditional::PreconditionFailed
        );
    }

    #[test]
    fn if_none_match_weak_stored_etag() {
        let s = headers(&[("etag", "W/\"x\"")]);
        let req = headers(&[("if-none-match", "W/\"x\"")]);
        assert_eq!(
            client_conditional(&Method::GET, &req, &s),
            Conditional::NotModified
        );
        let im = headers(&[("if-match", "W/\"x\"")]);
        assert_eq!(
            client_conditional(&Method::GET, &im, &s),
            Conditional::PreconditionFailed
        );
    }

    #[test]
    fn if_modified_since_only_without_if_none_match() {
        // RFC 9110 §13.1.3, §13.2.2 step 4
        assert_eq!(
            cond(Method::GET, &[("if-modified-since", LM)]),
            Conditional::NotModified
        );
        assert_eq!(
            cond(Method::GET, &[("if-modified-since", AFTER)]),
            Conditional::NotModified
        );
        assert_eq!(
            cond(Method::GET, &[("if-modified-since", BEFORE)]),
            Conditional::None
        );
        assert_eq!(
            cond(
                Method::GET,
                &[("if-none-match", "\"v2\""), ("if-modified-since", AFTER)]
            ),
            Conditional::None,
            "If-None-Match takes precedence"
        );
        assert_eq!(
            cond(Method::POST, &[("if-modified-since", AFTER)]),
            Conditional::None
        );
        let two = [("if-modified-since", AFTER), ("if-modified-since", AFTER)];
        assert_eq!(
            cond(Method::GET, &two),
            Conditional::None,
            "more than one member: ignored"
        );
    }

    #[test]
    fn if_modified_since_falls_back_to_date() {
        // RFC 9111 §4.3.2: without Last-Modified, use the stored Date.
        let s = headers(&[("date", LM)]);
        let req = headers(&[("if-modified-since", LM)]);
        assert_eq!(
            client_conditional(&Method::GET, &req, &s),
            Conditional::NotModified
        );
        let older = headers(&[("if-modified-since", BEFORE)]);
        assert_eq!(
            client_conditional(&Method::GET, &older, &s),
            Conditional::None
        );
    }

    #[test]
    fn not_modified_headers_carry_metadata_only() {
        // RFC 9110 §15.4.5
        let s = headers(&[
            ("etag", "\"v1\""),
            ("last-modified", LM),
            ("cache-control", "max-age=1"),
            ("vary", "accept-encoding"),
            ("content-length", "10"),
            ("content-type", "text/plain"),
            ("date", LM),
        ]);
        let h = not_modified_headers(&s);
        let mut names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        names.sort();
        assert_eq!(names, vec!["cache-control", "date", "etag", "vary"]);
        let no_etag = headers(&[("last-modified", LM)]);
        assert!(not_modified_headers(&no_etag).contains_key(LAST_MODIFIED));
    }
}
