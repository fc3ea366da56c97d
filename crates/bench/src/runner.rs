//! Running a benchmark: the generator threads started, their progress gathered once a second,
//! their statistics merged into one [`RunResult`]; and [`preview`], the schedule without running it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::{self, BenchConfig, Engine, Protocol};
use crate::error::BenchError;
use crate::result::{self, RunResult};
use crate::{engine, mux, source, stats, tls};

/// Live state of a run, reported once a second.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Progress {
    pub elapsed_s: f64,
    pub duration_s: f64,
    pub offered: u64,
    pub started: u64,
    pub completed: u64,
    pub errors: u64,
    pub dropped: u64,
    pub inflight: u64,
    /// Responses completed in the last whole second.
    pub rps: f64,
    /// Highest per-thread p99 of the last whole second, in ms.
    pub p99_ms: f64,
}

pub type ProgressFn = Arc<dyn Fn(&Progress) + Send + Sync>;

/// Runs a benchmark. Generator threads are OS threads with their own event loops, so the caller's
/// runtime only waits; `progress` is called once a second from that wait.
pub async fn run(
    config: BenchConfig,
    progress: Option<ProgressFn>,
) -> Result<RunResult, BenchError> {
    config.validate()?;
    let addrs = resolve_targets(&config).await?;
    raise_fd_limit();
    let tls = tls::client(&config)?;
    let mux = match config.protocol {
        Protocol::Http1 => None,
        Protocol::Http2 | Protocol::Http3 => Some(mux::Client::new(&config, &addrs).await?),
    };
    let table = source::RequestTable::build(&config)?;
    let (replay_times, replay_index) = replay_schedule(&config, &table);
    let window_s = match &config.engine {
        Engine::Open { rate } | Engine::Sessions { rate, .. } => {
            engine::profile(&config, *rate)?.end_s
        }
        Engine::Closed { .. } | Engine::SClient { .. } => config.duration.as_secs_f64(),
        Engine::Replay { .. } => {
            let last = replay_times.iter().copied().fold(0.0, f64::max);
            let shard_gap = 1e-3;
            let d = config.duration.as_secs_f64();
            if d > 0.0 {
                d.min(last + shard_gap)
            } else {
                last + shard_gap
            }
        }
    };
    let threads = config.threads;
    let shard = config.shard;
    let lanes = shard.1 as u64 * threads as u64;
    // Give the threads time to start before the first scheduled request.
    let t0 = Instant::now() + Duration::from_millis(30);
    let started_unix_ms = (SystemTime::now() + Duration::from_millis(30))
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    // Kept until every lane has finished: a lane takes a closed channel for "go on".
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let ctx = Arc::new(engine::Ctx {
        stopped,
        cfg: config,
        table,
        addrs,
        t0,
        window_s,
        lanes,
        replay_times,
        replay_index,
        tls,
        mux,
    });
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let mut handles = Vec::new();
    for j in 0..threads {
        let lane = shard.0 as u64 * threads as u64 + j as u64;
        let ctx = ctx.clone();
        let tx = tx.clone();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name(format!("bench-{j}"))
            .spawn(move || {
                let _ = done_tx.send(engine::run_lane(ctx, lane, j, tx));
            })
            .map_err(|e| BenchError::Io(format!("cannot start a generator thread: {e}")))?;
        handles.push(done_rx);
    }
    drop(tx);
    let gave_up = watch_lanes(rx, threads, t0, window_s, progress, &ctx.cfg, &stop).await;
    let mut total: Option<stats::Stats> = None;
    let mut cpu_max: f64 = 0.0;
    for h in handles {
        let s = h
            .await
            .map_err(|_| BenchError::Io("a generator thread panicked".into()))??;
        cpu_max = cpu_max.max(100.0 * s.cpu_s / s.busy_wall_s.max(1e-9));
        match &mut total {
            None => total = Some(s),
            Some(t) => t.absorb(s),
        }
    }
    let total = total.expect("at least one thread");
    let targets = if ctx.cfg.targets.is_empty() {
        Vec::new()
    } else {
        result::targets(&ctx.cfg.targets, &total.targets)
    };
    let generator = result::Generator {
        threads,
        cpu_percent_max: (cpu_max * 10.0).round() / 10.0,
        ..Default::default()
    };
    let cfg = &ctx.cfg;
    let offered_rps = cfg.mean_rate().unwrap_or(0.0) / shard.1 as f64;
    let mut out = result::build(
        &total,
        result::Meta {
            engine: cfg.engine_name(),
            target: cfg.target.url(),
            shard,
            started_unix_ms,
            duration_s: if gave_up {
                t0.elapsed().as_secs_f64().min(window_s)
            } else {
                window_s
            },
            offered_rps,
            classes: &ctx.table.classes,
            generator,
        },
    );
    out.targets = targets;
    out.protocol = cfg.protocol.name(cfg.keepalive).into();
    out.gave_up = gave_up;
    drop(stop);
    Ok(out)
}

