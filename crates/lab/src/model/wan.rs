//! WAN experiments (`capstan lab wan-delay`, `wan-loss`, `wan-mix`): Banga & Druschel §5.5–5.6
//! (Figs. 9 and 10). Each contender — a web server or the switch in front of one — serves the
//! same document tree while `capstan bench --wan` offers it load from behind `capstan wan`'s
//! delay router, one run per RTT, loss rate or path mix. The lab samples, while the load runs,
//! the server's connections from the kernel (ESTABLISHED sockets on its port, its accept queue)
//! and its processes, so the report shows what the paper showed: WAN delay and loss make
//! connections live longer, so more are open at once, and a process-per-connection server runs
//! out of processes and memory where an event-driven one does not.
//!
//! Contenders ([`CONTENDERS`]):
//! - `origin-processes`: `capstan origin --process-limit` (Apache prefork: 152 processes, each
//!   taking memory from the emulated file cache), its cache warm at the start;
//! - `origin-processes-1k`: the same node asked for one 1 KB file only (the paper's "trivial
//!   workload" control: every request a cache hit);
//! - `origin-events`: the same emulated node, event-driven (no process limit);
//! - `switch`: `capstan serve` facing the WAN, in front of one `origin-processes` node on
//!   loopback over pooled keep-alive connections;
//! - `switch-h1`, `switch-h2`, `switch-h3` (`wan-loss-h3`): `capstan serve` with one TLS
//!   listener on `0.0.0.0` that also has `quic = true` (HTTP/3 on the same address over UDP),
//!   in front of one event-driven node, loaded over HTTP/1.1 keep-alive, HTTP/2 and HTTP/3 at
//!   the same concurrency (`[client]`); the HTTP/3 contender is skipped, with the reason, when
//!   `capstan check` refuses the listener (a build without QUIC listeners);
//! - `apache2` (prefork MPM, `MaxRequestWorkers` = the process limit) and `nginx`, the real
//!   servers from Debian serving the same tree written to disk (installed with apt-get when
//!   missing and the lab runs as root; skipped with the reason otherwise).
//!
//! Everything runs on this machine: the server in the root network namespace listening on
//! `0.0.0.0`, the load generator in `capstan wan`'s client namespace. Needs root.
//!
//! This module holds the schema: the experiment file, the options, and the results
//! (`results.json`). Running is in [`crate::run::wan`], the report in [`crate::report::wan`].

use serde::{Deserialize, Serialize};

use crate::model::error::LabError;

/// The built-in WAN experiments, in `--list` order: (name, TOML text).
pub const BUILTIN_WAN: &[(&str, &str)] = &[
    (
        "wan-delay",
        include_str!("../../../../experiments/wan-delay.toml"),
    ),
    (
        "wan-loss",
        include_str!("../../../../experiments/wan-loss.toml"),
    ),
    (
        "wan-mix",
        include_str!("../../../../experiments/wan-mix.toml"),
    ),
    (
        "wan-loss-h3",
        include_str!("../../../../experiments/wan-loss-h3.toml"),
    ),
];

/// The contenders a WAN experiment knows.
pub const CONTENDERS: [&str; 9] = [
    "origin-processes",
    "origin-processes-1k",
    "origin-events",
    "switch",
    "apache2",
    "nginx",
    "switch-h1",
    "switch-h2",
    "switch-h3",
];

/// What the runs of an experiment vary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vary {
    /// The path's round-trip time (`rtt=LEVEL`).
    Rtt,
    /// The path's loss rate (`loss=LEVEL`).
    Loss,
    /// Nothing: one run with every client group of `groups` on its own path at once.
    Mix,
}

