//! Write corking for HTTP/2 client connections: what one poll of the connection writes leaves in
//! one write.
//!
//! hyper's HTTP/2 server (the `h2` crate) flushes its frame buffer before it takes each DATA
//! frame of 256 bytes or more, so when many streams are answered at once every response costs
//! its own `writev` and, over TLS, its own record and its own AEAD seal. HAProxy and nginx send
//! once per connection per turn of their event loop. [`cork`] gives a connection that shape: the
//! [`Corked`] side (handed to hyper) copies writes into a buffer and treats a flush as done; the
//! [`FlushAfterPoll`] side (the connection future, wrapped) writes the buffer out after every
//! poll, so the frames of every stream answered in that turn go to the socket together.
//!
//! Backpressure is kept: past [`HIGH_WATER`] bytes a write first drains the buffer and waits
//! (`Pending`) while the socket is full. A write error is kept and returned by the next read or
//! write, so the connection ends as it would have without the cork.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes held before a write waits for the socket (a few TLS records' worth).
pub(crate) const HIGH_WATER: usize = 64 * 1024;

struct Shared<T> {
    io: T,
    out: Vec<u8>,
    /// Bytes of `out` already written.
    sent: usize,
    /// The first write error, returned to hyper on its next read or write.
    failed: Option<(io::ErrorKind, String)>,
}

impl<T: AsyncWrite + Unpin> Shared<T> {
    fn check(&self) -> io::Result<()> {
        match &self.failed {
            Some((kind, why)) => Err(io::Error::new(*kind, why.clone())),
            None => Ok(()),
        }
    }

    /// Writes the buffer out and flushes `io` (TLS: its pending records).
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        while self.sent < self.out.len() {
            match Pin::new(&mut self.io).poll_write(cx, &self.out[self.sent..]) {
                Poll::Ready(Ok(0)) => return self.fail(io::ErrorKind::WriteZero.into()),
                Poll::Ready(Ok(n)) => self.sent += n,
                Poll::Ready(Err(e)) => return self.fail(e),
                Poll::Pending => return Poll::Pending,
            }
        }
        self.out.clear();
        self.sent = 0;
        match Pin::new(&mut self.io).poll_flush(cx) {
            Poll::Ready(Err(e)) => self.fail(e),
            other => other,
        }
    }

    fn fail(&mut self, e: io::Error) -> Poll<io::Result<()>> {
        self.failed = Some((e.kind(), e.to_string()));
        Poll::Ready(Err(e))
    }

    /// Room for more bytes: drains first when the buffer is past [`HIGH_WATER`], and drops
    /// what a partial write already sent, so a slow reader cannot grow the buffer.
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        if self.out.len() - self.sent >= HIGH_WATER {
            match self.drain(cx) {
                Poll::Ready(result) => result?,
                Poll::Pending if self.out.len() - self.sent >= HIGH_WATER => return Poll::Pending,
                Poll::Pending => {}
            }
        }
        if self.sent > 0 {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
        Ok(()).into()
    }
}

/// The connection's I/O as hyper sees it: reads pass through, writes are buffered.
pub(crate) struct Corked<T> {
    shared: Arc<Mutex<Shared<T>>>,
}

/// A connection future that writes out its [`Corked`] buffer after every poll.
pub(crate) struct FlushAfterPoll<F, T> {
    conn: Pin<Box<F>>,
    shared: Arc<Mutex<Shared<T>>>,
}

/// Splits `io` into the side hyper reads and writes and a handle that wraps the connection.
pub(crate) fn cork<T>(io: T) -> (Corked<T>, Cork<T>) {
    let shared = Arc::new(Mutex::new(Shared {
        io,
        out: Vec::new(),
        sent: 0,
        failed: None,
    }));
    (
        Corked {
            shared: Arc::clone(&shared),
        },
        Cork { shared },
    )
}

/// Wraps the connection future that owns the matching [`Corked`] I/O.
pub(crate) struct Cork<T> {
    shared: Arc<Mutex<Shared<T>>>,
}

impl<T> Cork<T> {
    pub(crate) fn flush_after_poll<F: Future>(self, conn: F) -> FlushAfterPoll<F, T> {
        FlushAfterPoll {
            conn: Box::pin(conn),
            shared: self.shared,
        }
    }
}

fn lock<T>(shared: &Mutex<Shared<T>>) -> MutexGuard<'_, Shared<T>> {
    // The buffer is consistent between calls: a panic inside one leaves nothing half-done.
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

