//! etcd: a key prefix watched from a revision, and self-registration under a lease, over
//! etcd's v3 JSON gateway (etcd 3.4 or later).
//!
//! - [`watch_prefix`] follows every key under a prefix and hands out full snapshots (key →
//!   value): one after the first range, one after every change, one after every
//!   reconnection. It resumes from the last revision it saw, so a lost connection neither
//!   misses nor doubles an event; errors are handed out too, and the watch goes on after them.
//! - [`node`] reads a value as a node (`{"address":"HOST:PORT","weight":2}`), or says why it
//!   is not one.
//! - [`register`] puts one key bound to a lease and keeps the lease alive until shut down.
//!
//! # Why the JSON gateway
//!
//! etcd serves its v3 API twice on the client port: as gRPC, and as JSON over HTTP/1.1 (the
//! gRPC gateway: `POST /v3/kv/range`, `/v3/watch`, `/v3/lease/keepalive`, …; on by default
//! since 3.4). This client speaks the JSON one, instead of gRPC through generated code
//! (`etcd-client`, or tonic/prost code generated once and committed), because:
//!
//! - the workspace then builds with a Rust toolchain alone: no `protoc` on the build machine,
//!   no tonic, prost or their build scripts in the dependency tree, no generated code to keep
//!   in step with etcd's `.proto` files;
//! - it is the same hyper 1 / hyper-util client the switch already uses for its nodes, so
//!   etcd adds no HTTP stack of its own;
//! - what the later TLS and authentication work needs fits it: `https://` endpoints are a
//!   rustls connector given to the same client (the switch has one), and etcd's user
//!   authentication is a `POST /v3/auth/authenticate` whose token goes in an `Authorization`
//!   header on each request. Until then `https://` endpoints are refused ([`check_endpoint`]).
//!
//! What it costs: HTTP/1.1 carries one stream per connection and no pings, so a watch holds
//! a connection of its own, and a dead watch stream is found by the watch itself (TCP
//! keepalive, a check that the member still answers, a bound on silence: see `watch`) rather
//! than by HTTP/2 pings. A lease keepalive is one request per renewal.
//!
//! Layers: `wire` (the JSON bodies and answers) and `node` use nothing of this crate;
//! `gateway` (the HTTP client) uses `wire` and this module's [`Settings`] and [`Error`];
//! `watch` and `register` use both, this module's backoff, and `watch` also `node`.

pub mod node;
pub mod register;
pub mod watch;

mod gateway;
mod wire;

use std::time::Duration;

pub use node::NodeValue;
pub use register::{register, Registration};
pub use watch::{get_prefix, watch_prefix, PrefixWatch, Snapshot};

/// Where etcd is and how long to wait for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Client URLs of the cluster's members (`http://127.0.0.1:2379`); any one answering will
    /// do: a request that fails at one goes to the next.
    pub endpoints: Vec<String>,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// How long one request (a range, a put, a lease grant, a keepalive) may take at one
    /// endpoint. Not applied to the watch stream, which stays open: while it is quiet, the
    /// member it comes from is asked this often (at least every second) whether it still
    /// answers, with this long to answer.
    pub request_timeout: Duration,
    /// How long a watch stream may stay silent before it is taken for dead and opened again.
    /// The watch asks for progress notifications, which etcd sends a quiet watcher every 10
    /// minutes by default (`--experimental-watch-progress-notify-interval`), so the default
    /// is above that.
    pub watch_silence: Duration,
    /// First wait before reconnecting; doubled after each failure up to `max_backoff`.
    pub min_backoff: Duration,
    /// Longest wait between reconnection attempts.
    pub max_backoff: Duration,
}

