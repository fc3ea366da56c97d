//! The Jones thesis's figures that need more than throughput against load: Fig. 6 (each node's
//! CPU and disk utilisation apart, not only the busiest resource), Fig. 7 (each node measured
//! alone under the same load) and Fig. 8's view of CAP's gain against clients per node. The
//! paper's numbers come from the experiment file (`[[paper.utilisation]]`,
//! `[[paper.node_alone]]`, `[paper.ratio]`); [`conclude`] sets ours beside them in
//! `results.json` (`figures`) and the findings, [`html`] draws the report's sections.

use std::fmt::Write as _;

use crate::model::error::err;
use crate::model::error::LabError;
use crate::model::experiment::{Experiment, Paper};
use crate::model::paper::*;
use crate::model::results::fmt_level;
use crate::model::results::{mean_stdev, round, LabResults, SeriesResult};
use capstan_report::{escape, palette, Chart, Marker, Series, Stroke};

impl Spread {
    fn of(xs: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let v: Vec<f64> = xs.into_iter().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return None;
        }
        Some(Spread {
            mean: round(v.iter().sum::<f64>() / v.len() as f64, 4),
            min: round(v.iter().copied().fold(f64::INFINITY, f64::min), 4),
            max: round(v.iter().copied().fold(f64::NEG_INFINITY, f64::max), 4),
            count: v.len(),
        })
    }
}

/// Computes the figures' numbers into `r.figures` and adds their findings.
pub fn conclude(r: &mut LabResults, exp: &Experiment) {
    let mut f = JonesFigures {
        node_utilisation: node_utilisation(r),
        ..Default::default()
    };
    if let Some(p) = &exp.paper {
        f.utilisation_vs_paper = p.utilisation.iter().map(|u| util_compare(r, u)).collect();
        f.nodes_alone = nodes_alone(r, p);
        if let Some(view) = &p.ratio {
            f.ratio = ratio_rows(r, p, view);
        }
        f.variant_ratios = p
            .variant_ratios
            .iter()
            .map(|v| variant_ratio(r, v))
            .collect();
    }
    let findings = figure_findings(&f, exp.paper.as_ref());
    r.findings.extend(findings);
    r.figures = f;
}

fn node_utilisation(r: &LabResults) -> Vec<NodeUtilRow> {
    let mut rows = Vec::new();
    for s in &r.series {
        for p in &s.points {
            let runs: Vec<_> = s.runs.iter().filter(|q| q.level == p.level).collect();
            let Some(first) = runs.first() else { continue };
            for (i, n) in first.nodes.iter().enumerate() {
                let avg = |f: &dyn Fn(&crate::model::results::NodeRecord) -> f64| {
                    let xs: Vec<f64> = runs.iter().filter_map(|q| q.nodes.get(i)).map(f).collect();
                    round(mean_stdev(&xs).0, 4)
                };
                rows.push(NodeUtilRow {
                    series: s.label.clone(),
                    level: p.level,
                    node: n.name.clone(),
                    cpu: avg(&|n| n.cpu_util),
                    disk: avg(&|n| n.disk_util),
                    nic: avg(&|n| n.nic_util),
                    busiest: avg(&|n| n.util),
                });
            }
        }
    }
    rows
}

fn util_compare(r: &LabResults, u: &PaperUtilisation) -> UtilCompare {
    let pct = |xs: &[f64]| Spread::of(xs.iter().map(|x| x / 100.0)).unwrap_or_default();
    let series = r
        .series
        .iter()
        .find(|s| s.policy == u.policy && s.variant.is_none());
    let level = series.and_then(|s| s.nearest(u.at)).map(|p| p.level);
    let runs: Vec<_> = series
        .zip(level)
        .map(|(s, l)| s.runs.iter().filter(|q| q.level == l).collect())
        .unwrap_or_default();
    let nodes = |f: fn(&crate::model::results::NodeRecord) -> f64| {
        Spread::of(runs.iter().flat_map(|q| q.nodes.iter().map(f)))
    };
    let first = runs.first();
    let over_time = |f: fn(&crate::model::results::UtilSample) -> Option<f64>| {
        Spread::of(
            first
                .into_iter()
                .flat_map(|q| q.timeline.iter().filter_map(f)),
        )
    };
    UtilCompare {
        policy: u.policy.clone(),
        paper_level: u.at,
        ours_level: level,
        paper_cpu: pct(&u.cpu),
        paper_disk: pct(&u.disk),
        ours_cpu_nodes: nodes(|n| n.cpu_util),
        ours_disk_nodes: nodes(|n| n.disk_util),
        ours_cpu_node1_time: over_time(|t| t.cpu.first().copied()),
        ours_disk_node1_time: over_time(|t| t.disk.first().copied()),
    }
}

