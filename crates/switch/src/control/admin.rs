//! The admin listener: `/status` (JSON), `/metrics` (Prometheus text), `POST /reload`, runtime
//! membership (`/nodes`, see [`crate::control::membership`]), cache purges, and a small status page at
//! `/`. With an admin token, everything but `GET` needs it
//! ([`crate::control::admin_auth`]).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde::Serialize;
use tokio::net::TcpListener;

use crate::control::reply::{json, text};
use crate::pipeline::response::error_response;
use crate::pipeline::response::ResponseBody;
use crate::pipeline::tier::query_param;
use crate::state::cluster::{Cluster, NodeRuntime};
use crate::state::switch::Switch;
use capstan_core::text::escape_html;

pub(crate) async fn serve(switch: Arc<Switch>, listener: TcpListener) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let switch = Arc::clone(&switch);
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let switch = Arc::clone(&switch);
                async move { Ok::<_, std::convert::Infallible>(route(&switch, req).await) }
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn route(switch: &Arc<Switch>, req: Request<Incoming>) -> Response<ResponseBody> {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        if let Some(token) = &switch.cluster.load().config.admin_token {
            if let Some(refused) = crate::control::admin_auth::refusal(token, req.headers()) {
                return refused;
            }
        }
    }
    let path = req.uri().path().to_string();
    if path == "/nodes" || path.starts_with("/nodes/") {
        return crate::control::membership::route(switch, req).await;
    }
    match (req.method(), path.as_str()) {
        (&Method::GET, "/status") => json(&status(switch)),
        (&Method::GET, "/metrics") => text(
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics(switch),
        ),
        (&Method::GET, "/") => text("text/html; charset=utf-8", dashboard(&status(switch))),
        (&Method::POST, "/cache/purge") => cache_purge(switch, req.uri().query()).await,
        (&Method::POST, "/cache/ban") => cache_ban(switch, req.uri().query()).await,
        (&Method::POST, "/reload") => match switch.reload().await {
            Ok(summary) => text("text/plain; charset=utf-8", format!("{summary}\n")),
            Err(e) => error_response(
                StatusCode::BAD_REQUEST,
                &format!("reload refused, the old configuration keeps serving: {e}"),
            ),
        },
        (_, "/status" | "/metrics" | "/" | "/reload" | "/cache/purge" | "/cache/ban") => {
            error_response(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
        }
        _ => error_response(
            StatusCode::NOT_FOUND,
            "no such admin page (try /, /status, /metrics, POST /reload, POST /nodes, \
             POST /nodes/NAME/drain, DELETE /nodes/NAME, POST /cache/purge?url=, \
             POST /cache/ban?prefix= or ?regex=)",
        ),
    }
}

/// `GET /status`: the switch and every node as the switch sees them.
#[derive(Serialize)]
pub(crate) struct Status {
    pub policy: String,
    pub generation: u64,
    pub uptime_s: f64,
    pub open_connections: usize,
    pub accepted_connections: u64,
    /// Every client listener: its limits, open connections, pauses and turned-away clients.
    pub listeners: Vec<crate::state::connection_limits::ListenerStatus>,
    pub reloads: u64,
    pub classes: Vec<String>,
    pub retry_budget: RetryBudgetStatus,
    pub nodes: Vec<NodeStatus>,
    /// The HTTP cache, when it is on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<crate::pipeline::cache::report::CacheReport>,
    /// Every `[[discovery]]` source, when there are any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub discovery: Vec<crate::state::discovery::SourceStatus>,
    /// The tier's peers, with a `[tier]` section.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<crate::control::tier::TierStatus>,
}

/// A node's gathered state, as `/status` shows it.
#[derive(Serialize)]
pub(crate) struct GatheredStatus {
    pub cpu: f64,
    pub disk: f64,
    pub net: f64,
    pub active: u32,
    pub mean_service_ms: f64,
    pub served: u64,
    /// Age of the report, milliseconds.
    pub age_ms: f64,
}

