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
//! The `poll_*` functions wait for readiness through tokio as [`TcpStream`]'s own
//! `AsyncRead`/`AsyncWrite` do, including their shortcut: a transfer shorter than asked for
//! means the socket is drained (or full), so its readiness is cleared at once rather than
//! found out by one more call that would block.

use std::io::{self, IoSlice};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd};
use std::task::{ready, Context, Poll};

use rustix::net::{RecvFlags, SendFlags};
use tokio::io::{Interest, ReadBuf};
use tokio::net::TcpStream;

/// One `recv` into `into`: the bytes read (0 at the end of the stream).
pub fn recv(fd: BorrowedFd<'_>, into: &mut [MaybeUninit<u8>]) -> io::Result<usize> {
    let ((read, _), _) = rustix::net::recv(fd, into, RecvFlags::empty())?;
    Ok(read.len())
}

/// One `send` of `bytes`, with no `SIGPIPE` if the peer has gone.
pub fn send(fd: BorrowedFd<'_>, bytes: &[u8]) -> io::Result<usize> {
    Ok(rustix::net::send(fd, bytes, SendFlags::NOSIGNAL)?)
}

/// One `writev` of `bufs` (std ignores `SIGPIPE` in its programs, as for its own `writev`).
pub fn writev(fd: BorrowedFd<'_>, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    Ok(rustix::io::writev(fd, bufs)?)
}

/// Reads into `buf` once `tcp` is readable, with `read`, which returns the bytes it read and
/// what else it learnt (a receive timestamp, say).
pub fn poll_read_by<T>(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
    mut read: impl FnMut(BorrowedFd<'_>, &mut [MaybeUninit<u8>]) -> io::Result<(usize, T)>,
) -> Poll<io::Result<T>> {
    loop {
        ready!(tcp.poll_read_ready(cx))?;
        // SAFETY: the kernel only writes into the unfilled part (it never de-initialises
        // bytes), and exactly the `n` bytes `read` reports are marked initialised below.
        let unfilled = unsafe { buf.unfilled_mut() };
        let room = unfilled.len();
        // `try_io` clears the readiness when the closure reports `WouldBlock`, so a short read
        // is reported that way and its result carried out beside it.
        let mut short = None;
        let result = tcp.try_io(Interest::READABLE, || {
            let (n, learnt) = read(tcp.as_fd(), unfilled)?;
            if n > 0 && n < room {
                short = Some((n, learnt));
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok((n, learnt))
        });
        let (n, learnt) = match (result, short) {
            (_, Some(drained)) => drained,
            (Ok(whole), None) => whole,
            (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => continue,
            (Err(e), None) => return Poll::Ready(Err(e)),
        };
        // SAFETY: `read` wrote `n` bytes at the start of the unfilled part.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        return Poll::Ready(Ok(learnt));
    }
}

/// [`TcpStream`]'s `poll_read`, by [`recv`].
pub fn poll_read(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    poll_read_by(tcp, cx, buf, |fd, into| Ok((recv(fd, into)?, ())))
}

/// Writes with `write` (which is given the socket) once `tcp` is writable; `len` is what it
/// is asked to write.
fn poll_write_by(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    len: usize,
    write: impl Fn(BorrowedFd<'_>) -> io::Result<usize>,
) -> Poll<io::Result<usize>> {
    loop {
        ready!(tcp.poll_write_ready(cx))?;
        let mut short = None;
        let result = tcp.try_io(Interest::WRITABLE, || {
            let n = write(tcp.as_fd())?;
            if n > 0 && n < len {
                short = Some(n);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            Ok(n)
        });
        return Poll::Ready(match (result, short) {
            (_, Some(partial)) => Ok(partial),
            (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => continue,
            (result, None) => result,
        });
    }
}

/// [`TcpStream`]'s `poll_write`, by [`send`].
pub fn poll_write(tcp: &TcpStream, cx: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
    poll_write_by(tcp, cx, bytes.len(), |fd| send(fd, bytes))
}

/// [`TcpStream`]'s `poll_write_vectored`, by [`writev`].
pub fn poll_write_vectored(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    let len = bufs.iter().map(|b| b.len()).sum();
    poll_write_by(tcp, cx, len, |fd| writev(fd, bufs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
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
        let (mut client, server) = pair().await;
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
        client.shutdown().await.unwrap();
        let (first, at_end) = reader.await.unwrap();
        assert_eq!(first, b"hi");
        assert_eq!(at_end, 0, "the peer's shutdown reads as the end");
        let mut rest = Vec::new();
        assert_eq!(client.read_to_end(&mut rest).await.unwrap(), 0);
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
