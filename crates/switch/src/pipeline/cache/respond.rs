//! Responses made from the cache: a stored entry (with `Age`, conditional requests answered
//! with `304`/`412`, `Range` with `206`/`416`, `HEAD` without a body) and the head of a fill.

use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use capstan_cache::rfc::{self, CacheStatus, Conditional, StoredAnswer};
use capstan_cache::store::Entry;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode};

use crate::pipeline::response::ResponseBody;
use crate::pipeline::response::CACHE_STATUS;

use crate::state::cache::fill::{FillHead, FillReader};

fn set_cache_status(headers: &mut HeaderMap, status: &CacheStatus) {
    headers.insert(&CACHE_STATUS, status.header_value());
}

/// The answer to a request from a stored entry.
/// `stored` is the entry's header fields, unpacked once by the caller.
pub(crate) fn from_entry(
    entry: &Entry,
    stored: HeaderMap,
    method: &Method,
    req: &HeaderMap,
    now: SystemTime,
    status: &CacheStatus,
) -> Response<ResponseBody> {
    let full_len = entry.body.len() as u64;
    let answer = rfc::stored_answer(method, req, &stored, entry.status, full_len);
    match answer {
        StoredAnswer::NotModified => return not_modified(&stored, status),
        StoredAnswer::PreconditionFailed => {
            return bare(StatusCode::PRECONDITION_FAILED, HeaderMap::new(), status)
        }
        StoredAnswer::RangeNotSatisfiable => {
            let mut h = HeaderMap::new();
            h.insert(
                header::CONTENT_RANGE,
                rfc::unsatisfied_content_range(full_len),
            );
            return bare(StatusCode::RANGE_NOT_SATISFIABLE, h, status);
        }
        StoredAnswer::Partial(_) | StoredAnswer::Full => {}
    }
    let mut headers = stored;
    headers.insert(header::AGE, entry.times.age_header(now));
    set_cache_status(&mut headers, status);
    if let StoredAnswer::Partial(ranges) = answer {
        return partial(entry, headers, &ranges);
    }
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(full_len));
    let body = if *method == Method::HEAD {
        ResponseBody::Full(None)
    } else {
        ResponseBody::full(entry.body.clone())
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = entry.status;
    *resp.headers_mut() = headers;
    resp
}

/// `206 Partial Content`: one range as is, several as `multipart/byteranges`.
fn partial(
    entry: &Entry,
    mut headers: HeaderMap,
    ranges: &[std::ops::Range<u64>],
) -> Response<ResponseBody> {
    let full_len = entry.body.len() as u64;
    let slice = |r: &std::ops::Range<u64>| entry.body.slice(r.start as usize..r.end as usize);
    let body: Bytes = if let [only] = ranges {
        headers.insert(header::CONTENT_RANGE, rfc::content_range(only, full_len));
        slice(only)
    } else {
        // The boundary only has to be absent from the body; the entry id makes it differ
        // between objects without a random number generator on the hit path.
        let boundary = format!(
            "capstan-{:016x}",
            entry.id.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        );
        let content_type = headers.get(header::CONTENT_TYPE).cloned();
        let content_type = content_type.as_ref();
        let Ok(multipart) = rfc::Multipart::new(ranges, full_len, content_type, &boundary) else {
            // Ranges the parser let through but that cannot be framed: answer in full.
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(full_len));
            let mut resp = Response::new(ResponseBody::full(entry.body.clone()));
            *resp.headers_mut() = headers;
            return resp;
        };
        let mut all = BytesMut::with_capacity(multipart.body_len() as usize);
        for (head, range) in multipart.parts() {
            all.extend_from_slice(head);
            all.extend_from_slice(&slice(&range));
        }
        all.extend_from_slice(multipart.closing());
        headers.insert(header::CONTENT_TYPE, multipart.content_type());
        all.freeze()
    };
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    let mut resp = Response::new(ResponseBody::full(body));
    *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
    *resp.headers_mut() = headers;
    resp
}

fn not_modified(stored: &HeaderMap, status: &CacheStatus) -> Response<ResponseBody> {
    bare(
        StatusCode::NOT_MODIFIED,
        rfc::not_modified_headers(stored),
        status,
    )
}

/// A response without a body.
fn bare(code: StatusCode, mut headers: HeaderMap, status: &CacheStatus) -> Response<ResponseBody> {
    set_cache_status(&mut headers, status);
    let mut resp = Response::new(ResponseBody::Full(None));
    *resp.status_mut() = code;
    *resp.headers_mut() = headers;
    resp
}

/// The answer to a request from a fill: its head and a reader streaming its body.
pub(crate) fn from_fill(
    head: &FillHead,
    mut reader: FillReader,
    method: &Method,
    req: &HeaderMap,
    status: &CacheStatus,
) -> Response<ResponseBody> {
    if head.status == StatusCode::OK {
        match rfc::client_conditional(method, req, &head.headers) {
            Conditional::NotModified => return not_modified(&head.headers, status),
            Conditional::PreconditionFailed => {
                return bare(StatusCode::PRECONDITION_FAILED, HeaderMap::new(), status)
            }
            Conditional::None => {}
        }
    }
    let mut headers = head.headers.clone();
    set_cache_status(&mut headers, status);
    let len = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    reader.set_len(len);
    let body = if *method == Method::HEAD {
        ResponseBody::Full(None)
    } else {
        ResponseBody::Fill(reader)
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = head.status;
    *resp.headers_mut() = headers;
    resp
}
