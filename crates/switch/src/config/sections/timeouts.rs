//! The `[timeouts]` section: connecting, first byte (per class too), upstream, client idle,
//! header read, client send, grace; its checks and its line in `capstan check`.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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

/// The `timeouts` key at fault (a path below `[timeouts]`) and why.
pub(crate) fn check_timeouts(
    t: &Timeouts,
    classes: &[String],
) -> Result<(), (Vec<String>, String)> {
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

pub(crate) fn describe_timeouts(t: &Timeouts) -> String {
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
