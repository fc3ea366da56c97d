//! A WAN experiment's report: the summary table, and `index.html` (with the findings the run
//! concluded, see `run::wan::findings`) with plots of throughput, open connections and processes
//! against the varied setting, and of the connections over time in each contender's last run.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::model::error::LabError;
use crate::model::wan::{ran, ContenderRuns, LevelResult, Vary, WanResults};
use capstan_report::{escape, Chart, Marker, Page, Series};

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |x| format!("{x:.digits$}"))
}

/// One line per contender and level (and per path of a mix).
pub fn summary_table(r: &WanResults) -> String {
    let mut s = format!(
        "{:<20} {:>7} {:>8} {:>8} {:>7} {:>9} {:>9} {:>6} {:>6} {:>6} {:>7} {:>6} {:>6}\n",
        "contender",
        "level",
        "offer/s",
        "done/s",
        "errors",
        "p50 ms",
        "p99 ms",
        "conns",
        "max",
        "fin",
        "backlog",
        "procs",
        "hit"
    );
    for c in &r.contenders {
        if let Some(why) = &c.skipped {
            let _ = writeln!(s, "{:<20} skipped: {why}", c.name);
        }
        for l in &c.levels {
            let _ = writeln!(
                s,
                "{:<20} {:>7} {:>8.0} {:>8.1} {:>7} {:>9.1} {:>9.1} {:>6.1} {:>6} {:>6.1} {:>7} {:>6} {:>6}",
                c.name,
                l.level,
                l.offered_rps,
                l.throughput_rps,
                l.errors + l.unfinished,
                l.p50_ms,
                l.p99_ms,
                l.established_mean,
                l.established_max,
                l.finishing_mean,
                l.accept_queue_max,
                opt(l.processes_mean, 0),
                opt(l.hit_ratio, 3),
            );
            if r.vary == Some(Vary::Mix) {
                for p in &l.paths {
                    let _ = writeln!(
                        s,
                        "  {:<18} {:>7} {:>8.1} {:>8.1} {:>7} {:>9.1} {:>9.1}   router drops {}",
                        p.name,
                        "",
                        p.offered_rps,
                        p.completed_rps,
                        p.errors,
                        p.p50_ms,
                        p.p99_ms,
                        p.router_drops
                    );
                }
            }
        }
    }
    s
}

/// A chart of one figure per level, a line per contender named at its end; x is the level's
/// position.
fn levels_svg(
    r: &WanResults,
    caption: &str,
    y_desc: &str,
    value: &dyn Fn(&LevelResult) -> Option<f64>,
) -> Result<String, LabError> {
    let mut chart = Chart::new(caption, r.x_label.as_str(), y_desc)
        .size(720, 360)
        .x_categories(r.levels.clone());
    for c in ran(r) {
        let pts: Vec<(f64, f64)> = c
            .levels
            .iter()
            .filter_map(|l| {
                let x = r.levels.iter().position(|v| *v == l.level)?;
                Some((x as f64, value(l)?))
            })
            .collect();
        chart.add(Series::new(c.name.as_str(), pts));
    }
    chart.svg().map_err(LabError::Report)
}

/// Open connections over time in each contender's last run (the highest level).
fn timeline_svg(r: &WanResults) -> Result<String, LabError> {
    let last = |c: &ContenderRuns| c.levels.last().cloned().unwrap_or_default();
    let level = r.levels.last().cloned().unwrap_or_default();
    let mut chart = Chart::new(
        format!("connections open at the server over time, {level}"),
        "seconds since the load started",
        "ESTABLISHED connections",
    )
    .size(720, 360);
    for c in ran(r) {
        let pts: Vec<(f64, f64)> = last(c)
            .samples
            .iter()
            .map(|s| (s.t_s, s.established as f64))
            .collect();
        chart.add(Series::new(c.name.as_str(), pts).marker(Marker::None));
    }
    chart.svg().map_err(LabError::Report)
}

