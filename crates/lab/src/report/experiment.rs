//! From results to conclusions: the paper-vs-ours comparison, plain-language findings computed
//! from the data, the one-screen summary, and the self-contained HTML report with SVG plots.

use std::fmt::Write as _;
use std::path::Path;

use crate::model::error::LabError;
use crate::model::experiment::{Experiment, Measure, Paper, SwebCapacity};
use crate::model::results::fmt_level;
use crate::model::results::*;
use capstan_report::{escape, palette, Chart, Estimate, Marker, Page, Series, Stroke};

/// Adds the paper comparison and the findings to `r`.
pub fn conclude(r: &mut LabResults, exp: &Experiment) {
    r.paper = exp.paper.as_ref().map(|p| compare(r, p));
    r.findings = findings(r, exp);
    crate::report::figures::conclude(r, exp);
    r.findings.extend(crate::report::sclient::findings(r, exp));
    if !r.agreement.is_empty() {
        let agree: Vec<&str> = r
            .agreement
            .iter()
            .filter(|a| a.verdict == "agree")
            .map(|a| a.series.as_str())
            .collect();
        r.findings.push(format!(
            "Lab and simulator agree within {:.0} % (throughput, mean and p90 at every level) for {} of {} series{}",
            r.agreement[0].tolerance_pct,
            agree.len(),
            r.agreement.len(),
            if agree.is_empty() {
                String::new()
            } else {
                format!(": {}", agree.join(", "))
            }
        ));
    }
}

fn pct_more(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| round(100.0 * (a - b) / b, 1))
}

fn compare(r: &LabResults, p: &Paper) -> PaperCompare {
    let mut rows = Vec::new();
    for s in &p.series {
        let ours = r.series_named(&s.policy, s.variant.as_deref());
        let label = match &s.variant {
            Some(v) => format!("{} · {v}", s.policy),
            None => s.policy.clone(),
        };
        for pt in &s.points {
            let o = ours.and_then(|o| o.points.iter().find(|q| (q.level - pt[0]).abs() < 1e-9));
            rows.push(PaperRow {
                series: label.clone(),
                level: pt[0],
                paper: pt[1],
                ours: o.map(|q| q.throughput_mean),
            });
        }
    }
    let claims = p
        .claims
        .iter()
        .map(|c| crate::report::claims::claim_row(r, c))
        .collect();
    PaperCompare {
        source: p.source.clone(),
        x: p.x.clone(),
        rows,
        claims,
        notes: p.notes.clone(),
        measures: p.measures.iter().map(|m| measure_row(r, m)).collect(),
        sweb_capacity: p.sweb_capacity.as_ref().map(|c| capacity_row(r, c)),
    }
}

/// A number the paper reports, and ours at the measured level nearest to the paper's.
fn measure_row(r: &LabResults, m: &Measure) -> MeasureRow {
    let point = |policy: &str| {
        r.series_named(policy, m.variant.as_deref())
            .and_then(|s| s.nearest(m.at))
    };
    let (ours, level) = match (point(&m.policy), &m.versus) {
        (Some(a), None) => (Some(m.metric.of(a)), Some(a.level)),
        (Some(a), Some(v)) => match point(v) {
            Some(b) if m.metric.of(b) > 0.0 => {
                (Some(m.metric.of(a) / m.metric.of(b)), Some(a.level))
            }
            _ => (None, None),
        },
        (None, _) => (None, None),
    };
    MeasureRow {
        text: m.text.clone(),
        unit: if m.versus.is_some() {
            "×"
        } else {
            m.metric.unit()
        }
        .into(),
        paper: m.value,
        ours: ours.map(|o| round(o, 3)),
        ours_level: level,
    }
}

/// SWEB §3.3's rate for the experiment's set-up, and the rates each series sustained: the
/// highest offered rate it completed at ≥ 95 % inside the window without errors, and the lowest
/// it fell behind at.
fn capacity_row(r: &LabResults, c: &SwebCapacity) -> CapacityRow {
    let sustained = r
        .series
        .iter()
        .map(|s| {
            let kept_up = |p: &Point| p.errors == 0 && p.throughput_mean >= 0.95 * p.level;
            Sustained {
                series: s.label.clone(),
                kept_up_rps: s
                    .points
                    .iter()
                    .filter(|p| kept_up(p))
                    .map(|p| p.level)
                    .reduce(f64::max),
                fell_behind_rps: s
                    .points
                    .iter()
                    .filter(|p| !kept_up(p))
                    .map(|p| p.level)
                    .reduce(f64::min),
            }
        })
        .collect();
    let inputs = c.inputs();
    CapacityRow {
        formula_rps: round(inputs.max_sustained_rps(), 2),
        seconds_per_request: round(inputs.seconds_per_request(), 5),
        paper_rps: c.paper_rps,
        sustained,
    }
}

/// One series' sustained rates in words.
fn sustained_text(s: &Sustained) -> String {
    match (s.kept_up_rps, s.fell_behind_rps) {
        (Some(k), Some(f)) => format!(
            "{} kept up with {} rps, not {}",
            s.series,
            fmt_level(k),
            fmt_level(f)
        ),
        (Some(k), None) => format!(
            "{} kept up with every rate (to {} rps)",
            s.series,
            fmt_level(k)
        ),
        (None, Some(f)) => format!("{} fell behind already at {} rps", s.series, fmt_level(f)),
        (None, None) => format!("{} not measured", s.series),
    }
}

