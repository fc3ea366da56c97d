//! The `[cache]` section of the switch's configuration: tier sizes, eviction policy, the
//! RFC 9111 knobs an operator may turn, key rules per class, coalescing and purge access.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use capstan_cache::evict::EvictionKind;
use capstan_cache::key::KeyRules;
use capstan_cache::rfc::{targeted_field, CacheRules};
use serde::{Deserialize, Serialize};

/// A size in bytes, written `1048576`, `"64KB"`, `"256MiB"`, `"1.5GB"` (KB/MB/GB are powers of
/// 1000, KiB/MiB/GiB of 1024; `K`, `M`, `G` alone are taken as binary, as Varnish reads them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct ByteSize(pub u64);

impl FromStr for ByteSize {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let t = text.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (number, unit) = t.split_at(split);
        let number: f64 = number
            .parse()
            .map_err(|_| format!("`{text}` is not a size (try \"64KB\", \"256MiB\", \"1GiB\")"))?;
        let multiplier: u64 = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 1,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            "k" | "kib" => 1 << 10,
            "m" | "mib" => 1 << 20,
            "g" | "gib" => 1 << 30,
            "t" | "tib" => 1 << 40,
            other => {
                return Err(format!(
                    "unknown size unit `{other}` in `{text}` (B, KB, MB, GB, KiB, MiB, GiB)"
                ))
            }
        };
        let bytes = number * multiplier as f64;
        if !bytes.is_finite() || bytes >= u64::MAX as f64 {
            return Err(format!("size `{text}` is too large"));
        }
        Ok(ByteSize(bytes as u64))
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        match b {
            _ if b >= 1 << 30 && b.is_multiple_of(1 << 30) => write!(f, "{}GiB", b >> 30),
            _ if b >= 1 << 20 && b.is_multiple_of(1 << 20) => write!(f, "{}MiB", b >> 20),
            _ if b >= 1 << 10 && b.is_multiple_of(1 << 10) => write!(f, "{}KiB", b >> 10),
            _ => write!(f, "{b}B"),
        }
    }
}

impl Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(ByteSize(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// A source network allowed to send `PURGE` on a client listener, `10.0.0.0/8` or an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Network {
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            _ => ip,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

impl FromStr for Network {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("`{text}` is not an address or network (e.g. 10.0.0.0/8)"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= max)
                .ok_or_else(|| format!("`{text}`: prefix length must be 0 to {max}"))?,
            None => max,
        };
        Ok(Network { addr, prefix })
    }
}

