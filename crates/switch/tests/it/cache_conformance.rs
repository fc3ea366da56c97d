//! Issue 31 over real sockets: the cache serves a stale response only when the response, the
//! request or the operator explicitly allowed it (RFC 9111 §4.2.4), says why in `Cache-Status`
//! (RFC 9211), never shares a response that had no freshness, and obeys RFC 9213 targeted
//! fields (`CDN-Cache-Control`, or the operator's own list) before `Cache-Control`.
//!
//! Each case asks twice, each time on a new connection (every `send` builds its own client, so
//! the second request comes from another client than the one the response was fetched for),
//! and checks where the answer came from by `Cache-Status` and the origin's request count. The
//! origin makes a response stale by what it sends (`Age`, `Date`, `Expires`), not by the test
//! sleeping; where something happens in the background the test polls with a deadline.

use crate::cache_common;
use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use cache_common::{get, switch_with_cache, Origin, Poll, Script};
use common::Answer;
use hyper::StatusCode;

/// The same path asked by two clients, one after the other.
async fn twice(addr: SocketAddr, path: &str) -> (Answer, Answer) {
    let first = get(addr, path).await;
    let second = get(addr, path).await;
    (first, second)
}

fn cache_status(a: &Answer) -> String {
    a.header("cache-status")
}

fn is_hit(a: &Answer) -> bool {
    cache_status(a).starts_with("capstan; hit")
}

fn script(status: u16, body: &str, headers: &[(&str, String)]) -> Script {
    Script {
        status,
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        body: body.as_bytes().to_vec(),
        ..Script::default()
    }
}

fn http_date(t: SystemTime) -> String {
    httpdate::fmt_http_date(t)
}

/// The configurations every "nobody allowed it" case runs under: the default one, and one
/// where the operator turned grace and stale-if-error on (which must not cover a response that
/// never was fresh).
const CONFIGS: [&str; 2] = ["", "grace = \"60s\"\nstale_if_error = \"60s\""];

/// Asserts that the second client's answer came from the origin, not from what was stored for
/// the first.
fn assert_went_to_origin(origin: &Origin, path: &str, second: &Answer, config: &str) {
    let status = cache_status(second);
    assert!(
        !status.contains("hit") && status.contains("fwd="),
        "{path} ({config:?}): the second client must not get the first one's response: {status}"
    );
    assert_eq!(origin.hits(path), 2, "{path} ({config:?})");
}

#[tokio::test]
async fn a_response_with_no_freshness_information_is_not_given_to_another_client() {
    for config in CONFIGS {
        let origin = Origin::start().await;
        // No Cache-Control, Expires or Last-Modified: a heuristically cachable status, but
        // nothing to base a lifetime on (default_ttl is 0).
        origin.script("/none", script(200, "for client one", &[]));
        let sw = switch_with_cache(&origin, config).await;
        let (first, second) = twice(sw.listen_addrs[0], "/none").await;
        assert_eq!(first.text(), "for client one");
        assert_went_to_origin(&origin, "/none", &second, config);
    }
}

#[tokio::test]
async fn max_age_0_is_stale_at_once_and_not_served_stale() {
    for config in CONFIGS {
        let origin = Origin::start().await;
        origin.script(
            "/zero",
            script(200, "x", &[("cache-control", "max-age=0".into())]),
        );
        let sw = switch_with_cache(&origin, config).await;
        let (_, second) = twice(sw.listen_addrs[0], "/zero").await;
        assert_went_to_origin(&origin, "/zero", &second, config);
    }
}

#[tokio::test]
async fn an_expires_in_the_past_equal_to_date_or_invalid_is_stale_at_once() {
    let now = SystemTime::now();
    let date = http_date(now);
    let cases: [(&str, String); 5] = [
        ("/past", http_date(now - Duration::from_secs(3600))),
        ("/equal", date.clone()),
        ("/zero", "0".into()),
        // A two-digit year in the IMF-fixdate form (not RFC 850's) is invalid, not 2094.
        ("/two-digit-year", "Thu, 01 Dec 94 16:00:00 GMT".into()),
        // Only GMT is a valid zone; a far-future date in another zone is still invalid.
        ("/non-gmt", "Thu, 01 Dec 2099 16:00:00 PST".into()),
    ];
    for config in CONFIGS {
        let origin = Origin::start().await;
        for (path, expires) in &cases {
            origin.script(
                path,
                script(
                    200,
                    path,
                    &[("date", date.clone()), ("expires", expires.clone())],
                ),
            );
        }
        let sw = switch_with_cache(&origin, config).await;
        for (path, _) in &cases {
            let (first, second) = twice(sw.listen_addrs[0], path).await;
            assert_eq!(first.text(), *path);
            assert_went_to_origin(&origin, path, &second, config);
        }
    }
    // The control: an Expires an hour after Date is fresh, and the second client gets a hit.
    let origin = Origin::start().await;
    origin.script(
        "/future",
        script(
            200,
            "x",
            &[
                ("date", date.clone()),
                ("expires", http_date(now + Duration::from_secs(3600))),
            ],
        ),
    );
    let sw = switch_with_cache(&origin, "").await;
    let (_, second) = twice(sw.listen_addrs[0], "/future").await;
    assert!(is_hit(&second), "{}", cache_status(&second));
    assert_eq!(origin.hits("/future"), 1);
}

