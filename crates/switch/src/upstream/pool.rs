//! Keep-alive HTTP/1.1 connections to the nodes: one pool per worker thread, keyed by the
//! node's authority (with PROXY protocol, by the client connection too, see
//! [`crate::upstream::proxy_protocol::authority_for`]).
//!
//! A request without a body goes by the switch's own HTTP/1.1 ([`crate::upstream::h1`]), in its
//! own task; one with a body by hyper's client, whose connection runs in a task of its own.
//! The two kinds of connection wait in separate lists.
//!
//! A connection goes back to the pool when the response body it carried has ended: the
//! [`Pooled`] handle rides in the response body's end hook (with the switch's own codec, the
//! body itself hands the connection back), so no task is spawned per request to wait for the
//! connection to become free (hyper-util's pooled client does that, and hashes, locks and
//! boxes on every checkout). Checkout takes the most recently used connection that is ready
//! for a request, so the warm ones are reused and the cold ones age out. An idle connection
//! is closed after `upstream.pool_idle_timeout` (a sweeper task per pool, and at checkout),
//! and at most `upstream.pool_max_idle_per_node` of each kind wait per key.
//!
//! A pooled connection the node closed while idle is noticed before use, and a request the
//! connection never took (it closed as the request was handed over) is sent once more on a
//! new connection. A request that reached the node and got no answer is not retried here:
//! that is [`crate::pipeline::dispatch`]'s retry, which knows whether the request may be repeated.

use std::pin::Pin;
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::uri::Authority;
use http::{Method, Request, Response, Uri};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use rustc_hash::FxHashMap;
use tower_service::Service;

use crate::config::sections::proxy_protocol::SendVersion;
use crate::net::node_clock::NodeClock;
use crate::net::BoxError;
use crate::state::cluster::Cluster;
use crate::state::node_tls::TlsToNodes;
use crate::state::tier::Tier;
use crate::upstream::body::UpstreamBody;
use crate::upstream::connect::{ClientSettings, UpstreamError};
use crate::upstream::h1::{self, H1Body, H1Conn, NodeReplyError, TakeBack};
use crate::upstream::proxy_protocol::NodeConnector;
use crate::upstream::tls::NodeStream;

type Sender = http1::SendRequest<UpstreamBody>;

/// One worker thread's connections to HTTP/1.1 nodes.
pub(crate) struct Pool {
    settings: ClientSettings,
    max_idle: usize,
    idle_timeout: Duration,
    connector: NodeConnector,
    /// Connections hyper drives (requests with a body).
    idle: IdleLists<Conn>,
    /// Connections the switch drives itself ([`crate::upstream::h1`]: requests without a body).
    idle_h1: IdleLists<H1Conn>,
}

/// Idle connections of one kind, keyed by the node's address from the configuration, and
/// with PROXY protocol the client's addresses; a fast hash (SipHash of the key was 4 % of a
/// request's instructions), and the keys are at most as many as the connections.
struct IdleLists<C>(Mutex<FxHashMap<Authority, Vec<Idle<C>>>>);

/// A connection to a node driven by hyper: the handle requests go through, and the clock
/// that times them at the socket ([`crate::net::node_clock`]).
struct Conn {
    sender: Sender,
    clock: Option<Arc<NodeClock>>,
}

/// A connection waiting for its next request.
struct Idle<C> {
    conn: C,
    since: Instant,
}

/// What the pool asks of an idle connection.
trait Link {
    /// The node closed it (or it can no longer be used): it is dropped.
    fn closed(&mut self) -> bool;
    /// It can take a request now (one still finishing its last response cannot yet).
    fn ready(&self) -> bool;
}

impl Link for Conn {
    fn closed(&mut self) -> bool {
        self.sender.is_closed()
    }
    fn ready(&self) -> bool {
        self.sender.is_ready()
    }
}

impl Link for H1Conn {
    fn closed(&mut self) -> bool {
        !self.is_usable()
    }
    fn ready(&self) -> bool {
        true
    }
}

