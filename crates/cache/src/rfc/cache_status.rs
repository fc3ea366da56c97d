//! The `Cache-Status` response field (RFC 9211): how the cache handled a request, as one list
//! member naming this cache, e.g. `capstan; hit; ttl=42` or `capstan; fwd=miss; stored`.
//!
//! The caller appends the value to any `Cache-Status` already on the response from upstream
//! caches (RFC 9211 §2: each cache adds its member at the end).

use http::HeaderValue;

use super::decide::StaleWhy;

/// The name this cache uses in `Cache-Status`.
pub const CACHE_NAME: &str = "capstan";

/// Why the request went forward (RFC 9211 §2.2 `fwd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fwd {
    /// Configured not to use the cache for this request.
    Bypass,
    /// The request method is not cachable.
    Method,
    /// Nothing stored for the URI.
    UriMiss,
    /// Stored responses exist but none matches the `Vary` fields.
    VaryMiss,
    /// Miss, without saying which kind.
    Miss,
    /// The request's directives (e.g. `no-cache`) required going forward.
    Request,
    /// The stored response was stale and had to be validated.
    Stale,
    /// Only part of the response was stored.
    Partial,
}

impl Fwd {
    /// The parameter value RFC 9211 §2.2 defines.
    pub fn as_str(self) -> &'static str {
        match self {
            Fwd::Bypass => "bypass",
            Fwd::Method => "method",
            Fwd::UriMiss => "uri-miss",
            Fwd::VaryMiss => "vary-miss",
            Fwd::Miss => "miss",
            Fwd::Request => "request",
            Fwd::Stale => "stale",
            Fwd::Partial => "partial",
        }
    }
}

/// One `Cache-Status` member. Set `hit` when the response came from the cache without going
/// forward (a stale-while-revalidate answer is a hit); set `fwd` otherwise. `ttl` is the
/// remaining freshness in seconds, negative once stale ([`super::freshness::StoredTimes::ttl`]);
/// `detail` is a token such as [`super::storable::NotStorable::reason`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CacheStatus {
    /// Served from the cache without going forward.
    pub hit: bool,
    /// Went forward, and why.
    pub fwd: Option<Fwd>,
    /// The status the next hop returned when forwarded.
    pub fwd_status: Option<u16>,
    /// The response was stored (or a stored one updated).
    pub stored: bool,
    /// The request was collapsed into another one for the same response.
    pub collapsed: bool,
    /// Remaining freshness in seconds; negative when stale.
    pub ttl: Option<i64>,
    /// Implementation-specific detail: a token, or any text (sent as a quoted string).
    pub detail: Option<&'static str>,
}

impl CacheStatus {
    /// Served from the cache, with `ttl` seconds of freshness left (negative when stale).
    pub fn hit(ttl: i64) -> CacheStatus {
        CacheStatus {
            hit: true,
            ttl: Some(ttl),
            ..CacheStatus::default()
        }
    }

    /// A stale stored response answered the request, with the permission that allowed it
    /// (RFC 9111 §4.2.4): `fwd=stale`, the (negative) `ttl`, and `detail` =
    /// [`StaleWhy::detail`], e.g. `capstan; hit; fwd=stale; ttl=-3; detail=stale-while-revalidate`.
    /// `hit` is set unless the answer came after a failed forward ([`StaleWhy::after_error`]:
    /// then the caller adds `fwd_status` when the origin answered). `fwd=stale` says the stored
    /// response was stale when selected; with `hit`, the forward is the background refresh.
    pub fn stale(ttl: i64, why: StaleWhy) -> CacheStatus {
        CacheStatus {
            hit: !why.after_error(),
            fwd: Some(Fwd::Stale),
            ttl: Some(ttl),
            detail: Some(why.detail()),
            ..CacheStatus::default()
        }
    }

    /// Went forward for `fwd`; `stored` and `collapsed` as the member says.
    pub fn forward(
        fwd: Fwd,
        stored: bool,
        collapsed: bool,
        detail: Option<&'static str>,
    ) -> CacheStatus {
        CacheStatus {
            fwd: Some(fwd),
            stored,
            collapsed,
            detail,
            ..CacheStatus::default()
        }
    }

    /// The field value for this member, named [`CACHE_NAME`].
    pub fn header_value(&self) -> HeaderValue {
        self.header_value_named(CACHE_NAME)
    }