fn nodes_alone(r: &LabResults, p: &Paper) -> Option<NodesAlone> {
    let at = p.nodes_alone.first()?.at;
    let paper: Vec<AloneRow> = p
        .nodes_alone
        .iter()
        .map(|n| {
            let (m, sd) = mean_stdev(&n.runs);
            AloneRow {
                node: n.node.clone(),
                conn_s: round(m, 2),
                stdev: round(sd, 2),
                runs: n.runs.len(),
            }
        })
        .collect();
    let mut level = None;
    let ours: Vec<AloneRow> = r
        .series
        .iter()
        .filter(|s| s.nodes == 1)
        .filter_map(|s| {
            let pt = s.nearest(at)?;
            level = Some(pt.level);
            Some(AloneRow {
                node: s.variant.clone().unwrap_or_else(|| s.label.clone()),
                conn_s: pt.throughput_mean,
                stdev: pt.throughput_stdev,
                runs: pt.runs,
            })
        })
        .collect();
    Some(NodesAlone {
        paper_level: at,
        ours_level: level,
        paper_spread: spread(&paper).unwrap_or(1.0),
        ours_spread: spread(&ours),
        paper,
        ours,
    })
}

fn variant_ratio(r: &LabResults, v: &VariantRatio) -> VariantRatioRow {
    let at = |variant: &str| {
        r.series_named(&v.policy, Some(variant))
            .and_then(|s| s.nearest(v.at))
    };
    let (ours, level) = match (at(&v.variant), at(&v.versus_variant)) {
        (Some(a), Some(b)) if b.throughput_mean > 0.0 => (
            Some(round(a.throughput_mean / b.throughput_mean, 3)),
            Some(a.level),
        ),
        _ => (None, None),
    };
    VariantRatioRow {
        text: v.text.clone(),
        paper: v.value,
        ours,
        ours_level: level,
    }
}

/// Fastest over slowest.
fn spread(rows: &[AloneRow]) -> Option<f64> {
    let hi = rows.iter().map(|r| r.conn_s).fold(f64::NAN, f64::max);
    let lo = rows.iter().map(|r| r.conn_s).fold(f64::NAN, f64::min);
    (lo > 0.0).then(|| round(hi / lo, 3))
}

fn ratio_rows(r: &LabResults, p: &Paper, view: &RatioView) -> Vec<RatioRow> {
    let mut variants: Vec<Option<String>> = Vec::new();
    for s in &r.series {
        if !variants.contains(&s.variant) {
            variants.push(s.variant.clone());
        }
    }
    let mut rows = Vec::new();
    for v in variants {
        let find = |policy: &str| -> Option<&SeriesResult> {
            r.series
                .iter()
                .find(|s| s.policy == policy && s.variant == v)
        };
        let (Some(a), Some(b)) = (find(&view.policy), find(&view.versus)) else {
            continue;
        };
        let paper_at = |policy: &str, x: f64| {
            p.series
                .iter()
                .find(|s| s.policy == policy && s.variant == v)
                .and_then(|s| s.points.iter().find(|pt| pt[0] == x).map(|pt| pt[1]))
        };
        let mut levels: Vec<f64> = a.points.iter().map(|pt| pt.level).collect();
        for s in p.series.iter().filter(|s| s.variant == v) {
            levels.extend(s.points.iter().map(|pt| pt[0]));
        }
        levels.sort_by(f64::total_cmp);
        levels.dedup();
        for x in levels {
            let ours_at = |s: &SeriesResult| {
                s.points
                    .iter()
                    .find(|pt| pt.level == x)
                    .map(|pt| pt.throughput_mean)
            };
            let gain = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) if b > 0.0 => Some(round(100.0 * (a - b) / b, 1)),
                _ => None,
            };
            rows.push(RatioRow {
                variant: v.clone(),
                nodes: a.nodes,
                clients: x,
                clients_per_node: round(x / a.nodes as f64, 3),
                ours_gain_pct: gain(ours_at(a), ours_at(b)),
                paper_gain_pct: gain(paper_at(&view.policy, x), paper_at(&view.versus, x)),
            });
        }
    }
    rows
}

