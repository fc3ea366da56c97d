//! A WAN experiment's findings in words, with the paper's numbers beside ours.

use std::fmt::Write as _;

use crate::model::wan::{ran, ContenderRuns, Vary, WanResults};

fn change_pct(first: f64, last: f64) -> Option<f64> {
    (first > 0.0).then(|| (last / first - 1.0) * 100.0)
}

/// What the runs show, in words: each contender's throughput and connections from the first
/// level to the last, the paper's number beside it, and what a mix did per path.
pub fn findings(r: &WanResults) -> Vec<String> {
    let mut out = Vec::new();
    for c in ran(r) {
        if r.vary == Some(Vary::Mix) {
            out.extend(mix_finding(c));
            continue;
        }
        let (Some(first), Some(last)) = (c.levels.first(), c.levels.last()) else {
            continue;
        };
        let mut f = format!(
            "{}: {:.0} → {:.0} completed/s from {} to {} ({}); connections open {:.0} → {:.0}",
            c.name,
            first.throughput_rps,
            last.throughput_rps,
            first.level,
            last.level,
            change_pct(first.throughput_rps, last.throughput_rps)
                .map_or("–".into(), |p| format!("{p:+.0} %")),
            first.established_mean,
            last.established_mean,
        );
        let _ = write!(
            f,
            " (+ {:.0} closed by the server, still finishing in the kernel, {:.0} KB at most in send queues)",
            last.finishing_mean,
            last.send_queue_max_bytes as f64 / 1e3
        );
        if let (Some(a), Some(b)) = (first.processes_mean, last.processes_max) {
            let _ = write!(f, ", processes {a:.0} → up to {b}");
        }
        if let (Some(a), Some(b)) = (first.hit_ratio, last.hit_ratio) {
            let _ = write!(f, ", file cache hit ratio {a:.2} → {b:.2}");
        }
        if last.accept_queue_max > 0 {
            let _ = write!(
                f,
                "; up to {} waiting in the accept queue",
                last.accept_queue_max
            );
        }
        out.push(f + ".");
        out.extend(paper_lines(r, c));
    }
    out.extend(protocol_findings(r));
    out
}

/// Beside each other at every level, the protocol contenders (`switch-h1`, `-h2`, `-h3`):
/// goodput, p50, p99 and the slowest request, and whether HTTP/3 kept up with HTTP/2 (the
/// issue's claim: goodput at least HTTP/2's and p99 at most).
fn protocol_findings(r: &WanResults) -> Vec<String> {
    let find = |name: &str| ran(r).find(|c| c.name == name);
    let protocols: Vec<&ContenderRuns> = ["switch-h1", "switch-h2", "switch-h3"]
        .iter()
        .filter_map(|n| find(n))
        .collect();
    if protocols.len() < 2 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for level in &r.levels {
        let cells: Vec<String> = protocols
            .iter()
            .filter_map(|c| {
                let l = c.levels.iter().find(|l| &l.level == level)?;
                Some(format!(
                    "{} {:.2} Mbit/s, p50 {:.0} / p99 {:.0} / max {:.0} ms, {} errors",
                    if l.protocol.is_empty() {
                        &c.name
                    } else {
                        &l.protocol
                    },
                    l.goodput_mbps,
                    l.p50_ms,
                    l.p99_ms,
                    l.max_ms,
                    l.errors + l.unfinished
                ))
            })
            .collect();
        let mut f = format!("At {level} loss: {}", cells.join("; "));
        let at = |name: &str| find(name)?.levels.iter().find(|l| &l.level == level);
        if let (Some(h2), Some(h3)) = (at("switch-h2"), at("switch-h3")) {
            let verdict = if h3.goodput_mbps >= h2.goodput_mbps && h3.p99_ms <= h2.p99_ms {
                "HTTP/3 kept up with HTTP/2 (goodput ≥, p99 ≤)"
            } else if h3.p99_ms > h2.p99_ms {
                "HTTP/3's p99 is above HTTP/2's"
            } else {
                "HTTP/3's goodput is below HTTP/2's"
            };
            let _ = write!(f, " — {verdict}");
        }
        out.push(f + ".");
    }
    if let Some(c) = r.contenders.iter().find(|c| c.name == "switch-h3") {
        if let Some(why) = &c.skipped {
            out.push(format!("HTTP/3: no numbers — {why}."));
        }
    }
    out
}

fn mix_finding(c: &ContenderRuns) -> Option<String> {
    let l = c.levels.first()?;
    let paths: Vec<String> = l
        .paths
        .iter()
        .map(|p| {
            format!(
                "{} {:.1}/s p50 {:.0} ms p99 {:.0} ms",
                p.name, p.completed_rps, p.p50_ms, p.p99_ms
            )
        })
        .collect();
    Some(format!(
        "{}: {:.1} of {:.0} req/s with {:.0} connections open on average (max {}) and {:.0} \
         closed but still finishing in the kernel; per path: {}.",
        c.name,
        l.throughput_rps,
        l.offered_rps,
        l.established_mean,
        l.established_max,
        l.finishing_mean,
        paths.join("; ")
    ))
}

/// The paper's numbers for this contender, each beside ours at the same level.
fn paper_lines(r: &WanResults, c: &ContenderRuns) -> Vec<String> {
    let first = c.levels.first();
    r.paper
        .iter()
        .filter(|p| p.contender == c.name)
        .filter_map(|p| {
            let ours = c.levels.iter().find(|l| l.level == p.level)?;
            let mut parts = Vec::new();
            if let (Some(theirs), Some(f)) = (p.throughput_change_pct, first) {
                let mine = change_pct(f.throughput_rps, ours.throughput_rps)?;
                parts.push(format!("throughput {theirs:+.0} % (ours {mine:+.0} %)"));
            }
            if let Some(theirs) = p.processes {
                parts.push(format!(
                    "{theirs:.0} processes (ours up to {})",
                    ours.processes_max.map_or("–".into(), |m| m.to_string())
                ));
            }
            if let Some(theirs) = p.active_connections {
                parts.push(format!(
                    "{theirs:.0} active connections (ours {:.0})",
                    ours.established_mean
                ));
            }
            if let Some(theirs) = p.throughput_rps {
                parts.push(format!(
                    "{theirs:.0} req/s (ours {:.0}, at our own scale)",
                    ours.throughput_rps
                ));
            }
            (!parts.is_empty()).then(|| {
                format!(
                    "  paper, {} at {}: {} — {}",
                    p.server,
                    p.level,
                    parts.join(", "),
                    p.source
                )
            })
        })
        .collect()
}