/// The findings that set the paper's reported numbers beside ours.
fn measure_findings(pc: &PaperCompare, x: &str) -> Vec<String> {
    let mut f = Vec::new();
    for m in &pc.measures {
        let show = |v: f64| match m.unit.as_str() {
            "ms" if v >= 1000.0 => format!("{:.2} s", v / 1000.0),
            "×" => format!("{v:.1}×"),
            u => format!("{v:.1} {u}"),
        };
        let line = match (m.ours, m.ours_level) {
            (Some(o), Some(l)) => {
                let verdict = if m.unit == "×" && (m.paper - 1.0).abs() < 0.05 {
                    // "Comparable": no direction to agree on, only a size.
                    if (0.75..=1.33).contains(&o) {
                        "agrees".to_string()
                    } else {
                        format!("differs ({o:.2}×)")
                    }
                } else if m.unit == "×" {
                    if (o > 1.0) != (m.paper > 1.0) {
                        "disagrees".to_string()
                    } else if (0.5..=2.0).contains(&(o / m.paper)) {
                        "agrees".to_string()
                    } else {
                        "same direction, different size".to_string()
                    }
                } else if m.paper > 0.0 && (0.75..=1.33).contains(&(o / m.paper)) {
                    "agrees".to_string()
                } else if m.paper > 0.0 {
                    format!("{:.2}× the paper's", o / m.paper)
                } else {
                    "not comparable".to_string()
                };
                format!(
                    "Paper: {} ({}). Ours at {} {x}: {} — {verdict}.",
                    m.text,
                    show(m.paper),
                    fmt_level(l),
                    show(o)
                )
            }
            _ => format!(
                "Paper: {} — not measured in this run (policy left out).",
                m.text
            ),
        };
        f.push(line);
    }
    if let Some(c) = &pc.sweb_capacity {
        let paper = c
            .paper_rps
            .map(|p| format!(" (the paper prints {p} for its example)"))
            .unwrap_or_default();
        let sustained: Vec<String> = c.sustained.iter().map(sustained_text).collect();
        f.push(format!(
            "SWEB §3.3: maximum sustained {:.1} rps for this set-up ({:.0} ms of work per request){paper}. Measured (≥ 95 % of the offered rate completed in the window, no errors): {}.",
            c.formula_rps,
            1000.0 * c.seconds_per_request,
            sustained.join("; ")
        ));
    }
    f
}

/// Groups of series that share a variant (policies are compared within a group).
fn groups(r: &LabResults) -> Vec<(Option<String>, Vec<&SeriesResult>)> {
    let mut out: Vec<(Option<String>, Vec<&SeriesResult>)> = Vec::new();
    for s in &r.series {
        match out.iter_mut().find(|(v, _)| *v == s.variant) {
            Some((_, g)) => g.push(s),
            None => out.push((s.variant.clone(), vec![s])),
        }
    }
    out
}

/// The level the comparison sentences use: the paper's claim level if any, else 10 clients if
/// measured (the thesis's reference point), else the middle level.
pub fn key_level(r: &LabResults, exp: &Experiment) -> f64 {
    let want = exp
        .paper
        .as_ref()
        .and_then(|p| p.claims.first())
        .map(|c| c.at)
        .or_else(|| (r.x_label == "clients").then_some(10.0));
    let levels = &r.levels;
    match want {
        Some(w) => *levels
            .iter()
            .min_by(|a, b| (*a - w).abs().total_cmp(&(*b - w).abs()))
            .unwrap_or(&w),
        None => levels[levels.len() / 2],
    }
}

fn findings(r: &LabResults, exp: &Experiment) -> Vec<String> {
    let mut f = Vec::new();
    let key = key_level(r, exp);
    for (variant, g) in groups(r) {
        let tag = variant
            .as_ref()
            .map(|v| format!("[{v}] "))
            .unwrap_or_default();
        f.extend(group_findings(r, exp, &g, key, &tag));
    }
    f.extend(gathering_findings(r, key));
    f.extend(scalability_findings(r));
    if let Some(pc) = &r.paper {
        f.extend(crate::report::claims::findings(pc, &r.x_label));
        f.extend(measure_findings(pc, &r.x_label));
        f.extend(scale_findings(pc));
    }
    f.push(headroom_finding(r));
    f
}

/// The findings of one group of series (one variant): the ranking at the key level, CAP's
/// place, whether the gap closes under heavy load, latency, balance, and overload.
fn group_findings(
    r: &LabResults,
    exp: &Experiment,
    g: &[&SeriesResult],
    key: f64,
    tag: &str,
) -> Vec<String> {
    let mut f = Vec::new();
    let x = &r.x_label;
    let top = r.levels.iter().copied().fold(0.0, f64::max);
    let mut at: Vec<(&SeriesResult, &Point)> = g
        .iter()
        .filter_map(|s| s.nearest(key).map(|p| (*s, p)))
        .collect();
    at.sort_by(|a, b| b.1.throughput_mean.total_cmp(&a.1.throughput_mean));
    if at.len() >= 2 {
        f.extend(ranking_findings(&at, x, tag));
        if top > key {
            f.extend(gap_finding(exp, g, key, top, x, tag));
        }
        let mut lat = at.clone();
        lat.sort_by(|a, b| a.1.p90_ms.total_cmp(&b.1.p90_ms));
        if let (Some(a), Some(b)) = (lat.first(), lat.last()) {
            f.push(format!(
                "{tag}90th-percentile response time at {} {x}: {} {:.0} ms (lowest) … {} {:.0} ms (highest).",
                fmt_level(key),
                a.0.policy,
                a.1.p90_ms,
                b.0.policy,
                b.1.p90_ms
            ));
        }
    }
    f.extend(balance_finding(g, top, x, tag));
    if r.engine == "open" {
        f.extend(overload_findings(g, x, tag));
    }
    f
}

/// Who delivered the most at the key level, by how much, and CAP's place when it was not first
/// (CAP is what the papers are about). `at` is sorted best first.
fn ranking_findings(at: &[(&SeriesResult, &Point)], x: &str, tag: &str) -> Vec<String> {
    let mut f = Vec::new();
    let (best, bp) = at[0];
    let others: Vec<String> = at[1..]
        .iter()
        .filter_map(|(s, p)| {
            pct_more(bp.throughput_mean, p.throughput_mean)
                .map(|d| format!("{d:+.0} % vs {} ({:.0})", s.policy, p.throughput_mean))
        })
        .collect();
    f.push(format!(
        "{tag}At {} {x}, {} delivered the most: {:.0} conn/s ({}).",
        fmt_level(bp.level),
        best.policy,
        bp.throughput_mean,
        others.join(", ")
    ));
    if best.policy != "cap" {
        if let Some((_, cp)) = at.iter().find(|(s, _)| s.policy == "cap") {
            if let Some(d) = pct_more(cp.throughput_mean, bp.throughput_mean) {
                f.push(format!(
                    "{tag}CAP was {:.0} % {} {} at {} {x}.",
                    d.abs(),
                    if d < 0.0 { "below" } else { "level with" },
                    best.policy,
                    fmt_level(bp.level)
                ));
            }
        }
    }
    f
}

