//! Client listeners beyond plain HTTP/1.1: `[[listener]]` entries (TLS with certificates chosen
//! by SNI, or plain with HTTP/2 prior knowledge), and what a connection on one speaks — the
//! TLS handshake, then HTTP/2 when ALPN chose `h2` (or a plain client opened with the HTTP/2
//! preface), else HTTP/1.1.
//!
//! A listener's kind (TLS or plain, h2c or not) is fixed when the switch starts; its
//! certificates are not: each new connection takes them from the configuration in force, so a
//! reload (SIGHUP, `POST /reload`) that names new files or finds new content in the old ones
//! serves them from the next handshake on, while open connections go on with theirs.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

use crate::config::Config;
use crate::observe::tls_metrics::TlsCounters;
use crate::state::connection_limits::{ClientLimiter, ListenerLimits};

/// What a bound client socket speaks, fixed when the switch starts, and its connection limits.
#[derive(Clone)]
pub(crate) struct Endpoint {
    /// The address as configured (port 0 stays 0), to find the listener again after a reload.
    configured: SocketAddr,
    h2c: bool,
    tls_at_start: Option<Arc<rustls::ServerConfig>>,
    /// Shared by every worker accepting on this address.
    pub limits: Arc<ListenerLimits>,
    /// Handshake counters of a TLS listener, shared like `limits`.
    pub tls_counters: Option<Arc<TlsCounters>>,
    /// `Alt-Svc` for the responses of a TLS listener with a QUIC sibling, set once the
    /// sibling's UDP socket is bound (its port is known then); shared like `limits`.
    pub alt_svc: Arc<OnceLock<http::HeaderValue>>,
}

impl Endpoint {
    /// The address as configured (port 0 stays 0).
    pub(crate) fn configured(&self) -> SocketAddr {
        self.configured
    }

    /// Every client address to bind, and what it speaks: `listen`, then `[[listener]]`s.
    /// Listeners without a `max_connections_per_client` of their own share one count per
    /// client address, under `limits.max_connections_per_client`.
    pub(crate) fn all(config: &Config) -> Vec<(SocketAddr, Endpoint)> {
        let shared = ClientLimiter::new(config.limits.max_connections_per_client);
        let plain = config.listen.iter().map(|&addr| {
            let endpoint = Endpoint {
                configured: addr,
                h2c: false,
                tls_at_start: None,
                limits: Arc::new(ListenerLimits::new(addr, None, shared.clone())),
                tls_counters: None,
                alt_svc: Arc::default(),
            };
            (addr, endpoint)
        });
        let listeners = config.listeners.iter().map(|l| {
            let clients = match l.max_connections_per_client {
                Some(own) => ClientLimiter::new(own),
                None => shared.clone(),
            };
            let endpoint = Endpoint {
                configured: l.address,
                h2c: l.h2c,
                tls_at_start: l.tls.as_ref().map(|t| Arc::clone(&t.server_config)),
                limits: Arc::new(ListenerLimits::new(l.address, l.max_connections, clients)),
                tls_counters: l.tls.as_ref().map(|_| Arc::new(TlsCounters::default())),
                alt_svc: Arc::default(),
            };
            (l.address, endpoint)
        });
        plain.chain(listeners).collect()
    }

    /// The TLS configuration for a new connection: the reloaded one of the same listener when
    /// the configuration in force still has it, else the one the switch started with.
    fn tls_now(&self, config: &Config) -> Option<Arc<rustls::ServerConfig>> {
        let at_start = self.tls_at_start.as_ref()?;
        let reloaded = config
            .listeners
            .iter()
            .find(|l| l.address == self.configured)
            .and_then(|l| l.tls.as_ref());
        Some(Arc::clone(reloaded.map_or(at_start, |t| &t.server_config)))
    }
}

/// What the client's connection turned out to speak.
pub(crate) enum Protocol {
    Http1,
    Http2,
}

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A stream with bytes already read from it put back in front.
pub(crate) struct Rewound<S> {
    prefix: Vec<u8>,
    taken: usize,
    inner: S,
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewound<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.taken < self.prefix.len() {
            let n = (self.prefix.len() - self.taken).min(buf.remaining());
            let start = self.taken;
            buf.put_slice(&self.prefix[start..start + n]);
            self.taken += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewound<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Reads the first bytes of a plain connection to tell HTTP/2 with prior knowledge from
/// HTTP/1.1: only as many as needed to see a difference from the preface, and they are put
/// back for the protocol that reads the connection.
pub(crate) async fn sniff_h2c<S: AsyncRead + Unpin>(
    mut stream: S,
) -> std::io::Result<(Protocol, Rewound<S>)> {
    let mut prefix = Vec::with_capacity(PREFACE.len());
    let mut buf = [0u8; 24];
    while prefix.len() < PREFACE.len() && PREFACE.starts_with(&prefix) {
        let want = PREFACE.len() - prefix.len();
        let n = stream.read(&mut buf[..want]).await?;
        if n == 0 {
            break;
        }
        prefix.extend_from_slice(&buf[..n]);
    }
    let protocol = match prefix.as_slice() == PREFACE {
        true => Protocol::Http2,
        false => Protocol::Http1,
    };
    let rewound = Rewound {
        prefix,
        taken: 0,
        inner: stream,
    };
    Ok((protocol, rewound))
}

/// How a connection on `endpoint` starts: the TLS configuration to handshake with (if any)
/// and whether to look for the h2c preface.
pub(crate) struct Start {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub h2c: bool,
}

impl Endpoint {
    pub(crate) fn start(&self, config: &Config) -> Start {
        Start {
            tls: self.tls_now(config),
            h2c: self.h2c,
        }
    }
}

/// The protocol ALPN chose on a finished handshake (HTTP/1.1 when none).
pub(crate) fn negotiated(conn: &rustls::ServerConnection) -> Protocol {
    match conn.alpn_protocol() {
        Some(crate::net::tls::ALPN_H2) => Protocol::Http2,
        _ => Protocol::Http1,
    }
}

impl Endpoint {
    /// `https` for a TLS listener, else `http`.
    pub(crate) fn scheme(&self) -> &'static str {
        match self.tls_at_start {
            Some(_) => "https",
            None => "http",
        }
    }
}

/// Whether a reload changes what some `[[listener]]` speaks or where, or a connection limit,
/// or its QUIC settings (those wait for a restart); new certificates alone do not count.
pub(crate) fn kinds_differ(new: &Config, old: &Config) -> bool {
    type Quic = Option<(u32, usize, u64, bool, &'static str)>;
    type Kind = (SocketAddr, bool, bool, Option<usize>, Option<usize>, Quic);
    let kinds = |c: &Config| -> Vec<Kind> {
        c.listeners
            .iter()
            .map(|l| {
                let limits = (l.max_connections, l.max_connections_per_client);
                let quic = (l.quic.as_ref()).map(|q| {
                    (
                        q.max_streams,
                        q.retry_above,
                        q.alt_svc_max_age,
                        q.early_data,
                        q.congestion.name(),
                    )
                });
                (l.address, l.h2c, l.tls.is_some(), limits.0, limits.1, quic)
            })
            .collect()
    };
    let limits = |c: &Config| {
        (
            c.limits.max_connections,
            c.limits.max_connections_per_client,
        )
    };
    kinds(new) != kinds(old) || limits(new) != limits(old)
}
