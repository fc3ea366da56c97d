//! The `[upstream]` section: the node connection pool, retries and their budget, the locality
//! key; and its checks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What a request's locality key is (used by `lard`, `lard-r`, `consistent-hash`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyKind {
    /// The path without the query.
    #[default]
    Path,
    /// The path with the query.
    Uri,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Upstream {
    /// Idle keep-alive connections kept per node.
    pub pool_max_idle_per_node: usize,
    /// An idle pooled connection is closed after this.
    #[serde(with = "humantime_serde")]
    pub pool_idle_timeout: Duration,
    /// Retry an idempotent request without a body once on another node when connecting fails,
    /// or when the node closes or resets the connection before a response head.
    pub retry: bool,
    /// Retries may add at most this share (in %) to the requests of the last 10 s …
    pub retry_budget_percent: u32,
    /// … plus this many per second of that window, so that a quiet switch can still retry.
    pub retry_budget_min_per_second: u32,
    /// The locality key of a request.
    pub key: KeyKind,
    /// Also tell nodes who the client is in an RFC 7239 `Forwarded` field (`for`, `proto`),
    /// beside `X-Forwarded-For` and `X-Forwarded-Proto`.
    pub forwarded: bool,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            pool_max_idle_per_node: 256,
            pool_idle_timeout: Duration::from_secs(60),
            retry: true,
            retry_budget_percent: 20,
            retry_budget_min_per_second: 3,
            key: KeyKind::Path,
            forwarded: false,
        }
    }
}

/// The `upstream` key at fault and why.
pub(crate) fn check_upstream(u: &Upstream) -> Result<(), (&'static str, String)> {
    if u.retry_budget_percent > 100 {
        return Err((
            "retry_budget_percent",
            format!(
                "upstream.retry_budget_percent is {}; it must be 0 to 100",
                u.retry_budget_percent
            ),
        ));
    }
    if u.retry_budget_min_per_second > 10_000 {
        return Err((
            "retry_budget_min_per_second",
            "upstream.retry_budget_min_per_second must be at most 10000".into(),
        ));
    }
    Ok(())
}
