//! May a stored response answer this request, and how? RFC 9111 §4 (constructing responses
//! from caches), §4.2.4 (serving stale), §5.2.1 (request directives), RFC 5861
//! (stale-while-revalidate, stale-if-error) and Varnish-style grace.
//!
//! The caller has already matched the primary key and the `Vary` variant
//! ([`super::vary::vary_key`]); these functions look only at freshness and directives.

use std::time::{Duration, SystemTime};

use http::header::AUTHORIZATION;
use http::{HeaderMap, Method};

use super::cache_control::{CacheControl, FieldScope};
use super::freshness::StoredTimes;
use super::rules::CacheRules;
use super::storable::authorized_sharing_allowed;

/// Why a stale response may be served without revalidation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleWhy {
    /// The request's `max-stale` accepts this much staleness (RFC 9111 §5.2.1.2).
    ClientMaxStale,
}

/// What to do with a stored response for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Fresh and acceptable to the client: serve it as is (with `Age`).
    Fresh,
    /// Stale but the client accepts it: serve it (a `110`-style warning is no longer defined,
    /// RFC 9111 §5.5). The caller may still refresh it in the background.
    StaleAllowed {
        /// Which rule allowed it.
        why: StaleWhy,
    },
    /// Stale within the response's `stale-while-revalidate` window or the rules' grace: serve
    /// it now and refresh it in the background.
    StaleWhileRevalidate,
    /// Do not use it before the origin validates it: send a conditional request
    /// ([`super::validate::revalidation_headers`]) and serve the stored body on a 304.
    Revalidate,
}

/// Decides how a stored response may be used for a `GET` or `HEAD` request (any other method
/// yields [`Decision::Revalidate`]: it must go to the origin).
///
/// In order: the request's `no-cache` (or `Pragma: no-cache`), the response's `no-cache`, and an
/// `Authorization` the response did not allow to share (RFC 9111 §3.5) force revalidation. A
/// fresh response is served unless the request's `max-age` (age above it) or `min-fresh`
/// (less than that much freshness left) rejects it. A stale response forbidden to be served stale
/// (`must-revalidate`, `proxy-revalidate`, `s-maxage`) is revalidated; otherwise the request's
/// `max-stale` may accept it, or, when the request states no `max-age`/`min-fresh`, the
/// stale-while-revalidate window (the larger of the response's and `rules.grace`) may cover it.
pub fn decide(
    req_method: &Method,
    req: &HeaderMap,
    stored_resp: &HeaderMap,
    times: &StoredTimes,
    now: SystemTime,
    rules: &CacheRules,
) -> Decision {
    if req_method != Method::GET && req_method != Method::HEAD {
        return Decision::Revalidate;
    }
    let rq = CacheControl::parse_request(req);
    let rs = CacheControl::parse(stored_resp);
    if rq.no_cache.is_some()
        || response_no_cache_applies(&rs, stored_resp)
        || (req.contains_key(AUTHORIZATION) && !authorized_sharing_allowed(&rs))
    {
        return Decision::Revalidate;
    }
    let age = times.current_age(now);
    let lifetime = times.freshness_lifetime;
    let age_ok = rq.max_age.is_none_or(|max| age <= max);
    if times.is_fresh(now) {
        let left = lifetime - age;
        let fresh_enough = rq.min_fresh.is_none_or(|min| left >= min);
        return if age_ok && fresh_enough {
            Decision::Fresh
        } else {
            Decision::Revalidate
        };
    }
    if rs.stale_forbidden() {
        return Decision::Revalidate;
    }
    let staleness = times.staleness(now);
    if age_ok && rq.max_stale.is_some_and(|ms| ms.allows(staleness)) {
        return Decision::StaleAllowed {
            why: StaleWhy::ClientMaxStale,
        };
    }
    // §5.2.1.1: a request max-age without max-stale means "no stale response"; min-fresh asks
    // for the opposite of stale.
    let client_forbids_stale = rq.max_age.is_some() || rq.min_fresh.is_some();
    let window = rs
        .stale_while_revalidate
        .unwrap_or_default()
        .max(rules.grace);
    if !client_forbids_stale && staleness < window {
        return Decision::StaleWhileRevalidate;
    }
    Decision::Revalidate
}

