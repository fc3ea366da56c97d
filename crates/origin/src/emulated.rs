//! Emulated resources: the node's CPU, disk, NIC and memory cache are `capstan-model` models run
//! in wall-clock time. A request "uses" a resource by joining the model's queue and sleeping
//! until the model says it is done, so the response time is the modelled one while the host's
//! real CPU barely notices.
//!
//! Two things keep the modelled times accurate when many nodes share a small machine:
//!
//! - A request's stages are chained in *model* time: each stage (disk, CPU, NIC) arrives at the
//!   model time at which the previous one finished, not at the (later) wall-clock moment its
//!   task woke up, so wake-up delays do not add up over stages; only the last wake-up is late.
//! - Waits end on a [`PreciseTimer`] (a thread blocked in a futex with a timeout, which Linux
//!   serves from high-resolution timers) instead of tokio's timer wheel, which rounds every
//!   deadline up to the next whole millisecond.
//! - Waits are set a little ahead of their deadlines, by a lead that tracks the median lateness
//!   of recent wake-ups (a step up for every late wake-up, a step down for every early one), so
//!   that on a busy machine, where a woken thread waits for a core, the median wait still ends
//!   on its deadline rather than a scheduling delay after it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use capstan_core::report::{CacheReport, TimerReport};
use capstan_model::{Completion, CpuPs, Disk, Fcfs, JobId, LruBytes, Nic, NodeParams};
use tokio::sync::{oneshot, Notify};

use crate::load::Busy;

struct State {
    cpu: CpuPs,
    disk: Disk,
    nic: Nic,
    /// This node's path to the other nodes' disks (NFS over the interconnect), FCFS: reads of
    /// files another node holds (`--partition`) queue here instead of at the local disk.
    remote: Fcfs,
    /// The cores as `cores` first-come-first-served servers fed by one queue, for demands that
    /// ask for that discipline instead of processor sharing (`/cgi-bin/demand.cgi?queue=fcfs`:
    /// M/M/c). A job goes to the core that frees up first, which with service times known on
    /// arrival is exactly one central FCFS queue.
    cores_fcfs: Vec<Fcfs>,
    cache: LruBytes,
    /// The cache's capacity with nothing else taking memory; processes take from it.
    cache_configured: u64,
    /// CPU jobs in service; told the model time at which they completed.
    waiters: HashMap<JobId, oneshot::Sender<f64>>,
    next_id: JobId,
}

impl State {
    fn wake(&mut self, done: Vec<Completion>) {
        for c in done {
            if let Some(tx) = self.waiters.remove(&c.id) {
                let _ = tx.send(c.at);
            }
        }
    }
}

pub struct Emulated {
    start: Instant,
    cores: u32,
    speed: f64,
    state: Mutex<State>,
    /// Wakes the CPU driver when a job arrives, since that moves the next completion.
    notify: Notify,
    timer: PreciseTimer,
    /// Waits that slept, and their total and largest lateness past the modelled deadline.
    waits: AtomicU64,
    late_ns: AtomicU64,
    late_max_ns: AtomicU64,
    /// Waits that ended before their deadline (the lead overshot).
    early: AtomicU64,
    /// How far ahead of its deadline a wait is set, in ns (see the module's notes).
    lead_ns: AtomicU64,
}

/// The lead moves by this much per wake-up: a few hundred wake-ups settle it, and its jitter
/// around the median is a few microseconds.
const LEAD_STEP_NS: u64 = 4_000;
/// Beyond this, lateness is a stall (the node's threads got no core for a while), not the
/// steady wake-up cost the lead is for.
const LEAD_MAX_NS: u64 = 2_000_000;

/// Cancels a CPU job whose request went away before it finished, so abandoned work stops
/// slowing down the jobs that are still wanted.
struct CpuJobGuard<'a> {
    emu: &'a Emulated,
    id: JobId,
    armed: bool,
}

impl Drop for CpuJobGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let now = self.emu.now();
            let mut st = self.emu.lock();
            st.waiters.remove(&self.id);
            let (_, done) = st.cpu.cancel(now, self.id);
            st.wake(done);
            drop(st);
            self.emu.notify.notify_one();
        }
    }
}

