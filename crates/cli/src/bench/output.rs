//! Running and showing a run: the runtime it runs on, the progress line while it runs, then the
//! summary, the JSON result and the HTML report.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use capstan_bench::{RunResult, WanResult};

pub(super) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")
}

/// The once-a-second progress line on standard error (rewritten in place on a terminal).
pub(super) fn progress_printer(quiet: bool) -> Option<capstan_bench::ProgressFn> {
    if quiet {
        return None;
    }
    let tty = std::io::stderr().is_terminal();
    Some(Arc::new(move |p: &capstan_bench::Progress| {
        let line = format!(
            "{:>4.0}s/{:.0}s  {:>9.0} req/s  p99 {:>8.2} ms  started {}  done {}  errors {}  dropped {}  in flight {}",
            p.elapsed_s, p.duration_s, p.rps, p.p99_ms, p.started, p.completed, p.errors, p.dropped, p.inflight
        );
        if tty {
            eprint!("\r\x1b[2K{line}");
        } else if (p.elapsed_s as u64).is_multiple_of(5) {
            eprintln!("{line}");
        }
    }))
}

/// Ends a progress line left open on a terminal.
pub(super) fn end_progress_line(quiet: bool) {
    if !quiet && std::io::stderr().is_terminal() {
        eprintln!();
    }
}

