//! Proxying one request: limits, classification, dispatch, admission, forwarding, retry and
//! accounting.
//!
//! A request's way to a node: the policy picks a node (hiding nodes whose admission gate is
//! saturated, see [`crate::state::admission`]); the node's gate admits it at once, queues it, or sheds
//! it with `503` + `Retry-After`; the request is sent with the class's first-byte timeout
//! (bounded by what is left of `timeouts.upstream`); the response head, or the failure, goes to
//! the admission limiter, passive health and the outlier detector ([`crate::state::outlier`]). A
//! request that waited out a node's queue timeout never reached it, so it goes to another node
//! with room, if one has (HAProxy's `option redispatch`). A request that failed before any byte reached the client, is idempotent and has no body, is
//! sent once more to another node when the node refused the connection, closed it without a
//! response, or missed the first-byte timeout — within the retry budget. Interim (1xx) heads
//! the node sends before its response go on to the client as they arrive
//! ([`crate::pipeline::interim`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use capstan_core::{ClassId, NodeId, Outcome, RequestInfo};
use http::header::{self, HeaderMap, HeaderValue};
use http::uri::{PathAndQuery, Scheme};
use http::{Method, Request, Response, StatusCode, Uri, Version};

use crate::pipeline::interim::Interim;
use crate::pipeline::response::error_response;
use crate::pipeline::response::{OnEnd, ResponseBody};
use crate::state::admission::{Permit, Shed};
use crate::state::cluster::{Cluster, FailureKind, Hide, LiveView, NodeRuntime};
use crate::state::outlier::Verdict;
use crate::state::switch::{ConnState, Switch};
use crate::upstream::body::UpstreamBody;
use crate::upstream::pool::NodeBody;
use crate::upstream::pool::Pooled;

/// The client's address as a header value, made once per connection.
pub(crate) fn peer_header(peer: SocketAddr) -> HeaderValue {
    HeaderValue::from_str(&peer.ip().to_string()).expect("an IP address is a valid header value")
}

/// Bookkeeping for one request placed on a node, settled when its response ends — or, whatever
/// else ends it (the client gone, an error, a panic), when it is dropped.
pub(crate) struct Placement {
    switch: Arc<Switch>,
    cluster: Arc<Cluster>,
    node_id: NodeId,
    class: ClassId,
    key: PathAndQuery,
    /// `Epoch` nanoseconds at dispatch.
    started_nanos: u64,
    conn: Arc<ConnState>,
    /// The node's admission slot, freed when the placement is dropped.
    pub(crate) permit: Permit,
    settled: bool,
}

impl Drop for Placement {
    fn drop(&mut self) {
        if !self.settled {
            self.settle(false);
        }
    }
}

impl Placement {
    fn node(&self) -> &Arc<NodeRuntime> {
        &self.cluster.nodes[self.node_id]
    }

    /// Releases the node's `active` count and tells the policy how it went (once).
    pub(crate) fn settle(&mut self, ok: bool) {
        if std::mem::replace(&mut self.settled, true) {
            return;
        }
        let node = self.node();
        node.active.fetch_sub(1, Ordering::Relaxed);
        let now = self.switch.epoch.now_nanos();
        let elapsed_nanos = now.saturating_sub(self.started_nanos);
        node.record_latency(elapsed_nanos / 1000);
        let key = crate::state::request::key_of(&self.key, self.cluster.config.upstream.key);
        let info = crate::state::request::request_info(self.class, key);
        let outcome = Outcome {
            ok,
            latency_nanos: elapsed_nanos,
            finished_at_nanos: now,
        };
        self.cluster.policy.on_done(self.node_id, &info, &outcome);
    }
}

/// Settles a placement when the response body ends, releases the client connection's
/// request, and gives the node connection back to its pool if the body ended whole.
struct SettleOnEnd(Option<Placement>, Option<Pooled>);

impl OnEnd for SettleOnEnd {
    fn on_end(&mut self, completed: bool) {
        if let Some(mut p) = self.0.take() {
            p.settle(completed);
            p.conn.request_done();
        }
        if let (Some(pooled), true) = (self.1.take(), completed) {
            pooled.release();
        }
    }
}