#[derive(Serialize)]
pub(crate) struct NodeStatus {
    pub name: String,
    pub address: String,
    /// The `[[discovery]]` source that gave the node (absent for `[[node]]`s and nodes added
    /// through the admin API).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// `http/1.1` or `h2`: the protocol the switch speaks to the node.
    pub protocol: &'static str,
    pub weight: u32,
    /// Takes new requests now (nothing says it is out; slow start only thins its share).
    pub available: bool,
    /// `up`, `slow-start`, or why it is out: `draining`, `check-down`, `backed-off`,
    /// `ejected` (outlier detection), `silent`.
    pub state: &'static str,
    /// Drained or being removed: no new requests, `active` ones finish.
    pub draining: bool,
    /// Active health checks (absent when `health.check_path` is not set).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<crate::state::health::CheckStatus>,
    /// While the node slow-starts after joining or coming back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slow_start: Option<SlowStartStatus>,
    pub active: u32,
    /// The admission gate: limit, in flight, queue, requests shed.
    pub admission: AdmissionStatus,
    /// The outlier detector's record: failures in a row, ejections.
    pub outlier: crate::state::outlier::OutlierStatus,
    pub served: u64,
    /// Requests answered with a redirect to this node.
    pub redirects: u64,
    /// Utilisation the node last reported (0–1); 0 when load is not gathered.
    pub load: f64,
    /// The weight the policy uses now: configured, or derived from gathered state.
    pub effective_weight: u32,
    /// Gathered from the node's last load report (absent before the first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gathered: Option<GatheredStatus>,
    /// The node's reports stopped: it is out until they resume.
    pub silent: bool,
    pub load_reports: u64,
    pub load_report_failures: u64,
    pub errors: NodeErrors,
    /// Requests this node failed that were sent to another node.
    pub retries: u64,
    pub latency_ms: LatencySummary,
    /// Requests placed on this node per class.
    pub classes: std::collections::BTreeMap<String, u64>,
}

/// A node's admission gate, with its per-class latencies by class name.
#[derive(Serialize)]
pub(crate) struct AdmissionStatus {
    #[serde(flatten)]
    pub gate: crate::state::admission::GateStatus,
    /// Recent response-head latency of each class on the node, ms (it orders the queue).
    pub class_latency_ms: std::collections::BTreeMap<String, f64>,
}

impl AdmissionStatus {
    fn of(mut gate: crate::state::admission::GateStatus, classes: &[String]) -> Self {
        let latencies = std::mem::take(&mut gate.class_latency_ms);
        AdmissionStatus {
            class_latency_ms: classes
                .iter()
                .zip(latencies)
                .filter(|(_, l)| *l > 0.0)
                .map(|(c, l)| (c.clone(), (l * 1000.0).round() / 1000.0))
                .collect(),
            gate,
        }
    }
}

/// A slow-starting node's ramp.
#[derive(Serialize)]
pub(crate) struct SlowStartStatus {
    pub remaining_ms: f64,
    /// Share of the picks it is offered on now (0.1 → 1).
    pub share: f64,
}

/// The retry budget and what its 10 s window holds now.
#[derive(Serialize)]
pub(crate) struct RetryBudgetStatus {
    pub percent: u32,
    pub min_per_second: u32,
    pub window_s: u64,
    pub window_requests: u64,
    pub window_retries: u64,
    /// Retries refused since start because the budget was spent.
    pub exhausted: u64,
}

#[derive(Serialize)]
pub(crate) struct NodeErrors {
    pub connect: u64,
    pub timeout: u64,
    pub other: u64,
}

