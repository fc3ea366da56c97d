//! The `[health]` section: passive health, active checks and the statuses they pass with,
//! slow start; its checks and its lines in `capstan check`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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

/// The `health` key at fault and why.
pub(crate) fn check_health(h: &Health) -> Result<(), (&'static str, String)> {
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

pub(crate) fn describe_health(h: &Health) -> String {
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
