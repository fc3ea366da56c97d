//! Report parts of the Banga & Druschel experiments (`sclient-overload`, Figs. 6–7;
//! `sclient-bursty`, Fig. 8): per level the S-Clients' sockets, connection attempts and
//! abandoned attempts per second beside D/T, throughput relative to the peak, and the paper's
//! numbers beside ours. Kept apart from `experiment.rs` (the policy experiment's report), which
//! calls [`findings`] and [`html`].

use std::fmt::Write as _;

use crate::model::experiment::Experiment;
use crate::model::results::{LabResults, RunRecord, SeriesResult};

/// The paper's S-Client connect timeout T (§5.2).
const PAPER_T_S: f64 = 0.5;
/// Fig. 7: NCSA httpd saturates at about 130 transactions/s …
const PAPER_CAPACITY: f64 = 130.0;
/// … and delivers about 75/s at 2065 requests/s offered.
const PAPER_TOP_OFFERED: f64 = 2065.0;
const PAPER_TOP_THROUGHPUT: f64 = 75.0;
/// Fig. 8, (6, 5): 12–20 % less throughput well below capacity.
const PAPER_BURST_LOSS_PCT: (f64, f64) = (12.0, 20.0);

/// Whether `r` is an S-Client run (the engine that reports attempts per socket).
fn is_sclient(r: &LabResults) -> bool {
    r.engine == "sclient"
}

/// Per-run rates: (sockets D, attempts/s, abandoned/s).
fn rates(q: &RunRecord) -> (f64, f64, f64) {
    let w = q.duration_s.max(1e-9);
    let d = (q.offered_rps * PAPER_T_S).round().max(1.0);
    (
        d,
        q.connect_attempts as f64 / w,
        q.connect_timeouts as f64 / w,
    )
}

/// Successful responses (2xx and 3xx) per second of a run: the paper's throughput. Past
/// capacity the switch answers some requests itself (a 503 once the node is taken out after
/// failed connects, a 502 when a connect times out); those complete fast and must not count.
pub fn good_rps(q: &RunRecord) -> f64 {
    let good: u64 = q
        .status
        .iter()
        .filter(|(k, _)| k.starts_with('2') || k.starts_with('3'))
        .map(|(_, v)| *v)
        .sum();
    good as f64 / q.duration_s.max(1e-9)
}

/// Mean over the repetitions of the successful responses per second at `level`.
fn good_at(s: &SeriesResult, level: f64) -> f64 {
    let v: Vec<f64> = s
        .runs
        .iter()
        .filter(|q| q.level == level)
        .map(good_rps)
        .collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// Findings comparing ours with the paper's Figs. 6–8.
pub fn findings(r: &LabResults, exp: &Experiment) -> Vec<String> {
    let mut out = Vec::new();
    let Some(s) = r.series.first() else {
        return out;
    };
    let peak = r.levels.iter().map(|&l| good_at(s, l)).fold(0.0, f64::max);
    if is_sclient(r) {
        if let Some(q) = s.runs.iter().max_by(|a, b| a.level.total_cmp(&b.level)) {
            let (d, attempts, _) = rates(q);
            out.push(format!(
                "Fig. 6: {d:.0} sockets with T = 500 ms made {attempts:.0} connection attempts/s \
                 (D/T = {:.0}/s, {:.0} %); the paper's S-Clients grew linearly to {PAPER_TOP_OFFERED:.0}/s",
                d / PAPER_T_S,
                100.0 * attempts / (d / PAPER_T_S).max(1e-9)
            ));
            if let Some(cap) = r.capacity_rps {
                let clients = exp.load.calibrate_clients;
                out.push(format!(
                    "Closed loop vs S-Clients: {clients} closed-loop clients (the capacity \
                     measurement) completed {cap:.1}/s and could offer no more, each waiting for \
                     its response; the S-Clients offered {attempts:.0} attempts/s, {:.1}× that",
                    attempts / cap.max(1e-9)
                ));
            }
            let last = good_at(s, q.level);
            let others = q.throughput_rps - good_rps(q);
            out.push(format!(
                "Fig. 7: at {:.1}× capacity our throughput (successful responses) is {last:.1}/s, \
                 {:.0} % of the peak {peak:.1}/s ({others:.1}/s more were errors the switch answered); \
                 the paper's fell to {PAPER_TOP_THROUGHPUT:.0}/s at {:.1}× ({:.0} % of {PAPER_CAPACITY:.0}/s)",
                q.level,
                100.0 * last / peak.max(1e-9),
                PAPER_TOP_OFFERED / PAPER_CAPACITY,
                100.0 * PAPER_TOP_THROUGHPUT / PAPER_CAPACITY
            ));
        }
    }
    if let (Some(b), Some(cap)) = (exp.load.burst, r.capacity_rps) {
        for p in s.points.iter().filter(|p| p.level < 1.0) {
            let mean = p.level * cap;
            let good = good_at(s, p.level);
            out.push(format!(
                "Fig. 8 ({:.0}, {:.0}): at a mean of {:.2}× capacity ({mean:.1}/s) the throughput is \
                 {:.1}/s, {:+.0} % from the mean rate; the paper: {:.0}–{:.0} % below it well under capacity",
                b.peak,
                b.fraction * 100.0,
                p.level,
                good,
                100.0 * (good / mean.max(1e-9) - 1.0),
                PAPER_BURST_LOSS_PCT.0,
                PAPER_BURST_LOSS_PCT.1
            ));
        }
    }
    out
}

/// The S-Clients table (empty for other engines).
pub fn html(r: &LabResults) -> String {
    let mut h = String::new();
    if !is_sclient(r) {
        return h;
    }
    h.push_str(
        "<h2>S-Clients per level (Figs. 6 and 7)</h2><table><tr><th class=\"l\">series</th>\
         <th>level</th><th>rep</th><th>sockets D</th><th>D/T /s</th><th>attempts /s</th>\
         <th>abandoned /s</th><th>throughput /s</th><th>errors /s</th><th>paper (×)</th></tr>",
    );
    for s in &r.series {
        for q in &s.runs {
            let (d, attempts, abandoned) = rates(q);
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{d:.0}</td><td>{:.0}</td>\
                 <td>{attempts:.1}</td><td>{abandoned:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td></tr>",
                capstan_report::escape(&s.label),
                q.level,
                q.repetition,
                d / PAPER_T_S,
                good_rps(q),
                q.throughput_rps - good_rps(q),
                paper_at(q.level)
            );
        }
    }
    let _ = write!(
        h,
        "</table><p>Paper: T = 500 ms; capacity ≈ {PAPER_CAPACITY:.0}/s, {PAPER_TOP_THROUGHPUT:.0}/s at \
         {PAPER_TOP_OFFERED:.0}/s offered. Attempts count every SYN the generator sent (the paper's \
         request rate); abandoned ones were not established within T. Throughput counts successful \
         responses (2xx, 3xx); errors are the answers the switch gave itself once the node could \
         not take connections (a 503 after failed connects took it out, a 502 when one timed out).</p>"
    );
    h
}

/// The paper's throughput as a fraction of its capacity, at the two load levels it states.
fn paper_at(level: f64) -> String {
    let top = PAPER_TOP_OFFERED / PAPER_CAPACITY;
    if (level - 1.0).abs() < 1e-9 {
        "1.00".into()
    } else if (level - top).abs() < 0.5 {
        format!("{:.2}", PAPER_TOP_THROUGHPUT / PAPER_CAPACITY)
    } else {
        "-".into()
    }
}
