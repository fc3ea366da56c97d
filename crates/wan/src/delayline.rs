//! Packets waiting for their departure time, earliest first. Packets due at the same time
//! leave in arrival order, so a path without jitter never reorders anything.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A priority queue of items keyed by departure time (ns), ties broken by arrival order.
#[derive(Debug)]
pub struct DelayLine<T> {
    heap: BinaryHeap<Reverse<Entry<T>>>,
    arrivals: u64,
}

#[derive(Debug)]
struct Entry<T> {
    departure: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.departure, self.seq) == (other.departure, other.seq)
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.departure, self.seq).cmp(&(other.departure, other.seq))
    }
}

impl<T> Default for DelayLine<T> {
    fn default() -> Self {
        DelayLine {
            heap: BinaryHeap::new(),
            arrivals: 0,
        }
    }
}

impl<T> DelayLine<T> {
    pub fn push(&mut self, departure: u64, item: T) {
        self.arrivals += 1;
        self.heap.push(Reverse(Entry {
            departure,
            seq: self.arrivals,
            item,
        }));
    }

    /// The earliest departure time waiting.
    pub fn next_departure(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.0.departure)
    }

    /// Takes the earliest item if it is due at `now`, with its intended departure time.
    pub fn pop_due(&mut self, now: u64) -> Option<(u64, T)> {
        if self.next_departure()? > now {
            return None;
        }
        self.heap.pop().map(|e| (e.0.departure, e.0.item))
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_departure_order_and_only_when_due() {
        let mut line = DelayLine::default();
        line.push(30, "c");
        line.push(10, "a");
        line.push(20, "b");
        assert_eq!(line.pop_due(5), None);
        assert_eq!(line.pop_due(25), Some((10, "a")));
        assert_eq!(line.pop_due(25), Some((20, "b")));
        assert_eq!(line.pop_due(25), None);
        assert_eq!(line.next_departure(), Some(30));
    }

    #[test]
    fn equal_departures_keep_arrival_order() {
        let mut line = DelayLine::default();
        for i in 0..100 {
            line.push(7, i);
        }
        let out: Vec<i32> = std::iter::from_fn(|| line.pop_due(7).map(|(_, i)| i)).collect();
        assert_eq!(out, (0..100).collect::<Vec<_>>());
    }
}
