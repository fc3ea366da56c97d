//! The `[redirect]` section: URL redirection (SWEB) instead of forwarding, for the chosen
//! classes. Checked against the nodes and classes by `config` itself (`check_redirect`).

use serde::{Deserialize, Serialize};

/// URL redirection (SWEB): for the chosen classes the switch answers with a redirect to the
/// picked node's `public_url` instead of proxying. A redirected URL carries a marker query
/// parameter, and a request that has it is forwarded, never redirected again (SWEB's guard
/// against ping-pong when several brokers redirect).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Redirect {
    /// Classes answered with a redirect; absent: every class.
    pub classes: Option<Vec<String>>,
    /// 301, 302, 303, 307 or 308 (default 302, as SWEB's HTTP redirection).
    pub status: u16,
    /// Name of the query parameter marking a redirected request (default `capstan-redirected`).
    pub mark: String,
}

impl Default for Redirect {
    fn default() -> Self {
        Redirect {
            classes: None,
            status: 302,
            mark: "capstan-redirected".into(),
        }
    }
}
