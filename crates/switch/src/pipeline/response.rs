//! The response a client gets: [`ResponseBody`] (the switch's own bytes, a node's body streamed
//! through, a cache fill's body, or any of them counted and logged when it ends), the switch's
//! own error answers ([`error_response`]), and the request's access-log line from its head
//! ([`Pending`]) to the end of its body ([`LoggedBody`]), written through [`crate::observe`].

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use hyper::body::{Body, Frame, SizeHint};

use crate::config::sections::access_log::LogFormat;
use crate::net::BoxError;
use crate::observe::access_log::*;
use crate::state::cache::fill::FillReader;
use crate::state::switch::ConnState;
use crate::upstream::pool::NodeBody;

/// The header every cached answer carries (RFC 9211).
pub(crate) static CACHE_STATUS: header::HeaderName =
    header::HeaderName::from_static("cache-status");

/// `X-Capstan-Node`: the node that answered (with `debug_headers = true`).
pub(crate) static X_CAPSTAN_NODE: http::HeaderName =
    http::HeaderName::from_static("x-capstan-node");
/// `X-Capstan-Class`: the request's class (with `debug_headers = true`).
pub(crate) static X_CAPSTAN_CLASS: http::HeaderName =
    http::HeaderName::from_static("x-capstan-class");

/// The debug fields of a response when `debug_headers` is on: the node that answered, when one
/// was picked, then the request's class. The one place every answer (forwarded, redirected,
/// from the cache, or the switch's own) gets them.
#[inline]
pub(crate) fn debug_headers(
    headers: &mut http::HeaderMap,
    cluster: &crate::state::cluster::Cluster,
    class: capstan_core::ClassId,
    node: Option<&HeaderValue>,
) {
    if !cluster.config.debug_headers {
        return;
    }
    if let Some(node) = node {
        headers.insert(&X_CAPSTAN_NODE, node.clone());
    }
    headers.insert(&X_CAPSTAN_CLASS, cluster.class_headers[class].clone());
}

/// A request being logged, from its head until its response is attached: the box that will
/// be the response's [`LoggedBody`], taken from this thread's spares and filled in place, so
/// that the line's record is never moved (the request future holds a pointer). Dropped before
/// a response was attached, it writes the line with [`CLIENT_GONE`].
pub(crate) struct Pending {
    body: Option<Box<LoggedBody>>,
}

/// A Common or Combined line formatted when its request head arrived, but for the status and
/// the byte count: `text[..split]` goes before them, `text[split..]` after. Kept with a spare
/// body for its room.
#[derive(Default)]
pub(crate) struct HeadText {
    pub(crate) text: Vec<u8>,
    pub(crate) split: usize,
}

/// A head text longer than this (a long URL or user agent) is not kept for the next request.
const MAX_KEPT_HEAD_TEXT: usize = 4096;

impl HeadText {
    /// Formats what the request head, which arrived at `time`, tells of a Common or Combined
    /// line.
    pub(crate) fn format<B>(
        &mut self,
        format: LogFormat,
        time: SystemTime,
        client: &HeaderValue,
        req: &Request<B>,
    ) {
        self.text.clear();
        // The client is the address the switch wrote itself (from the socket or a PROXY
        // header), so it needs no escaping check, which a `Record`'s client gets.
        debug_assert!(all_plain(client.as_bytes(), b'!'), "{client:?}");
        self.text.extend_from_slice(client.as_bytes());
        with_dates(|dates| {
            let date = dates.clf(time);
            push_request_part(&mut self.text, date, req.method(), req.uri(), req.version())
        });
        self.split = self.text.len();
        if format == LogFormat::Combined {
            let (_, referer, user_agent) = logged_headers(req.headers(), format);
            let (referer, user_agent) = (
                referer.map(HeaderValue::as_bytes),
                user_agent.map(HeaderValue::as_bytes),
            );
            push_combined_part(&mut self.text, referer, user_agent);
        }
        self.text.push(b'\n');
    }
}

