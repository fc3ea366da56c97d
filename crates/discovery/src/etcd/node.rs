//! A node as an etcd value: `{"address":"HOST:PORT","weight":2,"name":"a","zone":"eu-1",
//! "classes":["static"],"report_address":"HOST:PORT"}`, only `address` required. The fields
//! are those of a switch's `[[node]]` (`address`, `weight`, `name`, `report_address`: where a
//! `capstan agent` beside a web server serves the load report) plus `zone` and `classes`,
//! which are carried for the switch to use or ignore.
//!
//! A value is checked as far as it can be without DNS: JSON, known fields, an address of the
//! form `HOST:PORT` with a port from 1 to 65535, a weight of at least 1, names without spaces.
//! Whoever resolves the host checks the rest.

use serde::{Deserialize, Serialize};

/// A node as registered.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct NodeValue {
    /// `HOST:PORT` (`10.0.0.5:8080`, `[::1]:8080`, `web-3.example:8080`).
    pub address: String,
    /// Weight for weighted policies; absent: the source's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// A name for the node; absent: the switch names it after its address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where the node runs (a rack, an availability zone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// Request classes the node is meant for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<Vec<String>>,
    /// `HOST:PORT` of the node's load report, when not at `address`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_address: Option<String>,
}

impl NodeValue {
    /// A node at `address` with nothing else said.
    pub fn new(address: impl Into<String>) -> NodeValue {
        NodeValue {
            address: address.into(),
            weight: None,
            name: None,
            zone: None,
            classes: None,
            report_address: None,
        }
    }

    /// The JSON value to put.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a NodeValue always serialises")
    }

    /// Reads the value of `key` as a node; the error names the key and says what is wrong.
    pub fn parse(key: &str, value: &[u8]) -> Result<NodeValue, String> {
        let at = |why: String| format!("key `{key}`: not a node: {why}");
        let text = std::str::from_utf8(value).map_err(|_| at("the value is not UTF-8".into()))?;
        let node: NodeValue = serde_json::from_str(text).map_err(|e| {
            at(format!(
                "{e} (expected JSON like {{\"address\":\"HOST:PORT\",\"weight\":1}}, got `{}`)",
                shorten(text)
            ))
        })?;
        node.check().map_err(at)?;
        Ok(node)
    }

    fn check(&self) -> Result<(), String> {
        check_address(&self.address)?;
        if let Some(report) = &self.report_address {
            check_address(report).map_err(|e| format!("report_address: {e}"))?;
        }
        if self.weight == Some(0) {
            return Err("weight must be at least 1".into());
        }
        for (what, word) in [("name", &self.name), ("zone", &self.zone)] {
            if let Some(word) = word {
                check_word(what, word)?;
            }
        }
        for class in self.classes.iter().flatten() {
            check_word("class", class)?;
        }
        Ok(())
    }
}

/// `HOST:PORT` with a port from 1 to 65535; an IPv6 host in brackets.
pub fn check_address(address: &str) -> Result<(), String> {
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(format!("address `{address}` has no port (HOST:PORT)"));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("address `{address}`: bad port `{port}`"))?;
    if port == 0 {
        return Err(format!("address `{address}`: port 0 is not a node's port"));
    }
    let bare = match host.strip_prefix('[') {
        Some(inner) => match inner.strip_suffix(']') {
            Some(ip) if ip.parse::<std::net::Ipv6Addr>().is_ok() => return Ok(()),
            _ => return Err(format!("address `{address}`: bad IPv6 host `{host}`")),
        },
        None => host,
    };
    let good = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
    if bare.is_empty() || bare.len() > 253 || !bare.chars().all(good) {
        return Err(format!("address `{address}`: bad host `{host}`"));
    }
    Ok(())
}

fn check_word(what: &str, word: &str) -> Result<(), String> {
    if word.is_empty() || word.len() > 64 {
        return Err(format!("{what} `{word}` must be 1 to 64 bytes"));
    }
    match word
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "/?#%".contains(*c))
    {
        Some(c) => Err(format!("{what} `{word}` has {c:?}")),
        None => Ok(()),
    }
}

/// A value quoted in a message, cut to a readable length.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_value_round_trips() {
        let full = br#"{"address":"10.0.0.5:8080","weight":2,"name":"a","zone":"z1","classes":["static"]}"#;
        let node = NodeValue::parse("/n/a", full).unwrap();
        assert_eq!(node.weight, Some(2));
        assert_eq!(node.classes.as_deref(), Some(&["static".to_string()][..]));
        assert_eq!(NodeValue::parse("/n/a", &node.to_json()).unwrap(), node);
        let bare = NodeValue::new("[::1]:80");
        assert_eq!(bare.to_json(), br#"{"address":"[::1]:80"}"#);
        assert!(NodeValue::parse("/n/b", br#"{"address":"web-3.example:80"}"#).is_ok());
    }

    #[test]
    fn a_value_that_is_not_a_node_says_why_and_names_the_key() {
        let bad = |v: &[u8]| NodeValue::parse("/capstan/nodes/x", v).unwrap_err();
        let e = bad(b"hello");
        assert!(e.starts_with("key `/capstan/nodes/x`: not a node: "), "{e}");
        assert!(e.contains("got `hello`"), "{e}");
        assert!(bad(br#"{"address":"10.0.0.5:0"}"#).contains("port 0"));
        assert!(bad(br#"{"address":"10.0.0.5"}"#).contains("has no port"));
        assert!(bad(br#"{"address":"10.0.0.5:99999"}"#).contains("bad port"));
        assert!(bad(br#"{"address":":80"}"#).contains("bad host"));
        assert!(bad(br#"{"address":"a b:80"}"#).contains("bad host"));
        assert!(bad(br#"{"address":"[zz]:80"}"#).contains("bad IPv6"));
        assert!(bad(br#"{"address":"h:1","weight":0}"#).contains("weight"));
        assert!(bad(br#"{"address":"h:1","wieght":2}"#).contains("unknown field"));
        assert!(bad(br#"{"weight":2}"#).contains("missing field `address`"));
        assert!(bad(br#"{"address":"h:1","name":"a/b"}"#).contains("name `a/b`"));
        assert!(bad(b"\xff").contains("not UTF-8"));
        let e = bad(br#"{"address":"h:1","report_address":"h"}"#);
        assert!(e.contains("report_address: address `h` has no port"), "{e}");
        assert!(bad("x".repeat(500).as_bytes()).contains('…'));
    }
}
