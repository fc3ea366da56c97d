//! What HTTP says about caching (RFC 9111, with RFC 9110 conditionals and ranges, RFC 5861
//! stale extensions, RFC 9211 `Cache-Status`, RFC 9213 targeted fields such as
//! `CDN-Cache-Control`), for a shared cache — a reverse proxy in front of its own origin:
//! `s-maxage` and `proxy-revalidate` apply, `private` responses are not stored, and a stale
//! response is served only with an explicit permission (RFC 9111 §4.2.4).
//!
//! Pure functions over `http` types: no clock, no I/O, no async. Every instant is a
//! [`std::time::SystemTime`] argument (HTTP dates are wall-clock), every age or lifetime a
//! [`std::time::Duration`].
//!
//! How the pieces line up along a request (the store and the switch do the I/O):
//!
//! 1. Unsafe method answered 2xx/3xx → [`invalidation_targets`] (§4.4).
//! 2. `GET`/`HEAD` lookup: primary key, then [`vary_key`] of each stored variant (§4.1).
//! 3. Found → [`decide()`] ([`Decision::Fresh`], [`Decision::StaleAllowed`],
//!    [`Decision::StaleWhileRevalidate`], [`Decision::Revalidate`]; a stale answer carries its
//!    [`StaleWhy`]); nothing usable and [`only_if_cached`] → 504.
//! 4. Serving: [`stored_answer`]: [`client_conditional`] (304/412 with
//!    [`not_modified_headers`]), then [`parse_range`] ([`content_range`] or [`Multipart`]);
//!    `Age` from [`StoredTimes::age_header`], [`CacheStatus`] ([`CacheStatus::stale`] for stale
//!    answers).
//! 5. Revalidating: [`revalidation_headers`]; on 304 check [`not_modified_applies`], then
//!    [`merge_not_modified`] and [`StoredTimes::refresh`]; on error or 5xx,
//!    [`stale_if_error_allows`] / [`stale_if_error_why`].
//! 6. Filling: [`storability`] (§3), [`headers_to_store`], [`ensure_date`],
//!    [`StoredTimes::new`].
//!
//! Wherever the response's directives matter (storability, freshness, reuse, stale-if-error),
//! they are [`response_directives`]: the first valid field of [`CacheRules::targeted_fields`]
//! (default `CDN-Cache-Control`), else `Cache-Control` (and then `Expires`). Nothing here
//! removes `Cache-Control` or a targeted field from a response.

pub mod cache_control;
pub mod cache_status;
pub mod decide;
mod fields;
#[cfg(test)]
mod flow_tests;
pub mod freshness;
pub mod invalidate;
pub mod range;
pub mod rules;
pub mod serve;
pub mod storable;
pub mod targeted;
pub mod validate;
pub mod vary;

pub use cache_control::{CacheControl, FieldScope, MaxStale};
pub use cache_status::{CacheStatus, Fwd, CACHE_NAME};
pub use decide::{
    decide, only_if_cached, stale_if_error_allows, stale_if_error_why, Decision, StaleWhy,
};
pub use freshness::{ensure_date, freshness_lifetime, StoredTimes};
pub use invalidate::invalidation_targets;
pub use range::{
    content_range, parse_range, unsatisfied_content_range, Multipart, MultipartError, RangeAnswer,
    MAX_RANGES,
};
pub use rules::{targeted_field, CacheRules, RulesError, CDN_CACHE_CONTROL};
pub use serve::{stored_answer, StoredAnswer};
pub use storable::{
    headers_to_store, is_heuristically_cacheable, status_understood, storability, NotStorable,
};
pub use targeted::{parse_targeted, response_directives};
pub use validate::{
    client_conditional, merge_not_modified, not_modified_applies, not_modified_headers,
    revalidation_headers, Conditional,
};
pub use vary::{vary_key, VaryKey, VaryKeyError};
