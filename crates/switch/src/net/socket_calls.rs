//! The socket reads and writes of every proxied request, made as system calls of their own
//! (rustix's raw Linux backend) instead of through glibc's wrappers.
//!
//! glibc's `recv`, `send`, `writev` and `recvmsg` are thread cancellation points. Once a process
//! has a second thread (a second worker, or the access log's writer), each of them switches
//! asynchronous cancellation on before the system call and off after it: some 30 instructions
//! and two atomic operations a call, four calls a proxied HTTP/1.1 request (callgrind: 170
//! instructions per request of a one-worker switch with an access log). The switch never
//! cancels a thread, so that work buys nothing; rustix issues the system call itself.
//!
//! The `poll_*` functions wait for readiness through tokio ([`AsyncFd`]) as [`TcpStream`]'s
//! own `AsyncRead`/`AsyncWrite` do, including their shortcut: a read or a `send` shorter than
//! asked for means the socket is drained (or full), so its readiness is cleared at once rather
//! than found out by one more call that would block.
//!
//! [`TcpStream`]: tokio::net::TcpStream

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::task::{ready, Context, Poll};

use rustix::net::{RecvFlags, SendFlags};
use tokio::io::unix::AsyncFd;
use tokio::io::{Interest, ReadBuf};

/// A socket type that owns its descriptor, which stays the same for the value's life.
///
/// # Safety
///
/// The descriptor `as_raw_fd` gives must be owned by the value: open until it is dropped, and
/// never replaced meanwhile.
pub unsafe trait OwnedSocket: AsRawFd + AsFd {}

// SAFETY: both own their socket's descriptor and close it when dropped.
unsafe impl OwnedSocket for std::net::TcpStream {}
// SAFETY: as above.
unsafe impl OwnedSocket for mio::net::TcpStream {}

/// A socket registered with the event loop for reading and writing. It must be in non-blocking
/// mode already (as `mio`'s are, and those `tokio::net::TcpStream::into_std` gives).
pub(crate) fn register<S: OwnedSocket>(socket: S) -> io::Result<AsyncFd<S>> {
    // SAFETY: the `AsyncFd` owns `socket`, whose descriptor stays open and the same until the
    // `AsyncFd` is dropped (deregistering it first; `OwnedSocket`'s promise): it is only ever
    // borrowed (`get_ref`) for calls on the socket, never replaced or closed apart.
    let registered =
        unsafe { AsyncFd::register_with_interest(socket, Interest::READABLE | Interest::WRITABLE) };
    Ok(registered?)
}

/// One `recv` into `into`: the bytes read (0 at the end of the stream).
pub(crate) fn recv(fd: BorrowedFd<'_>, into: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    let ((read, _), _) = rustix::net::recv(fd, into, RecvFlags::empty())?;
    Ok(read.len())
}

/// One `send` of `bytes`, with no `SIGPIPE` if the peer has gone.
pub(crate) fn send(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::send(fd, bytes, SendFlags::NOSIGNAL)?)
}

/// One `writev` of `bufs` (std ignores `SIGPIPE` in its programs, as for its own `writev`).
pub(crate) fn writev(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    Ok(rustix::io::writev(fd, bufs)?)
}

