//! The load collector: every `load.interval`, each node's load report is fetched and its
//! busiest resource's utilisation becomes the load the policies see.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::cluster::NodeRuntime;
use crate::server::Switch;

type ReportClient = Client<HttpConnector, Empty<Bytes>>;

/// A load report is small; anything larger is not one.
const MAX_REPORT_BYTES: usize = 64 * 1024;

pub(crate) async fn gather_loads(switch: Arc<Switch>) {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_secs(1)));
    let client: ReportClient = Client::builder(TokioExecutor::new()).build(connector);
    let mut stop = switch.shutdown_signal();
    loop {
        let cluster = switch.cluster.load_full();
        let interval = cluster.config.load.interval;
        if let Some(path) = cluster.config.load.path.clone() {
            let mut fetches = tokio::task::JoinSet::new();
            for node in &cluster.nodes {
                let (client, node, path) = (client.clone(), Arc::clone(node), path.clone());
                fetches.spawn(async move {
                    match tokio::time::timeout(interval, fetch_load(&client, &node, &path)).await {
                        Ok(Ok(load)) => node.set_load(load),
                        Ok(Err(why)) => failed(&node, &why),
                        Err(_) => failed(&node, "no report within the gathering interval"),
                    }
                });
            }
            while fetches.join_next().await.is_some() {}
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

fn failed(node: &NodeRuntime, why: &str) {
    node.load_report_failures
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    tracing::debug!(node = %node.config.name, "load report failed: {why}");
}

async fn fetch_load(client: &ReportClient, node: &NodeRuntime, path: &str) -> Result<f64, String> {
    let uri = format!("http://{}{path}", node.authority);
    let resp = client
        .get(
            uri.parse()
                .map_err(|e| format!("bad report URI {uri}: {e}"))?,
        )
        .await
        .map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("status {}", resp.status()));
    }
    let body = Limited::new(resp.into_body(), MAX_REPORT_BYTES)
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    load_from_report(&body)
}

/// The busiest resource's utilisation over the node's last interval.
pub fn load_from_report(body: &[u8]) -> Result<f64, String> {
    let report: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let interval = report
        .get("interval")
        .ok_or("no `interval` object in the report")?;
    let load = ["cpu_util", "disk_util", "nic_util"]
        .iter()
        .filter_map(|k| interval.get(k).and_then(serde_json::Value::as_f64))
        .fold(None, |max: Option<f64>, u| {
            Some(max.map_or(u, |m| m.max(u)))
        })
        .ok_or("no utilisation in the report's `interval`")?;
    Ok(load)
}

#[cfg(test)]
mod tests {
    use super::load_from_report;

    #[test]
    fn busiest_resource_is_the_load() {
        let report = br#"{"interval":{"cpu_util":0.25,"disk_util":0.75,"nic_util":0.1}}"#;
        assert_eq!(load_from_report(report), Ok(0.75));
        assert!(load_from_report(b"{}").is_err());
        assert!(load_from_report(b"<html>").is_err());
        assert!(load_from_report(br#"{"interval":{}}"#).is_err());
    }
}
