//! The limits a request head is held to before it reaches any node (header and URI sizes, a
//! declared body over `limits.max_body_bytes`), and forwarding loops.

use http::header::{self, HeaderMap};
use http::{Request, Response, StatusCode};

use crate::config::Config;
use crate::pipeline::response::{error_response, ResponseBody};

/// Why a request is refused before it reaches any node: a limit it exceeds, or a forwarding
/// loop it has gone round ([`crate::pipeline::checks::forwarding_loop`]).
pub(crate) fn check_limits<B>(req: &Request<B>, config: &Config) -> Option<Response<ResponseBody>> {
    let limits = &config.limits;
    let target_len = req.uri().path_and_query().map_or(1, |pq| pq.as_str().len());
    if target_len > limits.max_request_line {
        return Some(error_response(
            StatusCode::URI_TOO_LONG,
            &format!(
                "request target is {target_len} bytes, the limit is {}",
                limits.max_request_line
            ),
        ));
    }
    let headers = req.headers();
    if headers.len() > limits.max_headers {
        return Some(error_response(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            &format!(
                "{} header fields, the limit is {}",
                headers.len(),
                limits.max_headers
            ),
        ));
    }
    let (mut header_bytes, mut has_via) = (0, false);
    for (name, value) in headers {
        header_bytes += name.as_str().len() + value.len() + 4;
        has_via |= name == header::VIA;
    }
    if header_bytes > limits.max_header_bytes {
        return Some(error_response(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            &format!(
                "{header_bytes} bytes of header fields, the limit is {}",
                limits.max_header_bytes
            ),
        ));
    }
    if has_via {
        if let Some(looped) = crate::pipeline::checks::forwarding_loop::check(headers) {
            return Some(looped);
        }
    }
    if limits.max_body_bytes > 0 {
        if let Some(len) = declared_length(headers) {
            if len > limits.max_body_bytes {
                return Some(error_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    &format!(
                        "request body is {len} bytes, the limit is {}",
                        limits.max_body_bytes
                    ),
                ));
            }
        }
    }
    None
}

pub(crate) fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}
