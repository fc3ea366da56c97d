//! A node's own share of a request's latency, timed at the socket.
//!
//! The admission limiter ([`crate::state::admission`]) sizes a node's concurrency limit by how the
//! node's latency grows with load. Timed from the request's task, a latency also holds the
//! switch's own delays: the wait for the connection's task to write the request, the time the
//! answer sits in the socket until that task is polled, and then until the request's task is.
//! When the switch is the busy one (a worker at full CPU with a hundred streams ready), these
//! grow with its load, and the limiter read them as the node queueing: in `benches/tls.sh`'s
//! HTTP/2 run it cut four idle nginx nodes to limits of 3–14 and held most requests in the
//! switch's queue, at 17 % more CPU per request than with admission off.
//!
//! So a connection to a node notes when the request's bytes were handed to the kernel (the
//! last write before the answer) and when the kernel received the answer's first bytes: a
//! receive timestamp (`SO_TIMESTAMPNS`) taken on the network path, before the switch gets to
//! read them. Their difference is the node's latency plus the network's, whatever the switch
//! was busy with. (TCP reports the newest packet a read took: when the switch reads late and
//! more of the answer has come by then, the latency counts up to that packet.) Where the
//! kernel gives no timestamp, the time of the read stands in.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::net::socket_calls;

/// When the last request on a connection went out and its answer came in, nanoseconds of the
/// real-time clock (the kernel's receive timestamps are on it); 0: not yet.
#[derive(Debug, Default)]
pub(crate) struct NodeClock {
    sent_at: AtomicU64,
    answered_at: AtomicU64,
}

impl NodeClock {
    /// Bytes of a request left: the answer is timed from here.
    fn wrote(&self, now: u64) {
        self.sent_at.store(now, Ordering::Relaxed);
        self.answered_at.store(0, Ordering::Relaxed);
    }

    /// Whether the next bytes read are the first of an answer.
    fn awaiting(&self) -> bool {
        self.answered_at.load(Ordering::Relaxed) == 0 && self.sent_at.load(Ordering::Relaxed) != 0
    }

    fn answered(&self, at: u64) {
        self.answered_at.store(at.max(1), Ordering::Relaxed);
    }

    /// From the request's last bytes out to the answer's first bytes in, once both happened.
    pub(crate) fn latency_nanos(&self) -> Option<u64> {
        let sent = self.sent_at.load(Ordering::Relaxed);
        let answered = self.answered_at.load(Ordering::Relaxed);
        (sent != 0 && answered >= sent).then(|| answered - sent)
    }

    /// The last answer's latency, and how long ago its first bytes arrived.
    pub(crate) fn answer(&self) -> Option<(u64, u64)> {
        let latency = self.latency_nanos()?;
        let answered = self.answered_at.load(Ordering::Relaxed);
        Some((latency, realtime_nanos().saturating_sub(answered)))
    }

    /// The instants themselves: (sent, answered).
    #[cfg(test)]
    fn instants(&self) -> (u64, u64) {
        (
            self.sent_at.load(Ordering::Relaxed),
            self.answered_at.load(Ordering::Relaxed),
        )
    }
}

/// Nanoseconds of the real-time clock, the one the kernel stamps received packets with.
fn realtime_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// A TCP connection to a node, with a [`NodeClock`] when it is timed. Read and written by
/// [`socket_calls`], past glibc's wrappers.
pub(crate) struct TimedTcp {
    tcp: AsyncFd<std::net::TcpStream>,
    clock: Option<Arc<NodeClock>>,
}

impl TimedTcp {
    /// A connection nobody times (a WebSocket's, a health check's).
    pub(crate) fn plain(tcp: TcpStream) -> io::Result<Self> {
        Ok(TimedTcp {
            tcp: socket_calls::register(tcp.into_std()?)?,
            clock: None,
        })
    }

    /// A connection whose requests are timed; with receive timestamps when the kernel has
    /// them.
    pub(crate) fn timed(tcp: TcpStream) -> io::Result<Self> {
        if let Err(e) = enable_receive_timestamps(tcp.as_raw_fd()) {
            tracing::debug!("no receive timestamps on a node connection ({e}); reads are timed");
        }
        Ok(TimedTcp {
            tcp: socket_calls::register(tcp.into_std()?)?,
            clock: Some(Arc::new(NodeClock::default())),
        })
    }