impl Pending {
    /// `Some` when the switch logs and this request is one of the sampled.
    pub(crate) fn begin<B>(
        log: Option<&Arc<AccessLog>>,
        conn: &ConnState,
        client: &HeaderValue,
        req: &Request<B>,
    ) -> Option<Pending> {
        let log = log.filter(|log| log.sampled())?;
        let mut body = SPARE_BODIES
            .try_with(|spares| spares.borrow_mut().pop())
            .ok()
            .flatten()
            .unwrap_or_else(|| Box::new(LoggedBody::empty()));
        // Set field by field: the body is large (a JSON record's room), and building it whole
        // would copy all of it.
        if log.format == LogFormat::Json {
            let start = Instant::now();
            body.record = Some(json_record(conn, client, req, start));
            body.notes = Some(Notes::fresh(start));
        } else {
            body.head.format(log.format, SystemTime::now(), client, req);
        }
        body.log = Some(Arc::clone(log));
        Some(Pending { body: Some(body) })
    }

    /// The notes the handling of this request is to take (`None`: its line says nothing they
    /// would hold); run it with [`noting`].
    pub(crate) fn notes(&self) -> Option<&Arc<Notes>> {
        self.body.as_ref()?.notes.as_ref()
    }

    /// Wraps the response so that its line is written when its body ends.
    pub(crate) fn attach(mut self, resp: Response<ResponseBody>) -> Response<ResponseBody> {
        let (parts, body) = resp.into_parts();
        let Some(mut logged) = self.body.take() else {
            return Response::from_parts(parts, body);
        };
        logged.expected = body.size_hint().exact();
        logged.inner = body;
        logged.status = parts.status.as_u16();
        // Only a JSON line says how the cache answered (a lookup of a field by a name that is
        // not a standard one costs a hash).
        if logged.record.is_some() {
            logged.cache_status = parts.headers.get(&CACHE_STATUS).cloned();
        }
        Response::from_parts(parts, ResponseBody::Logged(Some(logged)))
    }
}

/// The status logged for a request dropped before its answer began: its client went away (an
/// HTTP/2 stream reset, a connection closed by a deadline or at shutdown). nginx's code for it.
pub(crate) const CLIENT_GONE: u16 = 499;

impl Drop for Pending {
    /// The request was abandoned before a response was attached: its line says 499.
    fn drop(&mut self) {
        if let Some(mut body) = self.body.take() {
            body.status = CLIENT_GONE;
            body.finish(false);
            LoggedBody::recycle(body);
        }
    }
}

/// A JSON line's record as far as the request head tells it.
fn json_record<B>(
    conn: &ConnState,
    client: &HeaderValue,
    req: &Request<B>,
    start: Instant,
) -> Record {
    let since_accept = conn.peer.as_ref().map(|p| start - p.accepted);
    let (host, referer, user_agent) = logged_headers(req.headers(), LogFormat::Json);
    Record {
        time: SystemTime::now(),
        client: client.clone(),
        client_port: conn.peer.as_ref().map(|p| p.client.port()),
        method: req.method().clone(),
        uri: req.uri().clone(),
        version: req.version(),
        host: host.cloned(),
        referer: referer.cloned(),
        user_agent: user_agent.cloned(),
        status: 0,
        bytes: 0,
        completed: false,
        class: None,
        node: None,
        decision: "switch",
        cache_status: None,
        timings: Timings {
            since_accept,
            ..Timings::default()
        },
    }
}

/// How a response ended, as its line tells it.
struct End {
    status: u16,
    bytes: u64,
    completed: bool,
    cache_status: Option<HeaderValue>,
}

/// Fills in what a JSON record learns when the response ends.
fn complete_record(record: &mut Record, notes: Option<Arc<Notes>>, end: End) {
    record.status = end.status;
    record.bytes = end.bytes;
    record.completed = end.completed;
    let mut decision = None;
    if let Some(notes) = notes {
        record.timings.end = Some(notes.start.elapsed());
        if let Ok(mut noted) = notes.noted.lock() {
            let noted = std::mem::take(&mut *noted);
            record.class = noted.class;
            record.node = noted.node;
            decision = noted.decision;
            let t = &mut record.timings;
            (t.dispatch, t.sent, t.connect, t.first_byte) =
                (noted.dispatch, noted.sent, noted.connect, noted.first_byte);
        }
        Notes::recycle(notes);
    }
    record.decision = decision.unwrap_or(match (&record.node, &end.cache_status) {
        (Some(_), _) => "forward",
        (None, Some(_)) => "cache",
        (None, None) => "switch",
    });
    record.cache_status = end.cache_status;
}

