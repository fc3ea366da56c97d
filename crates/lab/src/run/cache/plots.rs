//! The cache report's response-time plots: hit and miss response-time CDFs per contender
//! (apart: a hit is served from the proxy's memory in milliseconds, a miss waits for the
//! origin's think time), and response time and throughput against the offered rate over the
//! rising-rate phases (`inc`, `top2` of cache-mixed-inc: Tables 4.5–4.6), where a proxy's
//! saturation point shows as the knee — throughput falling behind the offered rate, or the
//! mean response time climbing.
//!
//! Everything is computed from `results.json`'s data (the runs' CDFs and per-second time
//! lines), so a report can be redrawn from a stored run.

use std::fmt::Write as _;

use capstan_bench::polygraph::{Cdf, PolyResult};
use serde::{Deserialize, Serialize};

use crate::model::cache::CacheResults;
use crate::model::error::LabError;
use capstan_report::escape;

/// The phases whose offered rate rises (the thesis's `inc`) or holds at the peak (`top2`).
const RATE_PHASES: [&str; 2] = ["inc", "top2"];

/// How many offered-rate bins the rate curve has.
const RATE_BINS: usize = 12;

/// One offered-rate bin of the rising-rate phases: the seconds whose scheduled rate fell in it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RateBin {
    /// Mean scheduled rate of the bin's seconds, requests/s.
    pub offered_rps: f64,
    /// Responses per second (the seconds' mean).
    pub throughput_rps: f64,
    /// Mean response time of the bin's responses, and of its hits, ms.
    pub mean_ms: f64,
    pub hit_mean_ms: f64,
    pub seconds: u32,
    pub responses: u64,
}

/// Response time and throughput against the offered rate over the rising-rate phases, in
/// bins of equal width from the lowest to the highest scheduled rate. Empty when the run has
/// no such phase or a best-effort one (no schedule).
pub fn rate_curve(res: &PolyResult) -> Vec<RateBin> {
    let seconds: Vec<_> = res
        .timeline
        .iter()
        .filter(|s| RATE_PHASES.contains(&s.phase.as_str()))
        .filter_map(|s| Some((s.offered_rate?, s)))
        .collect();
    let (lo, hi) = seconds.iter().fold((f64::MAX, 0.0f64), |(lo, hi), (r, _)| {
        (lo.min(*r), hi.max(*r))
    });
    if seconds.is_empty() || hi <= lo {
        return Vec::new();
    }
    let width = (hi - lo) / RATE_BINS as f64;
    // (rate sum, responses, response ms sum, hits, hit ms sum, seconds)
    let mut acc = vec![(0.0, 0u64, 0.0, 0u64, 0.0, 0u32); RATE_BINS];
    for (rate, s) in seconds {
        let i = (((rate - lo) / width) as usize).min(RATE_BINS - 1);
        let a = &mut acc[i];
        a.0 += rate;
        a.1 += s.responses;
        a.2 += s.mean_ms * s.responses as f64;
        a.3 += s.hits;
        a.4 += s.hit_mean_ms * s.hits as f64;
        a.5 += 1;
    }
    let round = |x: f64| (x * 100.0).round() / 100.0;
    acc.into_iter()
        .filter(|a| a.5 > 0)
        .map(|(rates, n, ms, hits, hit_ms, secs)| RateBin {
            offered_rps: round(rates / secs as f64),
            throughput_rps: round(n as f64 / secs as f64),
            mean_ms: round(if n > 0 { ms / n as f64 } else { 0.0 }),
            hit_mean_ms: round(if hits > 0 { hit_ms / hits as f64 } else { 0.0 }),
            seconds: secs,
            responses: n,
        })
        .collect()
}

/// The saturation knee: the lowest offered rate whose bin answered under 90 % of it, or whose
/// mean response time is over twice the first bin's (and 50 ms more). `None`: no knee up to
/// the highest rate offered.
pub fn knee(curve: &[RateBin]) -> Option<&RateBin> {
    let base = curve.first()?.mean_ms;
    curve.iter().find(|b| {
        b.throughput_rps < 0.9 * b.offered_rps || b.mean_ms > (2.0 * base).max(base + 50.0)
    })
}

