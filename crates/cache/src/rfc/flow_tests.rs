//! One object's life through the rules in the order the store and switch call them: fill,
//! hit, client conditional and range, stale-while-revalidate, 304 refresh, variant miss,
//! invalidation. Checks that the pieces agree with one another, not only one at a time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderValue, Method, StatusCode};

use super::*;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
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

fn v(s: &'static str) -> HeaderValue {
    HeaderValue::from_static(s)
}

#[test]
fn object_lifecycle_fill_hit_swr_refresh_vary_invalidate() {
    let rules = CacheRules::default();
    let gzip_req = headers(vec![("accept-encoding", v("gzip, br"))]);
    let origin = headers(vec![
        ("cache-control", v("max-age=60, stale-while-revalidate=30")),
        ("etag", v("\"v1\"")),
        ("vary", v("Accept-Encoding")),
        ("content-length", v("10")),
        ("connection", v("close")),
        ("date", date(0)),
    ]);

    // Fill (RFC 9111 §3).
    assert_eq!(
        storability(&Method::GET, &gzip_req, StatusCode::OK, &origin, &rules),
        Ok(())
    );
    let mut stored = headers_to_store(&origin);
    assert!(!stored.contains_key("connection"));
    let mut times = StoredTimes::new(StatusCode::OK, &stored, at(0), at(0), &rules);
    let key = vary_key(&stored, &gzip_req).unwrap();

    // Hit at t=30, same variant with other whitespace (§4.1, §4.2).
    let again = headers(vec![("accept-encoding", v("gzip,br"))]);
    assert_eq!(vary_key(&stored, &again), Some(key.clone()));
    assert_eq!(
        decide(&Method::GET, &again, &stored, &times, at(30), &rules),
        Decision::Fresh
    );
    let status = CacheStatus {
        hit: true,
        ttl: Some(times.ttl(at(30))),
        ..CacheStatus::default()
    };
    assert_eq!(status.header_value(), "capstan; hit; ttl=30");

    // The client's own validators and ranges are answered from the stored copy.
    let inm = headers(vec![("if-none-match", v("W/\"v1\""))]);
    assert_eq!(
        client_conditional(&Method::GET, &inm, &stored),
        Conditional::NotModified
    );
    let last_four = 6..10;
    let ranged = headers(vec![("range", v("bytes=-4")), ("if-range", v("\"v1\""))]);
    assert_eq!(
        parse_range(&Method::GET, &ranged, &stored, 10),
        RangeAnswer::Partial(vec![last_four])
    );

    // Stale at t=70 but inside stale-while-revalidate (RFC 5861 §3).
    let swr = decide(&Method::GET, &again, &stored, &times, at(70), &rules);
    assert_eq!(
        swr,
        Decision::StaleWhileRevalidate {
            why: StaleWhy::ResponseStaleWhileRevalidate
        }
    );
    let conditional = revalidation_headers(&stored);
    assert_eq!(conditional.get("if-none-match").unwrap(), "\"v1\"");

    // The origin answers 304 at t=71 with a longer lifetime (RFC 9111 §4.3.4).
    let mut not_modified = headers(vec![
        ("cache-control", v("max-age=120")),
        ("etag", v("\"v1\"")),
    ]);
    ensure_date(&mut not_modified, at(71));
    assert!(not_modified_applies(&stored, &not_modified));
    merge_not_modified(&mut stored, &not_modified);
    times.refresh(
        StatusCode::OK,
        &stored,
        &not_modified,
        at(70),
        at(71),
        &rules,
    );
    assert_eq!(stored.get("content-length").unwrap(), "10");
    assert_eq!(
        decide(&Method::GET, &again, &stored, &times, at(150), &rules),
        Decision::Fresh
    );
    assert_eq!(times.age_header(at(150)), "80");

    // Another encoding is another variant (vary miss).
    let identity = headers(vec![("accept-encoding", v("identity"))]);
    assert_ne!(vary_key(&stored, &identity), Some(key));

    // A successful PUT on the same target removes it (§4.4).
    let targets = invalidation_targets(
        &Method::PUT,
        StatusCode::NO_CONTENT,
        "h",
        "/a",
        &HeaderMap::new(),
    );
    assert_eq!(targets, vec!["/a"]);
}

