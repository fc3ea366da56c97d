//! Targeted cache-control fields (RFC 9213): `CDN-Cache-Control` and any field names the
//! operator lists in [`super::rules::CacheRules::targeted_fields`] (e.g. a
//! `Capstan-CDN-Cache-Control` aimed at this cache alone).
//!
//! RFC 9213 §2.2: the cache keeps an ordered *target list*. In a response, the first field of
//! that list which is present, non-empty and valid decides the caching policy for this cache,
//! and the response's `Cache-Control` **and** `Expires` are then ignored for freshness and
//! storability (they still travel downstream untouched: nothing here edits a response). When no
//! listed field is present and valid, `Cache-Control`/`Expires` apply as usual. A field that is
//! empty or does not parse is ignored as if absent (§2.1).
//!
//! The value is a Structured Fields Dictionary (RFC 8941 §3.2): lower-case keys, `max-age=60`
//! an Integer, a bare `no-store` the Boolean true. Parameters on members are ignored. Directive
//! values, read to the safe side as `Cache-Control` is (RFC 9111 §4.2.1):
//!
//! - `max-age`, `s-maxage`: an Integer ≥ 0 (saturating at 2^31, RFC 9111 §1.2.2); any other
//!   value (negative, a String, a Decimal, bare) reads as 0, i.e. stale at once;
//! - `stale-while-revalidate`, `stale-if-error`: an Integer ≥ 0, anything else is ignored;
//! - `no-store`, `no-cache`, `private`, `must-revalidate`, `proxy-revalidate`: set unless the
//!   value is the Boolean false (`no-store=?0`). A qualified `private="f"` or `no-cache="f"`
//!   (a String) is read as the unqualified directive — the cache does not store, respectively
//!   always revalidates, the response — because the field stripping of
//!   [`super::storable::headers_to_store`] follows `Cache-Control` only;
//! - `public`, `immutable`, `must-understand`: set only by the Boolean true;
//! - anything else (including request-only directives) is ignored (RFC 9111 §5.2.3).
//!
//! RFC 9213 §2.2 requires `max-age`, `must-revalidate`, `no-store`, `no-cache` and `private`;
//! the others are those this cache supports in `Cache-Control` (its SHOULD). The parser never
//! allocates: it walks the field bytes once.

use std::time::Duration;

use http::header::AsHeaderName;
use http::{HeaderMap, HeaderName};

use super::cache_control::{CacheControl, FieldScope};
use super::fields::DELTA_SECONDS_MAX;

/// The response directives this cache follows, and where they came from (RFC 9213 §2.2).
///
/// Returns the directives of the first field in `targets` that is present and valid together
/// with its index in `targets`, or, when none is, the `Cache-Control` directives and `None`.
/// When the index is `Some`, `Expires` must be ignored as well.
pub fn response_directives(
    resp: &HeaderMap,
    targets: &[HeaderName],
) -> (CacheControl, Option<usize>) {
    for (i, name) in targets.iter().enumerate() {
        if let Some(cc) = parse_targeted(resp, name) {
            return (cc, Some(i));
        }
    }
    (CacheControl::parse(resp), None)
}

/// Parses every line of the targeted field `name` as one Structured Fields Dictionary. `None`
/// when the field is absent, empty or invalid (RFC 9213 §2.1: then ignored).
pub fn parse_targeted(resp: &HeaderMap, name: impl AsHeaderName) -> Option<CacheControl> {
    let mut lines = resp.get_all(name).iter().peekable();
    lines.peek()?;
    let mut cc = CacheControl::default();
    for line in lines {
        // RFC 8941 §4.2: lines are joined with commas and parsed as one; a line that is not a
        // complete non-empty dictionary would make the joined value invalid as well.
        parse_dictionary(line.as_bytes(), &mut cc)?;
    }
    Some(cc)
}

/// The value of one dictionary member, as far as the directives care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    /// An Integer.
    Integer(i64),
    /// The Boolean true (also a bare key).
    True,
    /// The Boolean false.
    False,
    /// A String.
    String,
    /// A Decimal, Token, Byte Sequence or Inner List.
    Other,
}

