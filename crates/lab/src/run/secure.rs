//! The CAP paper's secure class through TLS for real (`[workload.secure]`): a share of each load
//! level is sent as `/secure/…` requests over HTTPS to a TLS listener of the switch, by clients
//! of their own running beside the plain ones (the load generator has one target per run, so
//! the secure clients are a second run at the same time, merged into the first afterwards).
//!
//! A TLS connection is one of the load generator's client connections: a closed-loop client
//! without keep-alive (WebStone's HTTP/1.0) opens one per request, a session keeps its
//! connections for its pages. Each closed-loop client and each session is one user with a TLS
//! session cache of its own (`tls_session_per_client`), so its first connection makes the full
//! handshake — the RSA key exchange the CAP paper charges "at least once for each client
//! session" — and its later connections resume. The handshake counts (full and resumed, at
//! the switch and at the nodes) are in each run's `secure` record. With real nodes the switch
//! reaches them over TLS too, on its pooled connections: their handshakes come once per pooled
//! connection, not per client session.
//!
//! The certificate is the committed test PKI's RSA-2048 one (`examples/tls/`, RSA as the
//! paper's SSL costs assume), compiled in and written to the work directory at start.

use std::path::Path;

use capstan_bench::{BenchConfig, Engine, RunResult, Source, Target};
use capstan_workload::FileList;

use crate::model::error::LabError;
use crate::model::experiment::{EngineKind, Experiment, WorkloadKind};
use crate::model::results::SecureRecord;
use crate::procs::cluster::{self, Cluster, ClusterTls};
use crate::run::plan::{filelist, Plan, SeriesPlan};

const CERT: &[u8] = include_bytes!("../../../../examples/tls/localhost-rsa.pem");
const KEY: &[u8] = include_bytes!("../../../../examples/tls/localhost-rsa.key");
const CA: &[u8] = include_bytes!("../../../../examples/tls/ca.pem");

/// The TLS set-up of a cluster, if the experiment has a secure class: the test PKI written
/// under `work_dir/tls`, and whether the nodes get TLS too (real nodes only).
pub fn cluster_tls(exp: &Experiment, work_dir: &Path) -> Result<Option<ClusterTls>, LabError> {
    if exp.workload.secure.is_none() {
        return Ok(None);
    }
    let dir = work_dir.join("tls");
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.join(name);
        std::fs::create_dir_all(&dir)
            .and_then(|_| std::fs::write(&path, bytes))
            .map_err(|e| LabError::Run(format!("cannot write {}: {e}", path.display())))?;
        Ok::<_, LabError>(path)
    };
    Ok(Some(ClusterTls {
        cert: write("localhost-rsa.pem", CERT)?,
        key: write("localhost-rsa.key", KEY)?,
        ca: write("ca.pem", CA)?,
        to_nodes: real_nodes(exp),
    }))
}

/// The nodes spend real resources (`[nodes.origin] resources = "real"`).
pub fn real_nodes(exp: &Experiment) -> bool {
    exp.nodes
        .origin
        .as_ref()
        .and_then(|t| t.get("resources"))
        .and_then(|v| v.as_str())
        == Some("real")
}

/// A load level split into the plain part and the secure part. Closed-loop clients are whole:
/// at least one of each, so a small level may run one client more than it says.
pub fn split_level(engine: EngineKind, level: f64, share: f64) -> (f64, f64) {
    match engine {
        EngineKind::Closed => {
            let n = level.round().max(1.0);
            let secure = (n * share).round().max(1.0);
            ((n - secure).max(1.0), secure)
        }
        _ => (level * (1.0 - share), level * share),
    }
}

/// The secure clients' run: `plain`'s settings at `level`, over HTTPS to the switch's TLS
/// listener, asking for the `/secure/…` variants of the workload's requests.
pub fn secure_config(
    plan: &Plan,
    s: &SeriesPlan,
    c: &Cluster,
    plain: &BenchConfig,
    level: f64,
) -> Result<BenchConfig, LabError> {
    let exp = &plan.exp;
    let tls = c
        .tls_listen
        .ok_or_else(|| LabError::Run("the switch has no TLS listener".into()))?;
    let path = match exp.workload.kind {
        WorkloadKind::Url => format!("/secure{}", exp.workload.url.as_deref().unwrap_or("/")),
        _ => "/secure/".into(),
    };
    let mut cfg = plain.clone();
    cfg.target =
        Target::parse(&format!("https://{tls}{path}")).map_err(|e| LabError::Run(e.to_string()))?;
    cfg.ca_pem = Some(CA.to_vec());
    cfg.tls_session_per_client = true;
    cfg.seed = plain.seed ^ 0x5ec0_5ec0;
    cfg.engine = match &plain.engine {
        Engine::Closed { think, .. } => Engine::Closed {
            clients: level.round().max(1.0) as usize,
            think: *think,
        },
        Engine::Open { .. } => Engine::Open { rate: level },
        Engine::Sessions {
            model,
            parallel,
            think_scale,
            ..
        } => Engine::Sessions {
            rate: level,
            model: *model,
            parallel: *parallel,
            think_scale: *think_scale,
        },
        other => other.clone(),
    };
    cfg.source = match exp.workload.kind {
        WorkloadKind::Url => Source::Url,
        WorkloadKind::Mix => Source::FileList(under_secure(filelist(
            &s.tree,
            plan.seed,
            exp.nodes.files,
            &s.dynamic,
        )?)),
        // The tree's objects at their file-list weights (not the plain sessions' Zipf order).
        WorkloadKind::Sessions => Source::FileList(under_secure(filelist(
            &s.tree,
            plan.seed,
            exp.nodes.files,
            &[],
        )?)),
    };
    Ok(cfg)
}

