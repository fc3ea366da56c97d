//! Freshness lifetime (RFC 9111 §4.2.1, heuristics §4.2.2) and age (§4.2.3) of a stored
//! response.
//!
//! HTTP dates are wall-clock, so every instant is a [`SystemTime`] passed in by the caller;
//! nothing here reads a clock. Differences that would be negative (clock skew, a caller passing
//! times out of order) clamp to zero rather than fail.

use std::time::{Duration, SystemTime};

use http::header::{AGE, DATE, EXPIRES, LAST_MODIFIED};
use http::{HeaderMap, HeaderValue, StatusCode};

use super::cache_control::CacheControl;
use super::fields::{header_date, parse_delta_seconds, DELTA_SECONDS_MAX};
use super::rules::CacheRules;
use super::storable::is_heuristically_cacheable;
use super::targeted::response_directives;

/// The freshness lifetime of a response for a shared cache (RFC 9111 §4.2.1), first match wins:
///
/// 0. the directives are those of the first targeted field of `rules.targeted_fields` that is
///    present and valid (RFC 9213 §2.2), else `Cache-Control`; with a targeted field, `Expires`
///    is ignored (step 3 is skipped),
/// 1. `s-maxage`, 2. `max-age` (an invalid or negative one reads as 0: stale at once),
/// 3. `Expires` − `Date`: an `Expires` at or before `Date` gives 0; an invalid `Expires`
///    (`0`, a two-digit year in the IMF-fixdate form, a zone other than `GMT`, …) and a
///    repeated one mean already expired (RFC 9111 §5.3, §4.2.1), so 0; a missing `Date` is
///    `response_time`, the moment the response was received,
/// 4. heuristic (§4.2.2), only for heuristically cachable statuses or `public` responses:
///    `heuristic_fraction` × (`Date` − `Last-Modified`), capped at `heuristic_max`; with no
///    usable `Last-Modified`, `rules.default_ttl` (zero unless the operator sets one),
/// 5. zero.
///
/// A zero lifetime is stale from the first use: such a response may be stored, but
/// [`super::decide::decide`] answers it only after validation (or with the response's or the
/// client's explicit permission to serve it stale).
pub fn freshness_lifetime(
    status: StatusCode,
    resp: &HeaderMap,
    response_time: SystemTime,
    rules: &CacheRules,
) -> Duration {
    let (cc, targeted) = response_directives(resp, &rules.targeted_fields);
    if let Some(s_maxage) = cc.s_maxage {
        return s_maxage;
    }
    if let Some(max_age) = cc.max_age {
        return max_age;
    }
    if targeted.is_none() {
        let mut lines = resp.get_all(EXPIRES).iter();
        if let Some(first) = lines.next() {
            let Some(expires) = super::fields::parse_date(first).filter(|_| lines.next().is_none())
            else {
                return Duration::ZERO;
            };
            let date = date_value(resp, response_time);
            return expires.duration_since(date).unwrap_or_default();
        }
    }
    if !(is_heuristically_cacheable(status) || cc.public) {
        return Duration::ZERO;
    }
    heuristic_lifetime(resp, response_time, rules)
}