    /// The field value with another cache name (a token or, if not one, a quoted string).
    pub fn header_value_named(&self, name: &str) -> HeaderValue {
        let mut out = sf_item(name);
        if self.hit {
            out.push_str("; hit");
        }
        if let Some(fwd) = self.fwd {
            out.push_str("; fwd=");
            out.push_str(fwd.as_str());
        }
        if let Some(status) = self.fwd_status {
            out.push_str(&format!("; fwd-status={status}"));
        }
        if self.stored {
            out.push_str("; stored");
        }
        if self.collapsed {
            out.push_str("; collapsed");
        }
        if let Some(ttl) = self.ttl {
            out.push_str(&format!("; ttl={ttl}"));
        }
        if let Some(detail) = self.detail {
            out.push_str("; detail=");
            out.push_str(&sf_item(detail));
        }
        // Every piece is a token, an integer or an escaped printable-ASCII string.
        HeaderValue::try_from(out).unwrap_or_else(|_| HeaderValue::from_static(CACHE_NAME))
    }
}

/// A Structured Fields token when `s` is one (RFC 8941 §3.3.4), else a quoted string with
/// non-printable characters dropped.
fn sf_item(s: &str) -> String {
    let is_token = s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '*')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(&b));
    if is_token {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars().filter(|c| (' '..='~').contains(c)) {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hit_with_ttl() {
        // RFC 9211 §2.1, §2.7
        let s = CacheStatus {
            hit: true,
            ttl: Some(42),
            ..CacheStatus::default()
        };
        assert_eq!(s.header_value(), "capstan; hit; ttl=42");
    }

    #[test]
    fn miss_stored_with_forward_status() {
        // RFC 9211 §2.2, §2.3, §2.5
        let s = CacheStatus {
            fwd: Some(Fwd::UriMiss),
            fwd_status: Some(200),
            stored: true,
            ..CacheStatus::default()
        };
        assert_eq!(
            s.header_value(),
            "capstan; fwd=uri-miss; fwd-status=200; stored"
        );
    }

    #[test]
    fn stale_negative_ttl_collapsed_and_detail() {
        // RFC 9211 §2.6, §2.7, §2.8
        let s = CacheStatus {
            fwd: Some(Fwd::Stale),
            collapsed: true,
            ttl: Some(-3),
            detail: Some("no-store"),
            ..CacheStatus::default()
        };
        assert_eq!(
            s.header_value(),
            "capstan; fwd=stale; collapsed; ttl=-3; detail=no-store"
        );
        let text = CacheStatus {
            fwd: Some(Fwd::Request),
            detail: Some("client said \"no\""),
            ..CacheStatus::default()
        };
        assert_eq!(
            text.header_value_named("edge 1"),
            r#""edge 1"; fwd=request; detail="client said \"no\"""#
        );
    }

    #[test]
    fn every_fwd_value_is_rfc9211() {
        let all = [
            Fwd::Bypass,
            Fwd::Method,
            Fwd::UriMiss,
            Fwd::VaryMiss,
            Fwd::Miss,
            Fwd::Request,
            Fwd::Stale,
            Fwd::Partial,
        ];
        let names: Vec<&str> = all.iter().map(|f| f.as_str()).collect();
        assert_eq!(
            names,
            [
                "bypass",
                "method",
                "uri-miss",
                "vary-miss",
                "miss",
                "request",
                "stale",
                "partial"
            ]
        );
    }

    #[test]
    fn stale_answer_says_why() {
        // RFC 9211 §2.2 fwd=stale, §2.8 detail; RFC 9111 §4.2.4 permission named.
        assert_eq!(
            CacheStatus::stale(-3, StaleWhy::ResponseStaleWhileRevalidate).header_value(),
            "capstan; hit; fwd=stale; ttl=-3; detail=stale-while-revalidate"
        );
        assert_eq!(
            CacheStatus::stale(-1, StaleWhy::OperatorGrace).header_value(),
            "capstan; hit; fwd=stale; ttl=-1; detail=grace"
        );
        assert_eq!(
            CacheStatus::stale(-9, StaleWhy::ClientMaxStale).header_value(),
            "capstan; hit; fwd=stale; ttl=-9; detail=max-stale"
        );
        let mut err = CacheStatus::stale(-20, StaleWhy::ResponseStaleIfError);
        err.fwd_status = Some(503);
        assert_eq!(
            err.header_value(),
            "capstan; fwd=stale; fwd-status=503; ttl=-20; detail=stale-if-error"
        );
        for why in [StaleWhy::ClientStaleIfError, StaleWhy::OperatorStaleIfError] {
            let v = CacheStatus::stale(-1, why).header_value();
            assert!(!v.to_str().unwrap().contains("; hit"), "{v:?}");
            assert!(
                !v.to_str().unwrap().contains('"'),
                "detail is a token: {v:?}"
            );
        }
    }
}
