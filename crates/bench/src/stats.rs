//! What one generator thread measures. Histograms in microseconds; counters; a per-second
//! timeline. Threads and shards are combined by adding histograms and counters, never by
//! averaging percentiles.

use std::collections::HashMap;
use std::time::Instant;

use hdrhistogram::Histogram;

use crate::http::{CacheMark, ErrorKind, Response};

/// Highest latency a histogram holds: one hour in microseconds (larger values are clamped).
pub const MAX_US: u64 = 3_600_000_000;

pub fn new_hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_US, 3).expect("static bounds are valid")
}

/// Per-second histograms are coarse (2 significant digits, 1 % error) so that a long run's
/// timeline stays small.
fn new_sec_hist() -> Histogram<u32> {
    Histogram::new_with_bounds(1, MAX_US, 2).expect("static bounds are valid")
}

pub fn record(h: &mut Histogram<u64>, us: u64) {
    let _ = h.record(us.clamp(1, MAX_US));
}

#[derive(Debug, Clone, Default)]
pub struct Second {
    pub offered: u64,
    pub started: u64,
    pub completed: u64,
    pub errors: u64,
    pub dropped: u64,
    pub bytes: u64,
    /// Body bytes of the responses to the requests due in this second, whenever they ended.
    pub bytes_by_start: u64,
    pub latency: Option<Histogram<u32>>,
}

pub struct ClassAcc {
    pub requests: u64,
    pub errors: u64,
    pub bytes: u64,
    pub hist: Histogram<u64>,
}

/// One connection target's counts (`BenchConfig::targets`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TargetAcc {
    /// Responses received from it.
    pub requests: u64,
    /// Requests that failed on it (transport errors, including those in flight when it died).
    pub errors: u64,
    /// Connections opened to it.
    pub connects: u64,
    /// Of those, connections that came to it because the target they were meant for refused
    /// or failed to connect.
    pub reconnects: u64,
    /// Connect attempts it refused or let time out.
    pub refused: u64,
}

pub struct Stats {
    pub t0: Instant,
    /// End of the schedule (seconds after `t0`): completions after it are drain, not window.
    pub window_s: f64,
    /// Requests due before this many seconds after `t0` are left out of the latency
    /// histograms (`BenchConfig::settle`).
    pub settle_s: f64,
    pub corrected: Histogram<u64>,
    pub uncorrected: Histogram<u64>,
    pub lag: Histogram<u64>,
    pub connect: Histogram<u64>,
    pub ttfb: Histogram<u64>,
    pub page: Histogram<u64>,
    /// Latency of the requests that were redirected and followed (both exchanges).
    pub redirected: Histogram<u64>,
    pub classes: Vec<ClassAcc>,
    pub offered: u64,
    pub started: u64,
    pub completed: u64,
    pub completed_in_window: u64,
    pub dropped: u64,
    pub unfinished: u64,
    pub bytes: u64,
    pub connect_attempts: u64,
    /// Connect attempts abandoned after the connect timeout (then retried, S-Client style).
    pub connect_timeouts: u64,
    pub connections_opened: u64,
    pub sessions: u64,
    pub errors: [u64; ErrorKind::ALL.len()],
    /// 1xx … 5xx, then anything else.
    pub status: [u64; 6],
    pub content_types: HashMap<String, u64>,
    pub nodes: HashMap<String, u64>,
    pub cache_hits: u64,
    pub cache_misses: u64,
    pub cache_hit_bytes: u64,
    pub cache_miss_bytes: u64,
    pub timeline: Vec<Second>,
    pub cpu_s: f64,
    pub busy_wall_s: f64,
    pub inflight: u64,
    /// Per connection target, in the configured order (one entry without `--target`).
    pub targets: Vec<TargetAcc>,
}

