//! Who is at the other end of a client connection: the client's address (from the socket, or
//! from a PROXY protocol header sent by a trusted L4 balancer in front), the address it
//! connected to, and when the connection was accepted.

use std::net::SocketAddr;
use std::time::Instant;

#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer {
    /// The client, as far as the switch can tell (a PROXY header's source when one was taken).
    pub client: SocketAddr,
    /// The address the client connected to (a PROXY header's destination when one was taken).
    pub local: SocketAddr,
    /// When the switch accepted the connection.
    pub accepted: Instant,
    /// A front balancer's PROXY v2 header said the client's own connection was TLS
    /// (`PP2_TYPE_SSL` with `PP2_CLIENT_SSL`): the node is told `X-Forwarded-Proto: https`.
    pub tls: bool,
}
