//! What a `dns = "…"` source asks for: an SRV name, or a host and port. Parsed and checked
//! once (when the configuration is read), so a lookup never meets a malformed name.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// A name to look up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DnsName {
    /// SRV records (`_http._tcp.web.example`, stored without a trailing dot).
    Srv(String),
    /// A host's addresses with a port: a DNS name, or an IP literal that needs no lookup.
    Host { host: String, port: u16 },
}

impl DnsName {
    /// `_…` is an SRV name; anything else must be `host:port` (`[v6]:port` for IPv6).
    pub fn parse(text: &str) -> Result<DnsName, String> {
        let text = text.trim();
        if text.starts_with('_') {
            return check_name(text).map(|name| DnsName::Srv(name.to_string()));
        }
        if let Ok(literal) = text.parse::<SocketAddr>() {
            return match literal.port() {
                0 => Err(format!("`{text}`: port 0 is not a node's port")),
                port => Ok(DnsName::Host {
                    host: literal.ip().to_string(),
                    port,
                }),
            };
        }
        let Some((host, port)) = text.rsplit_once(':') else {
            return Err(format!(
                "`{text}`: give an SRV name (starting with `_`, like `_http._tcp.web.example`) \
                 or `host:port`"
            ));
        };
        let port = match port.parse::<u16>() {
            Ok(0) => return Err(format!("`{text}`: port 0 is not a node's port")),
            Ok(port) => port,
            Err(_) => return Err(format!("`{text}`: `{port}` is not a port (1 to 65535)")),
        };
        if host.contains(':') || host.starts_with('[') {
            return Err(format!(
                "`{text}`: write an IPv6 address as `[ADDRESS]:PORT`"
            ));
        }
        let host = check_name(host)?.to_string();
        Ok(DnsName::Host { host, port })
    }

    /// The host part when it is an IP literal.
    pub(crate) fn literal(&self) -> Option<IpAddr> {
        match self {
            DnsName::Host { host, .. } => host.parse().ok(),
            DnsName::Srv(_) => None,
        }
    }
}

impl fmt::Display for DnsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DnsName::Srv(name) => f.write_str(name),
            DnsName::Host { host, port } if host.contains(':') => write!(f, "[{host}]:{port}"),
            DnsName::Host { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// A DNS name as the wire allows it (labels of 1 to 63 bytes, 253 in all) and of the
/// characters host names and SRV labels use. Returns it without its trailing dot.
fn check_name(text: &str) -> Result<&str, String> {
    let name = text.strip_suffix('.').unwrap_or(text);
    if name.is_empty() {
        return Err("an empty DNS name".into());
    }
    if name.len() > 253 {
        return Err(format!("`{text}`: a DNS name has at most 253 bytes"));
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!(
                "`{text}`: each part between dots must have 1 to 63 bytes"
            ));
        }
        if let Some(c) = label
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
        {
            return Err(format!(
                "`{text}`: {c:?} is not allowed in a DNS name (letters, digits, - and _)"
            ));
        }
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srv_names_hosts_and_literals() {
        assert_eq!(
            DnsName::parse("_http._tcp.web.example.").unwrap(),
            DnsName::Srv("_http._tcp.web.example".into())
        );
        assert_eq!(
            DnsName::parse("web.default.svc.cluster.local:8080").unwrap(),
            DnsName::Host {
                host: "web.default.svc.cluster.local".into(),
                port: 8080
            }
        );
        let v6 = DnsName::parse("[::1]:80").unwrap();
        assert_eq!(v6.to_string(), "[::1]:80");
        assert_eq!(v6.literal(), Some("::1".parse().unwrap()));
        assert_eq!(
            DnsName::parse("10.0.0.5:80").unwrap().to_string(),
            "10.0.0.5:80"
        );
    }

    #[test]
    fn bad_names_say_what_is_wrong() {
        let bad = |text: &str| DnsName::parse(text).unwrap_err();
        assert!(
            bad("web.example").contains("host:port"),
            "{}",
            bad("web.example")
        );
        assert!(bad("web.example:0").contains("port 0"));
        assert!(bad("10.0.0.5:0").contains("port 0"));
        assert!(bad("web:http").contains("not a port"));
        assert!(bad("::1:80").contains("[ADDRESS]:PORT"));
        assert!(bad("_http._tcp..example").contains("1 to 63 bytes"));
        assert!(bad("_http._tcp.we b").contains("' '"));
        assert!(bad(&format!("{}:80", "a.".repeat(130))).contains("253"));
        assert!(bad(":80").contains("empty"));
    }
}
