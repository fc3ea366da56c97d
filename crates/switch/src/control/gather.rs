//! The gathering task: every `load.interval` (T_gat) each node's load report is fetched and fed
//! to `core`'s [`Gatherer`], which turns reports into the gathered state policies see, takes
//! silent nodes out and derives WRR weights; the result is published to each node whole, so a
//! pick reads it without a lock or a clock.
//!
//! The task runs only when the policy needs gathered state or derived weights, or reports are
//! configured (`load.path`), so a plain round-robin switch does no gathering at all.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use capstan_core::{GatherRules, Gatherer, LoadReport, WeightSource};
use http_body_util::{BodyExt, Limited};

use crate::state::cluster::{Cluster, Feedback, NodeRuntime};
use crate::state::switch::Switch;

use crate::upstream::probe::{Failed, Reports};

/// A load report is small; anything larger is not one.
const MAX_REPORT_BYTES: usize = 64 * 1024;

pub(crate) async fn gather_loads(switch: Arc<Switch>) {
    let client = Reports::new();
    let mut stop = switch.shutdown_signal();
    let mut current: Option<(u64, Gatherer)> = None;
    loop {
        let cluster = switch.cluster.load_full();
        let interval = cluster.config.load.interval;
        if gathers(&cluster) {
            let gatherer = match &mut current {
                Some((generation, g)) if *generation == cluster.generation => g,
                _ => {
                    let fresh = seeded_gatherer(&cluster, switch.epoch.now_nanos());
                    &mut current.insert((cluster.generation, fresh)).1
                }
            };
            gather_round(&switch, &cluster, &client, gatherer).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Whether this cluster's policy or configuration asks for gathering.
fn gathers(cluster: &Cluster) -> bool {
    cluster.config.load.path.is_some()
        || cluster.needs.gathered_load
        || cluster.needs.weights != WeightSource::Configured
}

/// A gatherer for a newly loaded configuration that remembers what was known of nodes that stay
/// (their state is carried with the node across a reload).
fn seeded_gatherer(cluster: &Cluster, now_nanos: u64) -> Gatherer {
    let load = &cluster.config.load;
    let rules = GatherRules {
        silent_after_nanos: load
            .path
            .as_ref()
            .map(|_| nanos(load.silent_after.unwrap_or(load.interval * 3))),
    };
    let mut gatherer = Gatherer::new(cluster.nodes.len(), rules, now_nanos);
    for (i, node) in cluster.nodes.iter().enumerate() {
        gatherer.seed(i, node.feedback().gathered);
    }
    gatherer
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One round: fetch every report at once (each bounded by the interval), record them, end the
/// round and publish.
async fn gather_round(
    switch: &Switch,
    cluster: &Cluster,
    client: &Reports,
    gatherer: &mut Gatherer,
) {
    let interval = cluster.config.load.interval;
    if let Some(path) = &cluster.config.load.path {
        let mut fetches = tokio::task::JoinSet::new();
        for (i, node) in cluster.nodes.iter().enumerate() {
            let (client, node, path) = (client.clone(), Arc::clone(node), path.clone());
            fetches.spawn(async move {
                // The head and the body within the interval.
                let fetching = fetch_report(&client, &node, &path, interval);
                let fetched = tokio::time::timeout(interval, fetching)
                    .await
                    .unwrap_or_else(|_| Err("no report within the gathering interval".into()));
                (i, node, fetched)
            });
        }
        while let Some(Ok((i, node, fetched))) = fetches.join_next().await {
            match fetched {
                Ok(report) => {
                    gatherer.record(i, &report, switch.epoch.now_nanos());
                    node.load_reports.fetch_add(1, Ordering::Relaxed);
                }
                Err(why) => {
                    gatherer.record_failure(i);
                    failed(&node, &why);
                }
            }
        }
    }
    let live: Vec<u32> = cluster
        .nodes
        .iter()
        .map(|n| n.active.load(Ordering::Relaxed))
        .collect();
    let configured: Vec<u32> = cluster.nodes.iter().map(|n| n.config.weight).collect();
    let now = switch.epoch.now_nanos();
    gatherer.end_round(now, cluster.needs.weights, &live, &configured);
    for (i, node) in cluster.nodes.iter().enumerate() {
        publish(node, gatherer, i, now);
    }
}

fn publish(node: &NodeRuntime, gatherer: &Gatherer, i: usize, now_nanos: u64) {
    let feedback = Feedback {
        gathered: gatherer.gathered(i),
        weight: gatherer.weight(i),
        silent: gatherer.is_silent(i),
    };
    let before = node.feedback();
    if feedback.silent != before.silent {
        if feedback.silent {
            tracing::warn!(node = %node.config.name, "node's load reports stopped: taken out");
        } else {
            node.came_back(now_nanos);
            tracing::info!(node = %node.config.name, "node reports again: back in");
        }
    }
    node.publish(feedback);
}

fn failed(node: &NodeRuntime, why: &str) {
    node.load_report_failures.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(node = %node.config.name, "load report failed: {why}");
}

async fn fetch_report(
    client: &Reports,
    node: &NodeRuntime,
    path: &str,
    within: Duration,
) -> Result<LoadReport, String> {
    let uri = match node.config.report_address {
        Some(addr) => format!("http://{addr}{path}"),
        None => format!("http://{}{path}", node.authority),
    };
    let uri = uri
        .parse()
        .map_err(|e| format!("bad report URI {uri}: {e}"))?;
    let resp = match client.get(uri, within).await {
        Ok(resp) => resp,
        Err(Failed::TimedOut) => return Err("no report within the gathering interval".into()),
        Err(Failed::Error(e)) => return Err(e),
    };
    if !resp.status().is_success() {
        return Err(format!("status {}", resp.status()));
    }
    let body = Limited::new(resp.into_body(), MAX_REPORT_BYTES)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    LoadReport::parse(&body).map_err(|e| e.to_string())
}
