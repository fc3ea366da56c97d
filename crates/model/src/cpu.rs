use crate::{Time, EPSILON};

/// Caller-chosen identity of a job in the CPU model.
pub type JobId = u64;

/// A job that finished, and the exact model time at which it did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Completion {
    pub id: JobId,
    pub at: Time,
}

#[derive(Debug, Clone)]
struct Job {
    id: JobId,
    /// Remaining work, in seconds of one core at speed 1.
    remaining: f64,
}

/// A CPU with `cores` identical cores under egalitarian processor sharing.
///
/// With `n` jobs present each progresses at `speed · min(1, cores / n)`: up to `cores` jobs run at
/// full speed, beyond that the cores are shared equally. This is the textbook M/G/c-PS server and
/// the usual model of a time-sliced Unix scheduler running CPU-bound CGI processes.
///
/// Driving it: call [`CpuPs::arrive`] when a job comes, ask [`CpuPs::next_completion`] when the
/// next one will finish if nothing else arrives, and call [`CpuPs::advance`] to move time forward;
/// `advance` returns every job that finished on the way with its exact completion time, even if
/// the caller woke up late.
#[derive(Debug, Clone)]
pub struct CpuPs {
    cores: u32,
    speed: f64,
    now: Time,
    jobs: Vec<Job>,
    /// Integral of min(n, cores) over time: busy core-seconds.
    busy_core_seconds: f64,
    completed: u64,
}

impl CpuPs {
    /// `cores` is clamped to at least 1; `speed` must be positive.
    pub fn new(cores: u32, speed: f64) -> Self {
        assert!(
            speed > 0.0 && speed.is_finite(),
            "cpu speed must be positive"
        );
        CpuPs {
            cores: cores.max(1),
            speed,
            now: 0.0,
            jobs: Vec::new(),
            busy_core_seconds: 0.0,
            completed: 0,
        }
    }

    pub fn cores(&self) -> u32 {
        self.cores
    }

    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// Jobs currently in service.
    pub fn active(&self) -> usize {
        self.jobs.len()
    }

    pub fn completed(&self) -> u64 {
        self.completed
    }

    /// The model's own notion of "now": the last time it was advanced to.
    pub fn now(&self) -> Time {
        self.now
    }

    fn rate(&self) -> f64 {
        let n = self.jobs.len() as f64;
        self.speed * (self.cores as f64 / n).min(1.0)
    }

    fn busy_cores(&self) -> f64 {
        (self.jobs.len() as f64).min(self.cores as f64)
    }

    /// Add a job needing `work` seconds of one core at speed 1. Time is first advanced to `now`,
    /// and any jobs that completed before `now` are returned.
    pub fn arrive(&mut self, now: Time, id: JobId, work: f64) -> Vec<Completion> {
        let mut done = self.advance(now);
        if work <= EPSILON {
            // A zero-work job finishes on arrival; it must not perturb the sharing.
            self.completed += 1;
            done.push(Completion { id, at: self.now });
        } else {
            self.jobs.push(Job {
                id,
                remaining: work,
            });
        }
        done
    }

    /// Remove a job before it finishes (e.g. the client went away). Returns whether it was there.
    pub fn cancel(&mut self, now: Time, id: JobId) -> (bool, Vec<Completion>) {
        let done = self.advance(now);
        let before = self.jobs.len();
        self.jobs.retain(|j| j.id != id);
        (self.jobs.len() != before, done)
    }

    /// When the next job will complete if no other job arrives, or `None` when idle.
    pub fn next_completion(&self) -> Option<Time> {
        let min = self
            .jobs
            .iter()
            .map(|j| j.remaining)
            .fold(f64::INFINITY, f64::min);
        if min.is_finite() {
            Some(self.now + min / self.rate())
        } else {
            None
        }
    }

    /// Move model time forward to `to`, returning the jobs that completed in `(now, to]` in
    /// completion order. A `to` earlier than the model's time is treated as "no time passed".
    pub fn advance(&mut self, to: Time) -> Vec<Completion> {
        let mut done = Vec::new();
        while self.now < to {
            if self.jobs.is_empty() {
                self.now = to;
                break;
            }
            let rate = self.rate();
            let min = self
                .jobs
                .iter()
                .map(|j| j.remaining)
                .fold(f64::INFINITY, f64::min);
            let t_next = self.now + min / rate;
            let (step_end, progress) = if t_next <= to {
                (t_next, min)
            } else {
                (to, (to - self.now) * rate)
            };
            self.busy_core_seconds += self.busy_cores() * (step_end - self.now);
            for j in &mut self.jobs {
                j.remaining -= progress;
            }
            self.now = step_end;
            if t_next <= to {
                let at = self.now;
                let mut i = 0;
                while i < self.jobs.len() {
                    if self.jobs[i].remaining <= EPSILON * 1e3 {
                        let job = self.jobs.remove(i);
                        self.completed += 1;
                        done.push(Completion { id: job.id, at });
                    } else {
                        i += 1;
                    }
                }
            }
        }
        done
    }