/// A WAN experiment file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WanExperiment {
    pub name: String,
    /// Always `"wan"`: tells a WAN experiment file from the others.
    pub kind: String,
    pub title: String,
    pub figure: String,
    #[serde(default)]
    pub about: String,
    pub contenders: Vec<String>,
    pub vary: Vary,
    /// The varied setting's values (`"100ms"`, `"5%"`); unused with `vary = "mix"`.
    #[serde(default)]
    pub levels: Vec<String>,
    /// Every path's fixed settings, as `capstan bench --wan` takes them
    /// (`"bandwidth=100mbit"`).
    #[serde(default)]
    pub path: String,
    /// `vary = "mix"`: the client groups (`--wan-group` specs), each on its own path.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Offered load, requests/s (open loop, a connection per request as in the paper).
    pub rate: f64,
    /// Length of each run's measured load, seconds.
    pub duration_s: f64,
    /// Load at the same rate before the measured part, seconds: a server reaches its steady
    /// state first (Apache's prefork grows its pool by at most 32 processes a second).
    #[serde(default)]
    pub warmup_s: f64,
    /// A request's timeout (the generator's `--timeout`), seconds.
    #[serde(default = "twenty")]
    pub timeout_s: f64,
    pub quick: WanQuick,
    pub workload: WanWorkload,
    #[serde(default)]
    pub server: ServerSettings,
    #[serde(default, rename = "paper")]
    pub paper: Vec<PaperPoint>,
    /// How the `switch-h*` contenders are loaded.
    #[serde(default)]
    pub client: ClientSettings,
}

/// The load of the protocol contenders (`switch-h1`, `-h2`, `-h3`): keep-alive connections at
/// one concurrency — HTTP/1.1 over `connections` connections, HTTP/2 and HTTP/3 over
/// `connections / streams` connections of `streams` requests each.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientSettings {
    pub connections: usize,
    pub streams: usize,
}

impl Default for ClientSettings {
    fn default() -> Self {
        ClientSettings {
            connections: 32,
            streams: 8,
        }
    }
}

/// What `--quick` changes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WanQuick {
    #[serde(default)]
    pub levels: Option<Vec<String>>,
    pub duration_s: f64,
    #[serde(default)]
    pub warmup_s: Option<f64>,
    #[serde(default)]
    pub contenders: Option<Vec<String>>,
}

/// The documents every contender serves and the generator asks for (uniformly).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WanWorkload {
    /// A `capstan origin --tree` name (`cap`, `webstone`, …).
    pub tree: String,
    #[serde(default)]
    pub files: Option<usize>,
    #[serde(default = "one")]
    pub seed: u64,
}

/// How the servers are set up.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    /// Processes of a process-per-connection server (Apache's MaxClients: 152 in the paper).
    pub process_limit: u32,
    /// Memory each process takes from the emulated file cache (`capstan origin
    /// --process-memory`).
    pub process_memory: String,
    /// The emulated file cache as a fraction of the tree.
    pub cache_fraction: f64,
    /// Listen backlog of every server.
    pub backlog: u32,
    /// Worker threads of the emulated node and the switch; nginx worker processes.
    pub threads: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            process_limit: 152,
            process_memory: "500KB".into(),
            cache_fraction: 1.0,
            backlog: 511,
            threads: 1,
        }
    }
}

/// A number the paper reports for a contender at a level (its text and figures).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperPoint {
    /// The paper's server ("Apache", "Apache (trivial workload)", "Zeus").
    pub server: String,
    /// The contender of ours it is set beside.
    pub contender: String,
    pub level: String,
    /// Throughput relative to the first level, per cent (−54 for Apache at 200 ms).
    #[serde(default)]
    pub throughput_change_pct: Option<f64>,
    #[serde(default)]
    pub throughput_rps: Option<f64>,
    #[serde(default)]
    pub active_connections: Option<f64>,
    #[serde(default)]
    pub processes: Option<f64>,
    #[serde(default)]
    pub source: String,
}

fn twenty() -> f64 {
    20.0
}
fn one() -> u64 {
    1
}

/// How long a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Quick,
    Default,
}

impl WanExperiment {
    pub fn parse(text: &str, origin: &str) -> Result<WanExperiment, LabError> {
        let e: WanExperiment = crate::model::experiment::parse_toml(text, origin)?;
        e.check()
            .map_err(|m| LabError::Experiment(format!("{origin}: {m}")))?;
        Ok(e)
    }

