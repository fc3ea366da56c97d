//! Waiting for the next departure without a periodic tick and without a busy-poll thread.
//!
//! The paper's router polled continuously because a 10 ms clock tick would send every packet
//! due in the tick as one burst. Polling would cost a whole core here, so the router sleeps in
//! `ppoll` (a high-resolution timer, with the thread's timer slack set to 1 ns) until a *lead*
//! before the departure, then spins on the clock — still watching its devices — for the rest.
//! The lead follows the measured wake-up lateness: it is the 95th percentile of the last
//! [`WINDOW`] timed wake-ups, so on a quiet machine the router spins a few microseconds and on a
//! loaded one it wakes earlier instead of sending late.
//!
//! Spinning is paid for in CPU. When the router thread has used more than [`BUSY_SHARE`] of a
//! core over the last interval, the spin is cut to the minimum lead until its share falls below
//! [`CALM_SHARE`]: departures may then be a timer wake-up late, but the CPU goes to the
//! programs the router serves, and a real-time router never runs into the kernel's real-time
//! throttling (which would stop it for 50 ms of every second).

use std::io;
use std::os::fd::RawFd;

use hdrhistogram::Histogram;

/// Nanoseconds on CLOCK_MONOTONIC.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into `ts`, which is valid and writable.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Share of a core above which the router stops spinning before departures.
pub const BUSY_SHARE: f64 = 0.8;
/// Share of a core below which it spins again.
pub const CALM_SHARE: f64 = 0.6;

/// Wake-ups between recomputations of the lead.
pub const WINDOW: usize = 256;

/// The adaptive lead: pure, fed with measured lateness.
#[derive(Debug)]
pub struct Lead {
    window: Vec<u64>,
    lead: u64,
    /// The spin is cut to `min` while the router is busy.
    busy: bool,
    busy_intervals: u64,
    min: u64,
    max: u64,
    all: Histogram<u64>,
}

impl Lead {
    pub fn new(initial: u64, min: u64, max: u64) -> Lead {
        Lead {
            window: Vec::with_capacity(WINDOW),
            lead: initial.clamp(min, max),
            busy: false,
            busy_intervals: 0,
            min,
            max,
            all: Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("static bounds"),
        }
    }

    /// Records how late (ns) a timed wake-up came after its target.
    pub fn record(&mut self, lateness: u64) {
        self.all.saturating_record(lateness.max(1));
        self.window.push(lateness);
        if self.window.len() == WINDOW {
            self.window.sort_unstable();
            let p95 = self.window[WINDOW * 95 / 100];
            self.lead = (p95 + 1_000).clamp(self.min, self.max);
            self.window.clear();
        }
    }

    pub fn lead(&self) -> u64 {
        if self.busy {
            self.min
        } else {
            self.lead
        }
    }

    /// Tells the lead what share of a core the router used over the last interval.
    pub fn cpu_share(&mut self, share: f64) {
        if share > BUSY_SHARE {
            self.busy = true;
        } else if share < CALM_SHARE {
            self.busy = false;
        }
        self.busy_intervals += u64::from(self.busy);
    }

    /// Intervals in which the spin was cut because the router was busy.
    pub fn busy_intervals(&self) -> u64 {
        self.busy_intervals
    }

    pub fn wakeups(&self) -> u64 {
        self.all.len()
    }

    pub fn lateness_quantile(&self, q: f64) -> u64 {
        self.all.value_at_quantile(q)
    }
}

/// Why [`Pacer::wait`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woke {
    /// A device has packets to read.
    Readable,
    /// The deadline has come.
    Due,
    /// Nothing is due; the idle wait ended (time to check for stop and publish stats).
    Idle,
}

/// Sleeps until a deadline or until a device becomes readable.
#[derive(Debug)]
pub struct Pacer {
    pub lead: Lead,
    fds: Vec<libc::pollfd>,
}

/// Longest sleep when nothing is due, so the router notices a stop request.
const IDLE_NS: u64 = 50_000_000;

