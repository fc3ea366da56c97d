//! The `[tier]` section: the switches of one tier (each by its client listener, this one
//! included) as listed (`peers`) and as found by a discovery source (`discovery`, the keys of
//! a `[[discovery]]` entry; with etcd this switch may register itself, `register`), whether
//! they share one cache, how long a hop to a peer may take, the peers' health checks, the hot
//! keys a switch keeps a local copy of, and what the shared view of the nodes feeds
//! (`admission`, `ejection`). What a request does with it is `crate::pipeline::tier`'s job; the
//! peers' checks are `crate::control::tier`'s, the source's `crate::control::tier_peers`'.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use super::discovery::{DiscoverySource, Located, RawDiscovery, SourceKind};

/// How a node's admission limit is applied with a tier (`tier.admission`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TierAdmission {
    /// Each switch applies the whole limit to its own requests (the node may see up to
    /// peers × limit).
    #[default]
    Local,
    /// Each switch applies its share: the limit divided by the live peers (see
    /// `crate::state::tier_share`).
    Shared,
}

/// Whether a node another switch has out is taken out here too (`tier.ejection`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TierEjection {
    /// Only this switch's own outlier detection, checks and back-off take a node out.
    #[default]
    Local,
    /// Out here when any live peer reports it out.
    Any,
    /// Out here when more than half of the switches that report it (this one included) have it
    /// out.
    Majority,
}

/// The `[tier]` section.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TierConfig {
    /// Every switch of the tier by its client listener (`IP:PORT`), this one included, as
    /// written; may be empty when `discovery` finds them.
    #[serde(default)]
    pub peers: Vec<String>,
    /// Where more peers come from: the keys of a `[[discovery]]` entry (`dns`, `etcd` with
    /// `prefix`, or `file`), as written.
    #[serde(default, rename = "discovery", skip_serializing)]
    pub(crate) discovery_raw: Option<Spanned<RawDiscovery>>,
    /// `discovery` resolved (filled by the parser).
    #[serde(skip_deserializing, default, rename = "discovery")]
    pub source: Option<DiscoverySource>,
    /// With an etcd `discovery`: this switch puts its listener address under the prefix with a
    /// lease it keeps alive, and deletes it on a clean shutdown.
    #[serde(default)]
    pub register: bool,
    /// The registration's lease: a killed switch's key vanishes this long after its last
    /// renewal.
    #[serde(default = "default_register_ttl", with = "humantime_serde")]
    pub register_ttl: Duration,
    /// Whether a node's admission limit is this switch's alone or shared out among the live
    /// peers.
    #[serde(default)]
    pub admission: TierAdmission,
    /// Whether a node the tier's gossip says other switches have out is out here too.
    #[serde(default)]
    pub ejection: TierEjection,
    /// `peers` resolved, in the same order (filled by the parser).
    #[serde(skip_deserializing, default)]
    pub addresses: Vec<SocketAddr>,
    /// With `[cache]` on, each cache key has one owner among the live peers and the tier holds
    /// one copy (default true). Off: each switch caches alone, PURGE and BAN still reach every
    /// peer.
    #[serde(default = "yes")]
    pub share_cache: bool,
    /// How long a hop to a key's owner may wait for the head of its answer; then the request
    /// goes to a node from this switch and the owner is taken for down.
    #[serde(default = "default_hop_timeout", with = "humantime_serde")]
    pub hop_timeout: Duration,
    /// How often each peer is checked.
    #[serde(default = "default_health_interval", with = "humantime_serde")]
    pub health_interval: Duration,
    /// How long a peer's check may take.
    #[serde(default = "default_health_timeout", with = "humantime_serde")]
    pub health_timeout: Duration,
    /// Failed checks in a row that take a peer out.
    #[serde(default = "default_fall")]
    pub fall: u32,
    /// Passed checks in a row that bring a peer back.
    #[serde(default = "default_rise")]
    pub rise: u32,
    /// A key this switch does not own, asked here this many times within one
    /// `local_copy_ttl`, is kept here too, for at most `local_copy_ttl` (0: never).
    #[serde(default = "default_local_copy_after")]
    pub local_copy_after: u32,
    /// How long a local copy of a hot key lives (and the window its asks are counted in).
    #[serde(default = "default_local_copy_ttl", with = "humantime_serde")]
    pub local_copy_ttl: Duration,
    /// How often this switch sends its own counts of every node to the other peers (the shared
    /// view of the nodes, over UDP on its listener's address and port); zero (`"off"`, `"0s"`):
    /// no gossip, the tier-wide view stays unknown.
    #[serde(default = "default_gossip_period", with = "period_or_off")]
    pub gossip_period: Duration,
}