#[derive(Serialize)]
pub(crate) struct LatencySummary {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// One node as `/status` shows it at `now`.
fn node_status(cluster: &Cluster, node: &NodeRuntime, classes: &[String], now: u64) -> NodeStatus {
    let checks_on = cluster.config.health.check_path.is_some();
    let feedback = node.feedback();
    let latency = node.latency_us.lock().map(|h| {
        let ms = |us: u64| us as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            mean: h.mean() / 1000.0,
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            max: ms(h.max()),
        }
    });
    let out = node.out_reason(now);
    let slow_start = node.slow_start(now).filter(|_| out.is_none());
    NodeStatus {
        name: node.config.name.clone(),
        address: node.config.address.to_string(),
        source: None,
        protocol: node.config.protocol.name(),
        weight: node.config.weight,
        available: out.is_none(),
        state: match (out, &slow_start) {
            (Some(reason), _) => reason.as_str(),
            (None, Some(_)) => "slow-start",
            (None, None) => "up",
        },
        draining: node.is_draining(),
        check: checks_on.then(|| node.check.status()),
        slow_start: slow_start.map(|(left, share)| SlowStartStatus {
            remaining_ms: left.as_secs_f64() * 1000.0,
            share,
        }),
        active: node.active.load(Ordering::Relaxed),
        admission: AdmissionStatus::of(node.admission.status(), classes),
        outlier: node.outlier.status(now),
        served: node.served.load(Ordering::Relaxed),
        redirects: node.redirects.load(Ordering::Relaxed),
        load: feedback.gathered.load(),
        effective_weight: match cluster.needs.weights {
            capstan_core::WeightSource::Configured => node.config.weight,
            _ => feedback.weight,
        },
        gathered: feedback.gathered.at_nanos.map(|at| GatheredStatus {
            cpu: feedback.gathered.cpu,
            disk: feedback.gathered.disk,
            net: feedback.gathered.net,
            active: feedback.gathered.active,
            mean_service_ms: feedback.gathered.mean_service_ms,
            served: feedback.gathered.served,
            age_ms: now.saturating_sub(at) as f64 / 1e6,
        }),
        silent: feedback.silent,
        load_reports: node.load_reports.load(Ordering::Relaxed),
        load_report_failures: node.load_report_failures.load(Ordering::Relaxed),
        errors: NodeErrors {
            connect: node.connect_errors.load(Ordering::Relaxed),
            timeout: node.timeout_errors.load(Ordering::Relaxed),
            other: node.other_errors.load(Ordering::Relaxed),
        },
        retries: node.retries.load(Ordering::Relaxed),
        latency_ms: latency.unwrap_or(LatencySummary {
            count: 0,
            mean: 0.0,
            p50: 0.0,
            p90: 0.0,
            p99: 0.0,
            max: 0.0,
        }),
        classes: classes
            .iter()
            .zip(&node.class_placed)
            .map(|(c, n)| (c.clone(), n.load(Ordering::Relaxed)))
            .collect(),
    }
}

fn status(switch: &Switch) -> Status {
    let cluster = switch.cluster.load_full();
    let now = switch.epoch.now_nanos();
    let classes: Vec<String> = cluster
        .classifier
        .classes()
        .iter()
        .map(|c| c.name.clone())
        .collect();
    let discovered = switch.discovery.snapshot();
    let nodes = cluster
        .nodes
        .iter()
        .map(|node| {
            let mut status = node_status(&cluster, node, &classes, now);
            status.source = (discovered.iter())
                .find(|s| s.owned.contains(&node.config.name))
                .map(|s| s.name.clone());
            status
        })
        .collect();
    let window = switch.retry_budget.window(now);
    let retry_budget = RetryBudgetStatus {
        percent: cluster.config.upstream.retry_budget_percent,
        min_per_second: cluster.config.upstream.retry_budget_min_per_second,
        window_s: crate::state::retry::WINDOW_S,
        window_requests: window.requests,
        window_retries: window.retries,
        exhausted: switch.retry_budget.exhausted.load(Ordering::Relaxed),
    };
    Status {
        policy: cluster.config.policy.name().to_string(),
        generation: cluster.generation,
        uptime_s: switch.epoch.now_nanos() as f64 / 1e9,
        open_connections: switch.open_connections.load(Ordering::Relaxed),
        accepted_connections: switch.accepted_connections.load(Ordering::Relaxed),
        listeners: switch.listeners(),
        reloads: switch.reloads.load(Ordering::Relaxed),
        classes,
        retry_budget,
        nodes,
        cache: switch.cache.as_ref().map(|c| c.report()),
        discovery: switch.discovery.status(),
        tier: crate::control::tier::status(switch),
    }
}

fn no_cache() -> Response<ResponseBody> {
    error_response(
        StatusCode::NOT_FOUND,
        "the cache is off (add a [cache] section and restart)",
    )
}

