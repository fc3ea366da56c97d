//! The engines. Each generator thread ("lane") runs a single-threaded event loop with its own
//! statistics, so the request path takes no locks; lanes of all shards together make up the
//! configured load (lane `k` of `L` gets `1/L` of the rate or of the clients).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_workload::{stream, Arrivals, RateProfile};
use tokio::sync::{mpsc, Notify, Semaphore};

use crate::config::{BenchConfig, Engine, ReplaySpeed};
use crate::error::BenchError;
use crate::source::Picker;
use crate::stats::{record, thread_cpu_s, Stats};
use crate::timer::PreciseTimer;

mod lane;
mod sclient;

pub(crate) use lane::Ctx;
use lane::Lane;

/// A lane's live counters, sent once a second for the progress line.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Snapshot {
    pub lane: usize,
    pub offered: u64,
    pub started: u64,
    pub completed: u64,
    pub errors: u64,
    pub dropped: u64,
    pub inflight: u64,
    pub last_second_completed: u64,
    pub last_second_p99_us: u64,
}

/// The open-loop schedule of one lane: `(seconds from start, request index)`.
pub(crate) fn schedule(
    ctx: &Ctx,
    lane: u64,
) -> Result<Box<dyn Iterator<Item = (f64, u32)>>, BenchError> {
    let cfg = &ctx.cfg;
    match &cfg.engine {
        Engine::Replay { .. } => {
            let lanes = ctx.lanes as usize;
            let times = ctx.replay_times.clone();
            let index = ctx.replay_index.clone();
            Ok(Box::new(
                (lane as usize..times.len())
                    .step_by(lanes)
                    .map(move |i| (times[i], index[i])),
            ))
        }
        Engine::Open { rate } => {
            let profile = profile(cfg, *rate / ctx.lanes as f64)?;
            let phases = cfg.phases.clone();
            let arrivals = Arrivals::new(
                profile.clone(),
                cfg.arrival,
                stream(cfg.seed, &format!("bench-arrivals-{lane}")),
                lane as f64 / ctx.lanes as f64,
            );
            let mut picker = Picker::new(cfg, &ctx.table, lane)?;
            Ok(Box::new(arrivals.map(move |t| {
                let rec = profile
                    .phase_at(t)
                    .and_then(|i| phases.get(i))
                    .and_then(|p| p.recurrence);
                (t, picker.next(rec))
            })))
        }
        _ => Err(BenchError::Config("not a scheduled engine".into())),
    }
}

pub(crate) fn profile(cfg: &BenchConfig, rate: f64) -> Result<RateProfile, BenchError> {
    let duration = if cfg.duration.is_zero() {
        f64::MAX / 4.0
    } else {
        cfg.duration.as_secs_f64()
    };
    RateProfile::new(
        rate,
        duration,
        cfg.ramp.as_secs_f64(),
        &cfg.phases,
        cfg.burst,
    )
    .map_err(BenchError::Config)
}

/// Runs lane `lane` on the calling thread; returns its statistics.
pub(crate) fn run_lane(
    ctx: Arc<Ctx>,
    lane: u64,
    local_index: usize,
    progress: mpsc::UnboundedSender<Snapshot>,
) -> Result<Stats, BenchError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| BenchError::Io(format!("cannot start a generator thread: {e}")))?;
    let local = tokio::task::LocalSet::new();
    let cfg = &ctx.cfg;
    let mut stats = Stats::new(ctx.t0, ctx.window_s, ctx.table.classes.len());
    stats.settle_s = cfg.settle.as_secs_f64();
    stats.targets = vec![Default::default(); ctx.addrs.len()];
    let lane_state = Rc::new(Lane {
        stats: RefCell::new(stats),
        connect_slots: Semaphore::new(cfg.connections),
        queue: RefCell::new(VecDeque::new()),
        work: Notify::new(),
        pending: Cell::new(0),
        // Lanes start at different source addresses, so a few connections spread over all.
        opened: Cell::new(lane as usize),
        begun: Cell::new(lane as usize),
        silent_until: RefCell::new(vec![None; ctx.addrs.len()]),
        mux_pool: crate::mux::Pool::new(cfg.connections, cfg.streams),
        ctx: ctx.clone(),
    });
    let cpu0 = thread_cpu_s();
    let wall0 = Instant::now();
    let l = lane_state.clone();
    let result: Result<(), BenchError> = local.block_on(&rt, async move {
        let ticker = tokio::task::spawn_local(tick(l.clone(), local_index, progress));
        let engine = async {
            match &l.ctx.cfg.engine {
                Engine::Open { .. } | Engine::Replay { .. } => open_loop(l.clone(), lane).await,
                Engine::Closed { .. } => closed_loop(l.clone(), lane).await,
                Engine::Sessions { .. } => sessions(l.clone(), lane).await,
                Engine::SClient { .. } => sclient::run(l.clone(), lane).await,
            }
        };
        let mut stopped = l.ctx.stopped.clone();
        let r = tokio::select! {
            r = engine => r,
            // A closed channel is no stop: the run ends on its own then.
            Ok(_) = stopped.wait_for(|s| *s) => Ok(()),
        };
        // Drain: in-flight requests may finish until the drain deadline (none when stopped).
        let drain_end = if *stopped.borrow() {
            Instant::now()
        } else {
            l.window_end().max(Instant::now()) + l.ctx.cfg.drain
        };
        while l.pending.get() > 0 && Instant::now() < drain_end {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        ticker.abort();
        r
    });
    let cpu = thread_cpu_s() - cpu0;
    let wall = wall0.elapsed().as_secs_f64();
    let mut stats = lane_state
        .stats
        .replace(Stats::new(ctx.t0, ctx.window_s, 0));
    drop(local);
    drop(rt);
    result?;
    stats.unfinished = stats.inflight;
    // Due but never started (still waiting for a slot when the run ended).
    let never = stats.offered.saturating_sub(stats.started + stats.dropped);
    stats.dropped += never;
    stats.cpu_s = cpu;
    stats.busy_wall_s = wall;
    Ok(stats)
}

