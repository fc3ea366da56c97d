//! The `[proxy_protocol]` section: the PROXY header sent to nodes, and the listeners and
//! balancers it is accepted from.

use std::net::{IpAddr, SocketAddr};

use serde::{Deserialize, Serialize};

use crate::config::cache::Network;

/// The `[proxy_protocol]` section.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProxyProtocolConfig {
    /// Header sent at the start of every connection to a node.
    pub send: SendVersion,
    /// Client listeners (each one of `listen`) that expect a PROXY header, v1 or v2.
    pub accept_on: Vec<SocketAddr>,
    /// Sources allowed to send a header on those listeners (`10.0.0.0/8`, `192.0.2.7`).
    pub trusted: Vec<Network>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SendVersion {
    #[default]
    Off,
    V1,
    V2,
}

impl ProxyProtocolConfig {
    /// What the parser cannot check: the key at fault and why.
    pub fn check(&self, listen: &[SocketAddr]) -> Result<(), (&'static str, String)> {
        if let Some(addr) = self.accept_on.iter().find(|a| !listen.contains(a)) {
            return Err((
                "accept_on",
                format!("proxy_protocol.accept_on: {addr} is not one of the `listen` addresses"),
            ));
        }
        if !self.accept_on.is_empty() && self.trusted.is_empty() {
            return Err((
                "trusted",
                "proxy_protocol.trusted: name the balancers allowed to send PROXY headers \
                 (e.g. [\"10.0.0.0/8\"])"
                    .into(),
            ));
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        let mut out = String::new();
        if self.send != SendVersion::Off {
            let version = if self.send == SendVersion::V1 {
                "v1"
            } else {
                "v2"
            };
            out.push_str(&format!("proxy     PROXY protocol {version} to nodes\n"));
        }
        if !self.accept_on.is_empty() {
            let on: Vec<String> = self.accept_on.iter().map(|a| a.to_string()).collect();
            let from: Vec<String> = self
                .trusted
                .iter()
                .map(|n| format!("{}/{}", n.addr, n.prefix))
                .collect();
            out.push_str(&format!(
                "proxy     PROXY headers accepted on {} from {}\n",
                on.join(", "),
                from.join(", ")
            ));
        }
        out
    }

    pub fn accepts_on(&self, listener: SocketAddr) -> bool {
        self.accept_on.contains(&listener)
    }

    pub(crate) fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|n| n.contains(ip))
    }
}
