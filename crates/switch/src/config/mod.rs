//! The switch's configuration: TOML in, a validated [`Config`] out, or one error naming the file,
//! line and column. Each feature's own section lives in [`sections`] (and the cache's in
//! [`cache`]); this module assembles and checks the whole.
//!
//! May use: `net` only (the feature modules read their sections from here, never the reverse).

pub(crate) mod cache;
pub(crate) mod sections;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;

pub use crate::net::address::resolve_address;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use capstan_core::class::cap_default_specs;
use capstan_core::{
    build_policy, ClassSpec, Classifier, ClassifierError, PolicyContext, PolicySpec, RuleSpec,
};
use serde::{Deserialize, Serialize};
use toml::Spanned;

pub use crate::config::cache::CacheConfig;
pub use crate::config::sections::access_log::AccessLogConfig;
pub use crate::config::sections::admin_token::AdminToken;
pub use crate::config::sections::discovery::{DiscoverySource, DnsSource, EtcdSource, SourceKind};
pub use crate::config::sections::proxy_protocol::ProxyProtocolConfig;
pub use crate::config::sections::upgrade::UpgradeConfig;

/// A validated configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Where it was read from; `None` when built from command-line flags.
    #[serde(skip)]
    pub source: Option<PathBuf>,
    /// Client-facing plain HTTP/1.1 listeners.
    pub listen: Vec<SocketAddr>,
    /// `[[listener]]` entries: TLS listeners, plain ones with h2c (see `crate::frontend::listener`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<crate::config::sections::listener::Listener>,
    /// HTTP/2 limits for client connections.
    pub http2: crate::config::sections::http2::Http2,
    /// Admin listener (`/status`, `/metrics`, `POST /reload`), if any.
    pub admin: Option<SocketAddr>,
    /// Bearer token the admin's mutating endpoints require (`admin_token`, or read from
    /// `admin_token_file` at load and on every reload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<AdminToken>,
    /// Add `X-Capstan-Node` and `X-Capstan-Class` to every proxied response.
    pub debug_headers: bool,
    /// The dispatching policy (`[policy]`) and its parameters.
    pub policy: PolicySpec,
    /// The back-end nodes (`[[node]]`), in file order.
    pub nodes: Vec<NodeConfig>,
    /// The request classes (`[[class]]`).
    pub classes: Vec<ClassSpec>,
    /// The classifier rules (`[[rule]]`), tried in order.
    pub rules: Vec<RuleSpec>,
    /// The class of a request no rule matches.
    pub default_class: String,
    /// Client, connect, first-byte and upstream timeouts (`[timeouts]`).
    pub timeouts: Timeouts,
    /// Connection and request limits (`[limits]`).
    pub limits: Limits,
    /// Active health checks and passive health (`[health]`).
    pub health: Health,
    /// How requests go to nodes: keep-alive, retries, keys (`[upstream]`).
    pub upstream: Upstream,
    /// Per-node concurrency limits, queues and shedding (see `crate::state::admission`).
    pub admission: Admission,
    /// Ejecting nodes that fail requests in a row (see `crate::state::outlier`).
    pub outlier: Outlier,
    /// Gathering the nodes' load reports (`[load]`).
    pub load: LoadGathering,
    /// The HTTP cache, when a `[cache]` section is present.
    pub cache: Option<CacheConfig>,
    /// URL redirection instead of forwarding, when a `[redirect]` section is present.
    pub redirect: Option<Redirect>,
    /// The access log, when an `[access_log]` section is present (see `crate::observe::access_log`).
    pub access_log: Option<AccessLogConfig>,
    /// PROXY protocol to nodes and from front balancers (see `crate::upstream::proxy_protocol`).
    pub proxy_protocol: ProxyProtocolConfig,
    /// WebSocket and other upgrades, `CONNECT` (see `crate::pipeline::tunnel`).
    pub upgrade: UpgradeConfig,
    /// `[[discovery]]` sources of nodes beside `nodes` (see `crate::control::discovery`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub discovery: Vec<DiscoverySource>,
    /// The switches of this one's tier, when a `[tier]` section is present (see
    /// `crate::pipeline::tier`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<crate::config::sections::tier::TierConfig>,
}

/// A back-end node.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeConfig {
    /// The node's name, unique in the cluster (logs, `/status`, `X-Capstan-Node`).
    pub name: String,
    /// Where the node listens.
    pub address: SocketAddr,
    /// Its weight for weighted policies (1 and up).
    pub weight: u32,
    /// Where a redirected client is sent (`http://n1.example.com:8080`); needed by `[redirect]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub public_url: Option<String>,
    /// Where the node's load report is fetched, when not at `address` (a `capstan agent` beside
    /// nginx or Apache listens on its own port).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report_address: Option<SocketAddr>,
    /// TLS to this node (`tls = { ca_file = "ca.pem", sni = "node.example" }`, see
    /// `crate::upstream::tls`); `None`: plain HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<crate::config::sections::node_tls::NodeTls>,
    /// The HTTP version spoken to this node (`protocol = "h2"`, see `crate::upstream::h2`).
    #[serde(skip_serializing_if = "NodeProtocol::is_default")]
    pub protocol: NodeProtocol,
}

/// The HTTP version the switch speaks to a node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
pub enum NodeProtocol {
    /// HTTP/1.1 over pooled keep-alive connections (and ALPN `http/1.1` with TLS).
    #[default]
    #[serde(rename = "http/1.1")]
    Http1,
    /// HTTP/2: cleartext with prior knowledge (h2c), or ALPN `h2` with TLS; streams
    /// multiplexed over one connection per node and worker thread.
    #[serde(rename = "h2")]
    H2,
}

impl NodeProtocol {
    fn is_default(&self) -> bool {
        *self == NodeProtocol::Http1
    }

    /// The value as written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            NodeProtocol::Http1 => "http/1.1",
            NodeProtocol::H2 => "h2",
        }
    }

    /// Reads a node's `protocol` value; the error is one line.
    pub fn parse(text: &str) -> Result<NodeProtocol, String> {
        match text {
            "http/1.1" | "http1" => Ok(NodeProtocol::Http1),
            "h2" | "h2c" => Ok(NodeProtocol::H2),
            other => Err(format!(
                "protocol: `{other}` is not one of \"http/1.1\" or \"h2\" \
                 (HTTP/2; cleartext h2c, or ALPN h2 with `tls`)"
            )),
        }
    }
}

/// URL redirection (SWEB): for the chosen classes the switch answers with a redirect to the
/// picked node's `public_url` instead of proxying. A redirected URL carries a marker query
/// parameter, and a request that has it is forwarded, never redirected again (SWEB's guard
/// against ping-pong when several brokers redirect).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Redirect {
    /// Classes answered with a redirect; absent: every class.
    pub classes: Option<Vec<String>>,
    /// 301, 302, 303, 307 or 308 (default 302, as SWEB's HTTP redirection).
    pub status: u16,
    /// Name of the query parameter marking a redirected request (default `capstan-redirected`).
    pub mark: String,
}

impl Default for Redirect {
    fn default() -> Self {
        Redirect {
            classes: None,
            status: 302,
            mark: "capstan-redirected".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Timeouts {
    /// Connecting to a node.
    #[serde(with = "humantime_serde")]
    pub connect: Duration,
    /// From sending a request to its first node until a response head arrives, across every
    /// attempt (then 504). Time waiting in a node's queue is not counted (`admission`).
    #[serde(with = "humantime_serde")]
    pub upstream: Duration,
    /// One node's time to send a response head. A node that takes longer counts a timeout
    /// (the outlier detector sees it) and an idempotent request without a body is retried on
    /// another node while `upstream` leaves time; otherwise 504.
    #[serde(with = "humantime_serde")]
    pub first_byte: Duration,
    /// `first_byte` for some classes (`{ static = "2s", cpu = "20s" }`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub first_byte_by_class: BTreeMap<String, humantime_serde::Serde<Duration>>,
    /// A client connection with no bytes moving either way is closed after this.
    #[serde(with = "humantime_serde")]
    pub client_idle: Duration,
    /// A client must send a whole request head within this, once it has started one.
    #[serde(with = "humantime_serde")]
    pub header_read: Duration,
    /// A response write to a client may make no progress for this long (the client stopped
    /// reading); then the connection is closed and its node connection released (nginx's
    /// `send_timeout`). While a write waits, `client_idle` does not apply. On HTTP/2, also each
    /// stream's: one whose client grants no window for its next frame this long is cut (its
    /// node side released, the stream reset) while the connection stays.
    #[serde(with = "humantime_serde")]
    pub client_send: Duration,
    /// On SIGTERM, in-flight requests get this long to finish.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(2),
            upstream: Duration::from_secs(30),
            // Envoy's default route timeout.
            first_byte: Duration::from_secs(15),
            first_byte_by_class: BTreeMap::new(),
            client_idle: Duration::from_secs(60),
            header_read: Duration::from_secs(10),
            // nginx's `send_timeout` is 60 s too.
            client_send: Duration::from_secs(60),
            grace: Duration::from_secs(10),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Longest request target (path and query) in bytes; longer → 414.
    pub max_request_line: usize,
    /// Most bytes of request header fields; more → 431.
    pub max_header_bytes: usize,
    /// Most request header fields; more → 431.
    pub max_headers: usize,
    /// Largest request body in bytes; larger → 413. 0 means no limit.
    pub max_body_bytes: u64,
    /// Most client connections open at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// Most connections open at once from one client address (after a trusted PROXY
    /// header, the address it declares); one more is answered `429` and closed. 0: no limit.
    pub max_connections_per_client: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_request_line: 8 * 1024,
            max_header_bytes: 32 * 1024,
            max_headers: 100,
            max_body_bytes: 100 * 1024 * 1024,
            max_connections: 10_000,
            // Off: clients behind one NAT or an L4 balancer without PROXY protocol share an
            // address, and the lab's robots all come from loopback.
            max_connections_per_client: 0,
        }
    }
}

/// Node health: passive (connect failures on requests take a node out for a while), active checks
/// (HAProxy's `check`: a `GET` to every node every `check_interval`), and slow start for a node
/// that joins or comes back. A node takes requests only while none of them says it is out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Health {
    /// Consecutive connect failures that take a node out.
    pub fail_threshold: u32,
    /// How long a node stays out before it is tried again.
    #[serde(with = "humantime_serde")]
    pub backoff: Duration,
    /// Path the active check asks every node for (`GET`); without it there are no active
    /// checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_path: Option<String>,
    /// Time between two checks of a node (HAProxy's `inter`).
    #[serde(with = "humantime_serde")]
    pub check_interval: Duration,
    /// A check without a response head within this fails (at most `check_interval`).
    #[serde(with = "humantime_serde")]
    pub check_timeout: Duration,
    /// Consecutive passed checks that bring a node that is down back up.
    pub rise: u32,
    /// Consecutive failed checks that take a node that is up out.
    pub fall: u32,
    /// Statuses a check passes with: a status, a range `"200-399"`, or a list of them.
    pub expect_status: StatusSet,
    /// For this long after a node joins or comes back (checks pass again, its back-off ends,
    /// it reports again, it is undrained), it is offered to the policy on a share of the picks
    /// that ramps from 10 % to 100 %; `0s` (the default) turns slow start off.
    #[serde(with = "humantime_serde")]
    pub slow_start: Duration,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            fail_threshold: 3,
            backoff: Duration::from_secs(10),
            check_path: None,
            check_interval: Duration::from_secs(2),
            check_timeout: Duration::from_secs(1),
            rise: 2,
            fall: 3,
            expect_status: StatusSet::default(),
            slow_start: Duration::ZERO,
        }
    }
}

