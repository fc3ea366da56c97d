//! Field-value syntax shared by the rules: comma lists with quoted strings (RFC 9110 §5.6.1),
//! quoted-string unescaping (§5.6.4), delta-seconds (RFC 9111 §1.2.2), HTTP dates (RFC 9110
//! §5.6.7) and entity tags (§8.8.3).
//!
//! Everything here is lenient on input and never panics: a malformed element is skipped or
//! reported as `None`, and the caller picks the conservative reading.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use http::header::AsHeaderName;
use http::{HeaderMap, HeaderValue};

/// RFC 9111 §1.2.2: a delta-seconds too large to represent is taken as 2^31.
pub(crate) const DELTA_SECONDS_MAX: u64 = 1 << 31;

/// Splits one field line at the commas that are outside quoted strings, trimming optional
/// whitespace and dropping empty elements (recipients must accept `a,,b`, RFC 9110 §5.6.1).
pub(crate) fn split_list(line: &[u8]) -> Vec<&[u8]> {
    let mut items = Vec::new();
    let mut start = 0;
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, &b) in line.iter().enumerate() {
        if in_quotes {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_quotes = false,
                _ => {}
            }
        } else if b == b'"' {
            in_quotes = true;
        } else if b == b',' {
            push_trimmed(&mut items, &line[start..i]);
            start = i + 1;
        }
    }
    push_trimmed(&mut items, &line[start..]);
    items
}

fn push_trimmed<'a>(items: &mut Vec<&'a [u8]>, item: &'a [u8]) {
    let item = item.trim_ascii();
    if !item.is_empty() {
        items.push(item);
    }
}

/// All list elements of every line of the field `name`, in order (multiple field lines are one
/// list, RFC 9110 §5.3).
pub(crate) fn list_items<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Vec<&[u8]> {
    headers
        .get_all(name)
        .iter()
        .flat_map(|line| split_list(line.as_bytes()))
        .collect()
}

/// Removes the quotes and backslash escapes of a quoted-string; a token is returned as is.
pub(crate) fn unquote(value: &str) -> Cow<'_, str> {
    let Some(inner) = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .filter(|_| value.len() >= 2)
    else {
        return Cow::Borrowed(value);
    };
    if !inner.contains('\\') {
        return Cow::Borrowed(inner);
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(next) = chars.next() {
                out.push(next);
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Parses delta-seconds (`1*DIGIT`), saturating at 2^31 seconds as RFC 9111 §1.2.2 requires.
pub(crate) fn parse_delta_seconds(value: &str) -> Option<Duration> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs = value
        .bytes()
        .try_fold(0u64, |acc, b| {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        })
        .unwrap_or(u64::MAX)
        .min(DELTA_SECONDS_MAX);
    Some(Duration::from_secs(secs))
}

/// Parses a run of ASCII digits as u64, saturating on overflow (range positions may exceed any
/// real length; a huge value must read as "past the end", not as an error).
pub(crate) fn parse_u64_saturating(value: &str) -> Option<u64> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(
        value
            .bytes()
            .try_fold(0u64, |acc, b| {
                acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
            })
            .unwrap_or(u64::MAX),
    )
}

/// An HTTP-date in any of the three forms RFC 9110 §5.6.7 requires recipients to accept.
pub(crate) fn parse_date(value: &HeaderValue) -> Option<SystemTime> {
    httpdate::parse_http_date(value.to_str().ok()?.trim()).ok()
}

/// The first line of a date field, parsed; `None` when absent or invalid.
pub(crate) fn header_date<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Option<SystemTime> {
    headers.get(name).and_then(parse_date)
}

/// A date precondition field, which a recipient must ignore unless it is exactly one valid
/// HTTP-date (RFC 9110 §13.1.3, §13.1.4): a second field line makes it invalid.
pub(crate) fn single_date<K: AsHeaderName + Clone>(
    headers: &HeaderMap,
    name: K,
) -> Option<SystemTime> {
    let mut lines = headers.get_all(name.clone()).iter();
    let first = lines.next()?;
    if lines.next().is_some() {
        return None;
    }
    parse_date(first)
}

/// An entity tag (RFC 9110 §8.8.3): the opaque bytes between the quotes, and its weakness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EntityTag<'a> {
    pub weak: bool,
    pub opaque: &'a [u8],
}

impl<'a> EntityTag<'a> {
    /// Strong comparison (RFC 9110 §8.8.3.2): both strong and byte-identical.
    pub fn strong_eq(&self, other: &EntityTag<'_>) -> bool {
        !self.weak && !other.weak && self.opaque == other.opaque
    }

