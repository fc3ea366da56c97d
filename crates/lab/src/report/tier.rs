//! The tier experiment's report: the summary table, and `index.html` beside `results.json`
//! with the findings, capacity against K (with the ideal K × one switch), the cache variants'
//! hit ratios and node requests, the kill run's node-request rate and responses over time, and
//! the policies' response times with local and shared views.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use capstan_report::{escape, Chart, Marker, Page, Series, Stroke};

use crate::model::error::LabError;
use crate::model::tier::TierResults;

/// Capacity rows, cache rows, the kill.
pub fn summary_table(r: &TierResults) -> String {
    let mut s = format!(
        "{:<10} {:>12} {:>12} {:>8} {:>9} {:>9}\n",
        "switches", "responses/s", "÷ K×one", "errors", "p99 ms", "client %"
    );
    for c in &r.capacity {
        let _ = writeln!(
            s,
            "{:<10} {:>12.0} {:>12.2} {:>8} {:>9.2} {:>9.0}",
            c.switches,
            c.responses_per_s,
            c.ratio_to_k_times_one,
            c.errors,
            c.p99_ms,
            c.generator_cpu_percent
        );
    }
    let _ = writeln!(
        s,
        "\n{:<12} {:>9} {:>9} {:>8} {:>10} {:>13} {:>7}",
        "cache", "switches", "MiB each", "offered", "responses", "node requests", "DHR"
    );
    for c in &r.cache {
        if !c.available {
            let _ = writeln!(s, "{:<12} {:>9} {}", c.variant, c.switches, c.note);
            continue;
        }
        let _ = writeln!(
            s,
            "{:<12} {:>9} {:>9} {:>8} {:>10} {:>13} {:>7.3}",
            c.variant, c.switches, c.cache_mib_each, c.offered, c.responses, c.node_requests, c.dhr
        );
    }
    if let Some(k) = &r.kill {
        let settle = k
            .settle_s
            .map_or("not settled".into(), |s| format!("{s:.1} s"));
        let _ = writeln!(
            s,
            "\nkill {} at {:.1} s ({} tier of {}): {} failed of {}, node rate settled: {settle}",
            k.killed,
            k.at_s,
            k.variant,
            k.switches,
            k.errors,
            k.responses + k.errors
        );
    }
    if let Some(v) = &r.views {
        let _ = writeln!(
            s,
            "\n{:<19} {:>7} {:>8} {:>10} {:>7} {:>8} {:>8} {:>8}",
            "policy", "view", "offered", "responses", "errors", "p50 ms", "p90 ms", "p99 ms"
        );
        for w in &v.rows {
            let _ = writeln!(
                s,
                "{:<19} {:>7} {:>8} {:>10} {:>7} {:>8.1} {:>8.1} {:>8.1}",
                w.policy, w.view, w.offered, w.responses, w.errors, w.p50_ms, w.p90_ms, w.p99_ms
            );
        }
    }
    if let Some(m) = &r.sim {
        let _ = writeln!(
            s,
            "\n{:<19} {:>7} {:>12} {:>12}   (simulator: {} dispatchers, {} nodes, service {:.1} ms)",
            "policy", "view", "lab p90 ms", "sim p90 ms", m.dispatchers, m.nodes, m.service_ms
        );
        for w in &m.rows {
            let _ = writeln!(
                s,
                "{:<19} {:>7} {:>12.1} {:>12.1}",
                w.policy, w.view, w.lab_p90_ms, w.sim_p90_ms
            );
        }
    }
    s
}

