//! The `[outlier]` section: ejecting nodes that fail requests in a row; its checks and its line
//! in `capstan check`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

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

/// The `outlier` key at fault and why.
pub(crate) fn check_outlier(o: &Outlier) -> Result<(), (&'static str, String)> {
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

pub(crate) fn describe_outlier(o: &Outlier) -> String {
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
