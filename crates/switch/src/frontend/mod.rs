//! The front end: client listeners (plain, TLS, h2c), serving their connections (accept,
//! PROXY headers, TLS handshakes, HTTP/1.1 and HTTP/2, deadlines), the client send timeout, and
//! turning away clients over their address's connection limit; HTTP/3 over QUIC beside TLS
//! listeners (`quic`).
//!
//! May use: `net`, `config`, `observe`, `state`, `upstream`, `pipeline`.

pub(crate) mod listener;
pub(crate) mod proxy_accept;
pub(crate) mod quic;
pub(crate) mod send_timeout;
pub(crate) mod serve;
pub(crate) mod turn_away;
