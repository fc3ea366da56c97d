//! What a policy sees of a request ([`RequestInfo`]): its class and its key, built in one
//! place for every pick and every `on_done` (dispatch, redirects, tunnels).

use capstan_core::{hash_key, ClassId, RequestInfo};
use http::uri::PathAndQuery;

use crate::config::KeyKind;

/// The request's key as `upstream.key` asks: its path, or path and query.
pub(crate) fn key_of(pq: &PathAndQuery, kind: KeyKind) -> &str {
    match kind {
        KeyKind::Path => pq.path(),
        KeyKind::Uri => pq.as_str(),
    }
}

/// The policy's view of a request of `class` whose key is `key`.
#[inline]
pub(crate) fn request_info(class: ClassId, key: &str) -> RequestInfo<'_> {
    RequestInfo {
        class,
        key,
        key_hash: hash_key(key),
    }
}
