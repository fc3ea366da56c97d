//! One node request shared by every client that asked for the same key while it was in flight
//! (request coalescing), streamed to all of them as its bytes arrive.
//!
//! A background task (the producer) reads the node's response into the fill; every client,
//! the first included, is a [`FillReader`] with its own cursor. While the response is being
//! stored, every chunk is kept (it becomes the stored body; at most `max_object` bytes). When it
//! is not (uncachable, or larger than `max_object`), chunks every reader has passed are dropped
//! and the producer waits while it is more than [`PASS_WINDOW`] bytes ahead of the slowest
//! reader, so a 1 GiB pass-through costs a window of memory, not the object.

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderMap, StatusCode};
use hyper::body::{Body, Frame, SizeHint};
use tokio::sync::Notify;

use capstan_cache::rfc::{StaleWhy, VaryKey};

use crate::net::BoxError;

/// How far the producer of a response that is not being stored may run ahead of its slowest
/// reader.
pub(crate) const PASS_WINDOW: u64 = 1 << 20;

/// What the fill turned out to carry, for each reader's `Cache-Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FillOutcome {
    /// The node's response, stored (or being stored) when `stored`. Only a `shareable` one
    /// (RFC 9111 lets a shared cache store it; it may be too large to) goes to the readers that
    /// joined the fill: a response the cache may not store — `private`, `no-store`, to a
    /// request with `Authorization` — is the leader's alone, and the others ask the node
    /// themselves (as Varnish's waiting list does with an uncacheable object).
    Fetched { stored: bool, shareable: bool },
    /// A stale entry the node confirmed with `304 Not Modified`.
    Revalidated,
    /// A stored entry served because the node failed or answered 5xx (`stale-if-error`):
    /// `why` names the permission when the entry was stale (`None`: it was still fresh), and
    /// `node_status` is the node's status when it answered.
    StaleOnError {
        why: Option<StaleWhy>,
        node_status: Option<u16>,
    },
    /// The switch's own error (no node answered).
    Error,
}

impl FillOutcome {
    /// Whether a reader other than the one that started the fill may take this response.
    pub(crate) fn shareable(self) -> bool {
        match self {
            FillOutcome::Fetched { shareable, .. } => shareable,
            FillOutcome::Revalidated | FillOutcome::StaleOnError { .. } | FillOutcome::Error => {
                true
            }
        }
    }
}

/// The response head every reader starts from.
#[derive(Debug)]
pub(crate) struct FillHead {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The `Vary` key of the request that made the fill; readers whose own request varies
    /// differently must not take this response.
    pub vary: Option<VaryKey>,
    pub outcome: FillOutcome,
    /// Seconds of freshness left, for `Cache-Status: ttl`.
    pub ttl: Option<i64>,
}

#[derive(Debug)]
enum End {
    Complete,
    Failed(String),
}

#[derive(Debug, Default)]
struct State {
    head: Option<Arc<FillHead>>,
    chunks: VecDeque<Bytes>,
    /// Absolute index of `chunks[0]`.
    first: usize,
    /// Bytes in `chunks`.
    buffered: u64,
    end: Option<End>,
    /// Reader id → absolute index of the next chunk it reads.
    cursors: HashMap<u64, usize>,
    next_reader: u64,
    /// Every chunk is kept (the response is being stored).
    keep_all: bool,
    /// Readers waiting for data.
    waiting: Vec<Waker>,
    /// The producer, waiting for readers to make room.
    producer: Option<Waker>,
    /// Readers that joined after the first, waiting for the head.
    followers: usize,
}

/// An in-flight fill.
#[derive(Debug, Default)]
pub(crate) struct Fill {
    state: Mutex<State>,
    head_ready: Notify,
}

