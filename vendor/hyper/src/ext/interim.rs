// Capstan patch (see CAPSTAN-PATCH.md): sending 1xx informational responses from a server.
//
// A service gets an `InformationalSender` for the request it is answering by calling
// `InformationalSender::current()` while hyper polls its response future. Nothing is allocated
// and nothing is put in the request's extensions until a service asks: around each poll of a
// response future hyper only puts a pointer to the connection's (stream's) receiver into a
// thread-local and the previous one back. The queue behind a sender is made on the first
// `current()` and then kept, per connection for HTTP/1 (one request is answered at a time; a
// generation number tells the requests apart) and per stream for HTTP/2; until then the
// connection does nothing else for 1xx heads. The sender may be moved to another task or
// thread; a head it sends wakes the connection (HTTP/1) or stream (HTTP/2) task, which writes
// it before the final head.

use std::cell::Cell;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::task::{Context, Waker};

use http::{Response, StatusCode};

/// The most informational heads sent ahead of one response. RFC 9110 sets no limit, and a server
/// sends one or two; the bound keeps a peer that never stops sending them (a node behind a
/// proxy that passes them on) from making a connection hold as many.
pub const MAX_INFORMATIONAL_PER_RESPONSE: usize = 16;

/// Sends 1xx informational responses (such as `103 Early Hints`) to the client ahead of the
/// final response of the request being answered, on hyper's HTTP/1 and HTTP/2 servers.
///
/// Get one with [`InformationalSender::current`] from inside a service's response future. A
/// sender may be cloned and moved to other tasks; what it sends after the final response head
/// has been handed to hyper (or after the connection or stream has gone) is dropped.
///
/// On HTTP/1, heads sent for a request from an HTTP/1.0 client are dropped (RFC 9110 §15.2:
/// a server must not send a 1xx response to an HTTP/1.0 client). `101 Switching Protocols` is
/// never sent this way (it is the upgrade path's); `100 Continue` may be, but note that hyper
/// sends its own `100 Continue` when a service reads the body of a request that expects one.
///
/// # Example
///
/// ```
/// # async fn service(_req: http::Request<()>) -> Result<http::Response<()>, std::convert::Infallible> {
/// if let Some(interim) = hyper::ext::InformationalSender::current() {
///     let hints = http::Response::builder()
///         .status(http::StatusCode::from_u16(103).unwrap())
///         .header("link", "</style.css>; rel=preload; as=style")
///         .body(())
///         .unwrap();
///     interim.send(hints);
/// }
/// Ok(http::Response::new(()))
/// # }
/// ```
#[derive(Clone)]
pub struct InformationalSender {
    slot: Arc<Slot>,
    generation: u64,
}

impl fmt::Debug for InformationalSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformationalSender")
            .field("generation", &self.generation)
            .finish()
    }
}

impl InformationalSender {
    /// The sender for the request whose response future hyper's server is polling on this
    /// thread; `None` anywhere else (outside a poll of a response future, in another task, or
    /// on a connection that does not support it).
    pub fn current() -> Option<InformationalSender> {
        let receiver = CURRENT.with(Cell::get);
        // SAFETY: a non-null pointer here was put by `InterimReceiver::enter`, which holds the
        // receiver's `&mut` (so nothing else can reach it or move it) for as long as the
        // pointer is current, and puts the previous pointer back before it returns or unwinds.
        // The reference made here lives only in this call, which calls nothing that could reach
        // the thread-local again.
        let receiver = unsafe { receiver.as_mut() }?;
        let generation = receiver.generation;
        let slot = receiver
            .slot
            .get_or_insert_with(|| Arc::new(Slot::new(generation)))
            .clone();
        Some(InformationalSender { slot, generation })
    }

    /// Queues an informational response head (its body is never sent) to go out before the
    /// final response. Returns `false` when it will not be sent: its status is not 1xx or is
    /// `101`, the final response head has already been handed over, the connection (or
    /// stream) is gone, or [`MAX_INFORMATIONAL_PER_RESPONSE`] have been sent for this response.
    pub fn send(&self, res: Response<()>) -> bool {
        let status = res.status();
        if !status.is_informational() || status == StatusCode::SWITCHING_PROTOCOLS {
            return false;
        }
        let mut queue = self.slot.lock();
        if queue.closed
            || queue.generation != self.generation
            || queue.sent >= MAX_INFORMATIONAL_PER_RESPONSE
        {
            return false;
        }
        queue.sent += 1;
        queue.heads.push(res);
        let waker = queue.waker.take();
        drop(queue);
        if let Some(waker) = waker {
            waker.wake();
        }
        true
    }
}

/// What senders and the connection share.
struct Slot(Mutex<Queue>);

struct Queue {
    /// The request being answered; heads of another are refused.
    generation: u64,
    heads: Vec<Response<()>>,
    /// Heads sent for this generation.
    sent: usize,
    waker: Option<Waker>,
    /// The receiving end has gone.
    closed: bool,
}

impl Slot {
    fn new(generation: u64) -> Slot {
        Slot(Mutex::new(Queue {
            generation,
            heads: Vec::new(),
            sent: 0,
            waker: None,
            closed: false,
        }))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A panic while holding the lock leaves the queue consistent (pushes and takes only).
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The receiving end hyper keeps per HTTP/1 connection or HTTP/2 stream.
pub(crate) struct InterimReceiver {
    slot: Option<Arc<Slot>>,
    generation: u64,
}

impl fmt::Debug for InterimReceiver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterimReceiver")
            .field("active", &self.slot.is_some())
            .finish()
    }
}

thread_local! {
    /// The receiver of the response future being polled on this thread (null outside a poll).
    static CURRENT: Cell<*mut InterimReceiver> = const { Cell::new(std::ptr::null_mut()) };
}

impl InterimReceiver {
    pub(crate) fn new() -> InterimReceiver {
        InterimReceiver {
            slot: None,
            generation: 0,
        }
    }

    /// Runs `poll` (a poll of the response future) with this receiver as the one
    /// [`InformationalSender::current`] answers for. Costs two thread-local writes.
    #[inline]
    pub(crate) fn enter<R>(&mut self, poll: impl FnOnce() -> R) -> R {
        struct Restore(*mut InterimReceiver);
        impl Drop for Restore {
            #[inline]
            fn drop(&mut self) {
                CURRENT.with(|current| current.set(self.0));
            }
        }
        let _restore = Restore(CURRENT.with(|current| current.replace(self)));
        poll()
    }

    /// Whether a sender was ever made for this connection (or stream): until then there is
    /// nothing to [`take`](Self::take) and no waker to register, and the caller skips it.
    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.slot.is_some()
    }

    /// The heads queued so far, in the order they were sent. Unless `last`, the task of `cx` is
    /// woken when another arrives; when `last` (the final head is ready), no more are taken for
    /// this request.
    /// Callers check [`is_active`](Self::is_active) first.
    pub(crate) fn take(&mut self, cx: &mut Context<'_>, last: bool) -> Vec<Response<()>> {
        let Some(slot) = &self.slot else {
            return Vec::new();
        };
        let mut queue = slot.lock();
        let heads = std::mem::take(&mut queue.heads);
        if last {
            queue.generation += 1;
            queue.sent = 0;
            self.generation = queue.generation;
            queue.waker = None;
        } else if !queue
            .waker
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            queue.waker = Some(cx.waker().clone());
        }
        heads
    }
}

impl Drop for InterimReceiver {
    #[inline]
    fn drop(&mut self) {
        if let Some(slot) = &self.slot {
            let mut queue = slot.lock();
            queue.closed = true;
            queue.heads.clear();
            queue.waker = None;
        }
    }
}