impl<F, T> FlushAfterPoll<F, T> {
    /// The wrapped connection (for a graceful shutdown).
    pub(crate) fn conn(&mut self) -> Pin<&mut F> {
        self.conn.as_mut()
    }
}

impl<F: Future, T: AsyncWrite + Unpin> Future for FlushAfterPoll<F, T> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let result = self.conn.as_mut().poll(cx);
        let mut shared = lock(&self.shared);
        // Pending: the socket is full and will wake this task. An error is kept; a wake makes
        // hyper read it on its next poll and end the connection.
        if let Poll::Ready(Err(_)) = shared.drain(cx) {
            cx.waker().wake_by_ref();
        }
        result
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Corked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let mut shared = lock(&self.shared);
        shared.check()?;
        Pin::new(&mut shared.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Corked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut shared = lock(&self.shared);
        std::task::ready!(shared.poll_room(cx))?;
        let mut n = 0;
        for buf in bufs {
            shared.out.extend_from_slice(buf);
            n += buf.len();
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Done for hyper: [`FlushAfterPoll`] writes the buffer out when this poll ends.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        lock(&self.shared).check().into()
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut shared = lock(&self.shared);
        std::task::ready!(shared.drain(cx))?;
        Pin::new(&mut shared.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Writes made inside one poll reach the peer together, after the poll; none is lost.
    #[tokio::test]
    async fn writes_of_one_poll_leave_together_after_it() {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let (mut corked, cork) = cork(near);
        let mut wrote = false;
        let conn = cork.flush_after_poll(std::future::poll_fn(move |cx| {
            if !wrote {
                for part in [&b"one "[..], b"two ", b"three"] {
                    assert!(Pin::new(&mut corked).poll_write(cx, part).is_ready());
                    assert!(Pin::new(&mut corked).poll_flush(cx).is_ready());
                }
                wrote = true;
            }
            Poll::Ready(())
        }));
        conn.await;
        let mut got = vec![0; 13];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(got, b"one two three");
    }

    /// A reader slower than the writer: the buffer never holds more than the high-water mark
    /// and one write, although the socket takes a little after each write.
    #[tokio::test]
    async fn a_slow_reader_keeps_the_buffer_bounded() {
        let (near, mut far) = tokio::io::duplex(4096);
        let (mut corked, cork) = cork(near);
        let chunk = [1u8; 4096];
        let (mut written, mut read) = (0, 0);
        let mut sink = vec![0u8; 2048];
        for _ in 0..100 {
            let wrote = std::future::poll_fn(|cx| {
                Poll::Ready(Pin::new(&mut corked).poll_write(cx, &chunk))
            });
            if let Poll::Ready(Ok(n)) = wrote.await {
                written += n;
            }
            read += std::future::poll_fn(|cx| {
                let mut buf = ReadBuf::new(&mut sink);
                Poll::Ready(match Pin::new(&mut far).poll_read(cx, &mut buf) {
                    Poll::Ready(Ok(())) => buf.filled().len(),
                    _ => 0,
                })
            })
            .await;
            let held = lock(&cork.shared).out.len();
            assert!(held <= HIGH_WATER + chunk.len(), "{held} bytes held");
        }
        assert!(
            written > HIGH_WATER + 10 * chunk.len() && read > 0,
            "{written} {read}"
        );
    }

    /// Past the high-water mark a write waits for a full socket instead of growing the buffer.
    #[tokio::test]
    async fn a_full_socket_holds_writes_back() {
        let (near, mut far) = tokio::io::duplex(1024);
        let (mut corked, _cork) = cork(near);
        let chunk = vec![7u8; 16 * 1024];
        let mut accepted = 0;
        let stalled = std::future::poll_fn(|cx| loop {
            match Pin::new(&mut corked).poll_write(cx, &chunk) {
                Poll::Ready(Ok(n)) => accepted += n,
                Poll::Ready(Err(e)) => panic!("{e}"),
                Poll::Pending => return Poll::Ready(()),
            }
        });
        stalled.await;
        assert!(accepted >= HIGH_WATER && accepted < HIGH_WATER + chunk.len() + 1024);
        // Reading makes room; shutdown then drains everything that was accepted.
        let reader = tokio::spawn(async move {
            let mut all = Vec::new();
            far.read_to_end(&mut all).await.unwrap();
            all.len()
        });
        corked.shutdown().await.unwrap();
        assert_eq!(reader.await.unwrap(), accepted);
    }
}