/// A request's hold on its node connection, and the clock that timed its answer. A
/// hyper-driven connection goes back to its pool through [`Pooled::release`] once the
/// response has ended, and closes if dropped before that; one the switch drives goes back
/// from its body ([`crate::upstream::h1::H1Body`]).
pub(crate) struct Pooled {
    /// A hyper-driven connection, and where it goes back to.
    hyper: Option<(Conn, Home)>,
    clock: Option<Arc<NodeClock>>,
}

/// Where a connection goes back to once its response has ended.
pub(crate) struct Home {
    pool: Weak<Pool>,
    key: Authority,
}

impl TakeBack for Home {
    /// A connection the switch drives itself, its answer read whole.
    fn take_back(self, conn: H1Conn) {
        if let Some(pool) = self.pool.upgrade() {
            pool.put_back_h1(self.key, conn);
        }
    }
}

impl Pooled {
    /// The response ended whole: the connection may carry another request.
    pub(crate) fn release(self) {
        if let Some((conn, home)) = self.hyper {
            if let Some(pool) = home.pool.upgrade() {
                pool.idle.put_back(home.key, conn, pool.max_idle);
            }
        }
    }

    /// The node's latency for the request this connection carries, timed at the socket (from
    /// its last bytes out to the answer's first bytes in), and how long ago the answer came.
    pub(crate) fn node_answer(&self) -> Option<(u64, u64)> {
        self.clock.as_ref()?.answer()
    }
}

thread_local! {
    /// This worker's pool, for the settings it was made with; a reload that changes them
    /// starts a new one (the old one's connections close as their requests end).
    static POOL: std::cell::RefCell<Option<Arc<Pool>>> = const { std::cell::RefCell::new(None) };
}

/// This thread's pool for `cluster`'s settings.
fn pool_for(cluster: &Cluster) -> Arc<Pool> {
    let settings = ClientSettings::of(cluster);
    POOL.with(|cell| {
        let mut current = cell.borrow_mut();
        match &*current {
            Some(pool) if pool.settings == settings => Arc::clone(pool),
            _ => {
                let pool = Arc::new(Pool::new(cluster, settings));
                tokio::spawn(sweep(Arc::downgrade(&pool)));
                *current = Some(Arc::clone(&pool));
                pool
            }
        }
    })
}

thread_local! {
    /// This worker's connections to the tier's peers, for the tier of that id: hops
    /// ([`send_to_peer`]). A reload makes a new tier and so a new pool.
    static PEER_POOL: std::cell::RefCell<Option<(u64, Arc<Pool>)>> =
        const { std::cell::RefCell::new(None) };
}

/// This thread's pool of connections to `tier`'s peers.
fn peer_pool_for(cluster: &Cluster, tier: &Tier) -> Arc<Pool> {
    PEER_POOL.with(|cell| {
        let mut current = cell.borrow_mut();
        match &*current {
            Some((id, pool)) if *id == tier.id() => Arc::clone(pool),
            _ => {
                let pool = Arc::new(Pool::for_peers(cluster, tier));
                tokio::spawn(sweep(Arc::downgrade(&pool)));
                *current = Some((tier.id(), Arc::clone(&pool)));
                pool
            }
        }
    })
}

/// Sends a hop, a request without a body (its head from [`bodiless_head`]), to the peer of
/// `tier` that `target` names, by the switch's own HTTP/1.1 on a connection of this worker's
/// peer pool, as [`send_bodiless`] sends one to a node: connections come from this switch's
/// own address (peers take hops only from peers' addresses), with neither the nodes' PROXY
/// header nor their TLS. With hyper-util's pooled client (a task and a channel per
/// connection, a lock and boxes per checkout) the asking switch spent 66.8 µs of CPU per hop
/// against 60.9 this way (`benches/tier_hop.sh`, same quiet run).
pub(crate) async fn send_to_peer(
    cluster: &Cluster,
    tier: &Tier,
    target: &Uri,
    head: &[u8],
    method: &Method,
) -> Result<Response<NodeBody>, UpstreamError> {
    let pool = peer_pool_for(cluster, tier);
    let ignore_interim = |_, _| {};
    let (resp, _pooled) = send_h1(
        pool,
        target,
        pool_key(target),
        head,
        method,
        &ignore_interim,
    )
    .await?;
    Ok(resp)
}