/// Where the gain peaks, for one variant: (clients per node, gain %).
fn peak(rows: &[&RatioRow], ours: bool) -> Option<(f64, f64)> {
    rows.iter()
        .filter_map(|r| {
            let g = if ours {
                r.ours_gain_pct
            } else {
                r.paper_gain_pct
            };
            g.map(|g| (r.clients_per_node, g))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

fn figure_findings(f: &JonesFigures, paper: Option<&Paper>) -> Vec<String> {
    let mut out = Vec::new();
    for u in &f.utilisation_vs_paper {
        if let (Some(c), Some(d), Some(l)) = (u.ours_cpu_nodes, u.ours_disk_nodes, u.ours_level) {
            out.push(format!(
                "Jones Fig. 6 ({} at {} clients): the thesis's node averaged CPU {:.0} % and disk {:.0} %; ours at {} clients CPU {:.0} % and disk {:.0} % (mean of the nodes; {:.0}–{:.0} % and {:.0}–{:.0} % across them)",
                u.policy, fmt_level(u.paper_level), 100.0 * u.paper_cpu.mean, 100.0 * u.paper_disk.mean,
                fmt_level(l), 100.0 * c.mean, 100.0 * d.mean, 100.0 * c.min, 100.0 * c.max, 100.0 * d.min, 100.0 * d.max
            ));
        }
    }
    if let Some(a) = &f.nodes_alone {
        if let Some(s) = a.ours_spread {
            out.push(format!(
                "Jones Fig. 7 (each node alone at {} clients): fastest / slowest {:.2}× here over {} nodes, {:.2}× in the thesis over {} nodes built alike",
                fmt_level(a.paper_level), s, a.ours.len(), a.paper_spread, a.paper.len()
            ));
        }
    }
    for v in &f.variant_ratios {
        if let (Some(o), Some(l)) = (v.ours, v.ours_level) {
            out.push(format!(
                "{}: paper {:.2}×, ours {:.2}× at {}",
                v.text,
                v.paper,
                o,
                fmt_level(l)
            ));
        }
    }
    let mut variants: Vec<&Option<String>> = f.ratio.iter().map(|r| &r.variant).collect();
    variants.dedup();
    for v in variants {
        let rows: Vec<&RatioRow> = f.ratio.iter().filter(|r| &r.variant == v).collect();
        let (Some(ours), Some(view)) = (peak(&rows, true), paper.and_then(|p| p.ratio.as_ref()))
        else {
            continue;
        };
        let theirs = peak(&rows, false)
            .map(|(x, g)| format!("the thesis's at {x:.1} ({g:+.0} %)"))
            .unwrap_or_else(|| "the thesis has no curve here".into());
        out.push(format!(
            "Jones Fig. 8 ({}): {} over {} peaks at {:.1} clients per node ({:+.0} %); {}; the thesis's text puts the peak near {:.1}",
            match v {
                Some(name) if *name != format!("{} nodes", rows[0].nodes) => format!("{name}, {} nodes", rows[0].nodes),
                _ => format!("{} nodes", rows[0].nodes),
            },
            view.policy, view.versus, ours.0, ours.1, theirs, view.paper_peak
        ));
    }
    out
}

/// The report's sections for these figures (nothing when the run has none of them).
pub fn html(h: &mut String, r: &LabResults) -> Result<(), LabError> {
    let f = &r.figures;
    let has_both = f
        .node_utilisation
        .iter()
        .any(|n| n.cpu > 0.0 && n.disk > 0.0);
    if has_both {
        h.push_str("<h2>CPU and disk per node (Jones thesis Fig. 6)</h2>");
        h.push_str(&util_split_svg(r)?);
        html_util_compare(h, f);
        html_node_table(h, r);
    }
    if let Some(a) = &f.nodes_alone {
        html_nodes_alone(h, a);
    }
    if !f.ratio.is_empty() {
        h.push_str("<h2>Gain against clients per node (Jones thesis Fig. 8)</h2>");
        h.push_str(&ratio_svg(&f.ratio)?);
        html_ratio_table(h, &f.ratio);
    }
    if !f.variant_ratios.is_empty() {
        h.push_str("<h2>One set-up over another</h2><table><tr><th class=\"l\">the paper says</th><th>paper</th><th>ours</th><th>at</th></tr>");
        for v in &f.variant_ratios {
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{:.2}×</td><td>{}</td><td>{}</td></tr>",
                escape(&v.text),
                v.paper,
                v.ours
                    .map(|o| format!("{o:.2}×"))
                    .unwrap_or_else(|| "-".into()),
                v.ours_level.map(fmt_level).unwrap_or_default()
            );
        }
        h.push_str("</table>");
    }
    Ok(())
}

/// Mean CPU (solid) and disk (dashed) utilisation over the nodes against load, per series;
/// the thesis's Fig. 6 means as crosses (CPU) and circles (disk).
fn util_split_svg(r: &LabResults) -> Result<String, LabError> {
    let xmax = r.levels.iter().copied().fold(1.0, f64::max) * 1.05;
    let mut chart = Chart::new(
        "CPU (solid) and disk (dashed): mean over nodes",
        r.x_label.as_str(),
        "utilisation (%)",
    )
    .size(760, 430)
    .x_range(0.0, xmax)
    .y_range(0.0, 105.0);
    for (i, s) in r.series.iter().enumerate() {
        let c = palette::colour(i);
        let mean_of = |f: fn(&NodeUtilRow) -> f64| -> Vec<(f64, f64)> {
            s.points
                .iter()
                .filter_map(|p| {
                    let rows = r
                        .figures
                        .node_utilisation
                        .iter()
                        .filter(|n| n.series == s.label && n.level == p.level);
                    Spread::of(rows.map(f)).map(|sp| (p.level, 100.0 * sp.mean))
                })
                .collect()
        };
        let cpu = Series::new(format!("{} CPU", s.label), mean_of(|n| n.cpu));
        chart.add(cpu.colour(c).marker(Marker::None));
        let disk = Series::new(format!("{} disk", s.label), mean_of(|n| n.disk));
        chart.add(
            disk.colour(c)
                .stroke(Stroke::Dashed)
                .marker(Marker::None)
                .unlabelled(),
        );
    }
    let paper = &r.figures.utilisation_vs_paper;
    if !paper.is_empty() {
        let at = |f: fn(&UtilCompare) -> f64| -> Vec<(f64, f64)> {
            paper
                .iter()
                .map(|u| (u.paper_level, 100.0 * f(u)))
                .collect()
        };
        let cpu = Series::new("thesis CPU", at(|u| u.paper_cpu.mean));
        chart.add(
            cpu.colour(palette::REFERENCE)
                .stroke(Stroke::None)
                .marker(Marker::Cross),
        );
        let disk = Series::new("thesis disk", at(|u| u.paper_disk.mean));
        chart.add(
            disk.colour(palette::REFERENCE)
                .stroke(Stroke::None)
                .marker(Marker::Circle),
        );
    }
    chart.svg().map_err(err)
}

fn pct_range(s: Option<Spread>) -> String {
    s.map(|s| {
        format!(
            "{:.0} <small>({:.0}–{:.0}, n={})</small>",
            100.0 * s.mean,
            100.0 * s.min,
            100.0 * s.max,
            s.count
        )
    })
    .unwrap_or_else(|| "-".into())
}

fn html_util_compare(h: &mut String, f: &JonesFigures) {
    if f.utilisation_vs_paper.is_empty() {
        return;
    }
    h.push_str(
        "<table><tr><th class=\"l\">policy</th><th>clients (paper / ours)</th><th>paper CPU %</th><th>paper disk %</th>\
         <th>ours CPU % over nodes</th><th>ours disk % over nodes</th><th>ours CPU % node1 over time</th><th>ours disk % node1 over time</th></tr>",
    );
    for u in &f.utilisation_vs_paper {
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td>{} / {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&u.policy),
            fmt_level(u.paper_level),
            u.ours_level.map(fmt_level).unwrap_or_else(|| "-".into()),
            pct_range(Some(u.paper_cpu)),
            pct_range(Some(u.paper_disk)),
            pct_range(u.ours_cpu_nodes),
            pct_range(u.ours_disk_nodes),
            pct_range(u.ours_cpu_node1_time),
            pct_range(u.ours_disk_node1_time),
        );
    }
    h.push_str(
        "</table><p><small>Paper: iostat on one back-end node every 15 s over a 5-minute run (mean, range, samples). \
         Ours: each emulated node's CPU and disk busy time over the measured window (all repetitions), and node1's own \
         load reports during the window (first repetition; each covers one T_gat, sampled every 250 ms to 1 s, so they \
         scatter more than 15 s iostat samples).</small></p>",
    );
}

fn html_node_table(h: &mut String, r: &LabResults) {
    h.push_str("<details><summary>Every node's CPU / disk % per series and level</summary><table><tr><th class=\"l\">series</th><th>level</th><th class=\"l\">CPU / disk % per node</th></tr>");
    for s in &r.series {
        for p in &s.points {
            let cells: Vec<String> = r
                .figures
                .node_utilisation
                .iter()
                .filter(|n| n.series == s.label && n.level == p.level)
                .map(|n| format!("{} {:.0} / {:.0}", n.node, 100.0 * n.cpu, 100.0 * n.disk))
                .collect();
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td class=\"l\">{}</td></tr>",
                escape(&s.label),
                fmt_level(p.level),
                escape(&cells.join(", "))
            );
        }
    }
    h.push_str("</table></details>");
}