/// A request on its way to a node: what dispatching and forwarding need, owned so that a
/// background task (a cache fill) can carry it.
pub(crate) struct Forward {
    pub switch: Arc<Switch>,
    pub cluster: Arc<Cluster>,
    pub conn: Arc<ConnState>,
    pub class: ClassId,
    pub method: Method,
    pub pq: PathAndQuery,
    pub client_version: Version,
    /// The client sent `TE: trailers`, so the switch asks the node for trailers (see
    /// [`crate::upstream::h2::accept_trailers`]).
    pub te_trailers: bool,
    /// Where the node's interim (1xx) responses go when they cannot find the client's way
    /// themselves, as in a cache fill's own task: its leader's. `None` for the client's own
    /// request, whose way is taken when needed ([`Forward::interim`]).
    pub interim: Option<Interim>,
}

impl Forward {
    /// A client's request on its way to a node, once classified: what the road needs of it,
    /// owned (the client's way for interim responses comes out of an HTTP/3 request's
    /// extensions).
    pub(crate) fn of(
        (switch, cluster, conn): (&Arc<Switch>, &Arc<Cluster>, &Arc<ConnState>),
        class: ClassId,
        pq: PathAndQuery,
        parts: &mut http::request::Parts,
    ) -> Forward {
        Forward {
            switch: Arc::clone(switch),
            cluster: Arc::clone(cluster),
            conn: Arc::clone(conn),
            class,
            method: parts.method.clone(),
            pq,
            client_version: parts.version,
            te_trailers: crate::pipeline::node_request::accepts_trailers(&parts.headers),
            // An HTTP/3 request carries its way for interim responses; the others find
            // hyper's.
            interim: match parts.version {
                Version::HTTP_3 => parts.extensions.remove::<Interim>(),
                _ => None,
            },
        }
    }
}

/// A node's interim heads go to the client (see [`crate::pipeline::interim`]).
impl crate::upstream::InterimHeads for Forward {
    fn pass(&self, status: StatusCode, headers: HeaderMap) {
        self.pass_interim(status, headers);
    }

    fn attach(&self, req: &mut Request<UpstreamBody>) {
        // hyper's clients read the node in tasks of their own: the way back goes with the
        // request.
        if let Some(interim) = self.interim() {
            interim.attach(req);
        }
    }
}

impl Forward {
    /// The way to the client for the node's interim responses: the one this request carries,
    /// else its client's (only from the request's own task, see [`Interim::of_client`]).
    pub(crate) fn interim(&self) -> Option<Interim> {
        match &self.interim {
            Some(interim) => Some(interim.clone()),
            None => Interim::of_client(self.client_version),
        }
    }

    /// Passes an interim head from the node on to the client, if it takes them.
    fn pass_interim(&self, status: StatusCode, headers: HeaderMap) {
        if let Some(interim) = self.interim() {
            interim.pass(status, headers);
        }
    }

    pub(crate) fn with_class(&self, mut resp: Response<ResponseBody>) -> Response<ResponseBody> {
        let headers = resp.headers_mut();
        crate::pipeline::response::debug_headers(headers, &self.cluster, self.class, None);
        resp
    }

    /// Counts a request placed on `node_id`; the placement settles the count when it ends.
    pub(crate) fn place(&self, node_id: NodeId, now: u64, permit: Permit) -> Placement {
        let node = &self.cluster.nodes[node_id];
        node.active.fetch_add(1, Ordering::Relaxed);
        node.class_placed[self.class].fetch_add(1, Ordering::Relaxed);
        Placement {
            switch: Arc::clone(&self.switch),
            cluster: Arc::clone(&self.cluster),
            node_id,
            class: self.class,
            key: self.pq.clone(),
            started_nanos: now,
            conn: Arc::clone(&self.conn),
            permit,
            settled: false,
        }
    }

    /// The policy's pick among the nodes with a free admission slot; when none has one and
    /// `may_wait`, among those with room in their queue, and when none has, among all of them
    /// (that node will shed the request). A request that has already waited out one queue
    /// timeout does not wait again: it goes where a slot is free, or is shed.
    pub(crate) fn pick(
        &self,
        info: &RequestInfo<'_>,
        exclude: Option<NodeId>,
        may_wait: bool,
        now: u64,
    ) -> Option<NodeId> {
        let cluster = &self.cluster;
        let pick = |hide| {
            let view = LiveView {
                now_nanos: now,
                nodes: &cluster.nodes,
                exclude,
                weights: cluster.needs.weights,
                hide,
                tier: self.switch.tier.as_ref(),
            };
            cluster.policy.pick(info, &view)
        };
        pick(Hide::Full)
            .or_else(|| may_wait.then(|| pick(Hide::Saturated)).flatten())
            .or_else(|| may_wait.then(|| pick(Hide::Nothing)).flatten())
            .filter(|&id| id < cluster.nodes.len())
    }

