//! Secondary cache keys from `Vary` (RFC 9111 §4.1).
//!
//! A stored response that varies on some request fields can only answer requests whose values
//! for those fields match the request that produced it. [`vary_key`] reduces the nominated
//! fields of a request to a canonical [`VaryKey`]; two requests match when their keys are equal.
//! The normalisation is the one RFC 9111 §4.1 allows: field names case-insensitive, multiple
//! field lines combined, list elements trimmed (`gzip,br` = `gzip, br`), runs of whitespace
//! collapsed. A field absent from the request differs from a field present but empty.

use http::header::VARY;
use http::{HeaderMap, HeaderName};

use super::fields::{list_items, split_list};

/// The canonical secondary key: for each field the stored response's `Vary` names (sorted,
/// without duplicates), the request's normalised value or its absence. Held in its byte
/// encoding, so equality, hashing and persistence all use the same bytes. A response without
/// `Vary` has the empty key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VaryKey(Vec<u8>);

/// Bytes that are not a [`VaryKey`] encoding (a corrupt or foreign file).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid Vary key encoding at byte {offset}")]
pub struct VaryKeyError {
    /// Where the first problem was found.
    pub offset: usize,
}

impl VaryKey {
    /// The key of a response without `Vary`.
    pub fn empty() -> VaryKey {
        VaryKey(Vec::new())
    }

    /// Whether this is the key of a response without `Vary`.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The compact encoding, for persisting next to the stored response: one line per field,
    /// `name:=value\n` when present or `name:!\n` when absent. Field values cannot contain a
    /// line feed, so the encoding is unambiguous.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Reads an encoding made by [`VaryKey::as_bytes`]. Rejects anything else, including
    /// non-canonical order, so equal keys always have equal bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<VaryKey, VaryKeyError> {
        let mut offset = 0;
        let mut previous: Option<&[u8]> = None;
        while offset < bytes.len() {
            let err = VaryKeyError { offset };
            let line_len = bytes[offset..]
                .iter()
                .position(|&b| b == b'\n')
                .ok_or(err.clone())?;
            let line = &bytes[offset..offset + line_len];
            let colon = line.iter().position(|&b| b == b':').ok_or(err.clone())?;
            let (name, rest) = (&line[..colon], &line[colon + 1..]);
            let canonical_name = !name.is_empty()
                && HeaderName::from_bytes(name).is_ok_and(|n| n.as_str().as_bytes() == name)
                && previous.is_none_or(|prev| prev < name);
            let valid_rest = rest == b"!" || rest.first() == Some(&b'=');
            if !canonical_name || !valid_rest {
                return Err(err);
            }
            previous = Some(name);
            offset += line_len + 1;
        }
        Ok(VaryKey(bytes.to_vec()))
    }

    /// The fields of the key: name and normalised value (`None` when the request lacked it).
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        self.0
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|line| {
                let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
                let rest = line.get(colon + 1..).unwrap_or_default();
                (&line[..colon], rest.strip_prefix(b"="))
            })
    }
}

/// The secondary key of `req` against a stored response's `Vary`; `None` for `Vary: *`, which
/// matches no request. Compute it for the request that produced a response when storing it,
/// and for each later request against that stored response: equal keys match.
pub fn vary_key(stored_resp: &HeaderMap, req: &HeaderMap) -> Option<VaryKey> {
    let mut names: Vec<HeaderName> = Vec::new();
    for item in list_items(stored_resp, VARY) {
        if item == b"*" {
            return None;
        }
        if let Ok(name) = HeaderName::from_bytes(item) {
            names.push(name);
        }
    }
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    names.dedup();
    let mut key = Vec::new();
    for name in &names {
        key.extend_from_slice(name.as_str().as_bytes());
        key.push(b':');
        match normalised_value(req, name) {
            Some(value) => {
                key.push(b'=');
                key.extend_from_slice(&value);
            }
            None => key.push(b'!'),
        }
        key.push(b'\n');
    }
    Some(VaryKey(key))
}

