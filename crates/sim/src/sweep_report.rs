//! The HTML page of a nodes or rate sweep: 90th-percentile page latency per policy against the
//! swept value (with 95 % CI error bars), and the table of every point.

use plotters::prelude::*;

use crate::report::COLOURS;
use crate::sweep::{Axis, SweepReport};

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}

/// 90th percentile (seconds, log scale) against the swept value, one line per policy.
pub fn sweep_svg(report: &SweepReport) -> Result<String, String> {
    let xs = || report.values.iter().copied();
    let (lo, hi) = (xs().fold(f64::MAX, f64::min), xs().fold(0.0, f64::max));
    let pad = ((hi - lo) * 0.05).max(0.5);
    let ys = || {
        report
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.p90.value / 1e3))
    };
    let y_min = ys().fold(f64::MAX, f64::min).max(0.01) / 1.5;
    let y_max = ys().fold(0.0, f64::max).max(y_min * 10.0) * 1.5;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "{}: 90th percentile vs {}",
                    report.scenario,
                    report.axis.label()
                ),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d((lo - pad)..(hi + pad), (y_min..y_max).log_scale())
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc(report.axis.label())
            .y_desc("90th percentile page latency (s, log)")
            .draw()
            .map_err(err)?;
        for (i, s) in report.series.iter().enumerate() {
            let c = COLOURS[i % COLOURS.len()];
            let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (p.x, p.p90.value / 1e3)).collect();
            chart
                .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                .map_err(err)?
                .label(s.policy.clone())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart
                .draw_series(s.points.iter().map(|p| {
                    let v = p.p90.value / 1e3;
                    let ci = p.p90.ci95 / 1e3;
                    PathElement::new(
                        vec![(p.x, (v - ci).max(y_min)), (p.x, v + ci)],
                        c.stroke_width(1),
                    )
                }))
                .map_err(err)?;
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, c.filled())))
                .map_err(err)?;
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
    Ok(svg)
}

/// The whole sweep page.
pub fn sweep_html(report: &SweepReport) -> Result<String, String> {
    let fixed = match report.axis {
        Axis::Nodes => format!("{} new clients/s", report.rate),
        Axis::Rate => format!("{} nodes", report.nodes),
    };
    let mut h = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>capstan sim sweep: {name}\
         </title><style>body{{font-family:sans-serif;max-width:60em;margin:2em auto}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:2px 6px;\
         text-align:right}}th{{background:#eee}}td:first-child{{text-align:left}}</style>\
         </head><body><h1>capstan sim: {name}, sweep of {axis}</h1><p>{fixed}, {d} s simulated, \
         {r} replications (seeds {seeds:?}); the CAP paper's Table 1 range is 2–32 nodes and \
         100–300 clients/s.</p>",
        name = report.scenario,
        axis = report.axis.label(),
        d = report.duration_s,
        r = report.replications,
        seeds = report.seeds,
    );
    h.push_str(&sweep_svg(report)?);
    h.push_str(&format!(
        "<h2>Page latency by {} (ms, ± 95 % CI)</h2><table><tr><th>policy</th><th>x</th>\
         <th>p90</th><th>mean</th><th>P(≤5 s)</th><th>hit rate</th><th>max CPU</th>\
         <th>max disk</th></tr>",
        report.axis.label()
    ));
    for s in &report.series {
        for p in &s.points {
            h.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{:.0} ± {:.0}</td><td>{:.0} ± {:.0}</td>\
                 <td>{:.2}</td><td>{:.3}</td><td>{:.2}</td><td>{:.2}</td></tr>",
                s.policy.replace('<', "&lt;"),
                p.x,
                p.p90.value,
                p.p90.ci95,
                p.mean.value,
                p.mean.ci95,
                p.within_5s,
                p.cache_hit_rate,
                p.max_cpu,
                p.max_disk
            ));
        }
    }
    h.push_str("</table></body></html>\n");
    Ok(h)
}
