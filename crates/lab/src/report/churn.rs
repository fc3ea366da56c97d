//! The churn experiment's report: the summary table, and `index.html` beside `results.json`
//! with the findings, a table of the changes and plots over time of responses, failures and
//! the p99 response time for both memberships.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use capstan_bench::TimelineSecond;
use capstan_report::{escape, Chart, Marker, Page, Series};

use crate::model::churn::{ChurnResults, RegistryKind};
use crate::model::error::LabError;

/// One line per change, then one per membership.
pub fn summary_table(r: &ChurnResults) -> String {
    let mut s = format!(
        "{:<30} {:>6} {:>9} {:>7} {:>7} {:>9} {:>9}\n",
        "change", "at s", "applied s", "nodes", "failed", "p99 ms", "static"
    );
    for c in &r.changes {
        let _ = writeln!(
            s,
            "{:<30} {:>6.1} {:>9.2} {:>7} {:>7} {:>9.1} {:>9.1}",
            c.change.describe(),
            c.at_s,
            c.applied_s,
            c.nodes_after,
            c.errors,
            c.p99_ms,
            c.static_p99_ms
        );
    }
    let _ = writeln!(
        s,
        "\n{:<30} {:>10} {:>7} {:>9} {:>9}",
        "membership", "responses", "failed", "p50 ms", "p99 ms"
    );
    for m in &r.runs {
        let _ = writeln!(
            s,
            "{:<30} {:>10} {:>7} {:>9.1} {:>9.1}",
            m.membership, m.completed, m.failed, m.p50_ms, m.p99_ms
        );
    }
    s
}

/// Writes `results.json` and `index.html` into `out`; returns the page's path.
pub fn write_report(r: &ChurnResults, out: &Path) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(out)
        .map_err(|e| LabError::Report(format!("{}: {e}", out.display())))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report(e.to_string()))?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::Report(format!("cannot write results.json: {e}")))?;
    let mut h = Page::with_style(&r.title, &r.title, "td,th{text-align:left}");
    let _ = write!(
        h,
        "<p>{} nodes behind one switch (least-connections), {} requests/s offered (Poisson, \
         keep-alive) for {} s, twice: with static <code>[[node]]</code>s, and {}</p>\
         <p><code>{}</code></p>",
        r.plan.nodes,
        r.plan.rate,
        r.plan.duration_s,
        registry_text(r),
        escape(&r.command)
    );
    h.section("Findings");
    h.list(&r.findings);
    h.section("Results");
    let _ = write!(h, "<pre>{}</pre>", escape(&summary_table(r)));
    h.push(
        "<p>For each change: when it started, how long the switch took to show the new node \
         set on <code>/status</code> after the registry write(s) (etcd: after each node \
         registered itself or was sent SIGTERM; the outage: after etcd was back), nodes after \
         it, failed \
         requests and the worst one-second p99 in the seconds around it, and the same seconds \
         of the static run.</p>",
    );
    h.section("Over time");
    for (title, y, value) in [
        (
            "responses per second",
            "responses/s",
            per_second(|s| s.completed as f64),
        ),
        (
            "failed requests per second",
            "failed/s",
            per_second(|s| s.errors as f64),
        ),
        (
            "p99 response time per second",
            "ms",
            per_second(|s| s.p99_ms),
        ),
    ] {
        h.push(&timeline_svg(r, title, y, &value)?);
    }
    let path = out.join("index.html");
    std::fs::write(&path, h.finish())
        .map_err(|e| LabError::Report(format!("cannot write index.html: {e}")))?;
    Ok(path)
}

/// How the discovery run's switch found its nodes, for the page's opening paragraph.
fn registry_text(r: &ChurnResults) -> String {
    match r.registry {
        RegistryKind::File => format!(
            "with the nodes from a <code>[[discovery]]</code> file (looked at every {} ms) that \
             the lab rewrites as below. A node leaves the registry first and is stopped once \
             the switch no longer lists it; a new node is ready before it is registered.",
            r.plan.interval_ms
        ),
        RegistryKind::Etcd => "with the nodes from a <code>[[discovery]]</code> etcd prefix \
             (watched) in an etcd the lab starts, each node registering itself \
             (<code>capstan origin --register</code>) once it serves. A node leaves on \
             SIGTERM: it deletes its key, serves 1 s more while the switch drains it, then \
             exits; the registry outage kills etcd and starts it again on its data."
            .into(),
    }
}

type PerSecond = Box<dyn Fn(&TimelineSecond) -> f64>;

fn per_second(f: impl Fn(&TimelineSecond) -> f64 + 'static) -> PerSecond {
    Box::new(f)
}

fn timeline_svg(
    r: &ChurnResults,
    title: &str,
    y: &str,
    value: &PerSecond,
) -> Result<String, LabError> {
    let changes: Vec<String> = (r.changes.iter())
        .map(|c| format!("{:.0} s {}", c.at_s, c.change.describe()))
        .collect();
    let mut chart = Chart::new(
        format!("{title} (changes: {})", changes.join("; ")),
        "seconds since the load started",
        y,
    )
    .size(760, 360);
    for m in &r.runs {
        let points = m.timeline.iter().map(|s| (s.t as f64, value(s))).collect();
        chart.add(Series::new(m.membership.as_str(), points).marker(Marker::None));
    }
    chart.svg().map_err(LabError::Report)
}