/// All lines of the field as one list: elements trimmed, whitespace runs collapsed, joined by
/// a bare comma.
fn normalised_value(req: &HeaderMap, name: &HeaderName) -> Option<Vec<u8>> {
    let mut lines = req.get_all(name).iter().peekable();
    lines.peek()?;
    let mut out = Vec::new();
    for element in lines.flat_map(|line| split_list(line.as_bytes())) {
        if !out.is_empty() {
            out.push(b',');
        }
        let mut in_space = false;
        for &b in element {
            if b == b' ' || b == b'\t' {
                in_space = true;
                continue;
            }
            if in_space {
                out.push(b' ');
                in_space = false;
            }
            out.push(b);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::collections::HashSet;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    }

    fn key(vary: &'static str, req: &[(&'static str, &'static str)]) -> Option<VaryKey> {
        vary_key(&headers(&[("vary", vary)]), &headers(req))
    }

    #[test]
    fn no_vary_gives_empty_key() {
        // RFC 9111 §4.1: without Vary every request matches.
        let k = vary_key(&HeaderMap::new(), &headers(&[("accept-encoding", "gzip")])).unwrap();
        assert!(k.is_empty());
        assert_eq!(k, VaryKey::empty());
    }

    #[test]
    fn vary_star_never_matches() {
        // RFC 9111 §4.1: "*" always fails to match.
        assert_eq!(key("*", &[]), None);
        assert_eq!(key("accept, *", &[]), None);
    }

    #[test]
    fn accept_encoding_variants_give_distinct_keys() {
        let gzip = key("Accept-Encoding", &[("accept-encoding", "gzip")]).unwrap();
        let br = key("Accept-Encoding", &[("accept-encoding", "br")]).unwrap();
        assert_ne!(gzip, br);
        let set: HashSet<VaryKey> = [gzip.clone(), br, gzip].into_iter().collect();
        assert_eq!(set.len(), 2, "Hash agrees with Eq");
    }

    #[test]
    fn list_whitespace_normalised() {
        // RFC 9111 §4.1: whitespace where allowed by the syntax is not significant.
        let a = key("accept-encoding", &[("accept-encoding", "gzip,br")]);
        let b = key("accept-encoding", &[("accept-encoding", "gzip,  br ")]);
        assert_eq!(a, b);
        let c = key("accept-encoding", &[("accept-encoding", "br,gzip")]);
        assert_ne!(a, c, "order of list elements can be significant");
    }

    #[test]
    fn multiple_field_lines_combined() {
        // RFC 9111 §4.1: combining multiple field lines with the same name.
        let one = key("accept", &[("accept", "text/html, image/png")]);
        let two = key(
            "accept",
            &[("accept", "text/html"), ("accept", "image/png")],
        );
        assert_eq!(one, two);
    }

    #[test]
    fn names_case_insensitive_and_order_free() {
        let req = [("accept", "a"), ("accept-language", "en")];
        assert_eq!(
            key("Accept, Accept-Language", &req),
            key("accept-language,ACCEPT,accept", &req)
        );
    }

    #[test]
    fn absent_differs_from_empty() {
        assert_ne!(key("x-a", &[]), key("x-a", &[("x-a", "")]));
    }

    #[test]
    fn bytes_round_trip_and_reject_garbage() {
        let k = key("accept-encoding, x-a", &[("accept-encoding", "gzip, br")]).unwrap();
        let back = VaryKey::from_bytes(k.as_bytes()).unwrap();
        assert_eq!(back, k);
        let fields: Vec<_> = back.fields().collect();
        assert_eq!(
            fields,
            vec![
                (&b"accept-encoding"[..], Some(&b"gzip,br"[..])),
                (&b"x-a"[..], None)
            ]
        );
        assert_eq!(VaryKey::from_bytes(b"").unwrap(), VaryKey::empty());
        for bad in [
            &b"no-newline:=x"[..],
            b"Upper:=x\n",
            b"a:?\n",
            b"b:!\na:!\n",
            b":=x\n",
        ] {
            assert!(
                VaryKey::from_bytes(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
