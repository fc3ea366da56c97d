//! HTTP/2 to nodes: a `[[node]]` with `protocol = "h2"` is spoken to in HTTP/2, so gRPC and
//! other HTTP/2-only services can sit behind the switch (Envoy's `http2_protocol_options` on
//! a cluster, nginx's `grpc_pass`, HAProxy's `server … proto h2`).
//!
//! ```toml
//! [[node]]
//! address = "10.0.0.1:50051"
//! protocol = "h2"                     # cleartext, prior knowledge (h2c)
//!
//! [[node]]
//! address = "10.0.0.2:443"
//! protocol = "h2"                     # with `tls`: ALPN offers `h2` only
//! tls = { ca_file = "ca.pem", sni = "grpc.example.com" }
//! ```
//!
//! - **Connections.** hyper-util's pooled client in HTTP/2-only mode (it drives hyper's
//!   `client::conn::http2`), with the connector HTTP/1.1 nodes use: the same connect timeout,
//!   `TCP_NODELAY` and TLS settings. Each worker thread keeps one connection per node and
//!   multiplexes every request to that node over it; a connection that closes (GOAWAY, a reset,
//!   the node restarting) is replaced by the next request. Concurrent first requests share one
//!   handshake rather than racing to open several connections.
//! - **Requests.** Sent as HTTP/2 with the client's method, path and rewritten fields, as to
//!   any node; `TE: trailers` — the one `TE` HTTP/2 allows, and one gRPC servers insist on —
//!   is sent when the client sent it (to HTTP/1.1 nodes too, with `Connection: te`: hyper's
//!   HTTP/1.1 server writes trailers only to a client that asked). `:authority` names the
//!   node's address; the client's `Host` travels as a `host` field, as to HTTP/1.1 nodes.
//! - **Trailers** pass both ways: the switch's bodies ([`crate::body`]) hand every frame on,
//!   trailer frames included, and `Trailer` is passed end to end. Toward an HTTP/1.1 client
//!   (or node), hyper writes trailers only on a chunked message whose head declared them in a
//!   `Trailer` field, and only to a client that sent `TE: trailers`: a node that declares none
//!   (gRPC servers do not) has its trailers dropped for HTTP/1.1 clients; gRPC needs HTTP/2
//!   end to end anyway. A response stored by the cache keeps its body, not its trailers.
//! - **Accounting** is the HTTP/1.1 path's: one placement per request (the node's active
//!   count, latency and policy feedback settled when the response body ends or is dropped),
//!   passive health, the outlier detector, retries and the access log.
//! - **Health checks** speak the node's protocol, on a fresh connection per check as for
//!   HTTP/1.1 nodes: an HTTP/2-only node (most gRPC servers) would not answer HTTP/1.1.
//! - **Not with h2 nodes:** `[proxy_protocol] send` (one HTTP/2 connection carries many
//!   clients' requests, so no single client address can head it: refused at load), and
//!   upgrades or `CONNECT` tunnels (they need HTTP/1.1; such a request to an h2 node is
//!   answered `502`).

use http::header::{self, HeaderMap, HeaderValue};
use http::uri::Scheme;
use http::{Request, Uri, Version};

use crate::config::{Config, NodeProtocol};
use crate::proxy_protocol::SendVersion;

/// What the parser cannot check about h2 nodes: the one-line error.
pub(crate) fn check(config: &Config) -> Result<(), String> {
    if config.proxy_protocol.send == SendVersion::Off {
        return Ok(());
    }
    match config.nodes.iter().find(|n| n.protocol == NodeProtocol::H2) {
        Some(node) => Err(format!(
            "proxy_protocol.send cannot be used with node `{}` (protocol = \"h2\"): one HTTP/2 \
             connection carries many clients' requests, so no PROXY header can name the client",
            node.name
        )),
        None => Ok(()),
    }
}

/// Whether the client asked for trailers (`TE: trailers`, possibly among other codings).
pub(crate) fn wants_trailers(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let name = coding.split(';').next().unwrap_or_default();
            name.trim().eq_ignore_ascii_case("trailers")
        })
}

/// Turns a request made for an h2 node into HTTP/2, with `:scheme` `https` over TLS.
pub(crate) fn adapt_request<B>(req: &mut Request<B>, tls: bool) {
    *req.version_mut() = Version::HTTP_2;
    if tls {
        let mut parts = req.uri().clone().into_parts();
        parts.scheme = Some(Scheme::HTTPS);
        if let Ok(uri) = Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
}

/// `TE: trailers` towards a node whose client accepts trailers (the hop-by-hop rewrite removed
/// the client's own): the switch passes trailers on, so on its hop it accepts them too.
/// hyper's HTTP/1.1 server writes response trailers only to a client that sent it, and gRPC
/// servers insist on it. HTTP/1.1 wants the `TE` connection option beside it (RFC 9110
/// §10.1.4); HTTP/2 has no `Connection`.
pub(crate) fn accept_trailers<B>(req: &mut Request<B>, protocol: NodeProtocol) {
    let headers = req.headers_mut();
    headers.insert(header::TE, HeaderValue::from_static("trailers"));
    if protocol == NodeProtocol::Http1 {
        headers.insert(header::CONNECTION, HeaderValue::from_static("te"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn te_trailers_is_found_among_codings() {
        let te = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::TE, HeaderValue::from_str(v).unwrap());
            wants_trailers(&h)
        };
        assert!(te("trailers"));
        assert!(te("gzip, Trailers"));
        assert!(te("deflate;q=0.5, trailers"));
        assert!(!te("gzip"));
        assert!(!wants_trailers(&HeaderMap::new()));
    }

    #[test]
    fn protocol_values() {
        assert_eq!(NodeProtocol::parse("h2"), Ok(NodeProtocol::H2));
        assert_eq!(NodeProtocol::parse("http/1.1"), Ok(NodeProtocol::Http1));
        let e = NodeProtocol::parse("h3").unwrap_err();
        assert!(e.starts_with("protocol: `h3` is not one of"), "{e}");
        assert!(!e.contains('\n'));
    }
}
