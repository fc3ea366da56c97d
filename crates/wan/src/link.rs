//! One direction of one emulated path: when a packet that arrives now leaves, or why it is
//! dropped. Pure — time (nanoseconds on any monotonic clock) and the flow key come in as
//! arguments, so the paper's formula can be tested without a clock.
//!
//! The delay is Banga & Druschel's (§4.4):
//! `latency + size / bandwidth + queueing time of the packets ahead on this path`.
//! The path is a transmitter draining a FIFO at `bandwidth`, followed by a propagation delay of
//! `latency`. A packet starts transmitting when the packets ahead of it have been sent, so the
//! queueing time is the sum of their (remaining) transmission times, and back-to-back packets
//! leave spaced by their size / bandwidth — the paper's spacing scaled by the bandwidth ratio.
//! The queue limit (drop-tail) counts the packets not yet transmitted, not those in flight.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64Mcg;

use crate::loss::{Loss, LossModel};
use crate::units::QueueLimit;

/// Parameters of one direction of a path.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkParams {
    /// One-way propagation delay.
    pub latency: Duration,
    /// Bits per second; None = no bandwidth limit (no transmission time, no queue).
    pub bandwidth: Option<u64>,
    pub queue: QueueLimit,
    pub loss: LossModel,
    /// Each packet's latency is moved by a uniform offset in [-jitter, +jitter].
    pub jitter: Duration,
    /// Let jitter reorder packets of one flow (as netem does); off by default.
    pub reorder: bool,
}

impl Default for LinkParams {
    fn default() -> LinkParams {
        LinkParams {
            latency: Duration::ZERO,
            bandwidth: None,
            queue: QueueLimit::Packets(DEFAULT_QUEUE_PACKETS),
            loss: LossModel::None,
            jitter: Duration::ZERO,
            reorder: false,
        }
    }
}

/// netem's and Linux's default transmit queue length.
pub const DEFAULT_QUEUE_PACKETS: u64 = 1000;

/// What happens to an arriving packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Leaves the router at this time (ns).
    Depart(u64),
    Drop(DropCause),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropCause {
    /// The loss model dropped it.
    Loss,
    /// The queue limit was reached (drop-tail).
    Queue,
}

/// Flows remembered for jitter without reordering before stale ones are forgotten.
const FLOW_TABLE_PRUNE_AT: usize = 4096;

/// The state of one path direction.
#[derive(Debug)]
pub struct Link {
    params: LinkParams,
    loss: Loss,
    rng: Pcg64Mcg,
    /// When the emulated transmitter finishes the packets accepted so far.
    free_at: u64,
    /// Transmission end and size of every packet not yet transmitted, oldest first.
    backlog: VecDeque<(u64, u32)>,
    backlog_bytes: u64,
    /// Latest departure per flow, so jitter never lets a packet overtake its predecessor.
    flow_last: HashMap<u64, u64>,
}

impl Link {
    pub fn new(params: LinkParams, seed: u64) -> Link {
        Link {
            loss: Loss::new(params.loss),
            params,
            rng: Pcg64Mcg::seed_from_u64(seed),
            free_at: 0,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            flow_last: HashMap::new(),
        }
    }

    pub fn params(&self) -> &LinkParams {
        &self.params
    }

    /// Decides the departure time of a packet of `size` bytes of flow `flow` arriving at `now`.
    pub fn admit(&mut self, now: u64, size: u32, flow: u64) -> Verdict {
        self.expire(now);
        if self.loss.drops(&mut self.rng) {
            return Verdict::Drop(DropCause::Loss);
        }
        let transmitted = match self.params.bandwidth {
            None => now,
            Some(bits_per_s) => {
                if self.queue_full(size) {
                    return Verdict::Drop(DropCause::Queue);
                }
                let start = now.max(self.free_at);
                let end = start + transmission_ns(size, bits_per_s);
                self.free_at = end;
                self.backlog.push_back((end, size));
                self.backlog_bytes += u64::from(size);
                end
            }
        };
        Verdict::Depart(self.propagate(now, transmitted, flow))
    }

