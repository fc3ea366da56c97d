//! May a stored response answer this request, and how? RFC 9111 §4 (constructing responses
//! from caches), §4.2.4 (serving stale), §5.2.1 (request directives), RFC 5861
//! (stale-while-revalidate, stale-if-error), RFC 9213 targeted fields and Varnish-style grace.
//!
//! A stale response is served only with an explicit permission (RFC 9111 §4.2.4), and every
//! stale answer says which one ([`StaleWhy`]), so `Cache-Status` can report it.
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

/// Why a stale response may be served without (or before) validation. RFC 9111 §4.2.4: a cache
/// MUST NOT generate a stale response unless it is disconnected or doing so is explicitly
/// permitted by the client or origin server — each variant names that permission (or the
/// operator's explicit setting). [`StaleWhy::detail`] is the token for an RFC 9211
/// `Cache-Status: …; fwd=stale; detail=…` (see [`super::cache_status::CacheStatus::stale`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaleWhy {
    /// The request's `max-stale` accepts this much staleness (RFC 9111 §5.2.1.2).
    ClientMaxStale,
    /// Within the response's `stale-while-revalidate` window (RFC 5861 §3).
    ResponseStaleWhileRevalidate,
    /// Within the operator's [`CacheRules::grace`] (a response once fresh, not forbidding it).
    OperatorGrace,
    /// After an origin error, within the response's `stale-if-error` window (RFC 5861 §4).
    ResponseStaleIfError,
    /// After an origin error, within the request's `stale-if-error` window (RFC 5861 §4).
    ClientStaleIfError,
    /// After an origin error, within the operator's [`CacheRules::stale_if_error`].
    OperatorStaleIfError,
}

impl StaleWhy {
    /// A short sf-token naming the permission, for an RFC 9211 `detail` parameter and logs:
    /// `max-stale`, `stale-while-revalidate`, `grace`, `stale-if-error`,
    /// `request-stale-if-error`, `operator-stale-if-error`.
    pub fn detail(self) -> &'static str {
        match self {
            StaleWhy::ClientMaxStale => "max-stale",
            StaleWhy::ResponseStaleWhileRevalidate => "stale-while-revalidate",
            StaleWhy::OperatorGrace => "grace",
            StaleWhy::ResponseStaleIfError => "stale-if-error",
            StaleWhy::ClientStaleIfError => "request-stale-if-error",
            StaleWhy::OperatorStaleIfError => "operator-stale-if-error",
        }
    }

    /// Whether this permission is for answering after the origin failed (RFC 5861 §4), rather
    /// than instead of asking it.
    pub fn after_error(self) -> bool {
        matches!(
            self,
            StaleWhy::ResponseStaleIfError
                | StaleWhy::ClientStaleIfError
                | StaleWhy::OperatorStaleIfError
        )
    }
}

/// What to do with a stored response for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Fresh and acceptable to the client: serve it as is (with `Age`).
    Fresh,
    /// Stale but the client accepts it: serve it (a `110`-style warning is no longer defined,
    /// RFC 9111 §5.5). The caller may still refresh it in the background.
    StaleAllowed {
        /// Which rule allowed it (always [`StaleWhy::ClientMaxStale`]).
        why: StaleWhy,
    },
    /// Stale within the response's `stale-while-revalidate` window or the operator's grace:
    /// serve it now and refresh it in the background.
    StaleWhileRevalidate {
        /// Which rule allowed it: [`StaleWhy::ResponseStaleWhileRevalidate`] or
        /// [`StaleWhy::OperatorGrace`].
        why: StaleWhy,
    },
    /// Do not use it before the origin validates it: send a conditional request
    /// ([`super::validate::revalidation_headers`]) and serve the stored body on a 304.
    Revalidate,
}

impl Decision {
    /// The permission a stale answer rests on; `None` for [`Decision::Fresh`] and
    /// [`Decision::Revalidate`].
    pub fn stale_why(self) -> Option<StaleWhy> {
        match self {
            Decision::StaleAllowed { why } | Decision::StaleWhileRevalidate { why } => Some(why),
            Decision::Fresh | Decision::Revalidate => None,
        }
    }
}