impl Serialize for Network {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{}/{}", self.addr, self.prefix))
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// The `[cache]` section. Its presence turns the cache on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Byte budget of the memory tier.
    pub memory: ByteSize,
    /// Directory of the disk tier (kept across restarts); none by default.
    pub disk_path: Option<PathBuf>,
    /// Byte budget of the disk tier.
    pub disk_size: ByteSize,
    /// Eviction policy of both tiers: lru, lfu-da, gdsf, clfus, s3-fifo, sieve.
    pub policy: EvictionKind,
    /// Larger responses pass through uncached.
    pub max_object: ByteSize,
    /// Heuristic freshness: this fraction of the time since `Last-Modified` (RFC 9111 §4.2.2).
    pub heuristic_fraction: f64,
    /// Heuristic freshness never exceeds this.
    #[serde(with = "humantime_serde")]
    pub heuristic_max: Duration,
    /// Freshness for heuristically cachable responses with no `Last-Modified`; 0 = none.
    #[serde(with = "humantime_serde")]
    pub default_ttl: Duration,
    /// Varnish's grace: a stale entry is served for this long while one background request
    /// refreshes it, for responses that gave no `stale-while-revalidate` of their own (that
    /// window applies whatever this is). Default 0: off, as RFC 9111 §4.2.4 asks; when set, the
    /// cache serves stale answers nobody but the operator allowed (only responses that were
    /// fresh when received, never past `must-revalidate` and the like), and `capstan check`
    /// says so.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
    /// Serve a stale entry for this long when the node fails or answers 5xx, for responses that
    /// set no `stale-if-error` of their own. Default 0: off; same limits as `grace`.
    #[serde(with = "humantime_serde")]
    pub stale_if_error: Duration,
    /// Targeted cache-control fields this cache obeys (RFC 9213), most specific first: the
    /// first one a response carries (and that parses) replaces its `Cache-Control` and
    /// `Expires` for freshness and storability here. `[]` turns targeting off.
    pub targeted_fields: Vec<String>,
    /// Store responses that set cookies (off by default: they are usually per user).
    pub store_set_cookie: bool,
    /// Classes whose requests may be answered from the cache; all when absent.
    pub classes: Option<Vec<String>>,
    /// Concurrent misses for one key make one node request.
    pub coalesce: bool,
    /// A waiter gets the response head within this, or goes to a node itself.
    #[serde(with = "humantime_serde")]
    pub coalesce_timeout: Duration,
    /// Waiters per key beyond this go to a node themselves.
    pub coalesce_max_waiters: usize,
    /// How the key is made for every class ...
    pub key: KeyRules,
    /// ... and for the classes named here.
    pub class_keys: BTreeMap<String, KeyRules>,
    /// Networks allowed to send `PURGE` on a client listener (the admin listener always may).
    pub purge_from: Vec<Network>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        let rules = CacheRules::default();
        CacheConfig {
            memory: ByteSize(256 << 20),
            disk_path: None,
            disk_size: ByteSize(1 << 30),
            policy: EvictionKind::Lru,
            max_object: ByteSize(8 << 20),
            heuristic_fraction: rules.heuristic_fraction,
            heuristic_max: rules.heuristic_max,
            default_ttl: rules.default_ttl,
            grace: rules.grace,
            stale_if_error: rules.stale_if_error,
            targeted_fields: vec![capstan_cache::rfc::CDN_CACHE_CONTROL.to_owned()],
            store_set_cookie: rules.store_set_cookie,
            classes: None,
            coalesce: true,
            coalesce_timeout: Duration::from_secs(10),
            coalesce_max_waiters: 10_000,
            key: KeyRules::default(),
            class_keys: BTreeMap::new(),
            purge_from: Vec::new(),
        }
    }
}

impl CacheConfig {
    /// The RFC 9111 rules this section sets (a targeted field name that is not one is left
    /// out: [`CacheConfig::check`] refuses it first). Built once per configuration
    /// (`Cluster::cache_rules`), not per request.
    pub fn rules(&self) -> CacheRules {
        CacheRules {
            heuristic_fraction: self.heuristic_fraction,
            heuristic_max: self.heuristic_max,
            default_ttl: self.default_ttl,
            store_set_cookie: self.store_set_cookie,
            grace: self.grace,
            stale_if_error: self.stale_if_error,
            targeted_fields: (self.targeted_fields.iter())
                .filter_map(|name| targeted_field(name).ok())
                .collect(),
        }
    }

    /// How long the operator lets stale answers out beyond what responses and requests allow
    /// (RFC 9111 §4.2.4): the longer of `grace` and `stale_if_error`, `None` when both are 0.
    pub fn operator_stale(&self) -> Option<Duration> {
        let longest = self.grace.max(self.stale_if_error);
        (!longest.is_zero()).then_some(longest)
    }

