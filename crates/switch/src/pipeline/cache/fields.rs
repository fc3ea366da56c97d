//! Header fields the cache's modules share (so that `tier` needs nothing of its parent): the
//! host a request names, as its key has it; stored copies of fields that own their bytes; the
//! debug fields on an answer.

use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::Response;

use crate::pipeline::dispatch::Forward;
use crate::pipeline::response::ResponseBody;

/// The host a request names: the absolute-form authority, else `Host`, lower-cased later.
pub(crate) fn request_host(parts: &Parts) -> String {
    if let Some(authority) = parts.uri.authority() {
        return authority.as_str().to_string();
    }
    parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// The class (and node) debug fields on an answer, when `debug_headers` is on.
pub(super) fn with_debug(
    forward: &Forward,
    mut resp: Response<ResponseBody>,
) -> Response<ResponseBody> {
    let headers = resp.headers_mut();
    crate::pipeline::response::debug_headers(headers, &forward.cluster, forward.class, None);
    resp
}

/// A copy of `headers` that owns its bytes. Header values parsed by hyper are slices of the
/// connection's read buffer; a stored entry must not keep that buffer alive.
pub(super) fn owned_headers(headers: &HeaderMap) -> HeaderMap {
    let mut owned = HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let mut copy = HeaderValue::from_bytes(value.as_bytes()).unwrap_or_else(|_| value.clone());
        copy.set_sensitive(value.is_sensitive());
        owned.append(name.clone(), copy);
    }
    owned
}