/// A duration (`"100ms"`), or `"off"` / `"0"` for none.
mod period_or_off {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        match d.is_zero() {
            true => s.serialize_str("off"),
            false => s.serialize_str(&humantime::format_duration(*d).to_string()),
        }
    }

    /// What the key may hold: a string, or the number 0.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Written {
        Text(String),
        Number(i64),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = match Written::deserialize(d)? {
            Written::Number(0) => return Ok(Duration::ZERO),
            Written::Number(n) => {
                return Err(serde::de::Error::custom(format!(
                    "{n} is not a duration: write one such as \"100ms\", or 0 or \"off\""
                )))
            }
            Written::Text(t) => t,
        };
        match text.trim() {
            "off" | "0" => Ok(Duration::ZERO),
            t => humantime::parse_duration(t).map_err(|e| {
                serde::de::Error::custom(format!(
                    "`{t}` is not a duration such as \"100ms\" or \"off\": {e}"
                ))
            }),
        }
    }
}

fn yes() -> bool {
    true
}
fn default_hop_timeout() -> Duration {
    Duration::from_secs(1)
}
fn default_health_interval() -> Duration {
    Duration::from_secs(1)
}
fn default_health_timeout() -> Duration {
    Duration::from_millis(500)
}
fn default_fall() -> u32 {
    2
}
fn default_rise() -> u32 {
    2
}
fn default_local_copy_after() -> u32 {
    8
}
fn default_local_copy_ttl() -> Duration {
    Duration::from_secs(1)
}
fn default_gossip_period() -> Duration {
    Duration::from_millis(100)
}
fn default_register_ttl() -> Duration {
    Duration::from_secs(10)
}

impl TierConfig {
    /// Resolves `peers` into `addresses` and `discovery` into `source` (relative file paths
    /// from `base_dir`); the error names the key and the bad entry, with the span of the
    /// value at fault when it is in `discovery`.
    pub fn resolve(&mut self, base_dir: Option<&Path>) -> Result<(), (&'static str, Located)> {
        self.addresses = (self.peers.iter())
            .map(|p| crate::net::address::resolve_address(p))
            .collect::<Result<_, _>>()
            .map_err(|e| ("peers", (None, format!("tier.peers: {e}"))))?;
        if let Some(raw) = &self.discovery_raw {
            let mut sources = super::discovery::resolve(std::slice::from_ref(raw), base_dir)
                .map_err(|(span, e)| {
                    (
                        "discovery",
                        (span, e.replacen("discovery:", "tier.discovery:", 1)),
                    )
                })?;
            let mut source = sources.pop().expect("one entry, one source");
            if !raw.get_ref().is_named() {
                source.name = "tier".into();
            }
            self.source = Some(source);
        }
        Ok(())
    }

    /// The static peers with where they come from, as the tier's membership starts them.
    pub fn static_peers(&self) -> Vec<(SocketAddr, String)> {
        (self.addresses.iter())
            .map(|a| (*a, "static".to_string()))
            .collect()
    }

    /// The address this switch is known by among the peers: the first of its listeners that
    /// `peers` lists, else (with `discovery`) its first client listener that is not a wildcard
    /// address.
    pub fn own_address(&self, listen: &[SocketAddr]) -> Option<SocketAddr> {
        (self.addresses.iter().find(|a| listen.contains(a)).copied()).or_else(|| {
            (self.source.is_some())
                .then(|| listen.iter().find(|a| !a.ip().is_unspecified()).copied())
                .flatten()
        })
    }

