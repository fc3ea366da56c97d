//! Body types: request bodies going up to a node (streamed, with the size limit enforced on the
//! fly) and response bodies coming back (streamed, with accounting when they end).

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

use crate::net::BoxError;

/// A request body larger than `limits.max_body_bytes`.
#[derive(Debug)]
pub(crate) struct BodyTooLarge;

impl std::fmt::Display for BodyTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("request body exceeds the size limit")
    }
}

impl std::error::Error for BodyTooLarge {}

/// The body of a request sent to a node.
pub(crate) enum UpstreamBody {
    Empty,
    /// The client's body, streamed; `remaining` is how many more bytes the limit allows
    /// (`u64::MAX` for no limit).
    Stream {
        inner: crate::net::client_body::ClientBody,
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
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e))),
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