/// One sentence per contender on where its knee lies (cache-mixed-inc's question).
pub fn knee_findings(r: &CacheResults) -> Vec<String> {
    let mut out = Vec::new();
    for c in &r.contenders {
        let Some(res) = &c.result else { continue };
        let curve = rate_curve(res);
        let Some(last) = curve.last() else { continue };
        out.push(match knee(&curve) {
            Some(k) => format!(
                "{}: saturation knee at ≈ {:.0} req/s offered ({:.0} responses/s, mean response \
                 {:.1} ms against {:.1} ms at {:.0} req/s)",
                c.name,
                k.offered_rps,
                k.throughput_rps,
                k.mean_ms,
                curve[0].mean_ms,
                curve[0].offered_rps
            ),
            None => format!(
                "{}: no saturation knee up to {:.0} req/s offered ({:.0} responses/s, mean \
                 response {:.1} ms, hits {:.2} ms)",
                c.name, last.offered_rps, last.throughput_rps, last.mean_ms, last.hit_mean_ms
            ),
        });
    }
    out
}

/// One line per contender, named at its end; `log_x` for response-time CDFs.
struct Lines<'a> {
    caption: String,
    x_desc: &'a str,
    y_desc: &'a str,
    log_x: bool,
    series: Vec<(String, Vec<(f64, f64)>)>,
}

fn draw(l: Lines) -> Result<String, LabError> {
    use capstan_report::{Chart, Marker, Series};
    let mut chart = if l.log_x {
        Chart::cdf(l.caption, l.x_desc, l.y_desc)
    } else {
        Chart::new(l.caption, l.x_desc, l.y_desc)
    }
    .size(760, 360);
    for (name, pts) in l.series {
        let s = Series::new(name, pts);
        // A CDF has a point per bucket: markers would hide the line.
        chart.add(if l.log_x { s.marker(Marker::None) } else { s });
    }
    chart.svg().map_err(LabError::Report)
}

/// The contenders that ran, with the CDF `pick` chooses (hits or misses) when it has data.
fn cdf_series(r: &CacheResults, pick: fn(&PolyResult) -> &Cdf) -> Vec<(String, Vec<(f64, f64)>)> {
    r.contenders
        .iter()
        .filter_map(|c| {
            let cdf = pick(c.result.as_ref()?);
            (cdf.count > 0).then(|| {
                let pts = cdf
                    .points
                    .iter()
                    .map(|p| (p.ms.max(0.01), p.fraction))
                    .collect();
                (format!("{} ({} responses)", c.name, cdf.count), pts)
            })
        })
        .collect()
}

/// The millisecond value at a fraction of a CDF (the first point at or above it).
pub fn cdf_at(cdf: &Cdf, fraction: f64) -> Option<f64> {
    cdf.points
        .iter()
        .find(|p| p.fraction >= fraction - 1e-12)
        .map(|p| p.ms)
}

/// Per contender: hits and misses, count and p50 / p90 / p99 / max from the CDFs.
pub fn cdf_table(r: &CacheResults) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<13} {:<5} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "contender", "kind", "count", "p50 ms", "p90 ms", "p99 ms", "max ms"
    );
    let ms = |v: Option<f64>| v.map_or_else(|| "–".into(), |x| format!("{x:.2}"));
    for c in &r.contenders {
        let Some(res) = &c.result else { continue };
        for (kind, cdf) in [("hit", &res.hit_cdf), ("miss", &res.miss_cdf)] {
            let _ = writeln!(
                s,
                "{:<13} {:<5} {:>9} {:>9} {:>9} {:>9} {:>9}",
                c.name,
                kind,
                cdf.count,
                ms(cdf_at(cdf, 0.5)),
                ms(cdf_at(cdf, 0.9)),
                ms(cdf_at(cdf, 0.99)),
                ms(cdf_at(cdf, 1.0)),
            );
        }
    }
    s
}