impl Stats {
    pub fn new(t0: Instant, window_s: f64, classes: usize) -> Stats {
        Stats {
            t0,
            window_s,
            settle_s: 0.0,
            corrected: new_hist(),
            uncorrected: new_hist(),
            lag: new_hist(),
            connect: new_hist(),
            ttfb: new_hist(),
            page: new_hist(),
            redirected: new_hist(),
            classes: (0..classes)
                .map(|_| ClassAcc {
                    requests: 0,
                    errors: 0,
                    bytes: 0,
                    hist: new_hist(),
                })
                .collect(),
            offered: 0,
            started: 0,
            completed: 0,
            completed_in_window: 0,
            dropped: 0,
            unfinished: 0,
            bytes: 0,
            connect_attempts: 0,
            connect_timeouts: 0,
            connections_opened: 0,
            sessions: 0,
            errors: [0; ErrorKind::ALL.len()],
            status: [0; 6],
            content_types: HashMap::new(),
            nodes: HashMap::new(),
            cache_hits: 0,
            cache_misses: 0,
            cache_hit_bytes: 0,
            cache_miss_bytes: 0,
            timeline: Vec::new(),
            cpu_s: 0.0,
            busy_wall_s: 0.0,
            inflight: 0,
            targets: Vec::new(),
        }
    }

    fn secs(&self, t: Instant) -> f64 {
        t.saturating_duration_since(self.t0).as_secs_f64()
    }

    pub fn sec(&mut self, t: Instant) -> &mut Second {
        let i = self.secs(t) as usize;
        if self.timeline.len() <= i {
            self.timeline.resize_with(i + 1, Second::default);
        }
        &mut self.timeline[i]
    }

    /// A request was due at `intended`.
    pub fn offered(&mut self, intended: Instant) {
        self.offered += 1;
        self.sec(intended).offered += 1;
    }

    pub fn dropped(&mut self, intended: Instant) {
        self.dropped += 1;
        self.sec(intended).dropped += 1;
    }

    pub fn started(&mut self, intended: Instant, now: Instant) {
        self.started += 1;
        self.inflight += 1;
        let _ = intended;
        self.sec(now).started += 1;
    }

    pub fn lag(&mut self, intended: Instant, now: Instant) {
        record(
            &mut self.lag,
            now.saturating_duration_since(intended).as_micros() as u64,
        );
    }

    pub fn connected(&mut self, began: Instant, now: Instant) {
        self.connections_opened += 1;
        record(
            &mut self.connect,
            now.saturating_duration_since(began).as_micros() as u64,
        );
    }

    pub fn error(&mut self, class: u16, kind: ErrorKind, now: Instant) {
        self.inflight = self.inflight.saturating_sub(1);
        self.errors[kind as usize] += 1;
        self.classes[class as usize].errors += 1;
        self.sec(now).errors += 1;
    }

    /// A complete response. `intended` is when the schedule wanted the request to start, `sent`
    /// when it actually started.
    pub fn response(
        &mut self,
        class: u16,
        intended: Instant,
        sent: Instant,
        resp: &Response,
        done: Instant,
    ) {
        self.inflight = self.inflight.saturating_sub(1);
        let corrected = done.saturating_duration_since(intended).as_micros() as u64;
        let uncorrected = done.saturating_duration_since(sent).as_micros() as u64;
        let settled = self.secs(intended) >= self.settle_s;
        if settled {
            record(&mut self.corrected, corrected);
            record(&mut self.uncorrected, uncorrected);
            record(
                &mut self.ttfb,
                resp.first_byte.saturating_duration_since(sent).as_micros() as u64,
            );
        }
        self.completed += 1;
        if self.secs(done) < self.window_s {
            self.completed_in_window += 1;
        }
        self.bytes += resp.body_bytes;
        let status_class = (resp.status / 100) as usize;
        self.status[if (1..=5).contains(&status_class) {
            status_class - 1
        } else {
            5
        }] += 1;
        let c = &mut self.classes[class as usize];
        c.requests += 1;
        c.bytes += resp.body_bytes;
        if settled {
            record(&mut c.hist, corrected);
        }
        let mut is_error = false;
        if resp.status >= 400 {
            let kind = if resp.status >= 500 {
                ErrorKind::Http5xx
            } else {
                ErrorKind::Http4xx
            };
            self.errors[kind as usize] += 1;
            c.errors += 1;
            is_error = true;
        }
        match resp.cache {
            CacheMark::Hit => {
                self.cache_hits += 1;
                self.cache_hit_bytes += resp.body_bytes;
            }
            CacheMark::Miss => {
                self.cache_misses += 1;
                self.cache_miss_bytes += resp.body_bytes;
            }
            CacheMark::None => {}
        }
        if let Some(n) = &resp.node {
            *self.nodes.entry(n.clone()).or_default() += 1;
        }
        if let Some(t) = &resp.content_type {
            if let Some(v) = self.content_types.get_mut(t) {
                *v += 1;
            } else {
                self.content_types.insert(t.clone(), 1);
            }
        }
        self.sec(intended).bytes_by_start += resp.body_bytes;
        let s = self.sec(done);
        s.completed += 1;
        s.bytes += resp.body_bytes;
        if is_error {
            s.errors += 1;
        }
        let _ = s
            .latency
            .get_or_insert_with(new_sec_hist)
            .record(corrected.clamp(1, MAX_US));
    }

