use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::{Time, EPSILON};

/// Caller-chosen identity of a job in the CPU model.
pub type JobId = u64;

/// A job that finished, and the exact model time at which it did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Completion {
    pub id: JobId,
    pub at: Time,
}

/// A job in service, keyed by its virtual finishing tag.
#[derive(Debug, Clone, Copy)]
struct Job {
    /// The virtual time (attained service per job, see [`CpuPs`]) at which this job is done:
    /// the virtual time at its arrival plus its work.
    finish: f64,
    /// Arrival order, so jobs with equal tags complete in the order they came.
    seq: u64,
    id: JobId,
}

impl PartialEq for Job {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Job {}
impl PartialOrd for Job {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Job {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: `BinaryHeap` is a max-heap and the smallest tag must be on top.
        other
            .finish
            .total_cmp(&self.finish)
            .then(other.seq.cmp(&self.seq))
    }
}

/// Jobs whose remaining work is at most this (seconds at speed 1) when another job completes
/// complete with it, so equal jobs finish together and float rounding leaves no sliver of work.
const COMPLETION_SLACK: f64 = EPSILON * 1e3;

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
///
/// Implementation: since every job present progresses at the same rate, one *virtual clock* — the
/// service each job present has attained since the CPU was last idle — describes them all. A job
/// arriving with work `w` when the virtual clock reads `v` is done when it reads `v + w`, its
/// finishing tag, and the tags never change while the job waits. So jobs sit in a min-heap by
/// tag; the next completion is the smallest tag, and arrivals, completions and `next_completion`
/// cost O(log n) or less instead of a walk over every job. The virtual clock restarts at 0 each
/// time the CPU goes idle, which keeps the tags small and their rounding error tiny.
#[derive(Debug, Clone)]
pub struct CpuPs {
    cores: u32,
    speed: f64,
    now: Time,
    /// Service attained by every job present (seconds of one core at speed 1).
    virtual_now: f64,
    jobs: BinaryHeap<Job>,
    seq: u64,
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
            virtual_now: 0.0,
            jobs: BinaryHeap::new(),
            seq: 0,
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

    /// Rate at which each job present progresses (virtual seconds per second).
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
        self.arrive_now(id, work, &mut done);
        done
    }

    /// [`CpuPs::arrive`] without allocating: completions (those before `now`, then a zero-work
    /// job's own) are appended to `done`.
    pub fn arrive_into(&mut self, now: Time, id: JobId, work: f64, done: &mut Vec<Completion>) {
        self.advance_into(now, done);
        self.arrive_now(id, work, done);
    }

    fn arrive_now(&mut self, id: JobId, work: f64, done: &mut Vec<Completion>) {
        if work <= EPSILON {
            // A zero-work job finishes on arrival; it must not perturb the sharing.
            self.completed += 1;
            done.push(Completion { id, at: self.now });
        } else {
            self.seq += 1;
            self.jobs.push(Job {
                finish: self.virtual_now + work,
                seq: self.seq,
                id,
            });
        }
    }

    /// Remove a job before it finishes (e.g. the client went away). Returns whether it was there.
    /// This walks the jobs (O(n)); it is for the rare abandoned request, not the common path.
    pub fn cancel(&mut self, now: Time, id: JobId) -> (bool, Vec<Completion>) {
        let done = self.advance(now);
        let before = self.jobs.len();
        self.jobs.retain(|j| j.id != id);
        if self.jobs.is_empty() {
            self.virtual_now = 0.0;
        }
        (self.jobs.len() != before, done)
    }

    /// When the next job will complete if no other job arrives, or `None` when idle.
    pub fn next_completion(&self) -> Option<Time> {
        let first = self.jobs.peek()?;
        Some(self.now + (first.finish - self.virtual_now).max(0.0) / self.rate())
    }

    /// Move model time forward to `to`, returning the jobs that completed in `(now, to]` in
    /// completion order. A `to` earlier than the model's time is treated as "no time passed".
    pub fn advance(&mut self, to: Time) -> Vec<Completion> {
        let mut done = Vec::new();
        self.advance_into(to, &mut done);
        done
    }

