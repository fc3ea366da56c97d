//! What the kinds' resolvers share with the common one: the entry as written
//! ([`RawDiscovery`]), the [`Located`] error and the duration parser. A leaf: it uses nothing
//! of `discovery`.

use std::ops::Range;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

/// One `[[discovery]]` entry (or `tier.discovery`), as written.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDiscovery {
    pub(super) file: Option<Spanned<String>>,
    pub(super) dns: Option<Spanned<String>>,
    pub(super) etcd: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) prefix: Option<Spanned<String>>,
    pub(super) resolvers: Option<Spanned<Vec<String>>>,
    pub(super) min_ttl: Option<Spanned<String>>,
    pub(super) max_ttl: Option<Spanned<String>>,
    pub(super) timeout: Option<Spanned<String>>,
    pub(super) attempts: Option<Spanned<u32>>,
    pub(super) name: Option<Spanned<String>>,
    pub(super) weight: Option<Spanned<u32>>,
    pub(super) hold: Option<Spanned<String>>,
    pub(super) interval: Option<Spanned<String>>,
}

impl RawDiscovery {
    /// Whether the entry names itself (`name`).
    pub(crate) fn is_named(&self) -> bool {
        self.name.is_some()
    }
}

/// A configuration error and the span of the key at fault.
pub(crate) type Located = (Option<Range<usize>>, String);

pub(super) fn duration(
    value: &Option<Spanned<String>>,
    key: &str,
    default: Duration,
) -> Result<Duration, Located> {
    match value {
        Some(v) => humantime::parse_duration(v.get_ref()).map_err(|e| {
            (
                Some(v.span()),
                format!("discovery: {key} `{}`: {e}", v.get_ref()),
            )
        }),
        None => Ok(default),
    }
}