    fn check(&self) -> Result<(), String> {
        if self.kind != "wan" {
            return Err("kind must be \"wan\"".into());
        }
        let quick = self.quick.contenders.iter().flatten();
        for c in self.contenders.iter().chain(quick) {
            check_contender(c)?;
        }
        if !(self.rate.is_finite() && self.rate > 0.0) {
            return Err(format!("rate must be > 0, got {}", self.rate));
        }
        for (what, v) in [
            ("duration_s", self.duration_s),
            ("quick.duration_s", self.quick.duration_s),
            ("timeout_s", self.timeout_s),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(format!("{what} must be > 0, got {v}"));
            }
        }
        for v in [Some(self.warmup_s), self.quick.warmup_s]
            .into_iter()
            .flatten()
        {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("warmup_s must be ≥ 0, got {v}"));
            }
        }
        if self.client.connections == 0
            || self.client.streams == 0
            || !self.client.connections.is_multiple_of(self.client.streams)
        {
            return Err(format!(
                "[client]: connections ({}) must be a positive multiple of streams ({})",
                self.client.connections, self.client.streams
            ));
        }
        if self.server.process_limit == 0 || self.server.backlog == 0 || self.server.threads == 0 {
            return Err("[server]: process_limit, backlog and threads must be at least 1".into());
        }
        capstan_origin::parse_size(&self.server.process_memory)
            .map_err(|e| format!("[server] process_memory: {e}"))?;
        capstan_workload::tree::DocTree::generate(self.tree_kind()?, 1, self.workload.files)
            .map_err(|e| format!("[workload]: {e}"))?;
        self.check_paths()
    }

    /// Every run's path settings parse as `capstan wan` parses them, so a typo stops the lab
    /// before the first run, not in the middle.
    fn check_paths(&self) -> Result<(), String> {
        let parse = |what: &str, spec: &str| {
            capstan_wan::config::PathSpec::parse(spec)
                .map(|_| ())
                .map_err(|e| format!("{what} {spec:?}: {e}"))
        };
        parse("path", &self.path)?;
        match self.vary {
            Vary::Mix => {
                if self.groups.is_empty() {
                    return Err("vary = \"mix\" needs groups".into());
                }
                for g in &self.groups {
                    parse("group", g)?;
                }
            }
            Vary::Rtt | Vary::Loss => {
                let quick = self.quick.levels.iter().flatten();
                if self.levels.is_empty() {
                    return Err("levels must not be empty".into());
                }
                for l in self.levels.iter().chain(quick) {
                    parse("level", &self.level_spec(l))?;
                }
            }
        }
        Ok(())
    }

    pub fn tree_kind(&self) -> Result<capstan_workload::tree::TreeKind, String> {
        self.workload
            .tree
            .parse()
            .map_err(|e: capstan_workload::tree::TreeError| format!("[workload] tree: {e}"))
    }

    /// A built-in WAN experiment by name, or a file that says `kind = "wan"`; `None` when the
    /// name is neither.
    pub fn find(name_or_path: &str) -> Option<Result<WanExperiment, LabError>> {
        if let Some((n, text)) = BUILTIN_WAN.iter().find(|(n, _)| *n == name_or_path) {
            return Some(Self::parse(text, &format!("experiments/{n}.toml")));
        }
        let text = std::fs::read_to_string(name_or_path).ok()?;
        let kind = toml::from_str::<toml::Table>(&text)
            .ok()
            .and_then(|t| t.get("kind").and_then(|k| k.as_str()).map(str::to_string));
        (kind.as_deref() == Some("wan")).then(|| Self::parse(&text, name_or_path))
    }

    /// The levels a mode runs (`["mix"]` for a mix).
    pub fn levels(&self, mode: Mode) -> Vec<String> {
        match (self.vary, mode) {
            (Vary::Mix, _) => vec!["mix".into()],
            (_, Mode::Quick) => self.quick.levels.clone().unwrap_or(self.levels.clone()),
            (_, Mode::Default) => self.levels.clone(),
        }
    }

    pub fn duration_s(&self, mode: Mode) -> f64 {
        match mode {
            Mode::Quick => self.quick.duration_s,
            Mode::Default => self.duration_s,
        }
    }

    pub fn warmup_s(&self, mode: Mode) -> f64 {
        match mode {
            Mode::Quick => self.quick.warmup_s.unwrap_or(self.warmup_s),
            Mode::Default => self.warmup_s,
        }
    }

    pub fn contenders(&self, mode: Mode) -> Vec<String> {
        match mode {
            Mode::Quick => self
                .quick
                .contenders
                .clone()
                .unwrap_or(self.contenders.clone()),
            Mode::Default => self.contenders.clone(),
        }
    }

    /// The `--wan` spec of one level: the fixed settings plus the varied one.
    pub fn level_spec(&self, level: &str) -> String {
        let varied = match self.vary {
            Vary::Rtt => format!("rtt={level}"),
            Vary::Loss => format!("loss={level}"),
            Vary::Mix => String::new(),
        };
        [self.path.as_str(), varied.as_str()]
            .iter()
            .filter(|s| !s.is_empty())
            .copied()
            .collect::<Vec<_>>()
            .join(",")
    }

    /// What the x axis is called.
    pub fn x_label(&self) -> &'static str {
        match self.vary {
            Vary::Rtt => "round-trip time",
            Vary::Loss => "packet loss",
            Vary::Mix => "path",
        }
    }
}

