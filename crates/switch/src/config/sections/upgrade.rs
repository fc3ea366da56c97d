//! The `[upgrade]` section: WebSocket and other upgrades, `CONNECT`, the tunnel idle timeout.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `[upgrade]` section.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct UpgradeConfig {
    /// Pass `Upgrade` requests (WebSocket) to nodes; `false` answers them as plain requests
    /// with the upgrade fields removed.
    pub enabled: bool,
    /// Pass `CONNECT` to nodes instead of answering `405`.
    pub connect: bool,
    /// A tunnel where no byte moved either way for this long is closed.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
}

impl Default for UpgradeConfig {
    fn default() -> Self {
        UpgradeConfig {
            enabled: true,
            connect: false,
            idle_timeout: Duration::from_secs(300),
        }
    }
}

impl UpgradeConfig {
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.idle_timeout < Duration::from_millis(10) {
            return Err((
                "idle_timeout",
                "upgrade.idle_timeout must be at least 10ms".into(),
            ));
        }
        Ok(())
    }
}
