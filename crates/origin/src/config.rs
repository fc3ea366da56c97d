use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use capstan_core::report::Partition;
use capstan_model::NodeParams;
use capstan_workload::{Dist, TreeKind};
use serde::{Deserialize, Serialize};

use crate::error::OriginError;

/// Whether the node spends modelled time or real resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Resources {
    /// Requests wait in modelled CPU/disk/NIC queues (the `capstan-model` crate) in real time:
    /// many nodes on one small machine behave like separate machines.
    Emulated,
    /// A calibrated CPU loop, real synchronous disk I/O and real files read from `data_dir`.
    Real,
}

impl Resources {
    pub fn name(&self) -> &'static str {
        match self {
            Resources::Emulated => "emulated",
            Resources::Real => "real",
        }
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Resources {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "emulated" => Ok(Resources::Emulated),
            "real" => Ok(Resources::Real),
            _ => Err(format!(
                "unknown resources {s:?} (expected emulated or real)"
            )),
        }
    }
}

/// Demands of the dynamic services, in milliseconds at speed 1. Defaults are the Jones thesis's
/// light-load response times (Table 2): CPU light 40 ms, CPU heavy 100 ms, disk 100 ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Services {
    /// `/cgi-bin/cpu_light.cgi`: CPU time.
    pub cpu_light_ms: f64,
    /// `/cgi-bin/cpu_med.cgi` (the thesis's "CPU heavy"): CPU time.
    pub cpu_med_ms: f64,
    /// `/cgi-bin/disk_load.cgi`: disk time in emulated mode (read, synchronous write and delete
    /// of the file, as one FCFS disk job).
    pub disk_load_ms: f64,
    /// `/secure/…`: pay a full SSL handshake (RSA) on every request. The origin cannot see TLS
    /// sessions, so `false` means "sessions are always resumed" (bulk costs only).
    pub secure_handshake_every_request: bool,
}

impl Default for Services {
    fn default() -> Self {
        Services {
            cpu_light_ms: 40.0,
            cpu_med_ms: 100.0,
            disk_load_ms: 100.0,
            secure_handshake_every_request: true,
        }
    }
}