/// Does the gap close under heavy load (the thesis's observation)? Compared among the policies
/// the paper plotted, when it did, so one outlier (LARD on dynamic content) does not decide.
fn gap_finding(
    exp: &Experiment,
    g: &[&SeriesResult],
    key: f64,
    top: f64,
    x: &str,
    tag: &str,
) -> Option<String> {
    let paper_policies: Vec<&str> = exp
        .paper
        .iter()
        .flat_map(|p| p.series.iter().map(|s| s.policy.as_str()))
        .collect();
    let chosen: Vec<&&SeriesResult> = g
        .iter()
        .filter(|s| paper_policies.is_empty() || paper_policies.contains(&s.policy.as_str()))
        .collect();
    let spread = |level: f64| {
        let v: Vec<f64> = chosen
            .iter()
            .filter_map(|s| s.nearest(level).map(|p| p.throughput_mean))
            .collect();
        let hi = v.iter().copied().fold(f64::MIN, f64::max);
        let lo = v.iter().copied().fold(f64::MAX, f64::min);
        if v.len() >= 2 {
            pct_more(hi, lo)
        } else {
            None
        }
    };
    let (l, h) = (spread(key)?, spread(top)?);
    let verdict = if h < l * 0.7 {
        "the gap closes under heavy load"
    } else if h > l * 1.3 {
        "the gap widens under heavy load"
    } else {
        "the gap stays about the same"
    };
    let names: Vec<&str> = chosen.iter().map(|s| s.policy.as_str()).collect();
    Some(format!(
        "{tag}Best-to-worst spread among {}: {l:.0} % at {} {x}, {h:.0} % at {} {x}: {verdict}.",
        names.join(", "),
        fmt_level(key),
        fmt_level(top)
    ))
}

/// Balance at the heaviest load (CAP Fig. 10): each policy's least and most loaded node.
fn balance_finding(g: &[&SeriesResult], top: f64, x: &str, tag: &str) -> Option<String> {
    let bal: Vec<String> = g
        .iter()
        .filter_map(|s| s.nearest(top).map(|p| (s, p)))
        .map(|(s, p)| {
            format!(
                "{} {:.0}–{:.0} %",
                s.policy,
                100.0 * p.util_min,
                100.0 * p.util_max
            )
        })
        .collect();
    (!bal.is_empty()).then(|| {
        format!(
            "{tag}Node utilisation (busiest resource, least–most loaded node) at {} {x}: {}.",
            fmt_level(top),
            bal.join("; ")
        )
    })
}

/// Open loop past capacity: does throughput hold after the peak?
fn overload_findings(g: &[&SeriesResult], x: &str, tag: &str) -> Vec<String> {
    let mut f = Vec::new();
    for s in g {
        let (Some(peak), Some(last)) = (s.peak(), s.points.last()) else {
            continue;
        };
        if last.level <= peak.level {
            continue;
        }
        let (errs, done, stuck) = s
            .runs
            .iter()
            .filter(|q| q.level == last.level)
            .fold((0u64, 0u64, 0u64), |(e, d, u), q| {
                (e + q.errors, d + q.completed, u + q.unfinished)
            });
        f.push(format!(
            "{tag}{}: peak {:.0} conn/s at {} {x}; at {} {x} it delivered {:.0} conn/s ({:+.0} %): {} errors and {stuck} requests still unanswered at the end, for {} responses.",
            s.policy,
            peak.throughput_mean,
            fmt_level(peak.level),
            fmt_level(last.level),
            last.throughput_mean,
            pct_more(last.throughput_mean, peak.throughput_mean).unwrap_or(0.0),
            errs,
            done
        ));
    }
    f
}

/// The same policy over cluster sizes: peak throughput per node count.
fn scalability_findings(r: &LabResults) -> Vec<String> {
    let mut by_policy: Vec<(&str, Vec<&SeriesResult>)> = Vec::new();
    for s in &r.series {
        match by_policy.iter_mut().find(|(p, _)| *p == s.policy) {
            Some((_, v)) => v.push(s),
            None => by_policy.push((&s.policy, vec![s])),
        }
    }
    let mut f = Vec::new();
    for (p, mut v) in by_policy {
        let counts: std::collections::BTreeSet<usize> = v.iter().map(|s| s.nodes).collect();
        if counts.len() < 2 {
            continue;
        }
        v.sort_by_key(|s| s.nodes);
        let base = v[0].peak().map(|q| q.throughput_mean).unwrap_or(0.0);
        let parts: Vec<String> = v
            .iter()
            .map(|s| {
                let pk = s.peak().map(|q| q.throughput_mean).unwrap_or(0.0);
                format!(
                    "{} node{} {:.0} conn/s (×{:.2})",
                    s.nodes,
                    if s.nodes == 1 { "" } else { "s" },
                    pk,
                    if base > 0.0 { pk / base } else { 0.0 }
                )
            })
            .collect();
        f.push(format!(
            "{p}: peak throughput by cluster size: {}.",
            parts.join(", ")
        ));
    }
    f
}

/// Absolute scale against the paper, and where to look when the two differ.
fn scale_findings(pc: &PaperCompare) -> Vec<String> {
    let mut f = Vec::new();
    let mut ratios: Vec<f64> = pc
        .rows
        .iter()
        .filter_map(|row| row.ours.map(|o| o / row.paper))
        .filter(|x| x.is_finite())
        .collect();
    ratios.sort_by(f64::total_cmp);
    if !ratios.is_empty() {
        f.push(format!(
            "Scale: at the levels both measured, our conn/s are {:.2}× the paper's (median of {} points; range {:.2}–{:.2}×).",
            ratios[ratios.len() / 2],
            ratios.len(),
            ratios[0],
            ratios[ratios.len() - 1]
        ));
    }
    if crate::report::claims::any_differs(pc) && !pc.notes.is_empty() {
        f.push(
            "Where ours and the paper's differ, the set-ups differ too: see \"Differences of set-up\" under the paper's numbers."
                .into(),
        );
    }
    f
}

/// Headroom of the measuring instruments: the switch's and the load generator's CPU.
fn headroom_finding(r: &LabResults) -> String {
    if r.worlds == "sim" {
        return "Simulated: no switch or load generator ran; the numbers are virtual time.".into();
    }
    let runs = r.series.iter().flat_map(|s| s.runs.iter());
    let (sw, gen) = runs.fold((0.0f64, 0.0f64), |(a, b), q| {
        (a.max(q.cpu.switch_pct), b.max(q.cpu.generator_pct))
    });
    let verdict = if sw > 80.0 || gen > 80.0 {
        "over the 80 % line in some runs: those results may measure the lab, not the cluster (see warnings)"
    } else {
        "both had headroom"
    };
    format!(
        "Headroom: the switch used at most {sw:.0} % of a core, the load generator at most {gen:.0} %: {verdict}."
    )
}

