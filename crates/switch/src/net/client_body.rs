//! A client's request body, whichever protocol brought it: hyper's [`Incoming`] for HTTP/1.1
//! and HTTP/2, or the receiving half of an HTTP/3 request stream. The pipeline takes either
//! through one [`Body`]; on the HTTP/1.1 and HTTP/2 path it costs a match on the variant (the
//! HTTP/3 one is boxed, so the enum is no bigger than it was with `Incoming` alone).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, Incoming, SizeHint};

use crate::net::BoxError;

/// The receiving half of an HTTP/3 request stream.
pub(crate) type H3Recv = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// The body of a client's request.
pub(crate) enum ClientBody {
    /// HTTP/1.1 or HTTP/2, as hyper reads it.
    Hyper(Incoming),
    /// HTTP/3: DATA frames, then perhaps a trailer section.
    H3(Box<H3Body>),
}

/// An HTTP/3 request body being read.
pub(crate) struct H3Body {
    recv: H3Recv,
    /// Data read ahead (by [`H3Body::peek`]) and not yet handed on.
    first: Option<Bytes>,
    state: H3State,
    /// `content-length`, when the request declared one.
    length: Option<u64>,
    /// Bytes of DATA received so far, held to `length` (RFC 9114 §4.1.2: a body longer or
    /// shorter than its `content-length` makes the request malformed).
    received: u64,
}

/// An HTTP/3 request body unlike its `content-length`.
#[derive(Debug)]
pub(crate) struct LengthMismatch {
    declared: u64,
    received: u64,
}

impl std::fmt::Display for LengthMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HTTP/3 request body of {}{} bytes, content-length {}",
            if self.received > self.declared {
                "more than "
            } else {
                ""
            },
            self.received,
            self.declared
        )
    }
}

impl std::error::Error for LengthMismatch {}

#[derive(Clone, Copy, PartialEq, Eq)]
enum H3State {
    Data,
    Trailers,
    Done,
}

impl H3Body {
    pub(crate) fn new(recv: H3Recv, length: Option<u64>) -> Self {
        H3Body {
            recv,
            first: None,
            state: H3State::Data,
            length,
            received: 0,
        }
    }

    /// Looks once at what has arrived, without waiting: a request whose stream already ended
    /// (HEADERS with FIN, as clients send a GET) is then known to have no body, as hyper knows
    /// it from HTTP/2's END_STREAM, so it can be retried and is sent to a node without one.
    pub(crate) fn peek(&mut self) {
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        match self.recv.poll_recv_data(&mut cx) {
            Poll::Ready(Ok(Some(mut data))) => {
                self.first = Some(data.copy_to_bytes(data.remaining()))
            }
            Poll::Ready(Ok(None)) => self.state = H3State::Trailers,
            // An error shows again on the next read, where the pipeline sees it.
            Poll::Ready(Err(_)) | Poll::Pending => {}
        }
    }

    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = self.poll_unchecked(cx);
        let Some(declared) = self.length else {
            return polled;
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                self.received += frame.data_ref().map_or(0, |d| d.len() as u64);
                if self.received <= declared {
                    return polled;
                }
            }
            Poll::Ready(None) if self.received != declared => {}
            _ => return polled,
        }
        // Said once: the body ends after the error.
        self.state = H3State::Done;
        self.length = None;
        let mismatch = LengthMismatch {
            declared,
            received: self.received,
        };
        Poll::Ready(Some(Err(Box::new(mismatch))))
    }

    fn poll_unchecked(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        loop {
            match self.state {
                H3State::Data => match self.recv.poll_recv_data(cx) {
                    Poll::Ready(Ok(Some(mut data))) => {
                        let bytes = data.copy_to_bytes(data.remaining());
                        if bytes.is_empty() {
                            continue;
                        }
                        return Poll::Ready(Some(Ok(Frame::data(bytes))));
                    }
                    Poll::Ready(Ok(None)) => self.state = H3State::Trailers,
                    Poll::Ready(Err(e)) => {
                        self.state = H3State::Done;
                        return Poll::Ready(Some(Err(Box::new(e))));
                    }
                    Poll::Pending => return Poll::Pending,
                },
                H3State::Trailers => {
                    let polled = std::task::ready!(self.recv.poll_recv_trailers(cx));
                    self.state = H3State::Done;
                    return Poll::Ready(match polled {
                        Ok(Some(trailers)) => Some(Ok(Frame::trailers(trailers))),
                        Ok(None) => None,
                        Err(e) => Some(Err(Box::new(e))),
                    });
                }
                H3State::Done => return Poll::Ready(None),
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && (self.state == H3State::Done || self.length == Some(0))
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ClientBody::Hyper(inner) => match Pin::new(inner).poll_frame(cx) {
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Box::new(e)))),
                Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
            ClientBody::H3(h3) => h3.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Hyper(inner) => inner.is_end_stream(),
            // After the DATA frames a trailer section may still come: the body has ended only
            // once that was looked for (an empty FIN-only stream, seen by `peek`, ends there).
            ClientBody::H3(h3) => h3.is_end_stream() || h3.state == H3State::Trailers,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Hyper(inner) => inner.size_hint(),
            ClientBody::H3(h3) => match h3.length {
                Some(n) => SizeHint::with_exact(n),
                None => SizeHint::default(),
            },
        }
    }
}