/// Every status a cache may store, stale on arrival (`Age` past `max-age`): with no
/// permission the second client's request goes to the origin; with the response's
/// `stale-while-revalidate` it is answered stale at once, saying why, and refreshed behind.
#[tokio::test]
async fn stale_responses_of_every_status_need_a_permission() {
    const STATUSES: [u16; 13] = [
        200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 500, 501, 503,
    ];
    let origin = Origin::start().await;
    for status in STATUSES {
        let body = if status == 204 { "" } else { "stored" };
        origin.script(&format!("/none/{status}"), script(status, body, &[]));
        origin.script(
            &format!("/stale/{status}"),
            script(
                status,
                body,
                &[("cache-control", "max-age=1".into()), ("age", "5".into())],
            ),
        );
        origin.script(
            &format!("/swr/{status}"),
            script(
                status,
                body,
                &[
                    (
                        "cache-control",
                        "max-age=1, stale-while-revalidate=600".into(),
                    ),
                    ("age", "5".into()),
                ],
            ),
        );
    }
    let sw = switch_with_cache(&origin, "grace = \"60s\"\nstale_if_error = \"60s\"").await;
    let addr = sw.listen_addrs[0];
    for status in STATUSES {
        for path in [format!("/none/{status}"), format!("/stale/{status}")] {
            let (first, second) = twice(addr, &path).await;
            assert_eq!(first.status.as_u16(), status, "{path}");
            assert_eq!(second.status.as_u16(), status, "{path}");
            assert_went_to_origin(&origin, &path, &second, "grace and stale_if_error 60s");
        }
        let path = format!("/swr/{status}");
        let (first, second) = twice(addr, &path).await;
        assert!(!is_hit(&first), "{path}: {}", cache_status(&first));
        assert_eq!(second.status.as_u16(), status, "{path}");
        let why = cache_status(&second);
        assert!(
            why.starts_with("capstan; hit; fwd=stale; ttl=-")
                && why.ends_with("; detail=stale-while-revalidate"),
            "{path}: {why}"
        );
        // The stale answer started one background refresh.
        origin.wait_hits(&path, 2).await;
    }
}

#[tokio::test]
async fn stale_while_revalidate_is_served_stale_and_says_so() {
    let origin = Origin::start().await;
    origin.script(
        "/swr",
        script(
            200,
            "old",
            &[
                (
                    "cache-control",
                    "max-age=10, stale-while-revalidate=60".into(),
                ),
                ("age", "30".into()),
            ],
        ),
    );
    // Operator grace is off (the default): the response's own window is what allows it.
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    let (first, second) = twice(addr, "/swr").await;
    assert!(
        cache_status(&first).contains("fwd=uri-miss"),
        "{}",
        cache_status(&first)
    );
    assert_eq!(second.text(), "old");
    let why = cache_status(&second);
    assert!(
        why.starts_with("capstan; hit; fwd=stale; ttl=-2")
            && why.ends_with("; detail=stale-while-revalidate"),
        "{why}"
    );
    origin.wait_hits("/swr", 2).await;
    // Past the window (Age 30 + 60 > max-age 10 + 60): no permission, so the origin answers.
    origin.script(
        "/late",
        script(
            200,
            "x",
            &[
                (
                    "cache-control",
                    "max-age=10, stale-while-revalidate=60".into(),
                ),
                ("age", "100".into()),
            ],
        ),
    );
    let (_, second) = twice(addr, "/late").await;
    assert_went_to_origin(&origin, "/late", &second, "");
}

#[tokio::test]
async fn operator_grace_serves_a_once_fresh_response_stale_and_says_so() {
    let origin = Origin::start().await;
    // Fresh when received (one second of freshness left), stale a second later.
    origin.script(
        "/graced",
        script(
            200,
            "v1",
            &[("cache-control", "max-age=2".into()), ("age", "1".into())],
        ),
    );
    let sw = switch_with_cache(&origin, "grace = \"60s\"").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/graced").await;
    let poll = Poll::new("/graced to go stale");
    let stale = loop {
        let a = get(addr, "/graced").await;
        if cache_status(&a).contains("fwd=stale") {
            break a;
        }
        assert!(is_hit(&a), "fresh: a hit: {}", cache_status(&a));
        poll.next().await;
    };
    assert_eq!(stale.text(), "v1");
    let why = cache_status(&stale);
    assert!(
        // ttl is whole seconds: 0 in the first second of staleness, then negative.
        why.starts_with("capstan; hit; fwd=stale; ttl=") && why.ends_with("; detail=grace"),
        "{why}"
    );
    origin.wait_hits("/graced", 2).await;
}

