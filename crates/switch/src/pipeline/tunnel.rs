//! Upgrades and tunnels: an HTTP/1.1 request with `Connection: upgrade` and `Upgrade`
//! (WebSocket, most often) goes to the node the policy picks with both fields kept; when the
//! node answers `101 Switching Protocols`, the client's and the node's connections are spliced
//! both ways until either side closes or no byte moves for `upgrade.idle_timeout` (HAProxy's
//! `timeout tunnel`).
//!
//! `CONNECT` is refused with `405` unless `upgrade.connect = true`; then it goes to the picked
//! node (a forward proxy behind the switch) the same way, and a `2xx` answer opens the tunnel.
//! The switch never connects to the host a `CONNECT` names: that would make it an open proxy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::header::{self, HeaderMap, HeaderValue};
use http::request::Parts;
use http::{Method, Request, Response, StatusCode, Uri};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::pipeline::dispatch::Forward;
use crate::pipeline::response::error_response;
use crate::pipeline::response::ResponseBody;
use crate::upstream::body::UpstreamBody;

/// What kind of tunnel a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tunnel {
    /// `Upgrade` (the node answers `101`).
    Upgrade,
    /// `CONNECT` (the node answers `2xx`).
    Connect,
}

/// Whether a request asks for a tunnel: `CONNECT`, or HTTP/1.1 with `Upgrade` and a
/// `Connection` field naming it.
pub(crate) fn requested(parts: &Parts) -> Option<Tunnel> {
    if parts.method == Method::CONNECT {
        return Some(Tunnel::Connect);
    }
    if parts.version != http::Version::HTTP_11 || !parts.headers.contains_key(header::UPGRADE) {
        return None;
    }
    let names_upgrade = parts
        .headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    names_upgrade.then_some(Tunnel::Upgrade)
}

/// Passes a tunnel request to a node and answers with what the node said (or the switch's
/// own refusal); on `101` (or `2xx` to `CONNECT`) the tunnel is spliced in the background.
pub(crate) async fn pass(
    forward: &Forward,
    mut parts: Parts,
    tunnel: Tunnel,
    client: crate::pipeline::node_request::Client<'_>,
) -> Response<ResponseBody> {
    let config = &forward.cluster.config;
    if tunnel == Tunnel::Connect && !config.upgrade.connect {
        crate::observe::access_log::note_decision("refused");
        let mut resp = error_response(
            StatusCode::METHOD_NOT_ALLOWED,
            "CONNECT is not enabled on this switch (set upgrade.connect = true to pass it to \
             the nodes)",
        );
        resp.headers_mut().insert(
            header::ALLOW,
            HeaderValue::from_static("GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"),
        );
        // A client may send its tunnel's first bytes right behind the request: they are not
        // HTTP, so the connection ends here.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return resp;
    }
    let Some(client_side) = parts.extensions.remove::<OnUpgrade>() else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "this connection cannot be upgraded",
        );
    };
    let road = crate::pipeline::node_request::Road::Tunnel;
    forward.node_headers(&mut parts.headers, client, road);
    let mut resp = match send(forward, parts, tunnel).await {
        Ok(resp) => resp,
        Err(refusal) => return refusal,
    };
    let opened = match tunnel {
        Tunnel::Upgrade => resp.status() == StatusCode::SWITCHING_PROTOCOLS,
        Tunnel::Connect => resp.status().is_success(),
    };
    if opened {
        let node_side = hyper::upgrade::on(&mut resp);
        let idle = config.upgrade.idle_timeout;
        let open = OpenTunnel::new(Arc::clone(&forward.switch));
        tokio::spawn(async move {
            let _open = open;
            match tokio::try_join!(client_side, node_side) {
                Ok((client, node)) => splice(TokioIo::new(client), TokioIo::new(node), idle).await,
                Err(e) => tracing::debug!("tunnel not opened: {e}"),
            }
        });
    }
    let (mut head, body) = resp.into_parts();
    keep_upgrade_fields(&mut head.headers, opened && tunnel == Tunnel::Upgrade);
    head.version = forward.client_version;
    let body = if opened {
        // Nothing follows a `101` or a `2xx` to `CONNECT` but the tunnel's bytes.
        ResponseBody::Full(None)
    } else {
        ResponseBody::Upstream {
            inner: crate::upstream::pool::NodeBody::Hyper(body),
            on_end: None,
        }
    };
    forward.with_class(Response::from_parts(head, body))
}