/// Takes the lanes' once-a-second snapshots until every lane has finished: sums them for
/// `progress`, and tells the lanes to stop (`stop`) when the run should give up
/// (`give_up_after`: no response at all, only failures). Returns whether it gave up.
async fn watch_lanes(
    mut rx: tokio::sync::mpsc::UnboundedReceiver<engine::Snapshot>,
    threads: usize,
    t0: Instant,
    window_s: f64,
    progress: Option<ProgressFn>,
    cfg: &BenchConfig,
    stop: &tokio::sync::watch::Sender<bool>,
) -> bool {
    let mut live: HashMap<usize, engine::Snapshot> = HashMap::new();
    let mut gave_up = false;
    while let Some(s) = rx.recv().await {
        live.insert(s.lane, s);
        if live.len() < threads {
            continue;
        }
        let mut p = Progress {
            elapsed_s: t0.elapsed().as_secs_f64().round(),
            duration_s: window_s,
            ..Default::default()
        };
        for s in live.values() {
            p.offered += s.offered;
            p.started += s.started;
            p.completed += s.completed;
            p.errors += s.errors;
            p.dropped += s.dropped;
            p.inflight += s.inflight;
            p.rps += s.last_second_completed as f64;
            p.p99_ms = p.p99_ms.max(s.last_second_p99_us as f64 / 1000.0);
        }
        if let Some(cb) = &progress {
            cb(&p);
        }
        let dead = p.completed == 0 && p.errors > 0;
        if !gave_up && dead && cfg.give_up_after.is_some_and(|g| t0.elapsed() >= g) {
            gave_up = true;
            stop.send_replace(true);
        }
    }
    gave_up
}

/// The addresses connections go to: each `--target` in order, else the URL's host.
async fn resolve_targets(config: &BenchConfig) -> Result<Vec<std::net::SocketAddr>, BenchError> {
    let names: Vec<(String, u16)> = if config.targets.is_empty() {
        vec![(
            config.target.host.trim_matches(['[', ']']).to_string(),
            config.target.port,
        )]
    } else {
        config
            .targets
            .iter()
            .map(|t| config::split_host_port(t).map_err(BenchError::Config))
            .collect::<Result<_, _>>()?
    };
    let mut addrs = Vec::with_capacity(names.len());
    for (host, port) in names {
        let addr = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| BenchError::Io(format!("cannot resolve {host}: {e}")))?
            .next()
            .ok_or_else(|| BenchError::Io(format!("cannot resolve {host}")))?;
        addrs.push(addr);
    }
    Ok(addrs)
}

/// For the replay engine, each log entry's start time and its row in the request table; empty
/// for the other engines.
fn replay_schedule(config: &BenchConfig, table: &source::RequestTable) -> (Vec<f64>, Vec<u32>) {
    match &config.engine {
        Engine::Replay { log, .. } => {
            let index = table.index();
            let rows = log
                .entries
                .iter()
                .map(|e| index[&(e.method.as_str(), e.path.as_str())])
                .collect();
            (engine::replay_times(config), rows)
        }
        _ => (Vec::new(), Vec::new()),
    }
}

/// The first `n` scheduled requests of shard 0, thread 0 (open and replay engines): seconds from
/// the start, method and path. The same seed gives the same list.
pub fn preview(config: &BenchConfig, n: usize) -> Result<Vec<(f64, String, String)>, BenchError> {
    config.validate()?;
    let table = source::RequestTable::build(config)?;
    if !matches!(config.engine, Engine::Open { .. } | Engine::Replay { .. }) {
        return Err(BenchError::Config(
            "preview needs the open or replay engine".into(),
        ));
    }
    let (replay_times, replay_index) = replay_schedule(config, &table);
    let ctx = engine::Ctx {
        cfg: config.clone(),
        table,
        addrs: vec![([127, 0, 0, 1], 0).into()],
        t0: Instant::now(),
        window_s: f64::MAX,
        lanes: config.shard.1 as u64 * config.threads as u64,
        replay_times,
        replay_index,
        tls: None,
        mux: None,
        stopped: tokio::sync::watch::channel(false).1,
    };
    let lane = config.shard.0 as u64 * config.threads as u64;
    Ok(engine::schedule(&ctx, lane)?
        .take(n)
        .map(|(t, i)| {
            let r = &ctx.table.requests[i as usize];
            (t, r.method.clone(), r.path.clone())
        })
        .collect())
}

/// An open-loop run past capacity holds a socket per request in flight; the default soft limit
/// (often 1024) would turn into connect errors that are the client's, not the server's.
pub(crate) fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to fill and then pass back; failures are ignored (the run
    // then uses whatever limit it has).
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