/// HTTP statuses an active check passes with: inclusive ranges.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "toml::Value")]
pub struct StatusSet(Vec<std::ops::RangeInclusive<u16>>);

impl Default for StatusSet {
    /// 2xx and 3xx, as HAProxy's `http-check` expects by default.
    fn default() -> Self {
        StatusSet(vec![200..=399])
    }
}

impl StatusSet {
    pub fn contains(&self, status: u16) -> bool {
        self.0.iter().any(|r| r.contains(&status))
    }

    /// One item: `200` or `"200-399"`.
    fn item(value: &toml::Value) -> Result<std::ops::RangeInclusive<u16>, String> {
        let code = |n: i64| {
            u16::try_from(n)
                .ok()
                .filter(|c| (100..=599).contains(c))
                .ok_or_else(|| format!("{n} is not an HTTP status (100-599)"))
        };
        match value {
            toml::Value::Integer(n) => code(*n).map(|c| c..=c),
            toml::Value::String(text) => {
                let (low, high) = text.split_once('-').unwrap_or((text, text));
                let number = |t: &str| {
                    t.trim()
                        .parse::<i64>()
                        .map_err(|_| {
                            format!("`{text}` is not a status or a range like \"200-399\"")
                        })
                        .and_then(code)
                };
                let (low, high) = (number(low)?, number(high)?);
                if low > high {
                    return Err(format!("the range `{text}` is empty"));
                }
                Ok(low..=high)
            }
            other => Err(format!(
                "want a status (200), a range (\"200-399\") or a list of them, got {other}"
            )),
        }
    }
}

impl TryFrom<toml::Value> for StatusSet {
    type Error = String;

    fn try_from(value: toml::Value) -> Result<Self, String> {
        let items = match &value {
            toml::Value::Array(list) if list.is_empty() => {
                return Err("the list of expected statuses is empty".into())
            }
            toml::Value::Array(list) => list.iter().map(StatusSet::item).collect(),
            toml::Value::String(text) => text
                .split(',')
                .map(|t| StatusSet::item(&toml::Value::String(t.trim().to_string())))
                .collect(),
            one => StatusSet::item(one).map(|r| vec![r]),
        };
        items.map(StatusSet)
    }
}

impl fmt::Display for StatusSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { ", " };
            match r.start() == r.end() {
                true => write!(f, "{sep}{}", r.start())?,
                false => write!(f, "{sep}{}-{}", r.start(), r.end())?,
            }
        }
        Ok(())
    }
}

impl Serialize for StatusSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// Gathering each node's load report (the papers' "collector", SWEB's loadd), for the policies
/// that read gathered state (`cap-load`, `sweb`, `lard` on utilisation, `weighted-round-robin`
/// with `metric = "service-time"`). Reports are fetched only when `path` is set;
/// `capstan origin` and `capstan agent` report at `/_capstan/load`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoadGathering {
    /// Path of the node's JSON load report; its busiest `interval` utilisation (`cpu_util`,
    /// `disk_util`, `nic_util`) becomes the node's load.
    pub path: Option<String>,
    /// How often to gather (T_gat in the CAP paper; SWEB's load daemon used 2–3 s). WRR's
    /// derived weights are recomputed at the same pace.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// A node whose last report is older than this is taken out until it reports again (SWEB's
    /// loadd). Default: three intervals.
    #[serde(with = "humantime_serde", skip_serializing_if = "Option::is_none")]
    pub silent_after: Option<Duration>,
}

impl Default for LoadGathering {
    fn default() -> Self {
        LoadGathering {
            path: None,
            interval: Duration::from_secs(2),
            silent_after: None,
        }
    }
}

/// What a request's locality key is (used by `lard`, `lard-r`, `consistent-hash`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyKind {
    /// The path without the query.
    #[default]
    Path,
    /// The path with the query.
    Uri,
}

#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Upstream {
    /// Idle keep-alive connections kept per node.
    pub pool_max_idle_per_node: usize,
    /// An idle pooled connection is closed after this.
    #[serde(with = "humantime_serde")]
    pub pool_idle_timeout: Duration,
    /// Retry an idempotent request without a body once on another node when connecting fails,
    /// or when the node closes or resets the connection before a response head.
    pub retry: bool,
    /// Retries may add at most this share (in %) to the requests of the last 10 s …
    pub retry_budget_percent: u32,
    /// … plus this many per second of that window, so that a quiet switch can still retry.
    pub retry_budget_min_per_second: u32,
    /// The locality key of a request.
    pub key: KeyKind,
    /// Also tell nodes who the client is in an RFC 7239 `Forwarded` field (`for`, `proto`),
    /// beside `X-Forwarded-For` and `X-Forwarded-Proto`.
    pub forwarded: bool,
}

impl Default for Upstream {
    fn default() -> Self {
        Upstream {
            pool_max_idle_per_node: 256,
            pool_idle_timeout: Duration::from_secs(60),
            retry: true,
            retry_budget_percent: 20,
            retry_budget_min_per_second: 3,
            key: KeyKind::Path,
            forwarded: false,
        }
    }
}

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

/// The outlier detector (Envoy's outlier detection; see [`crate::state::outlier`]): a node that fails
/// `consecutive_failures` requests in a row — a 5xx, no response head within `first_byte`, a
/// reset or a close without a response — is ejected for `base_ejection` × the times it has been
/// ejected in a row (at most `max_ejection`); never more than `max_ejected_percent` of the nodes
/// at once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Outlier {
    /// Failures in a row that eject a node (Envoy's `consecutive_5xx`, 5); 0 turns it off.
    pub consecutive_failures: u32,
    /// The first ejection's length; the n-th in a row lasts n times this.
    #[serde(with = "humantime_serde")]
    pub base_ejection: Duration,
    /// The longest ejection (Envoy's `max_ejection_time`, 300 s).
    #[serde(with = "humantime_serde")]
    pub max_ejection: Duration,
    /// Most nodes out by ejection at once, % of the cluster (at least one node of two or
    /// more may be ejected; a single node never is).
    pub max_ejected_percent: u32,
}

impl Default for Outlier {
    fn default() -> Self {
        Outlier {
            consecutive_failures: 5,
            base_ejection: Duration::from_secs(10),
            max_ejection: Duration::from_secs(300),
            max_ejected_percent: 50,
        }
    }
}

/// A configuration error, located in its file when it came from one.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    /// The file the error is in, when it came from one.
    pub file: Option<String>,
    /// Its line, from 1 (0 when it has no place in the file).
    pub line: usize,
    /// Its column, from 1 (0 when it has no place in the file).
    pub column: usize,
    /// What is wrong, one line.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{file}:{}:{}: {}", self.line, self.column, self.message),
            None => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    listen: Vec<Spanned<String>>,
    #[serde(default, rename = "listener")]
    listeners: Vec<Spanned<crate::config::sections::listener::RawListener>>,
    #[serde(default)]
    http2: crate::config::sections::http2::Http2,
    admin: Option<Spanned<String>>,
    admin_token: Option<Spanned<String>>,
    admin_token_file: Option<Spanned<String>>,
    #[serde(default)]
    debug_headers: bool,
    policy: Option<Spanned<toml::Table>>,
    #[serde(default, rename = "node")]
    nodes: Vec<Spanned<RawNode>>,
    #[serde(rename = "class")]
    classes: Option<Vec<Spanned<ClassSpec>>>,
    #[serde(rename = "rule")]
    rules: Option<Vec<Spanned<RuleSpec>>>,
    default_class: Option<Spanned<String>>,
    #[serde(default)]
    timeouts: Timeouts,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    health: Health,
    #[serde(default)]
    upstream: Upstream,
    #[serde(default)]
    admission: Admission,
    #[serde(default)]
    outlier: Outlier,
    #[serde(default)]
    load: LoadGathering,
    cache: Option<CacheConfig>,
    redirect: Option<Redirect>,
    access_log: Option<AccessLogConfig>,
    #[serde(default)]
    proxy_protocol: ProxyProtocolConfig,
    #[serde(default)]
    upgrade: UpgradeConfig,
    #[serde(default)]
    discovery: Vec<Spanned<crate::config::sections::discovery::RawDiscovery>>,
    tier: Option<crate::config::sections::tier::TierConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNode {
    name: Option<String>,
    address: Spanned<String>,
    #[serde(default = "default_weight")]
    weight: u32,
    public_url: Option<Spanned<String>>,
    report_address: Option<Spanned<String>>,
    tls: Option<Spanned<crate::config::sections::node_tls::RawNodeTls>>,
    protocol: Option<Spanned<String>>,
}

