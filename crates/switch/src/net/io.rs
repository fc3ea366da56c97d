//! Client sockets that join the event loop only when they have to.
//!
//! tokio registers every accepted socket with epoll and deregisters it before closing: two
//! `epoll_ctl` calls per connection. For a client that sends its request right after connecting
//! and reads one response (`Connection: close`, the common case of HTTP/1.0 clients and of the
//! switch-capacity test), the request is already in the socket buffer when the switch accepts,
//! and the response fits in the send buffer, so neither call buys anything. HAProxy reads and
//! writes speculatively for the same reason. Here a socket is read and written directly until a
//! call would block; only then is it handed to tokio, which registers it and waits for readiness.
//! Either way the calls are [`socket_calls`]' own system calls, not glibc's wrappers.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};

use crate::net::socket_calls;

/// A listening socket whose accepted connections are not yet registered with the event loop.
pub(crate) struct Acceptor {
    inner: AsyncFd<mio::net::TcpListener>,
}

impl Acceptor {
    /// Takes a bound, non-blocking listener; must be called inside a tokio runtime.
    pub(crate) fn new(listener: std::net::TcpListener) -> io::Result<Self> {
        defer_accept(&listener, 1)?;
        let listener = mio::net::TcpListener::from_std(listener);
        // SAFETY: the mio listener owns its descriptor, which stays open and the same until the
        // `AsyncFd` is dropped: it is only ever borrowed (`get_ref`) to accept, never replaced.
        let inner = unsafe { AsyncFd::register_with_interest(listener, Interest::READABLE) }?;
        Ok(Acceptor { inner })
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.get_ref().local_addr()
    }

    /// The next connection: a non-blocking socket (accept4 with `SOCK_NONBLOCK`), unregistered.
    pub(crate) async fn accept(&self) -> io::Result<(LazyStream, SocketAddr)> {
        loop {
            let mut ready = self.inner.readable().await?;
            match ready.try_io(|listener| listener.get_ref().accept()) {
                Ok(accepted) => {
                    let (stream, peer) = accepted?;
                    return Ok((LazyStream::Direct(stream), peer));
                }
                // Nothing left to accept: readiness was cleared, wait for the next edge.
                Err(_would_block) => continue,
            }
        }
    }
}

/// Asks the kernel to hand over a connection only once its first bytes have arrived (or
/// `seconds` have passed): the request is then there to read at once, and a client that connects
/// and stays silent does not take an accept or a task. nginx's `deferred`, HAProxy's
/// `defer-accept`.
fn defer_accept(listener: &std::net::TcpListener, seconds: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket descriptor borrowed from `listener`, and a pointer to an `i32`
    // that lives across the call, with its exact size.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            (&seconds as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A client connection, used directly until a read or write would block, then through tokio.
pub(crate) enum LazyStream {
    Direct(mio::net::TcpStream),
    Registered(AsyncFd<mio::net::TcpStream>),
    /// Only while switching from one to the other, or after registration failed.
    Gone,
}

impl LazyStream {
    pub(crate) fn set_nodelay(&self, on: bool) -> io::Result<()> {
        match self {
            LazyStream::Direct(s) => s.set_nodelay(on),
            LazyStream::Registered(s) => s.get_ref().set_nodelay(on),
            LazyStream::Gone => Ok(()),
        }
    }

    /// Waits until the client has sent something (or closed), at most `limit`; `false` when the
    /// time ran out. A connection costs only this wait until then: hyper's buffers (8 KB to read,
    /// 8 KB for response heads, both fixed by hyper) are set up once there is a request to read.
    /// Already-arrived bytes (the usual case after a deferred accept) are seen without a
    /// registration with the event loop.
    pub(crate) async fn first_bytes(&mut self, limit: std::time::Duration) -> io::Result<bool> {
        if let LazyStream::Direct(s) = self {
            let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
            match socket2::SockRef::from(&*s).peek(&mut probe) {
                Ok(_) => return Ok(true),
                Err(e) if hand_to_tokio(&e) => {}
                Err(e) => return Err(e),
            }
        }
        let stream = self.registered()?;
        match tokio::time::timeout(limit, stream.readable()).await {
            // The guard is dropped without clearing: the bytes are there for the first read.
            Ok(ready) => ready.map(|_guard| true),
            Err(_elapsed) => Ok(false),
        }
    }

    /// The address the client connected to.
    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            LazyStream::Direct(s) => s.local_addr(),
            LazyStream::Registered(s) => s.get_ref().local_addr(),
            LazyStream::Gone => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the socket is gone",
            )),
        }
    }

    /// Registers the socket with the event loop (once), so that it can wait for readiness.
    fn registered(&mut self) -> io::Result<&AsyncFd<mio::net::TcpStream>> {
        if let LazyStream::Direct(_) = self {
            let LazyStream::Direct(direct) = std::mem::replace(self, LazyStream::Gone) else {
                unreachable!("matched just above")
            };
            *self = LazyStream::Registered(socket_calls::register(direct)?);
        }
        match self {
            LazyStream::Registered(s) => Ok(s),
            _ => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the socket could not be registered with the event loop",
            )),
        }
    }

    /// Runs `direct` on an unregistered socket; when it would block (or the socket is already
    /// registered), runs `through_tokio` on the registered socket instead.
    fn poll_with<T>(
        &mut self,
        cx: &mut Context<'_>,
        direct: impl FnOnce(&mio::net::TcpStream) -> io::Result<T>,
        through_tokio: impl FnOnce(
            &AsyncFd<mio::net::TcpStream>,
            &mut Context<'_>,
        ) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if let LazyStream::Direct(s) = self {
            match direct(s) {
                Err(e) if hand_to_tokio(&e) => {}
                done => return Poll::Ready(done),
            }
        }
        match self.registered() {
            Ok(s) => through_tokio(s, cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

/// A direct call that would block (or was interrupted) goes again through tokio, which waits
/// for readiness.
fn hand_to_tokio(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

impl AsyncRead for LazyStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let LazyStream::Direct(s) = this {
            // SAFETY: `recv` only writes into the slice (it never de-initialises bytes), and
            // `assume_init` below covers exactly the `n` bytes it wrote.
            let unfilled = unsafe { buf.unfilled_mut() };
            match socket_calls::recv(s.as_fd(), unfilled) {
                Ok(n) => {
                    // SAFETY: the kernel initialised the first `n` bytes of the unfilled part.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if hand_to_tokio(&e) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        match this.registered() {
            Ok(s) => socket_calls::poll_read(s, cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl AsyncWrite for LazyStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_with(
            cx,
            |s| socket_calls::send(s.as_fd(), buf),
            |s, cx| socket_calls::poll_write(s, cx, buf),
        )
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_with(
            cx,
            |s| socket_calls::writev(s.as_fd(), bufs),
            |s, cx| socket_calls::poll_write_vectored(s, cx, bufs),
        )
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // TCP sockets have no user-space buffer to flush.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            LazyStream::Direct(s) => Poll::Ready(s.shutdown(std::net::Shutdown::Write)),
            LazyStream::Registered(s) => {
                Poll::Ready(s.get_ref().shutdown(std::net::Shutdown::Write))
            }
            LazyStream::Gone => Poll::Ready(Ok(())),
        }
    }
}