/// Writes `results.json` and `index.html` into `out`; returns the page's path.
pub fn write_report(r: &TierResults, out: &Path) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(out)
        .map_err(|e| LabError::Report(format!("{}: {e}", out.display())))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report(e.to_string()))?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::Report(format!("cannot write results.json: {e}")))?;
    let mut h = Page::with_style(&r.title, &r.title, "td,th{text-align:left}");
    let p = &r.plan;
    let _ = write!(
        h,
        "<p>Tiers of K switches, switch i on 127.0.0.(10+i) with {} worker thread(s), in front \
         of {} emulated nodes (<code>capstan origin</code>, Polygraph content mix of {} \
         objects); one load generator spreads its keep-alive connections over the tier as a \
         DNS round-robin client does (<code>capstan bench --target</code>: connection i to \
         switch i mod K, a refused or failed connection reopened at the next). CPU quota: {}. \
         Scale: {}.</p><p><code>{}</code></p>",
        p.switch_threads,
        p.nodes,
        p.files,
        escape(&r.quota.detail),
        p.scale.as_str(),
        escape(&r.command)
    );
    h.section("Findings");
    h.list(&r.findings);
    h.section("Results");
    let _ = write!(h, "<pre>{}</pre>", escape(&summary_table(r)));
    let _ = write!(
        h,
        "<p>Capacity: {} closed-loop clients per switch ask for one small cached object for \
         {} s (client %: the load generator's busiest thread, % of a core). Cache: open \
         loop at {} requests/s, Zipf α = {} over the objects, a {} s fill then a measured \
         {} s; DHR is the tier's as the nodes see it, 1 − node requests ÷ \
         responses (uncachable objects count as misses for every variant). [tier] in this \
         build: {}.</p>",
        p.clients_per_switch,
        p.capacity_s,
        p.cache_rate,
        p.zipf,
        p.fill_s,
        p.measure_s,
        escape(&r.tier_check)
    );
    h.section("Capacity against K");
    h.push(&capacity_svg(r)?);
    h.section("Cache of the tier");
    h.push(&cache_svg(r)?);
    if r.kill.is_some() {
        h.section("A switch killed mid-run");
        h.push(&kill_svg(r)?);
    }
    if let Some(v) = &r.views {
        h.section("Policies: each switch's local view against the tier's shared view");
        let _ = write!(
            h,
            "<p>{} switches without a cache (so every request reaches a node) in front of {} \
             emulated nodes of speeds {:?}; their capacity through one switch with the tier's CPU, \
             closed loop for {} s: {:.0} responses/s. Each policy then ran open loop at {:.0} \
             requests/s ({} × that) for {} s, the same content mix; shared: <code>view = \
             \"shared\"</code> with the switches as <code>[tier]</code> peers gossiping every \
             100 ms (join-idle-queue's I-queues come from the view too).</p>",
            v.switches,
            v.node_speeds.len(),
            v.node_speeds,
            p.calibrate_s,
            v.capacity_rps,
            v.rate,
            p.views_load,
            p.views_s
        );
        h.push(&views_svg(v)?);
    }
    h.section("Not measured yet");
    h.list(&r.not_measured);
    let path = out.join("index.html");
    std::fs::write(&path, h.finish())
        .map_err(|e| LabError::Report(format!("cannot write index.html: {e}")))?;
    Ok(path)
}

fn capacity_svg(r: &TierResults) -> Result<String, LabError> {
    let one = r.capacity.first().map_or(0.0, |c| c.responses_per_s);
    let measured = r
        .capacity
        .iter()
        .map(|c| (c.switches as f64, c.responses_per_s))
        .collect();
    let ideal = r
        .capacity
        .iter()
        .map(|c| (c.switches as f64, c.switches as f64 * one))
        .collect();
    Chart::new(
        "saturated throughput against the number of switches",
        "switches (K)",
        "responses/s",
    )
    .size(640, 340)
    .with(Series::new("measured", measured))
    .with(Series::new("K × one switch", ideal).stroke(Stroke::Dashed))
    .svg()
    .map_err(LabError::Report)
}

fn cache_svg(r: &TierResults) -> Result<String, LabError> {
    let rows: Vec<_> = r.cache.iter().filter(|c| c.available).collect();
    let names = rows
        .iter()
        .map(|c| format!("{} ({}×{} MiB)", c.variant, c.switches, c.cache_mib_each))
        .collect();
    let points = rows
        .iter()
        .enumerate()
        .map(|(i, c)| (i as f64, c.dhr))
        .collect();
    Chart::new(
        "document hit ratio of the tier (1 − node requests ÷ responses)",
        "variant",
        "DHR",
    )
    .size(640, 340)
    .x_categories(names)
    .y_range(0.0, 1.0)
    .with(Series::new("DHR", points).stroke(Stroke::None))
    .svg()
    .map_err(LabError::Report)
}

fn kill_svg(r: &TierResults) -> Result<String, LabError> {
    let k = r.kill.as_ref().expect("checked by the caller");
    let responses = k
        .timeline
        .iter()
        .map(|s| (s.t as f64, s.completed as f64))
        .collect();
    let errors = k
        .timeline
        .iter()
        .map(|s| (s.t as f64, s.errors as f64))
        .collect();
    let mut chart = Chart::new(
        format!(
            "node requests, responses and failures per second; {} killed at {:.1} s",
            k.killed, k.at_s
        ),
        "seconds since the load started",
        "per second",
    )
    .size(760, 360);
    chart.add(Series::new("node requests/s", k.node_rate.clone()).marker(Marker::None));
    chart.add(Series::new("responses/s", responses).marker(Marker::None));
    chart.add(Series::new("failed/s", errors).marker(Marker::None));
    chart.svg().map_err(LabError::Report)
}

fn views_svg(v: &crate::model::tier::ViewsResult) -> Result<String, LabError> {
    let names = (v.rows.iter())
        .map(|r| format!("{} {}", r.policy, r.view))
        .collect();
    let at = |f: fn(&crate::model::tier::ViewRow) -> f64| {
        (v.rows.iter().enumerate())
            .map(|(i, r)| (i as f64, f(r)))
            .collect::<Vec<_>>()
    };
    Chart::new(
        "response time by policy and view (ms)",
        "policy and view",
        "ms",
    )
    .size(760, 360)
    .x_categories(names)
    .with(Series::new("p50", at(|r| r.p50_ms)).stroke(Stroke::None))
    .with(Series::new("p90", at(|r| r.p90_ms)).stroke(Stroke::None))
    .with(Series::new("p99", at(|r| r.p99_ms)).stroke(Stroke::None))
    .svg()
    .map_err(LabError::Report)
}
