//! Renders `crates/sim/BENCHMARKS-papers.md` from a hand-written template and the JSON files of the runs
//! (`capstan sim results-md`), so the measured tables are never copied by hand.
//!
//! The template is markdown with directives in double braces; each is replaced by what it names,
//! read from `results.json` (`capstan sim ... --out DIR`) or `sweep.json` (`--nodes-sweep`,
//! `--rate-sweep`) under the results root:
//!
//! - `{{table DIR}}`: the policy table of DIR (mean, p50, p90, p99 ± 95 % CI, P(≤2.5 s), P(≤5 s),
//!   hit rate, busiest node's CPU, disk and back-end disk);
//! - `{{tgat DIR}}`: the T_gat table (WRR_num and WRR_time p90 per T_gat, and the p90 of the
//!   policies run beside the sweep, which do not depend on T_gat);
//! - `{{sweep DIR}}`: a sweep's p90 per policy and swept value;
//! - `{{p90 DIR POLICY}}`, `{{mean DIR POLICY}}` (ms, rounded), `{{hit DIR POLICY}}`,
//!   `{{le DIR POLICY MS}}` (fraction of pages within MS ms), `{{cpu DIR POLICY}}` and
//!   `{{disk DIR POLICY}}` (busiest node's utilisation): one number for the prose;
//! - `{{text FILE}}`: the trimmed contents of a file (e.g. the matrix's wall time).
//!
//! Everything else is copied as is. A directive naming a missing file, policy or field is an
//! error naming the directive: a stale template must not render quietly.

use std::path::Path;

use serde_json::Value;

use crate::sweep::cdf_interpolated;

/// Renders `template`, reading results under `root`.
pub fn render(template: &str, root: &Path) -> Result<String, String> {
    let mut out = String::with_capacity(template.len() * 2);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("unclosed `{{{{` at `{}`", first_line(after)))?;
        let directive = after[..end].trim();
        let text = expand(directive, root).map_err(|e| format!("{{{{{directive}}}}}: {e}"))?;
        out.push_str(&text);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or_default()
}

fn expand(directive: &str, root: &Path) -> Result<String, String> {
    let words: Vec<&str> = directive.split_whitespace().collect();
    match words.as_slice() {
        ["table", dir] => Ok(policy_table(&load(root, dir, "results.json")?)),
        ["tgat", dir] => tgat_table(&load(root, dir, "results.json")?),
        ["sweep", dir] => Ok(sweep_table(&load(root, dir, "sweep.json")?)),
        ["text", file] => std::fs::read_to_string(root.join(file))
            .map(|t| t.trim().to_string())
            .map_err(|e| format!("cannot read {file}: {e}")),
        [what, dir, policy, rest @ ..] => {
            let report = load(root, dir, "results.json")?;
            let p = find_policy(&report, policy)?;
            number(what, p, rest)
        }
        _ => Err("unknown directive (see `capstan sim results-md --help`)".into()),
    }
}

fn load(root: &Path, dir: &str, file: &str) -> Result<Value, String> {
    let path = root.join(dir).join(file);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn find_policy<'a>(report: &'a Value, policy: &str) -> Result<&'a Value, String> {
    report["policies"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["policy"] == policy))
        .ok_or_else(|| format!("no policy `{policy}` in the results"))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn est(v: &Value) -> String {
    format!("{:.0} ± {:.0}", f(&v["value"]), f(&v["ci95"]))
}

fn cdf(p: &Value) -> Vec<[f64; 2]> {
    p["cdf"]
        .as_array()
        .map(|pts| pts.iter().map(|pt| [f(&pt[0]), f(&pt[1])]).collect())
        .unwrap_or_default()
}

fn max_use(p: &Value, field: &str) -> f64 {
    p["nodes"].as_array().map_or(0.0, |ns| {
        ns.iter().map(|n| f(&n[field])).fold(0.0, f64::max)
    })
}