/// What the switch did with gathered load at the key level: the range of the weights WRR
/// derived, and the utilisations it gathered, per series that used them.
fn gathering_findings(r: &LabResults, key: f64) -> Vec<String> {
    let mut f = Vec::new();
    for s in &r.series {
        let Some(level) = s.nearest(key).map(|p| p.level) else {
            continue;
        };
        let Some(run) = s.runs.iter().find(|q| q.level == level) else {
            continue;
        };
        let weights: Vec<u32> = run
            .timeline
            .iter()
            .flat_map(|t| t.weights.iter().copied())
            .collect();
        let (lo, hi) = (
            weights.iter().copied().min().unwrap_or(0),
            weights.iter().copied().max().unwrap_or(0),
        );
        if lo == hi {
            continue;
        }
        let reports: u64 = run.nodes.iter().map(|n| n.load_reports).sum();
        f.push(format!(
            "{}: the switch's node weights ranged {lo}–{hi} at {} {} (derived from gathered state; {reports} load reports gathered in the window).",
            s.label,
            fmt_level(level),
            r.x_label
        ));
    }
    f
}

/// The one-screen table printed at the end: conn/s per series and level.
pub fn summary_table(r: &LabResults) -> String {
    let mut out = String::new();
    let levels: Vec<f64> = if r.levels.len() > 8 {
        let step = r.levels.len().div_ceil(8);
        r.levels.iter().copied().step_by(step).collect()
    } else {
        r.levels.clone()
    };
    let w = r
        .series
        .iter()
        .map(|s| s.label.chars().count())
        .max()
        .unwrap_or(6)
        .max(18);
    let _ = write!(
        out,
        "{:<w$}",
        format!("conn/s @ {}", r.x_label)
            .chars()
            .take(w)
            .collect::<String>()
    );
    for l in &levels {
        let _ = write!(out, " {:>8}", fmt_level(*l));
    }
    let _ = writeln!(out, " {:>9} {:>9}", "p90 ms*", "util*");
    for s in &r.series {
        let _ = write!(out, "{:<w$}", s.label);
        for l in &levels {
            match s.points.iter().find(|p| p.level == *l) {
                Some(p) => {
                    let _ = write!(out, " {:>8.1}", p.throughput_mean);
                }
                None => {
                    let _ = write!(out, " {:>8}", "-");
                }
            }
        }
        if let Some(p) = s.points.last() {
            let _ = write!(
                out,
                " {:>9.1} {:>4.0}–{:<3.0}",
                p.p90_ms,
                100.0 * p.util_min,
                100.0 * p.util_max
            );
        }
        out.push('\n');
    }
    let _ = writeln!(
        out,
        "* at {} {}; util = least and most loaded node's busiest resource, %",
        fmt_level(*r.levels.last().unwrap_or(&0.0)),
        r.x_label
    );
    out
}

/// Writes `index.html` and `results.json` into `dir`; returns the path of the HTML file.
pub fn write(r: &LabResults, dir: &Path) -> Result<std::path::PathBuf, LabError> {
    std::fs::create_dir_all(dir)
        .map_err(|e| LabError::Report(format!("cannot create {}: {e}", dir.display())))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report(e.to_string()))?;
    std::fs::write(dir.join("results.json"), json + "\n")
        .map_err(|e| LabError::Report(format!("cannot write results.json: {e}")))?;
    let html = html(r)?;
    let path = dir.join("index.html");
    std::fs::write(&path, html)
        .map_err(|e| LabError::Report(format!("cannot write index.html: {e}")))?;
    Ok(path)
}

/// Throughput against load, one line per series, 95 % CI error bars over the repetitions, and
/// the paper's curves dashed with crosses where the paper has them.
fn throughput_svg(r: &LabResults) -> Result<String, LabError> {
    let xmax = r.levels.iter().copied().fold(0.0, f64::max) * 1.05;
    let xmin = r
        .levels
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .min(xmax)
        * 0.9;
    let mut ymax = r
        .series
        .iter()
        .flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.throughput_mean + throughput_ci95(s, p.level))
        })
        .fold(1.0, f64::max);
    let paper_pts: Vec<(String, Vec<(f64, f64)>)> = r
        .paper
        .as_ref()
        .map(|p| {
            let mut v: Vec<(String, Vec<(f64, f64)>)> = Vec::new();
            for row in &p.rows {
                if row.level < xmin || row.level > xmax {
                    continue;
                }
                match v.iter_mut().find(|(s, _)| *s == row.series) {
                    Some((_, pts)) => pts.push((row.level, row.paper)),
                    None => v.push((row.series.clone(), vec![(row.level, row.paper)])),
                }
            }
            v
        })
        .unwrap_or_default();
    for (_, pts) in &paper_pts {
        ymax = pts.iter().map(|p| p.1).fold(ymax, f64::max);
    }
    let mut chart = Chart::new(
        format!("{}: throughput vs load", r.experiment),
        r.x_label.as_str(),
        "conn/s (completed responses per second)",
    )
    .size(760, 430)
    .x_range(xmin, xmax)
    .y_range(0.0, ymax * 1.1);
    for s in &r.series {
        let (pts, ci): (Vec<(f64, f64)>, Vec<f64>) = s
            .points
            .iter()
            .map(|p| ((p.level, p.throughput_mean), throughput_ci95(s, p.level)))
            .unzip();
        chart.add(Series::new(s.label.as_str(), pts).with_ci(ci));
    }
    for (j, (name, pts)) in paper_pts.into_iter().enumerate() {
        let c = r
            .series
            .iter()
            .position(|s| s.label == name)
            .map(palette::colour)
            .unwrap_or(palette::colour(r.series.len() + j));
        chart.add(
            Series::new(format!("paper: {name}"), pts)
                .colour(c)
                .stroke(Stroke::Dashed)
                .marker(Marker::Cross),
        );
    }
    chart.svg().map_err(LabError::Report)
}