/// Hop-by-hop fields removed; a `101` keeps the two it needs (`Connection: upgrade`, `Upgrade`).
fn keep_upgrade_fields(headers: &mut HeaderMap, switching: bool) {
    let protocol = headers.get(header::UPGRADE).cloned();
    crate::pipeline::hop_by_hop::strip(headers);
    if let (Some(protocol), true) = (protocol, switching) {
        headers.insert(header::UPGRADE, protocol);
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
}

/// Picks a node, waits for its admission and sends it the request head on a connection of
/// its own (a tunnel is never pooled). The admission slot and the node's count are released
/// once the head of the answer is in: a tunnel's bytes are not a request the node works on.
async fn send(
    forward: &Forward,
    parts: Parts,
    tunnel: Tunnel,
) -> Result<Response<hyper::body::Incoming>, Response<ResponseBody>> {
    let (switch, cluster) = (&forward.switch, &forward.cluster);
    let key = crate::state::request::key_of(&forward.pq, cluster.config.upstream.key);
    let info = crate::state::request::request_info(forward.class, key);
    let now = switch.epoch.now_nanos();
    let Some(node_id) = forward.pick(&info, None, true, now) else {
        return Err(forward.no_node(None));
    };
    let node = &cluster.nodes[node_id];
    crate::observe::access_log::note_node(&node.name_header);
    if let Some(why) = crate::upstream::tunnel::refused_by(node) {
        // The node is not at fault: no failure is counted against it.
        return Err(forward.with_class(error_response(StatusCode::BAD_GATEWAY, &why)));
    }
    let permit = match node
        .admission
        .admit(forward.class, switch.epoch.now_nanos())
        .await
    {
        Ok(permit) => permit,
        Err(shed) => return Err(forward.shed(node, shed)),
    };
    let started = switch.epoch.now_nanos();
    let mut placement = forward.place(node_id, started, permit);
    crate::observe::access_log::note_sent();
    let target = match tunnel {
        Tunnel::Connect => parts.uri.clone(),
        Tunnel::Upgrade => Uri::from(forward.pq.clone()),
    };
    let mut req = Request::new(UpstreamBody::Empty);
    *req.method_mut() = parts.method;
    *req.uri_mut() = target;
    *req.headers_mut() = parts.headers;
    let wait = cluster.first_byte[forward.class];
    let opening = crate::upstream::tunnel::open(cluster, node, forward.conn.peer, req);
    let sent = tokio::time::timeout(wait, opening).await;
    let after = switch.epoch.now_nanos();
    let failed = |status: StatusCode, cause: String| {
        let node = &node.config;
        forward.with_class(error_response(
            status,
            &format!("node {} ({}): {cause}", node.name, node.address),
        ))
    };
    match sent {
        Ok(Ok(resp)) => {
            crate::observe::access_log::note_first_byte();
            let took = after.saturating_sub(started);
            forward.head_arrived(node_id, resp.status(), took, &placement.permit, after);
            placement.settle(true);
            Ok(resp)
        }
        Ok(Err((kind, cause))) => {
            placement.settle(false);
            node.record_failure(kind, after, &cluster.config.health);
            Err(failed(StatusCode::BAD_GATEWAY, cause))
        }
        Err(_) => {
            placement.settle(false);
            let cause = format!("no answer within {}", humantime::format_duration(wait));
            Err(failed(StatusCode::GATEWAY_TIMEOUT, cause))
        }
    }
}

/// A tunnel end that bumps a shared counter whenever bytes arrive.
struct Watched<T> {
    inner: T,
    moved: Arc<AtomicU64>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.moved.fetch_add(1, Ordering::Relaxed);
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
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

/// Counts an open tunnel for as long as it lives.
struct OpenTunnel(Arc<crate::state::switch::Switch>);

impl OpenTunnel {
    fn new(switch: Arc<crate::state::switch::Switch>) -> OpenTunnel {
        switch.tunnels.open.fetch_add(1, Ordering::Relaxed);
        switch.tunnels.opened.fetch_add(1, Ordering::Relaxed);
        OpenTunnel(switch)
    }
}

impl Drop for OpenTunnel {
    fn drop(&mut self) {
        self.0.tunnels.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Copies bytes both ways until both sides are done, either fails, or nothing moves for
/// `idle`.
async fn splice<A, B>(client: A, node: B, idle: Duration)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let moved = Arc::new(AtomicU64::new(0));
    let mut client = Watched {
        inner: client,
        moved: Arc::clone(&moved),
    };
    let mut node = Watched {
        inner: node,
        moved: Arc::clone(&moved),
    };
    let copy = tokio::io::copy_bidirectional(&mut client, &mut node);
    let mut copy = std::pin::pin!(copy);
    let tick = (idle / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
    let (mut last, mut quiet_since) = (0, tokio::time::Instant::now());
    loop {
        tokio::select! {
            done = &mut copy => {
                if let Err(e) = done {
                    tracing::debug!("tunnel closed: {e}");
                }
                return;
            }
            now = ticker.tick() => {
                let seen = moved.load(Ordering::Relaxed);
                if seen != last {
                    (last, quiet_since) = (seen, now);
                } else if now.duration_since(quiet_since) >= idle {
                    tracing::debug!("tunnel idle past upgrade.idle_timeout; closed");
                    return;
                }
            }
        }
    }
}