/// A qualified `no-cache="f"` only forbids reusing the response while it still carries `f`
/// (RFC 9111 §5.2.2.4); [`super::storable::headers_to_store`] strips such fields, after which the
/// response is reusable. The unqualified form always forces revalidation.
fn response_no_cache_applies(rs: &CacheControl, stored_resp: &HeaderMap) -> bool {
    match &rs.no_cache {
        None => false,
        Some(FieldScope::All) => true,
        Some(FieldScope::Fields(names)) => {
            names.iter().any(|n| stored_resp.contains_key(n.as_str()))
        }
    }
}

/// Whether a stale stored response may answer when the origin could not be reached or returned
/// a 5xx (RFC 5861 §4, RFC 9111 §4.2.4). Allowed within the largest of the response's and the
/// request's `stale-if-error` windows and `rules.stale_if_error`, or when the request's
/// `max-stale` accepts the staleness; never when the response forbids stale use (`no-cache`,
/// `must-revalidate`, `proxy-revalidate`, `s-maxage`). A response still fresh is always usable.
pub fn stale_if_error_allows(
    req: &HeaderMap,
    stored_resp: &HeaderMap,
    times: &StoredTimes,
    now: SystemTime,
    rules: &CacheRules,
) -> bool {
    let rs = CacheControl::parse(stored_resp);
    if rs.stale_forbidden() {
        return false;
    }
    if times.is_fresh(now) {
        return true;
    }
    let rq = CacheControl::parse_request(req);
    let staleness = times.staleness(now);
    let window = [
        rs.stale_if_error,
        rq.stale_if_error,
        Some(rules.stale_if_error),
    ]
    .into_iter()
    .flatten()
    .max()
    .unwrap_or(Duration::ZERO);
    staleness < window || rq.max_stale.is_some_and(|ms| ms.allows(staleness))
}

