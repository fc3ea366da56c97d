//! Cost per request of each eviction policy, driven as the store drives it: a hit calls `touch`;
//! a miss calls `admit` and then `victim` while the policy's bytes exceed the budget.
//!
//! - `evict/zipf`: 100 k objects' worth of budget (100 000 × the mean object size), requests
//!   drawn Zipf(0.9) from 1 M objects of 1–64 KiB (log-uniform), fetch costs 1–5000 µs. The cache
//!   is filled with 1 M requests before measuring, so every measured request is steady state.
//! - `evict/scan`: the same warmed cache, then requests that are all misses (never-seen ids):
//!   admit + eviction on every request, the worst case.
//!
//! One iteration = 1000 requests; criterion's time per iteration / 1000 = ns per request.
//!
//! Time is the benchmark thread's time *on CPU* (`CLOCK_THREAD_CPUTIME_ID`, on Linux), so that
//! other jobs on a shared machine do not count while they hold the CPU (their effect on the
//! caches still does); elsewhere, wall-clock time. On an idle machine the two agree.
//! Run: `cargo bench -p capstan-cache --bench evict -- --warm-up-time 1 --measurement-time 3`

use std::time::{Duration, Instant};

use capstan_cache::evict::{new_evictor, EvictionKind, Evictor, ObjectId};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};

const UNIVERSE: usize = 1_000_000;
const CACHED_OBJECTS: u64 = 100_000;
const ZIPF_ALPHA: f64 = 0.9;
const WARM_REQUESTS: usize = 1_000_000;
const TRACE_REQUESTS: usize = 2_000_000;
const CHUNK: usize = 1000;
/// Ids are ranks times an odd constant: scattered like the store's hashes, yet invertible.
const SCATTER: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The multiplicative inverse of an odd number modulo 2^64 (Newton's iteration).
fn inverse(odd: u64) -> u64 {
    let mut inv = odd;
    for _ in 0..6 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(inv)));
    }
    inv
}

/// This thread's time on CPU so far (Linux), from the C library `std` already links.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn cpu_time() -> Option<Duration> {
    #[repr(C)]
    struct Timespec {
        tv_sec: i64,
        tv_nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec (two 64-bit fields on 64-bit Linux).
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn cpu_time() -> Option<Duration> {
    None
}

/// Runs `f` `iters` times and returns the CPU time taken (or the wall time).
fn timed(iters: u64, mut f: impl FnMut()) -> Duration {
    let (cpu0, wall0) = (cpu_time(), Instant::now());
    for _ in 0..iters {
        f();
    }
    match (cpu0, cpu_time()) {
        (Some(a), Some(b)) => b - a,
        _ => wall0.elapsed(),
    }
}

/// The floor: a FIFO without an id map (a ring of ids; `touch` and `remove` do nothing). Not a
/// usable policy — it measures the driver (trace, the store's presence bitmap, sizes, dispatch).
struct Baseline {
    ring: std::collections::VecDeque<(ObjectId, u64)>,
    bytes: u64,
}

impl Evictor for Baseline {
    fn name(&self) -> &'static str {
        "baseline"
    }
    fn admit(&mut self, id: ObjectId, size: u64, _cost: u64) -> bool {
        self.ring.push_back((id, size));
        self.bytes += size;
        true
    }
    fn touch(&mut self, _id: ObjectId) {}
    fn remove(&mut self, _id: ObjectId) {}
    fn victim(&mut self) -> Option<ObjectId> {
        let (id, size) = self.ring.pop_front()?;
        self.bytes -= size;
        Some(id)
    }
    fn len(&self) -> usize {
        self.ring.len()
    }
    fn bytes(&self) -> u64 {
        self.bytes
    }
}

struct Workload {
    /// Object rank per request.
    trace: Vec<u32>,
    size: Vec<u32>,
    cost: Vec<u32>,
    budget: u64,
}

