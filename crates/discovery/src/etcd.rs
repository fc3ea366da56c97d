//! etcd: a key prefix watched from a revision, and self-registration under a lease (etcd-client).
//!
//! - [`watch_prefix`] follows every key under a prefix and hands out full snapshots (key →
//!   value): one after the first Get, one after every change, one after every reconnection.
//!   It resumes from the last revision it saw, so a lost connection neither misses nor doubles
//!   an event; errors are handed out too, and the watch goes on after them.
//! - [`node`] reads a value as a node (`{"address":"HOST:PORT","weight":2}`), or says why it
//!   is not one.
//! - [`register`] puts one key bound to a lease and keeps the lease alive until shut down.
//!
//! Layers: `node` uses nothing of this crate; `watch` uses this module's [`Settings`],
//! [`Error`] and backoff, and `node`; `register` the same without `node`.

pub mod node;
pub mod register;
pub mod watch;

use std::time::Duration;

pub use node::NodeValue;
pub use register::{register, Registration};
pub use watch::{get_prefix, watch_prefix, PrefixWatch, Snapshot};

/// Where etcd is and how long to wait for it.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// Client URLs of the cluster's members (`http://127.0.0.1:2379`); any one answering will do.
    pub endpoints: Vec<String>,
    /// How long connecting may take.
    pub connect_timeout: Duration,
    /// How long one request (Get, Put, lease grant, a keepalive answer) may take. Not applied
    /// to the watch stream, which stays open; HTTP/2 pings find a dead one.
    pub request_timeout: Duration,
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
            min_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }

    /// The endpoints, for messages.
    fn describe(&self) -> String {
        self.endpoints.join(",")
    }

    /// Connects (the client connects lazily: the first request tells whether etcd is there).
    async fn connect(&self) -> Result<etcd_client::Client, Error> {
        for endpoint in &self.endpoints {
            check_endpoint(endpoint).map_err(Error::Invalid)?;
        }
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(self.connect_timeout)
            // HTTP/2 pings: a watch or keepalive stream to a vanished server ends instead of
            // waiting forever.
            .with_keep_alive(
                self.request_timeout.max(Duration::from_secs(1)),
                self.request_timeout,
            );
        let connect = etcd_client::Client::connect(&self.endpoints, Some(options));
        match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(e)) => Err(self.failed("connect", e)),
            Err(_) => Err(self.failed("connect", "timed out")),
        }
    }

    /// One request, bounded by `request_timeout`.
    async fn request<T>(
        &self,
        doing: impl std::fmt::Display,
        future: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout(self.request_timeout, future).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.failed(doing, e)),
            Err(_) => Err(self.failed(
                doing,
                format!("no answer within {:?}", self.request_timeout),
            )),
        }
    }

    fn failed(&self, doing: impl std::fmt::Display, why: impl std::fmt::Display) -> Error {
        Error::Etcd(format!("etcd {}: {doing}: {why}", self.describe()))
    }
}

/// What went wrong. The watch and the registration go on after an [`Error::Etcd`] (they
/// reconnect); an [`Error::Invalid`] will not go away by retrying.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Error {
    /// An endpoint or key that cannot be used.
    #[error("{0}")]
    Invalid(String),
    /// etcd could not be reached, did not answer in time, or refused a request.
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