fn default_weight() -> u32 {
    1
}

/// Locates byte offsets in the configuration text.
struct Locator<'a> {
    file: Option<String>,
    text: &'a str,
    /// Where relative paths in the file (`admin_token_file`) are taken from.
    base_dir: Option<&'a Path>,
}

impl Locator<'_> {
    fn error(&self, span: Option<Range<usize>>, message: impl Into<String>) -> ConfigError {
        let (line, column) = match span {
            Some(span) => line_column(self.text, span.start),
            None => (1, 1),
        };
        ConfigError {
            file: self.file.clone(),
            line,
            column,
            message: message.into(),
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

impl Config {
    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: Some(path.display().to_string()),
            line: 1,
            column: 1,
            message: format!("cannot read: {e}"),
        })?;
        let loc = Locator {
            file: Some(path.display().to_string()),
            text: &text,
            base_dir: path.parent(),
        };
        let mut config = parse_located(&loc)?;
        config.source = Some(path.to_path_buf());
        Ok(config)
    }

    /// Parses and validates configuration text; `file` names it in errors.
    pub fn parse(text: &str, file: Option<&str>) -> Result<Config, ConfigError> {
        parse_located(&Locator {
            file: Some(file.unwrap_or("<config>").to_string()),
            text,
            base_dir: None,
        })
    }

    /// A configuration with every default, for building from command-line flags.
    pub fn from_parts(listen: Vec<SocketAddr>, nodes: Vec<NodeConfig>) -> Config {
        let (classes, rules) = cap_default_specs();
        Config {
            source: None,
            listen,
            listeners: Vec::new(),
            http2: Default::default(),
            admin: None,
            admin_token: None,
            debug_headers: false,
            policy: PolicySpec::with_defaults("round-robin").expect("round-robin exists"),
            nodes,
            classes,
            rules,
            default_class: "static".to_string(),
            timeouts: Timeouts::default(),
            limits: Limits::default(),
            health: Health::default(),
            upstream: Upstream::default(),
            admission: Admission::default(),
            outlier: Outlier::default(),
            load: LoadGathering::default(),
            cache: None,
            redirect: None,
            access_log: None,
            proxy_protocol: ProxyProtocolConfig::default(),
            upgrade: UpgradeConfig::default(),
            discovery: Vec::new(),
            tier: None,
        }
    }

    /// Checks what the parser cannot: the classifier and policy build, nodes are unique.
    /// Used for configurations built from flags.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let plain = |message: String| ConfigError {
            file: None,
            line: 0,
            column: 0,
            message,
        };
        if self.listen.is_empty() && self.listeners.is_empty() {
            return Err(plain(
                "no listener: give at least one listen address".into(),
            ));
        }
        if self.nodes.is_empty() && self.discovery.is_empty() {
            return Err(plain("no node: give at least one back-end node".into()));
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if self.nodes[..i].iter().any(|n| n.name == node.name) {
                return Err(plain(format!("node name `{}` is used twice", node.name)));
            }
        }
        let classifier = self.classifier().map_err(|e| plain(e.to_string()))?;
        self.build_policy_for(&classifier)
            .map_err(|e| plain(format!("policy {}: {e}", self.policy.name())))?;
        check_limits(&self.limits).map_err(plain)?;
        self.http2.check().map_err(|(_, e)| plain(e))?;
        check_load(&self.load).map_err(plain)?;
        check_upstream(&self.upstream).map_err(|(_, e)| plain(e))?;
        check_health(&self.health).map_err(|(_, e)| plain(e))?;
        check_timeouts(&self.timeouts, &class_names(&classifier)).map_err(|(_, e)| plain(e))?;
        check_admission(&self.admission).map_err(|(_, e)| plain(e))?;
        check_outlier(&self.outlier).map_err(|(_, e)| plain(e))?;
        if let Some(cache) = &self.cache {
            cache
                .check(&class_names(&classifier))
                .map_err(|(_, e)| plain(e))?;
        }
        check_operation(self).map_err(|(_, _, e)| plain(e))?;
        Ok(())
    }

    /// Every client listener's address: `listen`, then `[[listener]]`s (how a switch finds
    /// itself among `tier.peers`).
    pub fn client_addresses(&self) -> Vec<SocketAddr> {
        (self.listen.iter().copied())
            .chain(self.listeners.iter().map(|l| l.address))
            .collect()
    }

    /// Settings that work but are likely mistakes: `capstan check` prints them, the switch
    /// logs them when it starts and on every reload.
    pub fn warnings(&self) -> Vec<String> {
        let mut all: Vec<String> = self.admin_exposure_warning().into_iter().collect();
        all.extend(self.self_addressed_node_warnings());
        all.extend(self.tier_admission_warning());
        all
    }

    /// `tier.admission = "shared"` shares a fixed limit only: with an adaptive one (or none)
    /// it changes nothing, which the operator should know.
    fn tier_admission_warning(&self) -> Option<String> {
        let tier = self.tier.as_ref()?;
        let shared = tier.admission == crate::config::sections::tier::TierAdmission::Shared;
        let what = match self.admission.limit {
            LimitMode::Fixed(_) => return None,
            LimitMode::Adaptive => "adaptive (each switch's limit follows the node's latency)",
            LimitMode::Off => "off",
        };
        shared.then(|| {
            format!(
                "tier.admission = \"shared\" shares a fixed [admission] limit, and the limit is {what}: \
                 nothing is shared; give [admission] limit = N"
            )
        })
    }

    /// The classifier the classes and rules make.
    pub fn classifier(&self) -> Result<Classifier, ClassifierError> {
        Classifier::new(&self.classes, &self.rules, &self.default_class)
    }

    /// Builds this configuration's policy for a classifier built from it.
    pub fn build_policy_for(
        &self,
        classifier: &Classifier,
    ) -> Result<Box<dyn capstan_core::Policy>, capstan_core::PolicyError> {
        let nodes: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        let classes: Vec<String> = classifier
            .classes()
            .iter()
            .map(|c| c.name.clone())
            .collect();
        build_policy(
            &self.policy,
            &PolicyContext {
                nodes: &nodes,
                classes: &classes,
            },
        )
    }

    /// A human-readable summary of the resolved cluster, as `capstan check` prints it.
    pub fn describe(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let listen: Vec<String> = self.listen.iter().map(|a| a.to_string()).collect();
        let listen = match listen.is_empty() {
            true => "(none)".to_string(),
            false => listen.join(", "),
        };
        let _ = writeln!(out, "listen    {listen}");
        for listener in &self.listeners {
            let _ = writeln!(out, "listener  {}", listener.describe());
        }
        match self.admin {
            Some(admin) => {
                let token = match &self.admin_token {
                    Some(_) => " (POST endpoints need the bearer token)",
                    None => " (no token: POST endpoints are open)",
                };
                let _ = writeln!(out, "admin     {admin}{token}");
                if let Some(warning) = self.admin_exposure_warning() {
                    let _ = writeln!(out, "warning   {warning}");
                }
            }
            None => {
                let _ = writeln!(out, "admin     (none)");
            }
        }
        let params = match serde_json::to_value(&self.policy) {
            Ok(serde_json::Value::Object(map)) => map
                .iter()
                .filter(|(k, _)| k.as_str() != "name")
                .map(|(k, v)| format!("{k} = {v}"))
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        let _ = writeln!(
            out,
            "policy    {}{}",
            self.policy.name(),
            if params.is_empty() {
                String::new()
            } else {
                format!(" ({})", params.join(", "))
            }
        );
        let _ = writeln!(out, "nodes     {}", self.nodes.len());
        for node in &self.nodes {
            let _ = writeln!(
                out,
                "  {:<16} {:<22} weight {}{}",
                node.name,
                node.address,
                node.weight,
                node.tls
                    .as_ref()
                    .map(|t| format!(", {}", t.describe()))
                    .unwrap_or_default(),
            );
            if node.protocol == NodeProtocol::H2 {
                let how = match node.tls {
                    Some(_) => "HTTP/2 over TLS (ALPN h2)",
                    None => "HTTP/2 cleartext (h2c, prior knowledge)",
                };
                let _ = writeln!(out, "  {:<16} protocol h2: {how}", "");
            }
        }
        for source in &self.discovery {
            let _ = writeln!(out, "discovery {}: {}", source.name, source.describe());
        }
        for warning in self.self_addressed_node_warnings() {
            let _ = writeln!(out, "warning   {warning}");
        }
        let _ = writeln!(
            out,
            "classes   {} (default: {})",
            self.classes.len(),
            self.default_class
        );
        for class in &self.classes {
            let p = class.profile;
            let _ = writeln!(
                out,
                "  {:<16} cpu {} ms, disk {} ms, net {} KB",
                class.name, p.cpu_ms, p.disk_ms, p.net_kb
            );
        }
        let _ = writeln!(out, "rules     {}", self.rules.len());
        for (i, rule) in self.rules.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {:>2}. {} -> {}",
                i + 1,
                describe_rule(rule),
                rule.class
            );
        }
        let _ = writeln!(out, "{}", describe_timeouts(&self.timeouts));
        let l = &self.limits;
        let _ = writeln!(
            out,
            "limits    request line {} B, headers {} B / {} fields, body {}, connections {}, \
             per client address {}",
            l.max_request_line,
            l.max_header_bytes,
            l.max_headers,
            if l.max_body_bytes == 0 {
                "unlimited".to_string()
            } else {
                format!("{} B", l.max_body_bytes)
            },
            l.max_connections,
            match l.max_connections_per_client {
                0 => "unlimited".to_string(),
                n => n.to_string(),
            }
        );
        let u = &self.upstream;
        let _ = writeln!(
            out,
            "retry     {}, budget {} % of requests over 10 s plus {}/s",
            if u.retry {
                "once, on connect failure or an empty reply"
            } else {
                "off"
            },
            u.retry_budget_percent,
            u.retry_budget_min_per_second
        );
        let _ = writeln!(out, "{}", describe_health(&self.health));
        let _ = writeln!(out, "{}", describe_admission(&self.admission));
        let _ = writeln!(out, "{}", describe_outlier(&self.outlier));
        let needs = self
            .classifier()
            .ok()
            .and_then(|c| self.build_policy_for(&c).ok())
            .map(|p| p.needs())
            .unwrap_or_default();
        match &self.load.path {
            Some(path) => {
                let _ = writeln!(
                    out,
                    "load      gathered from {path} every {}, silent nodes out after {}",
                    humantime::format_duration(self.load.interval),
                    humantime::format_duration(
                        self.load.silent_after.unwrap_or(self.load.interval * 3)
                    )
                );
            }
            None if needs.gathered_load => {
                let _ = writeln!(
                    out,
                    "load      not gathered: {} sees every node at load 0 (set [load] path)",
                    self.policy.name()
                );
            }
            None => {
                let _ = writeln!(out, "load      not gathered");
            }
        }
        let _ = writeln!(out, "{}", describe_cache(self.cache.as_ref()));
        if let Some(r) = &self.redirect {
            let classes = match &r.classes {
                Some(list) => list.join(", "),
                None => "every class".to_string(),
            };
            let _ = writeln!(
                out,
                "redirect  {} to the picked node's public_url for {classes} (marked ?{}=1, never twice)",
                r.status, r.mark
            );
        }
        out.push_str(&describe_operation(self));
        out
    }
}

