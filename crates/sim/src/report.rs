//! The HTML report: a self-contained page with inline SVG plots (page-latency CDF per policy, as
//! the CAP paper's Figures 4–6; WRR's 90th percentile against T_gat, as its Figure 3) and the
//! summary tables.

use plotters::prelude::*;

use crate::policy::Metric;
use crate::run::Report;

pub(crate) const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The CDF plot as an SVG document.
pub fn cdf_svg(report: &Report) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{}: cumulative frequency of page latency",
                    report.scenario.name
                ),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((10f64..100_000f64).log_scale(), 0f64..1f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("page latency (ms, log scale)")
            .y_desc("fraction of pages")
            .draw()
            .map_err(err)?;
        for (i, p) in report.policies.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(
                    p.cdf.iter().map(|pt| (pt[0], pt[1])),
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(p.policy.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The T_gat sensitivity plot (WRR_num and WRR_time), or `None` without a sweep.
pub fn tgat_svg(report: &Report) -> Result<Option<String>, String> {
    if report.tgat.is_empty() {
        return Ok(None);
    }
    let max_x = report.tgat.iter().map(|t| t.gather_s).fold(1.0, f64::max);
    let max_y = report
        .tgat
        .iter()
        .map(|t| (t.p90.value + t.p90.ci95) / 1e3)
        .chain(report.policies.iter().map(|p| p.p90.value / 1e3))
        .fold(0.1, f64::max)
        * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{}: WRR 90th percentile vs T_gat", report.scenario.name),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0f64..max_x * 1.05, 0f64..max_y)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc("T_gat (s)")
            .y_desc("90th percentile page latency (s)")
            .draw()
            .map_err(err)?;
        for (i, (metric, name)) in [
            (Metric::Active, "WRR_num"),
            (Metric::ServiceTime, "WRR_time"),
        ]
        .into_iter()
        .enumerate()
        {
            let c = COLOURS[i];
            let pts: Vec<(f64, f64)> = report
                .tgat
                .iter()
                .filter(|t| t.metric == metric)
                .map(|t| (t.gather_s, t.p90.value / 1e3))
                .collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                .map_err(err)?;
        }
        // Policies run beside the sweep (RAN and RR in the paper's Fig. 3) do not gather state:
        // they are flat baselines.
        for (i, p) in report.policies.iter().enumerate() {
            let c = COLOURS[(i + 2) % COLOURS.len()];
            let y = p.p90.value / 1e3;
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, y), (max_x * 1.05, y)],
                    8,
                    4,
                    c.stroke_width(2),
                ))
                .map_err(err)?
                .label(p.policy.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(Some(svg))
}

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The whole report page.
pub fn html(report: &Report) -> Result<String, String> {
    let mut h = String::new();
    let sc = &report.scenario;
    h.push_str("<!doctype html><html><head><meta charset=\"utf-8\"><title>capstan sim: ");
    h.push_str(&esc(&sc.name));
    h.push_str("</title><style>body{font-family:sans-serif;max-width:60em;margin:2em auto}\
        table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}\
        th{background:#eee}td:first-child{text-align:left}</style></head><body>");
    h.push_str(&format!(
        "<h1>capstan sim: {}</h1><p>{}</p><p>{} nodes, {} new clients/s, {} s simulated \
         ({} s warm-up), {} replications (seeds {:?}).</p>",
        esc(&sc.name),
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
    h.push_str("</body></html>\n");
    Ok(h)
}