fn heuristic_lifetime(resp: &HeaderMap, response_time: SystemTime, rules: &CacheRules) -> Duration {
    let date = date_value(resp, response_time);
    // A Last-Modified after Date is nonsense (§4.2.2 wants "a time in the past"): treat it as
    // absent rather than as a zero interval.
    let Some(unchanged_for) =
        header_date(resp, LAST_MODIFIED).and_then(|lm| date.duration_since(lm).ok())
    else {
        return rules.default_ttl;
    };
    let fraction = rules.heuristic_fraction;
    if !(fraction.is_finite() && fraction >= 0.0) {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(unchanged_for.as_secs_f64() * fraction)
        .unwrap_or(Duration::MAX)
        .min(rules.heuristic_max)
}

/// The `Date` of a response, or `response_time` when missing or invalid (RFC 9110 §6.6.1: a
/// recipient records the time it received an undated response).
fn date_value(resp: &HeaderMap, response_time: SystemTime) -> SystemTime {
    header_date(resp, DATE).unwrap_or(response_time)
}

/// Adds a `Date` field set to `response_time` when the response has none, as RFC 9110 §6.6.1
/// asks of a recipient with a clock that caches or forwards it. Call it on a received response
/// (including a 304, before [`super::validate::merge_not_modified`]).
pub fn ensure_date(resp: &mut HeaderMap, response_time: SystemTime) {
    if !resp.contains_key(DATE) {
        let value = httpdate::fmt_http_date(response_time);
        if let Ok(value) = HeaderValue::from_str(&value) {
            resp.insert(DATE, value);
        }
    }
}

/// What a cache keeps about a stored response to compute its age later (RFC 9111 §4.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredTimes {
    /// When the request that got this response was sent.
    pub request_time: SystemTime,
    /// When the response was received.
    pub response_time: SystemTime,
    /// The age the response already had when received.
    pub corrected_initial_age: Duration,
    /// How long it is fresh, measured from age zero.
    pub freshness_lifetime: Duration,
    /// Whether one of the rules' targeted fields (RFC 9213) gave the response's directives
    /// when it was stored or last refreshed. When not, a hit reads its `Cache-Control` alone
    /// and looks for no targeted field (most responses carry none); like the lifetime, this is
    /// decided under the rules of that moment.
    pub targeted: bool,
}

impl StoredTimes {
    /// Records a response received at `response_time` for a request sent at `request_time`.
    ///
    /// ```text
    /// apparent_age          = max(0, response_time - date_value)
    /// corrected_age_value   = age_value + (response_time - request_time)
    /// corrected_initial_age = max(apparent_age, corrected_age_value)
    /// ```
    /// A missing `Date` makes the apparent age 0; a `Date` after `response_time` (clock skew)
    /// does too. `Age` (RFC 9111 §5.1) is read from the first member of its first line (a
    /// list such as `Age: 10, 20` gives 10); a member that is not a non-negative integer
    /// (`10s`, `-5`, `1.5`) is ignored, i.e. `age_value` is 0, as §5.1 says a cache SHOULD.
    /// The `Date`-based apparent age still counts in that case.
    pub fn new(
        status: StatusCode,
        resp: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
        rules: &CacheRules,
    ) -> StoredTimes {
        StoredTimes {
            request_time,
            response_time,
            corrected_initial_age: corrected_initial_age(resp, request_time, response_time),
            freshness_lifetime: freshness_lifetime(status, resp, response_time, rules),
            targeted: response_directives(resp, &rules.targeted_fields)
                .1
                .is_some(),
        }
    }

    /// Updates the times after a `304 Not Modified` refreshed the stored response (RFC 9111
    /// §4.3.4): the age restarts from the 304 (`not_modified`, its own `Date` and `Age`, with the
    /// new request and response times), and the lifetime is recomputed from `merged`, the stored
    /// fields after [`super::validate::merge_not_modified`]. `status` is the stored status.
    pub fn refresh(
        &mut self,
        status: StatusCode,
        merged: &HeaderMap,
        not_modified: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
        rules: &CacheRules,
    ) {
        self.request_time = request_time;
        self.response_time = response_time;
        self.corrected_initial_age =
            corrected_initial_age(not_modified, request_time, response_time);
        self.freshness_lifetime = freshness_lifetime(status, merged, response_time, rules);
        self.targeted = response_directives(merged, &rules.targeted_fields)
            .1
            .is_some();
    }

    /// The stored response's directives: its first valid targeted field's when one applied
    /// when it was stored ([`StoredTimes::targeted`]), else its `Cache-Control`'s.
    pub fn directives(&self, stored_resp: &HeaderMap, rules: &CacheRules) -> CacheControl {
        match self.targeted {
            true => response_directives(stored_resp, &rules.targeted_fields).0,
            false => CacheControl::parse(stored_resp),
        }
    }