/// Everything `capstan origin` can be told, from flags or a TOML file (same names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OriginConfig {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Name reported in `/_capstan/load` (defaults to the listen address).
    pub name: Option<String>,
    pub tree: TreeKind,
    pub seed: u64,
    /// File count for the `polygraph` and `cap` trees (default 2000).
    pub files: Option<usize>,
    pub resources: Resources,
    /// Where `real` mode writes and reads the tree (default: a directory under the system temp
    /// directory named after tree and seed).
    pub data_dir: Option<PathBuf>,
    /// Length of the "last interval" window of `/_capstan/load`, in milliseconds.
    pub load_interval_ms: u64,
    /// Memory for file bodies kept in memory after their first request, shared by every later
    /// response (so that a hit costs a reference count, not a read and a copy). Default: 64 MiB
    /// in real mode (the whole WebStone or webstone-2000 tree), 8 MiB in emulated mode (where
    /// many nodes may share a machine). Files beyond it are read (real) or synthesised
    /// (emulated) on every request. In real mode a kept file does not see later changes on disk.
    pub body_memory_mb: Option<u64>,
    pub services: Services,
    /// Node capacity: cores, speed, disk, NIC, memory cache, SSL costs, remote-read penalty.
    pub node: NodeParams,
    /// `"K/N"`: this node is node K of N and its own disk holds only the files whose path
    /// hashes to K (`capstan_core::hash_key(path) % N == K`); it reads the others over NFS at
    /// `node.remote_penalty` more cost (SWEB's data placement, Andresen et al. §3.2). Emulated
    /// mode only. Unset: every file is local.
    #[serde(with = "partition_text")]
    pub partition: Option<Partition>,
    /// Process-per-connection mode (Apache's prefork model, Banga & Druschel §5.5): at most this
    /// many connections are served at once, each holding a "process"; the others wait in the
    /// listen backlog until one closes. Unset: an event-driven node with no limit.
    pub process_limit: Option<u32>,
    /// Memory each process takes from the modelled file cache, in bytes (`"500KB"` in TOML);
    /// ≈ 500 KB per Apache process in the paper (§5.5). Process-per-connection mode only.
    #[serde(with = "size_text")]
    pub process_memory: u64,
    /// Listen backlog: completed connections the kernel holds for `accept` (capped by
    /// `net.core.somaxconn`); when it is full the kernel ignores new connection attempts and
    /// clients retransmit their SYN.
    pub backlog: u32,
    /// A second address that serves only `GET /_capstan/load`, outside the process limit, so a
    /// gatherer still reads the report while every process is busy (as a `capstan agent` beside
    /// Apache would). Unset: the report is served on `listen` only.
    pub report_listen: Option<SocketAddr>,
    /// Server think time of Web Polygraph objects (`/pg/…` URLs), seconds: Polygraph's
    /// `xact_think`, `norm(0.3sec, 0.1sec)` in the Bakhtiyari thesis (§3.8.6).
    pub polygraph_think: Dist,
    /// Multiplies every think time (0: none); short lab runs scale it down with their phases.
    pub polygraph_think_scale: f64,
    /// Start with the modelled file cache holding the tree (every file touched once, in tree
    /// order, so as much of it as fits), as a server that has been running a while: the first
    /// requests of a short run then see the steady state, not a cold disk. Emulated mode only.
    pub warm_cache: bool,
    /// A second listener that speaks HTTPS (rustls), for the secure class served for real: with
    /// `resources = real`, `/secure/…` is served only there, and its cost is the real handshake
    /// and encryption rather than the modelled SSL costs. Needs `tls_cert` and `tls_key`.
    pub tls_listen: Option<SocketAddr>,
    /// PEM certificate chain of the TLS listener, the server's certificate first (relative to
    /// the configuration file's directory when read from one).
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of `tls_cert` (PKCS#8, PKCS#1 RSA or SEC1 EC).
    pub tls_key: Option<PathBuf>,
}

/// Default process memory: "each Apache process has an incremental memory requirement of about
/// 500 KB" (Banga & Druschel §5.5).
pub const PROCESS_MEMORY: u64 = 500_000;
/// Default listen backlog: Linux's `net.core.somaxconn` since 5.4.
pub const BACKLOG: u32 = 4096;

/// Parses a size in bytes: `500KB` (10^3), `512KiB` (2^10), `2MB`, `1MiB`, `1GB`, or a bare
/// number of bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" | "k" => 1_000,
        "kib" => 1 << 10,
        "mb" | "m" => 1_000_000,
        "mib" => 1 << 20,
        "gb" | "g" => 1_000_000_000,
        "gib" => 1 << 30,
        _ => return Err(format!("bad size {text:?} (e.g. 500KB, 512KiB, 2MB)")),
    };
    match number.parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 && n * (factor as f64) < u64::MAX as f64 => {
            Ok((n * factor as f64).round() as u64)
        }
        _ => Err(format!("bad size {text:?} (e.g. 500KB, 512KiB, 2MB)")),
    }
}

/// A size in TOML as text (`"500KB"`) or a number of bytes.
mod size_text {
    use super::parse_size;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*bytes)
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        match Size::deserialize(d)? {
            Size::Bytes(n) => Ok(n),
            Size::Text(t) => parse_size(&t).map_err(serde::de::Error::custom),
        }
    }
}