fn parse_dictionary(line: &[u8], cc: &mut CacheControl) -> Option<()> {
    let mut p = Parser {
        s: line.trim_ascii(),
        i: 0,
    };
    if p.s.is_empty() {
        return None;
    }
    loop {
        let key = p.key()?;
        let value = if p.eat(b'=') {
            p.item_or_inner_list()?
        } else {
            p.parameters()?;
            Value::True
        };
        apply(cc, key, value);
        p.skip_ows();
        if p.done() {
            return Some(());
        }
        if !p.eat(b',') {
            return None;
        }
        p.skip_ows();
        if p.done() {
            return None; // trailing comma
        }
    }
}

/// RFC 8941 §4.2.2: a repeated key overwrites the earlier value, so every directive is set,
/// not merged.
fn apply(cc: &mut CacheControl, key: &[u8], value: Value) {
    let seconds = |v: Value| match v {
        Value::Integer(n) if n >= 0 => Some(Duration::from_secs((n as u64).min(DELTA_SECONDS_MAX))),
        _ => None,
    };
    let restrictive = value != Value::False;
    let permissive = value == Value::True;
    let scope = restrictive.then_some(FieldScope::All);
    match key {
        b"max-age" => cc.max_age = Some(seconds(value).unwrap_or_default()),
        b"s-maxage" => cc.s_maxage = Some(seconds(value).unwrap_or_default()),
        b"stale-while-revalidate" => cc.stale_while_revalidate = seconds(value),
        b"stale-if-error" => cc.stale_if_error = seconds(value),
        b"no-store" => cc.no_store = restrictive,
        b"no-cache" => cc.no_cache = scope,
        b"private" => cc.private = scope,
        b"must-revalidate" => cc.must_revalidate = restrictive,
        b"proxy-revalidate" => cc.proxy_revalidate = restrictive,
        b"public" => cc.public = permissive,
        b"immutable" => cc.immutable = permissive,
        b"must-understand" => cc.must_understand = permissive,
        _ => {}
    }
}

/// A cursor over one field line, following the parsing algorithms of RFC 8941 §4.2.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn done(&self) -> bool {
        self.i >= self.s.len()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn skip_sp(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }

    fn skip_ows(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.i += 1;
        }
    }

    /// §4.2.3.3: `( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" )`.
    fn key(&mut self) -> Option<&'a [u8]> {
        let start = self.i;
        match self.peek() {
            Some(b'a'..=b'z' | b'*') => self.i += 1,
            _ => return None,
        }
        while let Some(b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*') = self.peek() {
            self.i += 1;
        }
        Some(&self.s[start..self.i])
    }

    /// §4.2.1.1 / §4.2.3: an Inner List or a Bare Item, then parameters.
    fn item_or_inner_list(&mut self) -> Option<Value> {
        if self.eat(b'(') {
            loop {
                self.skip_sp();
                if self.eat(b')') {
                    break;
                }
                self.bare_item()?;
                self.parameters()?;
                if !matches!(self.peek(), Some(b' ' | b')')) {
                    return None;
                }
            }
            self.parameters()?;
            return Some(Value::Other);
        }
        let value = self.bare_item()?;
        self.parameters()?;
        Some(value)
    }

    /// §4.2.3.2: `*( ";" *SP key [ "=" bare-item ] )`.
    fn parameters(&mut self) -> Option<()> {
        while self.eat(b';') {
            self.skip_sp();
            self.key()?;
            if self.eat(b'=') {
                self.bare_item()?;
            }
        }
        Some(())
    }

    /// §4.2.3.1
    fn bare_item(&mut self) -> Option<Value> {
        match self.peek()? {
            b'-' | b'0'..=b'9' => self.number(),
            b'"' => self.string(),
            b'*' | b'a'..=b'z' | b'A'..=b'Z' => {
                self.i += 1;
                while let Some(b) = self.peek() {
                    if is_tchar(b) || b == b':' || b == b'/' {
                        self.i += 1;
                    } else {
                        break;
                    }
                }
                Some(Value::Other)
            }
            b':' => {
                self.i += 1;
                while let Some(b) = self.peek() {
                    if b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'=') {
                        self.i += 1;
                    } else {
                        break;
                    }
                }
                self.eat(b':').then_some(Value::Other)
            }
            b'?' => {
                self.i += 1;
                let v = match self.peek()? {
                    b'1' => Value::True,
                    b'0' => Value::False,
                    _ => return None,
                };
                self.i += 1;
                Some(v)
            }
            _ => None,
        }
    }

    /// §4.2.4: Integer (at most 15 digits) or Decimal (at most 12 integer and 3 fraction
    /// digits).
    fn number(&mut self) -> Option<Value> {
        let negative = self.eat(b'-');
        let start = self.i;
        let mut value: i64 = 0;
        while let Some(d @ b'0'..=b'9') = self.peek() {
            value = value * 10 + i64::from(d - b'0');
            self.i += 1;
            if self.i - start > 15 {
                return None;
            }
        }
        let int_digits = self.i - start;
        if int_digits == 0 {
            return None;
        }
        if !self.eat(b'.') {
            return Some(Value::Integer(if negative { -value } else { value }));
        }
        if int_digits > 12 {
            return None;
        }
        let frac_start = self.i;
        while let Some(b'0'..=b'9') = self.peek() {
            self.i += 1;
        }
        let frac = self.i - frac_start;
        (1..=3).contains(&frac).then_some(Value::Other)
    }

    /// §4.2.5: printable ASCII, `\` escaping only `"` and `\`.
    fn string(&mut self) -> Option<Value> {
        self.i += 1;
        loop {
            match self.peek()? {
                b'"' => {
                    self.i += 1;
                    return Some(Value::String);
                }
                b'\\' => {
                    self.i += 1;
                    if !matches!(self.peek()?, b'"' | b'\\') {
                        return None;
                    }
                    self.i += 1;
                }
                0x20..=0x7e => self.i += 1,
                _ => return None,
            }
        }
    }
}

