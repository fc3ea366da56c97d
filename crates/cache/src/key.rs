//! The primary cache key: scheme + host + path + query by default, with per-class rules that
//! raise the hit ratio (ignore or sort the query, add a request header), like Varnish's
//! `vcl_hash` or nginx's `proxy_cache_key` but declared instead of programmed.

use http::HeaderMap;
use serde::{Deserialize, Serialize};

/// What the key keeps of the query string.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QueryRule {
    /// The query as sent.
    #[default]
    Keep,
    /// No query at all: `/a?x=1` and `/a?y=2` are one object.
    Ignore,
    /// Parameters sorted, so `?b=2&a=1` and `?a=1&b=2` are one object.
    Sort,
}

/// How a request's primary key is made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KeyRules {
    pub query: QueryRule,
    /// Request headers whose values become part of the key (lower-case names).
    pub headers: Vec<String>,
}

/// The key of a request: `scheme://host/path?query` plus the chosen headers' values.
///
/// The host is lower-cased (RFC 9110 §4.2.3: the host is case-insensitive); the path is kept
/// as sent (paths are case-sensitive).
pub fn primary_key(
    scheme: &str,
    host: &str,
    path: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    rules: &KeyRules,
) -> String {
    let mut key = String::with_capacity(scheme.len() + host.len() + path.len() + 16);
    key.push_str(scheme);
    key.push_str("://");
    key.extend(host.chars().map(|c| c.to_ascii_lowercase()));
    key.push_str(path);
    match (query, rules.query) {
        (Some(q), QueryRule::Keep) if !q.is_empty() => {
            key.push('?');
            key.push_str(q);
        }
        (Some(q), QueryRule::Sort) if !q.is_empty() => {
            let mut params: Vec<&str> = q.split('&').filter(|p| !p.is_empty()).collect();
            params.sort_unstable();
            key.push('?');
            key.push_str(&params.join("&"));
        }
        _ => {}
    }
    for name in &rules.headers {
        key.push('\n');
        key.push_str(name);
        key.push(':');
        for (i, value) in headers.get_all(name.as_str()).iter().enumerate() {
            if i > 0 {
                key.push(',');
            }
            key.push_str(&String::from_utf8_lossy(value.as_bytes()));
        }
    }
    key
}

/// The `scheme://host/path?query` part of a key (what PURGE and BAN match against).
pub fn url_part(key: &str) -> &str {
    key.split('\n').next().unwrap_or(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn key(path: &str, query: Option<&str>, rules: &KeyRules) -> String {
        primary_key("http", "Example.COM", path, query, &HeaderMap::new(), rules)
    }

    #[test]
    fn default_key_is_scheme_host_path_query_with_host_lower_cased() {
        let rules = KeyRules::default();
        assert_eq!(
            key("/a/B", Some("x=1"), &rules),
            "http://example.com/a/B?x=1"
        );
        assert_eq!(key("/a", None, &rules), "http://example.com/a");
        assert_eq!(key("/a", Some(""), &rules), "http://example.com/a");
    }

    #[test]
    fn query_can_be_ignored_or_sorted() {
        let ignore = KeyRules {
            query: QueryRule::Ignore,
            ..KeyRules::default()
        };
        assert_eq!(key("/a", Some("x=1"), &ignore), "http://example.com/a");
        let sort = KeyRules {
            query: QueryRule::Sort,
            ..KeyRules::default()
        };
        assert_eq!(
            key("/a", Some("b=2&a=1&&c"), &sort),
            key("/a", Some("a=1&b=2&c"), &sort)
        );
        assert_ne!(
            key("/a", Some("b=2&a=1"), &KeyRules::default()),
            key("/a", Some("a=1&b=2"), &KeyRules::default())
        );
    }

    #[test]
    fn named_headers_join_the_key_and_the_url_part_stays_matchable() {
        let rules = KeyRules {
            headers: vec!["x-device".into()],
            ..KeyRules::default()
        };
        let mut phone = HeaderMap::new();
        phone.insert("x-device", HeaderValue::from_static("phone"));
        let a = primary_key("http", "h", "/p", None, &phone, &rules);
        let b = primary_key("http", "h", "/p", None, &HeaderMap::new(), &rules);
        assert_ne!(a, b);
        assert_eq!(url_part(&a), "http://h/p");
        assert_eq!(url_part(&b), "http://h/p");
    }
}
