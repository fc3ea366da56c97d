//! `Cache-Control` parsing (RFC 9111 §5.2, stale-while-revalidate / stale-if-error from
//! RFC 5861, `Pragma: no-cache` from RFC 9111 §5.4).
//!
//! One [`CacheControl`] holds the request and the response directives alike; which ones matter
//! depends on where the field was read. Malformed or repeated directives resolve to the most
//! restrictive reading (RFC 9111 §4.2.1): an invalid `max-age` makes the response stale, a
//! repeated lifetime keeps the shortest one, and a directive whose argument cannot be read is
//! dropped when dropping it is the safe side.
//!
//! A cache reads a *response's* directives through [`super::targeted::response_directives`],
//! which prefers a valid targeted field such as `CDN-Cache-Control` (RFC 9213) over this one.

use std::time::Duration;

use http::header::{CACHE_CONTROL, PRAGMA};
use http::HeaderMap;

use super::fields::{list_items, parse_delta_seconds, split_list, unquote};

/// Which part of a response a `no-cache` or `private` directive covers (RFC 9111 §5.2.2.4,
/// §5.2.2.7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldScope {
    /// The unqualified directive: the whole response.
    All,
    /// The qualified form: only these fields (names lower-cased). A cache may store the rest of
    /// the response once these fields are removed (see [`super::storable::headers_to_store`]).
    Fields(Vec<String>),
}

impl FieldScope {
    /// Whether the directive covers the field `name` (case-insensitive).
    pub fn covers(&self, name: &str) -> bool {
        match self {
            FieldScope::All => true,
            FieldScope::Fields(names) => names.iter().any(|n| n.eq_ignore_ascii_case(name)),
        }
    }

    /// Combines two occurrences: the unqualified form wins, field lists are united.
    fn merge(self, other: FieldScope) -> FieldScope {
        match (self, other) {
            (FieldScope::Fields(mut a), FieldScope::Fields(b)) => {
                for name in b {
                    if !a.contains(&name) {
                        a.push(name);
                    }
                }
                FieldScope::Fields(a)
            }
            _ => FieldScope::All,
        }
    }
}

/// The request's `max-stale` (RFC 9111 §5.2.1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxStale {
    /// `max-stale` without a value: any staleness is acceptable.
    Any,
    /// `max-stale=N`: staleness up to N seconds.
    Limit(Duration),
}

impl MaxStale {
    /// Whether a response stale by `staleness` is acceptable ("exceeded its freshness lifetime
    /// by no more than" the limit: the limit itself is accepted).
    pub fn allows(self, staleness: Duration) -> bool {
        match self {
            MaxStale::Any => true,
            MaxStale::Limit(limit) => staleness <= limit,
        }
    }

    fn merge(self, other: MaxStale) -> MaxStale {
        match (self, other) {
            (MaxStale::Limit(a), MaxStale::Limit(b)) => MaxStale::Limit(a.min(b)),
            (MaxStale::Limit(a), MaxStale::Any) | (MaxStale::Any, MaxStale::Limit(a)) => {
                MaxStale::Limit(a)
            }
            (MaxStale::Any, MaxStale::Any) => MaxStale::Any,
        }
    }
}

/// The parsed `Cache-Control` directives of one message. Absent directives are `None`/`false`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheControl {
    /// `max-age` (request and response). Invalid or missing argument: zero, i.e. stale
    /// (RFC 9111 §4.2.1). Repeated: the shortest.
    pub max_age: Option<Duration>,
    /// `s-maxage` (response, shared caches). Invalid: zero. Implies `proxy-revalidate`.
    pub s_maxage: Option<Duration>,
    /// `no-cache` (request: no field list; response: optionally qualified).
    pub no_cache: Option<FieldScope>,
    /// `no-store` (request and response).
    pub no_store: bool,
    /// `private` (response), optionally qualified.
    pub private: Option<FieldScope>,
    /// `public` (response).
    pub public: bool,
    /// `must-revalidate` (response).
    pub must_revalidate: bool,
    /// `proxy-revalidate` (response; applies to us, a shared cache).
    pub proxy_revalidate: bool,
    /// `must-understand` (response, RFC 9111 §5.2.2.3).
    pub must_understand: bool,
    /// `no-transform` (request and response).
    pub no_transform: bool,
    /// `immutable` (response, RFC 8246).
    pub immutable: bool,
    /// `stale-while-revalidate=N` (response, RFC 5861 §3). Invalid argument: ignored.
    pub stale_while_revalidate: Option<Duration>,
    /// `stale-if-error=N` (request and response, RFC 5861 §4). Invalid argument: ignored.
    pub stale_if_error: Option<Duration>,
    /// `max-stale[=N]` (request). Invalid argument: ignored (no stale accepted).
    pub max_stale: Option<MaxStale>,
    /// `min-fresh=N` (request). Invalid argument: ignored. Repeated: the longest.
    pub min_fresh: Option<Duration>,
    /// `only-if-cached` (request).
    pub only_if_cached: bool,
}

