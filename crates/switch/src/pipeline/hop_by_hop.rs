//! The hop-by-hop fields of RFC 9110 §7.6.1, which a proxy removes from every message it
//! passes on (requests, final and interim responses, tunnels' requests).
//!
//! Uses nothing else in `pipeline`.

use http::header::{self, HeaderMap, HeaderName};

static KEEP_ALIVE: HeaderName = HeaderName::from_static("keep-alive");
static PROXY_CONNECTION: HeaderName = HeaderName::from_static("proxy-connection");

/// Removes the hop-by-hop headers of RFC 9110 §7.6.1, and those the Connection header names.
/// `Trailer` stays: it is end to end (RFC 9110 §6.6.2), and hyper writes HTTP/1.1 trailers
/// only for the fields a head's `Trailer` declares.
pub(crate) fn strip(headers: &mut HeaderMap) {
    // One pass over the names finds the few present: cheaper than a hashed removal of each
    // (this runs twice per request).
    let mut present = 0u8;
    for name in headers.keys() {
        if let Some(i) = hop_by_hop_index(name) {
            present |= 1 << i;
        }
    }
    if present == 0 {
        return;
    }
    if present & 1 != 0 {
        remove_connection_options(headers);
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(*name);
        }
    }
}

/// Always hop by hop; `Connection` first.
static HOP_BY_HOP: [&HeaderName; 8] = [
    &header::CONNECTION,
    &KEEP_ALIVE,
    &PROXY_CONNECTION,
    &header::TE,
    &header::TRANSFER_ENCODING,
    &header::UPGRADE,
    &header::PROXY_AUTHENTICATE,
    &header::PROXY_AUTHORIZATION,
];

/// Where `name` is in [`HOP_BY_HOP`]: one match on the text (names are lower case) rather
/// than a comparison with each of the eight.
fn hop_by_hop_index(name: &HeaderName) -> Option<usize> {
    match name.as_str() {
        "connection" => Some(0),
        "keep-alive" => Some(1),
        "proxy-connection" => Some(2),
        "te" => Some(3),
        "transfer-encoding" => Some(4),
        "upgrade" => Some(5),
        "proxy-authenticate" => Some(6),
        "proxy-authorization" => Some(7),
        _ => None,
    }
}

/// Removes the fields the `Connection` header names. The usual options are not looked up:
/// `close` names no field, and `Keep-Alive` is removed with the others.
fn remove_connection_options(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|name| {
            !name.eq_ignore_ascii_case("close") && !name.eq_ignore_ascii_case("keep-alive")
        })
        .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    fn headers(fields: &[(&str, &str)]) -> super::HeaderMap {
        let mut map = super::HeaderMap::new();
        for (name, value) in fields {
            map.append(
                super::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    /// The field names, sorted (a removal may reorder the rest).
    fn names(map: &super::HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = map.keys().map(|k| k.as_str()).collect();
        names.sort_unstable();
        names
    }

    #[test]
    fn hop_by_hop_fields_and_those_connection_names_go() {
        let mut map = headers(&[
            ("host", "a"),
            ("connection", "close, X-Trace"),
            ("connection", "Keep-Alive,x-other"),
            ("keep-alive", "timeout=5"),
            ("x-trace", "1"),
            ("x-other", "2"),
            ("x-kept", "3"),
            ("te", "trailers"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "h2c"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "Basic x"),
            ("proxy-authenticate", "Basic"),
            ("trailer", "x-sum"),
        ]);
        super::strip(&mut map);
        assert_eq!(names(&map), ["host", "trailer", "x-kept"]);
    }

    #[test]
    fn the_index_of_each_hop_by_hop_name_is_its_place_in_the_list() {
        for (i, name) in super::HOP_BY_HOP.iter().enumerate() {
            assert_eq!(super::hop_by_hop_index(name), Some(i), "{name}");
        }
        assert_eq!(super::hop_by_hop_index(&http::header::TRAILER), None);
    }

    #[test]
    fn end_to_end_fields_stay_untouched() {
        let fields = [("host", "a"), ("content-length", "2"), ("via", "1.1 x")];
        let mut map = headers(&fields);
        super::strip(&mut map);
        assert_eq!(map, headers(&fields));
        let mut only_keep_alive = headers(&[("keep-alive", "timeout=5"), ("date", "x")]);
        super::strip(&mut only_keep_alive);
        assert_eq!(names(&only_keep_alive), ["date"]);
    }
}
