//! HTTP caching rules (RFC 9111). PLACEHOLDER until the RFC work merges: the types the store
//! needs, with the simplest behaviour.

use std::time::{Duration, SystemTime};

use http::{HeaderMap, StatusCode};

/// Default rules.
#[derive(Clone, Debug, Default)]
pub struct CacheRules {}

/// The times of a stored response.
#[derive(Clone, Debug)]
pub struct StoredTimes {
    pub request_time: SystemTime,
    pub response_time: SystemTime,
    pub corrected_initial_age: Duration,
    pub freshness_lifetime: Duration,
}

impl StoredTimes {
    pub fn new(
        _status: StatusCode,
        _resp: &HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
        _rules: &CacheRules,
    ) -> Self {
        StoredTimes {
            request_time,
            response_time,
            corrected_initial_age: Duration::ZERO,
            freshness_lifetime: Duration::from_secs(60),
        }
    }
    pub fn current_age(&self, now: SystemTime) -> Duration {
        self.corrected_initial_age + now.duration_since(self.response_time).unwrap_or_default()
    }
}

/// The request's values of the fields a stored response varies on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct VaryKey(Vec<u8>);

impl VaryKey {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
    pub fn from_bytes(bytes: &[u8]) -> VaryKey {
        VaryKey(bytes.to_vec())
    }
}

/// `None` for `Vary: *`.
pub fn vary_key(stored_resp: &HeaderMap, req: &HeaderMap) -> Option<VaryKey> {
    let mut key = Vec::new();
    for v in stored_resp.get_all(http::header::VARY) {
        for name in v.to_str().ok()?.split(',') {
            let name = name.trim().to_ascii_lowercase();
            if name == "*" {
                return None;
            }
            key.extend_from_slice(name.as_bytes());
            key.push(b':');
            for value in req.get_all(name.as_str()) {
                key.extend_from_slice(value.as_bytes());
            }
            key.push(b'\n');
        }
    }
    Some(VaryKey(key))
}