    /// Busy core-seconds up to the model's current time. Utilisation over an interval is the
    /// difference of two readings divided by `cores × interval`.
    pub fn busy_core_seconds(&self) -> f64 {
        self.busy_core_seconds
    }

    /// Fraction of total core capacity used between time 0 and the model's current time.
    pub fn utilisation_since_start(&self) -> f64 {
        if self.now <= 0.0 {
            0.0
        } else {
            self.busy_core_seconds / (self.cores as f64 * self.now)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn one_job_alone_takes_its_work() {
        let mut cpu = CpuPs::new(1, 1.0);
        assert!(cpu.arrive(0.0, 1, 0.1).is_empty());
        assert!(close(cpu.next_completion().unwrap(), 0.1));
        let done = cpu.advance(1.0);
        assert_eq!(done.len(), 1);
        assert!(close(done[0].at, 0.1));
        assert!(close(cpu.busy_core_seconds(), 0.1));
        assert!(close(cpu.utilisation_since_start(), 0.1));
    }

    #[test]
    fn two_jobs_share_one_core() {
        let mut cpu = CpuPs::new(1, 1.0);
        cpu.arrive(0.0, 1, 0.1);
        cpu.arrive(0.0, 2, 0.1);
        let done = cpu.advance(10.0);
        assert_eq!(done.len(), 2);
        assert!(close(done[0].at, 0.2) && close(done[1].at, 0.2));
    }

    #[test]
    fn two_jobs_on_two_cores_do_not_interfere() {
        let mut cpu = CpuPs::new(2, 1.0);
        cpu.arrive(0.0, 1, 0.1);
        cpu.arrive(0.0, 2, 0.1);
        let done = cpu.advance(10.0);
        assert!(close(done[0].at, 0.1) && close(done[1].at, 0.1));
        assert!(close(cpu.busy_core_seconds(), 0.2));
    }

    #[test]
    fn late_arrival_slows_the_first_job() {
        // Job 1 runs alone for 50 ms (half done), then shares: its remaining 50 ms of work takes
        // 100 ms, so it ends at 150 ms; job 2 then has 50 ms left alone, ending at 200 ms.
        let mut cpu = CpuPs::new(1, 1.0);
        cpu.arrive(0.0, 1, 0.1);
        cpu.arrive(0.05, 2, 0.1);
        let done = cpu.advance(1.0);
        assert_eq!(done[0].id, 1);
        assert!(close(done[0].at, 0.15));
        assert_eq!(done[1].id, 2);
        assert!(close(done[1].at, 0.2));
    }

    #[test]
    fn half_speed_doubles_times() {
        let mut cpu = CpuPs::new(1, 0.5);
        cpu.arrive(0.0, 1, 0.04);
        let done = cpu.advance(1.0);
        assert!(close(done[0].at, 0.08));
    }

    #[test]
    fn late_wakeup_still_reports_exact_times() {
        let mut cpu = CpuPs::new(1, 1.0);
        cpu.arrive(0.0, 1, 0.01);
        cpu.arrive(0.0, 2, 0.03);
        // One advance far past both completions must replay the rate change at t = 0.02.
        let done = cpu.advance(5.0);
        assert!(close(done[0].at, 0.02));
        assert!(close(done[1].at, 0.04));
    }

    #[test]
    fn cancel_removes_a_job() {
        let mut cpu = CpuPs::new(1, 1.0);
        cpu.arrive(0.0, 1, 0.1);
        cpu.arrive(0.0, 2, 0.1);
        let (found, _) = cpu.cancel(0.05, 2);
        assert!(found);
        let done = cpu.advance(1.0);
        // 25 ms of work done while shared, the remaining 75 ms alone.
        assert!(close(done[0].at, 0.125));
    }

    #[test]
    fn zero_work_completes_immediately() {
        let mut cpu = CpuPs::new(1, 1.0);
        let done = cpu.arrive(0.3, 9, 0.0);
        assert_eq!(done, vec![Completion { id: 9, at: 0.3 }]);
        assert_eq!(cpu.active(), 0);
    }
}