impl Emulated {
    pub fn new(params: &NodeParams, tree_bytes: u64) -> Arc<Self> {
        let emu = Arc::new(Emulated {
            start: Instant::now(),
            cores: params.cores,
            speed: params.speed,
            state: Mutex::new(State {
                cpu: CpuPs::new(params.cores, params.speed),
                disk: Disk::new(params.disk, params.speed),
                nic: Nic::new(params.nic),
                remote: Fcfs::new(),
                cores_fcfs: vec![Fcfs::new(); params.cores.max(1) as usize],
                cache: LruBytes::new(params.cache_bytes(tree_bytes)),
                cache_configured: params.cache_bytes(tree_bytes),
                waiters: HashMap::new(),
                next_id: 0,
            }),
            notify: Notify::new(),
            timer: PreciseTimer::new(),
            waits: AtomicU64::new(0),
            late_ns: AtomicU64::new(0),
            late_max_ns: AtomicU64::new(0),
            early: AtomicU64::new(0),
            lead_ns: AtomicU64::new(0),
        });
        tokio::spawn(cpu_driver(Arc::downgrade(&emu)));
        emu
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the models half-updated in a way that
        // matters more than stopping the node would, so keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Model time: seconds since the node started.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn at(&self, t: f64) -> Instant {
        self.start + Duration::from_secs_f64(t.max(0.0))
    }

    /// Wait until model time `t`.
    pub async fn sleep_until(&self, t: f64) {
        let deadline = self.at(t);
        let lead = Duration::from_nanos(self.lead_ns.load(Ordering::Relaxed));
        let wake_at = deadline.checked_sub(lead).unwrap_or(deadline);
        if self.timer.sleep_until(wake_at).await {
            let now = Instant::now();
            let late = now.saturating_duration_since(deadline).as_nanos() as u64;
            self.late_ns.fetch_add(late, Ordering::Relaxed);
            self.late_max_ns.fetch_max(late, Ordering::Relaxed);
            self.waits.fetch_add(1, Ordering::Relaxed);
            if now < deadline {
                self.early.fetch_add(1, Ordering::Relaxed);
            }
            self.adjust_lead(now > deadline);
        }
    }

