//! The protocol contenders of `wan-loss-h3` (`switch-h1`, `switch-h2`, `switch-h3`): the
//! switch's configuration — one TLS listener on `0.0.0.0` with `quic = true`, so HTTP/3 is
//! served on the same address over UDP — and the generator's flags for each protocol at one
//! concurrency. Pure: the backend writes the file, runs `capstan check` and starts the switch.
//!
//! The certificate is the committed test PKI's (`examples/tls/localhost.pem`); the generator
//! reaches the switch at the router's address, so it runs with `--insecure`.

use std::net::SocketAddr;
use std::path::Path;

use crate::model::wan::ClientSettings;

/// The test certificate and key the TLS listener serves.
pub(super) const CERT: &[u8] = include_bytes!("../../../../../examples/tls/localhost.pem");
pub(super) const KEY: &[u8] = include_bytes!("../../../../../examples/tls/localhost.key");

/// Which protocol a contender's clients speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    H1,
    H2,
    H3,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::H1 => "HTTP/1.1",
            Protocol::H2 => "HTTP/2",
            Protocol::H3 => "HTTP/3",
        }
    }

    /// `capstan bench`'s flags: keep-alive connections, the protocol, streams per connection.
    /// Every protocol gets `connections` requests in flight at most.
    pub fn client_args(self, c: &ClientSettings) -> Vec<String> {
        let mut a = vec!["--insecure".to_string(), "--keepalive".to_string()];
        match self {
            Protocol::H1 => a.extend(["--connections".into(), c.connections.to_string()]),
            Protocol::H2 | Protocol::H3 => {
                let flag = if self == Protocol::H2 {
                    "--http2"
                } else {
                    "--http3"
                };
                a.extend([
                    flag.to_string(),
                    "--connections".into(),
                    (c.connections / c.streams).to_string(),
                    "--streams".into(),
                    c.streams.to_string(),
                ]);
            }
        }
        a
    }

    /// The load in words, for the contender's set-up line.
    pub fn describe(self, c: &ClientSettings) -> String {
        match self {
            Protocol::H1 => format!("{} keep-alive connections", c.connections),
            _ => format!(
                "{} connections of {} streams",
                c.connections / c.streams,
                c.streams
            ),
        }
    }
}

/// The switch's configuration: a plain listener on loopback (the lab's readiness probe), the
/// TLS listener on `0.0.0.0:port` (with `quic = true` when `quic`), one node.
pub(super) fn switch_config(
    dir: &Path,
    port: u16,
    plain: SocketAddr,
    admin: SocketAddr,
    node: SocketAddr,
    report: SocketAddr,
    quic: bool,
) -> String {
    let quic_line = if quic {
        "quic = true                        # HTTP/3 on the same address over UDP\n"
    } else {
        ""
    };
    format!(
        "# The switch facing the WAN over TLS, HTTP/2 and HTTP/3 (written by capstan lab).\n\
         listen = [\"{plain}\"]\nadmin = \"{admin}\"\n\n\
         [[listener]]\naddress = \"0.0.0.0:{port}\"\nalpn = [\"h2\", \"http/1.1\"]\n{quic_line}\n\
         [[listener.certificate]]\ncert = \"{cert}\"\nkey = \"{key}\"\n\n\
         [policy]\nname = \"round-robin\"\n\n\
         [[node]]\nname = \"origin\"\naddress = \"{node}\"\nreport_address = \"{report}\"\n\n\
         # As the paper's servers: no admission limit, nothing shed.\n[admission]\nlimit = \"off\"\n",
        cert = dir.join("localhost.pem").display(),
        key = dir.join("localhost.key").display(),
    )
}

/// The first line of `capstan check`'s complaint, for the report.
pub(super) fn check_line(stderr: &str) -> String {
    stderr
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("no reason given")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_protocol_gets_the_same_concurrency() {
        let c = ClientSettings {
            connections: 32,
            streams: 8,
        };
        let h1 = Protocol::H1.client_args(&c).join(" ");
        assert!(
            h1.contains("--connections 32") && !h1.contains("--http"),
            "{h1}"
        );
        let h3 = Protocol::H3.client_args(&c).join(" ");
        assert!(h3.contains("--http3 --connections 4 --streams 8"), "{h3}");
        assert!(Protocol::H2
            .client_args(&c)
            .contains(&"--http2".to_string()));
    }

    #[test]
    fn the_config_has_quic_only_when_asked() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let with = switch_config(Path::new("/d"), 8443, a, a, a, a, true);
        assert!(with.contains("address = \"0.0.0.0:8443\"\nalpn"));
        assert!(with.contains("quic = true"));
        assert!(!switch_config(Path::new("/d"), 8443, a, a, a, a, false).contains("quic"));
        assert_eq!(
            check_line("\n  f.toml:3:1: unknown key quic\nmore"),
            "f.toml:3:1: unknown key quic"
        );
    }
}