/// Sends `req` (its URI absolute, naming the node) by hyper's HTTP/1.1 client, on a pooled
/// connection or a new one. Requests without a body go by the switch's own HTTP/1.1 instead
/// ([`send_bodiless`]).
pub(crate) async fn send(
    cluster: &Cluster,
    mut req: Request<UpstreamBody>,
) -> Result<(Response<NodeBody>, Pooled), UpstreamError> {
    let pool = pool_for(cluster);
    let target = prepare(&mut req);
    let key = pool_key(&target);
    let (mut conn, reused) = match pool.idle.checkout(&key, pool.idle_timeout) {
        Some(conn) => (conn, true),
        None => (pool.connect(&target).await?, false),
    };
    let resp = match conn.sender.try_send_request(req).await {
        Ok(resp) => resp,
        Err(mut failed) => match failed.take_message() {
            // The node closed the idle connection just as the request was handed over.
            Some(unsent) if reused => {
                conn = pool.connect(&target).await?;
                conn.sender.send_request(unsent).await.map_err(other)?
            }
            _ => return Err(other(failed.into_error())),
        },
    };
    let home = Home {
        pool: Arc::downgrade(&pool),
        key,
    };
    let pooled = Pooled {
        clock: conn.clock.clone(),
        hyper: Some((conn, home)),
    };
    Ok((resp.map(NodeBody::Hyper), pooled))
}

/// The head of a request without a body to the HTTP/1.1 node `target` names (an absolute
/// URI), made as [`send`] makes it from a request, but from borrowed fields: a request that
/// may be retried keeps its fields for the retry instead of sending a copy. The target goes
/// in origin form, `Host` comes from `target` when the client sent none, and with
/// `te_trailers` the head says `TE: trailers` (see [`crate::upstream::h2::accept_trailers`]).
pub(crate) fn bodiless_head(
    method: &Method,
    target: &Uri,
    headers: &HeaderMap,
    te_trailers: bool,
) -> Vec<u8> {
    let origin_form = target.path_and_query().map_or("/", |pq| pq.as_str());
    let host = (!headers.contains_key(header::HOST))
        .then(|| host_of(target))
        .flatten();
    let trailers = HeaderValue::from_static("trailers");
    let te = HeaderValue::from_static("te");
    // At most three fields are added; the first `count` entries are them (the rest fill the
    // array and are never read), so no list is allocated per request.
    let mut added: [(&HeaderName, &HeaderValue); 3] = [(&header::HOST, &trailers); 3];
    let mut count = 0;
    if let Some(host) = &host {
        added[count] = (&header::HOST, host);
        count += 1;
    }
    if te_trailers {
        added[count] = (&header::TE, &trailers);
        added[count + 1] = (&header::CONNECTION, &te);
        count += 2;
    }
    h1::encode_head(method, origin_form, headers, &added[..count])
}

/// The pool's key for a request to the absolute URI `target`: its authority.
fn pool_key(target: &Uri) -> Authority {
    target
        .authority()
        .cloned()
        .expect("requests to nodes name the node")
}

/// Sends the head of a request without a body (see [`bodiless_head`]) to the HTTP/1.1 node
/// `target` names, on a pooled connection or a new one. Informational (1xx) heads before the
/// response go to `interim`.
pub(crate) async fn send_bodiless(
    cluster: &Cluster,
    target: &Uri,
    head: &[u8],
    method: &Method,
    interim: h1::OnInterim<'_>,
) -> Result<(Response<NodeBody>, Pooled), UpstreamError> {
    send_h1(
        pool_for(cluster),
        target,
        pool_key(target),
        head,
        method,
        interim,
    )
    .await
}