    /// Weak comparison: the opaque tags are byte-identical, weakness ignored.
    pub fn weak_eq(&self, other: &EntityTag<'_>) -> bool {
        self.opaque == other.opaque
    }

    /// Parses one entity tag that fills the whole input (after trimming whitespace).
    pub fn parse(input: &'a [u8]) -> Option<EntityTag<'a>> {
        match parse_etag_prefix(input.trim_ascii()) {
            Some((tag, [])) => Some(tag),
            _ => None,
        }
    }
}

/// Reads one entity tag at the start of `input`, returning it and the rest. Entity tags may
/// contain commas and backslashes, so they are not split as a generic list is.
fn parse_etag_prefix(input: &[u8]) -> Option<(EntityTag<'_>, &[u8])> {
    let (weak, rest) = match input.strip_prefix(b"W/") {
        Some(rest) => (true, rest),
        None => (false, input),
    };
    let rest = rest.strip_prefix(b"\"")?;
    let end = rest.iter().position(|&b| b == b'"')?;
    let opaque = &rest[..end];
    if opaque.iter().any(|&b| b < 0x21 || b == 0x7f) {
        return None;
    }
    Some((EntityTag { weak, opaque }, &rest[end + 1..]))
}

/// The members of an `If-Match` / `If-None-Match` field: `*` or a list of entity tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EtagList<'a> {
    Any,
    /// The tags that parsed; a malformed field yields an empty list, which matches nothing.
    Tags(Vec<EntityTag<'a>>),
}

impl EtagList<'_> {
    /// Whether the list matches the stored tag under the given comparison.
    pub fn matches(
        &self,
        stored: Option<&EntityTag<'_>>,
        eq: fn(&EntityTag<'_>, &EntityTag<'_>) -> bool,
    ) -> bool {
        match (self, stored) {
            (EtagList::Any, _) => true,
            (EtagList::Tags(tags), Some(stored)) => tags.iter().any(|t| eq(t, stored)),
            (EtagList::Tags(_), None) => false,
        }
    }
}

/// Parses every line of an entity-tag list field; `None` when the field is absent.
pub(crate) fn etag_list<K: AsHeaderName>(headers: &HeaderMap, name: K) -> Option<EtagList<'_>> {
    let mut lines = headers.get_all(name).iter().peekable();
    lines.peek()?;
    let mut tags = Vec::new();
    for line in lines {
        let mut rest = line.as_bytes().trim_ascii();
        if rest == b"*" {
            return Some(EtagList::Any);
        }
        while !rest.is_empty() {
            rest = rest.trim_ascii_start();
            if let Some(after) = rest.strip_prefix(b",") {
                rest = after;
                continue;
            }
            match parse_etag_prefix(rest) {
                Some((tag, after)) => {
                    tags.push(tag);
                    rest = after;
                }
                None => return Some(EtagList::Tags(Vec::new())),
            }
        }
    }
    Some(EtagList::Tags(tags))
}

/// The stored response's entity tag, when it has exactly one well-formed `ETag`.
pub(crate) fn stored_etag(headers: &HeaderMap) -> Option<EntityTag<'_>> {
    EntityTag::parse(headers.get(http::header::ETAG)?.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_list_keeps_commas_inside_quoted_strings() {
        let items = split_list(br#"a, b="x,y" ,, c"#);
        assert_eq!(items, vec![&b"a"[..], &br#"b="x,y""#[..], &b"c"[..]]);
    }

    #[test]
    fn unquote_removes_escapes() {
        assert_eq!(unquote(r#""a\"b""#), r#"a"b"#);
        assert_eq!(unquote("token"), "token");
        assert_eq!(unquote("\""), "\"");
    }

    #[test]
    fn delta_seconds_saturate_at_two_to_the_31() {
        // RFC 9111 §1.2.2
        assert_eq!(
            parse_delta_seconds("99999999999999999999999"),
            Some(Duration::from_secs(DELTA_SECONDS_MAX))
        );
        assert_eq!(parse_delta_seconds("12"), Some(Duration::from_secs(12)));
        assert_eq!(parse_delta_seconds("-1"), None);
        assert_eq!(parse_delta_seconds("1.5"), None);
    }

    #[test]
    fn etag_list_reads_commas_inside_tags_and_weak_prefix() {
        let mut h = HeaderMap::new();
        h.insert("if-none-match", HeaderValue::from_static(r#"W/"a,b", "c""#));
        let Some(EtagList::Tags(tags)) = etag_list(&h, "if-none-match") else {
            panic!("expected tags");
        };
        assert_eq!(tags.len(), 2);
        assert!(tags[0].weak && tags[0].opaque == b"a,b");
        assert!(!tags[1].weak && tags[1].opaque == b"c");
    }
}
