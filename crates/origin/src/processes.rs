//! Process-per-connection mode: Apache's prefork model as Banga & Druschel describe it (§5.5).
//! Each connection the node serves holds a "process" from accept to close, at most `limit` at
//! once (Apache's MaxClients, 152 in the paper). When all are busy the node stops accepting, so
//! further connections wait in the kernel's listen backlog — as they do for Apache, whose idle
//! children are the only callers of `accept`. Each process in use takes its memory (≈ 500 KB in
//! the paper) from the modelled file cache, which is how longer-lived WAN connections turn a
//! cache-resident working set into a disk-bound one (the paper's 97 → 28 MB).
//!
//! A process is a semaphore permit taken *before* `accept` (an idle child waiting in `accept`)
//! and turned into a [`ProcessSlot`] when a connection arrives; dropping the slot, however the
//! connection ends, frees the process and gives its memory back to the cache. Like Apache, a
//! process closes a connection by [`linger`]ing: it half-closes and waits for the client's FIN,
//! so every connection holds its process for at least the round trip the close takes — one of
//! the ways WAN delay keeps more processes busy.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_core::report::ProcessReport;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::emulated::Emulated;

/// The node's processes and the listening socket whose backlog holds the connections waiting
/// for one.
pub struct Processes {
    limit: u32,
    memory_per_process: u64,
    backlog: u32,
    idle: Arc<Semaphore>,
    /// Processes serving a connection; changed together with the cache's capacity.
    in_use: Mutex<u64>,
    max_in_use: AtomicU64,
    accepted: AtomicU64,
    /// The listening socket, while its accept loop runs (for the backlog's length).
    listener: Mutex<Option<RawFd>>,
}

impl Processes {
    pub fn new(limit: u32, memory_per_process: u64, backlog: u32) -> Processes {
        Processes {
            limit,
            memory_per_process,
            backlog,
            idle: Arc::new(Semaphore::new(limit as usize)),
            in_use: Mutex::new(0),
            max_in_use: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            listener: Mutex::new(None),
        }
    }

    /// Waits until a process is free to call `accept`.
    pub async fn idle(&self) -> OwnedSemaphorePermit {
        self.idle
            .clone()
            .acquire_owned()
            .await
            .expect("the process semaphore is never closed")
    }

    /// Watches `fd`'s accept queue until the returned guard is dropped (before the socket is).
    pub fn watch_listener(self: &Arc<Self>, fd: RawFd) -> ListenerWatch {
        *lock(&self.listener) = Some(fd);
        ListenerWatch(self.clone())
    }

    pub fn report(&self) -> ProcessReport {
        let in_use = *lock(&self.in_use);
        let waiting = lock(&self.listener).and_then(accept_queue_len);
        ProcessReport {
            limit: self.limit,
            in_use,
            max_in_use: self.max_in_use.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            waiting: waiting.unwrap_or(0),
            backlog: self.backlog,
            memory_per_process_bytes: self.memory_per_process,
            memory_bytes: in_use * self.memory_per_process,
        }
    }

    /// Adds `delta` (±1) processes in use and resizes the node's file cache to match, under
    /// one lock so that concurrent opens and closes leave the cache at the right size.
    fn change(&self, memory: Option<&Emulated>, delta: i64) {
        let mut in_use = lock(&self.in_use);
        *in_use = in_use.saturating_add_signed(delta);
        self.max_in_use.fetch_max(*in_use, Ordering::Relaxed);
        if let Some(e) = memory {
            e.reserve_memory(*in_use * self.memory_per_process);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stops reading a listening socket's backlog when its accept loop ends.
pub struct ListenerWatch(Arc<Processes>);

impl Drop for ListenerWatch {
    fn drop(&mut self) {
        *lock(&self.0.listener) = None;
    }
}

/// A process serving one connection; dropping it frees the process and its memory.
pub struct ProcessSlot {
    processes: Arc<Processes>,
    /// The emulated node whose file cache gives up the process's memory (none on a real node).
    memory: Option<Arc<Emulated>>,
    _permit: OwnedSemaphorePermit,
}

impl ProcessSlot {
    /// The idle process holding `permit` takes a newly accepted connection; its memory comes
    /// out of `memory`'s file cache.
    pub fn take(
        processes: &Arc<Processes>,
        memory: Option<Arc<Emulated>>,
        permit: OwnedSemaphorePermit,
    ) -> ProcessSlot {
        processes.accepted.fetch_add(1, Ordering::Relaxed);
        processes.change(memory.as_deref(), 1);
        ProcessSlot {
            processes: processes.clone(),
            memory,
            _permit: permit,
        }
    }
}

impl Drop for ProcessSlot {
    fn drop(&mut self) {
        self.processes.change(self.memory.as_deref(), -1);
    }
}

/// Longest a process waits for a request's head, the first or the next on a kept-alive
/// connection: Apache 1.3's `KeepAliveTimeout` (15 s; the paper's server). A client that went
/// away silently (its namespace removed mid-request) then holds a process this long at most.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(15);

/// Longest a process waits for the client's FIN after its own (Apache's lingering close reads
/// for up to 2 s, `SECONDS_TO_LINGER`).
const LINGER: Duration = Duration::from_secs(2);

/// Apache's lingering close: shut the sending side, then read (and discard) until the client
/// closes its side or [`LINGER`] passes, so that data still in flight from the client does not
/// turn the close into a reset that could destroy the response.
pub async fn linger(mut stream: TcpStream) {
    if stream.shutdown().await.is_err() {
        return;
    }
    let mut buf = [0u8; 2048];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

/// Connections waiting in a listening socket's accept queue: for a socket in LISTEN state,
/// Linux reports the queue's length in `tcpi_unacked` (and its limit in `tcpi_sacked`).
#[cfg(target_os = "linux")]
fn accept_queue_len(fd: RawFd) -> Option<u64> {
    // SAFETY: tcp_info is plain old data, so all-zero bytes are a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `fd` is the open listening socket (the caller holds the lock that its accept loop
    // clears before closing it); `info` and `len` are valid for writes of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(u64::from(info.tcpi_unacked))
}

#[cfg(not(target_os = "linux"))]
fn accept_queue_len(_fd: RawFd) -> Option<u64> {
    None
}