/// [`send_bodiless`] on a connection the switch drives itself. A request a reused connection
/// could not take (the node had closed it: the write failed, or it closed without a byte of
/// answer) goes once more on a new connection, if its method is idempotent.
async fn send_h1(
    pool: Arc<Pool>,
    target: &Uri,
    key: Authority,
    head: &[u8],
    method: &Method,
    interim: h1::OnInterim<'_>,
) -> Result<(Response<NodeBody>, Pooled), UpstreamError> {
    let (mut conn, reused) = match pool.idle_h1.checkout(&key, pool.idle_timeout) {
        Some(conn) => (conn, true),
        None => (pool.connect_h1(target).await?, false),
    };
    let mut answer = exchange(&mut conn, head, method, interim).await;
    let lost = answer.as_ref().is_err_and(NodeReplyError::never_taken);
    if reused && lost && method.is_idempotent() {
        conn = pool.connect_h1(target).await?;
        answer = exchange(&mut conn, head, method, interim).await;
    }
    let head = answer.map_err(|e| UpstreamError {
        connect: false,
        error: Box::new(e),
    })?;
    let pooled = Pooled {
        hyper: None,
        clock: conn.clock().cloned(),
    };
    let home = Home {
        pool: Arc::downgrade(&pool),
        key,
    };
    let body = H1Body::new(conn, &head, home);
    Ok((Response::from_parts(head.parts, NodeBody::H1(body)), pooled))
}

/// Writes a request head and reads the answer's.
async fn exchange(
    conn: &mut H1Conn,
    head: &[u8],
    method: &http::Method,
    interim: h1::OnInterim<'_>,
) -> Result<h1::Head, NodeReplyError> {
    conn.send(head).await?;
    conn.read_head(method, interim).await
}

/// Puts the request in the form an HTTP/1.1 origin server expects: origin-form target and a
/// `Host` (from the node's address when the client sent none, as in HTTP/1.0). Returns the
/// absolute URI it had, which says where to connect.
fn prepare(req: &mut Request<UpstreamBody>) -> Uri {
    let origin_form = match req.uri().path_and_query() {
        Some(pq) => Uri::from(pq.clone()),
        None => Uri::from_static("/"),
    };
    let target = std::mem::replace(req.uri_mut(), origin_form);
    if !req.headers().contains_key(header::HOST) {
        if let Some(host) = host_of(&target) {
            req.headers_mut().insert(header::HOST, host);
        }
    }
    target
}

/// `host[:port]` of an absolute URI (never its userinfo), the port left out when it is 80.
fn host_of(uri: &Uri) -> Option<HeaderValue> {
    let host = uri.host()?;
    let value = match uri.port_u16() {
        Some(port) if port != 80 => HeaderValue::from_str(&format!("{host}:{port}")),
        _ => HeaderValue::from_str(host),
    };
    value.ok()
}

fn other(e: hyper::Error) -> UpstreamError {
    UpstreamError {
        connect: false,
        error: Box::new(e),
    }
}

