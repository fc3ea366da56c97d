//! The operator's knobs for the places where RFC 9111 leaves a choice to the cache: heuristic
//! freshness (§4.2.2), whether `Set-Cookie` responses are shared, how long stale content may
//! be served while refreshing or when the origin fails (Varnish's grace, RFC 5861), and which
//! targeted cache-control fields this cache obeys (RFC 9213).
//!
//! Serving stale is off unless someone allowed it (RFC 9111 §4.2.4): by default `grace` and
//! `stale_if_error` are zero, so only the response (`stale-while-revalidate`, `stale-if-error`)
//! or the request (`max-stale`, `stale-if-error`) can let a stale response out without
//! validation. An operator who sets them explicitly extends that to responses that were fresh
//! when received — never to a response stored with a zero lifetime (no freshness information,
//! `max-age=0`, an `Expires` at or before `Date`, an invalid `Expires`) or one whose `Age`
//! already passed its `max-age`, and never past a
//! directive that forbids stale use (`must-revalidate`, `proxy-revalidate`, `s-maxage`,
//! `no-cache`).

use std::time::Duration;

use http::HeaderName;
use serde::{Deserialize, Deserializer};

/// The targeted field for every CDN cache (RFC 9213 §3).
pub const CDN_CACHE_CONTROL: &str = "CDN-Cache-Control";

/// A name for [`CacheRules::targeted_fields`]: a valid field name that is not one of the
/// fields with other semantics (`Cache-Control`, `Expires`, `Pragma`).
pub fn targeted_field(name: &str) -> Result<HeaderName, RulesError> {
    match HeaderName::from_bytes(name.as_bytes()) {
        Ok(n) if !has_other_semantics(&n) => Ok(n),
        _ => Err(RulesError::TargetedField(name.to_owned())),
    }
}

fn has_other_semantics(name: &HeaderName) -> bool {
    matches!(name.as_str(), "cache-control" | "expires" | "pragma")
}

fn targeted_fields<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<HeaderName>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    (names.iter().map(|n| targeted_field(n)))
        .collect::<Result<_, _>>()
        .map_err(serde::de::Error::custom)
}

/// Cache policy parameters. Every field has a default (see [`CacheRules::default`]), so a
/// configuration names only what it changes. Durations deserialize in serde's plain form
/// (`{ secs, nanos }`); a configuration layer with humantime strings converts before building
/// this.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheRules {
    /// Fraction of (Date − Last-Modified) used as the heuristic lifetime (RFC 9111 §4.2.2
    /// suggests 10 %). Default 0.1. Must be finite and in `0.0..=1.0` (see [`Self::validate`]).
    pub heuristic_fraction: f64,
    /// Cap on any heuristic lifetime. Default one day.
    pub heuristic_max: Duration,
    /// Lifetime given to responses that may be heuristically cached but have no usable
    /// `Last-Modified` to base a heuristic on. Default zero (store, but revalidate each use).
    pub default_ttl: Duration,
    /// Store responses carrying `Set-Cookie`. Default false: a shared cache would hand one
    /// client's cookie to others.
    pub store_set_cookie: bool,
    /// How long past staleness an entry may be served while a background refresh runs
    /// (Varnish grace), for responses that allow it by none of their own directives. Default
    /// zero: off (RFC 9111 §4.2.4); a response's own `stale-while-revalidate` gives its own
    /// window whatever this is. Applies only to responses that were fresh when received, and
    /// never to responses that forbid serving stale (`must-revalidate` …).
    pub grace: Duration,
    /// How long past staleness an entry may be served when the origin fails, for responses that
    /// set no `stale-if-error` of their own. Default zero: off. Same limits as `grace`.
    pub stale_if_error: Duration,
    /// Targeted cache-control fields this cache obeys (RFC 9213 §2.2), most specific first,
    /// e.g. `["Capstan-CDN-Cache-Control", "CDN-Cache-Control"]`. In a response, the first of
    /// these that is present and valid replaces `Cache-Control` and `Expires` for this cache's
    /// freshness and storability (see [`super::targeted`]). Names are case-insensitive. Default
    /// `["CDN-Cache-Control"]` (RFC 9213 §3: a reverse proxy in front of its own origin is a
    /// CDN-role cache); empty turns targeted fields off. Held parsed, so a hit looks a field
    /// up without parsing its name again; build them with [`targeted_field`].
    #[serde(deserialize_with = "targeted_fields")]
    pub targeted_fields: Vec<HeaderName>,
}