fn workload() -> Workload {
    let mut rng = Rng(42);
    let mut size = Vec::with_capacity(UNIVERSE);
    let mut cost = Vec::with_capacity(UNIVERSE);
    for _ in 0..UNIVERSE {
        size.push((1024.0 * 64f64.powf(rng.unit())) as u32);
        cost.push(1 + (rng.next() % 5000) as u32);
    }
    let mean = size.iter().map(|&s| s as f64).sum::<f64>() / UNIVERSE as f64;
    let mut cdf = Vec::with_capacity(UNIVERSE);
    let mut total = 0.0;
    for r in 1..=UNIVERSE {
        total += (r as f64).powf(-ZIPF_ALPHA);
        cdf.push(total);
    }
    let trace = (0..TRACE_REQUESTS)
        .map(|_| {
            let u = rng.unit() * total;
            cdf.partition_point(|&c| c < u).min(UNIVERSE - 1) as u32
        })
        .collect();
    Workload {
        trace,
        size,
        cost,
        budget: (mean * CACHED_OBJECTS as f64) as u64,
    }
}

/// The store's side: which ranks are cached, and the policy.
struct Driver<'w> {
    w: &'w Workload,
    p: Box<dyn Evictor>,
    present: Vec<bool>,
    unscatter: u64,
    pos: usize,
    hits: u64,
    next_unseen: u64,
}

impl<'w> Driver<'w> {
    fn new(w: &'w Workload, p: Box<dyn Evictor>) -> Self {
        Driver {
            w,
            p,
            present: vec![false; UNIVERSE],
            unscatter: inverse(SCATTER),
            pos: 0,
            hits: 0,
            next_unseen: UNIVERSE as u64,
        }
    }

    #[inline]
    fn make_room(&mut self) {
        while self.p.bytes() > self.w.budget {
            let v: ObjectId = self.p.victim().expect("over budget");
            let rank = v.wrapping_mul(self.unscatter);
            if let Some(slot) = self.present.get_mut(rank as usize) {
                *slot = false;
            }
        }
    }

    #[inline]
    fn request(&mut self) {
        let rank = self.w.trace[self.pos] as usize;
        self.pos = if self.pos + 1 == self.w.trace.len() {
            0
        } else {
            self.pos + 1
        };
        let id = (rank as u64).wrapping_mul(SCATTER);
        if self.present[rank] {
            self.hits += 1;
            self.p.touch(id);
        } else if self.p.admit(
            id,
            u64::from(self.w.size[rank]),
            u64::from(self.w.cost[rank]),
        ) {
            self.present[rank] = true;
            self.make_room();
        }
    }

    /// A never-seen object (a rank past the universe), sized like a random one.
    #[inline]
    fn miss(&mut self) {
        let rank = self.next_unseen;
        self.next_unseen += 1;
        let like = (rank as usize * 7919) % UNIVERSE;
        let id = rank.wrapping_mul(SCATTER);
        if self.p.admit(
            id,
            u64::from(self.w.size[like]),
            u64::from(self.w.cost[like]),
        ) {
            self.make_room();
        }
    }
}

fn bench(c: &mut Criterion) {
    let w = workload();
    eprintln!(
        "workload: {} requests, Zipf({ZIPF_ALPHA}) over {UNIVERSE} objects, budget {} bytes",
        w.trace.len(),
        w.budget
    );
    let policies = || {
        let baseline: Box<dyn Evictor> = Box::new(Baseline {
            ring: Default::default(),
            bytes: 0,
        });
        std::iter::once(baseline).chain(EvictionKind::ALL.map(|k| new_evictor(k, w.budget)))
    };
    let mut zipf = c.benchmark_group("evict/zipf");
    zipf.throughput(Throughput::Elements(CHUNK as u64));
    for p in policies() {
        let name = p.name();
        let mut d = Driver::new(&w, p);
        for _ in 0..WARM_REQUESTS {
            d.request();
        }
        eprintln!(
            "{:8} after warm-up: {} objects, {} bytes, hit ratio {:.3}",
            name,
            d.p.len(),
            d.p.bytes(),
            d.hits as f64 / WARM_REQUESTS as f64
        );
        zipf.bench_function(name, |b| {
            b.iter_custom(|iters| {
                timed(iters, || {
                    for _ in 0..CHUNK {
                        d.request();
                    }
                })
            })
        });
    }
    zipf.finish();

    let mut scan = c.benchmark_group("evict/scan");
    scan.throughput(Throughput::Elements(CHUNK as u64));
    for p in policies() {
        let name = p.name();
        let mut d = Driver::new(&w, p);
        for _ in 0..WARM_REQUESTS {
            d.request();
        }
        scan.bench_function(name, |b| {
            b.iter_custom(|iters| {
                timed(iters, || {
                    for _ in 0..CHUNK {
                        d.miss();
                    }
                })
            })
        });
    }
    scan.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
