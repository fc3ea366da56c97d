//! `capstan sim cache`: the cache's replacement policies compared on a request trace.
//!
//! Every policy of `capstan_cache::evict` (the code the switch runs) replays the same trace at
//! cache sizes that are fractions of the trace's working set, next to Belady's offline MIN as
//! the bound. Results are the document hit ratio (hits / requests) and the byte hit ratio
//! (bytes served from cache / bytes requested), as in the Bakhtiyari thesis.
//!
//! - [`trace`]: Common Log Format files and generated (Zipf, Polygraph-like) traces.
//! - [`replay`]: one policy at one size; Belady's MIN.
//! - [`report`]: the HTML report with SVG plots.
//!
//! Replays are independent, so (policy, size) pairs run on a pool of std threads; results do
//! not depend on the thread count.

pub mod replay;
pub mod report;
pub mod trace;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use serde::Serialize;

pub use replay::{Contender, Counts};
pub use trace::{Generated, ObjectSizes, Trace, TraceInfo};

/// The default cache sizes, in percent of the working set.
pub const DEFAULT_PERCENTS: [f64; 6] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0];

/// What to compare.
#[derive(Clone, Debug)]
pub struct Study {
    pub contenders: Vec<Contender>,
    /// Cache sizes in percent of the working set, each in (0, 100].
    pub percents: Vec<f64>,
    pub threads: usize,
}

