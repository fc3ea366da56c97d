//! The `etcd` kind's keys: `etcd = ["http://HOST:PORT", …]` (client URLs of the cluster's
//! members), `prefix = "/…/"` (every key under it is a node) and `timeout` (connecting and each
//! request; the watch itself stays open).

use std::time::Duration;

use serde::Serialize;
use toml::Spanned;

use super::entry::Located;

/// An etcd source: where etcd is and which keys are nodes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EtcdSource {
    /// Client URLs (`http://127.0.0.1:2379`); any member answering will do.
    pub endpoints: Vec<String>,
    /// The key prefix, starting and ending with `/`.
    pub prefix: String,
    /// How long connecting, and each request, may take.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

impl EtcdSource {
    /// `http://a:2379,http://b:2379 /capstan/nodes/`.
    pub fn target(&self) -> String {
        format!("{} {}", self.endpoints.join(","), self.prefix)
    }
}

/// Checks the endpoints, the prefix and the timeout; `span` is the whole entry's (for a
/// missing `prefix`).
pub(super) fn resolve(
    endpoints: &Spanned<Vec<Spanned<String>>>,
    prefix: Option<&Spanned<String>>,
    timeout: Option<&Spanned<String>>,
    span: std::ops::Range<usize>,
) -> Result<EtcdSource, Located> {
    if endpoints.get_ref().is_empty() {
        return Err((
            Some(endpoints.span()),
            "discovery: `etcd` lists no endpoint; give [\"http://HOST:2379\"]".into(),
        ));
    }
    for endpoint in endpoints.get_ref() {
        capstan_discovery::etcd::check_endpoint(endpoint.get_ref())
            .map_err(|e| (Some(endpoint.span()), format!("discovery: {e}")))?;
    }
    let Some(prefix) = prefix else {
        return Err((
            Some(span),
            "discovery: an etcd source needs `prefix = \"/…/\"` (its keys are the nodes)".into(),
        ));
    };
    let at = |e: String| (Some(prefix.span()), format!("discovery: {e}"));
    capstan_discovery::etcd::check_prefix(prefix.get_ref()).map_err(at)?;
    if !prefix.get_ref().ends_with('/') {
        return Err(at(format!(
            "etcd prefix `{}` must end with / (else `{}2/…` would be watched too)",
            prefix.get_ref(),
            prefix.get_ref()
        )));
    }
    let timeout = match timeout {
        Some(t) => match humantime::parse_duration(t.get_ref()) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => {
                return Err((
                    Some(t.span()),
                    "discovery: timeout must be more than 0s".into(),
                ))
            }
            Err(e) => {
                return Err((
                    Some(t.span()),
                    format!("discovery: timeout `{}`: {e}", t.get_ref()),
                ))
            }
        },
        None => Duration::from_secs(5),
    };
    Ok(EtcdSource {
        endpoints: endpoints
            .get_ref()
            .iter()
            .map(|e| e.get_ref().clone())
            .collect(),
        prefix: prefix.get_ref().clone(),
        timeout,
    })
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, SourceKind};

    fn parse(body: &str) -> Result<Config, String> {
        let text = format!("listen = [\"127.0.0.1:0\"]\n[[discovery]]\n{body}\n");
        Config::parse(&text, Some("c.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn an_etcd_source_is_read_with_its_defaults() {
        let c = parse(
            "etcd = [\"http://127.0.0.1:2379\", \"http://e2:2379\"]\nprefix = \"/capstan/nodes/\"",
        )
        .unwrap();
        let source = &c.discovery[0];
        assert_eq!(source.name, "etcd");
        let SourceKind::Etcd(etcd) = &source.kind else {
            panic!("{:?}", source.kind)
        };
        assert_eq!(etcd.endpoints, ["http://127.0.0.1:2379", "http://e2:2379"]);
        assert_eq!(etcd.timeout, std::time::Duration::from_secs(5));
        assert!(
            c.describe().contains(
                "discovery etcd: etcd http://127.0.0.1:2379,http://e2:2379 /capstan/nodes/ \
                 (nodes etcd-ADDRESS, weight 1 unless given, watched, timeout 5s"
            ),
            "{}",
            c.describe()
        );
    }

    #[test]
    fn bad_etcd_keys_are_located() {
        let bad = |body: &str| parse(body).unwrap_err();
        let e = bad("etcd = [\"127.0.0.1:2379\"]\nprefix = \"/n/\"");
        assert_eq!(
            e,
            "c.toml:3:9: discovery: etcd endpoint `127.0.0.1:2379`: give a client URL, http://HOST:PORT"
        );
        assert!(bad("etcd = []\nprefix = \"/n/\"")
            .starts_with("c.toml:3:8: discovery: `etcd` lists no endpoint"));
        assert!(
            bad("etcd = [\"https://e:2379\"]\nprefix = \"/n/\"").contains("https is not supported")
        );
        assert!(bad("etcd = [\"http://e:2379\"]")
            .starts_with("c.toml:2:1: discovery: an etcd source needs `prefix"));
        let e = bad("etcd = [\"http://e:2379\"]\nprefix = \"/n\"");
        assert!(
            e.starts_with("c.toml:4:10: discovery: etcd prefix `/n` must end with /"),
            "{e}"
        );
        assert!(bad("etcd = [\"http://e:2379\"]\nprefix = \"n/\"").contains("must start with /"));
        assert!(
            bad("etcd = [\"http://e:2379\"]\nprefix = \"/n/\"\ntimeout = \"0s\"")
                .contains("c.toml:5:11: discovery: timeout must be more than 0s")
        );
        assert!(
            bad("etcd = [\"http://e:2379\"]\nprefix = \"/n/\"\ntimeout = \"x\"")
                .contains("timeout `x`")
        );
        assert!(bad("file = \"n.json\"\netcd = [\"http://e:2379\"]")
            .contains("c.toml:4:8: discovery: give one of `file`, `dns` and `etcd` per"));
        assert!(
            bad("etcd = [\"http://e:2379\"]\nprefix = \"/n/\"\nattempts = 2")
                .contains("c.toml:5:12: discovery: `attempts` is for `dns` sources only")
        );
        assert!(bad("file = \"n.json\"\nprefix = \"/n/\"")
            .contains("c.toml:4:10: discovery: `prefix` is for `etcd` sources only"));
    }
}
