//! `capstan bench`: drive load at a server and measure it (the engines live in capstan-bench);
//! [`wan`] runs it behind `capstan wan`'s delay router. The arguments and the configuration they
//! make are in [`args`], the summary and outputs every run writes in [`output`]; both are leaves
//! that this module and [`wan`] use.

mod args;
mod output;
mod wan;

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use capstan_bench::{RunResult, Target};

pub use args::BenchArgs;
use args::{build, dur, read, BenchCommand, MergeArgs};
use output::{end_progress_line, judge, progress_printer, runtime, write_outputs};

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    if let Some(BenchCommand::Merge(m)) = &args.command {
        return merge(m);
    }
    if let Some(file) = &args.polygraph {
        return polygraph(&args, file);
    }
    let config = build(&args)?;
    if let Some(n) = args.print_requests {
        let mut out = std::io::stdout().lock();
        for (t, m, p) in capstan_bench::preview(&config, n)? {
            writeln!(out, "{t:.6} {m} {p}")?;
        }
        return Ok(());
    }
    if let Some(dir) = &args.wan_inner {
        return wan::inner(&args, config, dir);
    }
    if wan::requested(&args) {
        return wan::outer(&args, &config);
    }
    let result = runtime()?.block_on(capstan_bench::run(config, progress_printer(args.quiet)))?;
    end_progress_line(args.quiet);
    write_outputs(
        &result,
        args.json.as_deref(),
        args.report.as_deref(),
        args.quiet,
    )?;
    judge(&result, args.max_error_rate)
}

/// `--polygraph FILE`: the workload through the target, a table per phase, `--json` the whole
/// result with its time line.
fn polygraph(args: &BenchArgs, file: &Path) -> anyhow::Result<()> {
    let text = read(file, "workload")?;
    let mut f: capstan_workload::PolyFile = toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        anyhow::anyhow!(
            "{}:{}: {}",
            file.display(),
            line.unwrap_or(0),
            e.message().replace('\n', " ")
        )
    })?;
    if let Some(s) = args.time_scale {
        f.time_scale = s;
    }
    let workload = f
        .resolve()
        .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    let target = Target::parse(args.url.as_deref().unwrap_or_default())?;
    let config = capstan_bench::polygraph::PolyConfig {
        target,
        workload,
        timeout: dur(&args.timeout, "timeout")?,
        connect_timeout: dur(&args.connect_timeout, "connect-timeout")?,
        drain: dur(&args.drain, "drain")?,
        max_duration: match &args.duration {
            Some(d) => dur(d, "duration")?,
            None => Duration::from_secs(366 * 86_400),
        },
    };
    let quiet = args.quiet;
    let progress: Option<capstan_bench::polygraph::PolyProgress> = (!quiet).then(|| {
        let tty = std::io::stderr().is_terminal();
        std::sync::Arc::new(move |t: f64, phase: &str, done: u64| {
            let line = format!("{t:>6.0}s  phase {phase:<8} responses {done}");
            if tty {
                eprint!("\r\x1b[2K{line}");
            } else if (t as u64).is_multiple_of(10) {
                eprintln!("{line}");
            }
        }) as capstan_bench::polygraph::PolyProgress
    });
    let result = runtime()?.block_on(capstan_bench::polygraph::run(config, progress))?;
    end_progress_line(quiet);
    if let Some(p) = &args.json {
        std::fs::write(p, serde_json::to_string_pretty(&result)?)
            .with_context(|| format!("cannot write {}", p.display()))?;
    }
    if !quiet {
        print!("{}", capstan_bench::polygraph::summary_table(&result));
        println!(
            "generator CPU {:.1} % of a core; mean object {:.0} B; working set {} objects ({:.1} MB){}",
            result.generator_cpu_percent,
            result.mean_object_bytes,
            result.working_set_objects,
            result.working_set_bytes as f64 / 1e6,
            if result.completed { "" } else { "; stopped by --duration before every goal was met" }
        );
    }
    Ok(())
}

fn merge(m: &MergeArgs) -> anyhow::Result<()> {
    let mut results = Vec::new();
    for f in &m.files {
        let r: RunResult = serde_json::from_str(&read(f, "result")?)
            .map_err(|e| anyhow::anyhow!("{} is not a capstan bench result: {e}", f.display()))?;
        results.push(r);
    }
    let merged = capstan_bench::merge(&results)?;
    write_outputs(&merged, m.json.as_deref(), m.report.as_deref(), m.quiet)
}