/// Reads into `buf` once `socket` is readable, with `read`, which returns the bytes it read
/// and what else it learnt (a receive timestamp, say).
pub(crate) fn poll_read_by<S: AsRawFd + AsFd, T>(
    socket: &AsyncFd<S>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
    mut read: impl FnMut(BorrowedFd<'_>, &mut [MaybeUninit<u8>]) -> io::Result<(usize, T)>,
) -> Poll<io::Result<T>> {
    loop {
        let mut readiness = ready!(socket.poll_read_ready(cx))?;
        // SAFETY: the kernel only writes into the unfilled part (it never de-initialises
        // bytes), and exactly the `n` bytes `read` reports are marked initialised below.
        let unfilled = unsafe { buf.unfilled_mut() };
        let room = unfilled.len();
        match read(socket.get_ref().as_fd(), unfilled) {
            Ok((n, learnt)) => {
                if n > 0 && n < room {
                    readiness.clear_ready();
                }
                // SAFETY: `read` wrote `n` bytes at the start of the unfilled part.
                unsafe { buf.assume_init(n) };
                buf.advance(n);
                return Poll::Ready(Ok(learnt));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => readiness.clear_ready(),
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// `AsyncRead::poll_read` of a socket, by [`recv`].
pub(crate) fn poll_read<S: AsRawFd + AsFd>(
    socket: &AsyncFd<S>,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    poll_read_by(socket, cx, buf, |fd, into| Ok((recv(fd, into)?, ())))
}

/// Writes with `write` once `socket` is writable; a write that `full` takes as a sign of a
/// full socket clears its readiness.
fn poll_write_by<S: AsRawFd + AsFd>(
    socket: &AsyncFd<S>,
    cx: &mut Context<'_>,
    write: impl Fn(BorrowedFd<'_>) -> io::Result<usize>,
    full: impl Fn(usize) -> bool,
) -> Poll<io::Result<usize>> {
    loop {
        let mut readiness = ready!(socket.poll_write_ready(cx))?;
        match write(socket.get_ref().as_fd()) {
            Ok(n) => {
                if full(n) {
                    readiness.clear_ready();
                }
                return Poll::Ready(Ok(n));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => readiness.clear_ready(),
            Err(e) => return Poll::Ready(Err(e)),
        }
    }
}

/// `AsyncWrite::poll_write` of a socket, by [`send`].
pub(crate) fn poll_write<S: AsRawFd + AsFd>(
    socket: &AsyncFd<S>,
    cx: &mut Context<'_>,
    bytes: &[u8],
) -> Poll<io::Result<usize>> {
    poll_write_by(
        socket,
        cx,
        |fd| send(fd, bytes),
        |n| n > 0 && n < bytes.len(),
    )
}

/// `AsyncWrite::poll_write_vectored` of a socket, by [`writev`]. As tokio's, it takes a short
/// write as no sign of a full socket (adding up the buffers' lengths would cost more than it
/// saves).
pub(crate) fn poll_write_vectored<S: AsRawFd + AsFd>(
    socket: &AsyncFd<S>,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    poll_write_by(socket, cx, |fd| writev(fd, bufs), |_| false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tokio::net::{TcpListener, TcpStream};

    /// A connected pair of sockets, registered as the switch registers its own.
    async fn pair() -> (AsyncFd<std::net::TcpStream>, AsyncFd<std::net::TcpStream>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let register = |s: TcpStream| register(s.into_std().unwrap()).unwrap();
        (register(client), register(server))
    }

    #[tokio::test]
    async fn bytes_written_are_the_bytes_read() {
        let (client, server) = pair().await;
        let sent = poll_fn(|cx| poll_write(&client, cx, b"GET / HTTP/1.1\r\n"))
            .await
            .unwrap();
        assert_eq!(sent, 16);
        let parts = [IoSlice::new(b"Host: a\r\n"), IoSlice::new(b"\r\n")];
        let sent = poll_fn(|cx| poll_write_vectored(&client, cx, &parts))
            .await
            .unwrap();
        assert_eq!(sent, 11);
        let mut got = Vec::new();
        while got.len() < 27 {
            let mut room = [0u8; 64];
            let mut buf = ReadBuf::new(&mut room);
            poll_fn(|cx| poll_read(&server, cx, &mut buf))
                .await
                .unwrap();
            assert!(!buf.filled().is_empty(), "the stream ended early");
            got.extend_from_slice(buf.filled());
        }
        assert_eq!(got, b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    }

    #[tokio::test]
    async fn a_read_waits_for_bytes_and_sees_the_end() {
        let (client, server) = pair().await;
        let reader = tokio::spawn(async move {
            let mut room = [0u8; 8];
            let mut buf = ReadBuf::new(&mut room);
            poll_fn(|cx| poll_read(&server, cx, &mut buf))
                .await
                .unwrap();
            let first = buf.filled().to_vec();
            buf.clear();
            poll_fn(|cx| poll_read(&server, cx, &mut buf))
                .await
                .unwrap();
            (first, buf.filled().len())
        });
        tokio::task::yield_now().await;
        poll_fn(|cx| poll_write(&client, cx, b"hi")).await.unwrap();
        client
            .get_ref()
            .shutdown(std::net::Shutdown::Write)
            .unwrap();
        let (first, at_end) = reader.await.unwrap();
        assert_eq!(first, b"hi");
        assert_eq!(at_end, 0, "the peer's shutdown reads as the end");
    }

    #[tokio::test]
    async fn a_full_socket_waits_until_the_peer_reads() {
        let (client, server) = pair().await;
        let chunk = vec![b'x'; 256 * 1024];
        // Write until the kernel's buffers are full and a write has to wait.
        let mut sent = 0;
        loop {
            let write = poll_fn(|cx| match poll_write(&client, cx, &chunk) {
                Poll::Pending => Poll::Ready(None),
                done => done.map(Some),
            });
            match write.await {
                Some(n) => sent += n.unwrap(),
                None => break,
            }
        }
        let writer =
            tokio::spawn(
                async move { poll_fn(|cx| poll_write(&client, cx, b"end")).await.unwrap() },
            );
        let mut received = 0;
        let mut room = vec![0u8; 64 * 1024];
        while received < sent + 3 {
            let mut buf = ReadBuf::new(&mut room);
            poll_fn(|cx| poll_read(&server, cx, &mut buf))
                .await
                .unwrap();
            assert!(!buf.filled().is_empty(), "the stream ended early");
            received += buf.filled().len();
        }
        assert_eq!(
            writer.await.unwrap(),
            3,
            "the waiting write went out once there was room"
        );
        assert_eq!(received, sent + 3);
    }

    #[tokio::test]
    async fn writing_to_a_closed_peer_is_an_error() {
        let (client, server) = pair().await;
        drop(server);
        let chunk = vec![b'x'; 64 * 1024];
        // The first writes may be taken before the reset arrives; one of the next fails.
        let mut failed = None;
        for _ in 0..200 {
            match poll_fn(|cx| poll_write(&client, cx, &chunk)).await {
                Ok(_) => tokio::task::yield_now().await,
                Err(e) => {
                    failed = Some(e.kind());
                    break;
                }
            }
        }
        let kind = failed.expect("writes to a closed peer kept succeeding");
        assert!(
            matches!(
                kind,
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{kind:?}"
        );
    }
}