/// What the throughput plot's error bars are, and where the claims' intervals are.
fn throughput_note(r: &LabResults) -> String {
    let rounds = match &r.headline {
        Some(h) => format!(
            " At {} {} the paper's claims were measured in {} interleaved rounds of {} s \
             windows (each round runs every contender once); the claims' own intervals, from the \
             ratio within each round, are in the table under the paper's numbers and are \
             narrower than two bars side by side suggest, because a round's drift hits both \
             policies of a ratio alike.",
            h.levels
                .iter()
                .map(|l| fmt_level(l.level))
                .collect::<Vec<_>>()
                .join(" and "),
            escape(&r.x_label),
            h.rounds,
            h.duration_s
        ),
        None => String::new(),
    };
    format!(
        "<p><small>Error bars: the 95 % confidence interval of each point's mean over its \
         windows (Student t; none where a point has one window).{rounds}</small></p>"
    )
}

/// The 95 % CI half-width of a series' throughput at one level, over its repetitions (0 with
/// one run).
fn throughput_ci95(s: &SeriesResult, level: f64) -> f64 {
    let reps: Vec<f64> = s
        .runs
        .iter()
        .filter(|q| q.level == level)
        .map(|q| q.throughput_rps)
        .collect();
    Estimate::of(&reps).ci95
}

/// Which response time a latency-vs-load chart plots.
#[derive(Clone, Copy)]
enum LatencyStat {
    Mean,
    P90,
}

impl LatencyStat {
    fn of(self, q: &RunRecord) -> f64 {
        match self {
            LatencyStat::Mean => q.latency_ms.mean,
            LatencyStat::P90 => q.latency_ms.p90,
        }
    }

    fn name(self) -> &'static str {
        match self {
            LatencyStat::Mean => "mean",
            LatencyStat::P90 => "90th percentile",
        }
    }
}

/// A response time against load, one line per series: the mean over repetitions with its 95 %
/// CI as error bars (none with one run).
fn latency_svg(r: &LabResults, stat: LatencyStat) -> Result<String, LabError> {
    let xmax = r.levels.iter().copied().fold(0.0, f64::max) * 1.05;
    let at = |s: &SeriesResult, level: f64| {
        let reps: Vec<f64> = s
            .runs
            .iter()
            .filter(|q| q.level == level)
            .map(|q| stat.of(q))
            .collect();
        Estimate::of(&reps)
    };
    let ymax = r
        .series
        .iter()
        .flat_map(|s| r.levels.iter().map(move |&l| at(s, l)))
        .map(|e| e.mean + e.ci95)
        .fold(1.0, f64::max);
    let mut chart = Chart::new(
        format!("{}: {} response time vs load", r.experiment, stat.name()),
        r.x_label.as_str(),
        "ms",
    )
    .size(760, 360)
    .x_range(0.0, xmax)
    .y_range(0.0, ymax * 1.1);
    for s in &r.series {
        let (pts, ci): (Vec<(f64, f64)>, Vec<f64>) = r
            .levels
            .iter()
            .filter(|&&l| s.runs.iter().any(|q| q.level == l))
            .map(|&l| {
                let e = at(s, l);
                ((l, e.mean), e.ci95)
            })
            .unzip();
        chart.add(Series::new(s.label.as_str(), pts).with_ci(ci));
    }
    chart.svg().map_err(LabError::Report)
}

/// Response-time CDF at one level, one line per series (log x).
fn cdf_svg(r: &LabResults, level: f64) -> Result<String, LabError> {
    let curves: Vec<(&SeriesResult, &RunRecord)> = r
        .series
        .iter()
        .filter_map(|s| {
            let l = s.nearest(level)?.level;
            s.runs
                .iter()
                .find(|q| q.level == l && !q.cdf.is_empty())
                .map(|q| (s, q))
        })
        .collect();
    let lo = curves
        .iter()
        .flat_map(|(_, q)| q.cdf.iter().map(|p| p[0]))
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min)
        .clamp(0.01, 1.0);
    let hi = curves
        .iter()
        .flat_map(|(_, q)| q.cdf.iter().map(|p| p[0]))
        .fold(lo * 10.0, f64::max);
    let mut chart = Chart::cdf(
        format!("response time CDF at {} {}", fmt_level(level), r.x_label),
        "response time (ms, log scale)",
        "fraction of responses",
    )
    .size(760, 430)
    .x_range(lo * 0.9, hi * 1.1);
    for (i, (s, q)) in curves.iter().enumerate() {
        let c = palette::colour(
            r.series
                .iter()
                .position(|x| std::ptr::eq(x, *s))
                .unwrap_or(i),
        );
        let pts = q.cdf.iter().map(|p| (p[0].max(lo), p[1])).collect();
        chart.add(
            Series::new(s.label.as_str(), pts)
                .colour(c)
                .marker(Marker::None),
        );
    }
    chart.svg().map_err(LabError::Report)
}

/// Least and most loaded node's utilisation against load (CAP paper Fig. 10): solid max,
/// dashed-looking thin min, one colour per series.
/// One policy's most- and least-loaded-node utilisation lines, in percent.
struct MinMaxLines<'a> {
    label: &'a str,
    max: Vec<(f64, f64)>,
    min: Vec<(f64, f64)>,
}

/// The chart both utilisation plots share: per policy a bold line for the most loaded node and
/// a light one (with markers when `mark_min`) for the least loaded.
fn min_max_svg(
    caption: &str,
    x_desc: &str,
    x: std::ops::Range<f64>,
    height: u32,
    lines: Vec<MinMaxLines>,
    mark_min: bool,
) -> Result<String, LabError> {
    let mut chart = Chart::new(caption, x_desc, "utilisation (%)")
        .size(760, height)
        .x_range(x.start, x.end)
        .y_range(0.0, 105.0);
    for (i, line) in lines.into_iter().enumerate() {
        let c = palette::colour(i);
        chart.add(
            Series::new(format!("{} (bold max, thin min)", line.label), line.max)
                .colour(c)
                .marker(Marker::None),
        );
        let min_marker = if mark_min {
            Marker::Triangle
        } else {
            Marker::None
        };
        chart.add(
            Series::new(format!("{} min", line.label), line.min)
                .colour(c)
                .stroke(Stroke::Thin)
                .marker(min_marker)
                .unlabelled(),
        );
    }
    chart.svg().map_err(LabError::Report)
}

