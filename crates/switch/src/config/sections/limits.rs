//! The `[limits]` section: request sizes and connection counts, and its checks.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Longest request target (path and query) in bytes; longer → 414.
    pub max_request_line: usize,
    /// Most bytes of request header fields; more → 431.
    pub max_header_bytes: usize,
    /// Most request header fields; more → 431.
    pub max_headers: usize,
    /// Largest request body in bytes; larger → 413. 0 means no limit.
    pub max_body_bytes: u64,
    /// Most client connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Most connections open at once from one client address (after a trusted PROXY
    /// header, the address it declares); one more is answered `429` and closed. 0: no limit.
    pub max_connections_per_client: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: 8 * 1024,
            max_header_bytes: 32 * 1024,
            max_headers: 100,
            max_body_bytes: 100 * 1024 * 1024,
            max_connections: 10_000,
            // Off: clients behind one NAT or an L4 balancer without PROXY protocol share an
            // address, and the lab's robots all come from loopback.
            max_connections_per_client: 0,
        }
    }
}

pub(crate) fn check_limits(l: &Limits) -> Result<(), String> {
    if l.max_request_line < 16 {
        return Err("limits.max_request_line must be at least 16".into());
    }
    if l.max_header_bytes < 256 {
        return Err("limits.max_header_bytes must be at least 256".into());
    }
    if l.max_headers == 0 {
        return Err("limits.max_headers must be at least 1".into());
    }
    if l.max_connections == 0 {
        return Err("limits.max_connections must be at least 1".into());
    }
    Ok(())
}