/// Checks the access log, PROXY protocol and upgrade sections: the section and key at fault
/// and why.
fn check_operation(config: &Config) -> Result<(), (&'static str, &'static str, String)> {
    if let Some(log) = &config.access_log {
        log.check().map_err(|(key, e)| ("access_log", key, e))?;
    }
    check_h2_nodes(config).map_err(|e| ("proxy_protocol", "send", e))?;
    config
        .proxy_protocol
        .check(&config.listen)
        .map_err(|(key, e)| ("proxy_protocol", key, e))?;
    config
        .upgrade
        .check()
        .map_err(|(key, e)| ("upgrade", key, e))?;
    if let Some(tier) = &config.tier {
        tier.check(&config.client_addresses())
            .map_err(|(key, e)| ("tier", key, e))?;
    }
    Ok(())
}

fn describe_operation(config: &Config) -> String {
    let mut out = String::new();
    if let Some(log) = &config.access_log {
        out.push_str(&log.describe());
    }
    out.push_str(&config.proxy_protocol.describe());
    let u = &config.upgrade;
    if let Some(tier) = &config.tier {
        out.push_str(&tier.describe(config.cache.is_some()));
        if let Some(w) = config.tier_admission_warning() {
            out.push_str(&format!("warning   {w}\n"));
        }
    }
    out.push_str(&format!(
        "upgrades  {}, CONNECT {}, tunnel idle timeout {}\n",
        if u.enabled { "passed to nodes" } else { "off" },
        if u.connect {
            "passed to nodes"
        } else {
            "refused (405)"
        },
        humantime::format_duration(u.idle_timeout)
    ));
    out
}

fn describe_timeouts(t: &Timeouts) -> String {
    let d = humantime::format_duration;
    let by_class: Vec<String> = t
        .first_byte_by_class
        .iter()
        .map(|(class, timeout)| format!("{class} {}", d(timeout.into_inner())))
        .collect();
    format!(
        "timeouts  connect {}, first byte {}{}, upstream {} (all attempts), client idle {}, \
         header read {}, client send {}, grace {}",
        d(t.connect),
        d(t.first_byte),
        match by_class.is_empty() {
            true => String::new(),
            false => format!(" ({})", by_class.join(", ")),
        },
        d(t.upstream),
        d(t.client_idle),
        d(t.header_read),
        d(t.client_send),
        d(t.grace)
    )
}

fn describe_admission(a: &Admission) -> String {
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

fn describe_outlier(o: &Outlier) -> String {
    if o.consecutive_failures == 0 {
        return "outlier   off".to_string();
    }
    format!(
        "outlier   eject after {} failures in a row (5xx, first-byte timeout, reset) for {} × \
         ejections in a row (at most {}), at most {} % of the nodes",
        o.consecutive_failures,
        humantime::format_duration(o.base_ejection),
        humantime::format_duration(o.max_ejection),
        o.max_ejected_percent
    )
}

fn describe_health(h: &Health) -> String {
    let d = humantime::format_duration;
    let passive = format!(
        "health    passive: out after {} failed connects, for {}",
        h.fail_threshold,
        d(h.backoff)
    );
    let active = match &h.check_path {
        Some(path) => format!(
            "\n          active: GET {path} every {} (timeout {}), out after {} failed, back after \
             {} passed, passes with {}",
            d(h.check_interval),
            d(h.check_timeout),
            h.fall,
            h.rise,
            h.expect_status
        ),
        None => "\n          active: off (set health.check_path)".to_string(),
    };
    let slow = match h.slow_start.is_zero() {
        true => "\n          slow start: off".to_string(),
        false => format!(
            "\n          slow start: {} (a joining or returning node's share ramps 10 % → 100 %)",
            d(h.slow_start)
        ),
    };
    passive + &active + &slow
}

fn describe_cache(cache: Option<&CacheConfig>) -> String {
    let Some(c) = cache else {
        return "cache     off".to_string();
    };
    let disk = match &c.disk_path {
        Some(dir) => format!("disk {} in {}", c.disk_size, dir.display()),
        None => "no disk tier".to_string(),
    };
    let classes = match &c.classes {
        Some(list) => list.join(", "),
        None => "every class".to_string(),
    };
    let targeted = match c.targeted_fields.as_slice() {
        [] => "none (Cache-Control only)".to_string(),
        names => names.join(", "),
    };
    let d = |t| humantime::format_duration(t);
    // RFC 9111 §4.2.4: stale only when the response or the request allowed it; the operator's
    // windows go beyond that, and the output says so.
    let mut windows = Vec::new();
    if !c.grace.is_zero() {
        windows.push(format!("{} while refreshing (grace)", d(c.grace)));
    }
    if !c.stale_if_error.is_zero() {
        windows.push(format!(
            "{} when the node fails (stale_if_error)",
            d(c.stale_if_error)
        ));
    }
    let stale = match c.operator_stale() {
        None => String::new(),
        Some(_) => format!(
            "\n          may serve stale answers beyond RFC 9111 §4.2.4, that neither the response nor \
             the request allowed: for {}",
            windows.join(", for ")
        ),
    };
    format!(
        "cache     memory {}, {disk}, eviction {}, objects up to {}, grace {}, for {classes}\n          \
         targeted fields: {targeted}{stale}",
        c.memory,
        c.policy.name(),
        c.max_object,
        d(c.grace)
    )
}

fn describe_rule(rule: &RuleSpec) -> String {
    let mut parts = Vec::new();
    if let Some(v) = &rule.path_prefix {
        parts.push(format!("path_prefix {v:?}"));
    }
    if let Some(v) = &rule.glob {
        parts.push(format!("glob {v:?}"));
    }
    if let Some(v) = &rule.regex {
        parts.push(format!("regex {v:?}"));
    }
    if let Some(v) = &rule.extension {
        parts.push(format!("extension {v:?}"));
    }
    if let Some(v) = &rule.method {
        parts.push(format!("method {v:?}"));
    }
    if let Some(v) = rule.query {
        parts.push(format!("query {v}"));
    }
    if let Some(v) = &rule.header {
        match &rule.header_value {
            Some(value) => parts.push(format!("header {v}: {value:?}")),
            None => parts.push(format!("header {v}")),
        }
    }
    if let Some(v) = rule.tls {
        parts.push(format!("tls {v}"));
    }
    if let Some(v) = &rule.sni {
        parts.push(format!("sni {v:?}"));
    }
    parts.join(" and ")
}

fn check_load(l: &LoadGathering) -> Result<(), String> {
    if let Some(path) = &l.path {
        if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
            return Err(format!("load.path `{path}` must be a path starting with /"));
        }
    }
    if l.interval < Duration::from_millis(10) {
        return Err("load.interval must be at least 10ms".into());
    }
    if l.silent_after.is_some_and(|s| s < l.interval) {
        return Err("load.silent_after must be at least load.interval".into());
    }
    Ok(())
}

/// The `health` key at fault and why.
fn check_health(h: &Health) -> Result<(), (&'static str, String)> {
    if let Some(path) = &h.check_path {
        if !path.starts_with('/') || path.parse::<http::uri::PathAndQuery>().is_err() {
            return Err((
                "check_path",
                format!("health.check_path `{path}` must be a path starting with /"),
            ));
        }
    }
    if h.check_interval < Duration::from_millis(10) {
        return Err((
            "check_interval",
            "health.check_interval must be at least 10ms".into(),
        ));
    }
    if h.check_timeout < Duration::from_millis(1) || h.check_timeout > h.check_interval {
        return Err((
            "check_timeout",
            format!(
                "health.check_timeout is {}; it must be at least 1ms and at most \
                 health.check_interval ({})",
                humantime::format_duration(h.check_timeout),
                humantime::format_duration(h.check_interval)
            ),
        ));
    }
    for (key, value) in [
        ("rise", h.rise),
        ("fall", h.fall),
        ("fail_threshold", h.fail_threshold),
    ] {
        if value == 0 {
            return Err((key, format!("health.{key} must be at least 1")));
        }
    }
    Ok(())
}

