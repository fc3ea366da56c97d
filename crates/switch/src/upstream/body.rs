//! Body types: request bodies going up to a node (streamed, with the size limit enforced on the
//! fly) and response bodies coming back (streamed, with accounting when they end).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::state::cache::fill::FillReader;

use crate::net::BoxError;

/// A request body larger than `limits.max_body_bytes`.
#[derive(Debug)]
pub struct BodyTooLarge;

impl std::fmt::Display for BodyTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("request body exceeds the size limit")
    }
}

impl std::error::Error for BodyTooLarge {}

/// The body of a request sent to a node.
pub enum UpstreamBody {
    Empty,
    /// The client's body, streamed; `remaining` is how many more bytes the limit allows
    /// (`u64::MAX` for no limit).
    Stream {
        inner: Incoming,
        remaining: u64,
        exceeded: Arc<AtomicBool>,
    },
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            UpstreamBody::Empty => Poll::Ready(None),
            UpstreamBody::Stream {
                inner,
                remaining,
                exceeded,
            } => match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    if let Some(data) = frame.data_ref() {
                        let len = data.len() as u64;
                        if len > *remaining {
                            exceeded.store(true, Ordering::Relaxed);
                            return Poll::Ready(Some(Err(Box::new(BodyTooLarge))));
                        }
                        *remaining -= len;
                    }
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Empty => true,
            UpstreamBody::Stream { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Empty => SizeHint::with_exact(0),
            UpstreamBody::Stream { inner, .. } => inner.size_hint(),
        }
    }
}

/// A node's response body: read by hyper's client, or by the switch's own HTTP/1.1
/// ([`crate::upstream::h1`]).
pub enum NodeBody {
    Hyper(Incoming),
    H1(crate::upstream::h1::H1Body),
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

/// Something to run once when a proxied response has ended (fully sent, failed or dropped).
pub trait OnEnd: Send + Sync {
    fn on_end(&mut self, completed: bool);
}

/// The body of a response sent to a client.
pub enum ResponseBody {
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
    Logged(Option<Box<crate::observe::access_log::LoggedBody>>),
}

impl ResponseBody {
    pub fn full(bytes: impl Into<Bytes>) -> Self {
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
                crate::observe::access_log::LoggedBody::recycle(logged);
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