    /// [`CpuPs::advance`] without allocating: completions are appended to `done`.
    pub fn advance_into(&mut self, to: Time, done: &mut Vec<Completion>) {
        while self.now < to {
            let Some(first) = self.jobs.peek() else {
                self.now = to;
                break;
            };
            let rate = self.rate();
            let left = (first.finish - self.virtual_now).max(0.0);
            let t_next = self.now + left / rate;
            if t_next > to {
                self.busy_core_seconds += self.busy_cores() * (to - self.now);
                self.virtual_now += (to - self.now) * rate;
                self.now = to;
                break;
            }
            self.busy_core_seconds += self.busy_cores() * (t_next - self.now);
            self.virtual_now += left;
            self.now = t_next;
            let at = self.now;
            while let Some(j) = self.jobs.peek() {
                if j.finish - self.virtual_now > COMPLETION_SLACK {
                    break;
                }
                let id = j.id;
                self.jobs.pop();
                self.completed += 1;
                done.push(Completion { id, at });
            }
            if self.jobs.is_empty() {
                self.virtual_now = 0.0;
            }
        }
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

    /// The scan-every-job algorithm this model used before its virtual clock: the reference the
    /// heap must agree with.
    fn reference(cores: u32, arrivals: &[(f64, u64, f64)], end: f64) -> Vec<Completion> {
        let mut jobs: Vec<(u64, f64)> = Vec::new();
        let mut now = 0.0;
        let mut done = Vec::new();
        let mut step_to = |to: f64, jobs: &mut Vec<(u64, f64)>, now: &mut f64| {
            while *now < to && !jobs.is_empty() {
                let rate = (cores as f64 / jobs.len() as f64).min(1.0);
                let min = jobs.iter().map(|j| j.1).fold(f64::INFINITY, f64::min);
                let t_next = *now + min / rate;
                if t_next > to {
                    for j in jobs.iter_mut() {
                        j.1 -= (to - *now) * rate;
                    }
                    break;
                }
                for j in jobs.iter_mut() {
                    j.1 -= min;
                }
                *now = t_next;
                jobs.retain(|j| {
                    if j.1 <= 1e-9 {
                        done.push(Completion {
                            id: j.0,
                            at: t_next,
                        });
                        false
                    } else {
                        true
                    }
                });
            }
            *now = to;
        };
        for &(at, id, work) in arrivals {
            step_to(at, &mut jobs, &mut now);
            jobs.push((id, work));
        }
        step_to(end, &mut jobs, &mut now);
        done
    }

    #[test]
    fn heap_agrees_with_scanning_every_job() {
        // A deterministic pseudo-random stream of arrivals, heavy enough to queue dozens of jobs.
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        for cores in [1, 2, 4] {
            let mut t = 0.0;
            let arrivals: Vec<(f64, u64, f64)> = (0..3000)
                .map(|i| {
                    t += -0.01 * (1.0 - next()).ln();
                    (t, i, -0.009 * cores as f64 * (1.0 - next()).ln())
                })
                .collect();
            let want = reference(cores, &arrivals, t + 100.0);
            let mut cpu = CpuPs::new(cores, 1.0);
            let mut got = Vec::new();
            for &(at, id, work) in &arrivals {
                cpu.arrive_into(at, id, work, &mut got);
            }
            cpu.advance_into(t + 100.0, &mut got);
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.id, w.id);
                assert!((g.at - w.at).abs() < 1e-9, "{g:?} vs {w:?}");
            }
        }
    }

    #[test]
    fn zero_work_completes_immediately() {
        let mut cpu = CpuPs::new(1, 1.0);
        let done = cpu.arrive(0.3, 9, 0.0);
        assert_eq!(done, vec![Completion { id: 9, at: 0.3 }]);
        assert_eq!(cpu.active(), 0);
    }
}
