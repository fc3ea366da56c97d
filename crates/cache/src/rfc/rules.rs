//! The operator's knobs for the places where RFC 9111 leaves a choice to the cache: heuristic
//! freshness (§4.2.2), whether `Set-Cookie` responses are shared, and how long stale content may
//! be served while refreshing or when the origin fails (Varnish's grace, RFC 5861).

use std::time::Duration;

use serde::Deserialize;

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
    /// (Varnish grace). Zero turns it off; a response's `stale-while-revalidate` may extend it.
    /// Never applies to responses that forbid serving stale (`must-revalidate` …).
    pub grace: Duration,
    /// How long past staleness an entry may be served when the origin fails, for responses that
    /// set no `stale-if-error` of their own. Default zero.
    pub stale_if_error: Duration,
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
        }
    }
}

/// A configuration value the rules cannot work with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RulesError {
    /// `heuristic_fraction` is NaN, infinite, negative or above 1.
    #[error("cache rules: heuristic_fraction must be between 0 and 1, got {0}")]
    HeuristicFraction(f64),
}

impl CacheRules {
    /// Checks the values a configuration file could get wrong. The rules never panic on bad
    /// values (a bad fraction disables heuristics), but a configuration loader should call this
    /// and report the error rather than run with a silently changed policy.
    pub fn validate(&self) -> Result<(), RulesError> {
        let f = self.heuristic_fraction;
        if f.is_finite() && (0.0..=1.0).contains(&f) {
            Ok(())
        } else {
            Err(RulesError::HeuristicFraction(f))
        }
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
        assert_eq!(r.grace, Duration::ZERO);
        assert!(r.validate().is_ok());
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