fn under_secure(mut fl: FileList) -> FileList {
    for e in &mut fl.entries {
        e.path = format!("/secure{}", e.path);
    }
    fl
}

/// The two runs as one result: totals over both, and the secure run's classes kept apart
/// (`secure: html`, or its `/secure/…` paths when they are few enough to be classes).
pub fn combine(plain: RunResult, mut secure: RunResult) -> Result<RunResult, LabError> {
    let rename = |k: String| {
        if k.starts_with("/secure") {
            k
        } else {
            format!("secure: {k}")
        }
    };
    secure.per_class = std::mem::take(&mut secure.per_class)
        .into_iter()
        .map(|(k, v)| (rename(k), v))
        .collect();
    secure.histograms.per_class = std::mem::take(&mut secure.histograms.per_class)
        .into_iter()
        .map(|(k, v)| (rename(k), v))
        .collect();
    capstan_bench::merge(&[plain, secure]).map_err(|e| LabError::Run(e.to_string()))
}

/// Handshake counts at one moment: the switch's TLS listener and the nodes' (summed).
#[derive(Debug, Clone, Copy, Default)]
pub struct Handshakes {
    switch: (u64, u64),
    nodes: (u64, u64),
}

pub async fn handshakes(c: &Cluster, status: &cluster::SwitchStatus) -> Handshakes {
    let mut nodes = (0, 0);
    for r in &c.reports {
        if let Ok(t) = cluster::node_tls_handshakes(*r).await {
            nodes = (nodes.0 + t.handshakes, nodes.1 + t.resumed);
        }
    }
    Handshakes {
        switch: status.tls_handshakes(),
        nodes,
    }
}

/// The secure class's record of a run, from its own result and the handshakes counted before
/// and after the window.
pub fn record(level: f64, r: &RunResult, before: Handshakes, after: Handshakes) -> SecureRecord {
    SecureRecord {
        level,
        completed: r.completed,
        throughput_rps: r.completed_rps,
        errors: r.errors_total,
        latency_ms: r.latency_ms.corrected.clone(),
        switch_handshakes: after.switch.0.saturating_sub(before.switch.0),
        switch_resumed: after.switch.1.saturating_sub(before.switch.1),
        node_handshakes: after.nodes.0.saturating_sub(before.nodes.0),
        node_resumed: after.nodes.1.saturating_sub(before.nodes.1),
    }
}

/// The report's table of the secure class, when the experiment has one: per run the secure
/// level, requests, throughput, response times, errors, and the TLS handshakes (full and
/// resumed) at the switch and at the nodes.
pub fn html(r: &crate::model::results::LabResults) -> String {
    use std::fmt::Write as _;
    let mut h = String::new();
    if !r
        .series
        .iter()
        .any(|s| s.runs.iter().any(|q| q.secure.is_some()))
    {
        return h;
    }
    h.push_str(
        "<h2>Secure class over TLS</h2><table><tr><th class=\"l\">series</th><th>level</th>\
         <th>rep</th><th>secure level</th><th>completed</th><th>conn/s</th><th>p50</th>\
         <th>p90 ms</th><th>errors</th><th>switch handshakes full / resumed</th>\
         <th>node handshakes full / resumed</th></tr>",
    );
    for s in &r.series {
        for q in &s.runs {
            let Some(x) = &q.secure else { continue };
            let _ = write!(
                h,
                "<tr><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{:.1}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{} / {}</td>\
                 <td>{} / {}</td></tr>",
                capstan_report::escape(&s.label),
                crate::model::results::fmt_level(q.level),
                q.repetition + 1,
                crate::model::results::fmt_level(x.level),
                x.completed,
                x.throughput_rps,
                x.latency_ms.p50,
                x.latency_ms.p90,
                x.errors,
                x.switch_handshakes - x.switch_resumed.min(x.switch_handshakes),
                x.switch_resumed,
                x.node_handshakes - x.node_resumed.min(x.node_handshakes),
                x.node_resumed,
            );
        }
    }
    h.push_str(
        "</table><p><small>The secure clients send /secure/… over HTTPS to the switch's TLS \
         listener, each a user with its own TLS session cache (one full handshake, then \
         resumed). Node handshakes: the switch's pooled TLS connections to real nodes (none to \
         emulated nodes, which pay the modelled SSL costs). The secure requests are in the \
         totals above too.</small></p>",
    );
    h
}