#[test]
fn authorized_private_request_is_neither_stored_nor_served() {
    // RFC 9111 §3.5 at both ends: not stored, and a shared entry is not handed to it.
    let rules = CacheRules::default();
    let auth = headers(vec![("authorization", v("Bearer abc"))]);
    let resp = headers(vec![("cache-control", v("max-age=60"))]);
    let refused = storability(&Method::GET, &auth, StatusCode::OK, &resp, &rules);
    assert_eq!(refused.map_err(|e| e.reason()), Err("authorization"));
    let times = StoredTimes::new(StatusCode::OK, &resp, at(0), at(0), &rules);
    assert_eq!(
        decide(&Method::GET, &auth, &resp, &times, at(1), &rules),
        Decision::Revalidate
    );
}

#[test]
fn issue_31_second_request_is_never_a_stale_hit_nobody_allowed() {
    // RFC 9111 §4.2.4: fill, then a second client a few seconds later. Even with an operator
    // grace of 10 s (the switch's old default), nothing without freshness is answered stale.
    let rules = CacheRules {
        grace: Duration::from_secs(10),
        ..CacheRules::default()
    };
    let get = Method::GET;
    let none = HeaderMap::new();
    let cases: [(u16, Vec<(&'static str, HeaderValue)>); 6] = [
        (200, vec![("date", date(0))]),
        (404, vec![("date", date(0)), ("etag", v("\"a\""))]),
        (301, vec![("cache-control", v("max-age=0"))]),
        (503, vec![("date", date(0)), ("expires", date(0))]),
        (410, vec![("expires", v("0"))]),
        (204, vec![("cache-control", v("max-age=-5"))]),
    ];
    for (code, fields) in cases {
        let status = StatusCode::from_u16(code).unwrap();
        let origin = headers(fields);
        assert_eq!(
            storability(&get, &none, status, &origin, &rules),
            Ok(()),
            "{code}"
        );
        let stored = headers_to_store(&origin);
        let times = StoredTimes::new(status, &stored, at(0), at(0), &rules);
        assert_eq!(times.freshness_lifetime, Duration::ZERO, "{code}");
        for later in [0, 1, 5, 9] {
            assert_eq!(
                decide(&get, &none, &stored, &times, at(later), &rules),
                Decision::Revalidate,
                "{code} at {later}"
            );
        }
    }

    // A response that was fresh is covered by the operator's grace, and says so.
    let origin = headers(vec![("cache-control", v("max-age=5")), ("date", date(0))]);
    let times = StoredTimes::new(StatusCode::OK, &origin, at(0), at(0), &rules);
    let d = decide(&get, &none, &origin, &times, at(7), &rules);
    assert_eq!(
        d,
        Decision::StaleWhileRevalidate {
            why: StaleWhy::OperatorGrace
        }
    );
    let status = CacheStatus::stale(times.ttl(at(7)), d.stale_why().unwrap());
    assert_eq!(
        status.header_value(),
        "capstan; hit; fwd=stale; ttl=-2; detail=grace"
    );
}

#[test]
fn cdn_cache_control_fill_and_hit_keep_cache_control_for_downstream() {
    // RFC 9213 §2.2, §3: the CDN field governs this cache; Cache-Control travels untouched.
    let rules = CacheRules::default();
    let origin = headers(vec![
        ("cache-control", v("no-store, private")),
        ("cdn-cache-control", v("max-age=60")),
        ("date", date(0)),
    ]);
    let get = Method::GET;
    let none = HeaderMap::new();
    assert_eq!(
        storability(&get, &none, StatusCode::OK, &origin, &rules),
        Ok(())
    );
    let stored = headers_to_store(&origin);
    assert_eq!(stored.get("cache-control").unwrap(), "no-store, private");
    assert_eq!(stored.get("cdn-cache-control").unwrap(), "max-age=60");
    let times = StoredTimes::new(StatusCode::OK, &stored, at(0), at(0), &rules);
    assert_eq!(times.freshness_lifetime, Duration::from_secs(60));
    assert_eq!(
        decide(&get, &none, &stored, &times, at(59), &rules),
        Decision::Fresh
    );
    assert_eq!(
        decide(&get, &none, &stored, &times, at(60), &rules),
        Decision::Revalidate
    );
}
