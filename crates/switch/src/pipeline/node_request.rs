//! The request a node or a tier peer receives, built in one place ([`build`]) whichever road
//! the client's request took: proxied (and its retry), a cache fill, a revalidation of a stale
//! entry, a background refresh, a coalesced fill, a hop to the tier peer that owns the key and
//! that owner's fill, a tunnel. What the node sees thus never depends on the road:
//!
//! - the hop-by-hop fields of RFC 9110 §7.6.1 go, and those the client's `Connection` names
//!   ([`crate::pipeline::hop_by_hop`]); `TE` goes too, and `TE: trailers` is said again on the
//!   node's hop only where RFC 9110 §10.1.4 lets a proxy ask for trailers: the client accepts
//!   them and the road passes them on (not a fill: trailers are not stored), see
//!   [`accepts_trailers`] and [`crate::upstream::h2::accept_trailers`];
//! - one `Via` entry (`1.1 capstan`, the client's protocol version) is appended;
//! - `X-Forwarded-For` gets the client's address appended, and `X-Forwarded-Proto` says the
//!   scheme the client came by (`https` over TLS, QUIC, or behind a balancer whose PROXY
//!   header says so), replacing what the client sent;
//! - with `upstream.forwarded = true`, an RFC 7239 `Forwarded` element (`for`, `proto`) is
//!   appended as well;
//! - what the road adds: a fill leaves out the client's conditionals and range and asks with
//!   the stale entry's validators; a tunnel keeps `Upgrade` (and says `Connection: upgrade`);
//!   a hop to the key's owner carries the hop mark instead of the `X-Forwarded-*` fields.
//!
//! **The hop mark** (`capstan-tier-hop: SENDER; for=ADDRESS; proto=SCHEME`) names the asking
//! switch and carries the client's address and scheme to the owner, which trusts it only from
//! a peer's address (`crate::pipeline::tier::admit`, which reads it with [`read_mark`]); the
//! owner then builds its node request for that client ([`Client`]), so its fill sends exactly
//! what the asking switch would have sent, plus the owner's own `Via` entry.
//!
//! Uses `hop_by_hop` in `pipeline`.

use std::net::{IpAddr, SocketAddr};

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Version;

use crate::state::switch::ConnState;

pub(crate) static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static FORWARDED: HeaderName = HeaderName::from_static("forwarded");

/// What a node is told of the client: its address and the scheme it came by. Made once per
/// request from the client's connection ([`Client::of`]), or from the hop mark of a peer
/// ([`Carried`]); borrowed, so the request path copies nothing for it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Client<'a> {
    /// The client's IP address, as `X-Forwarded-For` gives it.
    pub addr: &'a HeaderValue,
    /// The client came over TLS (a TLS listener, QUIC, or a balancer's PROXY header said so).
    pub https: bool,
}

impl<'a> Client<'a> {
    /// The client of a request on `conn` from `peer` (its address as a header value), or the
    /// one a peer's hop mark carried (read from a peer's request only).
    pub(crate) fn of(
        conn: &ConnState,
        peer: &'a HeaderValue,
        carried: Option<&'a Carried>,
    ) -> Client<'a> {
        match carried {
            Some(carried) => carried.client(),
            None => Client {
                addr: peer,
                https: conn.tls.get().is_some() || conn.peer.is_some_and(|p| p.tls),
            },
        }
    }

    fn proto(&self) -> HeaderValue {
        HeaderValue::from_static(if self.https { "https" } else { "http" })
    }
}

/// The client a peer's hop mark carries (see [`read_mark`]).
#[derive(Clone, Debug)]
pub(crate) struct Carried {
    addr: HeaderValue,
    https: bool,
}

impl Carried {
    pub(crate) fn client(&self) -> Client<'_> {
        Client {
            addr: &self.addr,
            https: self.https,
        }
    }
}

/// What the road to the node adds to the client's request.
pub(crate) enum Road<'a> {
    /// Proxied as the client asked (a retry sends the same request again).
    Proxy,
    /// A cache fill: the client's conditionals and `Range` out (the answer is for every client
    /// of the key), the stale entry's validators in when it revalidates one.
    Fill {
        /// The stored fields of the entry being revalidated.
        stale: Option<&'a HeaderMap>,
    },
    /// A tunnel (WebSocket or another upgrade, `CONNECT`): `Upgrade` stays.
    Tunnel,
    /// A hop to the tier peer that owns the key: the hop mark naming this switch (`from`)
    /// and the client, in place of `X-Forwarded-For` and `X-Forwarded-Proto`, which the
    /// owner adds from the mark.
    Hop { from: SocketAddr },
}