    /// One step of the median-tracking lead: up after a late wake-up, down after an early one.
    fn adjust_lead(&self, was_late: bool) {
        let _ = self
            .lead_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |lead| {
                Some(if was_late {
                    (lead + LEAD_STEP_NS).min(LEAD_MAX_NS)
                } else {
                    lead.saturating_sub(LEAD_STEP_NS)
                })
            });
    }

    /// How waits ended against their modelled deadlines since start.
    pub fn lateness(&self) -> TimerReport {
        let waits = self.waits.load(Ordering::Relaxed);
        let sum = self.late_ns.load(Ordering::Relaxed) as f64;
        TimerReport {
            waits,
            mean_late_us: if waits > 0 {
                sum / waits as f64 / 1e3
            } else {
                0.0
            },
            max_late_us: self.late_max_ns.load(Ordering::Relaxed) as f64 / 1e3,
            early_waits: self.early.load(Ordering::Relaxed),
            lead_us: self.lead_ns.load(Ordering::Relaxed) as f64 / 1e3,
        }
    }

    /// Spend `work_s` seconds of CPU (at speed 1) under processor sharing, arriving at model time
    /// `at` (normally the completion of the request's previous stage, at most a wake-up delay
    /// ago). Returns the model time at which the job completed.
    pub async fn cpu(&self, at: f64, work_s: f64) -> f64 {
        if work_s <= 0.0 {
            return at;
        }
        let (tx, rx) = oneshot::channel();
        let id = {
            let mut st = self.lock();
            let id = st.next_id;
            st.next_id += 1;
            st.waiters.insert(id, tx);
            // The model cannot go back in time: if it has already moved past `at` (another job's
            // event), the job joins at the model's present instead.
            let done = st.cpu.arrive(at, id, work_s);
            st.wake(done);
            id
        };
        self.notify.notify_one();
        let mut guard = CpuJobGuard {
            emu: self,
            id,
            armed: true,
        };
        let done = rx.await.unwrap_or_else(|_| self.now());
        guard.armed = false;
        done
    }

    /// Hold the disk for `seconds` (at speed 1), FCFS, arriving at model time `at`. Returns the
    /// model time at which it finished (after waiting for it).
    pub async fn disk(&self, at: f64, seconds: f64) -> f64 {
        if seconds <= 0.0 {
            return at;
        }
        let slot = self.lock().disk.busy_for(at, seconds);
        self.sleep_until(slot.finish).await;
        slot.finish
    }

    /// Hold one core for `work_s` seconds of CPU (at speed 1), first come first served over the
    /// node's cores with one queue (see `State::cores_fcfs`), arriving at model time `at`.
    /// Returns the model time at which it finished (after waiting for it).
    pub async fn cpu_fcfs(&self, at: f64, work_s: f64) -> f64 {
        if work_s <= 0.0 {
            return at;
        }
        let slot = {
            let mut st = self.lock();
            let Some(core) = st
                .cores_fcfs
                .iter_mut()
                .min_by(|a, b| a.busy_until().total_cmp(&b.busy_until()))
            else {
                return at;
            };
            core.submit(at, work_s / self.speed)
        };
        self.sleep_until(slot.finish).await;
        slot.finish
    }

    /// Read over NFS for `seconds` (at speed 1: the owner's disk is taken to be as fast as this
    /// node's), FCFS on this node's path to the other nodes, arriving at model time `at`.
    /// Returns the model time at which the data had arrived (after waiting for it).
    pub async fn remote(&self, at: f64, seconds: f64) -> f64 {
        if seconds <= 0.0 {
            return at;
        }
        let slot = self.lock().remote.submit(at, seconds / self.speed);
        self.sleep_until(slot.finish).await;
        slot.finish
    }

    /// Serialise `bytes` onto the modelled link, arriving at model time `at`. Returns the model
    /// time at which the last byte left (after waiting for it).
    pub async fn nic(&self, at: f64, bytes: u64) -> f64 {
        let slot = self.lock().nic.send(at, bytes);
        self.sleep_until(slot.finish).await;
        slot.finish
    }

    /// Record an access to a static file; true when the memory cache holds it.
    pub fn cache_access(&self, path: &str, size: u64) -> bool {
        self.lock().cache.access(path, size)
    }

    /// Fills the memory cache with these files (as many as fit, the last ones most recent),
    /// as a server that has been running a while; the filling is not counted as misses.
    pub fn warm<'a>(&self, files: impl Iterator<Item = (&'a str, u64)>) {
        let mut st = self.lock();
        for (path, size) in files {
            st.cache.access(path, size);
        }
        st.cache.reset_counts();
    }

    /// Memory other than the file cache now takes `bytes` (the server's processes): the cache
    /// shrinks to what is left, evicting its oldest files, or grows back.
    pub fn reserve_memory(&self, bytes: u64) {
        let mut st = self.lock();
        let capacity = st.cache_configured.saturating_sub(bytes);
        st.cache.set_capacity(capacity);
    }

    pub fn cache_report(&self) -> CacheReport {
        let st = self.lock();
        CacheReport {
            capacity_bytes: st.cache.capacity(),
            used_bytes: st.cache.used(),
            hits: st.cache.hits(),
            misses: st.cache.misses(),
            configured_bytes: st.cache_configured,
        }
    }

    /// Busy seconds per resource since start (CPU in core-seconds divided by cores, so that all
    /// three are "seconds of full utilisation").
    pub fn busy(&self) -> Busy {
        let now = self.now();
        let mut st = self.lock();
        let done = st.cpu.advance(now);
        st.wake(done);
        let fcfs_s: f64 = st.cores_fcfs.iter().map(|c| c.busy_seconds(now)).sum();
        Busy {
            at: now,
            cpu_s: (st.cpu.busy_core_seconds() + fcfs_s) / self.cores as f64,
            disk_s: st.disk.busy_seconds(now),
            nic_s: st.nic.busy_seconds(now),
        }
    }
}

