//! The HTML report: a self-contained page with inline SVG plots (page-latency CDF per policy, as
//! the CAP paper's Figures 4–6; WRR's 90th percentile against T_gat, as its Figure 3) and the
//! summary tables.

use capstan_report::{escape as esc, Chart, Marker, Series, Stroke};

use crate::policy::Metric;
use crate::run::Report;

/// The CDF plot as an SVG document.
pub fn cdf_svg(report: &Report) -> Result<String, String> {
    let mut chart = Chart::cdf(
        format!(
            "{}: cumulative frequency of page latency",
            report.scenario.name
        ),
        "page latency (ms, log scale)",
        "fraction of pages",
    )
    .size(720, 420)
    .x_range(10.0, 100_000.0);
    for p in &report.policies {
        let pts = p.cdf.iter().map(|pt| (pt[0], pt[1])).collect();
        chart.add(Series::new(p.policy.clone(), pts).marker(Marker::None));
    }
    chart.svg()
}

/// The T_gat sensitivity plot (WRR_num and WRR_time, 95 % CI over replications), or `None`
/// without a sweep.
pub fn tgat_svg(report: &Report) -> Result<Option<String>, String> {
    if report.tgat.is_empty() {
        return Ok(None);
    }
    let mut chart = Chart::new(
        format!("{}: WRR 90th percentile vs T_gat", report.scenario.name),
        "T_gat (s)",
        "90th percentile page latency (s)",
    )
    .size(720, 380);
    for (metric, name) in [
        (Metric::Active, "WRR_num"),
        (Metric::ServiceTime, "WRR_time"),
    ] {
        let runs = report.tgat.iter().filter(|t| t.metric == metric);
        let pts = runs
            .clone()
            .map(|t| (t.gather_s, t.p90.value / 1e3))
            .collect();
        let ci = runs.map(|t| t.p90.ci95 / 1e3).collect();
        chart.add(Series::new(name, pts).with_ci(ci));
    }
    // Policies run beside the sweep (RAN and RR in the paper's Fig. 3) do not gather state:
    // they are flat baselines across the swept range.
    let max_x = report.tgat.iter().map(|t| t.gather_s).fold(1.0, f64::max);
    for p in &report.policies {
        let y = p.p90.value / 1e3;
        let flat = Series::new(p.policy.clone(), vec![(0.0, y), (max_x, y)])
            .stroke(Stroke::Dashed)
            .marker(Marker::None);
        chart.add(flat);
    }
    chart.svg().map(Some)
}

/// The whole report page.
pub fn html(report: &Report) -> Result<String, String> {
    let sc = &report.scenario;
    let title = format!("capstan sim: {}", sc.name);
    let mut h = capstan_report::Page::new(&title, &title);
    h.push_str(&format!(
        "<p>{}</p><p>{} nodes, {} new clients/s, {} s simulated \
         ({} s warm-up), {} replications (seeds {:?}).</p>",
        esc(&sc.description),
        report.nodes,
        report.rate,
        report.duration_s,
        report.warmup_s,
        report.replications,
        report.seeds
    ));
    if let Some(p) = crate::scenario::Scenario::paper(&sc.name) {
        h.push_str(&format!(
            "<p><b>Paper ({}):</b> {}</p>",
            p.figure,
            esc(p.finding)
        ));
    }
    h.push_str(&cdf_svg(report)?);
    h.push_str(
        "<h2>Page latency (ms, mean ± 95 % CI over replications)</h2><table><tr><th>policy</th>\
         <th>layer</th><th>pages</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th>\
         <th>cache hit rate</th><th>max node CPU</th><th>max node disk</th><th>max back-end disk</th></tr>",
    );
    let f = |e: &crate::stats::Estimate| format!("{:.0} ± {:.0}", e.value, e.ci95);
    for p in &report.policies {
        let max = |g: fn(&crate::engine::NodeUse) -> f64| p.nodes.iter().map(g).fold(0.0, f64::max);
        h.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{:.3}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td></tr>",
            esc(&p.policy),
            p.layer,
            p.pages,
            f(&p.mean),
            f(&p.p50),
            f(&p.p90),
            f(&p.p99),
            p.cache_hit_rate.value,
            max(|u| u.cpu),
            max(|u| u.disk),
            max(|u| u.backend_disk),
        ));
    }
    h.push_str("</table><h2>Per-node utilisation (CPU / disk / NIC / back-end disk)</h2><table><tr><th>policy</th>");
    for i in 0..report.nodes {
        h.push_str(&format!("<th>n{i}</th>"));
    }
    h.push_str("</tr>");
    for p in &report.policies {
        h.push_str(&format!("<tr><td>{}</td>", esc(&p.policy)));
        for u in &p.nodes {
            h.push_str(&format!(
                "<td>{:.2} / {:.2} / {:.2} / {:.2}</td>",
                u.cpu, u.disk, u.nic, u.backend_disk
            ));
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
    if let Some(svg) = tgat_svg(report)? {
        h.push_str("<h2>WRR sensitivity to T_gat (the paper's Figure 3)</h2>");
        h.push_str(&svg);
    }
    Ok(h.finish())
}