impl CacheControl {
    /// Parses every `Cache-Control` field line of a message. Directive names are
    /// case-insensitive; arguments may be tokens or quoted strings; unknown directives are
    /// ignored (RFC 9111 §5.2.3).
    pub fn parse(headers: &HeaderMap) -> CacheControl {
        let mut cc = CacheControl::default();
        for item in list_items(headers, CACHE_CONTROL) {
            if let Ok(item) = std::str::from_utf8(item) {
                cc.apply(item);
            }
        }
        cc
    }

    /// Parses a request's directives, adding `Pragma: no-cache` as `no-cache` when the request
    /// has no `Cache-Control` field (RFC 9111 §5.4).
    pub fn parse_request(headers: &HeaderMap) -> CacheControl {
        let mut cc = CacheControl::parse(headers);
        if !headers.contains_key(CACHE_CONTROL) && pragma_no_cache(headers) {
            cc.no_cache = Some(FieldScope::All);
        }
        cc
    }

    /// Whether a stale copy of a response carrying these directives must never be served
    /// without revalidation by a shared cache: `no-cache` (any form), `must-revalidate`,
    /// `proxy-revalidate`, or `s-maxage` (which implies proxy-revalidate, RFC 9111 §5.2.2.10).
    pub fn stale_forbidden(&self) -> bool {
        self.no_cache.is_some()
            || self.must_revalidate
            || self.proxy_revalidate
            || self.s_maxage.is_some()
    }

    /// Whether the response states its own freshness: `max-age` or `s-maxage` (an `Expires`
    /// field is the other way; see [`super::freshness`]).
    pub fn has_explicit_lifetime(&self) -> bool {
        self.max_age.is_some() || self.s_maxage.is_some()
    }

    fn apply(&mut self, item: &str) {
        let (name, arg) = match item.split_once('=') {
            Some((name, arg)) => (name.trim(), Some(unquote(arg.trim()))),
            None => (item.trim(), None),
        };
        let arg = arg.as_deref();
        let seconds = || arg.and_then(parse_delta_seconds);
        match name.to_ascii_lowercase().as_str() {
            "max-age" => self.max_age = shortest(self.max_age, seconds().unwrap_or_default()),
            "s-maxage" => self.s_maxage = shortest(self.s_maxage, seconds().unwrap_or_default()),
            "stale-while-revalidate" => {
                if let Some(s) = seconds() {
                    self.stale_while_revalidate = shortest(self.stale_while_revalidate, s);
                }
            }
            "stale-if-error" => {
                if let Some(s) = seconds() {
                    self.stale_if_error = shortest(self.stale_if_error, s);
                }
            }
            "min-fresh" => {
                if let Some(s) = seconds() {
                    self.min_fresh = Some(self.min_fresh.map_or(s, |old| old.max(s)));
                }
            }
            "max-stale" => self.apply_max_stale(arg),
            "no-cache" => self.no_cache = Some(merge_scope(self.no_cache.take(), arg)),
            "private" => self.private = Some(merge_scope(self.private.take(), arg)),
            "no-store" => self.no_store = true,
            "public" => self.public = true,
            "must-revalidate" => self.must_revalidate = true,
            "proxy-revalidate" => self.proxy_revalidate = true,
            "must-understand" => self.must_understand = true,
            "no-transform" => self.no_transform = true,
            "immutable" => self.immutable = true,
            "only-if-cached" => self.only_if_cached = true,
            _ => {}
        }
    }

    fn apply_max_stale(&mut self, arg: Option<&str>) {
        let new = match arg {
            None => MaxStale::Any,
            Some(arg) => match parse_delta_seconds(arg) {
                Some(limit) => MaxStale::Limit(limit),
                None => return,
            },
        };
        self.max_stale = Some(self.max_stale.map_or(new, |old| old.merge(new)));
    }
}

fn shortest(old: Option<Duration>, new: Duration) -> Option<Duration> {
    Some(old.map_or(new, |old| old.min(new)))
}

/// The scope of a `no-cache` / `private` occurrence merged into any earlier one. An empty field
/// list says nothing we could honour partially, so it reads as the whole response.
fn merge_scope(old: Option<FieldScope>, arg: Option<&str>) -> FieldScope {
    let names: Vec<String> = arg
        .map(|a| {
            split_list(a.as_bytes())
                .into_iter()
                .filter_map(|n| std::str::from_utf8(n).ok())
                .map(str::to_ascii_lowercase)
                .collect()
        })
        .unwrap_or_default();
    let new = if names.is_empty() {
        FieldScope::All
    } else {
        FieldScope::Fields(names)
    };
    match old {
        Some(old) => old.merge(new),
        None => new,
    }
}

