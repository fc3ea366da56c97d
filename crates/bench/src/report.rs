//! Self-contained HTML report with inline SVG plots: throughput over time, latency over time,
//! and the latency percentile spectrum (corrected and uncorrected).

use plotters::prelude::*;

use crate::result::{decode_hist, RunResult};

type Series = (&'static str, RGBColor, Vec<(f64, f64)>);

/// Mesh, one line per series and the legend, on either kind of x axis.
fn draw_lines<'a, DB, X>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, plotters::coord::types::RangedCoordf64>>,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) where
    DB: DrawingBackend + 'a,
    X: Ranged<ValueType = f64> + plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let _ = chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw();
    for (name, color, data) in series {
        let c = *color;
        if let Ok(a) = chart.draw_series(LineSeries::new(data.iter().copied(), c.stroke_width(2))) {
            a.label(*name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], c));
        }
    }
    let _ = chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE)
        .draw();
}

fn plot(title: &str, x_label: &str, y_label: &str, series: &[Series], log_x: bool) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 320)).into_drawing_area();
        let _ = root.fill(&WHITE);
        let pts = series.iter().flat_map(|s| s.2.iter());
        let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
        for &(x, y) in pts {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
        if x0 > x1 {
            (x0, x1) = (0.0, 1.0);
        }
        if x1 <= x0 {
            x1 = x0 + 1.0;
        }
        let y1 = if y1 > 0.0 { y1 * 1.05 } else { 1.0 };
        let mut b = ChartBuilder::on(&root);
        b.caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(60);
        if log_x {
            if let Ok(mut chart) =
                b.build_cartesian_2d((x0.max(1.0)..x1.max(2.0)).log_scale(), 0.0..y1)
            {
                draw_lines(&mut chart, x_label, y_label, series);
            }
        } else if let Ok(mut chart) = b.build_cartesian_2d(x0..x1, 0.0..y1) {
            draw_lines(&mut chart, x_label, y_label, series);
        }
        let _ = root.present();
    }
    svg
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

pub fn html(r: &RunResult) -> String {
    let tl = &r.timeline;
    let t = |f: &dyn Fn(&crate::result::TimelineSecond) -> f64| -> Vec<(f64, f64)> {
        tl.iter().map(|s| (s.t as f64, f(s))).collect()
    };
    let throughput = plot(
        "Throughput per second",
        "seconds",
        "requests/s",
        &[
            ("offered", RGBColor(120, 120, 120), t(&|s| s.offered as f64)),
            ("started", BLUE, t(&|s| s.started as f64)),
            ("completed", GREEN, t(&|s| s.completed as f64)),
            ("errors", RED, t(&|s| s.errors as f64)),
        ],
        false,
    );
    let latency = plot(
        "Corrected latency per second",
        "seconds",
        "ms",
        &[
            ("p50", BLUE, t(&|s| s.p50_ms)),
            ("p99", RED, t(&|s| s.p99_ms)),
        ],
        false,
    );
    // Percentile spectrum: x = 1 / (1 − q), the HdrHistogram convention.
    let spectrum = |enc: &str| -> Vec<(f64, f64)> {
        let Ok(h) = decode_hist(enc) else {
            return Vec::new();
        };
        if h.is_empty() {
            return Vec::new();
        }
        let mut v = Vec::new();
        let mut q = 0.0;
        while q < 0.99999 {
            v.push((1.0 / (1.0 - q), h.value_at_quantile(q) as f64 / 1000.0));
            q = 1.0 - (1.0 - q) * 0.85;
        }
        v
    };
    let pct = plot(
        "Latency by percentile (x = 1/(1−q): 10 = p90, 100 = p99, 1000 = p99.9)",
        "1/(1−q)",
        "ms",
        &[
            ("corrected", RED, spectrum(&r.histograms.corrected)),
            ("uncorrected", BLUE, spectrum(&r.histograms.uncorrected)),
        ],
        true,
    );
    let l = &r.latency_ms;
    let mut rows = String::new();
    for (name, p) in [
        ("corrected", &l.corrected),
        ("uncorrected", &l.uncorrected),
        ("lag", &r.lag_ms),
        ("connect", &r.connect_ms),
        ("ttfb", &r.ttfb_ms),
    ] {
        rows += &format!(
            "<tr><td>{name}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td><td>{:.3}</td></tr>",
            p.count, p.mean, p.p50, p.p90, p.p99, p.p999, p.max
        );
    }
    let mut classes = String::new();
    for (name, c) in &r.per_class {
        classes += &format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{:.3}</td></tr>",
            esc(name),
            c.requests,
            c.errors,
            c.bytes,
            c.latency_ms.p50,
            c.latency_ms.p99
        );
    }
    let errors: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let warnings: String = r
        .generator
        .warnings
        .iter()
        .map(|w| format!("<p class=warn>⚠ {}</p>", esc(w)))
        .collect();
    format!(
        "<!doctype html><html><head><meta charset=utf-8><title>capstan bench: {target}</title>\
<style>body{{font-family:sans-serif;max-width:800px;margin:auto}}table{{border-collapse:collapse}}\
td,th{{border:1px solid #ccc;padding:2px 6px;text-align:right}}.warn{{color:#b00}}</style></head><body>\
<h1>capstan bench</h1><p>{target} — {engine} engine, shards {shards}, {dur:.1} s</p>{warnings}\
<p>offered {offered} ({orps:.1}/s configured) · started {started} · completed {completed} ({crps:.1}/s) · \
dropped {dropped} · unfinished {unfinished} · errors {etotal} {errors}</p>\
<table><tr><th></th><th>count</th><th>mean</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>{rows}</table>\
<p>(milliseconds)</p>{throughput}{latency}{pct}\
<h2>Per class</h2><table><tr><th>class</th><th>requests</th><th>errors</th><th>bytes</th><th>p50 ms</th><th>p99 ms</th></tr>{classes}</table>\
</body></html>\n",
        target = esc(&r.target),
        engine = r.engine,
        shards = r.shards.join(", "),
        dur = r.duration_s,
        offered = r.offered,
        orps = r.offered_rps,
        started = r.started,
        completed = r.completed,
        crps = r.completed_rps,
        dropped = r.dropped,
        unfinished = r.unfinished,
        etotal = r.errors_total,
        errors = esc(&errors.join(", ")),
    )
}