impl<C: Link> IdleLists<C> {
    fn new() -> Self {
        IdleLists(Mutex::new(FxHashMap::default()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FxHashMap<Authority, Vec<Idle<C>>>> {
        // A panic while holding the lock leaves only a list of connections behind: still
        // usable.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The most recently used connection to `key` that can take a request now. Closed and
    /// expired ones are dropped on the way; one still finishing its last response (the end
    /// of a body can reach the switch before the connection notices it is free) stays.
    fn checkout(&self, key: &Authority, idle_timeout: Duration) -> Option<C> {
        let now = Instant::now();
        let mut idle = self.lock();
        let waiting = idle.get_mut(key)?;
        let mut i = waiting.len();
        while i > 0 {
            i -= 1;
            let entry = &mut waiting[i];
            if now.duration_since(entry.since) >= idle_timeout || entry.conn.closed() {
                waiting.remove(i);
            } else if entry.conn.ready() {
                return Some(waiting.remove(i).conn);
            }
        }
        None
    }

    fn put_back(&self, key: Authority, mut conn: C, max_idle: usize) {
        if max_idle == 0 || conn.closed() {
            return;
        }
        let mut idle = self.lock();
        let waiting = idle.entry(key).or_default();
        if waiting.len() >= max_idle {
            // The least recently used makes room.
            waiting.remove(0);
        }
        waiting.push(Idle {
            conn,
            since: Instant::now(),
        });
    }

    /// Drops the connections idle for longer than the timeout, and the keys left empty.
    fn sweep(&self, now: Instant, idle_timeout: Duration) {
        let mut idle = self.lock();
        idle.retain(|_, waiting| {
            waiting.retain_mut(|entry| {
                now.duration_since(entry.since) < idle_timeout && !entry.conn.closed()
            });
            !waiting.is_empty()
        });
    }
}

impl Pool {
    fn new(cluster: &Cluster, settings: ClientSettings) -> Pool {
        let upstream = &cluster.config.upstream;
        Pool {
            settings,
            max_idle: upstream.pool_max_idle_per_node,
            idle_timeout: upstream.pool_idle_timeout,
            connector: crate::upstream::connect::node_connector(cluster),
            idle: IdleLists::new(),
            idle_h1: IdleLists::new(),
        }
    }

    /// The pool of hops to `tier`'s peers: plain HTTP/1.1 from this switch's own address
    /// within the hop timeout, idle connections kept as for nodes.
    fn for_peers(cluster: &Cluster, tier: &Tier) -> Pool {
        let upstream = &cluster.config.upstream;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(tier.config.hop_timeout));
        connector.set_local_address(tier.config.source_ip(tier.own_address));
        connector.enforce_http(true);
        Pool {
            settings: ClientSettings::of(cluster),
            max_idle: upstream.pool_max_idle_per_node,
            idle_timeout: upstream.pool_idle_timeout,
            connector: NodeConnector {
                inner: connector,
                send: SendVersion::Off,
                tls: Arc::new(TlsToNodes::default()),
            },
            idle: IdleLists::new(),
            idle_h1: IdleLists::new(),
        }
    }

    /// A connection the switch drives itself, whose response has been read whole.
    fn put_back_h1(&self, key: Authority, mut conn: H1Conn) {
        conn.release_buffer();
        self.idle_h1.put_back(key, conn, self.max_idle);
    }

    /// A new connection (connect timeout, PROXY header, TLS: [`NodeConnector`]).
    async fn open(&self, target: &Uri) -> Result<TokioIo<NodeStream>, UpstreamError> {
        self.connector
            .clone()
            .call(target.clone())
            .await
            .map_err(|error| UpstreamError {
                connect: true,
                error,
            })
    }

    /// A new connection whose HTTP/1.1 state machine hyper runs in a task of its own.
    async fn connect(&self, target: &Uri) -> Result<Conn, UpstreamError> {
        let io = self.open(target).await?;
        let clock = io.inner().clock().cloned();
        let (sender, connection) = http1::handshake(io).await.map_err(|e| UpstreamError {
            connect: true,
            error: Box::new(e),
        })?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection to a node ended: {e}");
            }
        });
        Ok(Conn { sender, clock })
    }

    /// A new connection the switch drives itself.
    async fn connect_h1(&self, target: &Uri) -> Result<H1Conn, UpstreamError> {
        Ok(H1Conn::new(self.open(target).await?.into_inner()))
    }

    fn sweep(&self, now: Instant) {
        self.idle.sweep(now, self.idle_timeout);
        self.idle_h1.sweep(now, self.idle_timeout);
    }
}

/// Closes a pool's expired connections every half idle timeout, until the pool is gone.
async fn sweep(pool: Weak<Pool>) {
    let Some(period) = pool.upgrade().map(|p| (p.idle_timeout / 2).max(MIN_SWEEP)) else {
        return;
    };
    loop {
        tokio::time::sleep(period).await;
        match pool.upgrade() {
            Some(pool) => pool.sweep(Instant::now()),
            None => return,
        }
    }
}

/// However short the idle timeout, the sweeper wakes no more often than this.
const MIN_SWEEP: Duration = Duration::from_millis(50);

/// A node's response body: read by hyper's client, or by the switch's own HTTP/1.1
/// ([`crate::upstream::h1`]).
pub(crate) enum NodeBody {
    Hyper(Incoming),
    H1(H1Body<Home>),
}

