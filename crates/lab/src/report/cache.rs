//! A cache experiment's report: the summary table, the per-phase table, and `index.html` with
//! the verdicts, plots and surrogate metrics beside the thesis's numbers.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use capstan_report::{escape, Page};

use crate::model::cache::*;
use crate::model::error::LabError;

fn pct(v: f64) -> String {
    format!("{:.1}", 100.0 * v)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".into(), |x| format!("{x:.digits$}"))
}

/// The per-contender, per-phase table (text) with the thesis's rows after ours, then the
/// better performer per phase and metric and the proxies' surrogate metrics per phase.
pub fn summary_table(r: &CacheResults) -> String {
    format!(
        "{}\n{}\n{}",
        phase_table(r),
        crate::run::cache::verdicts::verdict_table(r),
        crate::run::cache::surrogates::surrogate_table(r)
    )
}

/// Per contender and phase, the thesis's rows after ours.
fn phase_table(r: &CacheResults) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<13} {:<6} {:>8} {:>8} {:>6} {:>7} {:>6} {:>7} {:>8} {:>8} {:>8} {:>6}",
        "contender",
        "phase",
        "offered",
        "resp/s",
        "DHR%",
        "offDHR%",
        "BHR%",
        "offBHR%",
        "hit ms",
        "miss ms",
        "all ms",
        "errors"
    );
    for c in &r.contenders {
        let Some(res) = &c.result else {
            let _ = writeln!(
                s,
                "{:<13} skipped: {}",
                c.name,
                c.skipped.as_deref().unwrap_or("?")
            );
            continue;
        };
        for p in &res.phases {
            let errors: u64 = p.errors.values().sum();
            let _ = writeln!(
                s,
                "{:<13} {:<6} {:>8.1} {:>8.1} {:>6} {:>7} {:>6} {:>7} {:>8.2} {:>8.1} {:>8.1} {:>6}",
                c.name,
                p.name,
                p.offered_rps,
                p.throughput_rps,
                pct(p.dhr),
                pct(p.offered_dhr),
                pct(p.bhr),
                pct(p.offered_bhr),
                p.hit_ms.mean,
                p.miss_ms.mean,
                p.response_ms.mean,
                errors
            );
        }
    }
    for p in &r.paper {
        let _ = writeln!(
            s,
            "{:<13} {:<6} {:>8} {:>8} {:>6} {:>7} {:>6} {:>7} {:>8} {:>8} {:>8}   (thesis)",
            p.contender,
            p.phase,
            "",
            opt(p.throughput_rps, 1),
            opt(p.dhr, 1),
            opt(p.offered_dhr, 1),
            opt(p.bhr, 1),
            opt(p.offered_bhr, 1),
            opt(p.hit_ms, 1),
            opt(p.miss_ms, 1),
            opt(p.response_ms, 1),
        );
    }
    s
}

/// Writes `results.json` and `index.html` (tables: per contender and phase, the thesis's
/// numbers, the proxies' CPU and memory, the better performer per phase and metric, CPU and
/// RSS over time, findings) into `out`; returns the HTML's path.
pub fn write_report(r: &CacheResults, out: &Path) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(out)
        .map_err(|e| LabError::Report(format!("{}: {e}", out.display())))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report(e.to_string()))?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::Report(format!("cannot write results.json: {e}")))?;
    let mut h = Page::new(&r.title, &r.title);
    let _ = write!(
        h,
        "<p>Rebuilds {f}. Mode {m}: time scale {ts}, cache {cb:.1} MiB per \
         contender, origin think time × {th}. Load average at start: {la}.</p>\
         <p><code>{cmd}</code></p><h2>Results per phase</h2><pre>{table}</pre>",
        f = escape(&r.figure),
        m = r.mode,
        ts = r.time_scale,
        cb = r.cache_bytes as f64 / 1048576.0,
        th = r.think_scale,
        la = escape(r.load_at_start.trim()),
        cmd = escape(&r.command),
        table = escape(&phase_table(r)),
    );
    h.push_str("<h2>Contenders</h2><table><tr><th>contender</th><th>version</th><th>set-up</th><th>CPU s</th><th>CPU ms / 1000 resp</th><th>RSS MB</th><th>generator CPU %</th></tr>");
    for c in &r.contenders {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&c.name),
            escape(&c.version),
            escape(c.skipped.as_deref().map_or(c.setup.as_str(), |w| w)),
            opt(c.proxy_cpu_s, 2),
            opt(c.proxy_cpu_ms_per_1k, 1),
            opt(c.proxy_rss_mb, 1),
            opt(c.result.as_ref().map(|x| x.generator_cpu_percent), 1),
        );
    }
    h.push_str("</table>");
    h.push_str(&crate::run::cache::verdicts::verdict_html(r));
    h.push_str(&crate::run::cache::plots::plots_html(r)?);
    h.push_str(&crate::run::cache::surrogates::surrogate_html(r)?);
    h.push_str("<h2>Findings</h2><ul>");
    for f in &r.findings {
        let _ = write!(h, "<li>{}</li>", escape(f));
    }
    h.push_str("</ul><h2>The thesis's numbers</h2><ul>");
    for p in &r.paper {
        let _ = write!(
            h,
            "<li>{} {}: {}</li>",
            escape(&p.contender),
            escape(&p.phase),
            escape(&p.source)
        );
    }
    h.push_str(
        "</ul><p>Per-second time lines of every run are in results.json \
                (contenders[].result.timeline).</p>",
    );
    let path = out.join("index.html");
    std::fs::write(&path, h.finish())
        .map_err(|e| LabError::Report(format!("cannot write index.html: {e}")))?;
    Ok(path)
}
