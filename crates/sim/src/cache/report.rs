//! The eviction study's HTML report: a self-contained page with two inline SVG plots (DHR and
//! BHR against cache size, one line per policy, Belady drawn last so it sits on top) and the
//! tables behind them, in the style of the cluster simulator's report.

use capstan_report::{escape as esc, palette, Chart, Page, Series};

use super::{CacheReport, Point};

/// Which ratio a plot or table shows.
#[derive(Clone, Copy)]
pub enum Ratio {
    Dhr,
    Bhr,
}

impl Ratio {
    fn of(self, p: &Point) -> f64 {
        match self {
            Ratio::Dhr => p.dhr,
            Ratio::Bhr => p.bhr,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Ratio::Dhr => "document hit ratio",
            Ratio::Bhr => "byte hit ratio",
        }
    }
}

/// One ratio against cache size (percent of the working set, log scale) as an SVG document.
pub fn ratio_svg(report: &CacheReport, ratio: Ratio) -> Result<String, String> {
    let lo = report
        .cache_sizes
        .iter()
        .map(|s| s.percent)
        .fold(f64::MAX, f64::min);
    let hi = report
        .cache_sizes
        .iter()
        .map(|s| s.percent)
        .fold(0.0, f64::max);
    let (lo, hi) = (lo / 1.2, (hi * 1.2).max(lo * 2.0));
    let top = report
        .policies
        .iter()
        .flat_map(|p| p.points.iter().map(|x| ratio.of(x)))
        .fold(0.05, f64::max);
    let y_max = (top * 1.1).min(1.0);
    // Belady last, so its line is drawn over the others, in black.
    let mut order: Vec<usize> = (0..report.policies.len()).collect();
    order.sort_by_key(|&i| report.policies[i].policy == "belady");
    let mut chart = Chart::new(
        format!("{} vs cache size", ratio.title()),
        "cache size (% of the working set, log scale)",
        ratio.title(),
    )
    .size(720, 420)
    .log_x()
    .x_range(lo, hi)
    .y_range(0.0, y_max)
    .x_format(percent_label);
    for (n, &i) in order.iter().enumerate() {
        let p = &report.policies[i];
        let pts = p.points.iter().map(|x| (x.percent, ratio.of(x))).collect();
        let colour = if p.policy == "belady" {
            palette::BLACK
        } else {
            palette::colour(n)
        };
        chart.add(Series::new(p.policy.clone(), pts).colour(colour));
    }
    chart.svg()
}

/// Whole percents without a decimal point; the log axis puts its ticks at 1, 2, … 10, 20, ….
fn percent_label(x: f64) -> String {
    if (x - x.round()).abs() < 1e-9 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// Bytes in the largest binary unit that keeps the number at or above 1.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn table(h: &mut Page, report: &CacheReport, ratio: Ratio) {
    h.push_str(&format!(
        "<h2>{}</h2><table><tr><th>policy</th>",
        ratio.title()
    ));
    for s in &report.cache_sizes {
        h.push_str(&format!(
            "<th>{} % ({})</th>",
            s.percent,
            human_bytes(s.bytes)
        ));
    }
    h.push_str("</tr>");
    for p in &report.policies {
        h.push_str(&format!("<tr><td>{}</td>", esc(&p.policy)));
        for x in &p.points {
            h.push_str(&format!("<td>{:.4}</td>", ratio.of(x)));
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
}

/// The whole report page.
pub fn html(report: &CacheReport) -> Result<String, String> {
    let t = &report.trace;
    let mut h = Page::new(
        "capstan sim cache",
        "capstan sim cache: eviction policies on a trace",
    );
    h.push_str(&format!(
        "<p>{}.</p>\
         <p>{} requests for {} distinct objects; working set {} (cache sizes are fractions of \
         it); {} requested; {} requests for uncachable objects.",
        esc(&t.description),
        t.requests,
        t.objects,
        human_bytes(t.working_set_bytes),
        human_bytes(t.requested_bytes),
        t.uncachable_requests
    ));
    if t.source == "clf" {
        h.push_str(&format!(
            " {} log lines, {} not Common Log Format{}, {} without a cachable request.",
            t.lines,
            t.bad_lines,
            t.first_bad_line
                .as_deref()
                .map(|l| format!(" (first: {})", esc(l)))
                .unwrap_or_default(),
            t.skipped_lines
        ));
    }
    h.push_str(
        "</p><p>Every policy is <code>capstan_cache::evict</code>'s code, driven as the switch's \
         store drives it. <b>belady</b> is Belady's offline MIN (evict the object needed furthest \
         in the future; do not admit an object needed later than every candidate victim): the \
         exact optimum of the document hit ratio with unit sizes, a heuristic upper reference \
         with variable sizes, which a size-aware policy can beat.</p>",
    );
    h.push_str(&ratio_svg(report, Ratio::Dhr)?);
    h.push_str(&ratio_svg(report, Ratio::Bhr)?);
    table(&mut h, report, Ratio::Dhr);
    table(&mut h, report, Ratio::Bhr);
    h.push_str("<h2>Replay speed (requests per CPU-second, all sizes)</h2><table><tr><th>policy</th><th>M requests/s</th></tr>");
    for p in &report.policies {
        h.push_str(&format!(
            "<tr><td>{}</td><td>{:.2}</td></tr>",
            esc(&p.policy),
            p.requests_per_s / 1e6
        ));
    }
    h.push_str(&format!(
        "</table><p>{} thread(s), {:.2} s wall.</p>",
        report.run.threads, report.run.wall_s
    ));
    Ok(h.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_like_a_human_wrote_them() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