fn pragma_no_cache(headers: &HeaderMap) -> bool {
    list_items(headers, PRAGMA)
        .iter()
        .any(|item| item.eq_ignore_ascii_case(b"no-cache"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn cc(lines: &[&'static str]) -> CacheControl {
        let mut h = HeaderMap::new();
        for line in lines {
            h.append(CACHE_CONTROL, HeaderValue::from_static(line));
        }
        CacheControl::parse(&h)
    }

    const fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn parses_lists_across_lines_case_insensitively() {
        // RFC 9111 §5.2: directive names are case-insensitive; lines form one list.
        let c = cc(&["Max-Age=60, PUBLIC", "s-maxage=\"30\", must-revalidate"]);
        assert_eq!(c.max_age, Some(secs(60)));
        assert_eq!(
            c.s_maxage,
            Some(secs(30)),
            "quoted-string argument accepted"
        );
        assert!(c.public && c.must_revalidate);
        assert!(!c.no_store && c.private.is_none());
    }

    #[test]
    fn invalid_max_age_reads_as_stale() {
        // RFC 9111 §4.2.1: invalid freshness information should be considered stale.
        assert_eq!(cc(&["max-age=abc"]).max_age, Some(Duration::ZERO));
        assert_eq!(cc(&["max-age"]).max_age, Some(Duration::ZERO));
        assert_eq!(cc(&["s-maxage=-5"]).s_maxage, Some(Duration::ZERO));
    }

    #[test]
    fn duplicate_max_age_keeps_most_restrictive() {
        // RFC 9111 §4.2.1: conflicting directives, the most restrictive is honoured.
        assert_eq!(cc(&["max-age=100", "max-age=10"]).max_age, Some(secs(10)));
        assert_eq!(cc(&["min-fresh=5, min-fresh=50"]).min_fresh, Some(secs(50)));
    }

    #[test]
    fn no_cache_and_private_field_lists() {
        // RFC 9111 §5.2.2.4, §5.2.2.7: qualified forms list field names.
        let c = cc(&[r#"no-cache="Set-Cookie, X-Foo", private="x-bar""#]);
        assert_eq!(
            c.no_cache,
            Some(FieldScope::Fields(vec![
                "set-cookie".into(),
                "x-foo".into()
            ]))
        );
        assert!(c.private.as_ref().unwrap().covers("X-Bar"));
        assert!(!c.private.as_ref().unwrap().covers("x-foo"));
        let both = cc(&[r#"no-cache="a""#, "no-cache"]);
        assert_eq!(both.no_cache, Some(FieldScope::All), "unqualified wins");
    }

    #[test]
    fn request_directives_max_stale_min_fresh_only_if_cached() {
        // RFC 9111 §5.2.1
        let c = cc(&["max-stale, min-fresh=20, only-if-cached, no-store"]);
        assert_eq!(c.max_stale, Some(MaxStale::Any));
        assert_eq!(c.min_fresh, Some(secs(20)));
        assert!(c.only_if_cached && c.no_store);
        assert_eq!(
            cc(&["max-stale=7"]).max_stale,
            Some(MaxStale::Limit(secs(7)))
        );
        assert_eq!(
            cc(&["max-stale=x"]).max_stale,
            None,
            "unreadable: no stale accepted"
        );
        assert_eq!(
            cc(&["max-stale, max-stale=3"]).max_stale,
            Some(MaxStale::Limit(secs(3)))
        );
    }

    #[test]
    fn rfc5861_extensions_and_flags() {
        // RFC 5861 §3, §4; RFC 8246; RFC 9111 §5.2.2.6, §5.2.2.3
        let c = cc(&[
            "stale-while-revalidate=30, stale-if-error=600, immutable, no-transform, must-understand, proxy-revalidate",
        ]);
        assert_eq!(c.stale_while_revalidate, Some(secs(30)));
        assert_eq!(c.stale_if_error, Some(secs(600)));
        assert!(c.immutable && c.no_transform && c.must_understand && c.proxy_revalidate);
        assert_eq!(cc(&["stale-if-error=soon"]).stale_if_error, None);
    }

    #[test]
    fn pragma_no_cache_only_without_cache_control() {
        // RFC 9111 §5.4
        let mut h = HeaderMap::new();
        h.insert(PRAGMA, HeaderValue::from_static("No-Cache"));
        assert_eq!(
            CacheControl::parse_request(&h).no_cache,
            Some(FieldScope::All)
        );
        assert_eq!(
            CacheControl::parse(&h).no_cache,
            None,
            "responses ignore Pragma"
        );
        h.insert(CACHE_CONTROL, HeaderValue::from_static("max-age=5"));
        assert_eq!(CacheControl::parse_request(&h).no_cache, None);
    }

    #[test]
    fn s_maxage_forbids_stale() {
        // RFC 9111 §5.2.2.10: s-maxage implies proxy-revalidate.
        assert!(cc(&["s-maxage=5"]).stale_forbidden());
        assert!(cc(&["no-cache"]).stale_forbidden());
        assert!(!cc(&["max-age=5, public"]).stale_forbidden());
    }
}
