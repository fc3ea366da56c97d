//! How a cache answers a request from a stored response, before any byte of the body moves:
//! the client's preconditions first (RFC 9110 §13.2.2: `304`, `412`), then `Range` (§14: `206`,
//! `416`). Pure: no clock, no I/O; the `Age` it then carries is
//! [`super::StoredTimes::age_header`].

use std::ops::Range;

use http::{HeaderMap, Method, StatusCode};

use super::{client_conditional, parse_range, Conditional, RangeAnswer};

/// What to send for a request answered from a stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredAnswer {
    /// `304 Not Modified` with [`super::not_modified_headers`].
    NotModified,
    /// `412 Precondition Failed`, without a body.
    PreconditionFailed,
    /// `416 Range Not Satisfiable` with [`super::unsatisfied_content_range`].
    RangeNotSatisfiable,
    /// `206 Partial Content` of these ranges (see [`RangeAnswer::Partial`]), with `Age`.
    Partial(Vec<Range<u64>>),
    /// The whole stored response, with `Age`.
    Full,
}

/// Decides the answer to `method` with request fields `req` from a stored response of `status`
/// with fields `stored` and a body of `body_len` bytes. A range applies only to a `200` answer
/// to a `GET`.
pub fn stored_answer(
    method: &Method,
    req: &HeaderMap,
    stored: &HeaderMap,
    status: StatusCode,
    body_len: u64,
) -> StoredAnswer {
    match client_conditional(method, req, stored) {
        Conditional::NotModified => return StoredAnswer::NotModified,
        Conditional::PreconditionFailed => return StoredAnswer::PreconditionFailed,
        Conditional::None => {}
    }
    if status != StatusCode::OK || *method != Method::GET {
        return StoredAnswer::Full;
    }
    match parse_range(method, req, stored, body_len) {
        RangeAnswer::Full => StoredAnswer::Full,
        RangeAnswer::Partial(ranges) => StoredAnswer::Partial(ranges),
        RangeAnswer::Unsatisfiable => StoredAnswer::RangeNotSatisfiable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{ETAG, IF_MATCH, IF_NONE_MATCH, RANGE};

    fn fields(pairs: &[(http::header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), value.parse().unwrap());
        }
        map
    }

    #[test]
    fn preconditions_come_before_ranges() {
        let stored = fields(&[(ETAG, "\"v1\"")]);
        let get = Method::GET;
        let both = fields(&[(IF_NONE_MATCH, "\"v1\""), (RANGE, "bytes=0-1")]);
        assert_eq!(
            stored_answer(&get, &both, &stored, StatusCode::OK, 10),
            StoredAnswer::NotModified
        );
        let failed = fields(&[(IF_MATCH, "\"v2\""), (RANGE, "bytes=0-1")]);
        assert_eq!(
            stored_answer(&get, &failed, &stored, StatusCode::OK, 10),
            StoredAnswer::PreconditionFailed
        );
    }

    #[test]
    fn ranges_only_for_a_200_to_a_get() {
        let stored = HeaderMap::new();
        let range = fields(&[(RANGE, "bytes=2-4")]);
        assert_eq!(
            stored_answer(&Method::GET, &range, &stored, StatusCode::OK, 10),
            StoredAnswer::Partial(vec![Range { start: 2, end: 5 }])
        );
        assert_eq!(
            stored_answer(&Method::HEAD, &range, &stored, StatusCode::OK, 10),
            StoredAnswer::Full
        );
        let not_found = StatusCode::NOT_FOUND;
        assert_eq!(
            stored_answer(&Method::GET, &range, &stored, not_found, 10),
            StoredAnswer::Full
        );
        let beyond = fields(&[(RANGE, "bytes=20-30")]);
        assert_eq!(
            stored_answer(&Method::GET, &beyond, &stored, StatusCode::OK, 10),
            StoredAnswer::RangeNotSatisfiable
        );
    }
}