/// Whether the request says `only-if-cached` (RFC 9111 §5.2.1.7): when nothing stored can be
/// used without going to the origin, the caller answers `504 Gateway Timeout`.
pub fn only_if_cached(req: &HeaderMap) -> bool {
    CacheControl::parse_request(req).only_if_cached
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderValue, StatusCode};
    use std::time::UNIX_EPOCH;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    }

    /// A response stored at t=0 with the given Cache-Control and no Date.
    fn stored(cc: &'static str) -> (HeaderMap, StoredTimes) {
        let h = headers(&[("cache-control", cc)]);
        let t = StoredTimes::new(StatusCode::OK, &h, at(0), at(0), &CacheRules::default());
        (h, t)
    }

    fn run(req_cc: &[(&'static str, &'static str)], resp_cc: &'static str, now: u64) -> Decision {
        run_rules(req_cc, resp_cc, now, &CacheRules::default())
    }

    fn run_rules(
        req: &[(&'static str, &'static str)],
        resp_cc: &'static str,
        now: u64,
        rules: &CacheRules,
    ) -> Decision {
        let (h, t) = stored(resp_cc);
        decide(&Method::GET, &headers(req), &h, &t, at(now), rules)
    }

    const ALLOWED: Decision = Decision::StaleAllowed {
        why: StaleWhy::ClientMaxStale,
    };

    #[test]
    fn fresh_served_stale_revalidated() {
        // RFC 9111 §4.2: fresh until age == lifetime.
        assert_eq!(run(&[], "max-age=10", 9), Decision::Fresh);
        assert_eq!(run(&[], "max-age=10", 10), Decision::Revalidate);
    }

    #[test]
    fn head_uses_stored_get_other_methods_do_not() {
        let (h, t) = stored("max-age=10");
        let rules = CacheRules::default();
        assert_eq!(
            decide(&Method::HEAD, &HeaderMap::new(), &h, &t, at(1), &rules),
            Decision::Fresh
        );
        assert_eq!(
            decide(&Method::POST, &HeaderMap::new(), &h, &t, at(1), &rules),
            Decision::Revalidate
        );
    }

    #[test]
    fn request_no_cache_revalidates() {
        // RFC 9111 §5.2.1.4, §5.4 (Pragma)
        assert_eq!(
            run(&[("cache-control", "no-cache")], "max-age=100", 1),
            Decision::Revalidate
        );
        assert_eq!(
            run(&[("pragma", "no-cache")], "max-age=100", 1),
            Decision::Revalidate
        );
    }

    #[test]
    fn response_no_cache_always_revalidates() {
        // RFC 9111 §5.2.2.4
        assert_eq!(run(&[], "no-cache, max-age=100", 1), Decision::Revalidate);
        assert_eq!(
            run(&[("cache-control", "max-stale")], "no-cache, max-age=1", 5),
            Decision::Revalidate
        );
    }

    #[test]
    fn qualified_no_cache_blocks_only_while_field_present() {
        // RFC 9111 §5.2.2.4 (qualified form)
        let with_field = headers(&[
            ("cache-control", "no-cache=\"x-a\", max-age=100"),
            ("x-a", "1"),
        ]);
        let stripped = headers(&[("cache-control", "no-cache=\"x-a\", max-age=100")]);
        let rules = CacheRules::default();
        let t = StoredTimes::new(StatusCode::OK, &stripped, at(0), at(0), &rules);
        let req = HeaderMap::new();
        assert_eq!(
            decide(&Method::GET, &req, &with_field, &t, at(1), &rules),
            Decision::Revalidate
        );
        assert_eq!(
            decide(&Method::GET, &req, &stripped, &t, at(1), &rules),
            Decision::Fresh
        );
    }

    #[test]
    fn request_max_age_rejects_older_fresh_response() {
        // RFC 9111 §5.2.1.1
        let req = [("cache-control", "max-age=5")];
        assert_eq!(run(&req, "max-age=100", 5), Decision::Fresh);
        assert_eq!(run(&req, "max-age=100", 6), Decision::Revalidate);
        assert_eq!(
            run(&[("cache-control", "max-age=0")], "max-age=100", 0),
            Decision::Fresh
        );
    }

    #[test]
    fn min_fresh_pushes_fresh_response_to_stale() {
        // RFC 9111 §5.2.1.3
        let req = [("cache-control", "min-fresh=20")];
        assert_eq!(run(&req, "max-age=100", 80), Decision::Fresh, "20 s left");
        assert_eq!(run(&req, "max-age=100", 81), Decision::Revalidate);
        assert_eq!(run(&[], "max-age=100", 81), Decision::Fresh);
    }

    #[test]
    fn max_stale_without_value_accepts_any_staleness() {
        // RFC 9111 §5.2.1.2
        assert_eq!(
            run(&[("cache-control", "max-stale")], "max-age=10", 10_000),
            ALLOWED
        );
    }

    #[test]
    fn max_stale_with_value_bounds_staleness() {
        // RFC 9111 §5.2.1.2: "by no more than the specified number of seconds"
        let req = [("cache-control", "max-stale=5")];
        assert_eq!(run(&req, "max-age=10", 15), ALLOWED);
        assert_eq!(run(&req, "max-age=10", 16), Decision::Revalidate);
    }

    #[test]
    fn must_revalidate_never_served_stale() {
        // RFC 9111 §5.2.2.2, §4.2.4
        let rules = CacheRules {
            grace: Duration::from_secs(1000),
            ..CacheRules::default()
        };
        let max_stale = [("cache-control", "max-stale")];
        for cc in [
            "max-age=10, must-revalidate",
            "max-age=10, proxy-revalidate",
            "s-maxage=10, stale-while-revalidate=100",
        ] {
            assert_eq!(
                run_rules(&max_stale, cc, 11, &rules),
                Decision::Revalidate,
                "{cc}"
            );
            assert_eq!(run_rules(&[], cc, 11, &rules), Decision::Revalidate, "{cc}");
            assert_eq!(run_rules(&[], cc, 9, &rules), Decision::Fresh, "{cc}");
        }
    }

    #[test]
    fn stale_while_revalidate_window() {
        // RFC 5861 §3
        assert_eq!(
            run(&[], "max-age=10, stale-while-revalidate=5", 14),
            Decision::StaleWhileRevalidate
        );
        assert_eq!(
            run(&[], "max-age=10, stale-while-revalidate=5", 15),
            Decision::Revalidate
        );
    }

    #[test]
    fn grace_from_rules_and_swr_extends_it() {
        // Varnish grace; the response's SWR may extend it.
        let rules = CacheRules {
            grace: Duration::from_secs(30),
            ..CacheRules::default()
        };
        assert_eq!(
            run_rules(&[], "max-age=10", 39, &rules),
            Decision::StaleWhileRevalidate
        );
        assert_eq!(
            run_rules(&[], "max-age=10", 40, &rules),
            Decision::Revalidate
        );
        let swr = "max-age=10, stale-while-revalidate=100";
        assert_eq!(
            run_rules(&[], swr, 100, &rules),
            Decision::StaleWhileRevalidate
        );
    }

    #[test]
    fn client_max_age_forbids_stale_while_revalidate() {
        // RFC 9111 §5.2.1.1: max-age without max-stale means no stale response.
        let swr = "max-age=10, stale-while-revalidate=100";
        assert_eq!(
            run(&[("cache-control", "max-age=50")], swr, 20),
            Decision::Revalidate
        );
        assert_eq!(
            run(&[("cache-control", "min-fresh=1")], swr, 20),
            Decision::Revalidate
        );
    }

    #[test]
    fn authorization_needs_shareable_response() {
        // RFC 9111 §3.5 applies to reuse too.
        let auth = [("authorization", "Basic eDp5")];
        assert_eq!(run(&auth, "max-age=100", 1), Decision::Revalidate);
        assert_eq!(run(&auth, "max-age=100, public", 1), Decision::Fresh);
    }

    #[test]
    fn stale_if_error_windows() {
        // RFC 5861 §4
        let rules = CacheRules::default();
        let (h, t) = stored("max-age=10, stale-if-error=60");
        let none = HeaderMap::new();
        assert!(stale_if_error_allows(&none, &h, &t, at(5), &rules), "fresh");
        assert!(stale_if_error_allows(&none, &h, &t, at(69), &rules));
        assert!(!stale_if_error_allows(&none, &h, &t, at(70), &rules));
        let (plain, pt) = stored("max-age=10");
        assert!(!stale_if_error_allows(&none, &plain, &pt, at(11), &rules));
        let req = headers(&[("cache-control", "stale-if-error=100")]);
        assert!(
            stale_if_error_allows(&req, &plain, &pt, at(100), &rules),
            "request window"
        );
        let generous = CacheRules {
            stale_if_error: Duration::from_secs(30),
            ..CacheRules::default()
        };
        assert!(
            stale_if_error_allows(&none, &plain, &pt, at(39), &generous),
            "rules window"
        );
    }

    #[test]
    fn stale_if_error_never_with_must_revalidate() {
        // RFC 9111 §4.2.4: no stale response when an in-protocol directive forbids it.
        let rules = CacheRules {
            stale_if_error: Duration::from_secs(1000),
            ..CacheRules::default()
        };
        let none = HeaderMap::new();
        for cc in [
            "max-age=10, must-revalidate, stale-if-error=100",
            "s-maxage=10",
            "no-cache",
        ] {
            let (h, t) = stored(cc);
            assert!(
                !stale_if_error_allows(&none, &h, &t, at(11), &rules),
                "{cc}"
            );
        }
    }

    #[test]
    fn only_if_cached_detected() {
        // RFC 9111 §5.2.1.7
        assert!(only_if_cached(&headers(&[(
            "cache-control",
            "only-if-cached"
        )])));
        assert!(!only_if_cached(&headers(&[("cache-control", "max-stale")])));
    }
}
