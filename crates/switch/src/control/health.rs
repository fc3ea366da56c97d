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

use std::sync::Arc;
use std::time::Duration;

use crate::config::{Health, StatusSet};
use crate::state::cluster::{Cluster, NodeRuntime};
use crate::state::health::CheckResult;
use crate::state::switch::Switch;

use crate::upstream::probe::{Failed, NodeChecks};

/// The checking task: one round per `health.check_interval` while checks are configured.
pub(crate) async fn check_nodes(switch: Arc<Switch>) {
    // Nodes that expect a PROXY header get one on checks too (LOCAL: the switch's own
    // connection, HAProxy's `check-send-proxy`); the setting at start holds until a restart.
    let send = switch.cluster.load().config.proxy_protocol.send;
    // A TLS node is checked over TLS, with the settings of the cluster being checked.
    let mut client: Option<(u64, NodeChecks)> = None;
    let mut stop = switch.shutdown_signal();
    loop {
        let started = tokio::time::Instant::now();
        let cluster = switch.cluster.load_full();
        let interval = cluster.config.health.check_interval;
        if cluster.config.health.check_path.is_some() {
            let fingerprint = cluster.node_tls.fingerprint;
            if !matches!(&client, Some((f, _)) if *f == fingerprint) {
                client = Some((fingerprint, NodeChecks::new(send, &cluster)));
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

/// Checks every node at once and records the results.
async fn check_round(switch: &Switch, cluster: &Cluster, client: &NodeChecks) {
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
    clients: &NodeChecks,
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
    match clients.get(node, path, timeout).await {
        Err(Failed::TimedOut) => failed(
            None,
            format!("no response within {}", humantime::format_duration(timeout)),
        ),
        Err(Failed::Error(e)) => failed(None, e),
        Ok(status) => {
            let status = status.as_u16();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::health::CheckState;

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