    /// `503` with `Retry-After` for a request the node's admission gate turned away.
    pub(crate) fn shed(&self, node: &NodeRuntime, shed: Shed) -> Response<ResponseBody> {
        crate::observe::access_log::note_decision("shed");
        let admission = &self.cluster.config.admission;
        let name = &node.config.name;
        let cause = match shed {
            Shed::QueueFull => format!(
                "node {name} is at its concurrency limit ({}) and cannot queue more requests \
                 ({} waiting); request shed",
                node.admission.limit(),
                node.admission.queued()
            ),
            Shed::QueueTimeout => format!(
                "node {name} had no free slot within the queue timeout ({}); request shed",
                humantime::format_duration(admission.queue_timeout)
            ),
            Shed::Stalled => {
                node.admission.count_stalled_shed();
                format!(
                    "node {name} stopped answering while the request waited for it, and no \
                     other node could take it; request shed"
                )
            }
        };
        let mut resp = error_response(StatusCode::SERVICE_UNAVAILABLE, &cause);
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(admission.retry_after_s()),
        );
        self.with_class(resp)
    }

    /// The policy found no node: 502 with the last failure when a retry found none, else 503.
    pub(crate) fn no_node(&self, last_failure: Option<&str>) -> Response<ResponseBody> {
        crate::observe::access_log::note_decision("no-node");
        self.with_class(match last_failure {
            Some(failure) => error_response(StatusCode::BAD_GATEWAY, failure),
            None => error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "no node available (all are down or backed off)",
            ),
        })
    }

    fn body_too_large(&self) -> Response<ResponseBody> {
        self.with_class(error_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!(
                "request body exceeds the limit of {} bytes",
                self.cluster.config.limits.max_body_bytes
            ),
        ))
    }

    /// Picks a node with the policy, waits for its admission and sends the request there (once
    /// more elsewhere when `retryable`, the failure is one a retry can cure, and the retry
    /// budget allows). `Ok` is the node's response, `Err` the switch's own.
    pub(crate) async fn dispatch(
        &self,
        mut headers: HeaderMap,
        body: UpstreamBody,
        retryable: bool,
        body_limit_hit: Option<Arc<AtomicBool>>,
    ) -> Result<Response<ResponseBody>, Response<ResponseBody>> {
        let (switch, cluster) = (&self.switch, &self.cluster);
        let config = &cluster.config;
        let key = crate::state::request::key_of(&self.pq, config.upstream.key);
        let info = crate::state::request::request_info(self.class, key);
        switch.retry_budget.record_request(switch.epoch.now_nanos());
        let mut body = Some(body);
        let mut exclude = None;
        let mut last_failure: Option<String> = None;
        // What is left of `timeouts.upstream` (time in a queue does not count).
        let mut time_left = config.timeouts.upstream;
        // A request that left a node's queue without a slot: that node, and why.
        let mut queued_out: Option<(NodeId, Shed)> = None;
        for attempt in 0..2 {
            let Some(node_id) = self.pick_node(&info, exclude, queued_out) else {
                return Err(self.none_left(queued_out, last_failure.as_deref()));
            };
            let node = &cluster.nodes[node_id];
            let permit = match node
                .admission
                .admit(self.class, switch.epoch.now_nanos())
                .await
            {
                Ok(permit) => permit,
                // It never reached the node: another node with room may take it, whatever
                // its method (HAProxy's `option redispatch`); no retry budget is spent.
                Err(why @ (Shed::QueueTimeout | Shed::Stalled)) if attempt == 0 => {
                    queued_out = Some((node_id, why));
                    exclude = Some(node_id);
                    continue;
                }
                Err(shed) => return Err(self.shed(node, shed)),
            };
            let now = switch.epoch.now_nanos();
            let mut placement = self.place(node_id, now, permit);
            let keep_for_retry = retryable && attempt == 0;
            let up_body = body.take().unwrap_or(UpstreamBody::Empty);
            let first_byte = cluster.first_byte[self.class];
            let wait = first_byte.min(time_left);
            let sent = self
                .send_attempt(node, &mut headers, up_body, keep_for_retry, wait)
                .await;
            let after = switch.epoch.now_nanos();
            let took = after.saturating_sub(now);
            time_left = time_left.saturating_sub(std::time::Duration::from_nanos(took));
            let failure = match sent {
                Ok(Ok((resp, pooled))) => {
                    let timed = (now, after);
                    return Ok(self.answered(node_id, resp, pooled, placement, timed));
                }
                Ok(Err(_))
                    if body_limit_hit
                        .as_ref()
                        .is_some_and(|f| f.load(Ordering::Relaxed)) =>
                {
                    placement.settle(false);
                    return Err(self.body_too_large());
                }
                Ok(Err(e)) if e.connect => Failure::of(FailureKind::Connect, &*e.error),
                Ok(Err(e)) => Failure::of(FailureKind::Other, &*e.error),
                Err(_elapsed) => {
                    node.admission
                        .record(self.class, took, &placement.permit, after, false);
                    Failure::timeout(wait, wait < first_byte || time_left.is_zero())
                }
            };
            placement.settle(false);
            drop(placement);
            let described = self.count_failure(node_id, &failure, after);
            if keep_for_retry && failure.worth_retrying() && self.retry_allowed(after) {
                node.retries.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("{described}; retrying on another node");
                last_failure = Some(described);
                exclude = Some(node_id);
                continue;
            }
            return Err(self.with_class(error_response(failure.status(), &described)));
        }
        Err(self.with_class(error_response(
            StatusCode::BAD_GATEWAY,
            last_failure
                .as_deref()
                .unwrap_or("no node could take the request"),
        )))
    }

    /// The policy's pick for an attempt (not `exclude`), noted in the access log. One that
    /// waited out a queue timeout (`queued_out`) is not queued a second time (under overload
    /// it would wait twice); one whose node stalled may wait again elsewhere.
    fn pick_node(
        &self,
        info: &RequestInfo<'_>,
        exclude: Option<NodeId>,
        queued_out: Option<(NodeId, Shed)>,
    ) -> Option<NodeId> {
        let may_wait = !matches!(queued_out, Some((_, Shed::QueueTimeout)));
        let now = self.switch.epoch.now_nanos();
        let node_id = self.pick(info, exclude, may_wait, now)?;
        crate::observe::access_log::note_node(&self.cluster.nodes[node_id].name_header);
        Some(node_id)
    }

    /// No node is left for the request: the shed of the node whose queue it left
    /// (`queued_out`), else "no node" with the last failure.
    fn none_left(
        &self,
        queued_out: Option<(NodeId, Shed)>,
        last_failure: Option<&str>,
    ) -> Response<ResponseBody> {
        match queued_out {
            Some((id, why)) => self.shed(&self.cluster.nodes[id], why),
            None => self.no_node(last_failure),
        }
    }

    /// The node's response head arrived (`timed`: sent at, head at): the limiter, passive
    /// health and the policy learn of it, and the response goes on to the client, settling
    /// its placement when its body ends.
    fn answered(
        &self,
        node_id: NodeId,
        resp: Response<NodeBody>,
        pooled: Option<Pooled>,
        placement: Placement,
        (now, after): (u64, u64),
    ) -> Response<ResponseBody> {
        crate::observe::access_log::note_first_byte();
        let took = after.saturating_sub(now);
        // The node's own latency when the socket timed it: the switch's time around it
        // (connecting included) says nothing of the node (crate::net::node_clock). Its answer
        // came `ago` before the switch got to it.
        let (latency, answered) = match pooled.as_ref().and_then(Pooled::node_answer) {
            Some((latency, ago)) => (latency.min(took), after.saturating_sub(ago).max(now)),
            None => (took, after),
        };
        let status = resp.status();
        self.head_arrived(node_id, status, latency, &placement.permit, answered);
        forward_response(
            resp,
            placement,
            pooled,
            &self.cluster,
            self.class,
            self.client_version,
        )
    }

    /// A response head from `node_id`: the admission limiter learns its latency, the outlier
    /// detector whether it was a server error.
    pub(crate) fn head_arrived(
        &self,
        node_id: NodeId,
        status: StatusCode,
        took_nanos: u64,
        permit: &Permit,
        now: u64,
    ) {
        let node = &self.cluster.nodes[node_id];
        node.record_response();
        node.admission
            .record(self.class, took_nanos, permit, now, true);
        if status.is_server_error() {
            self.count_outlier_failure(node_id, now);
        } else {
            node.outlier.on_success(now, &self.cluster.config.outlier);
        }
    }

    /// Records a failed request to `node_id` with passive health and the outlier detector, and
    /// describes it as the client reads it.
    fn count_failure(&self, node_id: NodeId, failure: &Failure, now: u64) -> String {
        let node = &self.cluster.nodes[node_id];
        node.record_failure(failure.kind, now, &self.cluster.config.health);
        // Connect failures are passive health's (it takes a node out sooner).
        if failure.kind != FailureKind::Connect {
            self.count_outlier_failure(node_id, now);
        }
        failure.describe(node)
    }

    fn count_outlier_failure(&self, node_id: NodeId, now: u64) {
        let cluster = &self.cluster;
        let settings = &cluster.config.outlier;
        let name = &cluster.nodes[node_id].config.name;
        match crate::state::outlier::on_failure(&cluster.nodes, node_id, now, settings) {
            Verdict::Stays => {}
            Verdict::Ejected(length) => {
                cluster.nodes[node_id].admission.evict_waiters();
                tracing::warn!(
                    node = %name,
                    "node ejected for {} after {} failed requests in a row",
                    humantime::format_duration(length),
                    settings.consecutive_failures
                )
            }
            Verdict::Prevented => tracing::warn!(
                node = %name,
                "node failed {} requests in a row but stays: {} % of the nodes are ejected already",
                settings.consecutive_failures,
                settings.max_ejected_percent
            ),
        }
    }
}

