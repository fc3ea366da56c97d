//! The Bakhtiyari thesis's Table 4.4 / 4.7 layout, "better performer per scenario and metric",
//! recomputed from a cache experiment's data: for each phase and metric (throughput, hit and
//! miss response time, DHR, BHR, CPU per 1,000 responses) which contender did better and by
//! how much, and beside it the thesis's own verdict where its `[[paper]]` rows give numbers
//! for that phase — agree or disagree. Values within 2 % of each other are "level".
//!
//! Pure: a function of [`CacheResults`], no I/O.

use std::fmt::Write as _;

use crate::model::cache::{CacheResults, Call, Metric, Verdict};
use capstan_report::escape;

/// Two values closer than this (relative to the larger) are level.
pub const LEVEL: f64 = 0.02;

/// The better of `values` for a metric; level within [`LEVEL`].
pub fn call(values: &[(String, f64)], higher_is_better: bool) -> Call {
    let mut v: Vec<&(String, f64)> = values.iter().collect();
    v.sort_by(|a, b| {
        if higher_is_better {
            b.1.total_cmp(&a.1)
        } else {
            a.1.total_cmp(&b.1)
        }
    });
    let (Some(best), Some(next)) = (v.first(), v.get(1)) else {
        return Call {
            better: None,
            by_percent: None,
            compared: false,
        };
    };
    let larger = best.1.abs().max(next.1.abs());
    if larger == 0.0 || (best.1 - next.1).abs() / larger <= LEVEL {
        return Call {
            better: None,
            by_percent: None,
            compared: true,
        };
    }
    // "By how much": the better value over the runner-up's (higher is better), or the
    // runner-up's time over the better one's (lower is better).
    let (num, den) = if higher_is_better {
        (best.1, next.1)
    } else {
        (next.1, best.1)
    };
    Call {
        better: Some(best.0.clone()),
        by_percent: (den > 0.0).then(|| ((num / den - 1.0) * 1000.0).round() / 10.0),
        compared: true,
    }
}

/// The phases in the order the first contender that ran went through them.
fn phase_names(r: &CacheResults) -> Vec<String> {
    r.contenders
        .iter()
        .find_map(|c| c.result.as_ref())
        .map(|res| res.phases.iter().map(|p| p.name.clone()).collect())
        .unwrap_or_default()
}

/// The table: one [`Verdict`] per phase and metric that at least one contender measured.
pub fn better_performers(r: &CacheResults) -> Vec<Verdict> {
    let mut out = Vec::new();
    for phase in phase_names(r) {
        for m in Metric::ALL {
            let values: Vec<(String, f64)> = r
                .contenders
                .iter()
                .filter_map(|c| Some((c.name.clone(), m.ours(c, &phase)?)))
                .collect();
            let thesis_values: Vec<(String, f64)> = r
                .paper
                .iter()
                .filter(|p| p.phase == phase)
                .filter_map(|p| Some((p.contender.clone(), m.thesis(p)?)))
                .collect();
            if values.is_empty() && thesis_values.is_empty() {
                continue;
            }
            let ours = call(&values, m.higher_is_better());
            let (thesis, against_thesis) = if thesis_values.len() >= 2 {
                let t = call(&thesis_values, m.higher_is_better());
                let same: Vec<(String, f64)> = values
                    .iter()
                    .filter(|(n, _)| thesis_values.iter().any(|(t, _)| t == n))
                    .cloned()
                    .collect();
                let against = if same.len() == thesis_values.len() {
                    let o = call(&same, m.higher_is_better());
                    if o.better == t.better {
                        "agree"
                    } else {
                        "disagree"
                    }
                    .to_string()
                } else {
                    let missing: Vec<&str> = thesis_values
                        .iter()
                        .filter(|(t, _)| !same.iter().any(|(n, _)| n == t))
                        .map(|(t, _)| t.as_str())
                        .collect();
                    format!("not compared: no {} data", missing.join(", "))
                };
                (Some(t), Some(against))
            } else {
                (None, None)
            };
            out.push(Verdict {
                phase: phase.clone(),
                metric: m.label().to_string(),
                values,
                ours,
                thesis,
                against_thesis,
            });
        }
    }
    out
}

/// The contenders that ran, in the experiment's order (the table's value columns).
fn columns(r: &CacheResults) -> Vec<&str> {
    r.contenders
        .iter()
        .filter(|c| c.result.is_some())
        .map(|c| c.name.as_str())
        .collect()
}

fn value_of(v: &Verdict, name: &str) -> String {
    v.values
        .iter()
        .find(|(n, _)| n == name)
        .map_or_else(|| "–".into(), |(_, x)| format!("{x:.1}"))
}