/// `POST /cache/purge?url=http://host/path`: every variant of one URL; with a `[tier]`, at
/// every other peer too (the answer's `tier` says which acknowledged).
async fn cache_purge(switch: &Switch, query: Option<&str>) -> Response<ResponseBody> {
    let Some(layer) = &switch.cache else {
        return no_cache();
    };
    let Some(url) = query_param(query, "url") else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "give the URL to purge: POST /cache/purge?url=http://host/path",
        );
    };
    let purged = layer.purge(&url);
    let mut answer = serde_json::json!({ "url": url, "purged": purged });
    let target = url.parse::<http::Uri>().ok();
    let host = target
        .as_ref()
        .and_then(|u| u.authority())
        .map(|a| a.to_string());
    if let (Some(host), Some(target)) = (host, &target) {
        let pq = target
            .path_and_query()
            .map_or("/", |pq| pq.as_str())
            .to_string();
        let what = crate::pipeline::tier::Invalidation::Purge { host, pq };
        if let Some(tier) = crate::pipeline::tier::fan_out(switch, what).await {
            answer["tier"] = serde_json::to_value(tier).unwrap_or_default();
        }
    }
    json(&answer)
}

/// `POST /cache/ban?prefix=http://host/img/` or `?regex=\\.png$`: every URL that matches; with
/// a `[tier]`, at every other peer too. A ban may delete many files of the disk tier, so it
/// runs off the event loop.
async fn cache_ban(switch: &Arc<Switch>, query: Option<&str>) -> Response<ResponseBody> {
    if switch.cache.is_none() {
        return no_cache();
    }
    let matcher = match crate::pipeline::tier::ban_matcher(query) {
        Ok(matcher) => matcher,
        Err(e) => return error_response(StatusCode::BAD_REQUEST, &e),
    };
    let banning = Arc::clone(switch);
    let banned = tokio::task::spawn_blocking(move || {
        banning.cache.as_ref().map_or(0, |layer| layer.ban(matcher))
    })
    .await
    .unwrap_or(0);
    let mut answer = serde_json::json!({ "banned": banned });
    let what = crate::pipeline::tier::Invalidation::Ban {
        query: query.unwrap_or_default().to_string(),
    };
    if let Some(tier) = crate::pipeline::tier::fan_out(switch, what).await {
        answer["tier"] = serde_json::to_value(tier).unwrap_or_default();
    }
    json(&answer)
}

/// Encodes the current counters at scrape time, so the request path only bumps atomics.
#[derive(Debug)]
struct SwitchCollector {
    cluster: Arc<ClusterSnapshot>,
}

/// What the collector reads; `Cluster` itself is not `Debug`.
struct ClusterSnapshot {
    cluster: Arc<Cluster>,
    cache: Option<crate::pipeline::cache::report::CacheReport>,
    open_connections: i64,
    accepted_connections: u64,
    retries_refused: u64,
    now_nanos: u64,
}

impl std::fmt::Debug for ClusterSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSnapshot")
    }
}

/// Latency buckets in seconds for the node response-time histogram.
const BUCKETS_S: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