/// The report's response-time section: hit and miss CDFs, then response time and throughput
/// against the offered rate when the experiment has a rising-rate phase.
pub fn plots_html(r: &CacheResults) -> Result<String, LabError> {
    let mut h = String::from(
        "<h2>Response time: hits and misses apart</h2><p>Every response of the run (all \
         phases), its time counted from when the request was due.</p>",
    );
    for (kind, pick) in [
        ("hit", (|p| &p.hit_cdf) as fn(&PolyResult) -> &Cdf),
        ("miss", |p| &p.miss_cdf),
    ] {
        let series = cdf_series(r, pick);
        if series.is_empty() {
            let _ = write!(h, "<p>No {kind} was answered.</p>");
            continue;
        }
        h.push_str(&draw(Lines {
            caption: format!("{kind} response-time CDF"),
            x_desc: "response time (ms, log scale)",
            y_desc: "fraction of responses",
            log_x: true,
            series,
        })?);
    }
    let _ = write!(h, "<pre>{}</pre>", escape(&cdf_table(r)));
    let curves: Vec<(String, Vec<RateBin>)> = r
        .contenders
        .iter()
        .filter_map(|c| Some((c.name.clone(), rate_curve(c.result.as_ref()?))))
        .filter(|(_, v)| !v.is_empty())
        .collect();
    if curves.is_empty() {
        h.push_str(
            "<p>No rising-rate phase (inc) in this experiment: no response time against \
             offered rate.</p>",
        );
        return Ok(h);
    }
    h.push_str(
        "<h2>Response time against offered rate (the saturation knee)</h2><p>The seconds of \
         the inc and top2 phases, in bins of the scheduled rate.</p>",
    );
    let series = |f: fn(&RateBin) -> f64| {
        curves
            .iter()
            .map(|(n, v)| (n.clone(), v.iter().map(|b| (b.offered_rps, f(b))).collect()))
            .collect()
    };
    h.push_str(&draw(Lines {
        caption: "mean response time against offered rate".into(),
        x_desc: "offered rate (requests/s)",
        y_desc: "mean response time (ms)",
        log_x: false,
        series: series(|b| b.mean_ms),
    })?);
    h.push_str(&draw(Lines {
        caption: "throughput against offered rate".into(),
        x_desc: "offered rate (requests/s)",
        y_desc: "responses/s",
        log_x: false,
        series: series(|b| b.throughput_rps),
    })?);
    let mut t = format!(
        "{:<13} {:>9} {:>9} {:>9} {:>9} {:>5}\n",
        "contender", "offered", "resp/s", "mean ms", "hit ms", "secs"
    );
    for (n, v) in &curves {
        for b in v {
            let _ = writeln!(
                t,
                "{:<13} {:>9.1} {:>9.1} {:>9.2} {:>9.2} {:>5}",
                n, b.offered_rps, b.throughput_rps, b.mean_ms, b.hit_mean_ms, b.seconds
            );
        }
    }
    let _ = write!(h, "<pre>{}</pre>", escape(&t));
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_bench::polygraph::{CdfPoint, Second};

    fn second(t: u64, phase: &str, rate: f64, responses: u64, mean_ms: f64) -> Second {
        Second {
            t,
            phase: phase.into(),
            offered_rate: Some(rate),
            responses,
            hits: responses / 2,
            mean_ms,
            hit_mean_ms: 1.0,
            ..Default::default()
        }
    }

    #[test]
    fn the_rate_curve_bins_the_rising_phases_and_finds_the_knee() {
        let mut timeline = vec![second(0, "top1", 100.0, 100, 50.0)];
        // inc from 100 to 1,200 req/s: answered in full up to 600, then capped at 600.
        for i in 0..12u64 {
            let rate = 100.0 + 100.0 * i as f64;
            let done = rate.min(600.0) as u64;
            let ms = if rate > 600.0 { 900.0 } else { 60.0 };
            timeline.push(second(i + 1, "inc", rate, done, ms));
        }
        let res = PolyResult {
            timeline,
            ..Default::default()
        };
        let curve = rate_curve(&res);
        // top1's second is not in it; every inc second is.
        assert_eq!(curve.iter().map(|b| b.seconds).sum::<u32>(), 12);
        assert_eq!(curve[0].offered_rps, 100.0);
        assert_eq!(curve[0].mean_ms, 60.0);
        assert_eq!(curve[0].hit_mean_ms, 1.0);
        let k = knee(&curve).expect("a knee");
        assert_eq!(k.offered_rps, 700.0);
        assert_eq!(k.throughput_rps, 600.0);
        // Without a rising phase (best effort, or no inc) there is no curve.
        let flat = PolyResult {
            timeline: vec![second(0, "top1", 100.0, 100, 5.0)],
            ..Default::default()
        };
        assert!(rate_curve(&flat).is_empty());
        let all_fine: Vec<RateBin> = curve
            .iter()
            .map(|b| RateBin {
                throughput_rps: b.offered_rps,
                mean_ms: 60.0,
                ..b.clone()
            })
            .collect();
        assert!(knee(&all_fine).is_none());
    }

    #[test]
    fn cdf_values_are_read_at_their_fraction() {
        let cdf = Cdf {
            count: 10,
            points: vec![
                CdfPoint {
                    ms: 1.0,
                    fraction: 0.5,
                },
                CdfPoint {
                    ms: 3.0,
                    fraction: 0.9,
                },
                CdfPoint {
                    ms: 300.0,
                    fraction: 1.0,
                },
            ],
        };
        assert_eq!(cdf_at(&cdf, 0.5), Some(1.0));
        assert_eq!(cdf_at(&cdf, 0.6), Some(3.0));
        assert_eq!(cdf_at(&cdf, 1.0), Some(300.0));
        assert_eq!(cdf_at(&Cdf::default(), 0.5), None);
    }
}
