use crate::Time;

/// When a job submitted to an FCFS server starts and finishes service.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slot {
    pub start: Time,
    pub finish: Time,
}

impl Slot {
    /// Time spent waiting in the queue before service began.
    pub fn wait(&self, arrived: Time) -> f64 {
        self.start - arrived
    }
}

/// A single first-come-first-served server (a disk arm, a NIC's transmit queue).
///
/// FCFS is work-conserving and non-preemptive, so a job's finish time is fixed the moment it
/// arrives: it is simply `max(now, busy_until) + service`. That is why this needs no event loop:
/// the caller learns the completion time from [`Fcfs::submit`] and waits for it.
#[derive(Debug, Clone, Default)]
pub struct Fcfs {
    busy_until: Time,
    scheduled_service: f64,
    submitted: u64,
}

impl Fcfs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queue a job needing `service` seconds, arriving at `now`.
    pub fn submit(&mut self, now: Time, service: f64) -> Slot {
        let service = service.max(0.0);
        let start = self.busy_until.max(now);
        let finish = start + service;
        self.busy_until = finish;
        self.scheduled_service += service;
        self.submitted += 1;
        Slot { start, finish }
    }

    /// When the queue will be empty if nothing more arrives.
    pub fn busy_until(&self) -> Time {
        self.busy_until
    }

    /// Unfinished work at `now` (queued plus the rest of the job in service).
    pub fn backlog(&self, now: Time) -> f64 {
        (self.busy_until - now).max(0.0)
    }

    /// Busy seconds in `[0, now]`. Because the server works without pause while it has a backlog,
    /// the work still ahead of `now` is exactly `busy_until - now`, and everything else scheduled
    /// has already been served. Valid for any `now` at or after the latest submission.
    pub fn busy_seconds(&self, now: Time) -> f64 {
        self.scheduled_service - self.backlog(now)
    }

    pub fn submitted(&self) -> u64 {
        self.submitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_queue_in_order() {
        let mut s = Fcfs::new();
        let a = s.submit(0.0, 0.1);
        let b = s.submit(0.0, 0.1);
        assert_eq!(
            a,
            Slot {
                start: 0.0,
                finish: 0.1
            }
        );
        assert_eq!(
            b,
            Slot {
                start: 0.1,
                finish: 0.2
            }
        );
        assert!((b.wait(0.0) - 0.1).abs() < 1e-12);
    }

    #[test]
    fn idle_gap_is_not_busy() {
        let mut s = Fcfs::new();
        s.submit(0.0, 0.1);
        assert!((s.busy_seconds(0.05) - 0.05).abs() < 1e-12);
        assert!((s.busy_seconds(0.5) - 0.1).abs() < 1e-12);
        s.submit(1.0, 0.2);
        assert!((s.busy_seconds(1.1) - 0.2).abs() < 1e-12);
        assert!((s.busy_seconds(5.0) - 0.3).abs() < 1e-12);
    }
}