/// The fields a fill leaves out: they would make the node answer for one client only.
const CLIENT_ONLY: [HeaderName; 6] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
];

/// Turns the client's header fields into those of the request a node or peer receives (see
/// the module's doc): `version` is the client's protocol version (for `Via`), `forwarded`
/// the `upstream.forwarded` switch. In place: the proxied path sends the client's own map.
pub(crate) fn build(
    headers: &mut HeaderMap,
    client: Client<'_>,
    version: Version,
    road: Road<'_>,
    forwarded: bool,
) {
    let upgrade = match road {
        Road::Tunnel => headers.get(header::UPGRADE).cloned(),
        _ => None,
    };
    crate::pipeline::hop_by_hop::strip(headers);
    match road {
        Road::Proxy => {}
        Road::Fill { stale } => {
            for name in &CLIENT_ONLY {
                headers.remove(name);
            }
            if let Some(stored) = stale {
                headers.extend(capstan_cache::rfc::revalidation_headers(stored));
            }
        }
        Road::Tunnel => {
            if let Some(protocol) = upgrade {
                headers.insert(header::UPGRADE, protocol);
                headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            }
        }
        Road::Hop { from } => {
            // The owner says the scheme from the mark, whatever the client claimed.
            headers.remove(&X_FORWARDED_PROTO);
            headers.insert(HeaderName::from_static(HOP_MARK), mark(from, client));
            append_list(headers, &header::VIA, &via_value(version));
            return;
        }
    }
    append_list(headers, &X_FORWARDED_FOR, client.addr);
    headers.insert(&X_FORWARDED_PROTO, client.proto());
    if forwarded {
        if let Some(element) = forwarded_element(&client) {
            append_list(headers, &FORWARDED, &element);
        }
    }
    append_list(headers, &header::VIA, &via_value(version));
}

/// Whether the client accepts trailers (`TE: trailers`, possibly among other codings): the
/// only part of its `TE` the node's hop may carry on (RFC 9110 §10.1.4), and only on a road
/// that passes trailers back.
pub(crate) fn accepts_trailers(client: &HeaderMap) -> bool {
    crate::upstream::h2::wants_trailers(client)
}

/// The hop mark's field name (`crate::state::tier::HOP_HEADER`).
const HOP_MARK: &str = crate::state::tier::HOP_HEADER;

/// The hop mark: the asking switch's address, then the client's address and scheme.
fn mark(from: SocketAddr, client: Client<'_>) -> HeaderValue {
    let addr = client.addr.to_str().unwrap_or("");
    let proto = if client.https { "https" } else { "http" };
    HeaderValue::from_str(&format!("{from}; for={addr}; proto={proto}"))
        .unwrap_or_else(|_| HeaderValue::from_str(&from.to_string()).expect("an address"))
}

/// A hop mark read: the sender it names (an address, or `check`), and the client it carries
/// (`None` from a sender that carries none). Only a request from a peer's address is read.
pub(crate) fn read_mark(mark: &HeaderValue) -> (&str, Option<Carried>) {
    let text = mark.to_str().unwrap_or("");
    let mut parts = text.split(';').map(str::trim);
    let sender = parts.next().unwrap_or("");
    let (mut addr, mut https) = (None, None);
    for part in parts {
        match part.split_once('=') {
            Some(("for", ip)) => addr = ip.parse::<IpAddr>().ok(),
            Some(("proto", "https")) => https = Some(true),
            Some(("proto", "http")) => https = Some(false),
            _ => {}
        }
    }
    let client = match (addr, https) {
        (Some(ip), Some(https)) => HeaderValue::from_str(&ip.to_string())
            .ok()
            .map(|addr| Carried { addr, https }),
        _ => None,
    };
    (sender, client)
}

/// The RFC 7239 element for the client: `for=` (an IPv6 address quoted in brackets) and
/// `proto=`.
fn forwarded_element(client: &Client<'_>) -> Option<HeaderValue> {
    let addr = client.addr.to_str().ok()?;
    let proto = if client.https { "https" } else { "http" };
    let element = match addr.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("for=\"[{v6}]\";proto={proto}"),
        _ => format!("for={addr};proto={proto}"),
    };
    HeaderValue::from_str(&element).ok()
}