    pub(crate) fn clock(&self) -> Option<&Arc<NodeClock>> {
        self.clock.as_ref()
    }

    fn note_written(&self, result: &Poll<io::Result<usize>>) {
        if let (Some(clock), Poll::Ready(Ok(n))) = (&self.clock, result) {
            if *n > 0 {
                clock.wrote(realtime_nanos());
            }
        }
    }
}

fn enable_receive_timestamps(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: `fd` is an open socket owned by the caller for the whole call, and the option's
    // value points to a live `c_int` whose size is the length passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// One `recvmsg` into `into`: the bytes read and the kernel's receive timestamp of the last
/// of them, when it gave one.
fn recv_stamped(
    fd: BorrowedFd<'_>,
    into: &mut [MaybeUninit<u8>],
) -> io::Result<(usize, Option<u64>)> {
    let mut iov = libc::iovec {
        iov_base: into.as_mut_ptr().cast(),
        iov_len: into.len(),
    };
    // Room for one timestamp message; u64s keep it aligned for `cmsghdr`.
    let mut control = [0u64; 8];
    // SAFETY: `msghdr` is a plain C struct; all zeroes is a valid value (no name, no buffers).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // `syscall` rather than glibc's `recvmsg`, a cancellation point (crate::net::socket_calls says
    // why).
    // SAFETY: `msg` points to one iovec over `into` (writable, `into.len()` bytes) and to
    // `control` (writable, `msg_controllen` bytes); all three outlive the call, and `fd` is an
    // open socket borrowed for it.
    let n = unsafe {
        libc::syscall(
            libc::SYS_recvmsg,
            fd.as_raw_fd(),
            &mut msg as *mut libc::msghdr,
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, timestamp_in(&msg)))
}

/// The `SCM_TIMESTAMPNS` message among those `recvmsg` returned, as nanoseconds.
fn timestamp_in(msg: &libc::msghdr) -> Option<u64> {
    // SAFETY: `msg` was filled by `recvmsg`: its control pointer and length describe the
    // messages the kernel wrote, which CMSG_FIRSTHDR / CMSG_NXTHDR walk without leaving them.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(msg) };
    while !cmsg.is_null() {
        // SAFETY: a non-null header from CMSG_FIRSTHDR / CMSG_NXTHDR lies within the buffer.
        let header = unsafe { &*cmsg };
        if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_TIMESTAMPNS {
            // SAFETY: an SCM_TIMESTAMPNS message carries one `timespec`; the data may be
            // unaligned, hence the unaligned read.
            let ts: libc::timespec =
                unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast()) };
            let nanos = u64::try_from(ts.tv_sec).ok()? * 1_000_000_000;
            return Some(nanos + u64::try_from(ts.tv_nsec).ok()?);
        }
        // SAFETY: as above, `cmsg` is a header of `msg`'s buffer.
        cmsg = unsafe { libc::CMSG_NXTHDR(msg, cmsg) };
    }
    None
}

/// Reads the first bytes of an answer with their receive timestamp.
fn poll_read_timed(
    tcp: &AsyncFd<std::net::TcpStream>,
    clock: &NodeClock,
    cx: &mut Context<'_>,
    buf: &mut ReadBuf<'_>,
) -> Poll<io::Result<()>> {
    let before = buf.filled().len();
    let stamp = ready!(socket_calls::poll_read_by(tcp, cx, buf, recv_stamped))?;
    if buf.filled().len() > before {
        clock.answered(stamp.unwrap_or_else(realtime_nanos));
    }
    Poll::Ready(Ok(()))
}

impl AsyncRead for TimedTcp {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        match &this.clock {
            Some(clock) if clock.awaiting() => poll_read_timed(&this.tcp, clock, cx, buf),
            _ => socket_calls::poll_read(&this.tcp, cx, buf),
        }
    }
}