async fn tick(l: Rc<Lane>, lane: usize, tx: mpsc::UnboundedSender<Snapshot>) {
    let mut next = l.ctx.t0 + Duration::from_secs(1);
    loop {
        tokio::time::sleep_until(next.into()).await;
        let s = l.stats.borrow();
        let sec = (next - l.ctx.t0).as_secs() as usize - 1;
        let (done, p99) = s
            .timeline
            .get(sec)
            .map(|x| {
                (
                    x.completed,
                    x.latency.as_ref().map_or(0, |h| h.value_at_quantile(0.99)),
                )
            })
            .unwrap_or((0, 0));
        let snap = Snapshot {
            lane,
            offered: s.offered,
            started: s.started,
            completed: s.completed,
            errors: s.errors_total(),
            dropped: s.dropped,
            inflight: s.inflight,
            last_second_completed: done,
            last_second_p99_us: p99,
        };
        drop(s);
        if tx.send(snap).is_err() {
            return;
        }
        next += Duration::from_secs(1);
    }
}

async fn open_loop(l: Rc<Lane>, lane: u64) -> Result<(), BenchError> {
    let sched = schedule(&l.ctx, lane)?;
    let timer = PreciseTimer::new();
    let max_inflight = l.ctx.cfg.max_inflight;
    let end = l.ctx.window_s;
    let keepalive = l.ctx.cfg.keepalive;
    if keepalive {
        // Dropped with the lane's task set when the run (and its drain) is over. HTTP/3: a
        // worker per stream, `streams` of them sharing each connection.
        let streams = if l.ctx.mux.is_some() {
            l.ctx.cfg.streams
        } else {
            1
        };
        for _ in 0..l.ctx.cfg.connections * streams {
            tokio::task::spawn_local(l.clone().keepalive_worker());
        }
    }
    for (t, idx) in sched {
        if t >= end {
            break;
        }
        let due = l.at(t);
        timer.sleep_until(due).await;
        let now = Instant::now();
        {
            let mut s = l.stats.borrow_mut();
            s.offered(due);
            s.lag(due, now);
            if max_inflight.is_some_and(|m| l.pending.get() >= m) {
                s.dropped(due);
                continue;
            }
        }
        l.pending.set(l.pending.get() + 1);
        if keepalive {
            l.queue.borrow_mut().push_back((idx, due));
            l.work.notify_one();
        } else {
            tokio::task::spawn_local(l.clone().open_request(idx, due));
        }
    }
    let end = l.window_end();
    tokio::time::sleep_until(end.into()).await;
    Ok(())
}

async fn closed_loop(l: Rc<Lane>, lane: u64) -> Result<(), BenchError> {
    let Engine::Closed { clients, think } = l.ctx.cfg.engine.clone() else {
        unreachable!("closed_loop runs the closed engine only");
    };
    let lanes = l.ctx.lanes;
    let mine = clients as u64 / lanes + u64::from(lane < clients as u64 % lanes);
    // HTTP/2 and HTTP/3: `streams` clients share a connection.
    l.mux_pool
        .max
        .set((mine as usize).div_ceil(l.ctx.cfg.streams).max(1));
    let picker = Rc::new(RefCell::new(Picker::new(&l.ctx.cfg, &l.ctx.table, lane)?));
    let end = l.window_end();
    let mut tasks = Vec::new();
    for c in 0..mine {
        let l = l.clone();
        let picker = picker.clone();
        let mut think_rng = stream(l.ctx.cfg.seed, &format!("bench-think-{lane}-{c}"));
        l.pending.set(l.pending.get() + 1);
        tasks.push(tokio::task::spawn_local(async move {
            tokio::time::sleep_until(l.ctx.t0.into()).await;
            let mut conn = None;
            // A client is one user: with per-client TLS sessions, its own cache.
            let user = l.ctx.tls.as_ref().and_then(|t| t.for_user());
            while Instant::now() < end {
                let idx = picker.borrow_mut().next(None);
                let now = Instant::now();
                l.stats.borrow_mut().offered(now);
                l.fetch_as(user.as_ref(), &mut conn, idx, now, false).await;
                if let Some(d) = &think {
                    let s = d.sample(&mut think_rng);
                    tokio::time::sleep(Duration::from_secs_f64(s.max(0.0))).await;
                }
            }
            l.pending.set(l.pending.get() - 1);
        }));
    }
    tokio::time::sleep_until(end.into()).await;
    Ok(())
}