/// Completes CPU jobs at their modelled completion times. It holds only a weak reference so the
/// node's resources are freed when the server stops.
async fn cpu_driver(emu: std::sync::Weak<Emulated>) {
    // A wait for a completion may end a little early (the lead); the model is then moved on to
    // the completion itself, never left just short of it.
    let mut reached = 0.0_f64;
    loop {
        let Some(e) = emu.upgrade() else { return };
        let next = {
            let now = e.now().max(reached);
            let mut st = e.lock();
            let done = st.cpu.advance(now);
            st.wake(done);
            st.cpu.next_completion()
        };
        match next {
            Some(t) => {
                tokio::select! {
                    // One nanosecond on, so rounding cannot leave the job a hair short of done.
                    _ = e.sleep_until(t) => reached = t + 1e-9,
                    _ = e.notify.notified() => {}
                }
            }
            None => {
                // Idle: wait for an arrival, but look again now and then so that a dropped node
                // lets this task end.
                tokio::select! {
                    _ = e.notify.notified() => {}
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        }
    }
}

/// Sleeps that end within tens of microseconds of their deadline. tokio's timer wheel has a
/// resolution of one millisecond and rounds deadlines up, which on a 5 ms request is a 10–20 %
/// error. Here one thread per node keeps the pending deadlines in a heap and waits for the
/// earliest with a condition variable's timeout (a futex wait, served by the kernel's
/// high-resolution timers), then completes the sleeping futures through one-shot channels.
struct PreciseTimer {
    shared: Arc<TimerShared>,
}

struct TimerShared {
    state: Mutex<TimerState>,
    cv: Condvar,
}

#[derive(Default)]
struct TimerState {
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    senders: HashMap<u64, oneshot::Sender<()>>,
    next: u64,
    stop: bool,
}

impl PreciseTimer {
    fn new() -> Self {
        let shared = Arc::new(TimerShared {
            state: Mutex::new(TimerState::default()),
            cv: Condvar::new(),
        });
        let s = shared.clone();
        // If the thread cannot be started, sleeps fall back to tokio's timer (see sleep_until).
        let _ = std::thread::Builder::new()
            .name("capstan-origin-timer".into())
            .spawn(move || timer_thread(&s));
        PreciseTimer { shared }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TimerState> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Returns whether it slept (the deadline was still ahead).
    async fn sleep_until(&self, deadline: Instant) -> bool {
        if deadline <= Instant::now() {
            return false;
        }
        let (tx, rx) = oneshot::channel();
        let earliest = {
            let mut st = self.lock();
            let id = st.next;
            st.next += 1;
            st.senders.insert(id, tx);
            st.heap.push(Reverse((deadline, id)));
            st.heap.peek().map(|r| r.0 .1) == Some(id)
        };
        if earliest {
            self.shared.cv.notify_one();
        }
        if rx.await.is_err() {
            // The timer thread is gone (it could not start): use the runtime's timer.
            tokio::time::sleep_until(deadline.into()).await;
        }
        true
    }
}

impl Drop for PreciseTimer {
    fn drop(&mut self) {
        self.lock().stop = true;
        self.shared.cv.notify_one();
    }
}

fn timer_thread(shared: &TimerShared) {
    let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if st.stop {
            return;
        }
        let now = Instant::now();
        while let Some(&Reverse((deadline, id))) = st.heap.peek() {
            if deadline > now {
                break;
            }
            st.heap.pop();
            if let Some(tx) = st.senders.remove(&id) {
                let _ = tx.send(());
            }
        }
        st = match st.heap.peek() {
            Some(&Reverse((deadline, _))) => {
                let wait = deadline.saturating_duration_since(now);
                shared
                    .cv
                    .wait_timeout(st, wait)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0)
            }
            None => shared.cv.wait(st).unwrap_or_else(|p| p.into_inner()),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn precise_sleeps_end_at_their_deadline_in_order() {
        let timer = PreciseTimer::new();
        let t0 = Instant::now();
        // The earlier deadline is polled first: when this thread was held back past both
        // deadlines, both are ready at once and it still resumes first, so only a timer that
        // fired the later deadline first makes `a` come before `b`.
        let (b, a) = tokio::join!(
            biased;
            async {
                timer.sleep_until(t0 + Duration::from_millis(10)).await;
                Instant::now()
            },
            async {
                timer.sleep_until(t0 + Duration::from_millis(30)).await;
                Instant::now()
            }
        );
        assert!(b >= t0 + Duration::from_millis(10));
        assert!(a >= t0 + Duration::from_millis(30));
        assert!(b <= a);
        // A deadline in the past does not wait.
        timer.sleep_until(t0).await;
    }

    #[tokio::test]
    async fn the_lead_follows_late_wake_ups_up_and_early_ones_down_within_bounds() {
        let emu = Emulated::new(&NodeParams::default(), 1 << 20);
        for _ in 0..10 {
            emu.adjust_lead(true);
        }
        assert_eq!(emu.lateness().lead_us, 10.0 * LEAD_STEP_NS as f64 / 1e3);
        for _ in 0..3 {
            emu.adjust_lead(false);
        }
        assert_eq!(emu.lateness().lead_us, 7.0 * LEAD_STEP_NS as f64 / 1e3);
        // A long stall does not push the lead past its bound, and it never goes below zero.
        for _ in 0..10_000 {
            emu.adjust_lead(true);
        }
        assert_eq!(emu.lateness().lead_us, LEAD_MAX_NS as f64 / 1e3);
        for _ in 0..10_000 {
            emu.adjust_lead(false);
        }
        assert_eq!(emu.lateness().lead_us, 0.0);
    }

    #[tokio::test]
    async fn a_cpu_job_completes_at_its_modelled_time_with_a_lead() {
        let emu = Emulated::new(&NodeParams::default(), 1 << 20);
        for _ in 0..100 {
            emu.adjust_lead(true);
        }
        let at = emu.now();
        let done = emu.cpu(at, 0.02).await;
        // The model says when the job was done, whatever the wake-up; it is not early.
        assert!((done - at - 0.02).abs() < 1e-6, "{}", done - at);
    }
}