    /// Adds latency and jitter to the end of transmission.
    fn propagate(&mut self, now: u64, transmitted: u64, flow: u64) -> u64 {
        let latency = duration_ns(self.params.latency);
        let jitter = duration_ns(self.params.jitter);
        if jitter == 0 {
            return transmitted + latency;
        }
        let offset = self.rng.gen_range(0..=2 * jitter);
        let departure = (transmitted + latency + offset)
            .saturating_sub(jitter)
            .max(transmitted);
        if self.params.reorder {
            return departure;
        }
        if self.flow_last.len() >= FLOW_TABLE_PRUNE_AT {
            // A flow whose last packet has left cannot constrain a later one.
            self.flow_last.retain(|_, last| *last > now);
        }
        let last = self.flow_last.entry(flow).or_insert(0);
        let departure = departure.max(*last);
        *last = departure;
        departure
    }

    fn queue_full(&self, size: u32) -> bool {
        if self.backlog.is_empty() {
            // The transmitter is idle: the packet goes straight onto the wire.
            return false;
        }
        match self.params.queue {
            QueueLimit::Unlimited => false,
            QueueLimit::Bytes(limit) => self.backlog_bytes + u64::from(size) > limit,
            QueueLimit::Packets(limit) => self.backlog.len() as u64 >= limit,
        }
    }

    /// Forgets packets whose transmission has ended by `now`.
    fn expire(&mut self, now: u64) {
        while let Some(&(end, size)) = self.backlog.front() {
            if end > now {
                break;
            }
            self.backlog.pop_front();
            self.backlog_bytes -= u64::from(size);
        }
    }

    /// Packets and bytes waiting for (or in) transmission at `now`.
    pub fn queue_depth(&mut self, now: u64) -> (u64, u64) {
        self.expire(now);
        (self.backlog.len() as u64, self.backlog_bytes)
    }
}

/// Time to put `size` bytes on a wire of `bits_per_s`, in nanoseconds.
pub fn transmission_ns(size: u32, bits_per_s: u64) -> u64 {
    let bits = u128::from(size) * 8 * 1_000_000_000;
    (bits / u128::from(bits_per_s)) as u64
}

