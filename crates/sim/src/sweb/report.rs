//! SWEB experiments' results: the JSON (`capstan-sim-sweb/1`), the findings beside the paper's
//! numbers, a text summary and a self-contained HTML page.
//!
//! JSON fields: `format`, `experiment`, `description`, `cluster` (the model's parameters),
//! `replications`, `seeds`, `duration_s`, `points` (one per rate: `rate`, `mean_request_bytes`,
//! `policies`: `policy`, `name`, `requests`, `mean_s`, `p50_s`, `p90_s`, `max_s`,
//! `redirect_fraction`, `unfinished_at_end`, `nodes` [{cpu, disk, nfs, served}]), `capacity`
//! (sweb-sizes only: `sweep`, `policies` [{policy, name, max_sustained_rps,
//! redirect_fraction, formula_rps}], `paper_example`, `paper_example_rps`), `paper` [{what,
//! value}] and `findings`. Estimates are `{value, ci95}` over replications.

use capstan_report::{escape as esc, Chart, Page, Series};
use serde::Serialize;

use super::analysis::Inputs;
use super::experiment::{CapacitySweep, Job, SwebExperiment, Which};
use super::model::{Cluster, NodeUse, RunOutcome};
use crate::stats::{round, Estimate};

/// One policy at one rate.
#[derive(Clone, Debug, Serialize)]
pub struct PolicyResult {
    /// As given (`sweb:sigma=0.5`).
    pub policy: String,
    /// The policy's name (`sweb`).
    pub name: &'static str,
    pub requests: u64,
    pub mean_s: Estimate,
    pub p50_s: Estimate,
    pub p90_s: Estimate,
    pub max_s: Estimate,
    pub redirect_fraction: Estimate,
    pub unfinished_at_end: Estimate,
    pub nodes: Vec<NodeUse>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RatePoint {
    pub rate: f64,
    pub mean_request_bytes: f64,
    pub policies: Vec<PolicyResult>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CapacityPolicy {
    pub policy: String,
    pub name: &'static str,
    /// Highest rate of the sweep below which every rate was sustained (0: none was).
    pub max_sustained_rps: Estimate,
    /// Share of requests redirected at that rate.
    pub redirect_fraction: Estimate,
    /// §3.3's formula with the model's parameters and this policy's redirect share.
    pub formula_rps: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CapacityResult {
    pub sweep: CapacitySweep,
    pub policies: Vec<CapacityPolicy>,
    pub paper_example: Inputs,
    pub paper_example_rps: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PaperNumber {
    pub what: &'static str,
    pub value: &'static str,
}

#[derive(Clone, Debug, Serialize)]
pub struct SwebReport {
    pub format: &'static str,
    pub experiment: &'static str,
    pub description: &'static str,
    pub cluster: Cluster,
    pub replications: usize,
    pub seeds: Vec<u64>,
    pub duration_s: f64,
    pub points: Vec<RatePoint>,
    pub capacity: Option<CapacityResult>,
    pub paper: Vec<PaperNumber>,
    pub findings: Vec<String>,
}

fn paper_numbers(which: Which) -> Vec<PaperNumber> {
    let n = |what, value| PaperNumber { what, value };
    match which {
        Which::SwebSkewed => vec![
            n(
                "set-up (§4.2)",
                "6 servers, 8 rps, 45 s, one 1.5 MB file on one server",
            ),
            n("round robin, mean response", "3.7 s"),
            n("file locality, mean response", "81.4 s"),
            n("SWEB", "not given for this test"),
        ],
        Which::SwebSizes => vec![
            n(
                "set-up (§4.2, Table 3)",
                "100 B – 1.5 MB files, 30 s tests, 0 % drops, Meiko CS-2",
            ),
            n(
                "lightly loaded",
                "SWEB comparable with round robin and file locality",
            ),
            n(
                "rps ≥ 20",
                "SWEB 15–60 % better than round robin and file locality",
            ),
            n(
                "Table 3 rows",
                "not in our copy of the paper (scan lost the table body)",
            ),
            n("§3.3 formula, b1 = 5, b2 = 4.5 MB/s, p = 6", "17.3 rps"),
            n(
                "§4.1, 1.5 MB files on the CS-2",
                "17.8 rps analytic, 16 rps measured (120 s)",
            ),
        ],
    }
}

/// Builds the report from the runs, in the order `SwebExperiment::run` made the jobs.
pub fn summarise(exp: &SwebExperiment, jobs: &[Job], outcomes: &[(RunOutcome, f64)]) -> SwebReport {
    let reps = exp.replications;
    let np = exp.policies.len();
    let group =
        |at: usize| -> Vec<&RunOutcome> { outcomes[at..at + reps].iter().map(|o| &o.0).collect() };
    let points = exp
        .rates
        .iter()
        .enumerate()
        .map(|(ri, &rate)| {
            let at = ri * np * reps;
            let bytes: Vec<f64> = outcomes[at..at + reps].iter().map(|o| o.1).collect();
            RatePoint {
                rate,
                mean_request_bytes: round(mean(&bytes)),
                policies: (0..np)
                    .map(|p| policy_result(exp, p, &group(at + p * reps)))
                    .collect(),
            }
        })
        .collect();
    let capacity = exp.capacity.as_ref().map(|c| {
        let base = exp.rates.len() * np * reps;
        capacity_result(exp, c, &outcomes[base..])
    });
    debug_assert_eq!(jobs.len(), outcomes.len());
    let mut report = SwebReport {
        format: "capstan-sim-sweb/1",
        experiment: exp.which.name(),
        description: exp.which.description(),
        cluster: exp.cluster.clone(),
        replications: reps,
        seeds: exp.seeds(),
        duration_s: exp.duration_s,
        points,
        capacity,
        paper: paper_numbers(exp.which),
        findings: Vec::new(),
    };
    report.findings = findings(&report);
    report
}

fn policy_result(exp: &SwebExperiment, p: usize, runs: &[&RunOutcome]) -> PolicyResult {
    let choice = &exp.policies[p];
    PolicyResult {
        policy: choice.label.clone(),
        name: choice.spec.name(),
        requests: runs.iter().map(|r| r.response_s.len() as u64).sum(),
        mean_s: estimate(runs, |r| mean(&r.response_s)),
        p50_s: estimate(runs, |r| quantile(&r.response_s, 0.5)),
        p90_s: estimate(runs, |r| quantile(&r.response_s, 0.9)),
        max_s: estimate(runs, |r| r.response_s.last().copied().unwrap_or(0.0)),
        redirect_fraction: estimate(runs, redirect_fraction),
        unfinished_at_end: estimate(runs, |r| r.backlog_at_end as f64),
        nodes: mean_node_use(runs),
    }
}

fn capacity_result(
    exp: &SwebExperiment,
    sweep: &CapacitySweep,
    outcomes: &[(RunOutcome, f64)],
) -> CapacityResult {
    let (np, reps) = (exp.policies.len(), exp.replications);
    let run = |ci: usize, p: usize, s: usize| &outcomes[(ci * np + p) * reps + s].0;
    let policies = (0..np)
        .map(|p| {
            let mut best = Vec::new();
            let mut d = Vec::new();
            for s in 0..reps {
                let kept = sweep.rates.iter().enumerate().take_while(|&(ci, &rate)| {
                    run(ci, p, s).backlog_at_end as f64 <= sweep.backlog_seconds * rate
                });
                let last = kept.last();
                best.push(last.map_or(0.0, |(_, &rate)| rate));
                d.push(last.map_or(0.0, |(ci, _)| redirect_fraction(run(ci, p, s))));
            }
            let inputs = Inputs {
                nodes: exp.cluster.nodes,
                file_bytes: sweep.file_bytes as f64,
                b1_mb_s: exp.cluster.disk_mb_s,
                b2_mb_s: exp.cluster.remote_mb_s(),
                redirect_probability: mean(&d),
                preprocess_ms: exp.cluster.preprocess_ms,
                redirect_ms: exp.cluster.redirect_ms,
            };
            CapacityPolicy {
                policy: exp.policies[p].label.clone(),
                name: exp.policies[p].spec.name(),
                max_sustained_rps: Estimate::of(&best),
                redirect_fraction: Estimate::of(&d),
                formula_rps: round(inputs.max_sustained_rps()),
            }
        })
        .collect();
    CapacityResult {
        sweep: sweep.clone(),
        policies,
        paper_example: Inputs::paper_example(),
        paper_example_rps: round(Inputs::paper_example().max_sustained_rps()),
    }
}

/// The mean response of the first policy named `name` at a point.
fn mean_of(point: &RatePoint, name: &str) -> Option<f64> {
    point
        .policies
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.mean_s.value)
}

/// `1 − sweb / other` in percent: how much less time sweb takes.
fn gain(sweb: f64, other: f64) -> f64 {
    if other > 0.0 {
        (1.0 - sweb / other) * 100.0
    } else {
        0.0
    }
}

fn findings(r: &SwebReport) -> Vec<String> {
    let mut out = Vec::new();
    match r.experiment {
        "sweb-skewed" => skewed_findings(r, &mut out),
        _ => sizes_findings(r, &mut out),
    }
    if let Some(c) = &r.capacity {
        capacity_findings(c, &mut out);
    }
    out
}

fn skewed_findings(r: &SwebReport, out: &mut Vec<String>) {
    let Some(point) = r.points.first() else {
        return;
    };
    let (rr, loc, sweb) = (
        mean_of(point, "round-robin"),
        mean_of(point, "home-node"),
        mean_of(point, "sweb"),
    );
    if let (Some(rr), Some(loc)) = (rr, loc) {
        out.push(format!(
            "file locality (home-node) {loc:.1} s vs round robin {rr:.1} s mean response: \
             {:.0}× slower (paper: 81.4 s vs 3.7 s, 22×)",
            loc / rr.max(1e-9)
        ));
    }
    if let (Some(sweb), Some(loc)) = (sweb, loc) {
        let verdict = if sweb < loc { "beats" } else { "does not beat" };
        out.push(format!(
            "sweb {sweb:.1} s {verdict} file locality{}",
            rr.map_or(String::new(), |rr| format!(
                " and is {:.0} % {} round robin",
                gain(sweb, rr).abs(),
                if sweb <= rr { "under" } else { "over" }
            ))
        ));
    }
}

fn sizes_findings(r: &SwebReport, out: &mut Vec<String>) {
    for (heavy, label) in [
        (false, "below 20 rps"),
        (true, "at ≥ 20 rps (paper: 15–60 %)"),
    ] {
        let points: Vec<&RatePoint> = r
            .points
            .iter()
            .filter(|p| (p.rate >= 20.0) == heavy)
            .collect();
        for (rival, rival_label) in [
            ("round-robin", "round robin"),
            ("home-node", "file locality"),
        ] {
            let gains: Vec<f64> = points
                .iter()
                .filter_map(|p| Some(gain(mean_of(p, "sweb")?, mean_of(p, rival)?)))
                .collect();
            if gains.is_empty() {
                continue;
            }
            let (lo, hi) = gains
                .iter()
                .fold((f64::MAX, f64::MIN), |(lo, hi), &g| (lo.min(g), hi.max(g)));
            out.push(format!(
                "{label}: sweb's mean response is {lo:.0} to {hi:.0} % below {rival_label}'s \
                 (negative: above)"
            ));
        }
    }
}

fn capacity_findings(c: &CapacityResult, out: &mut Vec<String>) {
    let measured: Vec<String> = c
        .policies
        .iter()
        .map(|p| {
            format!(
                "{} {:.0} (formula with its d = {:.2}: {:.1})",
                p.policy, p.max_sustained_rps.value, p.redirect_fraction.value, p.formula_rps
            )
        })
        .collect();
    out.push(format!(
        "max sustained rps for {:.1} MB files over {:.0} s: {}; §3.3 with the paper's example \
         numbers: {:.1} (printed: 17.3); the paper measured 16 on the CS-2 (§4.1)",
        c.sweep.file_bytes as f64 / 1e6,
        c.sweep.duration_s,
        measured.join(", "),
        c.paper_example_rps
    ));
}

/// A plain-text summary for the terminal.
pub fn text(r: &SwebReport) -> String {
    let mut t = format!("{} · {}\n", r.experiment, r.description);
    let f = |e: &Estimate| format!("{:.2} ± {:.2}", e.value, e.ci95);
    for point in &r.points {
        t += &format!(
            "\n{} rps · {:.0} s · mean request {:.0} KB · {} replication(s)\n{:<28} {:>16} {:>16} {:>16} {:>9}\n",
            point.rate,
            r.duration_s,
            point.mean_request_bytes / 1e3,
            r.replications,
            "policy",
            "mean s",
            "p90 s",
            "max s",
            "redirect"
        );
        for p in &point.policies {
            t += &format!(
                "{:<28} {:>16} {:>16} {:>16} {:>8.0}%\n",
                p.policy,
                f(&p.mean_s),
                f(&p.p90_s),
                f(&p.max_s),
                p.redirect_fraction.value * 100.0
            );
        }
    }
    t += "\nPaper:\n";
    for n in &r.paper {
        t += &format!("  {}: {}\n", n.what, n.value);
    }
    t += "Findings:\n";
    for f in &r.findings {
        t += &format!("  - {f}\n");
    }
    t
}

/// Mean response against the rate, one line per policy (only with two or more rates).
fn rate_svg(r: &SwebReport) -> Result<Option<String>, String> {
    if r.points.len() < 2 {
        return Ok(None);
    }
    let mut chart = Chart::new(
        format!("{}: mean response time", r.experiment),
        "requests per second",
        "mean response (s, 95 % CI over replications)",
    )
    .size(720, 400);
    for (i, first) in r.points[0].policies.iter().enumerate() {
        let pts = r
            .points
            .iter()
            .map(|p| (p.rate, p.policies[i].mean_s.value))
            .collect();
        let ci = r.points.iter().map(|p| p.policies[i].mean_s.ci95).collect();
        chart.add(Series::new(first.policy.clone(), pts).with_ci(ci));
    }
    chart.svg().map(Some)
}

fn html_points(r: &SwebReport, h: &mut Page) {
    let f = |e: &Estimate| format!("{:.2} ± {:.2}", e.value, e.ci95);
    h.push_str(
        "<h2>Response time (s, mean ± 95 % CI over replications)</h2><table><tr><th>rps</th>\
         <th>policy</th><th>mean</th><th>p50</th><th>p90</th><th>max</th><th>redirected</th>\
         <th>unfinished as arrivals stop</th><th>per node CPU / disk / NFS</th></tr>",
    );
    for point in &r.points {
        for p in &point.policies {
            let nodes: Vec<String> = p
                .nodes
                .iter()
                .map(|u| format!("{:.2}/{:.2}/{:.2}", u.cpu, u.disk, u.nfs))
                .collect();
            h.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{:.0} %</td><td>{:.1}</td><td>{}</td></tr>",
                point.rate,
                esc(&p.policy),
                f(&p.mean_s),
                f(&p.p50_s),
                f(&p.p90_s),
                f(&p.max_s),
                p.redirect_fraction.value * 100.0,
                p.unfinished_at_end.value,
                nodes.join(" · ")
            ));
        }
    }
    h.push_str("</table>");
}

fn html_capacity(c: &CapacityResult, h: &mut Page) {
    h.push_str(&format!(
        "<h2>Maximum sustained rate ({:.1} MB files, {:.0} s, rates {}–{} rps)</h2>\
         <p>Sustained: at most {} seconds' worth of requests unfinished as arrivals stop. \
         §3.3 with the paper's example numbers: <b>{:.1} rps</b> (printed: 17.3); §4.1: 17.8 \
         analytic, 16 measured.</p><table><tr><th>policy</th><th>max sustained rps</th>\
         <th>redirected</th><th>§3.3 with the model's numbers and this d</th></tr>",
        c.sweep.file_bytes as f64 / 1e6,
        c.sweep.duration_s,
        c.sweep.rates.first().copied().unwrap_or(0.0),
        c.sweep.rates.last().copied().unwrap_or(0.0),
        c.sweep.backlog_seconds,
        c.paper_example_rps
    ));
    for p in &c.policies {
        h.push_str(&format!(
            "<tr><td>{}</td><td>{:.1} ± {:.1}</td><td>{:.0} %</td><td>{:.1}</td></tr>",
            esc(&p.policy),
            p.max_sustained_rps.value,
            p.max_sustained_rps.ci95,
            p.redirect_fraction.value * 100.0,
            p.formula_rps
        ));
    }
    h.push_str("</table>");
}

/// The whole report page.
pub fn html(r: &SwebReport) -> Result<String, String> {
    let title = format!("capstan sim: {}", r.experiment);
    let mut h = Page::new(&title, &title);
    h.push_str(&format!(
        "<p>{}</p><p>{} replication(s), seeds {:?}.</p>",
        esc(r.description),
        r.replications,
        r.seeds
    ));
    h.push_str("<h2>Paper vs Capstan</h2><table><tr><th>the paper</th><th></th></tr>");
    for n in &r.paper {
        h.push_str(&format!(
            "<tr><td>{}</td><td>{}</td></tr>",
            esc(n.what),
            esc(n.value)
        ));
    }
    h.push_str("</table><ul>");
    for f in &r.findings {
        h.push_str(&format!("<li>{}</li>", esc(f)));
    }
    h.push_str("</ul>");
    if let Some(svg) = rate_svg(r)? {
        h.push_str(&svg);
    }
    html_points(r, &mut h);
    if let Some(c) = &r.capacity {
        html_capacity(c, &mut h);
    }
    let cluster = serde_json::to_string_pretty(&r.cluster).map_err(|e| e.to_string())?;
    h.push_str(&format!("<h2>Model</h2><pre>{}</pre>", esc(&cluster)));
    Ok(h.finish())
}

/// Mean over replications of a per-run value.
fn estimate(runs: &[&RunOutcome], f: impl Fn(&RunOutcome) -> f64) -> Estimate {
    Estimate::of(&runs.iter().map(|r| f(r)).collect::<Vec<_>>())
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The `q` quantile of sorted values (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Share of requests a run redirected.
fn redirect_fraction(r: &RunOutcome) -> f64 {
    r.redirects as f64 / r.response_s.len().max(1) as f64
}

fn mean_node_use(runs: &[&RunOutcome]) -> Vec<NodeUse> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    let n = runs.len() as f64;
    (0..first.nodes.len())
        .map(|i| {
            let avg = |f: fn(&NodeUse) -> f64| {
                round(runs.iter().map(|r| f(&r.nodes[i])).sum::<f64>() / n)
            };
            NodeUse {
                cpu: avg(|u| u.cpu),
                disk: avg(|u| u.disk),
                nfs: avg(|u| u.nfs),
                served: runs.iter().map(|r| r.nodes[i].served).sum::<u64>() / runs.len() as u64,
            }
        })
        .collect()
}