impl Pacer {
    pub fn new(fds: &[RawFd], lead: Lead) -> Pacer {
        let fds = fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        Pacer { lead, fds }
    }

    /// Waits for `deadline` (ns, CLOCK_MONOTONIC) or readable devices, whichever is first.
    pub fn wait(&mut self, deadline: Option<u64>) -> io::Result<Woke> {
        let now = now_ns();
        let Some(deadline) = deadline else {
            return Ok(if self.poll(IDLE_NS)? {
                Woke::Readable
            } else {
                Woke::Idle
            });
        };
        if deadline <= now {
            return Ok(Woke::Due);
        }
        let wake = deadline.saturating_sub(self.lead.lead());
        if wake > now {
            if self.poll((wake - now).min(IDLE_NS))? {
                return Ok(Woke::Readable);
            }
            let woke = now_ns();
            if wake - now < IDLE_NS {
                self.lead.record(woke.saturating_sub(wake));
            }
            if woke < wake {
                return Ok(Woke::Idle);
            }
        }
        // The last stretch: spin on the clock, still noticing arrivals.
        while now_ns() < deadline {
            if self.poll(0)? {
                return Ok(Woke::Readable);
            }
            std::hint::spin_loop();
        }
        Ok(Woke::Due)
    }

    /// ppoll for `timeout` ns; true when a device is readable.
    fn poll(&mut self, timeout: u64) -> io::Result<bool> {
        let ts = libc::timespec {
            tv_sec: (timeout / 1_000_000_000) as libc::time_t,
            tv_nsec: (timeout % 1_000_000_000) as libc::c_long,
        };
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs and `ts` a valid timespec,
        // both live for the call; a null signal mask leaves the thread's mask unchanged.
        let n = unsafe {
            libc::ppoll(
                self.fds.as_mut_ptr(),
                self.fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::Interrupted => Ok(false),
                _ => Err(e),
            };
        }
        Ok(n > 0)
    }
}

/// Makes the calling thread's timers precise (1 ns slack instead of 50 µs) and, when allowed,
/// real-time (SCHED_FIFO), so a wake-up is not queued behind other processes' time slices.
/// Returns whether real-time scheduling was granted.
pub fn tune_router_thread(realtime: bool) -> bool {
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes integer arguments and affects only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    if !realtime {
        return false;
    }
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// CPU time (user + system) the calling thread has used, in seconds.
pub fn thread_cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is a valid value; getrusage fills it and keeps no pointer.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `usage` is valid and writable for the call.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lead_follows_the_95th_percentile_of_lateness() {
        let mut lead = Lead::new(50_000, 1_000, 200_000);
        assert_eq!(lead.lead(), 50_000);
        // 95 % of wake-ups 5 µs late, 5 % 80 µs late: the lead covers the 95th percentile.
        for i in 0..WINDOW {
            lead.record(if i % 20 == 0 { 80_000 } else { 5_000 });
        }
        assert!((5_000..=82_000).contains(&lead.lead()), "{}", lead.lead());
        for _ in 0..WINDOW {
            lead.record(3_000);
        }
        assert_eq!(lead.lead(), 4_000);
    }

    #[test]
    fn a_busy_router_stops_spinning_until_it_calms_down() {
        let mut lead = Lead::new(30_000, 1_000, 200_000);
        lead.cpu_share(0.5);
        assert_eq!(lead.lead(), 30_000);
        lead.cpu_share(0.9);
        assert_eq!(lead.lead(), 1_000);
        lead.cpu_share(0.7);
        assert_eq!(
            lead.lead(),
            1_000,
            "hysteresis: still busy between the thresholds"
        );
        lead.cpu_share(0.5);
        assert_eq!(lead.lead(), 30_000);
        assert_eq!(lead.busy_intervals(), 2);
    }

    #[test]
    fn lead_is_clamped() {
        let mut lead = Lead::new(10, 2_000, 100_000);
        assert_eq!(lead.lead(), 2_000);
        for _ in 0..WINDOW {
            lead.record(5_000_000);
        }
        assert_eq!(lead.lead(), 100_000);
    }
}