impl Default for CacheRules {
    fn default() -> Self {
        CacheRules {
            heuristic_fraction: 0.1,
            heuristic_max: Duration::from_secs(24 * 60 * 60),
            default_ttl: Duration::ZERO,
            store_set_cookie: false,
            grace: Duration::ZERO,
            stale_if_error: Duration::ZERO,
            targeted_fields: vec![HeaderName::from_static("cdn-cache-control")],
        }
    }
}

/// A configuration value the rules cannot work with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RulesError {
    /// `heuristic_fraction` is NaN, infinite, negative or above 1.
    #[error("cache rules: heuristic_fraction must be between 0 and 1, got {0}")]
    HeuristicFraction(f64),
    /// An entry of `targeted_fields` is not a valid field name, or names a field with other
    /// semantics (`Cache-Control`, `Expires`, `Pragma`).
    #[error("cache rules: targeted_fields: {0:?} is not a targeted cache-control field name")]
    TargetedField(String),
}

impl CacheRules {
    /// Checks the values a configuration file could get wrong. The rules never panic on bad
    /// values (a bad fraction disables heuristics), but a configuration loader should call this
    /// and report the error rather than run with a silently changed policy.
    pub fn validate(&self) -> Result<(), RulesError> {
        let f = self.heuristic_fraction;
        if !(f.is_finite() && (0.0..=1.0).contains(&f)) {
            return Err(RulesError::HeuristicFraction(f));
        }
        if let Some(name) = self.targeted_fields.iter().find(|n| has_other_semantics(n)) {
            return Err(RulesError::TargetedField(name.to_string()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_rfc_suggestions() {
        // RFC 9111 §4.2.2: "10% of this interval"
        let r = CacheRules::default();
        assert_eq!(r.heuristic_fraction, 0.1);
        assert_eq!(r.heuristic_max, Duration::from_secs(86_400));
        assert!(!r.store_set_cookie);
        assert_eq!(
            r.grace,
            Duration::ZERO,
            "RFC 9111 §4.2.4: no stale unless allowed"
        );
        assert_eq!(r.stale_if_error, Duration::ZERO);
        assert_eq!(
            r.targeted_fields,
            vec![targeted_field(CDN_CACHE_CONTROL).unwrap()]
        );
        assert!(r.validate().is_ok());
    }

    #[test]
    fn validate_rejects_bad_targeted_fields() {
        for bad in ["", "CDN Cache-Control", "cache-control", "Expires"] {
            assert_eq!(
                targeted_field(bad),
                Err(RulesError::TargetedField(bad.into()))
            );
        }
        let r = CacheRules {
            targeted_fields: vec![http::header::CACHE_CONTROL],
            ..CacheRules::default()
        };
        assert_eq!(
            r.validate(),
            Err(RulesError::TargetedField("cache-control".into()))
        );
        let own = CacheRules {
            targeted_fields: vec![
                targeted_field("Capstan-CDN-Cache-Control").unwrap(),
                targeted_field("CDN-Cache-Control").unwrap(),
            ],
            ..CacheRules::default()
        };
        assert!(own.validate().is_ok());
    }

    #[test]
    fn validate_rejects_bad_fraction() {
        for bad in [f64::NAN, -0.1, 1.5, f64::INFINITY] {
            let r = CacheRules {
                heuristic_fraction: bad,
                ..CacheRules::default()
            };
            assert!(r.validate().is_err(), "{bad} accepted");
        }
    }
}
