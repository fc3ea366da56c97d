//! The retry budget: retries may add at most `percent` % to the requests of the last
//! [`WINDOW_S`] seconds, plus a floor of `min_per_second` (Finagle's and Linkerd's
//! `RetryBudget`), so that when every node fails, retries do not multiply the load on them.
//!
//! Counts live in one-second buckets of atomics; the request path bumps one counter. Two
//! threads crossing a second boundary at once may lose a count: the budget is approximate
//! by a request or two, which is all it needs to be.

use std::sync::atomic::{AtomicU64, Ordering};

/// Seconds of history the budget looks at.
pub(crate) const WINDOW_S: u64 = 10;

#[derive(Default)]
struct Bucket {
    /// The second (since the switch started) this bucket counts, plus one; 0 when unused.
    second: AtomicU64,
    requests: AtomicU64,
    retries: AtomicU64,
}

/// Requests and retries over the last [`WINDOW_S`] seconds.
#[derive(Default)]
pub struct RetryBudget {
    buckets: [Bucket; WINDOW_S as usize],
    /// Retries refused because the budget was spent.
    pub exhausted: AtomicU64,
}

/// What the window holds now, for `/status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WindowCounts {
    pub requests: u64,
    pub retries: u64,
}

impl RetryBudget {
    /// The bucket for `second`, emptied first when it last counted an older second.
    fn bucket(&self, second: u64) -> &Bucket {
        let bucket = &self.buckets[(second % WINDOW_S) as usize];
        let tag = second + 1;
        if bucket.second.load(Ordering::Relaxed) != tag
            && bucket.second.swap(tag, Ordering::Relaxed) != tag
        {
            bucket.requests.store(0, Ordering::Relaxed);
            bucket.retries.store(0, Ordering::Relaxed);
        }
        bucket
    }

    /// Counts a request placed on a node for the first time.
    pub(crate) fn record_request(&self, now_nanos: u64) {
        self.bucket(now_nanos / 1_000_000_000)
            .requests
            .fetch_add(1, Ordering::Relaxed);
    }

    /// The requests and retries of the window ending at `now_nanos`.
    pub(crate) fn window(&self, now_nanos: u64) -> WindowCounts {
        let now = now_nanos / 1_000_000_000;
        let oldest = now.saturating_sub(WINDOW_S - 1);
        let mut counts = WindowCounts {
            requests: 0,
            retries: 0,
        };
        for bucket in &self.buckets {
            let second = bucket.second.load(Ordering::Relaxed);
            if second != 0 && (oldest..=now).contains(&(second - 1)) {
                counts.requests += bucket.requests.load(Ordering::Relaxed);
                counts.retries += bucket.retries.load(Ordering::Relaxed);
            }
        }
        counts
    }

    /// Takes one retry from the budget if it has one left, and says whether it did.
    pub(crate) fn try_retry(&self, now_nanos: u64, percent: u32, min_per_second: u32) -> bool {
        let counts = self.window(now_nanos);
        let allowed =
            counts.requests * u64::from(percent) / 100 + u64::from(min_per_second) * WINDOW_S;
        if counts.retries >= allowed {
            self.exhausted.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.bucket(now_nanos / 1_000_000_000)
            .retries
            .fetch_add(1, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn retries_are_a_share_of_requests_plus_a_floor() {
        let budget = RetryBudget::default();
        for _ in 0..100 {
            budget.record_request(5 * S);
        }
        // 20 % of 100 requests, plus 1/s over the 10 s window: 30 retries, then none.
        let granted = (0..50).filter(|_| budget.try_retry(5 * S, 20, 1)).count();
        assert_eq!(granted, 30);
        assert_eq!(budget.exhausted.load(Ordering::Relaxed), 20);
        assert_eq!(
            budget.window(5 * S),
            WindowCounts {
                requests: 100,
                retries: 30
            }
        );
    }

    #[test]
    fn the_window_forgets_old_seconds() {
        let budget = RetryBudget::default();
        for _ in 0..10 {
            budget.record_request(S);
        }
        assert!(budget.try_retry(S, 10, 0));
        assert!(!budget.try_retry(S, 10, 0), "10 % of 10 is one");
        // Ten seconds on, the first second has left the window.
        assert_eq!(budget.window(11 * S).requests, 0);
        assert!(!budget.try_retry(11 * S, 10, 0), "no requests, no floor");
        budget.record_request(11 * S);
        assert_eq!(
            budget.window(11 * S).requests,
            1,
            "the reused bucket was emptied"
        );
        assert!(
            budget.try_retry(11 * S, 0, 1),
            "the floor alone grants retries"
        );
    }
}
