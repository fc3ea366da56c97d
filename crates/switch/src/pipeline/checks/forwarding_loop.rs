//! Forwarding loops: a node whose address leads back to a switch — its own listener, or a
//! virtual IP that routes to it — sends every request round again.
//!
//! Every switch adds `Via: 1.1 capstan` (`2 capstan`, `1.0 capstan`) to what it forwards. A
//! request that arrives already naming capstan [`MAX_HOPS`] times has gone round a loop, and
//! is answered `508 Loop Detected` at once; each switch on the way back passes that answer
//! on, so the client learns the cause within milliseconds. Without the check each pass opens
//! one more connection and takes one more admission slot, until a queue times out (5 s with
//! the default `queue_timeout`) and the client gets a 503 that names no cause. Squid and
//! Traffic Server find loops in `Via` by their own host name; a count needs no name to
//! configure, and switches may still be chained (no real deployment stacks eight).
//!
//! The check costs nothing on a request without `Via`: [`crate::pipeline::dispatch`] notes whether the
//! field is present in the pass over the header fields its limits make anyway. The plainest
//! case, a node at one of the switch's own listeners, is also found in the configuration
//! ([`Config::self_addressed_node_warnings`]): `capstan check` prints it, the switch logs it.

use std::net::SocketAddr;

use http::header::{self, HeaderMap};
use http::{Response, StatusCode};

use crate::config::Config;
use crate::pipeline::response::error_response;
use crate::pipeline::response::ResponseBody;

/// Capstan hops in `Via` at which a request is taken for a loop.
pub const MAX_HOPS: usize = 8;

/// The answer to a request that has passed through [`MAX_HOPS`] switches or more, if it has.
pub(crate) fn check(headers: &HeaderMap) -> Option<Response<ResponseBody>> {
    let hops = capstan_hops(headers);
    (hops >= MAX_HOPS).then(|| {
        error_response(
            StatusCode::LOOP_DETECTED,
            &format!(
                "forwarding loop: the request has passed through capstan {hops} times \
                 (Via); a node's address leads back to a switch"
            ),
        )
    })
}

/// How many `Via` entries (`received-protocol received-by [comment]`, comma-separated, over
/// every `Via` line) name capstan as the proxy they passed.
pub fn capstan_hops(headers: &HeaderMap) -> usize {
    headers
        .get_all(header::VIA)
        .iter()
        .flat_map(|line| line.as_bytes().split(|&b| b == b','))
        .filter(|entry| received_by(entry) == Some(b"capstan".as_slice()))
        .count()
}

/// The `received-by` of one `Via` entry: its second word.
fn received_by(entry: &[u8]) -> Option<&[u8]> {
    entry
        .split(|b| b.is_ascii_whitespace())
        .filter(|word| !word.is_empty())
        .nth(1)
}

impl Config {
    /// One line per node whose address is one of this switch's own listeners: every request
    /// sent there would come back (and be answered 508).
    pub(crate) fn self_addressed_node_warnings(&self) -> Vec<String> {
        let listeners: Vec<SocketAddr> = self
            .listen
            .iter()
            .copied()
            .chain(self.listeners.iter().map(|l| l.address))
            .collect();
        self.nodes
            .iter()
            .filter_map(|node| {
                let listener = listeners.iter().find(|l| reaches(node.address, **l))?;
                Some(format!(
                    "node {}: its address {} is this switch's own listener {listener}: \
                     every request sent there would come back (answered 508 Loop Detected)",
                    node.name, node.address
                ))
            })
            .collect()
    }
}

/// Whether connecting to `node` reaches `listener` on this host: the same address, or the
/// same port on a loopback or unspecified address while the listener takes every address.
fn reaches(node: SocketAddr, listener: SocketAddr) -> bool {
    if node.port() != listener.port() {
        return false;
    }
    let local = |ip: std::net::IpAddr| ip.to_canonical().is_loopback() || ip.is_unspecified();
    node.ip().to_canonical() == listener.ip().to_canonical()
        || (listener.ip().is_unspecified() && local(node.ip()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn via(lines: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(header::VIA, HeaderValue::from_str(line).unwrap());
        }
        headers
    }

    #[test]
    fn counts_capstan_entries_over_every_via_line() {
        assert_eq!(capstan_hops(&HeaderMap::new()), 0);
        assert_eq!(capstan_hops(&via(&["1.1 capstan"])), 1);
        assert_eq!(
            capstan_hops(&via(&[
                "1.1 capstan, 1.1 varnish",
                "2 capstan,1.0  capstan"
            ])),
            3
        );
    }

    #[test]
    fn other_proxies_and_look_alikes_are_not_counted() {
        let headers = via(&["1.1 capstan-edge, 1.1 squid (capstan), capstan, 1.1 Capstan"]);
        assert_eq!(capstan_hops(&headers), 0);
    }

    #[test]
    fn a_node_at_one_of_the_listeners_is_found() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(reaches(at("127.0.0.1:80"), at("127.0.0.1:80")));
        assert!(reaches(at("127.0.0.1:80"), at("0.0.0.0:80")));
        assert!(reaches(at("[::1]:80"), at("[::]:80")));
        assert!(reaches(at("[::ffff:127.0.0.1]:80"), at("127.0.0.1:80")));
        assert!(!reaches(at("127.0.0.1:81"), at("127.0.0.1:80")));
        assert!(!reaches(at("127.0.0.2:80"), at("127.0.0.1:80")));
        // Another host's port 80 is not this switch, whatever the switch listens on.
        assert!(!reaches(at("10.0.0.5:80"), at("0.0.0.0:80")));
    }

    #[test]
    fn the_answer_comes_at_the_hop_limit_and_not_before() {
        let entries = |n: usize| vec!["1.1 capstan"; n].join(", ");
        assert!(check(&via(&[&entries(MAX_HOPS - 1)])).is_none());
        let answer = check(&via(&[&entries(MAX_HOPS)])).expect("a loop");
        assert_eq!(answer.status(), StatusCode::LOOP_DETECTED);
    }
}
