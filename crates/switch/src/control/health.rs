//! Active health checks (HAProxy's `check`): every `health.check_interval` each node is asked
//! for `health.check_path`; `health.fall` failed checks in a row take a node that is up out,
//! `health.rise` passed checks in a row bring a node that is down back (with slow start). A
//! check passes when a response head with a status in `health.expect_status` arrives within
//! `health.check_timeout`.
//!
//! One task checks every node of the current cluster, so nodes added or removed at run time
//! or by a reload are checked from the next round on. Each check opens a fresh connection, as
//! HAProxy's do, so a node that stops accepting connections fails its check even while pooled
//! connections to it still work. A node with `protocol = "h2"` is checked over HTTP/2.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderValue, USER_AGENT};
use http::{Request, Uri};
use http_body_util::Empty;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;

use crate::config::{Health, NodeProtocol, StatusSet};
use crate::state::cluster::{Cluster, NodeRuntime};
use crate::state::switch::Switch;

type CheckClient = Client<crate::upstream::proxy_protocol::NodeConnector, Empty<Bytes>>;

/// A checker's clients: a node is checked in the protocol it is spoken to in, as an
/// HTTP/2-only node would not answer HTTP/1.1 (see [`crate::upstream::h2`]).
#[derive(Clone)]
pub(crate) struct CheckClients {
    http1: CheckClient,
    h2: CheckClient,
}

/// What one check found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    pub passed: bool,
    /// The response's status, when one arrived.
    pub status: Option<u16>,
    /// Why it failed, when no response arrived or its status was not expected.
    pub error: Option<String>,
}

/// A node's active-check state. Only the checking task writes it; `/status` and the request
/// path read it.
#[derive(Debug)]
pub struct CheckState {
    down: AtomicBool,
    /// Results in a row that agree with the last one.
    consecutive: AtomicU32,
    last_passed: AtomicBool,
    /// The last response's status; 0 when the last check got none (or there was none yet).
    last_status: AtomicU32,
    passed: AtomicU64,
    failed: AtomicU64,
    last_error: Mutex<Option<String>>,
}

impl Default for CheckState {
    /// A node starts up: checks take it out only after `fall` failures, so a switch (or a node
    /// added at run time) serves from the first moment.
    fn default() -> Self {
        CheckState {
            down: AtomicBool::new(false),
            consecutive: AtomicU32::new(0),
            last_passed: AtomicBool::new(true),
            last_status: AtomicU32::new(0),
            passed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            last_error: Mutex::new(None),
        }
    }
}

/// A node's check state as `/status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CheckStatus {
    /// `up` or `down`.
    pub state: &'static str,
    /// `passed`, `failed`, or absent before the first check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<&'static str>,
    /// The last check's response status; absent when it got none.
    pub last_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Checks in a row with the last one's result.
    pub consecutive: u32,
    pub passed: u64,
    pub failed: u64,
}