/// The plots of a run that varies a setting (a mix has one level: its table says it all).
fn charts(r: &WanResults) -> Result<String, LabError> {
    if r.vary == Some(Vary::Mix) {
        return Ok(String::new());
    }
    let mut h = String::from("<h2>Plots</h2>");
    h += &levels_svg(
        r,
        "throughput (Fig. 9)",
        "responses/s, steady state",
        &|l| Some(l.throughput_rps),
    )?;
    h += &levels_svg(
        r,
        "connections open at the server (Fig. 10, solid)",
        "mean ESTABLISHED connections",
        &|l| Some(l.established_mean),
    )?;
    h += &levels_svg(
        r,
        "connections the server closed, still finishing in its kernel",
        "mean FIN-WAIT / LAST-ACK",
        &|l| Some(l.finishing_mean),
    )?;
    h += &levels_svg(
        r,
        "server processes (Fig. 10, dotted)",
        "mean processes",
        &|l| l.processes_mean,
    )?;
    h += &levels_svg(r, "response time", "p99 ms (from the schedule)", &|l| {
        Some(l.p99_ms)
    })?;
    h += &levels_svg(
        r,
        "median response time",
        "p50 ms (from the schedule)",
        &|l| Some(l.p50_ms),
    )?;
    h += &levels_svg(r, "per-request tail", "p99.9 ms over the whole run", &|l| {
        Some(l.p999_ms)
    })?;
    h += &levels_svg(r, "goodput", "response bodies, Mbit/s", &|l| {
        Some(l.goodput_mbps)
    })?;
    Ok(h)
}

/// Writes `results.json` and `index.html` into `out`; returns the HTML's path.
pub fn write_report(r: &WanResults, out: &Path) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(out)
        .map_err(|e| LabError::Report(format!("{}: {e}", out.display())))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report(e.to_string()))?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::Report(format!("cannot write results.json: {e}")))?;
    let mut h = Page::with_style(&r.title, &r.title, "td,th{text-align:left}");
    let _ = write!(
        h,
        "<p>Rebuilds {f}. {about}</p><p>Mode {m}: {rate} requests/s offered for \
         {w} s of warm-up and {d} s measured per run. Load average at start: {la}.</p><p><code>{cmd}</code></p>\
         <h2>Findings</h2><ul>",
        f = escape(&r.figure),
        about = escape(&r.about),
        m = r.mode,
        rate = r.rate,
        d = r.duration_s,
        w = r.warmup_s,
        la = escape(r.load_at_start.trim()),
        cmd = escape(&r.command),
    );
    for f in &r.findings {
        let _ = write!(h, "<li>{}</li>", escape(f));
    }
    let _ = write!(
        h,
        "</ul>{}<h2>Results</h2><pre>{}</pre>",
        charts(r)?,
        escape(&summary_table(r))
    );
    if r.vary != Some(Vary::Mix) && ran(r).next().is_some() {
        h.push_str(&timeline_svg(r)?);
    }
    h.push_str("<h2>Contenders</h2><table><tr><th>contender</th><th>version</th><th>set-up</th><th>CPU ms per 1,000 responses, per level</th></tr>");
    for c in &r.contenders {
        let cpu: Vec<String> = c.levels.iter().map(|l| opt(l.cpu_ms_per_1k, 0)).collect();
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&c.name),
            escape(&c.version),
            escape(c.skipped.as_deref().map_or(c.setup.as_str(), |w| w)),
            cpu.join(" / ")
        );
    }
    h.push_str(
        "</table><p>Columns: conns = mean ESTABLISHED connections on the server's port in the \
         measured seconds, max = their maximum, fin = mean connections the server has closed \
         that its kernel still finishes (FIN-WAIT, LAST-ACK: where an event-driven server's \
         slow connections live), backlog = the most \
         connections waiting in the accept queue, procs = mean server processes (busy \
         processes of the emulated node, all apache2 processes, nginx's workers), hit = the \
         emulated file cache's hit ratio. QUIC connections (HTTP/3) are not TCP: they do not \
         show in conns. Samples every 250 ms, the generator's results (goodput, protocol, \
         p99.9 and the slowest request per run) and the router's per-path counters are in \
         results.json.</p>",
    );
    let path = out.join("index.html");
    std::fs::write(&path, h.finish())
        .map_err(|e| LabError::Report(format!("cannot write index.html: {e}")))?;
    Ok(path)
}
