//! Socket addresses as written in a configuration: `ip:port`, or `host:port` looked up once.

use std::net::{SocketAddr, ToSocketAddrs};

/// Resolves `host:port` (an IP literal, or a name looked up once, now).
pub fn resolve_address(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    if !text.contains(':') {
        return Err(format!("address `{text}` has no port (want host:port)"));
    }
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("address `{text}` resolves to nothing")),
        Err(e) => Err(format!("bad address `{text}`: {e}")),
    }
}