pub fn check_contender(c: &str) -> Result<(), String> {
    if CONTENDERS.contains(&c) {
        Ok(())
    } else {
        Err(format!(
            "unknown contender {c:?} (known: {})",
            CONTENDERS.join(", ")
        ))
    }
}

/// What `capstan lab` passes to a WAN experiment.
#[derive(Debug, Clone)]
pub struct WanOptions {
    pub mode: Mode,
    /// Replaces the experiment's contender list.
    pub contenders: Option<Vec<String>>,
    pub exe: std::path::PathBuf,
    pub work_dir: std::path::PathBuf,
    pub command: String,
}

/// The server's state at one moment of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Seconds since the load started.
    pub t_s: f64,
    /// Client connections in ESTABLISHED state on the server's port (Fig. 10's "active
    /// connections"; for the switch, its client side).
    pub established: u32,
    /// Connections completed by the kernel and waiting for `accept`.
    pub accept_queue: u32,
    /// Half-open connections (SYN received).
    pub syn_recv: u32,
    /// Connections the server has closed whose last bytes or FIN the kernel still handles
    /// (FIN-WAIT, LAST-ACK): an event-driven server's open connections live here.
    #[serde(default)]
    pub finishing: u32,
    /// Bytes in the send queues of the port's connections (socket buffer memory).
    #[serde(default)]
    pub send_queue_bytes: u64,
    /// Server processes (Fig. 10's dotted curve): Apache's children, the emulated node's
    /// processes in use; `None` for one event loop.
    pub processes: Option<u32>,
    /// The emulated node's file cache capacity, bytes (shrinks as processes take memory).
    pub cache_bytes: Option<u64>,
}

