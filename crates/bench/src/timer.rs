//! Sleeping until an instant with sub-millisecond precision. Tokio's timer wheel has 1 ms
//! granularity, which alone would put every scheduled request up to 1 ms late and make the lag
//! self-check meaningless; a timerfd registered with the event loop wakes it within tens of
//! microseconds.

use std::time::{Duration, Instant};

/// Waits shorter than this are not slept at all: the syscalls would take about as long.
const SPIN: Duration = Duration::from_micros(20);

#[cfg(target_os = "linux")]
pub struct PreciseTimer {
    fd: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
}

#[cfg(target_os = "linux")]
impl PreciseTimer {
    pub fn new() -> PreciseTimer {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscall with constant flags; a negative return is checked before use.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        let fd = if raw >= 0 {
            // SAFETY: `raw` is a fresh descriptor that nothing else owns.
            let owned = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
            // SAFETY: an OwnedFd keeps its descriptor open and returns the same one from
            // as_raw_fd until it is dropped, which happens only with the AsyncFd.
            unsafe {
                tokio::io::unix::AsyncFd::register_with_interest(
                    owned,
                    tokio::io::Interest::READABLE,
                )
            }
            .ok()
        } else {
            None
        };
        PreciseTimer { fd }
    }

    pub async fn sleep_until(&self, deadline: Instant) {
        use std::os::fd::AsRawFd;
        let now = Instant::now();
        if deadline <= now + SPIN {
            return;
        }
        let Some(fd) = &self.fd else {
            tokio::time::sleep_until(deadline.into()).await;
            return;
        };
        let d = deadline - now;
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: the descriptor is a live timerfd owned by `self`; `spec` is a valid itimerspec
        // and a null old-value pointer is allowed.
        let rc = unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc != 0 {
            tokio::time::sleep_until(deadline.into()).await;
            return;
        }
        loop {
            let Ok(mut guard) = fd.readable().await else {
                tokio::time::sleep_until(deadline.into()).await;
                return;
            };
            let mut buf = [0u8; 8];
            // SAFETY: reading 8 bytes (the expiry count) into a local 8-byte buffer.
            let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
            if n == 8 {
                return;
            }
            guard.clear_ready();
            if Instant::now() >= deadline {
                return;
            }
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub struct PreciseTimer;

#[cfg(not(target_os = "linux"))]
impl PreciseTimer {
    pub fn new() -> PreciseTimer {
        PreciseTimer
    }

    pub async fn sleep_until(&self, deadline: Instant) {
        if deadline > Instant::now() + SPIN {
            tokio::time::sleep_until(deadline.into()).await;
        }
    }
}