/// Decides how a stored response may be used for a `GET` or `HEAD` request (any other method
/// yields [`Decision::Revalidate`]: it must go to the origin).
///
/// The response's directives are those of its first valid targeted field in
/// `rules.targeted_fields` (RFC 9213), else its `Cache-Control`. In order: the request's
/// `no-cache` (or `Pragma: no-cache`), the response's `no-cache`, and an `Authorization` the
/// response did not allow to share (RFC 9111 §3.5) force revalidation. A fresh response is
/// served unless the request's `max-age` (age above it) or `min-fresh` (less than that much
/// freshness left) rejects it. A stale response is never served without an explicit permission
/// (RFC 9111 §4.2.4), and never when forbidden (`must-revalidate`, `proxy-revalidate`,
/// `s-maxage`, §5.2.2.2, §5.2.2.8, §5.2.2.10). The permissions, first match wins:
///
/// 1. the request's `max-stale` → [`Decision::StaleAllowed`] ([`StaleWhy::ClientMaxStale`]);
/// 2. when the request states no `max-age`/`min-fresh` (§5.2.1.1, §5.2.1.3), staleness below
///    the response's `stale-while-revalidate` → [`Decision::StaleWhileRevalidate`]
///    ([`StaleWhy::ResponseStaleWhileRevalidate`]);
/// 3. likewise, staleness below `rules.grace` for a response that was fresh when received →
///    [`Decision::StaleWhileRevalidate`] ([`StaleWhy::OperatorGrace`]). A response that never
///    had any freshness here (none stated, no heuristic, `max-age=0`, an `Expires` not after
///    `Date` or invalid, an `Age` already past `max-age`) is not covered by grace.
///
/// `immutable` (RFC 8246) changes nothing here: it speaks of a response's freshness lifetime,
/// so a stale immutable response needs the same permissions as any other.
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
    let rs = times.directives(stored_resp, rules);
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
    if rq.max_age.is_some() || rq.min_fresh.is_some() {
        return Decision::Revalidate;
    }
    if rs
        .stale_while_revalidate
        .is_some_and(|window| staleness < window)
    {
        return Decision::StaleWhileRevalidate {
            why: StaleWhy::ResponseStaleWhileRevalidate,
        };
    }
    if operator_window_applies(times) && staleness < rules.grace {
        return Decision::StaleWhileRevalidate {
            why: StaleWhy::OperatorGrace,
        };
    }
    Decision::Revalidate
}