fn duration_ns(d: Duration) -> u64 {
    d.as_nanos().min(u128::from(u64::MAX)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    fn link(latency_ms: u64, bandwidth: Option<u64>, queue: QueueLimit) -> Link {
        Link::new(
            LinkParams {
                latency: Duration::from_millis(latency_ms),
                bandwidth,
                queue,
                ..LinkParams::default()
            },
            1,
        )
    }

    fn depart(v: Verdict) -> u64 {
        match v {
            Verdict::Depart(t) => t,
            Verdict::Drop(cause) => panic!("dropped: {cause:?}"),
        }
    }

    #[test]
    fn idle_path_adds_latency_plus_transmission_time() {
        let mut l = link(25, Some(10_000_000), QueueLimit::Unlimited);
        // 1500 B at 10 Mbit/s = 1.2 ms.
        assert_eq!(
            depart(l.admit(5 * MS, 1500, 0)),
            5 * MS + 1200 * US + 25 * MS
        );
    }

    #[test]
    fn no_bandwidth_limit_means_latency_only() {
        let mut l = link(50, None, QueueLimit::Packets(1));
        for i in 0..10 {
            assert_eq!(depart(l.admit(i, 1500, 0)), i + 50 * MS);
        }
    }

    #[test]
    fn back_to_back_packets_queue_and_leave_spaced_by_size_over_bandwidth() {
        let mut l = link(10, Some(1_000_000_000), QueueLimit::Unlimited);
        // Five 1500-byte packets arrive at once: 12 µs apart on a 1 Gbit/s wire.
        let out: Vec<u64> = (0..5).map(|_| depart(l.admit(0, 1500, 0))).collect();
        for (i, t) in out.iter().enumerate() {
            assert_eq!(*t, (i as u64 + 1) * 12 * US + 10 * MS);
        }
        assert_eq!(l.queue_depth(0), (5, 7500));
        assert_eq!(l.queue_depth(24 * US), (3, 4500));
    }

    #[test]
    fn arrival_spacing_is_kept_when_slower_than_the_path() {
        let mut l = link(1, Some(10_000_000), QueueLimit::Unlimited);
        // 100-byte packets every 1 ms on a path that needs 80 µs each: no queueing.
        let out: Vec<u64> = (0..4).map(|i| depart(l.admit(i * MS, 100, 0))).collect();
        assert!(out.windows(2).all(|w| w[1] - w[0] == MS));
    }

    #[test]
    fn queue_limit_in_packets_drops_tail_and_recovers() {
        let mut l = link(0, Some(1_000_000), QueueLimit::Packets(3));
        let verdicts: Vec<Verdict> = (0..5).map(|_| l.admit(0, 1000, 0)).collect();
        assert!(matches!(verdicts[2], Verdict::Depart(_)));
        assert_eq!(verdicts[3], Verdict::Drop(DropCause::Queue));
        assert_eq!(verdicts[4], Verdict::Drop(DropCause::Queue));
        // 1000 B at 1 Mbit/s = 8 ms: after the first has gone there is room again.
        assert!(matches!(l.admit(8 * MS, 1000, 0), Verdict::Depart(_)));
        assert_eq!(l.admit(8 * MS, 1000, 0), Verdict::Drop(DropCause::Queue));
    }

    #[test]
    fn queue_limit_in_bytes() {
        let mut l = link(0, Some(1_000_000), QueueLimit::Bytes(2500));
        assert!(matches!(l.admit(0, 1000, 0), Verdict::Depart(_)));
        assert!(matches!(l.admit(0, 1000, 0), Verdict::Depart(_)));
        assert_eq!(l.admit(0, 1000, 0), Verdict::Drop(DropCause::Queue));
        assert!(matches!(l.admit(0, 500, 0), Verdict::Depart(_)));
        // A packet larger than the limit still passes an idle transmitter.
        let mut idle = link(0, Some(1_000_000), QueueLimit::Bytes(100));
        assert!(matches!(idle.admit(0, 1500, 0), Verdict::Depart(_)));
    }

    #[test]
    fn bernoulli_loss_counts_as_loss_not_queue() {
        let mut l = Link::new(
            LinkParams {
                loss: LossModel::Bernoulli(0.5),
                ..LinkParams::default()
            },
            3,
        );
        let lost = (0..10_000)
            .filter(|&i| l.admit(i, 100, 0) == Verdict::Drop(DropCause::Loss))
            .count();
        assert!((4_500..5_500).contains(&lost), "{lost}");
    }

    fn jittery(reorder: bool) -> Link {
        Link::new(
            LinkParams {
                latency: Duration::from_millis(10),
                jitter: Duration::from_millis(5),
                reorder,
                ..LinkParams::default()
            },
            9,
        )
    }

    #[test]
    fn jitter_spreads_delay_within_its_bounds() {
        // Packets 20 ms apart, more than the jitter's span: each gets its own offset.
        let mut l = jittery(false);
        let delays: Vec<u64> = (0..2000)
            .map(|i| depart(l.admit(i * 20 * MS, 100, 42)) - i * 20 * MS)
            .collect();
        assert!(delays.iter().all(|&d| (5 * MS..=15 * MS).contains(&d)));
        assert!(delays.iter().any(|&d| d < 6 * MS) && delays.iter().any(|&d| d > 14 * MS));
    }

    #[test]
    fn jitter_never_reorders_a_flow() {
        // Packets 100 µs apart with ±5 ms jitter would overtake each other without the rule.
        let mut l = jittery(false);
        let out: Vec<u64> = (0..2000)
            .map(|i| depart(l.admit(i * 100 * US, 100, 42)))
            .collect();
        assert!(out.windows(2).all(|w| w[1] >= w[0]));
        assert!(out
            .iter()
            .enumerate()
            .all(|(i, &t)| t >= i as u64 * 100 * US + 5 * MS));
    }

    #[test]
    fn jitter_reorders_when_asked() {
        let mut l = jittery(true);
        let out: Vec<u64> = (0..2000)
            .map(|i| depart(l.admit(i * 100 * US, 100, 42)))
            .collect();
        assert!(out.windows(2).any(|w| w[1] < w[0]));
    }

    #[test]
    fn jitter_lets_other_flows_pass() {
        // Ordering is per flow: a packet of another flow may leave before a delayed one.
        let mut l = jittery(false);
        let mut passed = false;
        for i in 0..2000u64 {
            let a = depart(l.admit(i * 200 * US, 100, 1));
            let b = depart(l.admit(i * 200 * US + 1, 100, 2));
            passed |= b < a;
        }
        assert!(passed);
    }

    #[test]
    fn transmission_times() {
        assert_eq!(transmission_ns(1500, 1_000_000_000), 12_000);
        assert_eq!(transmission_ns(64, 1_000_000_000), 512);
        assert_eq!(transmission_ns(1500, 56_000), 214_285_714);
    }
}
