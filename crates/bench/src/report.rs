//! Self-contained HTML report with inline SVG plots: throughput over time, latency over time,
//! and the latency percentile spectrum (corrected and uncorrected).

use capstan_report::{escape as esc, Chart, Marker, Page, Series, Table};

use crate::result::{decode_hist, RunResult};

/// One chart of per-second or percentile lines, named at their ends; an empty string when
/// plotting fails (the tables still carry the numbers).
fn plot(title: &str, x_label: &str, y_label: &str, series: Vec<Series>, log_x: bool) -> String {
    let mut chart = Chart::new(title, x_label, y_label).size(760, 320);
    if log_x {
        chart = chart.log_x();
    }
    for s in series {
        chart.add(s.marker(Marker::None));
    }
    chart.svg().unwrap_or_default()
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
        vec![
            Series::new("offered", t(&|s| s.offered as f64)),
            Series::new("started", t(&|s| s.started as f64)),
            Series::new("completed", t(&|s| s.completed as f64)),
            Series::new("errors", t(&|s| s.errors as f64)),
        ],
        false,
    );
    let latency = plot(
        "Corrected latency per second",
        "seconds",
        "ms",
        vec![
            Series::new("p50", t(&|s| s.p50_ms)),
            Series::new("p99", t(&|s| s.p99_ms)),
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
        vec![
            Series::new("corrected", spectrum(&r.histograms.corrected)),
            Series::new("uncorrected", spectrum(&r.histograms.uncorrected)),
        ],
        true,
    );
    let l = &r.latency_ms;
    let mut latency_table = Table::new(&["", "count", "mean", "p50", "p90", "p99", "p99.9", "max"]);
    for (name, p) in [
        ("corrected", &l.corrected),
        ("uncorrected", &l.uncorrected),
        ("lag", &r.lag_ms),
        ("connect", &r.connect_ms),
        ("ttfb", &r.ttfb_ms),
    ] {
        let ms = |v: f64| format!("{v:.3}");
        latency_table.row([
            name.to_string(),
            p.count.to_string(),
            ms(p.mean),
            ms(p.p50),
            ms(p.p90),
            ms(p.p99),
            ms(p.p999),
            ms(p.max),
        ]);
    }
    let mut classes = Table::new(&["class", "requests", "errors", "bytes", "p50 ms", "p99 ms"]);
    for (name, c) in &r.per_class {
        classes.row([
            name.clone(),
            c.requests.to_string(),
            c.errors.to_string(),
            c.bytes.to_string(),
            format!("{:.3}", c.latency_ms.p50),
            format!("{:.3}", c.latency_ms.p99),
        ]);
    }
    let errors: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    let mut page = Page::new(&format!("capstan bench: {}", r.target), "capstan bench");
    page.run_info(&[
        ("Target", r.target.clone()),
        (
            "Run",
            format!(
                "{} engine, shards {}, {:.1} s",
                r.engine,
                r.shards.join(", "),
                r.duration_s
            ),
        ),
    ]);
    for w in &r.generator.warnings {
        page.push(&format!("<p class=warn>⚠ {}</p>", esc(w)));
    }
    page.push(&format!(
        "<p>offered {} ({:.1}/s configured) · started {} · completed {} ({:.1}/s) · \
         dropped {} · unfinished {} · errors {} {}</p>",
        r.offered,
        r.offered_rps,
        r.started,
        r.completed,
        r.completed_rps,
        r.dropped,
        r.unfinished,
        r.errors_total,
        esc(&errors.join(", ")),
    ));
    page.push(&latency_table.finish());
    page.push("<p>(milliseconds)</p>");
    page.push(&throughput);
    page.push(&latency);
    page.push(&pct);
    page.section("Per class");
    page.push(&classes.finish());
    page.finish()
}