/// Min and max node utilisation against load (CAP paper Fig. 10).
fn util_svg(r: &LabResults) -> Result<String, LabError> {
    let xmax = r.levels.iter().copied().fold(0.0, f64::max) * 1.05;
    let xmin = r
        .levels
        .iter()
        .copied()
        .fold(f64::INFINITY, f64::min)
        .min(xmax)
        * 0.9;
    let lines = r
        .series
        .iter()
        .map(|s| MinMaxLines {
            label: &s.label,
            max: s
                .points
                .iter()
                .map(|p| (p.level, 100.0 * p.util_max))
                .collect(),
            min: s
                .points
                .iter()
                .map(|p| (p.level, 100.0 * p.util_min))
                .collect(),
        })
        .collect();
    min_max_svg(
        "min / max node utilisation (busiest resource)",
        &r.x_label,
        xmin..xmax,
        430,
        lines,
        true,
    )
}

/// The spread of node utilisation over the run at one load level: per policy, the most and the
/// least loaded node's busiest resource, second by second (what `/_capstan/load` reported).
/// `None` when no run at that level has a timeline.
fn util_timeline_svg(r: &LabResults, level: f64) -> Result<Option<String>, LabError> {
    let lines: Vec<MinMaxLines> = r
        .series
        .iter()
        .filter_map(|s| {
            let l = s.nearest(level)?.level;
            let run = s.runs.iter().find(|q| q.level == l)?;
            let spread = |pick: fn(f64, f64) -> f64, start: f64| -> Vec<(f64, f64)> {
                run.timeline
                    .iter()
                    .filter(|u| !u.util.is_empty())
                    .map(|u| (u.t_s, 100.0 * u.util.iter().copied().fold(start, pick)))
                    .collect()
            };
            let max = spread(f64::max, 0.0);
            (!max.is_empty()).then(|| MinMaxLines {
                label: &s.label,
                max,
                min: spread(f64::min, f64::INFINITY),
            })
        })
        .collect();
    if lines.is_empty() {
        return Ok(None);
    }
    let tmax = lines
        .iter()
        .flat_map(|line| line.max.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    min_max_svg(
        "most / least loaded node over time (busiest resource)",
        "seconds into the measured window",
        0.0..tmax,
        380,
        lines,
        false,
    )
    .map(Some)
}

/// The paper's reported numbers and SWEB's §3.3 rate, as tables.
fn html_measures(h: &mut String, p: &PaperCompare, x: &str) {
    if !p.measures.is_empty() {
        h.push_str(
            "<table><tr><th class=\"l\">the paper reports</th><th>paper</th><th>ours</th><th>unit</th><th>at</th></tr>",
        );
        for m in &p.measures {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                escape(&m.text),
                m.paper,
                m.ours
                    .map(|o| format!("{o:.1}"))
                    .unwrap_or_else(|| "-".into()),
                escape(&m.unit),
                m.ours_level
                    .map(|l| format!("{} {}", fmt_level(l), escape(x)))
                    .unwrap_or_default()
            );
        }
        h.push_str("</table>");
    }
    if let Some(c) = &p.sweb_capacity {
        let _ = write!(
            h,
            "<p><b>SWEB §3.3, maximum sustained rate</b> r* = p / H, H = (1/p + d)·F/b1 + (1 − 1/p − d)·F/b2 + A + d·(A + O): \
             <b>{:.1} rps</b> for this set-up ({:.1} ms per request){}.</p>\
             <table><tr><th class=\"l\">series</th><th>kept up with (rps)</th><th>fell behind at (rps)</th></tr>",
            c.formula_rps,
            1000.0 * c.seconds_per_request,
            c.paper_rps
                .map(|p| format!("; the paper prints {p} for its example"))
                .unwrap_or_default()
        );
        let rate = |v: Option<f64>| v.map(fmt_level).unwrap_or_else(|| "-".into());
        for i in &c.sustained {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td></tr>",
                escape(&i.series),
                rate(i.kept_up_rps),
                rate(i.fell_behind_rps)
            );
        }
        h.push_str("</table>");
    }
}

/// Lab and simulator side by side (`--engine both`): a plot of both worlds' throughput and, per
/// series, a table with the differences and the verdict.
fn html_agreement(h: &mut String, r: &LabResults) -> Result<(), LabError> {
    let Some(sim) = &r.sim else {
        return Ok(());
    };
    let tol = r.agreement.first().map_or(15.0, |a| a.tolerance_pct);
    let path = r.http_path.as_ref().map_or_else(
        || "no HTTP path (none was measured)".to_string(),
        |p| {
            format!(
                "the HTTP path measured on the cluster before the runs — one client, a small and \
                 a large cached file, the lab's mean less the model's time: {:.2} ms per request \
                 + {:.2} ms per MB of answer ({} B: {:.2} ms vs {:.2} ms modelled; {} B: {:.2} vs \
                 {:.2} ms) — as a delay outside the nodes",
                p.fixed_ms,
                p.per_mb_ms,
                p.small.bytes,
                p.small.lab_mean_ms,
                p.small.model_ms,
                p.large.bytes,
                p.large.lab_mean_ms,
                p.large.model_ms
            )
        },
    );
    let _ = write!(
        h,
        "<h2>Lab and simulator side by side</h2><p>The same experiment in the discrete-event \
         simulator (<code>capstan_sim::closed</code>), run as the lab runs it: the same nodes, file \
         list, policies and T_gat; the same {:.0} s window per level, every client starting at \
         once on idle nodes after a warm-up as long as the lab's nodes had run before that level; \
         the same requests in the same order (the load generator's own seeded sequence, so both \
         worlds draw the same sample of the mix); and {path} ({} events in {:.2} s). Differences \
         are (simulator − lab) / lab. A series <b>agrees</b> when throughput, mean and p90 \
         response time are within {tol:.0} % at every level. What the simulator still leaves out, \
         and so what a difference may come from: the switch's and generator's CPU on this \
         machine's shared cores under load (the path is measured with one client), the emulated \
         nodes' timer lateness, and the two worlds' trajectories parting once one request \
         finishes earlier in one of them (a p90 over a short window's few hundred responses moves \
         with a handful of them).</p>",
        sim.window_s, sim.events, sim.wall_s
    );
    h.push_str(&worlds_svg(r, sim)?);
    h.push_str(
        "<table><tr><th class=\"l\">series</th><th class=\"l\">verdict</th><th>level</th>\
         <th>conn/s lab</th><th>sim</th><th>Δ</th><th>mean ms lab</th><th>sim</th><th>Δ</th>\
         <th>p90 ms lab</th><th>sim</th><th>Δ</th><th class=\"l\">node util % lab</th>\
         <th class=\"l\">sim</th></tr>",
    );
    let pct = |d: f64| {
        let class = if d.abs() > tol { " class=\"warn\"" } else { "" };
        format!("<td{class}>{d:+.1} %</td>")
    };
    let utils = |v: &[f64]| {
        v.iter()
            .map(|u| format!("{:.0}", 100.0 * u))
            .collect::<Vec<_>>()
            .join(" ")
    };
    for a in &r.agreement {
        for (i, row) in a.rows.iter().enumerate() {
            let head = if i == 0 {
                format!(
                    "<td class=\"l\" rowspan=\"{n}\">{}</td><td class=\"l {}\" rowspan=\"{n}\">{}<br><small>{}</small></td>",
                    escape(&a.series),
                    if a.verdict == "agree" { "ok" } else { "warn" },
                    escape(&a.verdict),
                    escape(&a.worst),
                    n = a.rows.len()
                )
            } else {
                String::new()
            };
            let _ = write!(
                h,
                "<tr>{head}<td>{}</td><td>{:.1}</td><td>{:.1}</td>{}<td>{:.1}</td><td>{:.1}</td>{}\
                 <td>{:.1}</td><td>{:.1}</td>{}<td class=\"l\">{}</td><td class=\"l\">{}</td></tr>",
                fmt_level(row.level),
                row.live_throughput,
                row.sim_throughput,
                pct(row.throughput_diff_pct),
                row.live_mean_ms,
                row.sim_mean_ms,
                pct(row.mean_diff_pct),
                row.live_p90_ms,
                row.sim_p90_ms,
                pct(row.p90_diff_pct),
                utils(&row.live_util),
                utils(&row.sim_util)
            );
        }
    }
    h.push_str("</table>");
    Ok(())
}