impl Fill {
    pub(crate) fn new() -> Arc<Fill> {
        Arc::new(Fill::default())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new reader from the first byte, unless the first bytes are gone already (a
    /// pass-through past its window) or the fill has `max_followers` waiting.
    pub(crate) fn join(
        self: &Arc<Self>,
        max_followers: usize,
        follower: bool,
    ) -> Option<FillReader> {
        let mut st = self.lock();
        if st.first != 0 || (follower && st.followers >= max_followers) {
            return None;
        }
        if follower {
            st.followers += 1;
        }
        let id = st.next_reader;
        st.next_reader += 1;
        st.cursors.insert(id, 0);
        Some(FillReader {
            fill: Arc::clone(self),
            id,
            next: 0,
            announced_len: None,
        })
    }

    /// Waits for the response head, at most `timeout`.
    pub(crate) async fn head(&self, timeout: Duration) -> Option<Arc<FillHead>> {
        let wait = async {
            loop {
                let notified = self.head_ready.notified();
                if let Some(head) = self.lock().head.clone() {
                    return head;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, wait).await.ok()
    }

    /// Publishes the head; `keep_all` when the body is being stored.
    pub(crate) fn set_head(&self, head: FillHead, keep_all: bool) {
        {
            let mut st = self.lock();
            st.head = Some(Arc::new(head));
            st.keep_all = keep_all;
        }
        self.head_ready.notify_waiters();
    }

    /// Stops keeping every chunk (the body outgrew `max_object`): from now on it passes.
    pub(crate) fn stop_keeping(&self) {
        let mut st = self.lock();
        st.keep_all = false;
        trim(&mut st);
    }

    /// Appends a chunk and wakes the readers.
    pub(crate) fn push(&self, data: Bytes) {
        let wakers = {
            let mut st = self.lock();
            st.buffered += data.len() as u64;
            st.chunks.push_back(data);
            std::mem::take(&mut st.waiting)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Ends the body: `Ok` when complete, `Err` with the cause when the node's body failed.
    pub(crate) fn finish(&self, result: Result<(), String>) {
        let wakers = {
            let mut st = self.lock();
            st.end = Some(match result {
                Ok(()) => End::Complete,
                Err(cause) => End::Failed(cause),
            });
            std::mem::take(&mut st.waiting)
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    /// Ready(true) when the producer may read more from the node; Ready(false) when nobody
    /// wants the rest (no reader left and nothing being stored).
    pub(crate) fn poll_room(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut st = self.lock();
        if st.keep_all {
            return Poll::Ready(true);
        }
        if st.cursors.is_empty() {
            return Poll::Ready(false);
        }
        if st.buffered < PASS_WINDOW {
            return Poll::Ready(true);
        }
        st.producer = Some(cx.waker().clone());
        Poll::Pending
    }

    /// Waits for room; false when the producer should stop.
    pub(crate) async fn room(&self) -> bool {
        std::future::poll_fn(|cx| self.poll_room(cx)).await
    }

    /// The whole body, when every chunk was kept.
    pub(crate) fn body(&self) -> Option<Bytes> {
        let st = self.lock();
        if st.first != 0 {
            return None;
        }
        // Always a fresh allocation of exactly the body: a chunk is a slice of the connection's
        // read buffer, and storing the slice would pin that whole buffer for as long as the
        // entry lives (measured: ~10 KB resident per stored 1 KB object).
        Some(match st.chunks.len() {
            0 => Bytes::new(),
            1 => Bytes::copy_from_slice(&st.chunks[0]),
            _ => {
                let mut all = BytesMut::with_capacity(st.buffered as usize);
                st.chunks.iter().for_each(|c| all.extend_from_slice(c));
                all.freeze()
            }
        })
    }

    /// Publishes a complete response in one go (a stored entry, an error page).
    pub(crate) fn publish(&self, head: FillHead, body: Bytes) {
        self.set_head(head, true);
        if !body.is_empty() {
            self.push(body);
        }
        self.finish(Ok(()));
    }
}

/// Drops the chunks every reader has passed, when they need not be kept.
fn trim(st: &mut State) {
    if st.keep_all {
        return;
    }
    let min = st.cursors.values().copied().min().unwrap_or(usize::MAX);
    while st.first < min {
        let Some(chunk) = st.chunks.pop_front() else {
            break;
        };
        st.buffered -= chunk.len() as u64;
        st.first += 1;
    }
    if st.buffered < PASS_WINDOW {
        if let Some(w) = st.producer.take() {
            w.wake();
        }
    }
}

/// One client's view of a fill: a response body streaming the fill's chunks.
#[derive(Debug)]
pub(crate) struct FillReader {
    fill: Arc<Fill>,
    id: u64,
    next: usize,
    announced_len: Option<u64>,
}

impl FillReader {
    pub(crate) fn fill(&self) -> &Arc<Fill> {
        &self.fill
    }

    /// Tells the reader the body's length from the head, for its size hint.
    pub(crate) fn set_len(&mut self, len: Option<u64>) {
        self.announced_len = len;
    }
}

impl Body for FillReader {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let mut st = this.fill.lock();
        if this.next < st.first {
            return Poll::Ready(Some(Err("cache fill lost bytes this reader needed".into())));
        }
        if let Some(chunk) = st.chunks.get(this.next - st.first).cloned() {
            this.next += 1;
            st.cursors.insert(this.id, this.next);
            trim(&mut st);
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        match &st.end {
            Some(End::Complete) => Poll::Ready(None),
            Some(End::Failed(cause)) => Poll::Ready(Some(Err(cause.clone().into()))),
            None => {
                if !st.waiting.iter().any(|w| w.will_wake(cx.waker())) {
                    st.waiting.push(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self.announced_len {
            Some(len) => SizeHint::with_exact(len),
            None => SizeHint::default(),
        }
    }
}

impl Drop for FillReader {
    fn drop(&mut self) {
        let mut st = self.fill.lock();
        st.cursors.remove(&self.id);
        trim(&mut st);
        if st.cursors.is_empty() && !st.keep_all {
            // Nobody wants the rest: let the producer notice and stop.
            if let Some(w) = st.producer.take() {
                w.wake();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    fn head() -> FillHead {
        FillHead {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            vary: None,
            outcome: FillOutcome::Fetched {
                stored: false,
                shareable: true,
            },
            ttl: None,
        }
    }

    #[tokio::test]
    async fn every_reader_gets_every_byte_and_a_late_stored_joiner_too() {
        let fill = Fill::new();
        let a = fill.join(10, false).unwrap();
        fill.set_head(head(), true);
        fill.push(Bytes::from_static(b"hello "));
        let b = fill.join(10, true).unwrap();
        fill.push(Bytes::from_static(b"world"));
        fill.finish(Ok(()));
        let a = a.collect().await.unwrap().to_bytes();
        let b = b.collect().await.unwrap().to_bytes();
        assert_eq!(a, "hello world");
        assert_eq!(b, "hello world");
        assert_eq!(fill.body().unwrap(), "hello world");
    }

    #[tokio::test]
    async fn a_pass_through_drops_what_every_reader_has_read_and_refuses_late_joiners() {
        let fill = Fill::new();
        let mut a = fill.join(10, false).unwrap();
        fill.set_head(head(), false);
        fill.push(Bytes::from_static(b"one"));
        fill.push(Bytes::from_static(b"two"));
        let first = a.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "one");
        assert!(fill.join(10, true).is_none(), "the first chunk is gone");
        assert_eq!(fill.lock().buffered, 3);
        fill.finish(Err("node went away".into()));
        assert_eq!(
            a.frame().await.unwrap().unwrap().into_data().unwrap(),
            "two"
        );
        assert!(
            a.frame().await.unwrap().is_err(),
            "a failed fill ends in an error"
        );
    }

    #[tokio::test]
    async fn the_producer_waits_for_slow_readers_and_stops_when_they_leave() {
        let fill = Fill::new();
        let reader = fill.join(10, false).unwrap();
        fill.set_head(head(), false);
        fill.push(Bytes::from(vec![0u8; PASS_WINDOW as usize]));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(
            fill.poll_room(&mut cx).is_pending(),
            "a full window holds the producer"
        );
        drop(reader);
        assert_eq!(fill.poll_room(&mut cx), Poll::Ready(false));
    }

    #[tokio::test]
    async fn followers_are_bounded_and_wait_for_the_head() {
        let fill = Fill::new();
        let _leader = fill.join(1, false).unwrap();
        let _one = fill.join(1, true).unwrap();
        assert!(fill.join(1, true).is_none());
        assert!(fill.head(Duration::from_millis(1)).await.is_none());
        fill.set_head(head(), true);
        assert!(fill.head(Duration::from_millis(1)).await.is_some());
    }
}