/// RFC 9110 §5.6.2 tchar.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn targets() -> Vec<HeaderName> {
        vec![
            HeaderName::from_static("capstan-cdn-cache-control"),
            HeaderName::from_static("cdn-cache-control"),
        ]
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in pairs {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    }

    fn cdn(value: &'static str) -> Option<CacheControl> {
        parse_targeted(
            &headers(&[("cdn-cache-control", value)]),
            "CDN-Cache-Control",
        )
    }

    const fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn dictionary_directives() {
        // RFC 9213 §2.1, §2.2; RFC 8941 §3.2
        let c = cdn("max-age=60, s-maxage=30;x=1, must-revalidate, stale-if-error=5").unwrap();
        assert_eq!(c.max_age, Some(secs(60)));
        assert_eq!(c.s_maxage, Some(secs(30)), "parameters ignored");
        assert!(c.must_revalidate && !c.no_store);
        assert_eq!(c.stale_if_error, Some(secs(5)));
        let flags = cdn("no-store, no-cache, private, public=?1, immutable").unwrap();
        assert!(flags.no_store && flags.public && flags.immutable);
        assert_eq!(flags.no_cache, Some(FieldScope::All));
        assert_eq!(flags.private, Some(FieldScope::All));
        let off = cdn("no-store=?0, public=?0, max-age=10").unwrap();
        assert!(
            !off.no_store && !off.public,
            "Boolean false leaves it unset"
        );
    }

    #[test]
    fn qualified_private_and_no_cache_read_as_unqualified() {
        // RFC 9213 §2.1: field lists are Strings; this cache honours them in full.
        let c = cdn(r#"private="set-cookie", no-cache="x-a""#).unwrap();
        assert_eq!(c.private, Some(FieldScope::All));
        assert_eq!(c.no_cache, Some(FieldScope::All));
    }

    #[test]
    fn wrong_typed_lifetimes_read_as_stale() {
        // RFC 9111 §4.2.1 reading applied to targeted fields.
        for v in [
            "max-age=-1",
            "max-age=\"60\"",
            "max-age=1.5",
            "max-age",
            "max-age=abc",
        ] {
            assert_eq!(cdn(v).unwrap().max_age, Some(Duration::ZERO), "{v}");
        }
        assert_eq!(
            cdn("stale-while-revalidate=\"9\"")
                .unwrap()
                .stale_while_revalidate,
            None
        );
        assert_eq!(
            cdn("max-age=99999999999").unwrap().max_age,
            Some(secs(DELTA_SECONDS_MAX)),
            "RFC 9111 §1.2.2 saturation"
        );
    }

    #[test]
    fn repeated_key_last_wins() {
        // RFC 8941 §4.2.2: the later member overwrites.
        assert_eq!(
            cdn("max-age=10, max-age=60").unwrap().max_age,
            Some(secs(60))
        );
        let h = headers(&[
            ("cdn-cache-control", "max-age=10"),
            ("cdn-cache-control", "no-store"),
        ]);
        let c = parse_targeted(&h, "cdn-cache-control").unwrap();
        assert!(
            c.no_store && c.max_age == Some(secs(10)),
            "lines join into one dictionary"
        );
    }

    #[test]
    fn invalid_or_empty_field_is_absent() {
        // RFC 9213 §2.1: a field that fails to parse, or is empty, is ignored.
        for bad in [
            "",
            "   ",
            "Max-Age=60",
            "max-age=60,",
            "max-age=60 no-store",
            "max-age=1234567890123456",
            "no-store=?2",
            "private=\"unterminated",
            "max-age=60;",
            ", max-age=60",
        ] {
            assert_eq!(cdn(bad), None, "{bad:?}");
        }
        let h = headers(&[
            ("cdn-cache-control", "max-age=10"),
            ("cdn-cache-control", ""),
        ]);
        assert_eq!(parse_targeted(&h, "cdn-cache-control"), None, "empty line");
        assert_eq!(parse_targeted(&HeaderMap::new(), "cdn-cache-control"), None);
    }

    #[test]
    fn other_sf_values_parse() {
        // RFC 8941 §3: tokens, byte sequences, inner lists, decimals are valid values.
        let c = cdn("x=tok/en:1, y=:aGk=:, z=(1 \"a\" b);p, w=-1.25, max-age=7").unwrap();
        assert_eq!(c.max_age, Some(secs(7)));
    }

    #[test]
    fn first_valid_target_wins_then_cache_control_ignored() {
        // RFC 9213 §2.2: target list order, invalid fields skipped, fall back to Cache-Control.
        let both = headers(&[
            ("cache-control", "max-age=5"),
            ("cdn-cache-control", "max-age=60"),
            ("capstan-cdn-cache-control", "max-age=600"),
        ]);
        let (cc, from) = response_directives(&both, &targets());
        assert_eq!((cc.max_age, from), (Some(secs(600)), Some(0)));
        let own_invalid = headers(&[
            ("cache-control", "max-age=5"),
            ("cdn-cache-control", "max-age=60"),
            ("capstan-cdn-cache-control", "max-age=6O0"),
        ]);
        let (cc, from) = response_directives(&own_invalid, &targets());
        assert_eq!((cc.max_age, from), (Some(secs(60)), Some(1)));
        let none_valid = headers(&[("cache-control", "max-age=5"), ("cdn-cache-control", "")]);
        let (cc, from) = response_directives(&none_valid, &targets());
        assert_eq!((cc.max_age, from), (Some(secs(5)), None));
        let unlisted = headers(&[
            ("cache-control", "max-age=5"),
            ("cdn-cache-control", "no-store"),
        ]);
        let (cc, from) = response_directives(&unlisted, &[]);
        assert!(
            !cc.no_store && from.is_none(),
            "a field not on the list changes nothing"
        );
    }

    #[test]
    fn targeted_no_store_hides_cache_control_max_age() {
        // RFC 9213 §2.2: Cache-Control is ignored entirely once a targeted field applies.
        let h = headers(&[
            ("cache-control", "max-age=60"),
            ("cdn-cache-control", "no-store"),
        ]);
        let (cc, from) = response_directives(&h, &targets());
        assert!(cc.no_store && cc.max_age.is_none() && from == Some(1));
    }
}