/// Throughput against load in both worlds: the lab solid, the simulator dashed.
fn worlds_svg(r: &LabResults, sim: &SimWorld) -> Result<String, LabError> {
    let xmax = r.levels.iter().copied().fold(0.0, f64::max) * 1.05;
    let pts = |s: &SeriesResult| -> Vec<(f64, f64)> {
        s.points
            .iter()
            .map(|p| (p.level, p.throughput_mean))
            .collect()
    };
    let mut chart = Chart::new(
        "lab (solid) and simulator (dashed)",
        r.x_label.as_str(),
        "conn/s",
    )
    .x_range(0.0, xmax);
    for (i, s) in r.series.iter().enumerate() {
        let c = palette::colour(i);
        chart.add(
            Series::new(s.label.as_str(), pts(s))
                .with_ci(
                    s.points
                        .iter()
                        .map(|p| throughput_ci95(s, p.level))
                        .collect(),
                )
                .colour(c),
        );
        if let Some(t) = sim.series.iter().find(|t| t.label == s.label) {
            chart.add(
                Series::new(format!("{} (simulator)", s.label), pts(t))
                    .colour(c)
                    .stroke(Stroke::Dashed)
                    .marker(Marker::Cross)
                    .unlabelled(),
            );
        }
    }
    chart.svg().map_err(LabError::Report)
}

/// The level the report's per-level views use: the findings' rule (the claims' level, else 10
/// clients, else the middle level) from the results alone.
fn report_key_level(r: &LabResults) -> f64 {
    // Same rule as the findings, without the experiment file at hand: 10 clients, else middle.
    let w = r
        .paper
        .as_ref()
        .and_then(|p| p.claims.iter().find_map(|c| c.ours_level))
        .or_else(|| (r.x_label == "clients").then_some(10.0));
    match w {
        Some(w) => *r
            .levels
            .iter()
            .min_by(|a, b| (*a - w).abs().total_cmp(&(*b - w).abs()))
            .unwrap_or(&w),
        None => r.levels[r.levels.len() / 2],
    }
}

fn html(r: &LabResults) -> Result<String, LabError> {
    let mut h = String::new();
    let key = report_key_level(r);
    html_head(&mut h, r);
    h.push_str("<h2>Findings</h2><ul>");
    for f in &r.findings {
        let _ = write!(h, "<li>{}</li>", escape(f));
    }
    h.push_str("</ul>");
    if !r.warnings.is_empty() {
        let _ = write!(
            h,
            "<h2 class=\"warn\">Warnings ({})</h2><ul class=\"warn\">",
            r.warnings.len()
        );
        for w in r.warnings.iter().take(40) {
            let _ = write!(h, "<li>{}</li>", escape(w));
        }
        if r.warnings.len() > 40 {
            let _ = write!(
                h,
                "<li>… and {} more (results.json)</li>",
                r.warnings.len() - 40
            );
        }
        h.push_str("</ul>");
    }
    if r.worlds == "sim" {
        h.push_str(
            "<p><b>World:</b> the simulator only (<code>--engine sim</code>): every number below is \
             virtual time; no node, switch or load generator ran.</p>",
        );
    }
    h.push_str("<h2>Throughput vs load</h2>");
    h.push_str(&throughput_svg(r)?);
    h.push_str(&throughput_note(r));
    h.push_str(
        "<h2>Response time vs load</h2><p>Mean over the repetitions of each run's mean and \
         90th-percentile response time, with the 95 % confidence interval over the repetitions as \
         error bars (none with a single run: <code>--repetitions N</code>).</p>",
    );
    h.push_str(&latency_svg(r, LatencyStat::Mean)?);
    h.push_str(&latency_svg(r, LatencyStat::P90)?);
    html_agreement(&mut h, r)?;
    h.push_str("<pre>");
    h.push_str(&escape(&summary_table(r)));
    h.push_str("</pre>");
    let _ = write!(
        h,
        "<h2>Response time at {} {}</h2>",
        fmt_level(key),
        escape(&r.x_label)
    );
    h.push_str(&cdf_svg(r, key)?);
    html_classes(&mut h, r, key);
    h.push_str("<h2>Node utilisation (CAP paper Fig. 10)</h2>");
    h.push_str(&util_svg(r)?);
    if let Some(svg) = util_timeline_svg(r, key)? {
        let _ = write!(
            h,
            "<h3>Over time at {} {} (first repetition)</h3>",
            fmt_level(key),
            escape(&r.x_label)
        );
        h.push_str(&svg);
    }
    crate::report::figures::html(&mut h, r)?;
    if let Some(p) = &r.paper {
        html_paper(&mut h, r, p);
    }
    h.push_str(&crate::report::sclient::html(r));
    h.push_str(&crate::run::secure::html(r));
    html_runs(&mut h, r);
    let mut page = Page::new(&format!("capstan lab: {}", r.experiment), &r.title);
    page.push(&h);
    Ok(page.finish())
}