impl Collector for SwitchCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snap = &self.cluster;
        let cluster = &snap.cluster;
        let node_label = |name: &str| vec![("node".to_string(), name.to_string())];

        let gauge = ConstGauge::new(snap.open_connections);
        gauge.encode(encoder.encode_descriptor(
            "capstan_client_connections_open",
            "Client connections open now",
            None,
            MetricType::Gauge,
        )?)?;
        let counter = ConstCounter::new(snap.accepted_connections);
        counter.encode(encoder.encode_descriptor(
            "capstan_client_connections_accepted",
            "Client connections accepted since start",
            None,
            MetricType::Counter,
        )?)?;

        let mut family = encoder.encode_descriptor(
            "capstan_node_active_requests",
            "Requests in flight on the node",
            None,
            MetricType::Gauge,
        )?;
        for node in &cluster.nodes {
            let labels = node_label(&node.config.name);
            ConstGauge::new(i64::from(node.active.load(Ordering::Relaxed)))
                .encode(family.encode_family(&labels)?)?;
        }
        encode_health(snap, &mut encoder)?;
        encode_overload(snap, &mut encoder)?;
        let mut family = encoder.encode_descriptor(
            "capstan_node_load",
            "Utilisation the node last reported (busiest resource, 0-1)",
            None,
            MetricType::Gauge,
        )?;
        for node in &cluster.nodes {
            let labels = node_label(&node.config.name);
            ConstGauge::new(node.load()).encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "capstan_node_redirects",
            "Requests answered with a redirect to the node",
            None,
            MetricType::Counter,
        )?;
        for node in &cluster.nodes {
            let labels = node_label(&node.config.name);
            ConstCounter::new(node.redirects.load(Ordering::Relaxed))
                .encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "capstan_node_responses",
            "Responses received from the node (any status)",
            None,
            MetricType::Counter,
        )?;
        for node in &cluster.nodes {
            let labels = node_label(&node.config.name);
            ConstCounter::new(node.served.load(Ordering::Relaxed))
                .encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "capstan_node_errors",
            "Failed requests to the node, by kind",
            None,
            MetricType::Counter,
        )?;
        for node in &cluster.nodes {
            for (kind, n) in [
                ("connect", &node.connect_errors),
                ("timeout", &node.timeout_errors),
                ("other", &node.other_errors),
            ] {
                let mut labels = node_label(&node.config.name);
                labels.push(("kind".into(), kind.into()));
                ConstCounter::new(n.load(Ordering::Relaxed))
                    .encode(family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "capstan_node_retries",
            "Requests the node failed (connect failure, or closed without a response) that were retried on another node",
            None,
            MetricType::Counter,
        )?;
        for node in &cluster.nodes {
            let labels = node_label(&node.config.name);
            ConstCounter::new(node.retries.load(Ordering::Relaxed))
                .encode(family.encode_family(&labels)?)?;
        }
        ConstCounter::new(snap.retries_refused).encode(encoder.encode_descriptor(
            "capstan_retries_refused",
            "Retries not made because the retry budget was spent",
            None,
            MetricType::Counter,
        )?)?;
        let mut family = encoder.encode_descriptor(
            "capstan_requests_placed",
            "Requests placed on each node, by class",
            None,
            MetricType::Counter,
        )?;
        for node in &cluster.nodes {
            for (class, n) in cluster.classifier.classes().iter().zip(&node.class_placed) {
                let mut labels = node_label(&node.config.name);
                labels.push(("class".into(), class.name.clone()));
                ConstCounter::new(n.load(Ordering::Relaxed))
                    .encode(family.encode_family(&labels)?)?;
            }
        }
        let mut family = encoder.encode_descriptor(
            "capstan_node_response_seconds",
            "Time from dispatch to the end of the node's response",
            None,
            MetricType::Histogram,
        )?;
        for node in &cluster.nodes {
            let Ok(h) = node.latency_us.lock() else {
                continue;
            };
            let sum_s = h.mean() * h.len() as f64 / 1e6;
            let buckets = bucket_counts(&h);
            let labels = node_label(&node.config.name);
            family
                .encode_family(&labels)?
                .encode_histogram::<Vec<(String, String)>>(sum_s, h.len(), &buckets, None)?;
        }
        if let Some(report) = &snap.cache {
            crate::pipeline::cache::report::encode_metrics(report, &mut encoder)?;
        }
        Ok(())
    }
}

/// `(upper bound, count in this bucket alone)` per bucket of [`BUCKETS_S`] then `+Inf`
/// (`f64::MAX`): the encoder accumulates them into Prometheus's cumulative `le` buckets.
fn bucket_counts(h: &hdrhistogram::Histogram<u64>) -> Vec<(f64, u64)> {
    let mut below = 0;
    let mut buckets = Vec::with_capacity(BUCKETS_S.len() + 1);
    for &bound in &BUCKETS_S {
        let upto = h.count_between(0, (bound * 1e6) as u64).max(below);
        buckets.push((bound, upto - below));
        below = upto;
    }
    buckets.push((f64::MAX, h.len().saturating_sub(below)));
    buckets
}

