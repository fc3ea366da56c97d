//! Emulated resources: the node's CPU, disk, NIC and memory cache are `capstan-model` models run
//! in wall-clock time. A request "uses" a resource by joining the model's queue and sleeping
//! until the model says it is done, so the response time is the modelled one while the host's
//! real CPU barely notices.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use capstan_model::{Completion, CpuPs, Disk, JobId, LruBytes, Nic, NodeParams};
use tokio::sync::{oneshot, Notify};

use crate::load::Busy;

struct State {
    cpu: CpuPs,
    disk: Disk,
    nic: Nic,
    cache: LruBytes,
    waiters: HashMap<JobId, oneshot::Sender<()>>,
    next_id: JobId,
}

impl State {
    fn wake(&mut self, done: Vec<Completion>) {
        for c in done {
            if let Some(tx) = self.waiters.remove(&c.id) {
                let _ = tx.send(());
            }
        }
    }
}

pub struct Emulated {
    start: Instant,
    cores: u32,
    state: Mutex<State>,
    /// Wakes the CPU driver when a job arrives, since that moves the next completion.
    notify: Notify,
}

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
            state: Mutex::new(State {
                cpu: CpuPs::new(params.cores, params.speed),
                disk: Disk::new(params.disk, params.speed),
                nic: Nic::new(params.nic),
                cache: LruBytes::new(params.cache_bytes(tree_bytes)),
                waiters: HashMap::new(),
                next_id: 0,
            }),
            notify: Notify::new(),
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

    fn at(&self, t: f64) -> tokio::time::Instant {
        tokio::time::Instant::from_std(self.start + Duration::from_secs_f64(t.max(0.0)))
    }

    /// Spend `work_s` seconds of CPU (at speed 1) under processor sharing.
    pub async fn cpu(&self, work_s: f64) {
        if work_s <= 0.0 {
            return;
        }
        let (tx, rx) = oneshot::channel();
        let id = {
            let now = self.now();
            let mut st = self.lock();
            let id = st.next_id;
            st.next_id += 1;
            st.waiters.insert(id, tx);
            let done = st.cpu.arrive(now, id, work_s);
            st.wake(done);
            id
        };
        self.notify.notify_one();
        let mut guard = CpuJobGuard {
            emu: self,
            id,
            armed: true,
        };
        let _ = rx.await;
        guard.armed = false;
    }

    /// Hold the disk for `seconds` (at speed 1), FCFS.
    pub async fn disk(&self, seconds: f64) {
        if seconds <= 0.0 {
            return;
        }
        let slot = {
            let now = self.now();
            self.lock().disk.busy_for(now, seconds)
        };
        tokio::time::sleep_until(self.at(slot.finish)).await;
    }

    /// Serialise `bytes` onto the modelled link.
    pub async fn nic(&self, bytes: u64) {
        let slot = {
            let now = self.now();
            self.lock().nic.send(now, bytes)
        };
        tokio::time::sleep_until(self.at(slot.finish)).await;
    }

    /// Record an access to a static file; true when the memory cache holds it.
    pub fn cache_access(&self, path: &str, size: u64) -> bool {
        self.lock().cache.access(path, size)
    }

    pub fn cache_stats(&self) -> (u64, u64, u64, u64) {
        let st = self.lock();
        (
            st.cache.capacity(),
            st.cache.used(),
            st.cache.hits(),
            st.cache.misses(),
        )
    }

    /// Busy seconds per resource since start (CPU in core-seconds divided by cores, so that all
    /// three are "seconds of full utilisation").
    pub fn busy(&self) -> Busy {
        let now = self.now();
        let mut st = self.lock();
        let done = st.cpu.advance(now);
        st.wake(done);
        Busy {
            at: now,
            cpu_s: st.cpu.busy_core_seconds() / self.cores as f64,
            disk_s: st.disk.busy_seconds(now),
            nic_s: st.nic.busy_seconds(now),
        }
    }
}

/// Completes CPU jobs at their modelled completion times. It holds only a weak reference so the
/// node's resources are freed when the server stops.
async fn cpu_driver(emu: std::sync::Weak<Emulated>) {
    loop {
        let Some(e) = emu.upgrade() else { return };
        let next = {
            let now = e.now();
            let mut st = e.lock();
            let done = st.cpu.advance(now);
            st.wake(done);
            st.cpu.next_completion()
        };
        match next {
            Some(t) => {
                let deadline = e.at(t);
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => {}
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