    /// `current_age = corrected_initial_age + (now - response_time)` (RFC 9111 §4.2.3).
    pub fn current_age(&self, now: SystemTime) -> Duration {
        let resident = now.duration_since(self.response_time).unwrap_or_default();
        self.corrected_initial_age.saturating_add(resident)
    }

    /// Fresh while the current age is below the lifetime; stale from the moment they are equal
    /// (RFC 9111 §4.2: `response_is_fresh = (freshness_lifetime > current_age)`).
    pub fn is_fresh(&self, now: SystemTime) -> bool {
        self.freshness_lifetime > self.current_age(now)
    }

    /// How long past its lifetime the response is; zero while fresh and at the boundary.
    pub fn staleness(&self, now: SystemTime) -> Duration {
        self.current_age(now)
            .saturating_sub(self.freshness_lifetime)
    }

    /// Remaining freshness in whole seconds, negative once stale (RFC 9211 `ttl`).
    pub fn ttl(&self, now: SystemTime) -> i64 {
        let age = self.current_age(now);
        let lifetime = self.freshness_lifetime;
        let secs = |d: Duration| i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        if lifetime >= age {
            secs(lifetime - age)
        } else {
            -secs(age - lifetime)
        }
    }

    /// The `Age` field value to send with the stored response at `now`: whole seconds, capped
    /// at 2^31 (RFC 9111 §5.1, §1.2.2).
    pub fn age_header(&self, now: SystemTime) -> HeaderValue {
        HeaderValue::from(self.current_age(now).as_secs().min(DELTA_SECONDS_MAX))
    }
}