impl CheckState {
    pub fn is_up(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// Records a check; returns the node's new state (`true`: up) when this check changed it.
    pub fn record(&self, result: &CheckResult, rise: u32, fall: u32) -> Option<bool> {
        let counter = if result.passed {
            &self.passed
        } else {
            &self.failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let same = self.last_passed.swap(result.passed, Ordering::Relaxed) == result.passed;
        let consecutive = match same {
            true => self.consecutive.load(Ordering::Relaxed).saturating_add(1),
            false => 1,
        };
        self.consecutive.store(consecutive, Ordering::Relaxed);
        self.last_status
            .store(result.status.map_or(0, u32::from), Ordering::Relaxed);
        if let Ok(mut error) = self.last_error.lock() {
            error.clone_from(&result.error);
        }
        let down = self.down.load(Ordering::Relaxed);
        let flip = match result.passed {
            true => down && consecutive >= rise,
            false => !down && consecutive >= fall,
        };
        flip.then(|| {
            self.down.store(!result.passed, Ordering::Relaxed);
            result.passed
        })
    }

    /// Forgets every result: the node is up (checks were turned off or now ask another path).
    pub fn reset(&self) {
        self.down.store(false, Ordering::Relaxed);
        self.consecutive.store(0, Ordering::Relaxed);
        self.last_passed.store(true, Ordering::Relaxed);
        self.last_status.store(0, Ordering::Relaxed);
        if let Ok(mut error) = self.last_error.lock() {
            *error = None;
        }
    }

    /// Takes over another state (a node rebuilt with a new weight stays as checks left it).
    pub fn copy_from(&self, other: &CheckState) {
        for (to, from) in [
            (&self.down, &other.down),
            (&self.last_passed, &other.last_passed),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        for (to, from) in [
            (&self.consecutive, &other.consecutive),
            (&self.last_status, &other.last_status),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        if let (Ok(mut to), Ok(from)) = (self.last_error.lock(), other.last_error.lock()) {
            to.clone_from(&from);
        }
    }

    pub fn status(&self) -> CheckStatus {
        let checks = self.passed.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed);
        let consecutive = self.consecutive.load(Ordering::Relaxed);
        let last = (checks > 0 && consecutive > 0).then(|| {
            match self.last_passed.load(Ordering::Relaxed) {
                true => "passed",
                false => "failed",
            }
        });
        CheckStatus {
            state: if self.is_up() { "up" } else { "down" },
            last,
            last_status: u16::try_from(self.last_status.load(Ordering::Relaxed))
                .ok()
                .filter(|&s| s != 0),
            last_error: self.last_error.lock().ok().and_then(|e| e.clone()),
            consecutive,
            passed: self.passed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }
}

/// The checking task: one round per `health.check_interval` while checks are configured.
pub(crate) async fn check_nodes(switch: Arc<Switch>) {
    // Nodes that expect a PROXY header get one on checks too (LOCAL: the switch's own
    // connection, HAProxy's `check-send-proxy`); the setting at start holds until a restart.
    let send = switch.cluster.load().config.proxy_protocol.send;
    // A TLS node is checked over TLS, with the settings of the cluster being checked.
    let mut client: Option<(u64, CheckClients)> = None;
    let mut stop = switch.shutdown_signal();
    loop {
        let started = tokio::time::Instant::now();
        let cluster = switch.cluster.load_full();
        let interval = cluster.config.health.check_interval;
        if cluster.config.health.check_path.is_some() {
            let fingerprint = cluster.node_tls.fingerprint;
            if !matches!(&client, Some((f, _)) if *f == fingerprint) {
                client = Some((fingerprint, check_client(send, &cluster)));
            }
            let (_, client) = client.as_ref().expect("just filled");
            check_round(&switch, &cluster, client).await;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(started + interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Clients that open a new connection per check (no idle pool: an HTTP/2 connection too
/// ends with its one stream).
fn check_client(
    send: crate::config::sections::proxy_protocol::SendVersion,
    cluster: &Cluster,
) -> CheckClients {
    let mut connector = HttpConnector::new();
    connector.enforce_http(true);
    connector.set_nodelay(true);
    let connector = crate::upstream::proxy_protocol::NodeConnector {
        inner: connector,
        send,
        tls: Arc::clone(&cluster.node_tls),
    };
    let mut builder = Client::builder(TokioExecutor::new());
    builder.pool_max_idle_per_host(0);
    let http1 = builder.build(connector.clone());
    builder
        .http2_only(true)
        .timer(hyper_util::rt::TokioTimer::new());
    CheckClients {
        http1,
        h2: builder.build(connector),
    }
}

/// Checks every node at once and records the results.
async fn check_round(switch: &Switch, cluster: &Cluster, client: &CheckClients) {
    let health = &cluster.config.health;
    let Some(path) = &health.check_path else {
        return;
    };
    let mut checks = tokio::task::JoinSet::new();
    for node in &cluster.nodes {
        let (client, node, path) = (client.clone(), Arc::clone(node), path.clone());
        let (timeout, expect) = (health.check_timeout, health.expect_status.clone());
        checks.spawn(async move {
            let result = check_one(&client, &node, &path, timeout, &expect).await;
            (node, result)
        });
    }
    while let Some(Ok((node, result))) = checks.join_next().await {
        record(&node, &result, health, switch.epoch.now_nanos());
    }
}

fn record(node: &NodeRuntime, result: &CheckResult, health: &Health, now_nanos: u64) {
    match node.check.record(result, health.rise, health.fall) {
        Some(true) => {
            node.came_back(now_nanos);
            tracing::info!(node = %node.config.name, "health checks pass again: node back in");
        }
        Some(false) => {
            node.admission.evict_waiters();
            tracing::warn!(
                node = %node.config.name,
                "{} health checks failed in a row: node taken out ({})",
                health.fall,
                result.error.as_deref().unwrap_or("unexpected status")
            )
        }
        None => {}
    }
}

/// One check: `GET path` on a fresh connection, judged by the response head's status.
pub(crate) async fn check_one(
    clients: &CheckClients,
    node: &NodeRuntime,
    path: &str,
    timeout: Duration,
    expect: &StatusSet,
) -> CheckResult {
    let failed = |status: Option<u16>, error: String| CheckResult {
        passed: false,
        status,
        error: Some(error),
    };
    let uri = match Uri::builder()
        .scheme("http")
        .authority(node.authority.clone())
        .path_and_query(path)
        .build()
    {
        Ok(uri) => uri,
        Err(e) => return failed(None, format!("bad check URI: {e}")),
    };
    let mut req = Request::get(uri)
        .body(Empty::new())
        .expect("a GET with a valid URI");
    req.headers_mut()
        .insert(USER_AGENT, HeaderValue::from_static("capstan-health-check"));
    let client = match node.config.protocol {
        NodeProtocol::Http1 => &clients.http1,
        NodeProtocol::H2 => {
            *req.version_mut() = http::Version::HTTP_2;
            &clients.h2
        }
    };
    match tokio::time::timeout(timeout, client.request(req)).await {
        Err(_) => failed(
            None,
            format!("no response within {}", humantime::format_duration(timeout)),
        ),
        Ok(Err(e)) => failed(None, innermost(&e)),
        Ok(Ok(resp)) => {
            let status = resp.status().as_u16();
            match expect.contains(status) {
                true => CheckResult {
                    passed: true,
                    status: Some(status),
                    error: None,
                },
                false => failed(Some(status), format!("status {status}, expected {expect}")),
            }
        }
    }
}

fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(passed: bool) -> CheckResult {
        CheckResult {
            passed,
            status: passed.then_some(200),
            error: (!passed).then(|| "refused".to_string()),
        }
    }

    #[test]
    fn fall_failures_take_a_node_out_and_rise_passes_bring_it_back() {
        let state = CheckState::default();
        assert!(state.is_up());
        assert_eq!(state.record(&result(false), 2, 3), None);
        assert_eq!(state.record(&result(false), 2, 3), None);
        // A pass in between starts the count again.
        assert_eq!(state.record(&result(true), 2, 3), None);
        assert_eq!(state.record(&result(false), 2, 3), None);
        assert_eq!(state.record(&result(false), 2, 3), None);
        assert_eq!(state.record(&result(false), 2, 3), Some(false));
        assert!(!state.is_up());
        assert_eq!(state.record(&result(false), 2, 3), None, "already down");
        assert_eq!(state.record(&result(true), 2, 3), None);
        assert_eq!(state.record(&result(true), 2, 3), Some(true));
        assert!(state.is_up());
        let status = state.status();
        assert_eq!(
            (
                status.state,
                status.last,
                status.last_status,
                status.consecutive
            ),
            ("up", Some("passed"), Some(200), 2)
        );
        assert_eq!((status.passed, status.failed), (3, 6));
    }

    #[test]
    fn rise_and_fall_of_one_flip_at_once_and_reset_brings_a_node_up() {
        let state = CheckState::default();
        assert_eq!(state.record(&result(false), 1, 1), Some(false));
        let status = state.status();
        assert_eq!(status.state, "down");
        assert_eq!(status.last_status, None);
        assert_eq!(status.last_error.as_deref(), Some("refused"));
        state.reset();
        assert!(state.is_up());
        assert_eq!(state.status().last, None, "no result since the reset");
        let copy = CheckState::default();
        state.record(&result(false), 1, 1);
        copy.copy_from(&state);
        assert!(!copy.is_up());
    }
}
