//! `timeouts.client_send` for each HTTP/2 stream, and the count of responses it cut.
//!
//! On HTTP/1 a client that stops reading blocks the socket, and the connection's watchdog
//! closes the connection (see `frontend::serve::Watchdog`). On HTTP/2 a client can instead stop granting
//! flow-control window to one stream (never a WINDOW_UPDATE) while the connection stays busy
//! with PINGs or other streams: the socket never blocks, yet hyper never polls that stream's
//! body again (it holds one chunk, waiting for send capacity), so the node connection, the
//! request's `active` count and its concurrency-limit permit would be held for as long as the
//! client likes.
//!
//! So each HTTP/2 response body is wrapped in a [`WatchedBody`], which notes (in watchdog
//! ticks, no clock read on the data path) when it handed hyper a frame that hyper has not come
//! back from. The connection's watchdog looks at its streams every tick; one whose frame has
//! waited longer than `client_send` while the node still has data to send is cut: its node
//! side is dropped at once (the RAII guards in it release the node connection and the counts),
//! and the next poll of the body fails, which makes hyper reset the stream (`INTERNAL_ERROR`).
//! hyper polls again only once the client grants window or the connection ends; until then
//! the stream holds at most the chunk hyper has in hand and h2's send buffer (≤ 400 KiB), and
//! counts against the client's own `max_concurrent_streams`.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Response;
use hyper::body::{Body, Frame, SizeHint};

use crate::net::BoxError;
use crate::pipeline::response::ResponseBody;

/// The error a cut stream's body ends with (hyper turns it into a stream reset).
#[derive(Debug)]
pub(crate) struct ClientSendTimeout;

impl std::fmt::Display for ClientSendTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("client did not take its response within timeouts.client_send")
    }
}

impl std::error::Error for ClientSendTimeout {}

/// One response being sent on an HTTP/2 stream, shared by its body and the watchdog.
struct Stream {
    /// The tick (plus one) at which the body handed hyper a frame that hyper has not come back
    /// from (waiting for the client's window); 0 while hyper waits for the node instead.
    handed_over: AtomicU64,
    /// The response body from the node; `None` once cut. Behind a lock because the watchdog
    /// drops it from outside the stream's task (never contended: one worker thread).
    body: Mutex<Option<ResponseBody>>,
}

impl Stream {
    fn body(&self) -> MutexGuard<'_, Option<ResponseBody>> {
        self.body.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops the node side if its frame has waited for the client past `send_ticks`; whether
    /// it did.
    fn cut_if_stalled(&self, now: u64, send_ticks: u64) -> bool {
        let handed = self.handed_over.load(Ordering::Relaxed);
        if handed == 0 || now.saturating_sub(handed - 1) <= send_ticks {
            return false;
        }
        let mut body = self.body();
        // A body already at its end holds no node connection: nothing to release.
        let node_has_more = body.as_ref().is_some_and(|b| !b.is_end_stream());
        if !node_has_more {
            return false;
        }
        drop(body.take());
        true
    }
}

/// The HTTP/2 streams of one client connection, watched by its watchdog.
#[derive(Default)]
pub(crate) struct StreamSends {
    /// The watchdog's tick count, as the bodies read it.
    now: AtomicU64,
    /// Every stream since the last sweep; the dead ones are swept when the vector is full, so
    /// it stays within about twice the streams open at once.
    streams: Mutex<Vec<Weak<Stream>>>,
}

impl StreamSends {
    /// `resp` with its body watched.
    pub(crate) fn watch(self: &Arc<Self>, resp: Response<ResponseBody>) -> Response<WatchedBody> {
        resp.map(|body| {
            let stream = Arc::new(Stream {
                handed_over: AtomicU64::new(0),
                body: Mutex::new(Some(body)),
            });
            let mut streams = self.streams();
            if streams.len() == streams.capacity() {
                streams.retain(|s| s.strong_count() > 0);
            }
            streams.push(Arc::downgrade(&stream));
            WatchedBody {
                stream,
                sends: Arc::clone(self),
            }
        })
    }

    /// Called by the watchdog at tick `now`: cuts the stalled streams; how many.
    pub(crate) fn tick(&self, now: u64, send_ticks: u64) -> u64 {
        self.now.store(now, Ordering::Relaxed);
        let mut streams = self.streams();
        streams.retain(|s| s.strong_count() > 0);
        let mut cut = 0;
        for stream in streams.iter().filter_map(Weak::upgrade) {
            cut += u64::from(stream.cut_if_stalled(now, send_ticks));
        }
        cut
    }

    fn streams(&self) -> MutexGuard<'_, Vec<Weak<Stream>>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A response body on an HTTP/2 stream, cut by the connection's watchdog if the client stops
/// taking it (see the module doc).
pub(crate) struct WatchedBody {
    stream: Arc<Stream>,
    sends: Arc<StreamSends>,
}

impl Body for WatchedBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        // hyper is back for more: the client took the last frame (or it was never held up).
        this.stream.handed_over.store(0, Ordering::Relaxed);
        let mut slot = this.stream.body();
        let Some(body) = slot.as_mut() else {
            return Poll::Ready(Some(Err(Box::new(ClientSendTimeout))));
        };
        let polled = Pin::new(&mut *body).poll_frame(cx);
        if matches!(polled, Poll::Ready(Some(Ok(_)))) && !body.is_end_stream() {
            let now = this.sends.now.load(Ordering::Relaxed);
            this.stream.handed_over.store(now + 1, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        // A cut body is not at its end: hyper must poll it to learn of the cut.
        self.stream.body().as_ref().is_some_and(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.stream
            .body()
            .as_ref()
            .map_or_else(SizeHint::default, Body::size_hint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(bytes: &'static [u8]) -> Arc<Stream> {
        Arc::new(Stream {
            handed_over: AtomicU64::new(0),
            body: Mutex::new(Some(ResponseBody::full(bytes))),
        })
    }

    #[test]
    fn only_a_frame_waiting_past_the_deadline_with_data_left_is_cut() {
        let s = stream(b"data");
        assert!(!s.cut_if_stalled(100, 5), "nothing handed over");
        s.handed_over.store(10 + 1, Ordering::Relaxed);
        assert!(!s.cut_if_stalled(15, 5), "within the deadline");
        assert!(s.cut_if_stalled(16, 5));
        assert!(s.body().is_none());
        assert!(!s.cut_if_stalled(17, 5), "already cut");
        let ended = Arc::new(Stream {
            handed_over: AtomicU64::new(0),
            body: Mutex::new(Some(ResponseBody::Full(None))),
        });
        ended.handed_over.store(1, Ordering::Relaxed);
        assert!(!ended.cut_if_stalled(100, 5), "the node side has ended");
    }
}