    /// The request that ended with `response` was redirected and followed: counted apart too.
    pub fn redirected(&mut self, intended: Instant, done: Instant) {
        let us = done.saturating_duration_since(intended).as_micros() as u64;
        record(&mut self.redirected, us);
    }

    /// Adds another thread's measurements.
    pub fn absorb(&mut self, o: Stats) {
        for (a, b) in [
            (&mut self.corrected, &o.corrected),
            (&mut self.uncorrected, &o.uncorrected),
            (&mut self.lag, &o.lag),
            (&mut self.connect, &o.connect),
            (&mut self.ttfb, &o.ttfb),
            (&mut self.page, &o.page),
            (&mut self.redirected, &o.redirected),
        ] {
            let _ = a.add(b);
        }
        for (a, b) in self.classes.iter_mut().zip(&o.classes) {
            a.requests += b.requests;
            a.errors += b.errors;
            a.bytes += b.bytes;
            let _ = a.hist.add(&b.hist);
        }
        self.offered += o.offered;
        self.started += o.started;
        self.completed += o.completed;
        self.completed_in_window += o.completed_in_window;
        self.dropped += o.dropped;
        self.unfinished += o.unfinished;
        self.bytes += o.bytes;
        self.connect_attempts += o.connect_attempts;
        self.connect_timeouts += o.connect_timeouts;
        self.connections_opened += o.connections_opened;
        self.sessions += o.sessions;
        for i in 0..self.errors.len() {
            self.errors[i] += o.errors[i];
        }
        for i in 0..6 {
            self.status[i] += o.status[i];
        }
        for (k, v) in o.content_types {
            *self.content_types.entry(k).or_default() += v;
        }
        for (k, v) in o.nodes {
            *self.nodes.entry(k).or_default() += v;
        }
        self.cache_hits += o.cache_hits;
        self.cache_misses += o.cache_misses;
        self.cache_hit_bytes += o.cache_hit_bytes;
        self.cache_miss_bytes += o.cache_miss_bytes;
        if self.timeline.len() < o.timeline.len() {
            self.timeline.resize_with(o.timeline.len(), Second::default);
        }
        for (a, b) in self.timeline.iter_mut().zip(o.timeline) {
            a.offered += b.offered;
            a.started += b.started;
            a.completed += b.completed;
            a.errors += b.errors;
            a.dropped += b.dropped;
            a.bytes += b.bytes;
            a.bytes_by_start += b.bytes_by_start;
            if let Some(h) = b.latency {
                match &mut a.latency {
                    Some(x) => {
                        let _ = x.add(&h);
                    }
                    None => a.latency = Some(h),
                }
            }
        }
        if self.targets.len() < o.targets.len() {
            self.targets.resize(o.targets.len(), TargetAcc::default());
        }
        for (a, b) in self.targets.iter_mut().zip(&o.targets) {
            a.requests += b.requests;
            a.errors += b.errors;
            a.connects += b.connects;
            a.reconnects += b.reconnects;
            a.refused += b.refused;
        }
        self.cpu_s += o.cpu_s;
        self.busy_wall_s = self.busy_wall_s.max(o.busy_wall_s);
    }

    pub fn errors_total(&self) -> u64 {
        self.errors.iter().sum()
    }
}

/// CPU time of the calling thread, in seconds.
pub fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec, and CLOCK_THREAD_CPUTIME_ID is supported by
    // every Linux and BSD kernel; on failure the zeroed value is returned.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}
