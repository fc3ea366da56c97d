//! Runs an experiment: for every series (policy × variant) and repetition a fresh cluster, a
//! warm-up, then one measured window per load level; then the headline's interleaved rounds at
//! the claims' levels ([`crate::run::rounds`]), which those series skip in the first part; and
//! gathers every window into the results.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::model::error::LabError;
use crate::model::experiment::EngineKind;
use crate::model::results::*;
use crate::run::plan::{versions, window_seed, Event, Observer, Options, Plan, SeriesPlan};
use crate::run::window::{bench_config, start_cluster, Ctx, Window};

/// Runs the plan and returns the results (findings are added by [`crate::conclude`]).
pub async fn run(
    plan: &Plan,
    o: &Options,
    observer: Option<Observer>,
) -> Result<LabResults, LabError> {
    let t0 = Instant::now();
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut ctx = Ctx {
        plan,
        o,
        observer,
        capacity: None,
        index: 0,
        http_path: None,
    };
    ctx.emit(Event::Planned {
        runs: plan.runs(),
        seconds: plan.estimate_s(),
    });
    if plan.exp.load.relative_to_capacity {
        ctx.capacity = Some(calibrate(&ctx).await?);
    }
    let mut runs: Vec<Vec<RunRecord>> = Vec::new();
    for (i, s) in plan.series.iter().enumerate() {
        runs.push(curve(&mut ctx, i, s).await?);
    }
    if let Some(h) = &plan.headline {
        crate::run::rounds::run(&mut ctx, h, &mut runs).await?;
    }
    let mut results = assemble(plan, o, runs, started_unix_ms);
    results.capacity_rps = ctx.capacity;
    results.http_path = ctx.http_path;
    results.wall_s = round(t0.elapsed().as_secs_f64(), 1);
    Ok(results)
}

/// Open loop relative to capacity: the capacity of the first series' cluster under the
/// experiment's closed-loop calibration clients.
async fn calibrate(ctx: &Ctx<'_>) -> Result<f64, LabError> {
    let (plan, exp) = (ctx.plan, &ctx.plan.exp);
    let s = &plan.series[0];
    ctx.emit(Event::Message(format!(
        "measuring capacity: {} closed-loop clients, {}",
        exp.load.calibrate_clients, s.policy
    )));
    let mut c = start_cluster(plan, s, ctx.o, &ctx.o.work_dir, plan.seed).await?;
    let cfg = bench_config(
        plan,
        s,
        &c,
        EngineKind::Closed,
        exp.load.calibrate_clients as f64,
        plan.duration,
        // Its own request stream, from the run's seed as every other.
        plan.seed ^ 0xca1_1b4a7e,
    )?;
    let r = capstan_bench::run(cfg, None)
        .await
        .map_err(|e| LabError::Run(e.to_string()))?;
    c.check_alive()?;
    if r.completed_rps <= 0.0 {
        return Err(LabError::Run("capacity run completed no requests".into()));
    }
    ctx.emit(Event::Message(format!(
        "capacity ≈ {:.0} conn/s",
        r.completed_rps
    )));
    Ok(round(r.completed_rps, 1))
}

/// Series `i` at its levels outside the headline's rounds: per repetition a fresh cluster, a
/// warm-up, one window per level.
async fn curve(ctx: &mut Ctx<'_>, i: usize, s: &SeriesPlan) -> Result<Vec<RunRecord>, LabError> {
    let plan = ctx.plan;
    let levels = plan.curve_levels(i);
    let mut runs = Vec::new();
    let Some(&first) = levels.first() else {
        return Ok(runs);
    };
    for rep in 0..plan.repetitions {
        let seed = window_seed(plan.seed, rep);
        let mut c = start_cluster(plan, s, ctx.o, &ctx.o.work_dir, seed).await?;
        ctx.probe_path(s, &c).await?;
        ctx.warm_up(s, &c, first, seed).await?;
        for &level in &levels {
            let w = Window {
                level,
                rep,
                seed,
                duration: plan.duration,
            };
            runs.push(ctx.window(s, &mut c, w).await?);
        }
    }
    Ok(runs)
}

/// The results of every window: per series its runs in level order (then repetition or round)
/// and their points, the warnings of every run, and how the headline ran.
fn assemble(
    plan: &Plan,
    o: &Options,
    runs: Vec<Vec<RunRecord>>,
    started_unix_ms: u64,
) -> LabResults {
    let exp = &plan.exp;
    let level_index = |l: f64| plan.levels.iter().position(|&x| x == l).unwrap_or(0);
    let series_out: Vec<SeriesResult> = plan
        .series
        .iter()
        .zip(runs)
        .map(|(s, mut runs)| {
            runs.sort_by_key(|q| (level_index(q.level), q.repetition));
            SeriesResult {
                label: s.label.clone(),
                policy: s.policy.clone(),
                variant: s.variant.clone(),
                nodes: s.nodes.len(),
                speeds: s.nodes.iter().map(|n| n.speed).collect(),
                cores: s.nodes.first().map_or(1, |n| n.cores),
                switch_threads: s.switch_threads,
                points: points(&plan.levels, &runs),
                runs,
            }
        })
        .collect();
    let warnings = run_warnings(&series_out, plan.x_label());
    let headline = plan.headline.as_ref().map(|h| HeadlineRecord {
        rounds: h.rounds,
        duration_s: h.duration.as_secs_f64(),
        levels: h
            .levels
            .iter()
            .map(|(level, members)| HeadlineLevel {
                level: *level,
                series: members
                    .iter()
                    .map(|&i| plan.series[i].label.clone())
                    .collect(),
            })
            .collect(),
    });
    LabResults {
        schema: SCHEMA.into(),
        experiment: exp.name.clone(),
        title: exp.title.clone(),
        figure: exp.figure.clone(),
        about: exp.about.clone(),
        command: o.command.clone(),
        versions: versions(),
        quick: plan.quick,
        seed: plan.seed,
        started_unix_ms,
        wall_s: 0.0,
        engine: format!("{:?}", exp.load.engine).to_lowercase(),
        x_label: plan.x_label().into(),
        levels: plan.levels.clone(),
        duration_s: plan.duration.as_secs_f64(),
        repetitions: plan.repetitions,
        headline,
        capacity_rps: None,
        series: series_out,
        paper: None,
        findings: Vec::new(),
        warnings,
        worlds: "live".into(),
        sim: None,
        agreement: Vec::new(),
        http_path: None,
        figures: Default::default(),
    }
}

/// Every run's warnings, each prefixed with its series and level.
fn run_warnings(series: &[SeriesResult], x_label: &str) -> Vec<String> {
    series
        .iter()
        .flat_map(|s| {
            s.runs.iter().flat_map(move |r| {
                r.warnings
                    .iter()
                    .map(move |w| format!("{} at {} {x_label}: {w}", s.label, fmt_level(r.level)))
            })
        })
        .collect()
}