/// The JSON document (`--json`); field names are stable.
#[derive(Clone, Debug, Serialize)]
pub struct CacheReport {
    pub trace: TraceInfo,
    pub cache_sizes: Vec<CacheSize>,
    /// One entry per contender, Belady first when present.
    pub policies: Vec<PolicyResult>,
    /// Wall time and threads: the only fields that change from run to run.
    pub run: RunTiming,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct CacheSize {
    pub percent: f64,
    pub bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PolicyResult {
    pub policy: String,
    /// One point per cache size, in the order of `cache_sizes`.
    pub points: Vec<Point>,
    /// All this policy's replayed requests over its CPU seconds (thread CPU time on Linux).
    pub requests_per_s: f64,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Point {
    pub percent: f64,
    pub cache_bytes: u64,
    pub hits: u64,
    pub byte_hits: u64,
    /// Document hit ratio: hits / requests.
    pub dhr: f64,
    /// Byte hit ratio: bytes of the hits / bytes of all requests.
    pub bhr: f64,
    /// CPU seconds of this replay's thread (wall seconds where thread CPU time is unavailable).
    pub cpu_s: f64,
    pub requests_per_s: f64,
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct RunTiming {
    pub threads: usize,
    pub wall_s: f64,
}

impl Study {
    pub fn validate(&self) -> Result<(), String> {
        if self.contenders.is_empty() {
            return Err("no policy to compare".into());
        }
        if self.percents.is_empty() {
            return Err("no cache size given".into());
        }
        match self
            .percents
            .iter()
            .find(|p| !(p.is_finite() && **p > 0.0 && **p <= 100.0))
        {
            Some(p) => Err(format!("cache sizes are percents in (0, 100], got {p}")),
            None => Ok(()),
        }
    }

    /// Cache sizes in bytes for `trace` (at least 1 byte each).
    pub fn sizes(&self, trace: &Trace) -> Vec<CacheSize> {
        let ws = trace.info.working_set_bytes as f64;
        self.percents
            .iter()
            .map(|&percent| CacheSize {
                percent,
                bytes: ((ws * percent / 100.0).round() as u64).max(1),
            })
            .collect()
    }

    /// Replays every (contender, size) pair. `progress(done, total)` counts requests replayed,
    /// called from the worker threads.
    pub fn run(
        &self,
        trace: &Trace,
        progress: &(dyn Fn(u64, u64) + Sync),
    ) -> Result<CacheReport, String> {
        self.validate()?;
        let sizes = self.sizes(trace);
        let started = Instant::now();
        let next_use = if self.contenders.contains(&Contender::Belady) {
            replay::next_uses(trace)
        } else {
            Vec::new()
        };
        // Belady's replays are the slowest: start them first so they do not finish last alone.
        let mut jobs: Vec<(usize, usize)> = (0..self.contenders.len())
            .flat_map(|c| (0..sizes.len()).map(move |s| (c, s)))
            .collect();
        jobs.sort_by_key(|&(c, _)| self.contenders[c] != Contender::Belady);
        let results: Mutex<Vec<Option<(Counts, f64)>>> = Mutex::new(vec![None; jobs.len()]);
        let next_job = AtomicUsize::new(0);
        let done = AtomicU64::new(0);
        let total = trace.requests.len() as u64 * jobs.len() as u64;
        let worker = || loop {
            let j = next_job.fetch_add(1, Ordering::Relaxed);
            let Some(&(c, s)) = jobs.get(j) else { break };
            let clock = ThreadClock::start();
            let mut tick = |n: u64| progress(done.fetch_add(n, Ordering::Relaxed) + n, total);
            let counts = replay::replay(
                trace,
                self.contenders[c],
                sizes[s].bytes,
                &next_use,
                &mut tick,
            );
            let cpu_s = clock.seconds();
            results.lock().unwrap_or_else(|e| e.into_inner())[c * sizes.len() + s] =
                Some((counts, cpu_s));
        };
        let threads = self.threads.clamp(1, jobs.len());
        std::thread::scope(|scope| {
            for _ in 1..threads {
                scope.spawn(worker);
            }
            worker();
        });
        let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut by_job = results.into_iter().map(|r| r.expect("every job ran"));
        let policies = self
            .contenders
            .iter()
            .map(|who| {
                let runs: Vec<(Counts, f64)> = by_job.by_ref().take(sizes.len()).collect();
                summarise(who.name(), trace, &sizes, &runs)
            })
            .collect();
        Ok(CacheReport {
            trace: trace.info.clone(),
            cache_sizes: sizes,
            policies,
            run: RunTiming {
                threads,
                wall_s: started.elapsed().as_secs_f64(),
            },
        })
    }
}

fn summarise(
    name: &str,
    trace: &Trace,
    sizes: &[CacheSize],
    runs: &[(Counts, f64)],
) -> PolicyResult {
    let requests = trace.info.requests as f64;
    let bytes = trace.info.requested_bytes.max(1) as f64;
    let rate = |n: f64, s: f64| if s > 0.0 { n / s } else { 0.0 };
    let points: Vec<Point> = sizes
        .iter()
        .zip(runs)
        .map(|(size, (c, cpu_s))| Point {
            percent: size.percent,
            cache_bytes: size.bytes,
            hits: c.hits,
            byte_hits: c.byte_hits,
            dhr: c.hits as f64 / requests.max(1.0),
            bhr: c.byte_hits as f64 / bytes,
            cpu_s: *cpu_s,
            requests_per_s: rate(requests, *cpu_s),
        })
        .collect();
    let cpu: f64 = points.iter().map(|p| p.cpu_s).sum();
    PolicyResult {
        policy: name.to_string(),
        requests_per_s: rate(requests * points.len() as f64, cpu),
        points,
    }
}

/// The calling thread's CPU time, so that a shared machine's other tenants do not count
/// against a policy's requests/s (they still cost it cache misses). Linux exposes it in
/// `/proc/thread-self/schedstat` (first field: nanoseconds on CPU); elsewhere wall time.
pub(crate) struct ThreadClock {
    cpu_ns: Option<u64>,
    wall: Instant,
}

impl ThreadClock {
    pub(crate) fn start() -> Self {
        ThreadClock {
            cpu_ns: thread_cpu_ns(),
            wall: Instant::now(),
        }
    }

    pub(crate) fn seconds(&self) -> f64 {
        match (self.cpu_ns, thread_cpu_ns()) {
            (Some(a), Some(b)) if b >= a => (b - a) as f64 / 1e9,
            _ => self.wall.elapsed().as_secs_f64(),
        }
    }
}

fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_cache::evict::EvictionKind;

    fn study(threads: usize) -> Study {
        Study {
            contenders: Contender::all(),
            percents: vec![1.0, 10.0, 50.0],
            threads,
        }
    }

    fn zipf(sizes: ObjectSizes) -> Trace {
        trace::generate(&Generated {
            alpha: 0.9,
            objects: 2000,
            requests: 40_000,
            seed: 5,
            sizes,
            recurrence: None,
        })
        .unwrap()
    }

    #[test]
    fn belady_bounds_every_policy_at_unit_sizes() {
        let t = zipf(ObjectSizes::Unit);
        let r = study(2).run(&t, &|_, _| {}).unwrap();
        assert_eq!(r.policies[0].policy, "belady");
        for (i, size) in r.cache_sizes.iter().enumerate() {
            let best = r.policies[0].points[i].dhr;
            for p in &r.policies[1..] {
                let pt = p.points[i];
                assert!(
                    pt.dhr <= best,
                    "{} at {} %: {} > {best}",
                    p.policy,
                    size.percent,
                    pt.dhr
                );
                assert_eq!(pt.dhr, pt.bhr, "unit sizes: DHR = BHR");
            }
        }
        // A larger cache never hurts LRU (inclusion property); ratios grow with size.
        let lru = &r.policies[1];
        assert!(lru.points.windows(2).all(|w| w[0].hits <= w[1].hits));
        assert!(lru.points[0].dhr > 0.0 && lru.points[2].dhr < 1.0);
    }

    #[test]
    fn results_do_not_depend_on_threads() {
        let t = zipf(ObjectSizes::Cap);
        let hits = |r: &CacheReport| -> Vec<(u64, u64)> {
            r.policies
                .iter()
                .flat_map(|p| p.points.iter().map(|x| (x.hits, x.byte_hits)))
                .collect()
        };
        let a = study(1).run(&t, &|_, _| {}).unwrap();
        let b = study(3).run(&t, &|_, _| {}).unwrap();
        assert_eq!(hits(&a), hits(&b));
        for p in &a.policies {
            for x in &p.points {
                assert!((0.0..=1.0).contains(&x.dhr) && (0.0..=1.0).contains(&x.bhr));
            }
        }
    }

    #[test]
    fn progress_counts_every_request_and_bad_sizes_are_refused() {
        let t = zipf(ObjectSizes::Unit);
        let s = Study {
            contenders: vec![Contender::Evict(EvictionKind::Sieve)],
            percents: vec![5.0, 20.0],
            threads: 2,
        };
        let last = AtomicU64::new(0);
        s.run(&t, &|done, total| {
            assert!(done <= total);
            last.fetch_max(done, Ordering::Relaxed);
        })
        .unwrap();
        assert_eq!(last.into_inner(), 2 * t.requests.len() as u64);
        for bad in [0.0, -1.0, 101.0, f64::NAN] {
            let s = Study {
                percents: vec![bad],
                ..study(1)
            };
            assert!(s.run(&t, &|_, _| {}).is_err(), "{bad}");
        }
    }
}
