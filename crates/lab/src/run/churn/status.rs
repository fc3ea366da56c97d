//! What the churn run reads from the switch's `/status`: its nodes by name and its discovery
//! source's state, polled until they are as wanted or a deadline passes.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::model::error::LabError;
use crate::procs::cluster;

/// How long the lab waits for the switch to show a change before calling the run failed.
const APPLY_DEADLINE: Duration = Duration::from_secs(15);

/// Polls `/status` until the switch's nodes are exactly `wanted` (by name).
pub(super) async fn wait_for_nodes(admin: SocketAddr, wanted: &[String]) -> Result<(), LabError> {
    let deadline = Instant::now() + APPLY_DEADLINE;
    let mut wanted = wanted.to_vec();
    wanted.sort();
    loop {
        let now = node_names(admin).await;
        if now.as_ref() == Ok(&wanted) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LabError::Run(format!(
                "the switch did not take the new node list within {APPLY_DEADLINE:?}: \
                 wanted {wanted:?}, it has {now:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The discovery source's `state` and `failures` on `/status`.
pub(super) async fn source_state(admin: SocketAddr) -> Result<(String, u64), LabError> {
    let text = cluster::get(admin, "/status")
        .await
        .map_err(LabError::Run)?;
    let status: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| LabError::Run(e.to_string()))?;
    let source = &status["discovery"][0];
    Ok((
        source["state"].as_str().unwrap_or("").to_owned(),
        source["failures"].as_u64().unwrap_or(0),
    ))
}

/// Polls `/status` until the discovery source's state and failure count satisfy `done`;
/// `what` says what the switch did not do in time (`see the registry outage`).
pub(super) async fn wait_for_source(
    admin: SocketAddr,
    what: &str,
    done: impl Fn(&str, u64) -> bool,
) -> Result<(), LabError> {
    let deadline = Instant::now() + APPLY_DEADLINE;
    loop {
        let (state, failures) = source_state(admin).await?;
        if done(&state, failures) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LabError::Run(format!(
                "the switch did not {what} within {APPLY_DEADLINE:?} \
                 (source state {state}, {failures} failures)"
            )));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn node_names(admin: SocketAddr) -> Result<Vec<String>, String> {
    let text = cluster::get(admin, "/status").await?;
    let status: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = (status["nodes"].as_array().into_iter().flatten())
        .filter_map(|n| n["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    Ok(names)
}