impl Settings {
    /// Settings for these endpoints, with defaults for the rest.
    pub fn new(endpoints: Vec<String>) -> Settings {
        Settings {
            endpoints,
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(5),
            watch_silence: Duration::from_secs(15 * 60),
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// What went wrong. The watch and the registration go on after an [`Error::Etcd`] (they
/// reconnect); an [`Error::Invalid`] will not go away by retrying.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// An endpoint or key that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// etcd could not be reached, did not answer in time, refused a request or answered
    /// something malformed: `etcd ENDPOINT: WHAT WAS ASKED: WHY` (each endpoint tried named).
    #[error("{0}")]
    Etcd(String),
}

/// Checks a client URL: `http://HOST:PORT` (TLS is not built in).
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    if endpoint.starts_with("https://") {
        return Err(format!(
            "etcd endpoint `{endpoint}`: https is not supported (no TLS client is built in); \
             use http://HOST:PORT"
        ));
    }
    let Some(rest) = endpoint.strip_prefix("http://") else {
        return Err(format!(
            "etcd endpoint `{endpoint}`: give a client URL, http://HOST:PORT"
        ));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let Some((host, port)) = rest.rsplit_once(':') else {
        return Err(format!(
            "etcd endpoint `{endpoint}`: no port (etcd's client port is usually 2379)"
        ));
    };
    if host.is_empty() || host.contains('/') || host.contains(char::is_whitespace) {
        return Err(format!("etcd endpoint `{endpoint}`: bad host `{host}`"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(format!("etcd endpoint `{endpoint}`: bad port `{port}`")),
    }
}

/// Reads `etcd://HOST:PORT[,HOST:PORT…]/PREFIX` (the form of `capstan origin --register`)
/// into client URLs and a key prefix ending in `/`.
pub fn parse_url(url: &str) -> Result<(Vec<String>, String), String> {
    let Some(rest) = url.strip_prefix("etcd://") else {
        return Err(format!(
            "`{url}`: give etcd://HOST:PORT/PREFIX (e.g. etcd://127.0.0.1:2379/capstan/nodes/)"
        ));
    };
    let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
    let endpoints: Vec<String> = hosts.split(',').map(|h| format!("http://{h}")).collect();
    for endpoint in &endpoints {
        check_endpoint(endpoint).map_err(|e| format!("`{url}`: {e}"))?;
    }
    if path.is_empty() {
        return Err(format!(
            "`{url}`: no key prefix (etcd://HOST:PORT/PREFIX, e.g. /capstan/nodes/)"
        ));
    }
    let mut prefix = format!("/{path}");
    if !prefix.ends_with('/') {
        prefix.push('/');
    }
    check_prefix(&prefix).map_err(|e| format!("`{url}`: {e}"))?;
    Ok((endpoints, prefix))
}

/// Checks a key prefix: starts with `/`, printable, no whitespace.
pub fn check_prefix(prefix: &str) -> Result<(), String> {
    if !prefix.starts_with('/') {
        return Err(format!("etcd prefix `{prefix}` must start with /"));
    }
    if let Some(c) = prefix.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("etcd prefix `{prefix}` has {c:?}"));
    }
    Ok(())
}

/// The waits between reconnection attempts: doubling from `min_backoff` to `max_backoff`.
struct Backoff {
    next: Duration,
    min: Duration,
    max: Duration,
}

impl Backoff {
    fn new(settings: &Settings) -> Backoff {
        Backoff {
            next: settings.min_backoff,
            min: settings.min_backoff,
            max: settings.max_backoff.max(settings.min_backoff),
        }
    }

    /// Waits, and makes the next wait longer.
    async fn wait(&mut self) {
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(self.max);
    }

    /// After a success the next failure waits the shortest time again.
    fn reset(&mut self) {
        self.next = self.min;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_and_prefixes_are_checked() {
        assert!(check_endpoint("http://127.0.0.1:2379").is_ok());
        assert!(check_endpoint("http://etcd.example:2379/").is_ok());
        assert!(check_endpoint("https://x:1").unwrap_err().contains("https"));
        assert!(check_endpoint("127.0.0.1:2379")
            .unwrap_err()
            .contains("http://HOST:PORT"));
        assert!(check_endpoint("http://x").unwrap_err().contains("no port"));
        assert!(check_endpoint("http://x:0")
            .unwrap_err()
            .contains("bad port"));
        assert!(check_endpoint("http://:1")
            .unwrap_err()
            .contains("bad host"));
        assert!(check_prefix("/capstan/nodes/").is_ok());
        let (endpoints, prefix) = parse_url("etcd://127.0.0.1:2379,h:2380/capstan/nodes").unwrap();
        assert_eq!(endpoints, ["http://127.0.0.1:2379", "http://h:2380"]);
        assert_eq!(prefix, "/capstan/nodes/");
        assert!(parse_url("http://h:1/p")
            .unwrap_err()
            .contains("etcd://HOST:PORT/PREFIX"));
        assert!(parse_url("etcd://h:1")
            .unwrap_err()
            .contains("no key prefix"));
        assert!(parse_url("etcd://h/p").unwrap_err().contains("no port"));
        assert!(check_prefix("capstan/")
            .unwrap_err()
            .contains("start with /"));
        assert!(check_prefix("/a b/").unwrap_err().contains("' '"));
    }
}