/// What the experiment rebuilds, the command, the versions and how the run went.
fn html_head(h: &mut String, r: &LabResults) {
    let _ = write!(
        h,
        "<p><b>Rebuilds:</b> {}. {}</p>",
        escape(&r.figure),
        escape(&r.about)
    );
    let _ = write!(
        h,
        "<p><b>Command:</b> <code>{}</code><br><b>Versions:</b> capstan {} ({} build), {}, {}, {} CPUs<br>\
         <b>Run:</b> {} engine, {} s per level, {} repetition(s){}, seed {}{}, wall time {:.0} s{}</p>",
        escape(&r.command),
        escape(&r.versions.capstan),
        escape(&r.versions.build),
        escape(&r.versions.rustc),
        escape(&r.versions.os),
        r.versions.cpus,
        escape(&r.engine),
        r.duration_s,
        r.repetitions,
        r.headline
            .as_ref()
            .map(|h| format!(
                "; the claims in {} interleaved rounds of {} s",
                h.rounds, h.duration_s
            ))
            .unwrap_or_default(),
        r.seed,
        if r.quick { ", --quick" } else { "" },
        r.wall_s,
        r.capacity_rps
            .map(|c| format!(", measured capacity {c:.0} conn/s"))
            .unwrap_or_default()
    );
}

/// Per-class latency at the key level (first repetition).
fn html_classes(h: &mut String, r: &LabResults, key: f64) {
    // Per-class latency at the key level.
    let classes: std::collections::BTreeSet<&String> = r
        .series
        .iter()
        .flat_map(|s| s.runs.iter().flat_map(|q| q.per_class.keys()))
        .collect();
    if !classes.is_empty() {
        let _ = write!(
            h,
            "<h3>Per-class latency at {} {} (mean / p90 ms, first repetition)</h3><table><tr><th class=\"l\">series</th>",
            fmt_level(key),
            escape(&r.x_label)
        );
        for c in &classes {
            let _ = write!(h, "<th>{}</th>", escape(c));
        }
        h.push_str("</tr>");
        for s in &r.series {
            let _ = write!(h, "<tr><td class=\"l\">{}</td>", escape(&s.label));
            let l = s.nearest(key).map(|p| p.level).unwrap_or(key);
            let run = s.runs.iter().find(|q| q.level == l);
            for c in &classes {
                match run.and_then(|q| q.per_class.get(*c)) {
                    Some(v) => {
                        let _ = write!(
                            h,
                            "<td>{:.1} / {:.1}<br><small>{} req</small></td>",
                            v.mean_ms, v.p90_ms, v.requests
                        );
                    }
                    None => h.push_str("<td>-</td>"),
                }
            }
            h.push_str("</tr>");
        }
        h.push_str("</table>");
    }
}

/// The paper's numbers next to ours: its claims with our intervals, its curves' points, its
/// reported measures and the differences of set-up.
fn html_paper(h: &mut String, r: &LabResults, p: &PaperCompare) {
    let _ = write!(
        h,
        "<h2>The paper's numbers next to ours</h2><p>Source: {}</p>",
        escape(&p.source)
    );
    crate::report::claims::html(h, p, &r.x_label);
    if !p.rows.is_empty() {
        let _ = write!(
            h,
            "<table><tr><th class=\"l\">series</th><th>{}</th><th>paper conn/s</th><th>ours conn/s</th><th>ours / paper</th></tr>",
            escape(if p.x.is_empty() { &r.x_label } else { &p.x })
        );
        for row in &p.rows {
            let _ =
                write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td></tr>",
                escape(&row.series),
                fmt_level(row.level),
                row.paper,
                row.ours.map(|o| format!("{o:.1}")).unwrap_or_else(|| "-".into()),
                row.ours.map(|o| format!("{:.2}", o / row.paper)).unwrap_or_default()
            );
        }
        h.push_str("</table>");
    }
    html_measures(h, p, &r.x_label);
    if !p.notes.is_empty() {
        h.push_str("<p><b>Differences of set-up:</b></p><ul>");
        for n in &p.notes {
            let _ = write!(h, "<li>{}</li>", escape(n));
        }
        h.push_str("</ul>");
    }
}

/// Every window: its figures, the CPU used and where the switch placed the requests.
fn html_runs(h: &mut String, r: &LabResults) {
    h.push_str(
        "<h2>Every run</h2><table><tr><th class=\"l\">series</th><th>level</th><th>rep / round</th><th>conn/s</th>\
         <th>completed</th><th>errors</th><th>p50</th><th>p90</th><th>p99 ms</th><th>util min–max %</th>\
         <th>switch CPU %</th><th>generator CPU %</th><th>nodes CPU %</th><th class=\"l\">placed per node</th></tr>",
    );
    for s in &r.series {
        for q in &s.runs {
            let placed: Vec<String> = q
                .nodes
                .iter()
                .map(|n| format!("{} {}", n.name, n.placed.values().sum::<u64>()))
                .collect();
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{:.1}</td><td>{:.1}</td>\
                 <td>{:.0}–{:.0}</td><td{}>{:.0}</td><td{}>{:.0}</td><td>{:.0}</td><td class=\"l\"><small>{}</small></td></tr>",
                escape(&s.label),
                fmt_level(q.level),
                match q.round {
                    Some(n) => format!("round {}", n + 1),
                    None => (q.repetition + 1).to_string(),
                },
                q.throughput_rps,
                q.completed,
                q.errors,
                q.latency_ms.p50,
                q.latency_ms.p90,
                q.latency_ms.p99,
                100.0 * q.util_min,
                100.0 * q.util_max,
                if q.cpu.switch_pct > 80.0 { " class=\"warn\"" } else { "" },
                q.cpu.switch_pct,
                if q.cpu.generator_pct > 80.0 { " class=\"warn\"" } else { "" },
                q.cpu.generator_pct,
                q.cpu.nodes_pct,
                escape(&placed.join(", "))
            );
        }
    }
    h.push_str(
        "</table><p><small>conn/s: responses completed inside the measured window per second. Utilisation: the \
         emulated node's busiest resource (CPU, disk or NIC) over the window, from its /_capstan/load report. CPU: real \
         CPU time of the process over the window (from /proc), in % of one core. Raw data: results.json.</small></p>\
",
    );
}
