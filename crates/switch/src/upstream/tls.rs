//! TLS to nodes: a node with a `tls` table is reached over TLS (HAProxy's `server … ssl verify
//! required ca-file … sni …`, Envoy's upstream TLS transport socket).
//!
//! ```toml
//! [[node]]
//! address = "10.0.0.1:443"
//! tls = { ca_file = "ca.pem", sni = "api.example.com" }
//! ```
//!
//! The connection: TCP connect, the PROXY header when configured (it belongs to the TCP
//! connection, so it comes before the handshake), the TLS handshake offering ALPN `http/1.1`,
//! then HTTP/1.1 as to any node — or, for a node with `protocol = "h2"`, ALPN `h2` and HTTP/2
//! (see [`crate::upstream::h2`]). The node's certificate is verified against `ca_file` (a PEM
//! bundle; required while `verify` is on — the switch ships no trust store) for the name in
//! `sni`, which is also the SNI sent. Without `sni` the node's IP address is the name: no SNI
//! is sent and the certificate must list that address (an `IP:` subjectAltName).
//! `verify = false` skips the check (insecure; logged as a warning at load).
//!
//! The CA file is read when the configuration is loaded, so `capstan check`, start-up and a
//! reload refuse a missing, unreadable or empty bundle with a one-line error. A reload that
//! changes any node's TLS settings (or the bundle's content) rebuilds the connection pools.

use std::sync::Arc;

use crate::config::sections::node_tls::NodeTls;
use crate::net::node_clock::{NodeClock, TimedTcp};

/// A connection to a node: plain TCP or TLS over it.
pub(crate) enum NodeStream {
    Plain(TimedTcp),
    Tls(Box<tokio_rustls::client::TlsStream<TimedTcp>>),
}

impl NodeStream {
    /// Runs the TLS handshake on `tcp` when `tls` says so. A certificate that does not verify
    /// fails here, as a connect error naming the cause.
    pub(crate) async fn over(tcp: TimedTcp, tls: Option<&NodeTls>) -> std::io::Result<NodeStream> {
        let Some(tls) = tls else {
            return Ok(NodeStream::Plain(tcp));
        };
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.client));
        match connector.connect(tls.server_name.clone(), tcp).await {
            Ok(stream) => Ok(NodeStream::Tls(Box::new(stream))),
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!("TLS handshake failed: {e}"),
            )),
        }
    }

    /// The clock of the TCP connection underneath, when it is timed.
    pub(crate) fn clock(&self) -> Option<&Arc<NodeClock>> {
        match self {
            NodeStream::Plain(tcp) => tcp.clock(),
            NodeStream::Tls(tls) => tls.get_ref().0.clock(),
        }
    }
}

impl hyper_util::client::legacy::connect::Connection for NodeStream {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        hyper_util::client::legacy::connect::Connected::new()
    }
}

macro_rules! either {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            NodeStream::Plain($s) => {
                let $s = std::pin::Pin::new($s);
                $e
            }
            NodeStream::Tls($s) => {
                let $s = std::pin::Pin::new(&mut **$s);
                $e
            }
        }
    };
}

impl tokio::io::AsyncRead for NodeStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        either!(self, s => s.poll_read(cx, buf))
    }
}

impl tokio::io::AsyncWrite for NodeStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        either!(self, s => s.poll_write(cx, buf))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        either!(self, s => s.poll_flush(cx))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        either!(self, s => s.poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        either!(self, s => s.poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            NodeStream::Plain(s) => s.is_write_vectored(),
            NodeStream::Tls(s) => s.is_write_vectored(),
        }
    }
}