fn html_nodes_alone(h: &mut String, a: &NodesAlone) {
    let _ = write!(
        h,
        "<h2>Each node alone (Jones thesis Fig. 7)</h2><p>The switch sends everything to one node; the thesis at {} clients, ours at {}.</p>\
         <table><tr><th class=\"l\">paper node</th><th>conn/s</th><th>±</th><th class=\"l\">our node</th><th>conn/s</th><th>±</th></tr>",
        fmt_level(a.paper_level),
        a.ours_level.map(fmt_level).unwrap_or_else(|| "-".into())
    );
    for i in 0..a.paper.len().max(a.ours.len()) {
        let cell = |row: Option<&AloneRow>| match row {
            Some(r) => format!(
                "<td class=\"l\">{}</td><td>{:.1}</td><td>{:.1}</td>",
                escape(&r.node),
                r.conn_s,
                r.stdev
            ),
            None => "<td></td><td></td><td></td>".into(),
        };
        let _ = write!(
            h,
            "<tr>{}{}</tr>",
            cell(a.paper.get(i)),
            cell(a.ours.get(i))
        );
    }
    let _ = write!(
        h,
        "<tr><th class=\"l\">fastest / slowest</th><th>{:.2}×</th><th></th><th></th><th>{}</th><th></th></tr></table>",
        a.paper_spread,
        a.ours_spread
            .map(|s| format!("{s:.2}×"))
            .unwrap_or_else(|| "-".into())
    );
}

