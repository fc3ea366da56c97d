//! Closing silent client connections off the path of the others.
//!
//! A connection that sends nothing within `timeouts.header_read` is closed. Clients that open
//! thousands of them in one burst (a flood, a misbehaving pool) have them all time out in the
//! same timer tick, and a close is not free: on loopback the kernel sends the FIN and runs the
//! peer's side of it in the same system call. Closed by their own tasks, 4,500 of them took one
//! worker ≈ 10 ms in one go, and a request that became ready meanwhile waited behind every one
//! of them (tokio runs the tasks woken by the timer before it looks at the sockets again).
//!
//! So a connection task that gives up on a silent client hands its socket to the worker's
//! reaper and ends: handing over is a push onto a list. The reaper closes [`BATCH`] sockets at a
//! time and yields between batches, so that the worker serves the ready requests in between.
//! The connection stays counted as open (its guard goes with the socket) until its socket is
//! closed, so `limits.max_connections` never counts a socket the kernel still holds as free.

use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// Sockets closed between two yields: small enough that a ready request waits for at most a
/// few hundred microseconds of closes.
pub(crate) const BATCH: usize = 32;

/// One worker's queue of sockets to close: `T` is a socket with the guards that count it
/// open, closed when dropped.
pub(crate) struct Reaper<T> {
    pending: Mutex<Vec<T>>,
    wake: Notify,
}

impl<T> Default for Reaper<T> {
    fn default() -> Self {
        Reaper {
            pending: Mutex::new(Vec::new()),
            wake: Notify::new(),
        }
    }
}

impl<T: Send> Reaper<T> {
    /// Queues a socket (and its guards) to be closed soon.
    pub(crate) fn close(&self, closing: T) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.push(closing);
        if pending.len() == 1 {
            self.wake.notify_one();
        }
    }

    /// Sockets waiting to be closed.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.pending.lock().map_or(0, |p| p.len())
    }

    /// Closes what is queued, [`BATCH`] at a time, for as long as the task runs.
    pub(crate) async fn run(self: Arc<Self>) {
        loop {
            self.wake.notified().await;
            while self.close_batch() > 0 {
                tokio::task::yield_now().await;
            }
        }
    }

    /// Closes up to [`BATCH`] queued sockets; how many it closed.
    fn close_batch(&self) -> usize {
        let batch: Vec<T> = {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let keep = pending.len().saturating_sub(BATCH);
            pending.split_off(keep)
        };
        batch.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[tokio::test]
    async fn closes_everything_a_batch_at_a_time_letting_others_run_in_between() {
        let reaper = Arc::new(Reaper::default());
        let task = tokio::spawn(Arc::clone(&reaper).run());
        let closed = Arc::new(AtomicUsize::new(0));
        for _ in 0..3 * BATCH {
            reaper.close(Counted(Arc::clone(&closed)));
        }
        assert_eq!(reaper.pending(), 3 * BATCH);
        // This task stands for a request that became ready: it runs between the batches.
        let mut seen = Vec::new();
        while closed.load(Ordering::Relaxed) < 3 * BATCH {
            tokio::task::yield_now().await;
            seen.push(closed.load(Ordering::Relaxed));
        }
        assert!(
            seen.contains(&BATCH) && seen.contains(&(2 * BATCH)),
            "another task ran after each batch: {seen:?}"
        );
        // Later ones wake the reaper again.
        reaper.close(Counted(Arc::clone(&closed)));
        while closed.load(Ordering::Relaxed) < 3 * BATCH + 1 {
            tokio::task::yield_now().await;
        }
        assert_eq!(reaper.pending(), 0);
        task.abort();
    }
}