pub(super) fn write_outputs(
    r: &RunResult,
    json: Option<&Path>,
    report: Option<&Path>,
    quiet: bool,
) -> anyhow::Result<()> {
    for w in &r.generator.warnings {
        eprintln!("capstan: warning: {w}");
    }
    if let Some(p) = json {
        let s = serde_json::to_string_pretty(r)?;
        std::fs::write(p, s + "\n").with_context(|| format!("cannot write {}", p.display()))?;
    }
    if let Some(p) = report {
        std::fs::write(p, capstan_bench::report::html(r))
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    if !quiet {
        print!("{}", summary(r));
    }
    Ok(())
}

fn summary(r: &RunResult) -> String {
    let l = &r.latency_ms;
    let mut s = format!(
        "{} ({} engine, {}, shards {})\n\
         duration {:.1}s  offered {} ({:.1}/s)  started {}  completed {} ({:.1}/s)  dropped {}  unfinished {}\n\
         latency ms   p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  (corrected)\n\
         \x20            p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}  (uncorrected)\n\
         connect ms p50 {:.3} p99 {:.3}   ttfb ms p50 {:.3} p99 {:.3}   lag ms p99 {:.3}\n",
        r.target,
        r.engine,
        if r.protocol.is_empty() { "http/1" } else { &r.protocol },
        r.shards.join(","),
        r.duration_s,
        r.offered,
        r.offered as f64 / r.duration_s.max(1e-9),
        r.started,
        r.completed,
        r.completed_rps,
        r.dropped,
        r.unfinished,
        l.corrected.p50,
        l.corrected.p90,
        l.corrected.p99,
        l.corrected.p999,
        l.corrected.max,
        l.uncorrected.p50,
        l.uncorrected.p90,
        l.uncorrected.p99,
        l.uncorrected.p999,
        l.uncorrected.max,
        r.connect_ms.p50,
        r.connect_ms.p99,
        r.ttfb_ms.p50,
        r.ttfb_ms.p99,
        r.lag_ms.p99,
    );
    if r.engine == "sclient" {
        s += &format!(
            "S-Client connect attempts {} ({:.1}/s)  abandoned {}  established {}  responses {}\n",
            r.connect_attempts,
            r.connect_attempts as f64 / r.duration_s.max(1e-9),
            r.connect_timeouts,
            r.connections_opened,
            r.completed
        );
    }
    if r.errors_total > 0 || r.connect_timeouts > 0 {
        let e: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        // The S-Client opens a new attempt rather than retrying the request.
        let then = if r.engine == "sclient" {
            "abandoned"
        } else {
            "retried"
        };
        s += &format!(
            "errors {}  ({})  connect timeouts {then} {}\n",
            r.errors_total,
            e.join(", "),
            r.connect_timeouts
        );
    }
    if r.gave_up {
        s += &format!(
            "stopped after {:.1}s: no response at all, only errors (--max-error-rate 1 runs the whole duration)\n",
            r.duration_s
        );
    }
    if r.sessions > 0 {
        s += &format!(
            "sessions {}  page ms p50 {:.3} p90 {:.3} p99 {:.3}\n",
            r.sessions, r.page_ms.p50, r.page_ms.p90, r.page_ms.p99
        );
    }
    if r.redirected_ms.count > 0 {
        s += &format!(
            "redirected {}  ms p50 {:.3} p90 {:.3} p99 {:.3}\n",
            r.redirected_ms.count, r.redirected_ms.p50, r.redirected_ms.p90, r.redirected_ms.p99
        );
    }
    if r.cache.hits + r.cache.misses > 0 {
        s += &format!(
            "cache hits {} misses {}  DHR {:.3}  BHR {:.3}\n",
            r.cache.hits, r.cache.misses, r.cache.doc_hit_ratio, r.cache.byte_hit_ratio
        );
    }
    if !r.nodes.is_empty() {
        let n: Vec<String> = r.nodes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        s += &format!("nodes  {}\n", n.join(", "));
    }
    for t in &r.targets {
        s += &format!(
            "target {}  responses {}  errors {}  connections {} ({} moved here)  refused {}\n",
            t.address, t.requests, t.errors, t.connects, t.reconnects, t.refused
        );
    }
    if let Some(w) = &r.wan {
        s += &wan_summary(w);
    }
    s
}

/// The text summary's WAN part: per path its load, latency and the router's counters.
fn wan_summary(w: &WanResult) -> String {
    let r = &w.router;
    let mut s = format!(
        "wan    server {}  router CPU {:.2} s  timer lead {:.1} µs  wake-up lateness p99 {:.1} µs  unrouted {}\n",
        w.server,
        r["pacer"]["router_cpu_s"].as_f64().unwrap_or(0.0),
        r["pacer"]["lead_us"].as_f64().unwrap_or(0.0),
        r["pacer"]["lateness_p99_us"].as_f64().unwrap_or(0.0),
        r["unrouted"].as_u64().unwrap_or(0),
    );
    for p in &w.paths {
        let l = &p.latency_ms.corrected;
        s += &format!(
            "path {:<10} share {:>5.1} %  completed {} ({:.1}/s)  errors {}  latency ms p50 {:.3} p99 {:.3}  connect ms p50 {:.3}\n",
            p.name, p.share * 100.0, p.completed, p.completed_rps, p.errors_total, l.p50, l.p99, p.connect_ms.p50
        );
        for dir in ["up", "down"] {
            let d = &p.router[dir];
            s += &format!(
                "  {dir:<4} {}  packets {}  bytes {}  drops loss {} queue {}  max queue {} p  delay error p99 {:.1} µs\n",
                p.router[format!("{dir}_params")].as_str().unwrap_or(""),
                d["packets_out"].as_u64().unwrap_or(0),
                d["bytes_out"].as_u64().unwrap_or(0),
                d["drops"]["loss"].as_u64().unwrap_or(0),
                d["drops"]["queue"].as_u64().unwrap_or(0),
                d["max_queue_packets"].as_u64().unwrap_or(0),
                d["delay_error_us"]["p99"].as_f64().unwrap_or(0.0),
            );
        }
    }
    s
}

/// `--max-error-rate`: why the run `r` failed (one line), or None when it passed. Succeeded:
/// 2xx and 3xx responses; failed: every other finished request (transport errors, 4xx, 5xx).
pub(super) fn verdict(r: &RunResult, max_error_rate: f64) -> Option<String> {
    if max_error_rate >= 1.0 {
        return None;
    }
    let count = |class: &str| r.status.get(class).copied().unwrap_or(0);
    let succeeded = count("2xx") + count("3xx");
    let failed = r.requests.saturating_sub(succeeded);
    let kinds = r
        .errors
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    if r.requests == 0 {
        return Some(format!(
            "no request finished in {:.1} s ({} started, {} dropped, {} unfinished): nothing was \
             measured",
            r.duration_s, r.started, r.dropped, r.unfinished
        ));
    }
    if succeeded == 0 {
        let client_errors = r.errors.get("http_4xx").copied().unwrap_or(0);
        let stopped = if r.gave_up {
            format!(
                "; stopped after {:.0} s without a single response: is anything serving {}?",
                r.duration_s, r.target
            )
        } else if client_errors == failed {
            format!("; does the server have {}?", r.target)
        } else {
            String::new()
        };
        return Some(format!(
            "no request succeeded: {failed} of {} failed ({kinds}){stopped}",
            r.requests
        ));
    }
    let rate = failed as f64 / r.requests as f64;
    (rate > max_error_rate).then(|| {
        format!(
            "{failed} of {} requests failed ({kinds}): {:.1} % > --max-error-rate {} %",
            r.requests,
            100.0 * rate,
            100.0 * max_error_rate
        )
    })
}

/// The run's outcome as the exit status: an error (exit 1, its line on standard error) when
/// it fails `--max-error-rate`.
pub(super) fn judge(r: &RunResult, max_error_rate: f64) -> anyhow::Result<()> {
    match verdict(r, max_error_rate) {
        Some(why) => bail!("{why}"),
        None => Ok(()),
    }
}