/// Gain % against clients per node: ours solid with dots, the thesis's crosses, per variant.
fn ratio_svg(rows: &[RatioRow]) -> Result<String, LabError> {
    let mut variants: Vec<&Option<String>> = rows.iter().map(|r| &r.variant).collect();
    variants.dedup();
    let gains = rows
        .iter()
        .flat_map(|r| [r.ours_gain_pct, r.paper_gain_pct])
        .flatten();
    let (lo, hi) = gains.fold((0.0f64, 10.0f64), |(l, h), g| (l.min(g), h.max(g)));
    let xmax = rows.iter().map(|r| r.clients_per_node).fold(1.0, f64::max) * 1.05;
    let mut chart = Chart::new(
        "gain over the baseline vs clients per node",
        "clients per node",
        "gain (%)",
    )
    .size(760, 400)
    .x_range(0.0, xmax)
    .y_range(lo - 5.0, hi + 5.0);
    for (i, v) in variants.iter().enumerate() {
        let c = palette::colour(i);
        let name = v.as_deref().unwrap_or("all");
        let pts = |gain: fn(&RatioRow) -> Option<f64>| -> Vec<(f64, f64)> {
            rows.iter()
                .filter(|r| &r.variant == *v)
                .filter_map(|r| gain(r).map(|g| (r.clients_per_node, g)))
                .collect()
        };
        chart.add(Series::new(format!("ours: {name}"), pts(|r| r.ours_gain_pct)).colour(c));
        let paper = Series::new(format!("paper: {name}"), pts(|r| r.paper_gain_pct));
        chart.add(paper.colour(c).stroke(Stroke::None).marker(Marker::Cross));
    }
    chart.svg().map_err(err)
}

fn html_ratio_table(h: &mut String, rows: &[RatioRow]) {
    h.push_str(
        "<table><tr><th class=\"l\">variant</th><th>nodes</th><th>clients</th><th>clients per node</th>\
         <th>ours gain %</th><th>paper gain %</th></tr>",
    );
    let g = |x: Option<f64>| x.map(|x| format!("{x:+.1}")).unwrap_or_else(|| "-".into());
    for r in rows {
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td></tr>",
            escape(r.variant.as_deref().unwrap_or("-")),
            r.nodes,
            fmt_level(r.clients),
            r.clients_per_node,
            g(r.ours_gain_pct),
            g(r.paper_gain_pct)
        );
    }
    h.push_str("</table>");
}