/// The `timeouts` key at fault (a path below `[timeouts]`) and why.
fn check_timeouts(t: &Timeouts, classes: &[String]) -> Result<(), (Vec<String>, String)> {
    if t.first_byte < Duration::from_millis(1) {
        return Err((
            vec!["first_byte".into()],
            "timeouts.first_byte must be at least 1ms".into(),
        ));
    }
    if t.client_send < Duration::from_millis(1) {
        return Err((
            vec!["client_send".into()],
            "timeouts.client_send must be at least 1ms".into(),
        ));
    }
    for (class, timeout) in &t.first_byte_by_class {
        let path = vec!["first_byte_by_class".into(), class.clone()];
        if !classes.contains(class) {
            return Err((
                path,
                format!(
                    "timeouts.first_byte_by_class names unknown class `{class}` (classes: {})",
                    classes.join(", ")
                ),
            ));
        }
        if timeout.into_inner() < Duration::from_millis(1) {
            return Err((
                path,
                format!("timeouts.first_byte_by_class.{class} must be at least 1ms"),
            ));
        }
    }
    Ok(())
}

/// The `admission` key at fault and why.
fn check_admission(a: &Admission) -> Result<(), (&'static str, String)> {
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

/// The `outlier` key at fault and why.
fn check_outlier(o: &Outlier) -> Result<(), (&'static str, String)> {
    if o.max_ejected_percent > 100 {
        return Err((
            "max_ejected_percent",
            format!(
                "outlier.max_ejected_percent is {}; it must be 0 to 100",
                o.max_ejected_percent
            ),
        ));
    }
    if o.base_ejection < Duration::from_millis(10) {
        return Err((
            "base_ejection",
            "outlier.base_ejection must be at least 10ms".into(),
        ));
    }
    if o.max_ejection < o.base_ejection {
        return Err((
            "max_ejection",
            format!(
                "outlier.max_ejection ({}) must be at least outlier.base_ejection ({})",
                humantime::format_duration(o.max_ejection),
                humantime::format_duration(o.base_ejection)
            ),
        ));
    }
    Ok(())
}

/// The `upstream` key at fault and why.
fn check_upstream(u: &Upstream) -> Result<(), (&'static str, String)> {
    if u.retry_budget_percent > 100 {
        return Err((
            "retry_budget_percent",
            format!(
                "upstream.retry_budget_percent is {}; it must be 0 to 100",
                u.retry_budget_percent
            ),
        ));
    }
    if u.retry_budget_min_per_second > 10_000 {
        return Err((
            "retry_budget_min_per_second",
            "upstream.retry_budget_min_per_second must be at most 10000".into(),
        ));
    }
    Ok(())
}

fn check_limits(l: &Limits) -> Result<(), String> {
    if l.max_request_line < 16 {
        return Err("limits.max_request_line must be at least 16".into());
    }
    if l.max_header_bytes < 256 {
        return Err("limits.max_header_bytes must be at least 256".into());
    }
    if l.max_headers == 0 {
        return Err("limits.max_headers must be at least 1".into());
    }
    if l.max_connections == 0 {
        return Err("limits.max_connections must be at least 1".into());
    }
    Ok(())
}

fn class_names(classifier: &Classifier) -> Vec<String> {
    classifier
        .classes()
        .iter()
        .map(|c| c.name.clone())
        .collect()
}

fn parse_located(loc: &Locator<'_>) -> Result<Config, ConfigError> {
    let raw: RawConfig = toml::from_str(loc.text).map_err(|e| {
        let message = e.message().trim().replace('\n', " ");
        loc.error(e.span(), message)
    })?;
    resolve(raw, loc)
}

/// `admin_token` or `admin_token_file` (not both), validated; located errors.
fn resolve_admin_token(
    raw: &RawConfig,
    loc: &Locator<'_>,
) -> Result<Option<AdminToken>, ConfigError> {
    match (&raw.admin_token, &raw.admin_token_file) {
        (Some(_), Some(file)) => Err(loc.error(
            Some(file.span()),
            "give admin_token or admin_token_file, not both",
        )),
        (Some(token), None) => AdminToken::new(token.get_ref())
            .map(Some)
            .map_err(|e| loc.error(Some(token.span()), format!("admin_token: {e}"))),
        (None, Some(file)) => {
            let path = Path::new(file.get_ref());
            let path = match loc.base_dir {
                Some(dir) if path.is_relative() => dir.join(path),
                _ => path.to_path_buf(),
            };
            AdminToken::from_file(&path)
                .map(Some)
                .map_err(|e| loc.error(Some(file.span()), format!("admin_token_file: {e}")))
        }
        (None, None) => Ok(None),
    }
}

fn resolve(raw: RawConfig, loc: &Locator<'_>) -> Result<Config, ConfigError> {
    let mut listen = Vec::new();
    for addr in &raw.listen {
        listen.push(resolve_address(addr.get_ref()).map_err(|e| loc.error(Some(addr.span()), e))?);
    }
    let listeners = crate::config::sections::listener::resolve(&raw.listeners, loc.base_dir)
        .map_err(|(span, e)| loc.error(span, e))?;
    if listen.is_empty() && listeners.is_empty() {
        return Err(loc.error(None, "no listener: add `listen = [\"127.0.0.1:8080\"]`"));
    }
    let admin = match &raw.admin {
        Some(a) => Some(resolve_address(a.get_ref()).map_err(|e| loc.error(Some(a.span()), e))?),
        None => None,
    };
    let admin_token = resolve_admin_token(&raw, loc)?;
    let discovery = crate::config::sections::discovery::resolve(&raw.discovery, loc.base_dir)
        .map_err(|(span, e)| loc.error(span, e))?;
    if raw.nodes.is_empty() && discovery.is_empty() {
        return Err(loc.error(None, "no node: add at least one [[node]] with an address"));
    }
    let mut nodes: Vec<NodeConfig> = Vec::new();
    for node in &raw.nodes {
        let span = node.span();
        let node = node.get_ref();
        let address = resolve_address(node.address.get_ref())
            .map_err(|e| loc.error(Some(node.address.span()), e))?;
        let name = node
            .name
            .clone()
            .unwrap_or_else(|| node.address.get_ref().clone());
        if name.is_empty() {
            return Err(loc.error(Some(span), "node name must not be empty"));
        }
        if nodes.iter().any(|n| n.name == name) {
            return Err(loc.error(Some(span), format!("node name `{name}` is used twice")));
        }
        if node.weight == 0 {
            return Err(loc.error(
                Some(span),
                format!("node `{name}`: weight must be at least 1"),
            ));
        }
        let public_url = match &node.public_url {
            Some(url) => Some(
                check_public_url(url.get_ref())
                    .map_err(|e| loc.error(Some(url.span()), format!("node `{name}`: {e}")))?,
            ),
            None => None,
        };
        let report_address = match &node.report_address {
            Some(a) => Some(
                resolve_address(a.get_ref())
                    .map_err(|e| loc.error(Some(a.span()), format!("node `{name}`: {e}")))?,
            ),
            None => None,
        };
        let protocol = match &node.protocol {
            Some(p) => NodeProtocol::parse(p.get_ref())
                .map_err(|e| loc.error(Some(p.span()), format!("node `{name}`: {e}")))?,
            None => NodeProtocol::Http1,
        };
        let tls = match &node.tls {
            Some(t) => Some(
                crate::config::sections::node_tls::resolve(
                    t.get_ref(),
                    address,
                    loc.base_dir,
                    protocol == NodeProtocol::H2,
                )
                .map_err(|e| loc.error(Some(t.span()), format!("node `{name}`: {e}")))?,
            ),
            None => None,
        };
        if tls.as_ref().is_some_and(|t| !t.verify) {
            tracing::warn!(
                "node `{name}`: tls.verify = false: its certificate is not checked (insecure)"
            );
        }
        nodes.push(NodeConfig {
            name,
            address,
            weight: node.weight,
            public_url,
            report_address,
            tls,
            protocol,
        });
    }

    let (default_classes, default_rules) = cap_default_specs();
    let user_classes = raw.classes.is_some();
    let class_spans: Vec<Range<usize>> = raw.classes.iter().flatten().map(|c| c.span()).collect();
    let classes: Vec<ClassSpec> = match raw.classes {
        Some(list) => list.into_iter().map(Spanned::into_inner).collect(),
        None => default_classes,
    };
    let rule_spans: Vec<Range<usize>> = raw.rules.iter().flatten().map(|r| r.span()).collect();
    let rules: Vec<RuleSpec> = match raw.rules {
        Some(list) => list.into_iter().map(Spanned::into_inner).collect(),
        None if user_classes => Vec::new(),
        None => default_rules,
    };
    let default_span = raw.default_class.as_ref().map(|d| d.span());
    let default_class = match raw.default_class {
        Some(d) => d.into_inner(),
        None => classes.first().map(|c| c.name.clone()).unwrap_or_default(),
    };
    let policy_span = raw.policy.as_ref().map(|p| p.span());
    let policy = match raw.policy {
        Some(p) => policy_from_table(p.get_ref()).map_err(|e| {
            let span = e
                .key
                .as_deref()
                .and_then(|key| value_span(loc.text, &["policy", key]))
                .or(policy_span.clone());
            loc.error(span, format!("policy: {}", e.message))
        })?,
        None => PolicySpec::with_defaults("round-robin").expect("round-robin exists"),
    };
    let tier = match raw.tier {
        Some(mut tier) => {
            tier.resolve(loc.base_dir).map_err(|(key, (at, e))| {
                let span = at
                    .or_else(|| value_span(loc.text, &["tier", key]))
                    .or(find_key(loc.text, "tier"));
                loc.error(span, e)
            })?;
            Some(tier)
        }
        None => None,
    };
    let config = Config {
        source: None,
        listen,
        listeners,
        http2: raw.http2,
        admin,
        admin_token,
        debug_headers: raw.debug_headers,
        policy,
        nodes,
        classes,
        rules,
        default_class,
        timeouts: raw.timeouts,
        limits: raw.limits,
        health: raw.health,
        upstream: raw.upstream,
        admission: raw.admission,
        outlier: raw.outlier,
        load: raw.load,
        cache: raw.cache,
        redirect: raw.redirect,
        access_log: raw.access_log,
        proxy_protocol: raw.proxy_protocol,
        upgrade: raw.upgrade,
        discovery,
        tier,
    };

    let classifier = config.classifier().map_err(|e| {
        let span = match &e {
            ClassifierError::UnknownClass { rule, .. }
            | ClassifierError::NoCondition { rule }
            | ClassifierError::BadGlob { rule, .. }
            | ClassifierError::BadRegex { rule, .. }
            | ClassifierError::ValueWithoutHeader { rule } => rule_spans.get(rule - 1).cloned(),
            ClassifierError::DuplicateClass(name)
            | ClassifierError::BadProfile { class: name, .. } => {
                let last = config.classes.iter().rposition(|c| &c.name == name);
                last.and_then(|i| class_spans.get(i).cloned())
            }
            ClassifierError::EmptyClassName => {
                let i = config.classes.iter().position(|c| c.name.is_empty());
                i.and_then(|i| class_spans.get(i).cloned())
            }
            ClassifierError::UnknownDefault { .. } => default_span.clone(),
        };
        loc.error(span, e.to_string())
    })?;
    config
        .build_policy_for(&classifier)
        .map_err(|e| loc.error(policy_span, format!("policy {}: {e}", config.policy.name())))?;
    check_limits(&config.limits).map_err(|e| loc.error(find_key(loc.text, "limits"), e))?;
    config.http2.check().map_err(|(key, e)| {
        let span = value_span(loc.text, &["http2", key]).or(find_key(loc.text, "http2"));
        loc.error(span, e)
    })?;
    check_load(&config.load).map_err(|e| loc.error(find_key(loc.text, "load"), e))?;
    check_upstream(&config.upstream).map_err(|(key, e)| {
        let span = value_span(loc.text, &["upstream", key]).or(find_key(loc.text, "upstream"));
        loc.error(span, e)
    })?;
    if let Some(redirect) = &config.redirect {
        check_redirect(redirect, &config.nodes, &class_names(&classifier)).map_err(|e| {
            let span = find_key(loc.text, "redirect");
            loc.error(span, e)
        })?;
    }
    check_timeouts(&config.timeouts, &class_names(&classifier)).map_err(|(path, e)| {
        let keys: Vec<&str> = std::iter::once("timeouts")
            .chain(path.iter().map(String::as_str))
            .collect();
        let span = value_span(loc.text, &keys).or(find_key(loc.text, "timeouts"));
        loc.error(span, e)
    })?;
    check_admission(&config.admission).map_err(|(key, e)| {
        let span = value_span(loc.text, &["admission", key]).or(find_key(loc.text, "admission"));
        loc.error(span, e)
    })?;
    check_outlier(&config.outlier).map_err(|(key, e)| {
        let span = value_span(loc.text, &["outlier", key]).or(find_key(loc.text, "outlier"));
        loc.error(span, e)
    })?;
    check_health(&config.health).map_err(|(key, e)| {
        let span = value_span(loc.text, &["health", key]).or(find_key(loc.text, "health"));
        loc.error(span, e)
    })?;
    if let Some(cache) = &config.cache {
        cache.check(&class_names(&classifier)).map_err(|(key, e)| {
            let span = value_span(loc.text, &["cache", key]).or(find_key(loc.text, "cache"));
            loc.error(span, e)
        })?;
    }
    check_operation(&config).map_err(|(section, key, e)| {
        let span = value_span(loc.text, &[section, key]).or(find_key(loc.text, section));
        loc.error(span, e)
    })?;
    Ok(config)
}

/// A node's public URL: `http://host[:port]` with no path, query or trailing slash.
pub(crate) fn check_public_url(url: &str) -> Result<String, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("public_url `{url}` is not a URL: {e}"))?;
    let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
    let bare = uri.path_and_query().is_none_or(|pq| pq.as_str() == "/");
    if !scheme_ok || uri.authority().is_none() || !bare {
        return Err(format!(
            "public_url `{url}` must be http:// or https:// with a host and nothing after it"
        ));
    }
    Ok(url.trim_end_matches('/').to_string())
}