    /// What the parser cannot check; `classes` are the configured class names. The error
    /// names the key at fault (for locating it in the file) and what is wrong.
    pub fn check(&self, classes: &[String]) -> Result<(), (&'static str, String)> {
        if self.memory.0 < 1 << 20 {
            return Err(("memory", "cache.memory must be at least 1MiB".into()));
        }
        if self.max_object.0 == 0 || self.max_object > self.memory {
            return Err((
                "max_object",
                format!(
                    "cache.max_object must be between 1 byte and cache.memory ({})",
                    self.memory
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.heuristic_fraction) {
            return Err((
                "heuristic_fraction",
                "cache.heuristic_fraction must be between 0 and 1 (RFC 9111 suggests 0.1)".into(),
            ));
        }
        if self.disk_path.is_some() && self.disk_size.0 < 1 << 20 {
            return Err(("disk_size", "cache.disk_size must be at least 1MiB".into()));
        }
        if self.coalesce_max_waiters == 0 {
            return Err((
                "coalesce_max_waiters",
                "cache.coalesce_max_waiters must be at least 1".into(),
            ));
        }
        if let Some(Err(e)) = (self.targeted_fields.iter())
            .map(|name| targeted_field(name))
            .find(Result::is_err)
        {
            return Err(("targeted_fields", e.to_string()));
        }
        let unknown = |name: &String| !classes.contains(name);
        if let Some(name) = self.classes.iter().flatten().find(|n| unknown(n)) {
            return Err((
                "classes",
                format!(
                    "cache.classes names `{name}`, which is not a class (classes: {})",
                    classes.join(", ")
                ),
            ));
        }
        if let Some(name) = self.class_keys.keys().find(|n| unknown(n)) {
            return Err((
                "class_keys",
                format!("cache.class_keys names `{name}`, which is not a class"),
            ));
        }
        let headers = self
            .key
            .headers
            .iter()
            .chain(self.class_keys.values().flat_map(|k| k.headers.iter()));
        for h in headers {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() || h.to_lowercase() != *h {
                return Err((
                    "key",
                    format!("cache key header `{h}` is not a lower-case header name"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_decimal_and_binary_units() {
        assert_eq!("1048576".parse::<ByteSize>().unwrap().0, 1 << 20);
        assert_eq!("64KB".parse::<ByteSize>().unwrap().0, 64_000);
        assert_eq!("256MiB".parse::<ByteSize>().unwrap().0, 256 << 20);
        assert_eq!("1.5GB".parse::<ByteSize>().unwrap().0, 1_500_000_000);
        assert_eq!("2g".parse::<ByteSize>().unwrap().0, 2 << 30);
        assert!("12 parsecs".parse::<ByteSize>().is_err());
        assert!("MiB".parse::<ByteSize>().is_err());
        assert_eq!(ByteSize(256 << 20).to_string(), "256MiB");
    }

    #[test]
    fn networks_match_their_prefix() {
        let n: Network = "10.1.0.0/16".parse().unwrap();
        assert!(n.contains("10.1.200.3".parse().unwrap()));
        assert!(!n.contains("10.2.0.1".parse().unwrap()));
        assert!(n.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one: Network = "127.0.0.1".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let all: Network = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("192.0.2.1".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Network>().is_err());
        assert!("ten".parse::<Network>().is_err());
    }

    #[test]
    fn check_names_the_bad_key() {
        let classes = vec!["static".to_string()];
        let ok = CacheConfig::default();
        assert!(ok.check(&classes).is_ok());
        let small = CacheConfig {
            memory: ByteSize(1000),
            ..CacheConfig::default()
        };
        assert_eq!(small.check(&classes).unwrap_err().0, "memory");
        let big_object = CacheConfig {
            max_object: ByteSize(1 << 40),
            ..CacheConfig::default()
        };
        assert_eq!(big_object.check(&classes).unwrap_err().0, "max_object");
        let unknown = CacheConfig {
            classes: Some(vec!["nope".into()]),
            ..CacheConfig::default()
        };
        assert_eq!(unknown.check(&classes).unwrap_err().0, "classes");
        let targeted = CacheConfig {
            targeted_fields: vec!["Cache-Control".into()],
            ..CacheConfig::default()
        };
        let (key, message) = targeted.check(&classes).unwrap_err();
        assert_eq!(key, "targeted_fields");
        assert!(message.contains("\"Cache-Control\""), "{message}");
    }

    #[test]
    fn serving_stale_is_off_unless_the_operator_turns_it_on() {
        let default = CacheConfig::default();
        assert_eq!(default.grace, Duration::ZERO);
        assert_eq!(default.stale_if_error, Duration::ZERO);
        assert_eq!(default.operator_stale(), None);
        assert_eq!(default.rules().targeted_fields, vec!["cdn-cache-control"]);
        let on = CacheConfig {
            grace: Duration::from_secs(10),
            stale_if_error: Duration::from_secs(60),
            ..CacheConfig::default()
        };
        assert_eq!(on.operator_stale(), Some(Duration::from_secs(60)));
    }
}