impl AsyncWrite for TimedTcp {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = socket_calls::poll_write(&this.tcp, cx, buf);
        this.note_written(&result);
        result
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = socket_calls::poll_write_vectored(&this.tcp, cx, bufs);
        this.note_written(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // TCP sockets have no user-space buffer to flush.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.tcp.get_ref().shutdown(std::net::Shutdown::Write))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A node that answers each request once told to, and reports when its answer left.
    async fn node() -> (
        std::net::SocketAddr,
        tokio::sync::mpsc::Sender<()>,
        tokio::sync::mpsc::Receiver<u64>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (go, mut told) = tokio::sync::mpsc::channel::<()>(4);
        let (done, answered) = tokio::sync::mpsc::channel(4);
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 64];
            while conn.read(&mut request).await.unwrap_or(0) > 0 {
                if told.recv().await.is_none() {
                    return;
                }
                conn.write_all(b"answer").await.unwrap();
                done.send(realtime_nanos()).await.unwrap();
            }
        });
        (addr, go, answered)
    }

    #[tokio::test]
    async fn the_answer_is_timed_when_it_arrived_not_when_it_was_read() {
        let (addr, go, mut answered) = node().await;
        let mut conn = TimedTcp::timed(TcpStream::connect(addr).await.unwrap()).unwrap();
        let clock = Arc::clone(conn.clock().unwrap());
        // The kernel turns receive timestamps on for the whole host a moment after the first
        // socket asks (a deferred static key), so the first answers may come unstamped: then
        // the read's time stands in. Ask until one comes stamped.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut stamped = 0;
        while stamped < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "no receive timestamp came"
            );
            conn.write_all(b"request").await.unwrap();
            let (sent, none) = clock.instants();
            assert!(
                sent > 0 && none == 0,
                "a write starts the timing: {sent} {none}"
            );
            assert_eq!(clock.latency_nanos(), None);
            go.send(()).await.unwrap();
            let node_done = answered.recv().await.unwrap();
            // The switch is busy elsewhere: the answer waits in the socket.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            let read_at = realtime_nanos();
            let mut buf = [0u8; 16];
            let n = conn.read(&mut buf).await.unwrap();
            assert_eq!(&buf[..n], b"answer");
            let (sent, arrived) = clock.instants();
            assert!(arrived >= sent, "sent {sent}, arrived {arrived}");
            assert_eq!(clock.latency_nanos(), Some(arrived - sent));
            if arrived < read_at {
                stamped += 1;
                assert!(
                    arrived <= node_done,
                    "stamped {arrived}, after the node's write returned ({node_done})"
                );
            }
        }
    }

    /// A timed read that drained the socket clears its readiness (so no read syscall follows
    /// only to find it empty); the bytes that come next must still wake the reader.
    #[tokio::test]
    async fn after_a_draining_timed_read_the_next_bytes_still_arrive() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (go, mut told) = tokio::sync::mpsc::channel::<()>(1);
        tokio::spawn(async move {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 7];
            conn.read_exact(&mut request).await.unwrap();
            conn.write_all(b"head").await.unwrap();
            told.recv().await;
            conn.write_all(b"body").await.unwrap();
        });
        let mut conn = TimedTcp::timed(TcpStream::connect(addr).await.unwrap()).unwrap();
        conn.write_all(b"request").await.unwrap();
        let mut buf = [0u8; 16];
        let n = conn.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"head");
        assert!(conn.clock().unwrap().latency_nanos().is_some());
        go.send(()).await.unwrap();
        let wait = std::time::Duration::from_secs(10);
        let n = tokio::time::timeout(wait, conn.read(&mut buf))
            .await
            .expect("the reader was never woken for the next bytes")
            .unwrap();
        assert_eq!(&buf[..n], b"body");
    }

    #[tokio::test]
    async fn an_untimed_connection_has_no_clock_and_reads_as_usual() {
        let (addr, go, mut answered) = node().await;
        let mut conn = TimedTcp::plain(TcpStream::connect(addr).await.unwrap()).unwrap();
        assert!(conn.clock().is_none());
        conn.write_all(b"request").await.unwrap();
        go.send(()).await.unwrap();
        answered.recv().await.unwrap();
        let mut buf = [0u8; 16];
        let n = conn.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"answer");
    }
}
