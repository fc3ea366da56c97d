//! The `[load]` section: gathering each node's load report, and its checks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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

pub(crate) fn check_load(l: &LoadGathering) -> Result<(), String> {
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