fn corrected_initial_age(
    resp: &HeaderMap,
    request_time: SystemTime,
    response_time: SystemTime,
) -> Duration {
    let date = date_value(resp, response_time);
    let apparent_age = response_time.duration_since(date).unwrap_or_default();
    let response_delay = response_time
        .duration_since(request_time)
        .unwrap_or_default();
    let age_value = resp
        .get(AGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .and_then(|v| parse_delta_seconds(v.trim()))
        .unwrap_or_default();
    apparent_age.max(age_value.saturating_add(response_delay))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    const T0: u64 = 1_700_000_000;

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(T0 + secs)
    }

    fn date(secs: u64) -> HeaderValue {
        HeaderValue::from_str(&httpdate::fmt_http_date(at(secs))).unwrap()
    }

    fn headers(pairs: Vec<(&'static str, HeaderValue)>) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(n, v);
        }
        h
    }

    fn cc(v: &'static str) -> (&'static str, HeaderValue) {
        ("cache-control", HeaderValue::from_static(v))
    }

    fn lifetime(status: u16, h: &HeaderMap) -> Duration {
        let status = StatusCode::from_u16(status).unwrap();
        freshness_lifetime(status, h, at(0), &CacheRules::default())
    }

    #[test]
    fn s_maxage_overrides_max_age() {
        // RFC 9111 §4.2.1, §5.2.2.10
        let h = headers(vec![cc("max-age=100, s-maxage=7")]);
        assert_eq!(lifetime(200, &h), Duration::from_secs(7));
    }

    #[test]
    fn max_age_overrides_expires() {
        // RFC 9111 §5.3: Expires is ignored when max-age is present.
        let h = headers(vec![
            cc("max-age=30"),
            ("date", date(0)),
            ("expires", date(500)),
        ]);
        assert_eq!(lifetime(200, &h), Duration::from_secs(30));
    }

    #[test]
    fn expires_minus_date() {
        // RFC 9111 §4.2.1
        let h = headers(vec![("date", date(10)), ("expires", date(70))]);
        assert_eq!(lifetime(200, &h), Duration::from_secs(60));
        let past = headers(vec![("date", date(10)), ("expires", date(5))]);
        assert_eq!(lifetime(200, &past), Duration::ZERO);
    }

    #[test]
    fn invalid_expires_means_expired() {
        // RFC 9111 §5.3: an invalid Expires (e.g. "0") represents a time in the past.
        let h = headers(vec![
            ("date", date(0)),
            ("expires", HeaderValue::from_static("0")),
            ("last-modified", date(0)),
        ]);
        assert_eq!(lifetime(200, &h), Duration::ZERO);
    }

    #[test]
    fn expires_without_date_uses_response_time() {
        // RFC 9110 §6.6.1: a missing Date is the time of receipt.
        let h = headers(vec![("expires", date(45))]);
        assert_eq!(lifetime(200, &h), Duration::from_secs(45));
    }

    #[test]
    fn heuristic_is_fraction_of_last_modified_interval() {
        // RFC 9111 §4.2.2
        let h = headers(vec![("date", date(10_000)), ("last-modified", date(0))]);
        assert_eq!(lifetime(200, &h), Duration::from_secs(1_000));
    }

    #[test]
    fn heuristic_capped() {
        // RFC 9111 §4.2.2 (upper bound chosen by the cache)
        let h = headers(vec![
            ("date", date(100 * 86_400)),
            ("last-modified", date(0)),
        ]);
        assert_eq!(lifetime(200, &h), Duration::from_secs(86_400));
    }

    #[test]
    fn heuristic_not_allowed_for_302_and_307() {
        // RFC 9111 §4.2.2: only heuristically cacheable statuses (or public).
        let h = headers(vec![("date", date(10_000)), ("last-modified", date(0))]);
        assert_eq!(lifetime(302, &h), Duration::ZERO);
        assert_eq!(lifetime(307, &h), Duration::ZERO);
        let public = headers(vec![
            cc("public"),
            ("date", date(10_000)),
            ("last-modified", date(0)),
        ]);
        assert_eq!(lifetime(302, &public), Duration::from_secs(1_000));
    }

    #[test]
    fn heuristic_not_used_with_explicit_freshness() {
        // RFC 9111 §4.2.2: MUST NOT use heuristics when an explicit expiration time is present.
        let h = headers(vec![
            cc("max-age=0"),
            ("date", date(10_000)),
            ("last-modified", date(0)),
        ]);
        assert_eq!(lifetime(200, &h), Duration::ZERO);
    }

    #[test]
    fn default_ttl_only_without_last_modified_and_for_heuristic_statuses() {
        let rules = CacheRules {
            default_ttl: Duration::from_secs(90),
            ..CacheRules::default()
        };
        let bare = HeaderMap::new();
        let ok = freshness_lifetime(StatusCode::OK, &bare, at(0), &rules);
        assert_eq!(ok, Duration::from_secs(90));
        let found = freshness_lifetime(StatusCode::FOUND, &bare, at(0), &rules);
        assert_eq!(found, Duration::ZERO);
        let lm = headers(vec![("date", date(100)), ("last-modified", date(0))]);
        let with_lm = freshness_lifetime(StatusCode::OK, &lm, at(0), &rules);
        assert_eq!(with_lm, Duration::from_secs(10));
    }

    fn times(h: &HeaderMap, request: u64, response: u64) -> StoredTimes {
        StoredTimes::new(
            StatusCode::OK,
            h,
            at(request),
            at(response),
            &CacheRules::default(),
        )
    }

    #[test]
    fn fresh_until_age_equals_lifetime() {
        // RFC 9111 §4.2: fresh iff freshness_lifetime > current_age.
        let h = headers(vec![cc("max-age=10"), ("date", date(0))]);
        let t = times(&h, 0, 0);
        assert!(t.is_fresh(at(9)));
        assert!(!t.is_fresh(at(10)), "stale at age == lifetime");
        assert_eq!(t.ttl(at(4)), 6);
        assert_eq!(t.ttl(at(13)), -3);
    }

    #[test]
    fn upstream_age_header_added_via_corrected_initial_age() {
        // RFC 9111 §4.2.3: corrected_age_value = age_value + response_delay
        let h = headers(vec![
            cc("max-age=100"),
            ("date", date(2)),
            ("age", HeaderValue::from_static("30")),
        ]);
        let t = times(&h, 0, 2);
        assert_eq!(t.corrected_initial_age, Duration::from_secs(32));
        assert_eq!(t.current_age(at(12)), Duration::from_secs(42));
        assert_eq!(t.age_header(at(12)), HeaderValue::from_static("42"));
    }

    #[test]
    fn date_missing_uses_response_time() {
        // RFC 9111 §4.2.3 with RFC 9110 §6.6.1: apparent_age is 0 without a Date.
        let h = headers(vec![cc("max-age=100")]);
        let t = times(&h, 5, 5);
        assert_eq!(t.corrected_initial_age, Duration::ZERO);
    }

    #[test]
    fn clock_skew_date_after_response_time_gives_zero_apparent_age() {
        // RFC 9111 §4.2.3: apparent_age = max(0, response_time - date_value)
        let h = headers(vec![cc("max-age=100"), ("date", date(500))]);
        let t = times(&h, 9, 10);
        assert_eq!(
            t.corrected_initial_age,
            Duration::from_secs(1),
            "only the delay"
        );
    }

    #[test]
    fn apparent_age_from_old_date() {
        // RFC 9111 §4.2.3: a Date well before receipt dominates.
        let h = headers(vec![cc("max-age=100"), ("date", date(0))]);
        let t = times(&h, 60, 60);
        assert_eq!(t.corrected_initial_age, Duration::from_secs(60));
    }

    #[test]
    fn age_header_capped_and_not_negative_before_response_time() {
        let h = headers(vec![("age", HeaderValue::from_static("99999999999"))]);
        let t = times(&h, 0, 0);
        assert_eq!(t.age_header(at(0)), HeaderValue::from(DELTA_SECONDS_MAX));
        let plain = times(&HeaderMap::new(), 10, 10);
        assert_eq!(
            plain.current_age(at(3)),
            Duration::ZERO,
            "now before receipt"
        );
    }

    #[test]
    fn refresh_restarts_age_from_the_304() {
        // RFC 9111 §4.3.4: the stored response is updated and its age restarts.
        let old = headers(vec![cc("max-age=10"), ("date", date(0))]);
        let mut t = times(&old, 0, 0);
        assert!(!t.is_fresh(at(100)));
        let not_modified = headers(vec![cc("max-age=60"), ("date", date(100))]);
        let mut merged = old.clone();
        super::super::validate::merge_not_modified(&mut merged, &not_modified);
        t.refresh(
            StatusCode::OK,
            &merged,
            &not_modified,
            at(99),
            at(100),
            &CacheRules::default(),
        );
        assert_eq!(t.freshness_lifetime, Duration::from_secs(60));
        assert_eq!(t.current_age(at(100)), Duration::from_secs(1));
        assert!(t.is_fresh(at(150)));
    }

    #[test]
    fn ensure_date_adds_missing_date_only() {
        // RFC 9110 §6.6.1
        let mut h = HeaderMap::new();
        ensure_date(&mut h, at(7));
        assert_eq!(h.get(DATE), Some(&date(7)));
        ensure_date(&mut h, at(99));
        assert_eq!(h.get(DATE), Some(&date(7)));
    }

    #[test]
    fn no_freshness_information_is_zero_lifetime() {
        // RFC 9111 §4.2.2 (issue 31): no Cache-Control, Expires or Last-Modified and no
        // operator default_ttl: stored, but stale from the first use.
        for status in [200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501] {
            let with_date = headers(vec![("date", date(0))]);
            assert_eq!(lifetime(status, &with_date), Duration::ZERO, "{status}");
            assert_eq!(
                lifetime(status, &HeaderMap::new()),
                Duration::ZERO,
                "{status}"
            );
        }
    }

    #[test]
    fn max_age_zero_negative_or_invalid_is_stale_at_once() {
        // RFC 9111 §4.2.1, §5.2.2.1: delta-seconds is 1*DIGIT; anything else is invalid.
        for v in [
            "max-age=0",
            "max-age=-1",
            "max-age=-0",
            "max-age=1.5",
            "max-age=60s",
            "max-age=",
            "max-age",
        ] {
            let h = headers(vec![
                cc(v),
                ("date", date(10_000)),
                ("last-modified", date(0)),
            ]);
            assert_eq!(lifetime(200, &h), Duration::ZERO, "{v}");
        }
    }

    #[test]
    fn max_age_already_passed_by_age_is_stale_at_once() {
        // RFC 9111 §4.2.3: an upstream Age beyond max-age makes the response arrive stale.
        let h = headers(vec![
            cc("max-age=60"),
            ("age", HeaderValue::from_static("61")),
        ]);
        let t = times(&h, 0, 0);
        assert!(!t.is_fresh(at(0)));
        assert_eq!(t.ttl(at(0)), -1);
    }

    #[test]
    fn expires_equal_to_date_is_stale_at_once() {
        // RFC 9111 §4.2.1: freshness_lifetime = Expires − Date = 0.
        let h = headers(vec![("date", date(10)), ("expires", date(10))]);
        assert_eq!(lifetime(200, &h), Duration::ZERO);
    }

    #[test]
    fn every_invalid_expires_means_already_expired() {
        // RFC 9111 §5.3: "A cache recipient MUST interpret invalid date formats, especially the
        // value "0", as representing a time in the past". Each also carries a Last-Modified
        // that would otherwise give a heuristic lifetime.
        for bad in [
            "0",
            "-1",
            "",
            "never",
            "Thu, 01 Dec 94 16:00:00 GMT", // two-digit year in IMF-fixdate
            "Thu, 01 Dec 2099 16:00:00 PST", // zone other than GMT
            "Thu, 01 Dec 2099 16:00:00 +0000",
            "Thu, 01 Dec 2099 16:00:00", // no zone
            "2099-12-01T16:00:00Z",      // ISO 8601
            "Thu, 01 Dec 2099 16:00:00 GMT, Fri, 02 Dec 2099 16:00:00 GMT", // a list
        ] {
            let h = headers(vec![
                ("date", date(10_000)),
                ("expires", HeaderValue::from_static(bad)),
                ("last-modified", date(0)),
            ]);
            assert_eq!(lifetime(200, &h), Duration::ZERO, "{bad:?}");
        }
    }

    #[test]
    fn rfc850_two_digit_year_is_valid_and_in_the_past() {
        // RFC 9110 §5.6.7: recipients accept rfc850-date; "94" is 1994, long expired.
        let h = headers(vec![
            ("date", date(0)),
            (
                "expires",
                HeaderValue::from_static("Sunday, 06-Nov-94 08:49:37 GMT"),
            ),
        ]);
        assert_eq!(lifetime(200, &h), Duration::ZERO);
    }

    #[test]
    fn repeated_expires_is_stale() {
        // RFC 9111 §4.2.1: with two Expires lines, "the response should be considered stale".
        let h = headers(vec![
            ("date", date(0)),
            ("expires", date(100)),
            ("expires", date(200)),
        ]);
        assert_eq!(lifetime(200, &h), Duration::ZERO);
    }

    #[test]
    fn targeted_field_overrides_cache_control_and_expires() {
        // RFC 9213 §2.2: the first valid targeted field replaces Cache-Control and Expires.
        let h = headers(vec![
            cc("max-age=5, private"),
            ("cdn-cache-control", HeaderValue::from_static("max-age=600")),
        ]);
        assert_eq!(lifetime(200, &h), Duration::from_secs(600));
        let expires_ignored = headers(vec![
            ("date", date(0)),
            ("expires", date(3_600)),
            (
                "cdn-cache-control",
                HeaderValue::from_static("must-revalidate"),
            ),
        ]);
        assert_eq!(
            lifetime(302, &expires_ignored),
            Duration::ZERO,
            "no max-age in the targeted field, Expires ignored, 302 not heuristic"
        );
        let invalid = headers(vec![
            cc("max-age=5"),
            (
                "cdn-cache-control",
                HeaderValue::from_static("max-age=600,"),
            ),
        ]);
        assert_eq!(
            lifetime(200, &invalid),
            Duration::from_secs(5),
            "invalid: ignored"
        );
        let off = CacheRules {
            targeted_fields: Vec::new(),
            ..CacheRules::default()
        };
        assert_eq!(
            freshness_lifetime(StatusCode::OK, &h, at(0), &off),
            Duration::from_secs(5),
            "an empty target list ignores CDN-Cache-Control"
        );
    }

    #[test]
    fn stored_times_say_whether_a_targeted_field_gave_the_directives() {
        let rules = CacheRules::default();
        let plain = headers(vec![cc("max-age=5")]);
        let targeted = headers(vec![
            cc("max-age=5"),
            ("cdn-cache-control", HeaderValue::from_static("no-cache")),
        ]);
        let invalid = headers(vec![
            cc("max-age=5"),
            ("cdn-cache-control", HeaderValue::from_static("max-age=\"x")),
        ]);
        let t = |h: &HeaderMap| StoredTimes::new(StatusCode::OK, h, at(0), at(0), &rules);
        assert!(!t(&plain).targeted);
        assert!(t(&targeted).targeted);
        assert!(
            !t(&invalid).targeted,
            "an invalid targeted field is as if absent"
        );
        // What a hit reads: the targeted field's directives, or Cache-Control's alone.
        assert!(t(&targeted)
            .directives(&targeted, &rules)
            .no_cache
            .is_some());
        assert!(t(&plain).directives(&plain, &rules).no_cache.is_none());
        assert_eq!(
            t(&invalid).directives(&invalid, &rules).max_age,
            Some(Duration::from_secs(5))
        );
        // A refresh (304) that adds the field makes it count.
        let mut times = t(&plain);
        times.refresh(StatusCode::OK, &targeted, &targeted, at(1), at(1), &rules);
        assert!(times.targeted);
    }

    #[test]
    fn own_targeted_field_precedes_cdn_cache_control() {
        // RFC 9213 §2.2: the target list order decides.
        let rules = CacheRules {
            targeted_fields: vec![
                super::super::rules::targeted_field("Capstan-CDN-Cache-Control").unwrap(),
                super::super::rules::targeted_field("CDN-Cache-Control").unwrap(),
            ],
            ..CacheRules::default()
        };
        let h = headers(vec![
            cc("max-age=5"),
            ("cdn-cache-control", HeaderValue::from_static("max-age=60")),
            (
                "capstan-cdn-cache-control",
                HeaderValue::from_static("max-age=600"),
            ),
        ]);
        let got = freshness_lifetime(StatusCode::OK, &h, at(0), &rules);
        assert_eq!(got, Duration::from_secs(600));
    }

    #[test]
    fn age_list_uses_first_member_and_invalid_age_is_ignored() {
        // RFC 9111 §5.1: use the first member of a list-based Age; ignore an invalid value.
        for (value, expected) in [
            ("10, 20", 10),
            ("10,20", 10),
            (" 7 ", 7),
            ("10s", 0),
            ("-5", 0),
            ("1.5", 0),
            ("", 0),
            ("abc, 20", 0),
        ] {
            let h = headers(vec![
                cc("max-age=100"),
                ("age", HeaderValue::from_static(value)),
            ]);
            let t = times(&h, 0, 0);
            assert_eq!(
                t.corrected_initial_age,
                Duration::from_secs(expected),
                "Age: {value:?}"
            );
        }
        let two_lines = headers(vec![
            cc("max-age=100"),
            ("age", HeaderValue::from_static("3")),
            ("age", HeaderValue::from_static("50")),
        ]);
        assert_eq!(
            times(&two_lines, 0, 0).corrected_initial_age,
            Duration::from_secs(3)
        );
    }
}