/// One run: a contender at one level.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LevelResult {
    pub level: String,
    /// The `--wan` spec the run used (and the groups of a mix).
    pub spec: String,
    pub offered_rps: f64,
    /// Responses per second in the steady state: the mean of the generator's per-second
    /// completions over the measured seconds (after the warm-up, or after the first second
    /// without one), so neither the first round trips nor the requests still in flight at
    /// the end count against a long RTT.
    pub throughput_rps: f64,
    /// Responses completed inside the whole run (warm-up included) over its length (the
    /// generator's own figure).
    pub completed_rps: f64,
    /// Body bytes per second of the requests due in the measured seconds, whenever their
    /// responses arrived within the run, in Mbit/s (goodput).
    #[serde(default)]
    pub goodput_mbps: f64,
    /// The generator's protocol (`http/1.0`, `http/1.1`, `h2`, `h3`).
    #[serde(default)]
    pub protocol: String,
    /// The whole run's per-request tail (from the schedule): p99.9 and the slowest request.
    #[serde(default)]
    pub p999_ms: f64,
    #[serde(default)]
    pub max_ms: f64,
    /// Errors in the measured seconds, and requests unfinished at the end of the run.
    pub errors: u64,
    pub unfinished: u64,
    /// Medians over the measured seconds of each second's p50 and p99 (from the schedule).
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Means of the samples taken in the measured seconds.
    pub established_mean: f64,
    pub established_max: u32,
    /// Mean connections the server has closed but the kernel still finishes (FIN-WAIT,
    /// LAST-ACK): with ESTABLISHED, every connection the server's machine holds.
    pub finishing_mean: f64,
    /// The most bytes waiting in the port's send queues at once.
    pub send_queue_max_bytes: u64,
    pub accept_queue_max: u32,
    pub processes_mean: Option<f64>,
    pub processes_max: Option<u32>,
    pub cache_min_bytes: Option<u64>,
    /// The emulated node's file cache hits over hits + misses during the run (warm-up
    /// included).
    pub hit_ratio: Option<f64>,
    /// CPU seconds of the server's processes over the run, per 1,000 responses.
    pub cpu_ms_per_1k: Option<f64>,
    /// Per client group (one for a single path): name, completed/s, p50, p99 and the router's
    /// drops.
    pub paths: Vec<PathFigures>,
    pub samples: Vec<Sample>,
    /// The generator said its numbers are limited by this machine.
    pub warnings: Vec<String>,
}

/// One client group's figures in a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PathFigures {
    pub name: String,
    pub offered_rps: f64,
    pub completed_rps: f64,
    pub errors: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Packets the router dropped on this path (loss, queue), both directions.
    pub router_drops: u64,
}

/// One contender's runs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ContenderRuns {
    pub name: String,
    pub version: String,
    pub setup: String,
    pub skipped: Option<String>,
    pub levels: Vec<LevelResult>,
}

/// A WAN experiment's results (`results.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WanResults {
    pub name: String,
    pub title: String,
    pub figure: String,
    pub about: String,
    pub mode: String,
    pub command: String,
    pub vary: Option<Vary>,
    pub x_label: String,
    pub levels: Vec<String>,
    pub rate: f64,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub load_at_start: String,
    pub contenders: Vec<ContenderRuns>,
    pub paper: Vec<PaperPoint>,
    pub findings: Vec<String>,
}

/// The contenders that ran at least one level.
pub(crate) fn ran(r: &WanResults) -> impl Iterator<Item = &ContenderRuns> {
    r.contenders.iter().filter(|c| !c.levels.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_experiments_parse() {
        for (name, text) in BUILTIN_WAN {
            let e = WanExperiment::parse(text, name).unwrap();
            assert_eq!(&e.name, name);
            assert!(!e.levels(Mode::Quick).is_empty());
        }
    }

    #[test]
    fn a_level_adds_the_varied_setting_to_the_path() {
        let text = BUILTIN_WAN[0].1;
        let e = WanExperiment::parse(text, "x").unwrap();
        assert_eq!(e.vary, Vary::Rtt);
        assert_eq!(e.level_spec("100ms"), format!("{},rtt=100ms", e.path));
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let text = BUILTIN_WAN[0].1;
        for (bad, says) in [
            (text.replace("kind = \"wan\"", "kind = \"cache\""), "kind"),
            (text.replace("\"nginx\"", "\"squid\""), "unknown contender"),
            (text.replace("\"100ms\"", "\"soon\""), "level"),
            (text.replace("rate = ", "rate = -"), "rate"),
            (text.replace("tree = \"cap\"", "tree = \"big\""), "tree"),
        ] {
            let e = WanExperiment::parse(&bad, "f.toml")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with("f.toml"), "{e}");
            assert!(e.contains(says), "{says}: {e}");
        }
    }
}