/// The operator's grace and stale-if-error extend only responses that were fresh when received
/// (lifetime above the corrected initial age): one with a zero lifetime, or whose `Age` had
/// already passed its `max-age`, carried no freshness to extend, and serving it stale would be
/// answering what nobody allowed (issue 31; RFC 9111 §4.2.4).
fn operator_window_applies(times: &StoredTimes) -> bool {
    times.freshness_lifetime > times.corrected_initial_age
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
/// a 5xx (RFC 5861 §4, RFC 9111 §4.2.4). Never when the response forbids stale use (`no-cache`,
/// `must-revalidate`, `proxy-revalidate`, `s-maxage`); otherwise a response still fresh is
/// usable, and a stale one when [`stale_if_error_why`] names a permission.
pub fn stale_if_error_allows(
    req: &HeaderMap,
    stored_resp: &HeaderMap,
    times: &StoredTimes,
    now: SystemTime,
    rules: &CacheRules,
) -> bool {
    let rs = times.directives(stored_resp, rules);
    if rs.stale_forbidden() {
        return false;
    }
    times.is_fresh(now) || stale_error_permission(req, &rs, times, now, rules).is_some()
}

/// Why a *stale* stored response may answer after an origin error, or `None` when it may not
/// (or is still fresh, or forbids stale use). First match wins: the response's
/// `stale-if-error` window, the request's `stale-if-error` window (RFC 5861 §4), the request's
/// `max-stale` (RFC 9111 §5.2.1.2), and `rules.stale_if_error` for a response that was fresh
/// when received (as for grace in [`decide`]). Windows are exclusive: stale by exactly the window is too late.
pub fn stale_if_error_why(
    req: &HeaderMap,
    stored_resp: &HeaderMap,
    times: &StoredTimes,
    now: SystemTime,
    rules: &CacheRules,
) -> Option<StaleWhy> {
    let rs = times.directives(stored_resp, rules);
    if rs.stale_forbidden() || times.is_fresh(now) {
        return None;
    }
    stale_error_permission(req, &rs, times, now, rules)
}

fn stale_error_permission(
    req: &HeaderMap,
    rs: &CacheControl,
    times: &StoredTimes,
    now: SystemTime,
    rules: &CacheRules,
) -> Option<StaleWhy> {
    let rq = CacheControl::parse_request(req);
    let staleness = times.staleness(now);
    let within = |window: Option<Duration>| window.is_some_and(|w| staleness < w);
    if within(rs.stale_if_error) {
        Some(StaleWhy::ResponseStaleIfError)
    } else if within(rq.stale_if_error) {
        Some(StaleWhy::ClientStaleIfError)
    } else if rq.max_stale.is_some_and(|ms| ms.allows(staleness)) {
        Some(StaleWhy::ClientMaxStale)
    } else if operator_window_applies(times) && staleness < rules.stale_if_error {
        Some(StaleWhy::OperatorStaleIfError)
    } else {
        None
    }
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
    const SWR: Decision = Decision::StaleWhileRevalidate {
        why: StaleWhy::ResponseStaleWhileRevalidate,
    };
    const GRACE: Decision = Decision::StaleWhileRevalidate {
        why: StaleWhy::OperatorGrace,
    };

    fn grace(secs: u64) -> CacheRules {
        CacheRules {
            grace: Duration::from_secs(secs),
            stale_if_error: Duration::from_secs(secs),
            ..CacheRules::default()
        }
    }

    /// A response of `status` stored at t=0 with the given fields, decided at `now`.
    fn run_status(
        status: u16,
        resp: &[(&'static str, &'static str)],
        req: &[(&'static str, &'static str)],
        now: u64,
        rules: &CacheRules,
    ) -> Decision {
        let h = headers(resp);
        let status = StatusCode::from_u16(status).unwrap();
        let t = StoredTimes::new(status, &h, at(0), at(0), rules);
        decide(&Method::GET, &headers(req), &h, &t, at(now), rules)
    }

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
        assert_eq!(run(&[], "max-age=10, stale-while-revalidate=5", 14), SWR);
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
        assert_eq!(run_rules(&[], "max-age=10", 39, &rules), GRACE);
        assert_eq!(
            run_rules(&[], "max-age=10", 40, &rules),
            Decision::Revalidate
        );
        let swr = "max-age=10, stale-while-revalidate=100";
        assert_eq!(run_rules(&[], swr, 100, &rules), SWR);
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

    /// Every status a shared cache may store, by category (issue 31).
    const STATUSES: [u16; 16] = [
        200, 203, 204, 300, 301, 302, 303, 307, 308, 404, 405, 410, 414, 500, 501, 503,
    ];

    #[test]
    fn no_freshness_information_is_never_a_hit_without_validation() {
        // RFC 9111 §4.2.2, §4.2.4 (issue 31): no Cache-Control, Expires or Last-Modified.
        for status in STATUSES {
            let date = [("date", "Tue, 14 Nov 2023 22:13:20 GMT")];
            for now in [0, 1, 5, 9, 10, 100] {
                let d = run_status(status, &date, &[], now, &CacheRules::default());
                assert_eq!(d, Decision::Revalidate, "{status} at {now}");
                let d = run_status(status, &[], &[], now, &grace(30));
                assert_eq!(
                    d,
                    Decision::Revalidate,
                    "{status} at {now}: grace needs a lifetime"
                );
            }
        }
    }

    #[test]
    fn stale_at_once_for_every_status_and_form() {
        // RFC 9111 §4.2.1, §5.3 (issue 31): none of these may be answered from the cache on
        // the second request, with the default rules or an operator's grace.
        let forms: [&[(&'static str, &'static str)]; 8] = [
            &[("cache-control", "max-age=0")],
            &[("cache-control", "max-age=-1")],
            &[("cache-control", "max-age=abc")],
            &[("cache-control", "max-age=60"), ("age", "60")],
            &[
                ("date", "Tue, 14 Nov 2023 22:13:20 GMT"),
                ("expires", "Tue, 14 Nov 2023 22:00:00 GMT"),
            ],
            &[
                ("date", "Tue, 14 Nov 2023 22:13:20 GMT"),
                ("expires", "Tue, 14 Nov 2023 22:13:20 GMT"),
            ],
            &[("expires", "0")],
            &[("expires", "Thu, 01 Dec 2099 16:00:00 PST")],
        ];
        for status in STATUSES {
            for form in forms {
                for rules in [CacheRules::default(), grace(30)] {
                    for now in [0, 1, 10] {
                        assert_eq!(
                            run_status(status, form, &[], now, &rules),
                            Decision::Revalidate,
                            "{status} {form:?} at {now}, grace {:?}",
                            rules.grace
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn stale_served_only_with_explicit_permission_and_says_which() {
        // RFC 9111 §4.2.4; RFC 5861 §3; §5.2.1.2.
        let plain = [("cache-control", "max-age=10")];
        assert_eq!(
            run_status(200, &plain, &[], 11, &CacheRules::default()),
            Decision::Revalidate
        );
        assert_eq!(run_status(200, &plain, &[], 11, &grace(30)), GRACE);
        let swr = [("cache-control", "max-age=10, stale-while-revalidate=5")];
        assert_eq!(run_status(200, &swr, &[], 11, &CacheRules::default()), SWR);
        assert_eq!(
            run_status(200, &swr, &[], 11, &grace(30)),
            SWR,
            "response first"
        );
        assert_eq!(
            run_status(200, &swr, &[], 20, &grace(30)),
            GRACE,
            "past swr, in grace"
        );
        let ms = [("cache-control", "max-stale=100")];
        assert_eq!(
            run_status(200, &swr, &ms, 11, &grace(30)),
            ALLOWED,
            "client first"
        );
        assert_eq!(
            SWR.stale_why().map(StaleWhy::detail),
            Some("stale-while-revalidate")
        );
        assert_eq!(GRACE.stale_why().map(StaleWhy::detail), Some("grace"));
        assert_eq!(ALLOWED.stale_why().map(StaleWhy::detail), Some("max-stale"));
        assert_eq!(Decision::Fresh.stale_why(), None);
        assert_eq!(Decision::Revalidate.stale_why(), None);
    }

    #[test]
    fn zero_lifetime_response_stale_only_with_response_or_client_permission() {
        // RFC 5861 §3, RFC 9111 §5.2.1.2: the response's swr and the client's max-stale are
        // explicit permissions even for max-age=0; the operator's grace is not.
        let swr = [("cache-control", "max-age=0, stale-while-revalidate=30")];
        assert_eq!(run_status(200, &swr, &[], 5, &CacheRules::default()), SWR);
        let bare: [(&str, &str); 0] = [];
        let ms = [("cache-control", "max-stale")];
        assert_eq!(
            run_status(200, &bare, &ms, 5, &CacheRules::default()),
            ALLOWED
        );
    }

    #[test]
    fn immutable_does_not_serve_stale() {
        // RFC 8246 §2: immutable speaks only of the freshness lifetime.
        let imm = [("cache-control", "max-age=10, immutable")];
        let rules = CacheRules::default();
        assert_eq!(run_status(200, &imm, &[], 9, &rules), Decision::Fresh);
        assert_eq!(run_status(200, &imm, &[], 10, &rules), Decision::Revalidate);
        assert_eq!(
            run_status(200, &imm, &[], 10_000, &rules),
            Decision::Revalidate
        );
        let no_cache = [("cache-control", "no-cache")];
        assert_eq!(
            run_status(200, &imm, &no_cache, 1, &rules),
            Decision::Revalidate
        );
        let imm_zero = [("cache-control", "max-age=0, immutable")];
        assert_eq!(
            run_status(200, &imm_zero, &[], 0, &grace(30)),
            Decision::Revalidate
        );
    }

    #[test]
    fn s_maxage_beside_max_age_forbids_grace_and_max_stale() {
        // RFC 9111 §5.2.2.10: s-maxage implies proxy-revalidate for a shared cache.
        let both = [("cache-control", "max-age=600, s-maxage=10")];
        assert_eq!(run_status(200, &both, &[], 9, &grace(30)), Decision::Fresh);
        assert_eq!(
            run_status(200, &both, &[], 11, &grace(30)),
            Decision::Revalidate
        );
        let ms = [("cache-control", "max-stale")];
        assert_eq!(
            run_status(200, &both, &ms, 11, &grace(30)),
            Decision::Revalidate
        );
    }

    #[test]
    fn targeted_field_governs_reuse() {
        // RFC 9213 §2.2: CDN-Cache-Control replaces Cache-Control for this cache.
        let rules = CacheRules::default();
        let cdn_longer = [
            ("cache-control", "max-age=5"),
            ("cdn-cache-control", "max-age=60"),
        ];
        assert_eq!(
            run_status(200, &cdn_longer, &[], 30, &rules),
            Decision::Fresh
        );
        let cdn_no_cache = [
            ("cache-control", "max-age=60"),
            ("cdn-cache-control", "no-cache, max-age=60"),
        ];
        assert_eq!(
            run_status(200, &cdn_no_cache, &[], 1, &rules),
            Decision::Revalidate
        );
        let cdn_must_revalidate = [
            ("cache-control", "max-age=10, stale-while-revalidate=100"),
            ("cdn-cache-control", "max-age=10, must-revalidate"),
        ];
        assert_eq!(
            run_status(200, &cdn_must_revalidate, &[], 11, &grace(30)),
            Decision::Revalidate
        );
        let cdn_swr = [
            ("cache-control", "no-cache"),
            ("cdn-cache-control", "max-age=10, stale-while-revalidate=20"),
        ];
        assert_eq!(run_status(200, &cdn_swr, &[], 15, &rules), SWR);
        let invalid = [
            ("cache-control", "max-age=5"),
            ("cdn-cache-control", "max-age=\"60"),
        ];
        assert_eq!(
            run_status(200, &invalid, &[], 30, &rules),
            Decision::Revalidate,
            "an invalid targeted field is ignored: Cache-Control's 5 s apply"
        );
    }

    #[test]
    fn stale_if_error_says_why() {
        // RFC 5861 §4; operator window only for a response once fresh.
        let none = HeaderMap::new();
        let rules = grace(30);
        let (h, t) = stored("max-age=10, stale-if-error=60");
        assert_eq!(
            stale_if_error_why(&none, &h, &t, at(5), &rules),
            None,
            "fresh"
        );
        assert_eq!(
            stale_if_error_why(&none, &h, &t, at(20), &rules),
            Some(StaleWhy::ResponseStaleIfError)
        );
        let (plain, pt) = stored("max-age=10");
        let req_sie = headers(&[("cache-control", "stale-if-error=100")]);
        assert_eq!(
            stale_if_error_why(&req_sie, &plain, &pt, at(50), &rules),
            Some(StaleWhy::ClientStaleIfError)
        );
        let ms = headers(&[("cache-control", "max-stale")]);
        assert_eq!(
            stale_if_error_why(&ms, &plain, &pt, at(500), &CacheRules::default()),
            Some(StaleWhy::ClientMaxStale)
        );
        assert_eq!(
            stale_if_error_why(&none, &plain, &pt, at(20), &rules),
            Some(StaleWhy::OperatorStaleIfError)
        );
        assert_eq!(
            stale_if_error_why(&none, &plain, &pt, at(20), &CacheRules::default()),
            None
        );
        let (zero, zt) = stored("max-age=0");
        assert_eq!(stale_if_error_why(&none, &zero, &zt, at(1), &rules), None);
        assert!(!stale_if_error_allows(&none, &zero, &zt, at(1), &rules));
        assert!(StaleWhy::OperatorStaleIfError.after_error());
        assert!(!StaleWhy::OperatorGrace.after_error());
    }
}