/// What the parser cannot check about h2 nodes: the one-line error.
fn check_h2_nodes(config: &Config) -> Result<(), String> {
    if config.proxy_protocol.send == sections::proxy_protocol::SendVersion::Off {
        return Ok(());
    }
    match config.nodes.iter().find(|n| n.protocol == NodeProtocol::H2) {
        Some(node) => Err(format!(
            "proxy_protocol.send cannot be used with node `{}` (protocol = \"h2\"): one HTTP/2 \
             connection carries many clients' requests, so no PROXY header can name the client",
            node.name
        )),
        None => Ok(()),
    }
}

fn check_redirect(r: &Redirect, nodes: &[NodeConfig], classes: &[String]) -> Result<(), String> {
    if ![301, 302, 303, 307, 308].contains(&r.status) {
        return Err(format!(
            "redirect.status {} is not a redirect (use 301, 302, 303, 307 or 308)",
            r.status
        ));
    }
    if let Some(missing) = nodes.iter().find(|n| n.public_url.is_none()) {
        return Err(format!(
            "[redirect] needs every node's public_url; node `{}` has none",
            missing.name
        ));
    }
    for class in r.classes.iter().flatten() {
        if !classes.contains(class) {
            return Err(format!("redirect.classes names unknown class `{class}`"));
        }
    }
    let mark_ok = !r.mark.is_empty()
        && r.mark
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !mark_ok {
        return Err(format!(
            "redirect.mark `{}` must be a non-empty query parameter name (letters, digits, - and _)",
            r.mark
        ));
    }
    Ok(())
}

/// Why a `[policy]` table does not describe a policy; `key` names the parameter at fault when
/// one can be singled out.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyTableError {
    pub key: Option<String>,
    pub message: String,
}

/// Reads a policy from its table (`name` plus parameters). Serde's internally tagged enums lose
/// track of which field failed, so on failure each parameter is tried alone to name the culprit.
pub fn policy_from_table(table: &toml::Table) -> Result<PolicySpec, PolicyTableError> {
    let parse = |t: toml::Table| -> Result<PolicySpec, String> {
        t.try_into()
            .map_err(|e: toml::de::Error| e.message().trim().to_string())
    };
    let name = match table.get("name") {
        Some(toml::Value::String(name)) => name.clone(),
        Some(_) => {
            return Err(PolicyTableError {
                key: Some("name".into()),
                message: "`name` must be a string".into(),
            })
        }
        None => {
            return Err(PolicyTableError {
                key: None,
                message: format!(
                    "missing `name` (one of: {})",
                    PolicySpec::names().join(", ")
                ),
            })
        }
    };
    if capstan_core::policy::lookup(&name).is_none() {
        return Err(PolicyTableError {
            key: Some("name".into()),
            message: format!(
                "unknown policy `{name}` (one of: {})",
                PolicySpec::names().join(", ")
            ),
        });
    }
    parse(table.clone()).map_err(|message| {
        let culprit = table.keys().filter(|k| k.as_str() != "name").find(|key| {
            let mut alone = toml::Table::new();
            alone.insert("name".into(), toml::Value::String(name.clone()));
            alone.insert((*key).clone(), table[key.as_str()].clone());
            parse(alone).is_err()
        });
        match culprit {
            Some(key) => PolicyTableError {
                message: format!("{name}: `{key}`: {message}"),
                key: Some(key.clone()),
            },
            None => PolicyTableError {
                key: None,
                message: format!("{name}: {message}"),
            },
        }
    })
}

/// The span of the value at `path` (table keys) in TOML text.
fn value_span(text: &str, path: &[&str]) -> Option<Range<usize>> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut item = doc.as_item();
    for key in path {
        item = item.as_table_like()?.get(key)?;
    }
    item.span()
}