#[tokio::test]
async fn stale_if_error_answers_say_which_permission_and_the_node_status() {
    let origin = Origin::start().await;
    origin.script(
        "/sie",
        script(
            200,
            "kept",
            &[
                ("cache-control", "max-age=1, stale-if-error=600".into()),
                ("age", "5".into()),
            ],
        ),
    );
    let sw = switch_with_cache(&origin, "").await;
    let addr = sw.listen_addrs[0];
    get(addr, "/sie").await;
    origin.script("/sie", script(503, "down", &[]));
    let a = get(addr, "/sie").await;
    assert_eq!((a.status, a.text().as_str()), (StatusCode::OK, "kept"));
    let why = cache_status(&a);
    assert!(
        why.starts_with("capstan; fwd=stale; fwd-status=503; ttl=-")
            && why.ends_with("; detail=stale-if-error"),
        "{why}"
    );
    assert_eq!(origin.hits("/sie"), 2);
}

#[tokio::test]
async fn cdn_cache_control_no_store_beside_max_age_is_not_stored() {
    let origin = Origin::start().await;
    origin.script(
        "/cdn-no-store",
        script(
            200,
            "x",
            &[
                ("cache-control", "max-age=60".into()),
                ("cdn-cache-control", "no-store".into()),
            ],
        ),
    );
    let sw = switch_with_cache(&origin, "").await;
    let (first, second) = twice(sw.listen_addrs[0], "/cdn-no-store").await;
    assert!(
        !cache_status(&first).contains("stored"),
        "{}",
        cache_status(&first)
    );
    assert_went_to_origin(&origin, "/cdn-no-store", &second, "");
}

#[tokio::test]
async fn cdn_cache_control_max_age_beside_no_store_is_stored_and_passes_no_store_on() {
    let origin = Origin::start().await;
    origin.script(
        "/cdn-only",
        script(
            200,
            "x",
            &[
                ("cache-control", "no-store".into()),
                ("cdn-cache-control", "max-age=60".into()),
            ],
        ),
    );
    let sw = switch_with_cache(&origin, "").await;
    let (first, second) = twice(sw.listen_addrs[0], "/cdn-only").await;
    assert!(
        cache_status(&first).contains("stored"),
        "{}",
        cache_status(&first)
    );
    assert!(is_hit(&second), "{}", cache_status(&second));
    assert_eq!(origin.hits("/cdn-only"), 1);
    // Cache-Control is for the caches after this one (the browser): it goes on unchanged.
    assert_eq!(second.header("cache-control"), "no-store");
    // With targeting off, Cache-Control alone decides: not stored.
    let origin = Origin::start().await;
    origin.script(
        "/cdn-only",
        script(
            200,
            "x",
            &[
                ("cache-control", "no-store".into()),
                ("cdn-cache-control", "max-age=60".into()),
            ],
        ),
    );
    let sw = switch_with_cache(&origin, "targeted_fields = []").await;
    let (_, second) = twice(sw.listen_addrs[0], "/cdn-only").await;
    assert_went_to_origin(&origin, "/cdn-only", &second, "targeted_fields = []");
}

#[tokio::test]
async fn an_own_targeted_field_takes_precedence_over_cdn_cache_control() {
    let own = "targeted_fields = [\"Capstan-Cache-Control\", \"CDN-Cache-Control\"]";
    let origin = Origin::start().await;
    origin.script(
        "/own-stores",
        script(
            200,
            "x",
            &[
                ("cache-control", "no-store".into()),
                ("cdn-cache-control", "no-store".into()),
                ("capstan-cache-control", "max-age=60".into()),
            ],
        ),
    );
    origin.script(
        "/own-forbids",
        script(
            200,
            "x",
            &[
                ("cache-control", "max-age=60".into()),
                ("cdn-cache-control", "max-age=60".into()),
                ("capstan-cache-control", "no-store".into()),
            ],
        ),
    );
    let sw = switch_with_cache(&origin, own).await;
    let addr = sw.listen_addrs[0];
    let (_, second) = twice(addr, "/own-stores").await;
    assert!(is_hit(&second), "{}", cache_status(&second));
    assert_eq!(origin.hits("/own-stores"), 1);
    let (_, second) = twice(addr, "/own-forbids").await;
    assert_went_to_origin(&origin, "/own-forbids", &second, own);
    // By default the operator's own field means nothing: CDN-Cache-Control decides.
    let origin = Origin::start().await;
    origin.script(
        "/own-stores",
        script(
            200,
            "x",
            &[
                ("cache-control", "no-store".into()),
                ("cdn-cache-control", "no-store".into()),
                ("capstan-cache-control", "max-age=60".into()),
            ],
        ),
    );
    let sw = switch_with_cache(&origin, "").await;
    let (_, second) = twice(sw.listen_addrs[0], "/own-stores").await;
    assert_went_to_origin(&origin, "/own-stores", &second, "default targeted_fields");
}