fn number(what: &str, p: &Value, rest: &[&str]) -> Result<String, String> {
    Ok(match (what, rest) {
        ("p90" | "mean", []) => format!("{:.0}", f(&p[what]["value"])),
        ("hit", []) => format!("{:.3}", f(&p["cache_hit_rate"]["value"])),
        ("cpu", []) => format!("{:.2}", max_use(p, "cpu")),
        ("disk", []) => format!("{:.2}", max_use(p, "disk")),
        ("le", [ms]) => {
            let ms: f64 = ms
                .parse()
                .map_err(|_| format!("`{ms}` is not milliseconds"))?;
            format!("{:.2}", cdf_interpolated(&cdf(p), ms))
        }
        _ => return Err("unknown directive (see `capstan sim results-md --help`)".into()),
    })
}

fn policy_table(report: &Value) -> String {
    let mut t = String::from(
        "| policy | layer | mean ms | p50 ms | p90 ms | p99 ms | P(≤2.5 s) | P(≤5 s) | hit rate \
         | max node CPU | max node disk | max back-end disk |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for p in report["policies"].as_array().into_iter().flatten() {
        let c = cdf(p);
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {:.2} | {:.2} | {:.3} | {:.2} | {:.2} | {:.2} |\n",
            p["policy"].as_str().unwrap_or("?"),
            p["layer"].as_str().unwrap_or("?"),
            est(&p["mean"]),
            est(&p["p50"]),
            est(&p["p90"]),
            est(&p["p99"]),
            cdf_interpolated(&c, 2500.0),
            cdf_interpolated(&c, 5000.0),
            f(&p["cache_hit_rate"]["value"]),
            max_use(p, "cpu"),
            max_use(p, "disk"),
            max_use(p, "backend_disk"),
        ));
    }
    t.trim_end().to_string()
}

fn tgat_table(report: &Value) -> Result<String, String> {
    let points = report["tgat"].as_array().cloned().unwrap_or_default();
    if points.is_empty() {
        return Err("these results have no T_gat sweep".into());
    }
    let baselines: Vec<&Value> = report["policies"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let mut t = String::from("| T_gat s | WRR_num p90 ms | WRR_time p90 ms |");
    for b in &baselines {
        t.push_str(&format!(
            " {} p90 ms |",
            b["policy"].as_str().unwrap_or("?")
        ));
    }
    t.push_str(&format!(
        "\n|---|---|---|{}\n",
        "---|".repeat(baselines.len())
    ));
    let at = |metric: &str, g: f64| {
        points
            .iter()
            .find(|p| p["metric"] == metric && f(&p["gather_s"]) == g)
            .map_or("–".to_string(), |p| est(&p["p90"]))
    };
    let mut gathers: Vec<f64> = points.iter().map(|p| f(&p["gather_s"])).collect();
    gathers.sort_by(f64::total_cmp);
    gathers.dedup();
    for g in gathers {
        t.push_str(&format!(
            "| {g} | {} | {} |",
            at("active", g),
            at("service-time", g)
        ));
        for b in &baselines {
            t.push_str(&format!(" {} |", est(&b["p90"])));
        }
        t.push('\n');
    }
    Ok(t.trim_end().to_string())
}

fn sweep_table(sweep: &Value) -> String {
    let series: Vec<&Value> = sweep["series"].as_array().into_iter().flatten().collect();
    let axis = match sweep["axis"].as_str() {
        Some("nodes") => "nodes",
        _ => "clients/s",
    };
    let mut t = format!("| {axis} |");
    for s in &series {
        t.push_str(&format!(
            " {} p90 ms |",
            s["policy"].as_str().unwrap_or("?")
        ));
    }
    t.push_str(&format!("\n|---|{}\n", "---|".repeat(series.len())));
    for (i, x) in sweep["values"].as_array().into_iter().flatten().enumerate() {
        t.push_str(&format!("| {} |", f(x)));
        for s in &series {
            t.push_str(&format!(" {} |", est(&s["points"][i]["p90"])));
        }
        t.push('\n');
    }
    t.trim_end().to_string()
}