/// The span of a table header such as `[limits]`, for errors about values inside it.
fn find_key(text: &str, table: &str) -> Option<Range<usize>> {
    let header = format!("[{table}]");
    text.find(&header).map(|i| i..i + header.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
listen = ["127.0.0.1:8080"]
[[node]]
address = "127.0.0.1:9001"
"#;

    #[test]
    fn minimal_config_gets_cap_defaults() {
        let c = Config::parse(MINIMAL, None).unwrap();
        assert_eq!(c.nodes[0].name, "127.0.0.1:9001");
        assert_eq!(c.policy.name(), "round-robin");
        let names: Vec<_> = c.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["static", "disk", "cpu", "cpu-disk"]);
        assert_eq!(c.default_class, "static");
        assert_eq!(c.timeouts, Timeouts::default());
    }

    #[test]
    fn syntax_error_is_located() {
        let text = "listen = [\"127.0.0.1:8080\"]\n[[node]\naddress = 1\n";
        let e = Config::parse(text, Some("a.toml")).unwrap_err();
        assert_eq!((e.line, e.column), (2, 7), "{e}");
        assert!(e.to_string().starts_with("a.toml:2:7: "), "{e}");
        assert!(!e.to_string().contains('\n'));
    }

    #[test]
    fn unknown_field_is_located() {
        let text = format!("{MINIMAL}[timeouts]\nconect = \"1s\"\n");
        let e = Config::parse(&text, Some("x.toml")).unwrap_err();
        assert_eq!(e.line, 6, "{e}");
        assert!(e.message.contains("conect"), "{e}");
    }

    #[test]
    fn bad_duration_is_located() {
        let text = format!("{MINIMAL}[timeouts]\nconnect = \"soon\"\n");
        let e = Config::parse(&text, Some("x.toml")).unwrap_err();
        assert_eq!(e.line, 6, "{e}");
    }

    #[test]
    fn rule_naming_an_unknown_class_points_at_the_rule() {
        let text = format!(
            "{MINIMAL}[[class]]\nname = \"a\"\n\n[[rule]]\nclass = \"b\"\npath_prefix = \"/\"\n"
        );
        let e = Config::parse(&text, Some("x.toml")).unwrap_err();
        assert_eq!(e.line, 8, "{e}");
        assert!(e.message.contains("`b`"), "{e}");
    }

    #[test]
    fn bad_node_address_and_duplicate_names() {
        let text = "listen = [\"127.0.0.1:8080\"]\n[[node]]\naddress = \"127.0.0.1\"\n";
        let e = Config::parse(text, Some("x.toml")).unwrap_err();
        assert_eq!((e.line, e.column), (3, 11), "{e}");
        assert!(e.message.contains("no port"), "{e}");

        let text = "listen = [\"127.0.0.1:8080\"]\n[[node]]\nname = \"a\"\naddress = \"127.0.0.1:1\"\n[[node]]\nname = \"a\"\naddress = \"127.0.0.1:2\"\n";
        let e = Config::parse(text, Some("x.toml")).unwrap_err();
        assert_eq!(e.line, 5, "the second [[node]]: {e}");
        assert!(e.message.contains("used twice"), "{e}");
    }

    #[test]
    fn unknown_policy_is_located() {
        let text = format!("{MINIMAL}[policy]\nname = \"fastest\"\n");
        let e = Config::parse(&text, Some("x.toml")).unwrap_err();
        assert_eq!((e.line, e.column), (6, 8), "{e}");
        assert!(e.message.contains("fastest"), "{e}");
    }

    #[test]
    fn bad_policy_parameter_is_named_and_located() {
        let text = format!("{MINIMAL}[policy]\nname = \"lard\"\nt_low = 5\nt_high = \"x\"\n");
        let e = Config::parse(&text, Some("x.toml")).unwrap_err();
        assert_eq!((e.line, e.column), (8, 10), "{e}");
        assert!(e.message.contains("`t_high`"), "{e}");
        let text = format!("{MINIMAL}[policy]\nname = \"cap\"\nspeed = 3\n");
        let e = Config::parse(&text, Some("x.toml")).unwrap_err();
        assert_eq!(e.line, 7, "{e}");
        assert!(e.message.contains("speed"), "{e}");
    }

    #[test]
    fn dns_sources_have_defaults_and_located_errors() {
        let c = Config::parse(
            "listen = [\"127.0.0.1:0\"]\n[[discovery]]\ndns = \"_http._tcp.web.example.\"\n\
             resolvers = [\"10.0.0.53\", \"[::1]:5353\"]\nmin_ttl = \"2s\"\n\n\
             [[discovery]]\ndns = \"web.example:8080\"\nname = \"web\"\n",
            None,
        )
        .unwrap();
        let crate::config::SourceKind::Dns(srv) = &c.discovery[0].kind else {
            panic!("{:?}", c.discovery[0]);
        };
        assert_eq!(c.discovery[0].name, "dns");
        assert_eq!(srv.name.to_string(), "_http._tcp.web.example");
        let resolvers: Vec<String> = srv.resolvers.iter().map(|r| r.to_string()).collect();
        assert_eq!(resolvers, ["10.0.0.53:53", "[::1]:5353"]);
        assert_eq!(
            (srv.min_ttl, srv.max_ttl, srv.timeout, srv.attempts),
            (
                Duration::from_secs(2),
                Duration::from_secs(300),
                Duration::from_secs(2),
                2
            )
        );
        let describe = c.describe();
        assert!(
            describe.contains(
                "discovery web: dns web.example:8080 (nodes web-ADDRESS, weight 1 unless given, \
                 A/AAAA via /etc/resolv.conf, looked up again after its TTL within 1s..5m"
            ),
            "{describe}"
        );
        let bad = |body: &str| {
            let text = format!("listen = [\"127.0.0.1:0\"]\n[[discovery]]\n{body}\n");
            Config::parse(&text, Some("c.toml"))
                .unwrap_err()
                .to_string()
        };
        let e = bad("dns = \"web.example\"");
        assert!(
            e.starts_with("c.toml:3:7: discovery: dns `web.example`: give an SRV"),
            "{e}"
        );
        assert!(bad("dns = \"web:0\"").contains("port 0"));
        assert!(bad("dns = \"_http._tcp.we b\"").contains("not allowed in a DNS name"));
        let e = bad("dns = \"w:80\"\nresolvers = [\"dns.example:53\"]");
        assert!(
            e.starts_with("c.toml:4:13: discovery: resolvers: `dns.example:53` is not IP:PORT"),
            "{e}"
        );
        let e = bad("dns = \"w:80\"\nmin_ttl = \"10s\"\nmax_ttl = \"5s\"");
        assert!(
            e.starts_with("c.toml:5:11: discovery: max_ttl must be at least min_ttl"),
            "{e}"
        );
        assert!(bad("dns = \"w:80\"\nmin_ttl = \"0s\"").contains("min_ttl must be more than 0s"));
        assert!(bad("dns = \"w:80\"\nattempts = 0").contains("attempts must be 1 to 10"));
        assert!(bad("dns = \"w:80\"\ntimeout = \"0s\"").contains("timeout must be more"));
        let e = bad("file = \"n.json\"\nmin_ttl = \"1s\"");
        assert_eq!(
            e,
            "c.toml:4:11: discovery: `min_ttl` is for `dns` sources only"
        );
        let e = bad("file = \"n.json\"\ndns = \"w:80\"");
        assert!(e.contains("give one of `file`, `dns` and `etcd`"), "{e}");
        assert!(bad("dns = 5").contains("c.toml:3:7"));
    }

    #[test]
    fn discovery_sources_are_read_with_defaults_and_located_errors() {
        let c = Config::parse(
            "listen = [\"127.0.0.1:0\"]\n[[discovery]]\nfile = \"/tmp/nodes.json\"\n\n\
             [[discovery]]\nfile = \"more.toml\"\nname = \"b\"\nweight = 3\nhold = \"1s\"\n\
             interval = \"250ms\"\n",
            None,
        )
        .unwrap();
        assert!(c.nodes.is_empty());
        assert_eq!(c.discovery.len(), 2);
        let (a, b) = (&c.discovery[0], &c.discovery[1]);
        assert_eq!(
            (a.name.as_str(), a.weight, a.hold, a.interval),
            ("file", 1, Duration::from_secs(30), Duration::from_secs(2))
        );
        assert_eq!(
            a.kind,
            crate::config::SourceKind::File("/tmp/nodes.json".into())
        );
        assert_eq!(
            (b.name.as_str(), b.weight, b.hold, b.interval),
            ("b", 3, Duration::from_secs(1), Duration::from_millis(250))
        );
        assert!(
            c.describe().contains("discovery b: file more.toml"),
            "{}",
            c.describe()
        );
        let bad = |body: &str| {
            let text = format!("listen = [\"127.0.0.1:0\"]\n[[discovery]]\n{body}\n");
            Config::parse(&text, Some("c.toml"))
                .unwrap_err()
                .to_string()
        };
        assert!(bad("etcd = \"http://e:2379\"").contains("c.toml:3:8: invalid type: string"));
        assert!(bad("name = \"x\"").contains("give `file = "));
        assert!(bad("file = \"n.yaml\"").contains("must end in .json or .toml"));
        assert!(bad("file = \"n.json\"\nweight = 0").contains("c.toml:4:10: discovery: weight"));
        assert!(bad("file = \"n.json\"\nhold = \"soon\"").contains("hold `soon`"));
        assert!(bad("file = \"n.json\"\ninterval = \"0s\"").contains("more than 0s"));
        assert!(bad("file = \"n.json\"\nname = \"a/b\"").contains("name `a/b`"));
        assert!(bad("file = \"n.json\"\nsrv = 1").contains("unknown field `srv`"));
    }

    #[test]
    fn missing_nodes_and_listeners_are_named() {
        let e = Config::parse("listen = [\"127.0.0.1:1\"]\n", None).unwrap_err();
        assert!(e.message.contains("no node"), "{e}");
        let e = Config::parse("[[node]]\naddress = \"127.0.0.1:1\"\n", None).unwrap_err();
        assert!(e.message.contains("no listener"), "{e}");
    }

    #[test]
    fn retry_budget_defaults_and_bad_values_are_located() {
        let c = Config::parse(MINIMAL, None).unwrap();
        assert_eq!(
            (
                c.upstream.retry_budget_percent,
                c.upstream.retry_budget_min_per_second
            ),
            (20, 3)
        );
        let text = format!("{MINIMAL}[upstream]\nretry = true\nretry_budget_percent = 150\n");
        let e = Config::parse(&text, Some("x.toml")).unwrap_err();
        assert_eq!((e.line, e.column), (7, 24), "{e}");
        assert!(e.message.contains("0 to 100"), "{e}");
        let text = format!("{MINIMAL}[upstream]\nretry_budget_percent = -1\n");
        let e = Config::parse(&text, Some("x.toml")).unwrap_err();
        assert_eq!(e.line, 6, "{e}");
    }

    #[test]
    fn admin_token_inline_or_from_a_file_next_to_the_config() {
        let text = format!("admin_token = \"abcdefghijklmnop\"\n{MINIMAL}");
        let c = Config::parse(&text, None).unwrap();
        assert_eq!(
            c.admin_token,
            Some(AdminToken::new("abcdefghijklmnop").unwrap())
        );
        let text = format!("admin_token = \"short\"\n{MINIMAL}");
        let e = Config::parse(&text, Some("x.toml")).unwrap_err();
        assert_eq!((e.line, e.column), (1, 15), "{e}");
        assert!(e.message.contains("at least 16"), "{e}");

        let dir = std::env::temp_dir().join(format!("capstan-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("t"), "from-a-file-0123456789\n").unwrap();
        let path = dir.join("c.toml");
        std::fs::write(&path, format!("admin_token_file = \"t\"\n{MINIMAL}")).unwrap();
        let c = Config::load(&path).unwrap();
        assert_eq!(
            c.admin_token,
            Some(AdminToken::new("from-a-file-0123456789").unwrap())
        );
        std::fs::write(&path, format!("admin_token_file = \"missing\"\n{MINIMAL}")).unwrap();
        let e = Config::load(&path).unwrap_err();
        assert_eq!((e.line, e.column), (1, 20), "{e}");
        assert!(e.message.contains("cannot read"), "{e}");
        std::fs::write(dir.join("empty"), "\n").unwrap();
        std::fs::write(&path, format!("admin_token_file = \"empty\"\n{MINIMAL}")).unwrap();
        assert!(Config::load(&path)
            .unwrap_err()
            .message
            .contains("is empty"));
        let both =
            format!("admin_token = \"abcdefghijklmnop\"\nadmin_token_file = \"t\"\n{MINIMAL}");
        let e = Config::parse(&both, None).unwrap_err();
        assert!(e.message.contains("not both"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn health_checks_are_off_by_default_and_read_when_given() {
        let c = Config::parse(MINIMAL, None).unwrap();
        assert_eq!(c.health, Health::default());
        assert_eq!(c.health.check_path, None);
        assert!(c.health.expect_status.contains(200) && c.health.expect_status.contains(399));
        assert!(!c.health.expect_status.contains(404));
        let text = format!(
            "{MINIMAL}[health]\ncheck_path = \"/healthz\"\ncheck_interval = \"500ms\"\n\
             check_timeout = \"200ms\"\nrise = 1\nfall = 2\nexpect_status = [200, \"300-302\"]\n\
             slow_start = \"10s\"\n"
        );
        let h = Config::parse(&text, None).unwrap().health;
        assert_eq!(h.check_path.as_deref(), Some("/healthz"));
        assert_eq!(
            (
                h.check_interval,
                h.check_timeout,
                h.rise,
                h.fall,
                h.slow_start
            ),
            (
                Duration::from_millis(500),
                Duration::from_millis(200),
                1,
                2,
                Duration::from_secs(10)
            )
        );
        assert_eq!(h.expect_status.to_string(), "200, 300-302");
        assert!(h.expect_status.contains(301) && !h.expect_status.contains(204));
        for (written, shown) in [("204", "204"), ("\"200-299, 404\"", "200-299, 404")] {
            let text = format!("{MINIMAL}[health]\nexpect_status = {written}\n");
            let h = Config::parse(&text, None).unwrap().health;
            assert_eq!(h.expect_status.to_string(), shown);
        }
        let described = Config::parse(&text, None).unwrap().describe();
        assert!(
            described.contains("active: GET /healthz every 500ms (timeout 200ms)"),
            "{described}"
        );
        assert!(described.contains("slow start: 10s"), "{described}");
        assert!(Config::parse(MINIMAL, None)
            .unwrap()
            .describe()
            .contains("active: off"));
    }

    #[test]
    fn bad_health_values_are_named_and_located() {
        let cases = [
            (
                "check_path = \"healthz\"",
                (6, 14),
                "must be a path starting with /",
            ),
            ("check_interval = \"1ms\"", (6, 18), "at least 10ms"),
            (
                "check_interval = \"1s\"\ncheck_timeout = \"2s\"",
                (7, 17),
                "at most health.check_interval (1s)",
            ),
            ("rise = 0", (6, 8), "health.rise must be at least 1"),
            ("fall = 0", (6, 8), "health.fall must be at least 1"),
            ("expect_status = 700", (6, 17), "700 is not an HTTP status"),
            (
                "expect_status = \"399-200\"",
                (6, 17),
                "the range `399-200` is empty",
            ),
            ("expect_status = \"ok\"", (6, 17), "`ok` is not a status"),
            ("expect_status = []", (6, 17), "empty"),
            ("expect_status = 2.5", (6, 17), "want a status"),
            ("slow_start = \"soon\"", (6, 14), ""),
        ];
        for (line, at, message) in cases {
            let text = format!("{MINIMAL}[health]\n{line}\n");
            let e = Config::parse(&text, Some("x.toml")).unwrap_err();
            assert_eq!((e.line, e.column), at, "{line}: {e}");
            assert!(e.message.contains(message), "{line}: {e}");
            assert!(!e.to_string().contains('\n'), "{line}: {e}");
        }
    }

    #[test]
    fn admission_and_outlier_defaults_and_values() {
        let c = Config::parse(MINIMAL, None).unwrap();
        assert_eq!(c.admission, Admission::default());
        assert_eq!(c.admission.limit, LimitMode::Adaptive);
        assert_eq!(c.outlier.consecutive_failures, 5);
        assert_eq!(c.timeouts.first_byte, Duration::from_secs(15));
        let described = c.describe();
        assert!(
            described.contains("admission adaptive limit per node (3..1000, from 20"),
            "{described}"
        );
        assert!(
            described.contains("outlier   eject after 5 failures in a row"),
            "{described}"
        );
        let text = format!(
            "{MINIMAL}[admission]\nlimit = 8\nqueue = 4\nqueue_timeout = \"250ms\"\n\
             [outlier]\nconsecutive_failures = 0\n\
             [timeouts]\nfirst_byte = \"2s\"\nfirst_byte_by_class = {{ cpu = \"20s\" }}\n"
        );
        let c = Config::parse(&text, None).unwrap();
        assert_eq!(c.admission.limit, LimitMode::Fixed(8));
        assert_eq!((c.admission.queue, c.admission.retry_after_s()), (4, 1));
        let described = c.describe();
        assert!(
            described.contains("admission fixed limit 8 per node; queue 4 per node, timeout 250ms"),
            "{described}"
        );
        assert!(described.contains("outlier   off"), "{described}");
        assert!(described.contains("first byte 2s (cpu 20s)"), "{described}");
        let cluster = crate::state::cluster::Cluster::build(c, 1, None, 0).unwrap();
        let cpu = cluster
            .classifier
            .classes()
            .iter()
            .position(|k| k.name == "cpu")
            .unwrap();
        assert_eq!(cluster.first_byte[cpu], Duration::from_secs(20));
        assert_eq!(cluster.first_byte[0], Duration::from_secs(2));
        let off = Config::parse(&format!("{MINIMAL}[admission]\nlimit = \"off\"\n"), None).unwrap();
        assert!(off.describe().contains("admission off"));
    }

    #[test]
    fn bad_admission_outlier_and_timeout_values_are_named_and_located() {
        let cases = [
            (
                "[admission]\nlimit = \"lots\"",
                (7, 9),
                "\"adaptive\", \"off\" or a number",
            ),
            ("[admission]\nlimit = 0", (7, 9), "a number from 1"),
            (
                "[admission]\nmin_limit = 0",
                (7, 13),
                "min_limit must be at least 1",
            ),
            (
                "[admission]\nmax_limit = 2",
                (7, 13),
                "must be at least admission.min_limit (3)",
            ),
            (
                "[admission]\ninitial_limit = 2000",
                (7, 17),
                "initial_limit (2000)",
            ),
            (
                "[admission]\nprobe_interval = \"10ms\"",
                (7, 18),
                "at least 1s",
            ),
            ("[outlier]\nmax_ejected_percent = 101", (7, 23), "0 to 100"),
            (
                "[outlier]\nbase_ejection = \"1ms\"",
                (7, 17),
                "at least 10ms",
            ),
            (
                "[outlier]\nmax_ejection = \"1s\"",
                (7, 16),
                "at least outlier.base_ejection (10s)",
            ),
            ("[timeouts]\nfirst_byte = \"0s\"", (7, 14), "at least 1ms"),
            (
                "[timeouts]\nfirst_byte_by_class = { video = \"1s\" }",
                (7, 33),
                "unknown class `video`",
            ),
        ];
        for (section, at, message) in cases {
            let text = format!("{MINIMAL}\n{section}\n");
            let e = Config::parse(&text, Some("x.toml")).unwrap_err();
            assert_eq!((e.line, e.column), at, "{section}: {e}");
            assert!(e.message.contains(message), "{section}: {e}");
            assert!(!e.to_string().contains('\n'), "{section}: {e}");
        }
    }

    #[test]
    fn line_column_counts_characters() {
        assert_eq!(line_column("ab\ncé\nx", 7), (3, 1));
        assert_eq!(line_column("ab\ncéd", 6), (2, 3));
    }

    #[test]
    fn connection_limits_parse_with_defaults_and_located_errors() {
        let c = Config::parse(MINIMAL, None).unwrap();
        assert_eq!(c.limits.max_connections_per_client, 0, "off by default");
        assert_eq!(c.timeouts.client_send, Duration::from_secs(60));
        let text = format!(
            "{MINIMAL}[timeouts]\nclient_send = \"2s\"\n[limits]\nmax_connections_per_client = 8\n\
             [[listener]]\naddress = \"127.0.0.1:8081\"\nmax_connections = 3\n\
             max_connections_per_client = 1\n"
        );
        let c = Config::parse(&text, None).unwrap();
        assert_eq!(c.timeouts.client_send, Duration::from_secs(2));
        assert_eq!(c.limits.max_connections_per_client, 8);
        let l = &c.listeners[0];
        assert_eq!(
            (l.max_connections, l.max_connections_per_client),
            (Some(3), Some(1))
        );
        let zero =
            format!("{MINIMAL}[[listener]]\naddress = \"127.0.0.1:8081\"\nmax_connections = 0\n");
        let e = Config::parse(&zero, Some("z.toml")).unwrap_err();
        assert_eq!((e.line, e.column), (7, 19), "{e}");
        assert!(
            e.message.contains("max_connections must be at least 1"),
            "{e}"
        );
        let never = format!("{MINIMAL}[timeouts]\nclient_send = \"0s\"\n");
        let e = Config::parse(&never, None).unwrap_err();
        assert_eq!(e.line, 6, "{e}");
        assert!(
            e.message.contains("client_send must be at least 1ms"),
            "{e}"
        );
    }
}
