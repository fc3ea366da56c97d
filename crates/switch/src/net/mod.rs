//! Sockets and I/O: the system calls the switch makes itself, the client stream's lazy
//! registration and write corking, the silent-connection reaper, the peer's addresses, the
//! clock that times node sockets, and the TLS building blocks (provider, ALPN, certificate
//! files) both sides share, and the client's request body whichever protocol brought it; the
//! tier's gossip datagrams, encoded and decoded (`gossip`).
//!
//! May use: nothing else in the crate (the lowest layer).

pub(crate) mod address;
pub(crate) mod client_body;
pub(crate) mod cork;
pub(crate) mod gossip;
pub(crate) mod io;
pub(crate) mod node_clock;
pub(crate) mod peer;
pub(crate) mod reaper;
pub(crate) mod socket_calls;
pub(crate) mod tls;

/// The error of a body frame or an I/O step that may come from anywhere (hyper, rustls, a
/// node, a size limit).
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