    /// What the parser cannot check: at least one peer or a source, no peer twice, this
    /// switch (one of `listen`) among them or able to add itself, sane durations, keys that
    /// need another.
    pub fn check(&self, listen: &[SocketAddr]) -> Result<(), (&'static str, String)> {
        if self.addresses.is_empty() && self.source.is_none() {
            return Err((
                "peers",
                "tier.peers is empty: list every switch of the tier by its client listener \
                 (IP:PORT), this one included, or give tier.discovery"
                    .into(),
            ));
        }
        for (i, a) in self.addresses.iter().enumerate() {
            if self.addresses[..i].contains(a) {
                return Err(("peers", format!("tier.peers lists {a} twice")));
            }
        }
        if self.own_address(listen).is_none() {
            let ours: Vec<String> = listen.iter().map(|a| a.to_string()).collect();
            let ours = match ours.is_empty() {
                true => "(none)".to_string(),
                false => ours.join(", "),
            };
            let e = match self.source.is_some() {
                true => format!(
                    "tier.discovery: this switch listens only on wildcard addresses ({ours}), \
                     which its peers cannot reach it at; listen on the address they reach it at"
                ),
                false => format!(
                    "tier.peers must list this switch by its client listener: none of its \
                     listener addresses ({ours}) is among the peers ({}); a switch knows itself \
                     by its own listener address (start each with its own --listen)",
                    self.peers.join(", ")
                ),
            };
            return Err(("peers", e));
        }
        self.check_keys()?;
        let at_least = |key: &'static str, d: Duration, min_ms: u64| {
            (d < Duration::from_millis(min_ms))
                .then(|| (key, format!("tier.{key} must be at least {min_ms}ms")))
        };
        if let Some(e) = at_least("hop_timeout", self.hop_timeout, 1)
            .or_else(|| at_least("health_interval", self.health_interval, 10))
            .or_else(|| at_least("health_timeout", self.health_timeout, 1))
            .or_else(|| at_least("local_copy_ttl", self.local_copy_ttl, 1))
            .or_else(|| match self.gossip_period.is_zero() {
                true => None,
                false => at_least("gossip_period", self.gossip_period, 10),
            })
        {
            return Err(e);
        }
        if self.fall == 0 || self.rise == 0 {
            let key = if self.fall == 0 { "fall" } else { "rise" };
            return Err((key, format!("tier.{key} must be at least 1")));
        }
        Ok(())
    }

    /// The keys that only mean something with another: `register` with an etcd source,
    /// `ejection` with gossip.
    fn check_keys(&self) -> Result<(), (&'static str, String)> {
        let etcd = matches!(
            self.source.as_ref().map(|s| &s.kind),
            Some(SourceKind::Etcd(_))
        );
        if self.register && !etcd {
            return Err((
                "register",
                "tier.register puts this switch in etcd: give tier.discovery = { etcd = \
                 [\"http://HOST:2379\"], prefix = \"/…/\" }"
                    .into(),
            ));
        }
        if self.register_ttl < Duration::from_secs(1) {
            return Err((
                "register_ttl",
                "tier.register_ttl must be at least 1s (etcd's leases count whole seconds)".into(),
            ));
        }
        if self.ejection != TierEjection::Local && self.gossip_period.is_zero() {
            return Err((
                "ejection",
                "tier.ejection reads the peers' gossip: it needs tier.gossip_period on".into(),
            ));
        }
        Ok(())
    }

    /// The address this switch (known as `own`) sends from, so its peers know it by the IP of
    /// its listener (on loopback the kernel would pick 127.0.0.1 for every switch); none for a
    /// wildcard listener.
    pub fn source_ip(&self, own: SocketAddr) -> Option<std::net::IpAddr> {
        let ip = own.ip();
        (!ip.is_unspecified()).then_some(ip)
    }

    /// The discovery source in a phrase, with the registration.
    fn describe_source(&self, source: &DiscoverySource) -> String {
        let register = match self.register {
            true => format!(
                ", this switch registered under a {} lease",
                humantime::format_duration(self.register_ttl)
            ),
            false => String::new(),
        };
        format!("{} {}{register}", source.kind.name(), source.kind.target())
    }

    /// What `capstan check` prints of it.
    pub fn describe(&self, cache_on: bool) -> String {
        let d = humantime::format_duration;
        let cache = match (cache_on, self.share_cache) {
            (true, true) => format!(
                "one cache: each key owned by one live peer (consistent hashing), hop timeout {}",
                d(self.hop_timeout)
            ),
            (true, false) => "each switch caches alone (share_cache = false)".to_string(),
            (false, _) => "no [cache]: nothing to share yet (peers are checked)".to_string(),
        };
        let local = match self.local_copy_after {
            0 => "no local copies".to_string(),
            n => format!(
                "a key asked {n}+ times in {ttl} kept locally for {ttl}",
                ttl = d(self.local_copy_ttl)
            ),
        };
        let gossip = match self.gossip_period.is_zero() {
            true => "no shared view of the nodes (gossip_period = off)".to_string(),
            false => format!(
                "shared view of the nodes: own counts sent to every peer every {} (UDP on the listener's address)",
                d(self.gossip_period)
            ),
        };
        let peers = match (&self.source, self.addresses.len()) {
            (None, n) => format!("{n} peers: {}", self.peers.join(", ")),
            (Some(s), 0) => format!("peers from {}", self.describe_source(s)),
            (Some(s), n) => format!(
                "{n} peers: {}, and peers from {}",
                self.peers.join(", "),
                self.describe_source(s)
            ),
        };
        let shared = match (self.admission, self.ejection) {
            (TierAdmission::Local, TierEjection::Local) => String::new(),
            (a, e) => format!(
                "          admission limits {}; {}\n",
                match a {
                    TierAdmission::Local => "per switch",
                    TierAdmission::Shared => "shared: each switch takes limit / live peers",
                },
                match e {
                    TierEjection::Local => "nodes ejected by this switch alone",
                    TierEjection::Any => "a node any live peer has out is out here too",
                    TierEjection::Majority => {
                        "a node most of the reporting switches have out is out here too"
                    }
                }
            ),
        };
        format!(
            "tier      {peers}\n          {cache}\n          {local}; peers checked every {} (timeout {}, fall {}, rise {})\n          {gossip}\n{shared}",
            d(self.health_interval),
            d(self.health_timeout),
            self.fall,
            self.rise
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tier(text: &str) -> TierConfig {
        let mut t: TierConfig = toml::from_str(text).expect("parses");
        t.resolve(None).expect("resolves");
        t
    }

    fn listen(a: &str) -> Vec<SocketAddr> {
        vec![a.parse().unwrap()]
    }

    #[test]
    fn defaults_and_self() {
        let t = tier(r#"peers = ["127.0.0.2:8080", "127.0.0.3:8080"]"#);
        assert!(t.share_cache);
        assert_eq!(t.hop_timeout, Duration::from_secs(1));
        assert_eq!((t.fall, t.rise, t.local_copy_after), (2, 2, 8));
        assert_eq!(t.gossip_period, Duration::from_millis(100));
        assert_eq!(t.check(&listen("127.0.0.3:8080")), Ok(()));
        assert_eq!(
            t.own_address(&listen("127.0.0.3:8080")),
            Some("127.0.0.3:8080".parse().unwrap())
        );
        assert_eq!(t.own_address(&listen("127.0.0.9:8080")), None);
        assert_eq!((t.admission, t.ejection), Default::default());
    }

    #[test]
    fn self_missing_names_the_listeners_and_the_peers() {
        let t = tier(r#"peers = ["127.0.0.2:8080", "127.0.0.3:8080"]"#);
        let (key, e) = t.check(&listen("127.0.0.9:8080")).unwrap_err();
        assert_eq!(key, "peers");
        assert!(e.contains("127.0.0.9:8080"), "{e}");
        assert!(e.contains("127.0.0.2:8080, 127.0.0.3:8080"), "{e}");
    }

    #[test]
    fn empty_duplicate_and_bad_values_are_refused() {
        let t = tier("peers = []");
        assert!(t
            .check(&listen("127.0.0.2:8080"))
            .unwrap_err()
            .1
            .contains("empty"));
        let t = tier(r#"peers = ["127.0.0.2:8080", "127.0.0.2:8080"]"#);
        let e = t.check(&listen("127.0.0.2:8080")).unwrap_err().1;
        assert!(e.contains("twice"), "{e}");
        let t = tier(
            r#"peers = ["127.0.0.2:8080"]
fall = 0"#,
        );
        assert_eq!(t.check(&listen("127.0.0.2:8080")).unwrap_err().0, "fall");
        let mut t: TierConfig = toml::from_str(r#"peers = ["nowhere"]"#).unwrap();
        assert!(t.resolve(None).unwrap_err().1 .1.contains("no port"));
        let t = tier(
            r#"peers = ["127.0.0.2:8080"]
gossip_period = "1ms""#,
        );
        assert_eq!(
            t.check(&listen("127.0.0.2:8080")).unwrap_err().0,
            "gossip_period"
        );
        let off = tier("peers = [\"127.0.0.2:8080\"]\ngossip_period = \"off\"");
        assert_eq!(off.gossip_period, Duration::ZERO);
        let zero = tier("peers = [\"127.0.0.2:8080\"]\ngossip_period = 0");
        assert_eq!(zero.gossip_period, Duration::ZERO);
        assert_eq!(off.check(&listen("127.0.0.2:8080")), Ok(()));
        let e = toml::from_str::<TierConfig>("peers = []\ngossip_period = \"often\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("`often` is not a duration"), "{e}");
        assert!(toml::from_str::<TierConfig>("share_cache = true").is_ok());
        assert!(toml::from_str::<TierConfig>("peers = [\"127.0.0.2:1\"]\nbogus = 1").is_err());
    }

    #[test]
    fn discovery_may_stand_for_the_peers_and_names_its_errors() {
        let t = tier(
            "discovery = { etcd = [\"http://127.0.0.1:2379\"], prefix = \"/tier/\" }\n\
             register = true\nadmission = \"shared\"\nejection = \"majority\"",
        );
        let source = t.source.as_ref().expect("a source");
        assert_eq!((source.name.as_str(), source.kind.name()), ("tier", "etcd"));
        assert_eq!(t.admission, TierAdmission::Shared);
        assert_eq!(t.ejection, TierEjection::Majority);
        // Not listed: this switch is its first listener that is not a wildcard.
        let listen = vec![
            "0.0.0.0:80".parse().unwrap(),
            "127.0.0.7:8080".parse().unwrap(),
        ];
        assert_eq!(t.check(&listen), Ok(()));
        assert_eq!(t.own_address(&listen), Some(listen[1]));
        let e = t.check(&listen[..1]).unwrap_err().1;
        assert!(e.contains("wildcard"), "{e}");
        let t = tier("peers = []\ndiscovery = { file = \"peers.json\" }\nregister = true");
        let (key, e) = t.check(&listen).unwrap_err();
        assert_eq!(key, "register");
        assert!(e.contains("etcd"), "{e}");
        let t = tier("peers = []\ndiscovery = { dns = \"_capstan._tcp.tier.example\" }\ngossip_period = \"off\"\nejection = \"any\"");
        assert_eq!(t.check(&listen).unwrap_err().0, "ejection");
        let mut t: TierConfig = toml::from_str("discovery = { file = \"peers.txt\" }").unwrap();
        let (key, (_, e)) = t.resolve(None).unwrap_err();
        assert_eq!(key, "discovery");
        assert!(
            e.starts_with("tier.discovery: `peers.txt` must end in .json"),
            "{e}"
        );
        assert!(toml::from_str::<TierConfig>("admission = \"global\"").is_err());
    }
}