/// The request's `Host`, `Referer` and `User-Agent`, those the format writes (each a reference
/// on hyper's read buffer), found in one pass over the fields: cheaper than three lookups for
/// the few fields most requests carry. The first of repeated fields, as `HeaderMap::get` gives.
pub(crate) fn logged_headers(
    headers: &http::HeaderMap,
    format: LogFormat,
) -> (
    Option<&HeaderValue>,
    Option<&HeaderValue>,
    Option<&HeaderValue>,
) {
    let (mut host, mut referer, mut user_agent) = (None, None, None);
    if format == LogFormat::Common {
        return (host, referer, user_agent);
    }
    let json = format == LogFormat::Json;
    for (name, value) in headers {
        let slot = if *name == header::REFERER {
            &mut referer
        } else if *name == header::USER_AGENT {
            &mut user_agent
        } else if json && *name == header::HOST {
            &mut host
        } else {
            continue;
        };
        if slot.is_none() {
            *slot = Some(value);
        }
    }
    (host, referer, user_agent)
}

/// A response body that counts what it sends and logs the request when it ends (or is
/// dropped unfinished).
pub(crate) struct LoggedBody {
    inner: ResponseBody,
    /// The body's length when known at the start: sending that much completes it (hyper does
    /// not poll a body of known length after its last byte).
    expected: Option<u64>,
    bytes: u64,
    status: u16,
    cache_status: Option<HeaderValue>,
    /// Where the line goes; `None` once it is written (or when the body is a spare).
    log: Option<Arc<AccessLog>>,
    /// Only JSON lines say what happened inside the proxy and when; for the other formats no
    /// notes are taken and no clock is read but the date's.
    notes: Option<Arc<Notes>>,
    /// A Common or Combined line, formatted at the head (so that no header value is held).
    head: HeadText,
    /// A JSON line as far as the request head tells it; the rest is filled in where it lies
    /// when the response ends.
    record: Option<Record>,
}

thread_local! {
    /// The allocations of finished logged bodies, for the next responses: in steady state a
    /// logged response allocates no wrapper. The boxes are the point: each is the allocation a
    /// `ResponseBody::Logged` takes over.
    #[allow(clippy::vec_box)]
    static SPARE_BODIES: RefCell<Vec<Box<LoggedBody>>> = const { RefCell::new(Vec::new()) };
}

impl LoggedBody {
    fn empty() -> LoggedBody {
        LoggedBody {
            inner: ResponseBody::Full(None),
            expected: None,
            bytes: 0,
            status: 0,
            cache_status: None,
            log: None,
            notes: None,
            head: HeadText::default(),
            record: None,
        }
    }

    /// Drops what `logged` holds, in place (its line is logged then if it was not yet, and the
    /// response's own body ends as it would have), and keeps the allocation for a later one.
    /// Field by field, as [`Pending::begin`] fills it: the body is large.
    pub(crate) fn recycle(mut logged: Box<LoggedBody>) {
        logged.finish(logged.completed());
        logged.inner = ResponseBody::Full(None);
        logged.expected = None;
        logged.bytes = 0;
        logged.status = 0;
        logged.cache_status = None;
        logged.notes = None;
        logged.record = None;
        if logged.head.text.capacity() > MAX_KEPT_HEAD_TEXT {
            logged.head = HeadText::default();
        }
        let _ = SPARE_BODIES.try_with(|spares| {
            let mut spares = spares.borrow_mut();
            if spares.len() < MAX_SPARE_NOTES {
                spares.push(logged);
            }
        });
    }

    /// Writes the line, unless it is written already: the head's text with the status and
    /// byte count, or the JSON record with what the proxy noted.
    fn finish(&mut self, completed: bool) {
        let Some(log) = self.log.take() else {
            return;
        };
        match &mut self.record {
            None => {
                let (request_part, rest) = self.head.text.split_at(self.head.split);
                log.log_text(request_part, self.status, self.bytes, rest);
            }
            Some(record) => {
                let end = End {
                    status: self.status,
                    bytes: self.bytes,
                    completed,
                    cache_status: self.cache_status.take(),
                };
                complete_record(record, self.notes.take(), end);
                log.log(record);
                // Lets go of the head's values (hyper's read buffer) now, in place.
                self.record = None;
            }
        }
    }

