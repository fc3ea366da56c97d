//! The `[admission]` section: each node's concurrency limit (adaptive, fixed or off) and queue;
//! its checks and its line in `capstan check`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Per-node admission (see [`crate::state::admission`]): a concurrency limit in front of every node,
/// a bounded queue behind it, and `503` + `Retry-After` for what fits in neither.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Admission {
    /// `"adaptive"` (the default: the limit follows the node's latency), a number (a fixed
    /// limit, HAProxy's `maxconn`), or `"off"` (no limit, no queue: every request goes through).
    pub limit: LimitMode,
    /// Most requests waiting for a slot, per node; 0: none wait.
    pub queue: u32,
    /// Longest wait in the queue (HAProxy's `timeout queue`, which falls back to its `timeout
    /// connect`, 5 s in its examples), then another node with a free slot, or 503. Long enough
    /// to ride out a node's failure under load: a fault that leaves the others short of
    /// capacity for some seconds queues requests for that long (`benches/chaos.sh`).
    #[serde(with = "humantime_serde")]
    pub queue_timeout: Duration,
    /// Adaptive: the lowest limit, also the limit while baselines are measured (Envoy's
    /// `min_concurrency`, 3).
    pub min_limit: u32,
    /// Adaptive: the highest limit (Envoy's `max_concurrency_limit`, 1000).
    pub max_limit: u32,
    /// Adaptive: the limit before the node's latency is known (Netflix's `initialLimit`, 20).
    pub initial_limit: u32,
    /// Adaptive: latency above the baseline tolerated before the limit falls, % (Envoy's
    /// `buffer`, 25).
    pub latency_buffer_percent: u32,
    /// Adaptive: how often the unloaded latency is measured again (plus up to 15 % jitter).
    #[serde(with = "humantime_serde")]
    pub probe_interval: Duration,
}

impl Default for Admission {
    fn default() -> Self {
        Admission {
            limit: LimitMode::Adaptive,
            queue: 100,
            queue_timeout: Duration::from_secs(5),
            min_limit: 3,
            max_limit: 1000,
            initial_limit: 20,
            latency_buffer_percent: 25,
            probe_interval: Duration::from_secs(30),
        }
    }
}

impl Admission {
    /// `Retry-After` on a shed request: the queue timeout, in whole seconds, at least 1.
    pub fn retry_after_s(&self) -> u64 {
        self.queue_timeout.as_secs_f64().ceil().max(1.0) as u64
    }
}

/// How a node's concurrency is limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub enum LimitMode {
    Adaptive,
    Fixed(u32),
    Off,
}

impl TryFrom<toml::Value> for LimitMode {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, String> {
        match value {
            toml::Value::String(s) if s == "adaptive" => Ok(LimitMode::Adaptive),
            toml::Value::String(s) if s == "off" => Ok(LimitMode::Off),
            toml::Value::Integer(n) if (1..=1_000_000).contains(&n) => {
                Ok(LimitMode::Fixed(n as u32))
            }
            other => Err(format!(
                "admission.limit must be \"adaptive\", \"off\" or a number from 1 to 1000000, \
                 not {other}"
            )),
        }
    }
}

impl Serialize for LimitMode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            LimitMode::Adaptive => s.serialize_str("adaptive"),
            LimitMode::Off => s.serialize_str("off"),
            LimitMode::Fixed(n) => s.serialize_u32(*n),
        }
    }
}

/// The `admission` key at fault and why.
pub(crate) fn check_admission(a: &Admission) -> Result<(), (&'static str, String)> {
    if a.min_limit == 0 {
        return Err(("min_limit", "admission.min_limit must be at least 1".into()));
    }
    if a.max_limit < a.min_limit {
        return Err((
            "max_limit",
            format!(
                "admission.max_limit ({}) must be at least admission.min_limit ({})",
                a.max_limit, a.min_limit
            ),
        ));
    }
    if !(a.min_limit..=a.max_limit).contains(&a.initial_limit) {
        return Err((
            "initial_limit",
            format!(
                "admission.initial_limit ({}) must be from min_limit ({}) to max_limit ({})",
                a.initial_limit, a.min_limit, a.max_limit
            ),
        ));
    }
    if a.queue > 1_000_000 {
        return Err(("queue", "admission.queue must be at most 1000000".into()));
    }
    if a.queue > 0 && a.queue_timeout < Duration::from_millis(1) {
        return Err((
            "queue_timeout",
            "admission.queue_timeout must be at least 1ms (or set queue = 0)".into(),
        ));
    }
    if a.latency_buffer_percent > 1000 {
        return Err((
            "latency_buffer_percent",
            "admission.latency_buffer_percent must be 0 to 1000".into(),
        ));
    }
    if a.probe_interval < Duration::from_secs(1) {
        return Err((
            "probe_interval",
            "admission.probe_interval must be at least 1s".into(),
        ));
    }
    Ok(())
}

pub(crate) fn describe_admission(a: &Admission) -> String {
    let d = humantime::format_duration;
    let limit = match a.limit {
        LimitMode::Off => return "admission off: no per-node limit or queue".to_string(),
        LimitMode::Fixed(n) => format!("fixed limit {n} per node"),
        LimitMode::Adaptive => format!(
            "adaptive limit per node ({}..{}, from {}, latency buffer {} %, baseline every {})",
            a.min_limit,
            a.max_limit,
            a.initial_limit,
            a.latency_buffer_percent,
            d(a.probe_interval)
        ),
    };
    format!(
        "admission {limit}; queue {} per node, timeout {}; beyond: 503 with Retry-After {} s",
        a.queue,
        d(a.queue_timeout),
        a.retry_after_s()
    )
}