/// Parses `K/N` with `0 <= K < N`; the error says what is wrong in one line.
pub fn parse_partition(text: &str) -> Result<Partition, String> {
    let bad = |why: &str| {
        format!("bad partition {text:?}: {why} (expected K/N with 0 <= K < N, e.g. 0/4)")
    };
    let (k, n) = text.split_once('/').ok_or_else(|| bad("no '/'"))?;
    let index: u32 = k
        .trim()
        .parse()
        .map_err(|_| bad("K is not a whole number"))?;
    let count: u32 = n
        .trim()
        .parse()
        .map_err(|_| bad("N is not a whole number"))?;
    if count == 0 {
        return Err(bad("N must be at least 1"));
    }
    if index >= count {
        return Err(bad("K must be less than N"));
    }
    Ok(Partition { index, count })
}

/// A partition in TOML as the same `"K/N"` text the command line takes.
mod partition_text {
    use super::{parse_partition, Partition};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Option<Partition>, s: S) -> Result<S::Ok, S::Error> {
        match p {
            Some(p) => s.serialize_str(&format!("{}/{}", p.index, p.count)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Partition>, D::Error> {
        let text = String::deserialize(d)?;
        parse_partition(&text)
            .map(Some)
            .map_err(serde::de::Error::custom)
    }
}

impl Default for OriginConfig {
    fn default() -> Self {
        OriginConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            name: None,
            tree: TreeKind::Webstone,
            seed: 1,
            files: None,
            resources: Resources::Emulated,
            data_dir: None,
            load_interval_ms: 1000,
            body_memory_mb: None,
            services: Services::default(),
            node: NodeParams::default(),
            partition: None,
            process_limit: None,
            process_memory: PROCESS_MEMORY,
            backlog: BACKLOG,
            report_listen: None,
            polygraph_think: Dist::Normal { mean: 0.3, sd: 0.1 },
            polygraph_think_scale: 1.0,
            warm_cache: false,
            tls_listen: None,
            tls_cert: None,
            tls_key: None,
        }
    }
}

impl OriginConfig {
    /// Parse TOML; errors name the line.
    pub fn from_toml_str(text: &str) -> Result<Self, OriginError> {
        toml::from_str(text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let msg = e.message().replace('\n', " ");
            OriginError::Config(match line {
                Some(l) => format!("line {l}: {msg}"),
                None => msg,
            })
        })
    }

    pub fn from_file(path: &Path) -> Result<Self, OriginError> {
        let text = std::fs::read_to_string(path).map_err(|e| OriginError::Io {
            path: path.to_path_buf(),
            error: e,
        })?;
        let mut c = Self::from_toml_str(&text).map_err(|e| match e {
            OriginError::Config(m) => OriginError::Config(format!("{}: {m}", path.display())),
            other => other,
        })?;
        // Certificate paths are the file's, as in the switch's configuration.
        let dir = path.parent().unwrap_or(Path::new("."));
        for p in [&mut c.tls_cert, &mut c.tls_key].into_iter().flatten() {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        }
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), OriginError> {
        self.node.validate().map_err(OriginError::Config)?;
        let s = &self.services;
        for (name, v) in [
            ("cpu_light_ms", s.cpu_light_ms),
            ("cpu_med_ms", s.cpu_med_ms),
            ("disk_load_ms", s.disk_load_ms),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(OriginError::Config(format!(
                    "services.{name} must be a non-negative number, got {v}"
                )));
            }
        }
        self.polygraph_think
            .validate()
            .map_err(|e| OriginError::Config(format!("polygraph_think: {e}")))?;
        if !(self.polygraph_think_scale.is_finite() && self.polygraph_think_scale >= 0.0) {
            return Err(OriginError::Config(format!(
                "polygraph_think_scale must be ≥ 0, got {}",
                self.polygraph_think_scale
            )));
        }
        if self.partition.is_some() && self.resources == Resources::Real {
            return Err(OriginError::Config(
                "partition needs resources = emulated: a real cluster reads remote files over a \
                 real NFS mount, with its real cost"
                    .into(),
            ));
        }
        if self.warm_cache && self.resources == Resources::Real {
            return Err(OriginError::Config(
                "warm_cache needs resources = emulated: a real node's file cache is the \
                 kernel's page cache"
                    .into(),
            ));
        }
        if self.process_limit == Some(0) {
            return Err(OriginError::Config(
                "process_limit must be at least 1 (leave it out for no limit)".into(),
            ));
        }
        if self.backlog == 0 {
            return Err(OriginError::Config("backlog must be at least 1".into()));
        }
        if self.report_listen == Some(self.listen) && self.listen.port() != 0 {
            return Err(OriginError::Config(
                "report_listen must differ from listen".into(),
            ));
        }
        if self.load_interval_ms == 0 {
            return Err(OriginError::Config(
                "load_interval_ms must be at least 1".into(),
            ));
        }
        self.validate_tls()
    }

    /// The TLS listener's settings go together, and apart from the plain listener.
    fn validate_tls(&self) -> Result<(), OriginError> {
        let bad = |m: &str| Err(OriginError::Config(m.into()));
        match (self.tls_listen, &self.tls_cert, &self.tls_key) {
            (None, None, None) => return Ok(()),
            (Some(_), Some(_), Some(_)) => {}
            (None, _, _) => return bad("tls_cert and tls_key need tls_listen (--tls-listen ADDR)"),
            _ => return bad("tls_listen needs both tls_cert and tls_key (PEM files)"),
        }
        let tls = self.tls_listen.expect("matched above");
        if tls.port() != 0 && (tls == self.listen || Some(tls) == self.report_listen) {
            return bad("tls_listen must differ from listen and report_listen");
        }
        if self.process_limit.is_some() {
            return bad(
                "tls_listen does not work with process_limit (the TLS listener has no processes)",
            );
        }
        Ok(())
    }

    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone().unwrap_or_else(|| {
            let files = self.files.map(|n| format!("-{n}")).unwrap_or_default();
            std::env::temp_dir().join(format!(
                "capstan-origin-{}-seed{}{files}",
                self.tree, self.seed
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn toml_with_every_section() {
        let c = OriginConfig::from_toml_str(
            r#"
listen = "127.0.0.1:9001"
tree = "webstone-2000"
seed = 7
resources = "real"
data_dir = "/tmp/x"

[services]
cpu_med_ms = 120

[node]
cores = 2
speed = 0.5

[node.disk]
seek_ms = 8.5
"#,
        )
        .unwrap();
        assert_eq!(c.tree, TreeKind::Webstone2000);
        assert_eq!(c.resources, Resources::Real);
        assert_eq!(c.services.cpu_med_ms, 120.0);
        assert_eq!(c.services.cpu_light_ms, 40.0);
        assert_eq!((c.node.cores, c.node.speed), (2, 0.5));
        assert_eq!(c.node.disk.seek_ms, 8.5);
        assert_eq!(c.node.disk.rpm, 7200.0);
    }

    #[test]
    fn errors_are_one_line_with_a_line_number() {
        let e = OriginConfig::from_toml_str("seed = 1\n\nbogus = 3\n").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("line 3") && s.contains("bogus"), "{s}");
        assert!(!s.contains('\n'));
        let e = OriginConfig::from_toml_str("tree = \"nope\"\n").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
    }

    #[test]
    fn partitions_parse_and_bad_ones_say_why() {
        let c = OriginConfig::from_toml_str("partition = \"2/4\"\n[node]\nremote_penalty = 0.1\n")
            .unwrap();
        assert_eq!(c.partition, Some(Partition { index: 2, count: 4 }));
        assert_eq!(c.node.remote_penalty, 0.1);
        assert_eq!(parse_partition("0/1"), Ok(Partition { index: 0, count: 1 }));
        for (text, why) in [
            ("4/4", "K must be less than N"),
            ("0/0", "N must be at least 1"),
            ("-1/4", "K is not"),
            ("1/x", "N is not"),
            ("3", "no '/'"),
        ] {
            let e = parse_partition(text).unwrap_err();
            assert!(e.contains(why) && !e.contains('\n'), "{text}: {e}");
        }
        let e = OriginConfig::from_toml_str("seed = 1\npartition = \"5/2\"\n").unwrap_err();
        assert!(
            e.to_string().contains("line 2") && e.to_string().contains("K must be less"),
            "{e}"
        );
        let real = OriginConfig {
            resources: Resources::Real,
            partition: Some(Partition { index: 0, count: 2 }),
            ..OriginConfig::default()
        };
        assert!(real
            .validate()
            .unwrap_err()
            .to_string()
            .contains("emulated"));
    }

    #[test]
    fn process_mode_settings_and_sizes() {
        let c = OriginConfig::from_toml_str(
            "process_limit = 152\nprocess_memory = \"512KiB\"\nbacklog = 511\n\
             report_listen = \"127.0.0.1:9\"\n",
        )
        .unwrap();
        assert_eq!(
            (c.process_limit, c.process_memory, c.backlog),
            (Some(152), 524_288, 511)
        );
        assert_eq!(c.report_listen, Some("127.0.0.1:9".parse().unwrap()));
        let d = OriginConfig::default();
        assert_eq!((d.process_limit, d.process_memory), (None, 500_000));
        assert_eq!(
            OriginConfig::from_toml_str("process_memory = 1000\n")
                .unwrap()
                .process_memory,
            1000
        );
        assert_eq!(parse_size("500KB"), Ok(500_000));
        assert_eq!(parse_size("1.5MB"), Ok(1_500_000));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert_eq!(parse_size("77"), Ok(77));
        for bad in ["", "KB", "5 parsecs", "-1KB", "1e99GB"] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.contains("bad size") && !e.contains('\n'), "{bad}: {e}");
        }
        let e = OriginConfig::from_toml_str("process_memory = \"lots\"\n").unwrap_err();
        assert!(e.to_string().contains("line 1"), "{e}");
        let zero = OriginConfig {
            process_limit: Some(0),
            ..OriginConfig::default()
        };
        assert!(zero
            .validate()
            .unwrap_err()
            .to_string()
            .contains("at least 1"));
    }

    #[test]
    fn tls_settings_go_together_and_paths_are_the_files() {
        let dir =
            std::env::temp_dir().join(format!("capstan-origin-tls-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("node.toml");
        std::fs::write(
            &file,
            "tls_listen = \"127.0.0.1:8443\"\ntls_cert = \"c.pem\"\ntls_key = \"/abs/k.pem\"\n",
        )
        .unwrap();
        let c = OriginConfig::from_file(&file).unwrap();
        assert_eq!(c.tls_cert, Some(dir.join("c.pem")));
        assert_eq!(c.tls_key, Some(PathBuf::from("/abs/k.pem")));
        c.validate().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        for (bad, why) in [
            (
                OriginConfig {
                    tls_cert: c.tls_cert.clone(),
                    ..OriginConfig::default()
                },
                "need tls_listen",
            ),
            (
                OriginConfig {
                    tls_key: None,
                    ..c.clone()
                },
                "both tls_cert and tls_key",
            ),
            (
                OriginConfig {
                    tls_listen: Some(c.listen),
                    ..c.clone()
                },
                "must differ",
            ),
            (
                OriginConfig {
                    process_limit: Some(4),
                    ..c.clone()
                },
                "process_limit",
            ),
        ] {
            let e = bad.validate().unwrap_err().to_string();
            assert!(e.contains(why) && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn validation() {
        let mut c = OriginConfig::default();
        c.node.speed = -1.0;
        assert!(c.validate().unwrap_err().to_string().contains("speed"));
        let mut c = OriginConfig::default();
        c.services.cpu_med_ms = f64::NAN;
        assert!(c.validate().is_err());
    }
}