/// The table as text: phase, metric, a value per contender, our call, the thesis's, agreement.
pub fn verdict_table(r: &CacheResults) -> String {
    let cols = columns(r);
    let mut s = String::from("Better performer per phase and metric (ties within 2 % are level)\n");
    let _ = write!(s, "{:<6} {:<18}", "phase", "metric");
    for c in &cols {
        let _ = write!(s, " {c:>13}");
    }
    let _ = writeln!(s, "  {:<26} {:<26} vs thesis", "better (ours)", "thesis");
    for v in better_performers(r) {
        let _ = write!(s, "{:<6} {:<18}", v.phase, v.metric);
        for c in &cols {
            let _ = write!(s, " {:>13}", value_of(&v, c));
        }
        let _ = writeln!(
            s,
            "  {:<26} {:<26} {}",
            v.ours.text(),
            v.thesis.as_ref().map_or_else(|| "–".into(), Call::text),
            v.against_thesis.as_deref().unwrap_or("–")
        );
    }
    s
}

/// The same table in HTML.
pub fn verdict_html(r: &CacheResults) -> String {
    let cols = columns(r);
    let mut h = String::from(
        "<h2>Better performer per scenario and metric (the thesis's Tables 4.4 and 4.7)</h2>\
         <p>Recomputed from this run; values within 2 % are level. \"thesis\" is the thesis's \
         call among the contenders its numbers cover for that phase, and whether ours (among \
         the same contenders) agrees. Ours are phase means; a few of the thesis's numbers \
         are the phase's end (see each row's source below), and its durations and cache \
         sizes were the --full run's.</p><table class=verdicts><tr><th>phase</th><th>metric</th>",
    );
    for c in &cols {
        let _ = write!(h, "<th>{}</th>", escape(c));
    }
    h.push_str("<th>better (ours)</th><th>thesis</th><th>vs thesis</th></tr>");
    for v in better_performers(r) {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td>",
            escape(&v.phase),
            escape(&v.metric)
        );
        for c in &cols {
            let _ = write!(h, "<td>{}</td>", value_of(&v, c));
        }
        let _ = write!(
            h,
            "<td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&v.ours.text()),
            escape(&v.thesis.as_ref().map_or_else(|| "–".into(), Call::text)),
            escape(v.against_thesis.as_deref().unwrap_or("–"))
        );
    }
    h.push_str("</table>");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cache::{ContenderResult, PaperRow, PhaseSurrogates, Surrogates};
    use capstan_bench::polygraph::{Latency, PhaseResult, PolyResult};

    /// A contender's top1: throughput, hit and miss means, DHR, BHR, CPU ms per 1,000.
    fn contender(name: &str, top1: (f64, f64, f64, f64, f64, Option<f64>)) -> ContenderResult {
        let (rps, hit, miss, dhr, bhr, cpu) = top1;
        let ms = |mean| Latency {
            count: 1,
            mean,
            ..Default::default()
        };
        let phase = PhaseResult {
            name: "top1".into(),
            throughput_rps: rps,
            responses: 1000,
            hits: 400,
            misses: 600,
            hit_bytes: 4,
            miss_bytes: 6,
            dhr,
            bhr,
            hit_ms: ms(hit),
            miss_ms: ms(miss),
            ..Default::default()
        };
        ContenderResult {
            name: name.into(),
            result: Some(PolyResult {
                phases: vec![phase],
                ..Default::default()
            }),
            surrogates: cpu.map(|c| Surrogates {
                phases: vec![PhaseSurrogates {
                    phase: "top1".into(),
                    cpu_ms_per_1k: Some(c),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn paper(contender: &str, rps: f64, hit: f64, dhr: f64) -> PaperRow {
        PaperRow {
            contender: contender.into(),
            phase: "top1".into(),
            throughput_rps: Some(rps),
            hit_ms: Some(hit),
            dhr: Some(dhr),
            ..Default::default()
        }
    }

    fn results() -> CacheResults {
        CacheResults {
            contenders: vec![
                contender("capstan", (330.0, 1.0, 301.0, 0.50, 0.40, Some(20.0))),
                contender("varnish", (321.0, 2.0, 300.0, 0.27, 0.45, Some(46.0))),
                contender("trafficserver", (320.0, 16.0, 303.0, 0.31, 0.30, None)),
                ContenderResult {
                    name: "skipped".into(),
                    skipped: Some("not installed".into()),
                    ..Default::default()
                },
            ],
            // The thesis: level throughput, Varnish's faster hits, Traffic Server's higher DHR.
            paper: vec![
                paper("varnish", 320.0, 3.0, 27.0),
                paper("trafficserver", 320.0, 16.0, 30.7),
            ],
            ..Default::default()
        }
    }

    fn row(v: &[Verdict], metric: Metric) -> &Verdict {
        v.iter().find(|x| x.metric == metric.label()).unwrap()
    }

    #[test]
    fn better_performer_and_margin_per_metric() {
        let v = better_performers(&results());
        assert_eq!(v.len(), 6, "{v:?}");
        // 330 against 321: 2.8 % more, beyond the 2 % tie band.
        let t = row(&v, Metric::Throughput);
        assert_eq!(t.ours.better.as_deref(), Some("capstan"));
        assert_eq!(t.ours.by_percent, Some(2.8));
        assert_eq!(t.values.len(), 3);
        // Lower is better for times: 2 ms against 1 ms is Capstan by 100 %.
        let h = row(&v, Metric::HitMs);
        assert_eq!(h.ours.better.as_deref(), Some("capstan"));
        assert_eq!(h.ours.by_percent, Some(100.0));
        // 300, 301, 303 ms: within 2 % of each other.
        let m = row(&v, Metric::MissMs);
        assert_eq!((m.ours.better.as_deref(), m.ours.compared), (None, true));
        assert_eq!(row(&v, Metric::Bhr).ours.better.as_deref(), Some("varnish"));
        // Only two contenders were sampled; Varnish used 2.3× Capstan's CPU.
        let c = row(&v, Metric::CpuPer1k);
        assert_eq!(c.values.len(), 2);
        assert_eq!(c.ours.better.as_deref(), Some("capstan"));
        assert_eq!(c.ours.by_percent, Some(130.0));
        assert_eq!(c.thesis, None);
    }

    #[test]
    fn the_thesis_call_is_checked_among_its_own_contenders() {
        let v = better_performers(&results());
        // Thesis 320 = 320: level; ours 321 vs 320 (Varnish and Traffic Server only): level.
        let t = row(&v, Metric::Throughput);
        assert_eq!(t.thesis.as_ref().unwrap().better, None);
        assert_eq!(t.against_thesis.as_deref(), Some("agree"));
        // Thesis: Varnish's hits faster; ours too (Capstan is not in the thesis's pair).
        let h = row(&v, Metric::HitMs);
        assert_eq!(
            h.thesis.as_ref().unwrap().better.as_deref(),
            Some("varnish")
        );
        assert_eq!(h.against_thesis.as_deref(), Some("agree"));
        // Thesis: Traffic Server's DHR higher (30.7 against 27: by 13.7 %); ours as well.
        let d = row(&v, Metric::Dhr);
        let thesis = d.thesis.as_ref().unwrap();
        assert_eq!(thesis.better.as_deref(), Some("trafficserver"));
        assert_eq!(thesis.by_percent, Some(13.7));
        assert_eq!(d.against_thesis.as_deref(), Some("agree"));
        // No thesis numbers for misses and BHR in these rows.
        assert_eq!(row(&v, Metric::MissMs).against_thesis, None);
        // Ours flipped: disagree.
        let mut r = results();
        r.contenders[1] = contender("varnish", (321.0, 20.0, 300.0, 0.40, 0.45, None));
        let v = better_performers(&r);
        assert_eq!(
            row(&v, Metric::HitMs).against_thesis.as_deref(),
            Some("disagree")
        );
        assert_eq!(
            row(&v, Metric::Dhr).against_thesis.as_deref(),
            Some("disagree")
        );
        // Traffic Server did not run: no comparison, and the reason.
        r.contenders.remove(2);
        let v = better_performers(&r);
        assert_eq!(
            row(&v, Metric::Dhr).against_thesis.as_deref(),
            Some("not compared: no trafficserver data")
        );
    }

    #[test]
    fn ties_single_values_and_zeros() {
        let vals = |v: &[(&str, f64)]| -> Vec<(String, f64)> {
            v.iter().map(|(n, x)| (n.to_string(), *x)).collect()
        };
        let level = call(&vals(&[("a", 100.0), ("b", 98.5)]), true);
        assert_eq!((level.better, level.compared), (None, true));
        let beyond = call(&vals(&[("a", 100.0), ("b", 97.0)]), true);
        assert_eq!(beyond.better.as_deref(), Some("a"));
        let alone = call(&vals(&[("a", 1.0)]), true);
        assert!(!alone.compared);
        assert_eq!(alone.text(), "–");
        let zeros = call(&vals(&[("a", 0.0), ("b", 0.0)]), true);
        assert_eq!(zeros.text(), "level");
        // A DHR of 30 % against 0 %: better, but by no finite percentage.
        let from_zero = call(&vals(&[("a", 0.0), ("b", 30.0)]), true);
        assert_eq!(from_zero.text(), "b");
    }

    #[test]
    fn text_and_html_tables_name_every_row() {
        let r = results();
        let text = verdict_table(&r);
        assert!(text.contains("Better performer"), "{text}");
        assert!(text.contains("capstan by 2.8 %"), "{text}");
        assert!(
            text.contains("agree") && text.contains("trafficserver by 14 %"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 2 + 6);
        assert!(!text.contains("skipped"));
        let html = verdict_html(&r);
        assert!(html.contains("Better performer per scenario and metric"));
        assert_eq!(html.matches("<tr>").count(), 1 + 6);
    }
}
