//! The event core: integer-nanosecond virtual time and a binary heap ordered by (time, sequence).
//!
//! The sequence number makes the order of equal timestamps the order of insertion, so a run does
//! not depend on how the heap happens to break ties: same seed, same event order, same output.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

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
    at: Nanos,
    seq: u64,
    event: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Entry<E> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap and we want the earliest (then first-inserted) on top.
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A future-event list.
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
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
            heap: BinaryHeap::with_capacity(1024),
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
        self.heap.push(Entry {
            at,
            seq: self.seq,
            event,
        });
    }

    /// Schedules `event` `delay` nanoseconds from now.
    pub fn after(&mut self, delay: Nanos, event: E) {
        self.schedule(self.now.saturating_add(delay), event);
    }

    /// The next event, advancing `now` to its time.
    pub fn pop(&mut self) -> Option<(Nanos, E)> {
        let e = self.heap.pop()?;
        self.now = e.at;
        self.popped += 1;
        Some((e.at, e.event))
    }

    /// Time of the next event without removing it.
    pub fn peek_time(&self) -> Option<Nanos> {
        self.heap.peek().map(|e| e.at)
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
