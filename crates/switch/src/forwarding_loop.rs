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
//! The check costs nothing on a request without `Via`: [`crate::proxy`] notes whether the
//! field is present in the pass over the header fields its limits make anyway.

use http::header::{self, HeaderMap};
use http::{Response, StatusCode};

use crate::body::ResponseBody;
use crate::proxy::error_response;

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
    fn the_answer_comes_at_the_hop_limit_and_not_before() {
        let entries = |n: usize| vec!["1.1 capstan"; n].join(", ");
        assert!(check(&via(&[&entries(MAX_HOPS - 1)])).is_none());
        let answer = check(&via(&[&entries(MAX_HOPS)])).expect("a loop");
        assert_eq!(answer.status(), StatusCode::LOOP_DETECTED);
    }
}