/// Why one attempt to a node failed.
struct Failure {
    kind: FailureKind,
    cause: String,
    /// The node closed or reset the connection before a response head.
    empty_reply: bool,
    /// For a timeout: how long the node had.
    waited: std::time::Duration,
    /// For a timeout: the first-byte timeout fired with time left for another node.
    retry_time_left: bool,
}

impl Failure {
    fn of(kind: FailureKind, e: &(dyn std::error::Error + 'static)) -> Failure {
        Failure {
            kind,
            cause: innermost_cause(e),
            empty_reply: kind == FailureKind::Other && is_empty_reply(e),
            waited: std::time::Duration::ZERO,
            retry_time_left: false,
        }
    }

    /// No response head within `waited`; `overall` when that was the last of
    /// `timeouts.upstream`.
    fn timeout(waited: std::time::Duration, overall: bool) -> Failure {
        Failure {
            kind: FailureKind::Timeout,
            cause: String::new(),
            empty_reply: false,
            waited,
            retry_time_left: !overall,
        }
    }

    /// The status the client gets when this failure ends the request.
    fn status(&self) -> StatusCode {
        match self.kind {
            FailureKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
            FailureKind::Connect | FailureKind::Other => StatusCode::BAD_GATEWAY,
        }
    }

    /// HAProxy's `retry-on conn-failure empty-response response-timeout`: the node cannot
    /// have answered a request it never answered, and an idempotent one may be sent again.
    fn worth_retrying(&self) -> bool {
        match self.kind {
            FailureKind::Connect => true,
            FailureKind::Other => self.empty_reply,
            FailureKind::Timeout => self.retry_time_left,
        }
    }

    /// The cause of the failure, as the client reads it.
    fn describe(&self, node: &NodeRuntime) -> String {
        let (name, addr, cause) = (&node.config.name, node.config.address, &self.cause);
        match self.kind {
            FailureKind::Connect => format!("could not connect to node {name} ({addr}): {cause}"),
            FailureKind::Timeout => format!(
                "node {name} ({addr}) sent no response within {}",
                humantime::format_duration(self.waited)
            ),
            FailureKind::Other if self.empty_reply => {
                format!("node {name} ({addr}) closed the connection without a response: {cause}")
            }
            FailureKind::Other => format!("node {name} ({addr}) failed: {cause}"),
        }
    }
}

impl Forward {
    /// Whether the retry budget has a retry left, counting it if so.
    fn retry_allowed(&self, now_nanos: u64) -> bool {
        let upstream = &self.cluster.config.upstream;
        let granted = self.switch.retry_budget.try_retry(
            now_nanos,
            upstream.retry_budget_percent,
            upstream.retry_budget_min_per_second,
        );
        if !granted {
            tracing::debug!("retry budget spent; the failure goes to the client");
        }
        granted
    }
}

/// Whether a node closed or reset the connection before a whole response head arrived.
/// (hyper reports a head cut short the same way as no head at all; either way the request is
/// idempotent by the time this matters.)
fn is_empty_reply(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(err) = cause {
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
        {
            return true;
        }
        if let Some(reply) = err.downcast_ref::<crate::upstream::h1::NodeReplyError>() {
            return reply.is_empty_reply();
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return crate::upstream::h1::is_reset(io);
        }
        cause = err.source();
    }
    false
}

impl Forward {
    /// Turns the client's fields into the node's, for `client` and this request's `road`:
    /// the one way every request to a node or peer is built
    /// ([`crate::pipeline::node_request::build`]).
    pub(crate) fn node_headers(
        &self,
        headers: &mut HeaderMap,
        client: crate::pipeline::node_request::Client<'_>,
        road: crate::pipeline::node_request::Road<'_>,
    ) {
        crate::pipeline::node_request::build(
            headers,
            client,
            self.client_version,
            road,
            self.cluster.config.upstream.forwarded,
        );
    }
}

impl Forward {
    /// Sends the request to `node` (in its protocol: `crate::upstream::send` decides),
    /// waiting at most `wait` for the head of its answer. `headers` stay for a retry when
    /// `keep_for_retry`. Not an `async fn`: a future nested in another is copied into it, and
    /// this one is awaited straight from `dispatch`.
    fn send_attempt<'a>(
        &'a self,
        node: &'a NodeRuntime,
        headers: &'a mut HeaderMap,
        body: UpstreamBody,
        keep_for_retry: bool,
        wait: std::time::Duration,
    ) -> tokio::time::Timeout<impl std::future::Future<Output = crate::upstream::Sent> + 'a> {
        let req = crate::upstream::ToNode {
            method: &self.method,
            target: self.node_uri(node),
            headers,
            keep_headers: keep_for_retry,
            body,
            te_trailers: self.te_trailers,
        };
        tokio::time::timeout(wait, crate::upstream::send(&self.cluster, node, req, self))
    }

    /// The URI the request has at `node`, which says where to connect. With PROXY protocol to
    /// nodes its authority carries the client's addresses
    /// (see [`crate::upstream::proxy_protocol::authority_for`]).
    fn node_uri(&self, node: &NodeRuntime) -> Uri {
        let send = self.cluster.config.proxy_protocol.send;
        let authority = match &self.conn.peer {
            Some(peer) if send != crate::config::sections::proxy_protocol::SendVersion::Off => {
                crate::upstream::proxy_protocol::authority_for(
                    &node.authority,
                    peer.client,
                    peer.local,
                )
            }
            _ => node.authority.clone(),
        };
        Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(authority)
            .path_and_query(self.pq.clone())
            .build()
            .expect("scheme, authority and path are valid")
    }
}

/// The innermost cause of an error, which is the part worth showing.
fn innermost_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: &(dyn std::error::Error + 'static) = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

fn forward_response(
    resp: Response<NodeBody>,
    placement: Placement,
    pooled: Option<Pooled>,
    cluster: &Cluster,
    class: ClassId,
    client_version: Version,
) -> Response<ResponseBody> {
    let (mut parts, body) = resp.into_parts();
    crate::pipeline::hop_by_hop::strip(&mut parts.headers);
    let via = crate::pipeline::node_request::via_value(parts.version);
    crate::pipeline::node_request::append_list(&mut parts.headers, &header::VIA, &via);
    let node = Some(&placement.node().name_header);
    crate::pipeline::response::debug_headers(&mut parts.headers, cluster, class, node);
    parts.version = client_version;
    Response::from_parts(
        parts,
        ResponseBody::Upstream {
            inner: body,
            on_end: Some(Box::new(SettleOnEnd(Some(placement), pooled))),
        },
    )
}