/// The switch's `Via` entry for a message received in `version`.
pub(crate) fn via_value(version: Version) -> HeaderValue {
    HeaderValue::from_static(match version {
        Version::HTTP_10 => "1.0 capstan",
        Version::HTTP_2 => "2 capstan",
        Version::HTTP_3 => "3 capstan",
        _ => "1.1 capstan",
    })
}

/// Appends `value` to a comma-separated header, as proxies do with Via and X-Forwarded-For.
pub(crate) fn append_list(headers: &mut HeaderMap, name: &HeaderName, value: &HeaderValue) {
    match headers.entry(name) {
        http::header::Entry::Occupied(mut present) if !present.get().is_empty() => {
            // Several lines of the field are one list (RFC 9110 §5.3): joined, in order.
            let room = present.iter().map(|l| l.len() + 2).sum::<usize>() + value.len();
            let mut joined = Vec::with_capacity(room);
            for line in present.iter() {
                if !line.is_empty() {
                    joined.extend_from_slice(line.as_bytes());
                    joined.extend_from_slice(b", ");
                }
            }
            joined.extend_from_slice(value.as_bytes());
            if let Ok(joined) = HeaderValue::from_bytes(&joined) {
                present.insert(joined);
            }
        }
        http::header::Entry::Occupied(mut empty) => {
            empty.insert(value.clone());
        }
        // The common case: nothing to join, no allocation.
        http::header::Entry::Vacant(absent) => {
            absent.insert(value.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(fields: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    fn client(addr: &str, https: bool) -> Carried {
        Carried {
            addr: HeaderValue::from_str(addr).unwrap(),
            https,
        }
    }

    /// The fields, sorted, as `name: value` (a removal may reorder the rest).
    fn fields(map: &HeaderMap) -> Vec<String> {
        let mut all: Vec<String> = (map.iter())
            .map(|(k, v)| format!("{k}: {}", v.to_str().unwrap()))
            .collect();
        all.sort_unstable();
        all
    }

    fn hop_by_hop_request() -> HeaderMap {
        headers(&[
            ("host", "site"),
            ("connection", "X-Secret, keep-alive"),
            ("x-secret", "1"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("te", "gzip"),
            ("x-forwarded-proto", "https"),
            ("if-none-match", "\"a\""),
        ])
    }

    #[test]
    fn a_proxied_request_loses_hop_by_hop_fields_and_gains_the_forwarding_ones() {
        let mut map = hop_by_hop_request();
        build(
            &mut map,
            client("10.0.0.9", false).client(),
            Version::HTTP_11,
            Road::Proxy,
            false,
        );
        assert_eq!(
            fields(&map),
            [
                "host: site",
                "if-none-match: \"a\"",
                "via: 1.1 capstan",
                "x-forwarded-for: 10.0.0.9",
                "x-forwarded-proto: http",
            ]
        );
    }

    #[test]
    fn a_fill_asks_for_every_client_with_the_stale_entrys_validators() {
        let mut map = hop_by_hop_request();
        map.insert(header::RANGE, HeaderValue::from_static("bytes=0-1"));
        let stored = headers(&[("etag", "\"v1\""), ("content-type", "text/plain")]);
        let road = Road::Fill {
            stale: Some(&stored),
        };
        build(
            &mut map,
            client("10.0.0.9", true).client(),
            Version::HTTP_2,
            road,
            false,
        );
        assert_eq!(
            fields(&map),
            [
                "host: site",
                "if-none-match: \"v1\"",
                "via: 2 capstan",
                "x-forwarded-for: 10.0.0.9",
                "x-forwarded-proto: https",
            ]
        );
    }

    #[test]
    fn a_hop_carries_the_client_in_its_mark_and_the_owner_reads_it() {
        let mut map = hop_by_hop_request();
        let from: SocketAddr = "127.0.0.2:8080".parse().unwrap();
        let asked = client("10.0.0.9", true);
        build(
            &mut map,
            asked.client(),
            Version::HTTP_3,
            Road::Hop { from },
            true,
        );
        let mark = map.get(HOP_MARK).expect("the hop mark").clone();
        assert_eq!(mark, "127.0.0.2:8080; for=10.0.0.9; proto=https");
        assert!(!map.contains_key(&X_FORWARDED_FOR));
        assert!(!map.contains_key(&X_FORWARDED_PROTO));
        assert!(!map.contains_key(&FORWARDED));
        let (sender, carried) = read_mark(&mark);
        assert_eq!(sender, "127.0.0.2:8080");
        let carried = carried.expect("a client");
        assert_eq!((carried.addr, carried.https), (asked.addr.clone(), true));
        // The owner's node request: what the asking switch would have sent, plus its Via.
        map.remove(HOP_MARK);
        let carried = read_mark(&mark).1.unwrap();
        build(
            &mut map,
            carried.client(),
            Version::HTTP_11,
            Road::Proxy,
            false,
        );
        assert_eq!(map[&X_FORWARDED_FOR], "10.0.0.9");
        assert_eq!(map[&X_FORWARDED_PROTO], "https");
        assert_eq!(map[header::VIA], "3 capstan, 1.1 capstan");
    }

    #[test]
    fn marks_without_a_client_or_with_a_bad_one_carry_none() {
        for mark in [
            "127.0.0.2:8080",
            "check",
            "a; for=nonsense; proto=https",
            "a; for=1.2.3.4",
        ] {
            let (_, client) = read_mark(&HeaderValue::from_static(mark));
            assert!(client.is_none(), "{mark}");
        }
        let check = HeaderValue::from_static("check");
        assert_eq!(read_mark(&check).0, "check");
    }

    #[test]
    fn a_tunnel_keeps_its_upgrade() {
        let mut map = headers(&[
            ("connection", "Upgrade, X-Secret"),
            ("upgrade", "websocket"),
            ("x-secret", "1"),
        ]);
        build(
            &mut map,
            client("::1", false).client(),
            Version::HTTP_11,
            Road::Tunnel,
            false,
        );
        assert_eq!(
            fields(&map),
            [
                "connection: upgrade",
                "upgrade: websocket",
                "via: 1.1 capstan",
                "x-forwarded-for: ::1",
                "x-forwarded-proto: http",
            ]
        );
    }

    #[test]
    fn forwarded_is_added_only_when_asked_and_quotes_ipv6() {
        let mut map = headers(&[("forwarded", "for=192.0.2.1")]);
        build(
            &mut map,
            client("2001:db8::1", true).client(),
            Version::HTTP_11,
            Road::Proxy,
            true,
        );
        assert_eq!(
            map[&FORWARDED],
            "for=192.0.2.1, for=\"[2001:db8::1]\";proto=https"
        );
        let mut map = HeaderMap::new();
        build(
            &mut map,
            client("10.0.0.9", false).client(),
            Version::HTTP_11,
            Road::Proxy,
            true,
        );
        assert_eq!(map[&FORWARDED], "for=10.0.0.9;proto=http");
        let mut off = HeaderMap::new();
        build(
            &mut off,
            client("10.0.0.9", false).client(),
            Version::HTTP_11,
            Road::Proxy,
            false,
        );
        assert!(!off.contains_key(&FORWARDED));
    }

    #[test]
    fn list_fields_are_joined_over_every_line() {
        let peer = HeaderValue::from_static("10.0.0.9");
        let mut map = headers(&[("x-forwarded-for", "10.0.0.1")]);
        append_list(&mut map, &X_FORWARDED_FOR, &peer);
        assert_eq!(map[&X_FORWARDED_FOR], "10.0.0.1, 10.0.0.9");
        let mut map = headers(&[
            ("x-forwarded-for", "10.0.0.1"),
            ("x-forwarded-for", "10.0.0.2"),
        ]);
        append_list(&mut map, &X_FORWARDED_FOR, &peer);
        let all: Vec<_> = map.get_all(&X_FORWARDED_FOR).iter().collect();
        assert_eq!(all, ["10.0.0.1, 10.0.0.2, 10.0.0.9"]);
        let mut map = headers(&[("x-forwarded-for", "")]);
        append_list(&mut map, &X_FORWARDED_FOR, &peer);
        assert_eq!(map[&X_FORWARDED_FOR], "10.0.0.9");
        let mut map = HeaderMap::new();
        append_list(&mut map, &X_FORWARDED_FOR, &peer);
        assert_eq!(map[&X_FORWARDED_FOR], "10.0.0.9");
    }
}
