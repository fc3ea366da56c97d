//! The HTML page of a nodes or rate sweep: 90th-percentile page latency per policy against the
//! swept value (with 95 % CI error bars), and the table of every point.

use capstan_report::html::with_ci;
use capstan_report::{Chart, Page, Series, Table};

use crate::sweep::{Axis, SweepReport};

/// 90th percentile (seconds) against the swept value, one line per policy.
pub fn sweep_svg(report: &SweepReport) -> Result<String, String> {
    let mut chart = Chart::new(
        format!(
            "{}: 90th percentile vs {}",
            report.scenario,
            report.axis.label()
        ),
        report.axis.label(),
        "90th percentile page latency (s)",
    )
    .size(720, 420);
    for s in &report.series {
        let pts = s.points.iter().map(|p| (p.x, p.p90.value / 1e3)).collect();
        let ci = s.points.iter().map(|p| p.p90.ci95 / 1e3).collect();
        chart.add(Series::new(s.policy.clone(), pts).with_ci(ci));
    }
    chart.svg()
}

/// The whole sweep page.
pub fn sweep_html(report: &SweepReport) -> Result<String, String> {
    let fixed = match report.axis {
        Axis::Nodes => format!("{} new clients/s", report.rate),
        Axis::Rate => format!("{} nodes", report.nodes),
    };
    let heading = format!(
        "capstan sim: {}, sweep of {}",
        report.scenario,
        report.axis.label()
    );
    let mut page = Page::new(&format!("capstan sim sweep: {}", report.scenario), &heading);
    page.push(&format!(
        "<p>{fixed}, {d} s simulated, {r} replications (seeds {seeds:?}); the CAP paper's \
         Table 1 range is 2–32 nodes and 100–300 clients/s.</p>",
        d = report.duration_s,
        r = report.replications,
        seeds = report.seeds,
    ));
    page.push(&sweep_svg(report)?);
    page.section(&format!(
        "Page latency by {} (ms, ± 95 % CI)",
        report.axis.label()
    ));
    let mut table = Table::new(&[
        "policy",
        "x",
        "p90",
        "mean",
        "P(≤5 s)",
        "hit rate",
        "max CPU",
        "max disk",
    ]);
    for s in &report.series {
        for p in &s.points {
            table.row([
                s.policy.clone(),
                p.x.to_string(),
                with_ci(p.p90.value, p.p90.ci95, 0),
                with_ci(p.mean.value, p.mean.ci95, 0),
                format!("{:.2}", p.within_5s),
                format!("{:.3}", p.cache_hit_rate),
                format!("{:.2}", p.max_cpu),
                format!("{:.2}", p.max_disk),
            ]);
        }
    }
    page.push(&table.finish());
    Ok(page.finish())
}