/// Admission (limits, queues, shedding) and outlier ejections, per node.
fn encode_overload(
    snap: &ClusterSnapshot,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let cluster = &snap.cluster;
    let node_label = |name: &str| vec![("node".to_string(), name.to_string())];
    let mut family = encoder.encode_descriptor(
        "capstan_requests_shed",
        "Requests answered 503 by a node's admission gate, by reason (queue-full, queue-timeout)",
        None,
        MetricType::Counter,
    )?;
    for node in &cluster.nodes {
        let gate = &node.admission;
        for (reason, n) in [
            ("queue-full", &gate.shed_queue_full),
            ("queue-timeout", &gate.shed_queue_timeout),
        ] {
            let mut labels = node_label(&node.config.name);
            labels.push(("reason".into(), reason.into()));
            ConstCounter::new(n.load(Ordering::Relaxed)).encode(family.encode_family(&labels)?)?;
        }
    }
    let mut gauge = |name: &str, help: &str, value: &dyn Fn(&NodeRuntime) -> i64| {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for node in &cluster.nodes {
            ConstGauge::new(value(node))
                .encode(family.encode_family(&node_label(&node.config.name))?)?;
        }
        Ok::<_, std::fmt::Error>(())
    };
    gauge(
        "capstan_node_queue_length",
        "Requests waiting in the node's admission queue",
        &|node| i64::from(node.admission.queued()),
    )?;
    if cluster.config.admission.limit != crate::config::LimitMode::Off {
        gauge(
            "capstan_node_concurrency_limit",
            "Requests the node may have in flight now (adaptive or fixed admission limit)",
            &|node| i64::from(node.admission.limit()),
        )?;
    }
    gauge(
        "capstan_node_ejected",
        "1 while the outlier detector has the node ejected",
        &|node| i64::from(node.outlier.is_ejected(snap.now_nanos)),
    )?;
    for (name, help, pick) in [
        (
            "capstan_node_ejections",
            "Times the outlier detector ejected the node",
            (|n: &NodeRuntime| n.outlier.ejections.load(Ordering::Relaxed)) as fn(&NodeRuntime) -> u64,
        ),
        (
            "capstan_node_ejections_prevented",
            "Ejections of the node that did not happen because max_ejected_percent of the nodes were out",
            |n: &NodeRuntime| n.outlier.prevented.load(Ordering::Relaxed),
        ),
    ] {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
        for node in &cluster.nodes {
            ConstCounter::new(pick(node))
                .encode(family.encode_family(&node_label(&node.config.name))?)?;
        }
    }
    Ok(())
}

/// Whether each node takes requests, and why not: drain and active checks.
fn encode_health(
    snap: &ClusterSnapshot,
    encoder: &mut DescriptorEncoder,
) -> Result<(), std::fmt::Error> {
    let cluster = &snap.cluster;
    let node_label = |name: &str| vec![("node".to_string(), name.to_string())];
    let mut gauge = |name: &str, help: &str, value: &dyn Fn(&NodeRuntime) -> i64| {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        for node in &cluster.nodes {
            ConstGauge::new(value(node))
                .encode(family.encode_family(&node_label(&node.config.name))?)?;
        }
        Ok::<_, std::fmt::Error>(())
    };
    gauge(
        "capstan_node_up",
        "1 while the node takes new requests; 0 while drained, failing its checks, backed off by passive health, ejected or silent",
        &|node| i64::from(node.out_reason(snap.now_nanos).is_none()),
    )?;
    gauge(
        "capstan_node_draining",
        "1 while the node is drained (its in-flight requests finish)",
        &|node| i64::from(node.is_draining()),
    )?;
    if cluster.config.health.check_path.is_none() {
        return Ok(());
    }
    gauge(
        "capstan_node_check_up",
        "1 while the node's active health checks pass (rise/fall), else 0",
        &|node| i64::from(node.check.is_up()),
    )?;
    let mut family = encoder.encode_descriptor(
        "capstan_node_checks",
        "Active health checks of the node, by result",
        None,
        MetricType::Counter,
    )?;
    for node in &cluster.nodes {
        let status = node.check.status();
        for (result, n) in [("passed", status.passed), ("failed", status.failed)] {
            let mut labels = node_label(&node.config.name);
            labels.push(("result".into(), result.into()));
            ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
        }
    }
    Ok(())
}