async fn sessions(l: Rc<Lane>, lane: u64) -> Result<(), BenchError> {
    let Engine::Sessions {
        rate,
        model,
        parallel,
        think_scale,
    } = l.ctx.cfg.engine.clone()
    else {
        unreachable!("sessions runs the sessions engine only");
    };
    let profile = profile(&l.ctx.cfg, rate / l.ctx.lanes as f64)?;
    let arrivals = Arrivals::new(
        profile,
        l.ctx.cfg.arrival,
        stream(l.ctx.cfg.seed, &format!("bench-session-arrivals-{lane}")),
        lane as f64 / l.ctx.lanes as f64,
    );
    let mut session_rng = stream(l.ctx.cfg.seed, &format!("bench-sessions-{lane}"));
    let picker = Rc::new(RefCell::new(Picker::new(&l.ctx.cfg, &l.ctx.table, lane)?));
    let timer = PreciseTimer::new();
    for t in arrivals {
        if t >= l.ctx.window_s {
            break;
        }
        let due = l.at(t);
        timer.sleep_until(due).await;
        let now = Instant::now();
        let plan = model.sample(&mut session_rng);
        {
            let mut s = l.stats.borrow_mut();
            s.lag(due, now);
            s.sessions += 1;
        }
        l.pending.set(l.pending.get() + 1);
        let l2 = l.clone();
        let picker = picker.clone();
        tokio::task::spawn_local(async move {
            let mut conn = None;
            let mut intended = due;
            // A session is one user: with per-client TLS sessions, its own cache for all its
            // connections.
            let user = l2.ctx.tls.as_ref().and_then(|t| t.for_user());
            for page in plan {
                let page_start = Instant::now();
                let idx = picker.borrow_mut().next(None);
                l2.stats.borrow_mut().offered(intended);
                if !l2
                    .fetch_as(user.as_ref(), &mut conn, idx, intended, false)
                    .await
                {
                    break;
                }
                // Embedded objects over `parallel` connections, the page's own first.
                let per_conn = distribute(page.embedded as usize, parallel);
                let mut set = tokio::task::JoinSet::new();
                let mut first = conn.take();
                for n in per_conn {
                    if n == 0 {
                        continue;
                    }
                    let l3 = l2.clone();
                    let picks: Vec<u32> = (0..n).map(|_| picker.borrow_mut().next(None)).collect();
                    let mut c = first.take();
                    let user = user.clone();
                    set.spawn_local(async move {
                        for idx in picks {
                            let now = Instant::now();
                            l3.stats.borrow_mut().offered(now);
                            if !l3.fetch_as(user.as_ref(), &mut c, idx, now, false).await {
                                break;
                            }
                        }
                        c
                    });
                }
                let mut kept = first;
                while let Some(r) = set.join_next().await {
                    if let (None, Ok(Some(c))) = (&kept, r) {
                        kept = Some(c);
                    }
                }
                conn = kept;
                record(
                    &mut l2.stats.borrow_mut().page,
                    page_start.elapsed().as_micros() as u64,
                );
                if page.think_s > 0.0 {
                    let think = Duration::from_secs_f64(page.think_s * think_scale);
                    tokio::time::sleep(think).await;
                }
                intended = Instant::now();
                if intended >= l2.window_end() {
                    break;
                }
            }
            l2.pending.set(l2.pending.get() - 1);
        });
    }
    tokio::time::sleep_until(l.window_end().into()).await;
    Ok(())
}

/// `n` objects over `k` connections as evenly as possible.
fn distribute(n: usize, k: usize) -> Vec<usize> {
    (0..k).map(|i| n / k + usize::from(i < n % k)).collect()
}

/// Replay timing: each entry's offset from the first, in seconds. Entries logged in the same
/// second are spread evenly across it (logs have one-second resolution).
pub(crate) fn replay_times(cfg: &BenchConfig) -> Vec<f64> {
    let Engine::Replay { log, speed } = &cfg.engine else {
        return Vec::new();
    };
    match *speed {
        ReplaySpeed::Rate(r) => (0..log.entries.len()).map(|i| i as f64 / r).collect(),
        ReplaySpeed::Scale(f) => {
            let t0 = log.entries.iter().map(|e| e.time).min().unwrap_or(0);
            let mut out = Vec::with_capacity(log.entries.len());
            let mut i = 0;
            while i < log.entries.len() {
                let sec = log.entries[i].time;
                let mut j = i;
                while j < log.entries.len() && log.entries[j].time == sec {
                    j += 1;
                }
                let n = (j - i) as f64;
                for k in i..j {
                    let frac = (k - i) as f64 / n;
                    out.push(((sec - t0) as f64 + frac).max(0.0) / f);
                }
                i = j;
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_spread_over_connections() {
        assert_eq!(distribute(5, 2), vec![3, 2]);
        assert_eq!(distribute(0, 3), vec![0, 0, 0]);
    }
}
