//! The PROXY protocol (HAProxy's `proxy-protocol.txt`, versions 1 and 2) towards nodes; the
//! header from a front balancer is read by [`crate::frontend::proxy_accept`].
//!
//! Towards nodes (`[proxy_protocol] send = "v1" | "v2"`): every new connection to a node starts
//! with a header naming the client and the address it connected to, so a node sees client
//! addresses without parsing `X-Forwarded-For`. A connection then carries one client's
//! requests only: the client's addresses travel in the pool key (as the userinfo of the
//! node's URI, which the connector strips before connecting), so a pooled connection is reused
//! for the same client connection and never for another.

use std::future::Future;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use http::uri::Authority;
use http::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;

use crate::config::sections::proxy_protocol::SendVersion;

/// The PROXY v1 line for a connection from `src` to `dst`.
pub(crate) fn encode_v1(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let (src_ip, dst_ip) = same_family(src.ip(), dst.ip());
    let family = if src_ip.is_ipv4() { "TCP4" } else { "TCP6" };
    format!(
        "PROXY {family} {src_ip} {dst_ip} {} {}\r\n",
        src.port(),
        dst.port()
    )
    .into_bytes()
}

pub(crate) const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// The PROXY v2 header (command PROXY, TCP) for a connection from `src` to `dst`.
pub fn encode_v2(src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.push(0x21); // version 2, command PROXY
    match same_family(src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&[0x11, 0, 12]); // TCP over IPv4, 12 bytes of addresses
            out.extend_from_slice(&s.octets());
            out.extend_from_slice(&d.octets());
        }
        (s, d) => {
            out.extend_from_slice(&[0x21, 0, 36]); // TCP over IPv6
            out.extend_from_slice(&as_v6(s).octets());
            out.extend_from_slice(&as_v6(d).octets());
        }
    }
    out.extend_from_slice(&src.port().to_be_bytes());
    out.extend_from_slice(&dst.port().to_be_bytes());
    out
}

/// The PROXY v2 header with command LOCAL: a connection the proxy makes on its own behalf.
pub(crate) fn encode_v2_local() -> Vec<u8> {
    let mut out = V2_SIGNATURE.to_vec();
    out.extend_from_slice(&[0x20, 0x00, 0, 0]);
    out
}

fn as_v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Both addresses in one family (a header has one): IPv4 when both are, else IPv6.
fn same_family(a: IpAddr, b: IpAddr) -> (IpAddr, IpAddr) {
    match (a, b) {
        (IpAddr::V4(_), IpAddr::V4(_)) => (a, b),
        _ => (IpAddr::V6(as_v6(a)), IpAddr::V6(as_v6(b))),
    }
}

/// The node's authority with the client's addresses as its userinfo (`SRC~SPORT~DST~DPORT@`):
/// the pool keeps connections apart per client connection, and [`NodeConnector`] reads the
/// addresses back for the header.
pub(crate) fn authority_for(node: &Authority, src: SocketAddr, dst: SocketAddr) -> Authority {
    let text = format!(
        "{}~{}~{}~{}@{node}",
        src.ip(),
        src.port(),
        dst.ip(),
        dst.port()
    );
    text.parse().unwrap_or_else(|_| node.clone())
}

/// The addresses [`authority_for`] put in a URI.
fn addresses_in(uri: &Uri) -> Option<(SocketAddr, SocketAddr)> {
    let authority = uri.authority()?.as_str();
    let (userinfo, _) = authority.rsplit_once('@')?;
    let mut parts = userinfo.split('~');
    let mut addr = || -> Option<SocketAddr> {
        let ip: IpAddr = parts.next()?.parse().ok()?;
        let port: u16 = parts.next()?.parse().ok()?;
        Some(SocketAddr::new(ip, port))
    };
    Some((addr()?, addr()?))
}

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Connects to nodes (hyper-util's `HttpConnector`), writes the PROXY header when the node's
/// URI carries client addresses, runs the TLS handshake with a TLS node (after the header,
/// which belongs to the TCP connection), and notes the connect time in the access log.
#[derive(Clone)]
pub(crate) struct NodeConnector {
    pub inner: HttpConnector,
    pub send: SendVersion,
    pub tls: std::sync::Arc<crate::state::node_tls::TlsToNodes>,
}

impl tower_service::Service<Uri> for NodeConnector {
    type Response = TokioIo<crate::upstream::tls::NodeStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let header = match (self.send, addresses_in(&uri)) {
            (SendVersion::Off, _) => None,
            (SendVersion::V1, Some((src, dst))) => Some(encode_v1(src, dst)),
            (SendVersion::V2, Some((src, dst))) => Some(encode_v2(src, dst)),
            // The switch's own connection (a health check): no client to name.
            (SendVersion::V1, None) => Some(b"PROXY UNKNOWN\r\n".to_vec()),
            (SendVersion::V2, None) => Some(encode_v2_local()),
        };
        // The request that made this connection is being handled now (this call happens in
        // its task); the connection may finish after it went elsewhere.
        let notes = crate::observe::access_log::current_notes();
        let tls = self.tls.for_uri(&uri).cloned();
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            let mut io = connecting.await?;
            if let Some(header) = header {
                io.inner_mut().write_all(&header).await?;
            }
            let tcp = crate::net::node_clock::TimedTcp::timed(io.into_inner())?;
            let stream = crate::upstream::tls::NodeStream::over(tcp, tls.as_ref()).await?;
            if let Some(notes) = notes {
                crate::observe::access_log::note_connected(&notes);
            }
            Ok(TokioIo::new(stream))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addrs() -> (SocketAddr, SocketAddr) {
        (
            "192.0.2.7:51234".parse().unwrap(),
            "198.51.100.1:80".parse().unwrap(),
        )
    }

    #[test]
    fn addresses_travel_in_the_authority() {
        let (src, dst) = addrs();
        let node: Authority = "127.0.0.1:9001".parse().unwrap();
        let with = authority_for(&node, src, dst);
        let uri: Uri = format!("http://{with}/").parse().unwrap();
        assert_eq!(uri.host(), Some("127.0.0.1"));
        assert_eq!(addresses_in(&uri), Some((src, dst)));
        let v6 = authority_for(&node, "[2001:db8::1]:9".parse().unwrap(), dst);
        let uri: Uri = format!("http://{v6}/").parse().unwrap();
        assert_eq!(uri.port_u16(), Some(9001));
        assert_eq!(addresses_in(&uri).unwrap().0.port(), 9);
    }
}
