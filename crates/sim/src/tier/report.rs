//! The tier experiment's outputs besides the JSON: a text table for the terminal, findings in
//! words, and the HTML page (response time against K per load, one line per policy and view).

use capstan_report::html::with_ci;
use capstan_report::{Chart, Page, Series, Table};

use super::{TierReport, TierSeries};

/// The series a finding compares against: `random` (a tier of any size does as well as one).
fn baseline(report: &TierReport) -> Option<&TierSeries> {
    report.series.iter().find(|s| s.policy == "random")
}

/// The mean response of a series at (K, load).
fn mean_at(s: &TierSeries, k: usize, load: f64) -> Option<f64> {
    s.points
        .iter()
        .find(|p| p.dispatchers == k && p.load == load)
        .map(|p| p.mean.value)
}

/// Findings in words, computed from the numbers: the best series at the largest tier and load,
/// how much each policy on local counts loses from K = 1 to the largest K, and what the shared
/// view gives back.
pub fn findings(report: &TierReport) -> Vec<String> {
    let (Some(&k_max), Some(&load)) = (
        report.dispatchers.iter().max(),
        report.loads.iter().copied().reduce(f64::max).as_ref(),
    ) else {
        return Vec::new();
    };
    let k_min = report.dispatchers.iter().copied().min().unwrap_or(1);
    let mut out = Vec::new();
    let best = report
        .series
        .iter()
        .filter_map(|s| mean_at(s, k_max, load).map(|m| (s, m)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((s, m)) = best {
        let vs = baseline(report)
            .and_then(|r| mean_at(r, k_max, load))
            .map(|r| format!(" ({:.2}× random's {r:.1} ms)", m / r))
            .unwrap_or_default();
        out.push(format!(
            "At K = {k_max} dispatchers and load {load}, the lowest mean response is {} with \
             {m:.1} ms{vs}.",
            s.label()
        ));
    }
    if k_max > k_min {
        for s in report.series.iter().filter(|s| s.view == "local") {
            if let (Some(a), Some(b)) = (mean_at(s, k_min, load), mean_at(s, k_max, load)) {
                out.push(format!(
                    "{} on local counts: mean {a:.1} ms at K = {k_min}, {b:.1} ms at K = \
                     {k_max} ({:.2}×) at load {load}.",
                    s.policy,
                    b / a
                ));
            }
        }
    }
    for s in report.series.iter().filter(|s| s.view == "shared") {
        if let Some(m) = mean_at(s, k_max, load) {
            let to_idle = s
                .points
                .iter()
                .find(|p| p.dispatchers == k_max && p.load == load)
                .map_or(0.0, |p| p.to_idle);
            out.push(format!(
                "{}: mean {m:.1} ms at K = {k_max}, load {load}; {:.0} % of requests went to an \
                 idle node.",
                s.label(),
                to_idle * 100.0
            ));
        }
    }
    out
}

/// The table printed on the terminal: mean and p99 per series at each K, for each load.
pub fn text(report: &TierReport) -> String {
    let mut out = format!(
        "sim tier · {} nodes · K = {:?} · mean service {} ms · {} requests/node · {} \
         replication(s)\n",
        report.nodes,
        report.dispatchers,
        report.service_ms,
        report.jobs_per_node,
        report.replications
    );
    for &load in &report.loads {
        out.push_str(&format!("\nload {load}: mean / p99 response (ms) by K\n"));
        out.push_str(&format!("{:<48}", "policy (view)"));
        for k in &report.dispatchers {
            out.push_str(&format!(" {:>13}", format!("K={k}")));
        }
        out.push('\n');
        for s in &report.series {
            out.push_str(&format!("{:<48}", format!("{} ({})", s.label(), s.view)));
            for &k in &report.dispatchers {
                let cell = s
                    .points
                    .iter()
                    .find(|p| p.dispatchers == k && p.load == load)
                    .map_or("-".into(), |p| {
                        format!("{:.1}/{:.0}", p.mean.value, p.p99.value)
                    });
                out.push_str(&format!(" {cell:>13}"));
            }
            out.push('\n');
        }
    }
    out.push('\n');
    for f in findings(report) {
        out.push_str(&format!("· {f}\n"));
    }
    out
}

/// One chart: a quantity against K at one load, one line per series.
fn chart(
    report: &TierReport,
    load: f64,
    what: &str,
    pick: fn(&super::TierPoint) -> (f64, f64),
) -> Result<String, String> {
    let mut chart = Chart::new(
        format!("{what} response time vs dispatchers, load {load}"),
        "dispatchers (K)",
        format!("{what} response time (ms)"),
    )
    .log_x()
    .size(760, 420);
    for s in &report.series {
        let pts: Vec<_> = s.points.iter().filter(|p| p.load == load).collect();
        let line = pts
            .iter()
            .map(|p| (p.dispatchers as f64, pick(p).0))
            .collect();
        let ci = pts.iter().map(|p| pick(p).1).collect();
        chart.add(Series::new(s.label(), line).with_ci(ci));
    }
    chart.svg()
}

/// The whole HTML page.
pub fn html(report: &TierReport) -> Result<String, String> {
    let mut page = Page::new(
        "capstan sim tier",
        &format!(
            "capstan sim tier: {} nodes, K = {:?}",
            report.nodes, report.dispatchers
        ),
    );
    page.run_info(&[
        ("nodes", report.nodes.to_string()),
        ("dispatchers", format!("{:?}", report.dispatchers)),
        ("loads", format!("{:?}", report.loads)),
        (
            "gossip periods (ms)",
            format!("{:?}", report.gossip_periods_ms),
        ),
        (
            "service",
            format!("exponential, mean {} ms, FCFS", report.service_ms),
        ),
        (
            "requests",
            format!("{} per node per run", report.jobs_per_node),
        ),
        ("seeds", format!("{:?}", report.seeds)),
    ]);
    page.push(
        "<p>Each dispatcher runs its own instance of the policy. <b>local</b>: it counts only the \
         requests it placed itself. <b>shared</b>: the tier's counts, exchanged every gossip \
         period (<i>exact</i>: always current), as core's TierState; power-of-d and \
         join-idle-queue read it by default. Arrivals are Poisson, each to a dispatcher chosen \
         uniformly.</p>",
    );
    page.section("Findings");
    page.list(&findings(report));
    for &load in &report.loads {
        page.section(&format!("Load {load}"));
        page.push(&chart(report, load, "mean", |p| {
            (p.mean.value, p.mean.ci95)
        })?);
        page.push(&chart(report, load, "99th percentile", |p| {
            (p.p99.value, p.p99.ci95)
        })?);
    }
    page.section("Every point (ms, ± 95 % CI over replications)");
    let mut table = Table::new(&[
        "policy", "view", "K", "load", "mean", "p50", "p90", "p99", "to idle",
    ]);
    for s in &report.series {
        for p in &s.points {
            table.row([
                s.label(),
                s.view.to_string(),
                p.dispatchers.to_string(),
                p.load.to_string(),
                with_ci(p.mean.value, p.mean.ci95, 1),
                with_ci(p.p50.value, p.p50.ci95, 1),
                with_ci(p.p90.value, p.p90.ci95, 1),
                with_ci(p.p99.value, p.p99.ci95, 1),
                format!("{:.2}", p.to_idle),
            ]);
        }
    }
    page.push(&table.finish());
    Ok(page.finish())
}