fn metrics(switch: &Switch) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(SwitchCollector {
        cluster: Arc::new(ClusterSnapshot {
            cluster: switch.cluster.load_full(),
            cache: switch.cache.as_ref().map(|c| c.report()),
            open_connections: switch.open_connections.load(Ordering::Relaxed) as i64,
            accepted_connections: switch.accepted_connections.load(Ordering::Relaxed),
            retries_refused: switch.retry_budget.exhausted.load(Ordering::Relaxed),
            now_nanos: switch.epoch.now_nanos(),
        }),
    }));
    registry.register_collector(Box::new(
        crate::control::operation_metrics::OperationCollector::of(switch),
    ));
    registry.register_collector(Box::new(
        crate::state::connection_limits::ListenerCollector::of(&switch.listeners()),
    ));
    registry.register_collector(Box::new(crate::state::discovery::DiscoveryCollector(
        switch.discovery.snapshot(),
    )));
    registry.register_collector(Box::new(crate::observe::tls_metrics::TlsCollector::of(
        switch.tls_counters(),
    )));
    registry.register_collector(Box::new(crate::observe::quic_metrics::QuicCollector::of(
        switch.quic_counters(),
    )));
    if let Some(tier) = crate::control::tier::status(switch) {
        registry.register_collector(Box::new(crate::control::tier::TierCollector(tier)));
    }
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        let _ = writeln!(out, "# encoding failed: {e}");
    }
    out
}

/// One line per TLS listener: its handshakes, and its failed ones by reason.
fn tls_dashboard(listeners: &[crate::state::connection_limits::ListenerStatus]) -> String {
    let mut out = String::new();
    for l in listeners {
        let Some(tls) = &l.tls else { continue };
        let f = &tls.failures;
        let _ = write!(
            out,
            "<p>TLS {}: {} handshakes ({} resumed; TLS 1.2 {}, 1.3 {}; h2 {}, http/1.1 {}) · \
             failed: alert {}, no certificate {}, protocol {}, timeout {}, io {}</p>",
            escape_html(&l.address),
            tls.handshakes,
            tls.resumed,
            tls.versions.tls12,
            tls.versions.tls13,
            tls.alpn.h2,
            tls.alpn.http11,
            f.alert,
            f.no_certificate,
            f.protocol,
            f.timeout,
            f.io
        );
    }
    out
}

fn dashboard(status: &Status) -> String {
    let mut rows = String::new();
    for n in &status.nodes {
        let classes: Vec<String> = n
            .classes
            .iter()
            .map(|(c, k)| format!("{}: {k}", escape_html(c)))
            .collect();
        let _ = write!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.0} %</td><td>{}</td>\
             <td>{}/{}/{}</td><td>{:.2}</td><td>{:.2}</td><td>{}</td></tr>",
            escape_html(&n.name),
            escape_html(&n.address),
            match n.available {
                true => n.state.to_string(),
                false => format!("<b>{}</b>", n.state),
            },
            n.weight,
            n.active,
            n.load * 100.0,
            n.served,
            n.errors.connect,
            n.errors.timeout,
            n.errors.other,
            n.latency_ms.p50,
            n.latency_ms.p99,
            classes.join(", ")
        );
    }
    format!(
        "<!doctype html><html><head><meta charset=utf-8><meta http-equiv=refresh content=2>\
         <title>Capstan switch</title><style>body{{font-family:sans-serif;margin:2em}}\
         table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;text-align:right}}\
         </style></head><body><h1>Capstan switch</h1>\
         <p>policy <b>{}</b> · generation {} · up {:.0} s · {} connections open, {} accepted · {} reloads</p>\
         <table><tr><th>node</th><th>address</th><th>state</th><th>weight</th><th>active</th>\
         <th>load</th><th>served</th><th>errors c/t/o</th><th>p50 ms</th><th>p99 ms</th><th>placed per class</th></tr>\
         {rows}</table>{tls}{cache}{tier}<p><a href=/status>/status</a> · <a href=/metrics>/metrics</a></p></body></html>",
        escape_html(&status.policy),
        status.generation,
        status.uptime_s,
        status.open_connections,
        status.accepted_connections,
        status.reloads,
        tls = tls_dashboard(&status.listeners),
        cache = status
            .cache
            .as_ref()
            .map(crate::pipeline::cache::report::dashboard_section)
            .unwrap_or_default(),
        tier = status
            .tier
            .as_ref()
            .map(crate::control::tier::dashboard_section)
            .unwrap_or_default(),
    )
}
