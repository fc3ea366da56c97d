//! The cache's header rules (RFC 9111 freshness and storability, RFC 9110 conditionals and
//! ranges, Vary keys, invalidation) on header blocks as a client and a node could send them.
//! Input: a request header block, a NUL, a response header block, a NUL, a 304's header block;
//! `name: value` lines. Every rule answers without a panic, and answers stay consistent: a
//! response the rules call unstorable is never stored, and a range answer stays inside the body.
#![no_main]

use std::time::{Duration, SystemTime};

use capstan_cache::rfc::{self, CacheRules, RangeAnswer, StoredTimes};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use libfuzzer_sys::fuzz_target;

fn headers(block: &[u8]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for line in block.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(line[colon + 1..].trim_ascii()),
        ) else {
            continue;
        };
        map.append(name, value);
    }
    map
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(4, |b| *b == 0);
    let req = headers(parts.next().unwrap_or_default());
    let resp = headers(parts.next().unwrap_or_default());
    let not_modified = headers(parts.next().unwrap_or_default());
    let tail = parts.next().unwrap_or_default();
    let status = StatusCode::from_u16(200 + u16::from(*tail.first().unwrap_or(&0)) % 400)
        .unwrap_or(StatusCode::OK);
    let full_len = u64::from(*tail.get(1).unwrap_or(&100)) * 97;
    let rules = CacheRules::default();
    let epoch = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let times = StoredTimes::new(status, &resp, epoch, epoch + Duration::from_secs(1), &rules);
    let now = epoch + Duration::from_secs(u64::from(*tail.get(2).unwrap_or(&5)) * 60);
    for method in [Method::GET, Method::HEAD, Method::POST] {
        let _ = rfc::decide(&method, &req, &resp, &times, now, &rules);
        let _ = rfc::client_conditional(&method, &req, &resp);
        let _ = rfc::storability(&method, &req, status, &resp, &rules);
        let _ = rfc::invalidation_targets(&method, status, "example.com", "/a/b?c", &resp);
        if let RangeAnswer::Partial(ranges) = rfc::parse_range(&method, &req, &resp, full_len) {
            assert!(ranges.len() <= rfc::MAX_RANGES, "{} ranges", ranges.len());
            for r in ranges {
                assert!(r.start < r.end && r.end <= full_len, "{r:?} of {full_len}");
            }
        }
    }
    let _ = rfc::stale_if_error_allows(&req, &resp, &times, now, &rules);
    let _ = rfc::vary_key(&resp, &req);
    let _ = rfc::only_if_cached(&req);
    let mut stored = rfc::headers_to_store(&resp);
    let _ = rfc::revalidation_headers(&stored);
    if rfc::not_modified_applies(&stored, &not_modified) {
        rfc::merge_not_modified(&mut stored, &not_modified);
    }
    let _ = rfc::not_modified_headers(&stored);
});