impl Body for NodeBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            NodeBody::Hyper(inner) => Pin::new(inner)
                .poll_frame(cx)
                .map(|frame| frame.map(|r| r.map_err(|e| Box::new(e) as BoxError))),
            NodeBody::H1(inner) => Pin::new(inner).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            NodeBody::Hyper(inner) => inner.is_end_stream(),
            NodeBody::H1(inner) => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            NodeBody::Hyper(inner) => inner.size_hint(),
            NodeBody::H1(inner) => inner.size_hint(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(uri: &str, host: Option<&str>) -> Request<UpstreamBody> {
        let mut req = Request::new(UpstreamBody::Empty);
        *req.uri_mut() = uri.parse().unwrap();
        if let Some(host) = host {
            req.headers_mut()
                .insert(header::HOST, HeaderValue::from_str(host).unwrap());
        }
        req
    }

    #[test]
    fn requests_go_out_in_origin_form_with_a_host() {
        let mut req = request("http://10.0.0.1:8080/a/b?c=d", None);
        let target = prepare(&mut req);
        assert_eq!(target, "http://10.0.0.1:8080/a/b?c=d");
        assert_eq!(req.uri(), "/a/b?c=d");
        assert_eq!(req.headers()[header::HOST], "10.0.0.1:8080");
    }

    #[test]
    fn the_clients_host_stays_and_userinfo_never_leaks() {
        let mut req = request("http://1.2.3.4~5~6.7.8.9~80@10.0.0.1:8080/", Some("site"));
        let target = prepare(&mut req);
        assert_eq!(req.headers()[header::HOST], "site");
        assert_eq!(
            target.authority().unwrap().as_str(),
            "1.2.3.4~5~6.7.8.9~80@10.0.0.1:8080"
        );
        let mut req = request("http://1.2.3.4~5~6.7.8.9~80@10.0.0.1/x", None);
        prepare(&mut req);
        assert_eq!(req.headers()[header::HOST], "10.0.0.1");
        assert_eq!(req.uri(), "/x");
    }

    /// The head built from borrowed fields has the request line and the fields [`send`] writes
    /// for the same request made whole (Host from the target or the client's, trailers asked
    /// for); only the order of the fields the switch adds may differ.
    #[test]
    fn a_bodiless_head_from_borrowed_fields_is_the_prepared_requests() {
        for (uri, host, te_trailers) in [
            ("http://10.0.0.1:8080/a/b?c=d", None, false),
            ("http://10.0.0.1/", Some("site"), true),
            ("http://1.2.3.4~5~6.7.8.9~80@10.0.0.1:81/x", None, true),
        ] {
            let mut req = request(uri, host);
            req.headers_mut()
                .insert("x-forwarded-for", HeaderValue::from_static("192.0.2.7"));
            req.headers_mut().insert(
                header::TRANSFER_ENCODING,
                HeaderValue::from_static("chunked"),
            );
            let target: Uri = uri.parse().unwrap();
            let borrowed = bodiless_head(&Method::GET, &target, req.headers(), te_trailers);
            if te_trailers {
                crate::upstream::h2::accept_trailers(&mut req, crate::config::NodeProtocol::Http1);
            }
            prepare(&mut req);
            let origin_form = req.uri().path_and_query().unwrap().as_str();
            let whole = h1::encode_head(req.method(), origin_form, req.headers(), &[]);
            let (borrowed, whole) = (String::from_utf8(borrowed), String::from_utf8(whole));
            let (borrowed, whole) = (borrowed.unwrap(), whole.unwrap());
            let sorted = |head: &str| {
                let mut lines: Vec<String> = head.lines().map(str::to_string).collect();
                lines[1..].sort();
                lines
            };
            // The same fields (the order of added ones may differ), the same request line.
            assert_eq!(sorted(&borrowed), sorted(&whole), "{uri}");
            assert!(borrowed.ends_with("\r\n\r\n") && !borrowed.contains("transfer-encoding"));
        }
    }
}