    /// Whether the whole body went out (or was empty).
    fn completed(&self) -> bool {
        self.inner.is_end_stream() || self.expected == Some(self.bytes)
    }

    pub(crate) fn poll_frame(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes += data.len() as u64;
                }
                if self.completed() {
                    self.finish(true);
                }
            }
            Poll::Ready(Some(Err(_))) => self.finish(false),
            Poll::Ready(None) => self.finish(true),
            Poll::Pending => {}
        }
        polled
    }

    pub(crate) fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    pub(crate) fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        self.finish(self.completed());
    }
}

/// Something to run once when a proxied response has ended (fully sent, failed or dropped).
pub(crate) trait OnEnd: Send + Sync {
    fn on_end(&mut self, completed: bool);
}

/// The body of a response sent to a client.
pub(crate) enum ResponseBody {
    /// A body the switch made itself (errors, admin pages).
    Full(Option<Bytes>),
    /// A node's response body, streamed through.
    Upstream {
        inner: NodeBody,
        on_end: Option<Box<dyn OnEnd>>,
    },
    /// A cache fill's body, shared with every client that asked for it.
    Fill(FillReader),
    /// Any of the above, counted and logged when it ends (see [`crate::observe::access_log`]). `None`
    /// only while it is dropped: its allocation goes back to the access log for reuse.
    Logged(Option<Box<LoggedBody>>),
}

impl ResponseBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        ResponseBody::Full(Some(bytes.into()))
    }

    fn finish(&mut self, completed: bool) {
        if let ResponseBody::Upstream { on_end, .. } = self {
            if let Some(mut end) = on_end.take() {
                end.on_end(completed);
            }
        }
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        if let ResponseBody::Logged(logged) = self {
            if let Some(logged) = logged.take() {
                LoggedBody::recycle(logged);
            }
            return;
        }
        // A body that was empty from the start is never polled, yet it completed.
        let completed = self.is_end_stream();
        self.finish(completed);
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match this {
            ResponseBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            ResponseBody::Fill(reader) => Pin::new(reader).poll_frame(cx),
            ResponseBody::Logged(Some(logged)) => logged.poll_frame(cx),
            ResponseBody::Logged(None) => Poll::Ready(None),
            ResponseBody::Upstream { inner, .. } => {
                let polled = Pin::new(inner).poll_frame(cx);
                match polled {
                    Poll::Ready(None) => {
                        this.finish(true);
                        Poll::Ready(None)
                    }
                    Poll::Ready(Some(Err(e))) => {
                        this.finish(false);
                        Poll::Ready(Some(Err(e)))
                    }
                    Poll::Ready(Some(Ok(frame))) => {
                        // hyper does not poll again after the last frame of a body whose length
                        // it knows, so the end is noticed here as well.
                        let ended = match this {
                            ResponseBody::Upstream { inner, .. } => inner.is_end_stream(),
                            _ => false,
                        };
                        if ended {
                            this.finish(true);
                        }
                        Poll::Ready(Some(Ok(frame)))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ResponseBody::Full(bytes) => bytes.is_none(),
            ResponseBody::Fill(reader) => reader.is_end_stream(),
            ResponseBody::Logged(Some(logged)) => logged.is_end_stream(),
            ResponseBody::Logged(None) => true,
            ResponseBody::Upstream { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ResponseBody::Full(None) => SizeHint::with_exact(0),
            ResponseBody::Fill(reader) => reader.size_hint(),
            ResponseBody::Logged(Some(logged)) => logged.size_hint(),
            ResponseBody::Logged(None) => SizeHint::with_exact(0),
            ResponseBody::Upstream { inner, .. } => inner.size_hint(),
        }
    }
}

/// A short plain-text response naming the cause.
pub(crate) fn error_response(status: StatusCode, cause: &str) -> Response<ResponseBody> {
    let text = format!(
        "{} {}: {cause}\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    let mut resp = Response::new(ResponseBody::full(text));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        // The rest of the body is still on the wire; reading it only to discard it would let a
        // client make the switch read without end.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}
