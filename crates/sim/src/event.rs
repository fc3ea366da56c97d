//! The event core: integer-nanosecond virtual time and a binary heap ordered by (time, sequence).
//!
//! The sequence number makes the order of equal timestamps the order of insertion, so a run does
//! not depend on how the heap happens to break ties: same seed, same event order, same output.

/// Virtual time in nanoseconds since the start of the run.
pub type Nanos = u64;

/// Seconds (as the `model` crate counts time) from nanoseconds.
pub fn secs(t: Nanos) -> f64 {
    t as f64 * 1e-9
}

/// Nanoseconds from seconds, rounded up so an event scheduled from a model's completion time
/// never fires before the model has actually finished the work.
pub fn nanos_ceil(s: f64) -> Nanos {
    if s <= 0.0 {
        0
    } else {
        (s * 1e9).ceil() as Nanos
    }
}

/// Nanoseconds from a duration in seconds, rounded to nearest (for sampled delays).
pub fn nanos_round(s: f64) -> Nanos {
    if s <= 0.0 {
        0
    } else {
        (s * 1e9).round() as Nanos
    }
}

struct Entry<E> {
    /// `(at, seq)` packed so the heap compares one integer: time in the high half, insertion
    /// sequence in the low half.
    key: u128,
    event: E,
}

fn key(at: Nanos, seq: u64) -> u128 {
    (u128::from(at) << 64) | u128::from(seq)
}

/// Children per heap node. A 4-ary heap is half as deep as a binary one and a node's children
/// share cache lines, which is what a pop with thousands of pending events spends its time on.
const ARITY: usize = 4;

/// A future-event list: a 4-ary min-heap on (time, sequence).
pub struct EventQueue<E> {
    heap: Vec<Entry<E>>,
    seq: u64,
    now: Nanos,
    popped: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self::new()
    }
}

impl<E> EventQueue<E> {
    pub fn new() -> Self {
        EventQueue {
            heap: Vec::with_capacity(1024),
            seq: 0,
            now: 0,
            popped: 0,
        }
    }

    /// The time of the event last popped.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Events popped so far (the simulator's unit of work for events/s).
    pub fn popped(&self) -> u64 {
        self.popped
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Schedules `event` at `at`; a time in the past is moved to now, since causality forbids
    /// going back and silently reordering would be worse.
    pub fn schedule(&mut self, at: Nanos, event: E) {
        let at = at.max(self.now);
        self.seq += 1;
        let k = key(at, self.seq);
        let mut i = self.heap.len();
        self.heap.push(Entry { key: k, event });
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if self.heap[parent].key <= k {
                break;
            }
            self.heap.swap(parent, i);
            i = parent;
        }
    }

    /// Schedules `event` `delay` nanoseconds from now.
    pub fn after(&mut self, delay: Nanos, event: E) {
        self.schedule(self.now.saturating_add(delay), event);
    }

    /// The next event, advancing `now` to its time.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        if self.heap.is_empty() {
            return None;
        }
        let e = self.heap.swap_remove(0);
        let n = self.heap.len();
        if n > 1 {
            let k = self.heap[0].key;
            let mut i = 0;
            loop {
                let first = i * ARITY + 1;
                if first >= n {
                    break;
                }
                let last = (first + ARITY).min(n);
                let mut best = first;
                let mut best_key = self.heap[first].key;
                for c in first + 1..last {
                    let ck = self.heap[c].key;
                    if ck < best_key {
                        best = c;
                        best_key = ck;
                    }
                }
                if best_key >= k {
                    break;
                }
                self.heap.swap(i, best);
                i = best;
            }
        }
        let at = (e.key >> 64) as Nanos;
        self.now = at;
        self.popped += 1;
        Some((at, e.event))
    }

    /// Time of the next event without removing it.
    pub fn peek_time(&self) -> Option<Nanos> {
        self.heap.first().map(|e| (e.key >> 64) as Nanos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_in_time_then_insertion_order() {
        let mut q = EventQueue::new();
        q.schedule(20, "c");
        q.schedule(10, "a");
        q.schedule(20, "d");
        q.schedule(10, "b");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, vec![(10, "a"), (10, "b"), (20, "c"), (20, "d")]);
        assert_eq!(q.popped(), 4);
    }

    #[test]
    fn pops_like_a_stable_sort() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut q = EventQueue::new();
        let mut want = Vec::new();
        let mut got = Vec::new();
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few distinct times, so ties are common; pop now and then so pushes and pops mix.
            let at = q.now() + x % 50;
            q.schedule(at, i);
            want.push((at, i));
            if x.is_multiple_of(3) {
                got.push(q.pop().unwrap());
            }
        }
        got.extend(std::iter::from_fn(|| q.pop()));
        // Popped order is by time, ties in insertion order — checked against a stable sort of
        // the same events, with each pop only able to see events already scheduled.
        let mut sorted = got.clone();
        sorted.sort_by_key(|&(at, _)| at);
        assert_eq!(got, sorted);
        for w in got.windows(2) {
            assert!(w[0].0 < w[1].0 || w[0].1 < w[1].1, "{w:?}");
        }
        assert_eq!(got.len(), want.len());
    }

    #[test]
    fn past_events_run_now_and_ceil_never_early() {
        let mut q = EventQueue::new();
        q.schedule(100, 1);
        q.pop();
        q.schedule(50, 2);
        assert_eq!(q.pop(), Some((100, 2)));
        assert!(secs(nanos_ceil(0.1234567891)) >= 0.1234567891);
        assert_eq!(nanos_round(1e-9), 1);
    }
}
