//! Cache experiments (`capstan lab cache-mixed-inc`, `cache-best-effort`, `cache-image`,
//! `cache-html`, `cache-download`): the Bakhtiyari thesis's Web Polygraph tests (Chapter 4) against Capstan's switch with its cache, Varnish
//! (`varnishd -s malloc,SIZE`) and Apache Traffic Server (a RAM cache and a disk span), one
//! contender at a time, each with the same cache size in front of the same `capstan origin`.
//!
//! A contender whose program is missing is installed from Debian (`apt-get install varnish`,
//! `trafficserver`) when the lab runs as root; otherwise, or when that fails, it is skipped
//! with the reason. Each one runs in a
//! temporary directory of its own (configuration, logs, Varnish's work directory, Traffic
//! Server's runtime files and span) that is removed afterwards; every process is stopped
//! (SIGTERM, then SIGKILL) when its run ends, also on errors and Ctrl-C.
//!
//! The report: per contender and phase the offered rate, throughput, DHR and BHR beside the
//! offered hit ratio, hit and miss response times, errors, the proxy's CPU time and memory, and
//! the thesis's own numbers (Table 4.6 and §4.4) beside ours; the better performer per phase
//! and metric beside the thesis's call ([`crate::cache_verdicts`]); and the proxies' CPU,
//! memory and disk I/O sampled every second ([`crate::cache_surrogates`]); hit and miss
//! response-time CDFs and response time against offered rate ([`crate::cache_plots`]).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use capstan_bench::polygraph::{PhaseResult, PolyConfig, PolyResult};
use capstan_bench::Target;
use capstan_cache::evict::EvictionKind;
use capstan_workload::polygraph::PolyFile;
use serde::{Deserialize, Serialize};

use crate::cache_surrogates::{Sampler, Surrogates};
use crate::cache_verdicts::Verdict;
use crate::cluster::{cpu_seconds, free_loopback_port, get};
use crate::LabError;
use capstan_report::{escape, Page};

/// The built-in cache experiments, in `--list` order: (name, TOML text).
pub const BUILTIN_CACHE: &[(&str, &str)] = &[
    (
        "cache-mixed-inc",
        include_str!("../../../experiments/cache-mixed-inc.toml"),
    ),
    (
        "cache-best-effort",
        include_str!("../../../experiments/cache-best-effort.toml"),
    ),
    (
        "cache-image",
        include_str!("../../../experiments/cache-image.toml"),
    ),
    (
        "cache-html",
        include_str!("../../../experiments/cache-html.toml"),
    ),
    (
        "cache-download",
        include_str!("../../../experiments/cache-download.toml"),
    ),
];

/// The contenders a cache experiment knows; `capstan-POLICY` ([`capstan_policy`]) too.
pub const CONTENDERS: [&str; 3] = ["capstan", "varnish", "trafficserver"];

/// The eviction policy of a Capstan contender: `capstan` runs LRU (Varnish's and the
/// thesis's baseline), `capstan-gdsf`, `capstan-s3-fifo`, … the named policy of the cache.
pub fn capstan_policy(contender: &str) -> Option<&'static str> {
    let policy = match contender.strip_prefix("capstan") {
        Some("") => return Some(EvictionKind::Lru.name()),
        Some(rest) => rest.strip_prefix('-')?,
        None => return None,
    };
    EvictionKind::ALL
        .iter()
        .map(|k| k.name())
        .find(|name| *name == policy)
}

/// Whether `contender` names a known contender, else the one-line error listing them.
fn check_contender(contender: &str) -> Result<(), String> {
    if CONTENDERS.contains(&contender) || capstan_policy(contender).is_some() {
        return Ok(());
    }
    let policies: Vec<&str> = EvictionKind::ALL.iter().map(|k| k.name()).collect();
    Err(format!(
        "unknown contender {contender:?} (known: {}, and capstan-POLICY with POLICY one of {})",
        CONTENDERS.join(", "),
        policies.join(", ")
    ))
}

/// A cache experiment file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheExperiment {
    pub name: String,
    /// Always `"cache"`: tells a cache experiment file from a dispatching one.
    pub kind: String,
    pub title: String,
    pub figure: String,
    #[serde(default)]
    pub about: String,
    pub contenders: Vec<String>,
    /// Every contender's cache size (Capstan's memory tier, Varnish's malloc storage, Traffic
    /// Server's RAM cache and span), e.g. `"64MB"`. The workload's fill goals refer to it.
    pub cache_size: String,
    /// The thesis's cache size, which `--full` runs with (default: `cache_size`).
    #[serde(default)]
    pub full_cache_size: Option<String>,
    /// Worker threads of each proxy (Capstan `--threads`, Varnish `thread_pools`, Traffic
    /// Server `exec_thread.limit`).
    #[serde(default = "two")]
    pub proxy_threads: usize,
    /// The default run's time scale (phase durations × this); `--full` runs 1.
    pub time_scale: f64,
    /// The origin's think time × this.
    #[serde(default = "unit")]
    pub think_scale: f64,
    pub quick: CacheQuick,
    pub workload: toml::Table,
    #[serde(default, rename = "paper")]
    pub paper: Vec<PaperRow>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheQuick {
    pub time_scale: f64,
    pub cache_size: String,
    #[serde(default = "unit")]
    pub think_scale: f64,
}

/// A number the thesis reports for a contender and phase (its Table 4.6 / §4.4 text).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PaperRow {
    pub contender: String,
    pub phase: String,
    pub throughput_rps: Option<f64>,
    pub mbytes_s: Option<f64>,
    pub response_ms: Option<f64>,
    pub hit_ms: Option<f64>,
    pub miss_ms: Option<f64>,
    /// Percentages, as the thesis writes them.
    pub dhr: Option<f64>,
    pub offered_dhr: Option<f64>,
    pub bhr: Option<f64>,
    pub offered_bhr: Option<f64>,
    #[serde(default)]
    pub source: String,
}

fn two() -> usize {
    2
}
fn unit() -> f64 {
    1.0
}

impl CacheExperiment {
    pub fn parse(text: &str, origin: &str) -> Result<CacheExperiment, LabError> {
        let e: CacheExperiment = crate::experiment::parse_toml(text, origin)?;
        if e.kind != "cache" {
            return Err(LabError::Experiment(format!(
                "{origin}: kind must be \"cache\""
            )));
        }
        for c in &e.contenders {
            check_contender(c).map_err(|why| LabError::Experiment(format!("{origin}: {why}")))?;
        }
        e.workload(Mode::Default)
            .map_err(|m| LabError::Experiment(format!("{origin}: {m}")))?;
        Ok(e)
    }

    /// A built-in cache experiment by name, or a file that says `kind = "cache"`; `None` when
    /// the name is neither (a dispatching experiment).
    pub fn find(name_or_path: &str) -> Option<Result<CacheExperiment, LabError>> {
        if let Some((n, text)) = BUILTIN_CACHE.iter().find(|(n, _)| *n == name_or_path) {
            return Some(Self::parse(text, &format!("experiments/{n}.toml")));
        }
        let text = std::fs::read_to_string(name_or_path).ok()?;
        let kind = toml::from_str::<toml::Table>(&text)
            .ok()
            .and_then(|t| t.get("kind").and_then(|k| k.as_str()).map(str::to_string));
        (kind.as_deref() == Some("cache")).then(|| Self::parse(&text, name_or_path))
    }

    /// The workload for a mode, with its cache size and time scale set.
    pub fn workload(&self, mode: Mode) -> Result<capstan_workload::PolyWorkload, String> {
        let (scale, cache) = self.scale_and_cache(mode);
        let mut table = self.workload.clone();
        if table.contains_key("cache_size") || table.contains_key("time_scale") {
            return Err(
                "[workload]: cache_size and time_scale are the experiment's, not the \
                        workload's"
                    .into(),
            );
        }
        table.insert("cache_size".into(), toml::Value::String(cache.to_string()));
        let mut f: PolyFile = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| format!("[workload]: {}", e.message().trim()))?;
        f.time_scale = scale;
        f.resolve().map_err(|e| format!("[workload]: {e}"))
    }

    fn scale_and_cache(&self, mode: Mode) -> (f64, &str) {
        match mode {
            Mode::Quick => (self.quick.time_scale, &self.quick.cache_size),
            Mode::Default => (self.time_scale, &self.cache_size),
            Mode::Full => (
                1.0,
                self.full_cache_size.as_ref().unwrap_or(&self.cache_size),
            ),
        }
    }

    fn think_scale(&self, mode: Mode) -> f64 {
        match mode {
            Mode::Quick => self.quick.think_scale,
            _ => self.think_scale,
        }
    }
}

/// How long a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Quick,
    Default,
    Full,
}

/// What `capstan lab` passes to a cache experiment.
#[derive(Debug, Clone)]
pub struct CacheOptions {
    pub mode: Mode,
    /// Replaces the experiment's contender list.
    pub contenders: Option<Vec<String>>,
    pub exe: PathBuf,
    pub work_dir: PathBuf,
    pub command: String,
}

/// One contender's run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ContenderResult {
    pub name: String,
    pub version: String,
    /// Why it did not run.
    pub skipped: Option<String>,
    /// How it was set up (cache size, storage, threads).
    pub setup: String,
    pub result: Option<PolyResult>,
    /// CPU seconds of the proxy's processes over the workload, and per 1,000 responses.
    pub proxy_cpu_s: Option<f64>,
    pub proxy_cpu_ms_per_1k: Option<f64>,
    /// Resident memory of the proxy's processes at the end, MB.
    pub proxy_rss_mb: Option<f64>,
    /// CPU, memory and disk I/O of the proxy's processes, sampled every second.
    #[serde(default)]
    pub surrogates: Option<Surrogates>,
}

/// A cache experiment's results (`results.json`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CacheResults {
    pub name: String,
    pub title: String,
    pub figure: String,
    pub mode: String,
    pub command: String,
    pub cache_bytes: u64,
    pub time_scale: f64,
    pub think_scale: f64,
    pub load_at_start: String,
    pub contenders: Vec<ContenderResult>,
    pub paper: Vec<PaperRow>,
    /// Better performer per phase and metric, beside the thesis's call.
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
    pub findings: Vec<String>,
}

/// A process the lab started, stopped with SIGTERM (then SIGKILL after 5 s) when dropped.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    name: String,
    log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet (so the
        // pid cannot have been reused).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    pub(crate) fn spawn(name: &str, cmd: &mut Command, log: PathBuf) -> Result<Daemon, String> {
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        Ok(Daemon {
            child,
            name: name.to_string(),
            log,
        })
    }

    fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    }

    /// Waits until `probe` answers 200 through `addr`.
    pub(crate) async fn ready(
        &mut self,
        addr: SocketAddr,
        probe: &str,
        within: Duration,
    ) -> Result<(), String> {
        let end = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{} exited ({status}): {}", self.name, self.tail()));
            }
            if get(addr, probe).await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(format!(
                    "{} did not answer {probe} on {addr} within {within:?}: {}",
                    self.name,
                    self.tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A directory removed when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The program a contender runs: found on the PATH (or Debian's sbin/bin), else installed from
/// its Debian package when we are root; otherwise the one-line reason it is skipped.
fn program(contender: &str, exe: &Path) -> Result<PathBuf, String> {
    if capstan_policy(contender).is_some() {
        return Ok(exe.to_path_buf());
    }
    let (name, package) = match contender {
        "varnish" => ("varnishd", "varnish"),
        _ => ("traffic_server", "trafficserver"),
    };
    let path = std::env::var_os("PATH").unwrap_or_default();
    let debian = if name == "varnishd" {
        "/usr/sbin"
    } else {
        "/usr/bin"
    };
    if let Some(found) = std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
    {
        return Ok(found);
    }
    crate::servers::ensure_package(package, &Path::new(debian).join(name))
        .map_err(|why| format!("{name} is not installed ({why})"))
}

/// The first line of `program flag`'s output that names a known server.
pub(crate) fn version(program: &Path, flag: &str) -> String {
    Command::new(program)
        .arg(flag)
        .output()
        .ok()
        .map(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines()
                .find(|l| {
                    ["varnish", "Traffic Server", "capstan", "Apache", "nginx"]
                        .iter()
                        .any(|name| l.contains(name))
                })
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Directories a proxy that drops privileges (Varnish's jail) can read.
fn open_dir(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path).map_err(|e| format!("{}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("{}: {e}", path.display()))
}

struct Started {
    daemon: Daemon,
    addr: SocketAddr,
    setup: String,
}

fn start_capstan(
    exe: &Path,
    dir: &Path,
    origin: SocketAddr,
    cache_bytes: u64,
    threads: usize,
    policy: &str,
) -> Result<Started, String> {
    let addr = free_loopback_port().map_err(|e| e.to_string())?;
    let admin = free_loopback_port().map_err(|e| e.to_string())?;
    let mib = cache_bytes.div_ceil(1 << 20);
    // Objects up to 8 MiB (Traffic Server's max_doc_size here), at most a quarter of the cache.
    let max_kib = (8 << 10).min((mib << 10) / 4).max(1);
    let conf = dir.join("capstan.toml");
    write(
        &conf,
        &format!(
            "# The switch with its cache in front of one origin (written by capstan lab).\n\
             listen = [\"{addr}\"]\nadmin = \"{admin}\"\n\n[policy]\nname = \"round-robin\"\n\n\
             [[node]]\nname = \"origin\"\naddress = \"{origin}\"\n\n\
             # A cache proxy has one node: no admission limit in front of it.\n\
             [admission]\nlimit = \"off\"\n\n\
             [cache]\nmemory = \"{mib}MiB\"\npolicy = \"{policy}\"\nmax_object = \"{max_kib}KiB\"\n"
        ),
    )?;
    let mut cmd = Command::new(exe);
    cmd.args(["serve", "--config"])
        .arg(&conf)
        .args(["--threads", &threads.to_string()])
        .env("RUST_LOG", "warn");
    Ok(Started {
        daemon: Daemon::spawn("capstan", &mut cmd, dir.join("capstan.log"))?,
        addr,
        setup: format!("capstan serve, [cache] memory {mib} MiB, {policy}, {threads} threads"),
    })
}

fn start_varnish(
    program: &Path,
    dir: &Path,
    origin: SocketAddr,
    cache_bytes: u64,
    threads: usize,
) -> Result<Started, String> {
    let addr = free_loopback_port().map_err(|e| e.to_string())?;
    let vcl = dir.join("default.vcl");
    write(
        &vcl,
        &format!(
            "vcl 4.1;\n# Written by capstan lab: one backend, the built-in VCL, a hit marker.\n\
             backend origin {{\n    .host = \"{}\";\n    .port = \"{}\";\n}}\n\
             sub vcl_deliver {{\n    if (obj.hits > 0) {{\n        set resp.http.X-Cache = \"HIT\";\n\
             \x20   }} else {{\n        set resp.http.X-Cache = \"MISS\";\n    }}\n}}\n",
            origin.ip(),
            origin.port()
        ),
    )?;
    let mib = cache_bytes.div_ceil(1 << 20);
    let mut cmd = Command::new(program);
    cmd.arg("-F")
        .arg("-n")
        .arg(dir.join("varnish"))
        .args(["-a", &addr.to_string(), "-T", "none", "-f"])
        .arg(&vcl)
        .args(["-s", &format!("malloc,{mib}M")])
        .args(["-p", &format!("thread_pools={threads}")]);
    Ok(Started {
        daemon: Daemon::spawn("varnish", &mut cmd, dir.join("varnish.log"))?,
        addr,
        setup: format!("varnishd -s malloc,{mib}M, thread_pools {threads}"),
    })
}

/// Traffic Server refuses (crashes on) spans much below this.
const ATS_MIN_SPAN: u64 = 16 << 20;

fn start_trafficserver(
    program: &Path,
    dir: &Path,
    origin: SocketAddr,
    cache_bytes: u64,
    threads: usize,
) -> Result<Started, String> {
    let addr = free_loopback_port().map_err(|e| e.to_string())?;
    let (etc, cache) = (dir.join("etc"), dir.join("cache"));
    for d in [&etc, &cache, &dir.join("run"), &dir.join("log")] {
        open_dir(d)?;
    }
    let d = dir.display();
    write(
        &dir.join("runroot.yaml"),
        &format!(
            "prefix: {d}\nexec_prefix: /usr\nbindir: /usr/bin\nsbindir: /usr/sbin\n\
             sysconfdir: {d}/etc\ndatadir: {d}/cache\nincludedir: /usr/include\n\
             libdir: /usr/lib/trafficserver\nlibexecdir: /usr/lib/trafficserver/modules\n\
             localstatedir: {d}/run\nruntimedir: {d}/run\nlogdir: {d}/log\ncachedir: {d}/cache\n"
        ),
    )?;
    let records = include_str!("../../../benches/cache/trafficserver/records.config")
        .replace("@PORT@", &addr.port().to_string())
        .replace("@THREADS@", &threads.to_string())
        .replace("@CACHE_BYTES@", &cache_bytes.to_string());
    write(&etc.join("records.config"), &records)?;
    write(
        &etc.join("remap.config"),
        &format!("map / http://{origin}/\n"),
    )?;
    let span = cache_bytes.max(ATS_MIN_SPAN);
    write(
        &etc.join("storage.config"),
        &format!("{} {}M\n", cache.display(), span >> 20),
    )?;
    write(
        &etc.join("ip_allow.yaml"),
        include_str!("../../../benches/cache/trafficserver/ip_allow.yaml"),
    )?;
    for f in [
        "plugin.config",
        "cache.config",
        "hosting.config",
        "parent.config",
        "volume.config",
        "splitdns.config",
        "ssl_multicert.config",
        "socks.config",
        "logging.yaml",
        "sni.yaml",
        "strategies.yaml",
    ] {
        write(&etc.join(f), "")?;
    }
    let mut cmd = Command::new(program);
    cmd.arg(format!("--run-root={d}/runroot.yaml"));
    let mut setup = format!(
        "traffic_server, RAM cache {} MiB, disk span {} MiB, {threads} threads",
        cache_bytes >> 20,
        span >> 20
    );
    if span > cache_bytes {
        setup += " (the span is Traffic Server's smallest that runs: more room than the others)";
    }
    Ok(Started {
        daemon: Daemon::spawn("trafficserver", &mut cmd, dir.join("stdout.log"))?,
        addr,
        setup,
    })
}

/// The processes of a tree rooted at `pid` (Varnish's cache process, Traffic Server's
/// threads are one process).
fn tree_pids(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    let entries: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|p| {
                    let s = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
                    let rest = &s[s.rfind(')')? + 1..];
                    let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
                    Some((p, ppid))
                })
                .collect()
        })
        .unwrap_or_default();
    while i < all.len() {
        let parent = all[i];
        all.extend(
            entries
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    all
}

/// CPU seconds of a process and its descendants.
pub(crate) fn tree_cpu(pid: u32) -> f64 {
    tree_pids(pid)
        .into_iter()
        .filter_map(|p| cpu_seconds(Some(p)))
        .sum()
}

fn tree_rss_mb(pid: u32) -> f64 {
    tree_pids(pid)
        .into_iter()
        .filter_map(|p| {
            let s = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .sum::<f64>()
        / 1024.0
}

/// A probe the proxies pass to the origin without storing it (an uncachable object of a world
/// no workload uses), to see that a contender serves.
const PROBE: &str = "/pg/w0/other/0_16_u.bin";

/// Runs a cache experiment: the origin once, then each contender in turn. `say` gets one line
/// per step.
pub async fn run_cache(
    exp: &CacheExperiment,
    opts: &CacheOptions,
    say: &(dyn Fn(String) + Send + Sync),
) -> Result<CacheResults, LabError> {
    let workload = exp.workload(opts.mode).map_err(LabError::Experiment)?;
    let cache_bytes = workload.cache_bytes;
    let think_scale = exp.think_scale(opts.mode);
    let contenders = opts
        .contenders
        .clone()
        .unwrap_or_else(|| exp.contenders.clone());
    for c in &contenders {
        check_contender(c).map_err(LabError::Experiment)?;
    }
    std::fs::create_dir_all(&opts.work_dir)
        .map_err(|e| LabError::Run(format!("{}: {e}", opts.work_dir.display())))?;
    let origin_addr = free_loopback_port().map_err(|e| LabError::Run(e.to_string()))?;
    let mut origin_cmd = Command::new(&opts.exe);
    origin_cmd
        .args([
            "origin",
            "--listen",
            &origin_addr.to_string(),
            "--name",
            "origin",
        ])
        .args(["--threads", "1", "--seed", &workload.seed.to_string()])
        .args(["--polygraph-think-scale", &think_scale.to_string()]);
    let mut origin = Daemon::spawn("origin", &mut origin_cmd, opts.work_dir.join("origin.log"))
        .map_err(LabError::Run)?;
    origin
        .ready(origin_addr, PROBE, Duration::from_secs(30))
        .await
        .map_err(LabError::Run)?;
    let mut results = CacheResults {
        name: exp.name.clone(),
        title: exp.title.clone(),
        figure: exp.figure.clone(),
        mode: format!("{:?}", opts.mode).to_lowercase(),
        command: opts.command.clone(),
        cache_bytes,
        time_scale: workload.time_scale,
        think_scale,
        load_at_start: std::fs::read_to_string("/proc/loadavg").unwrap_or_default(),
        paper: exp.paper.clone(),
        ..Default::default()
    };
    for name in &contenders {
        say(format!("{name}: starting"));
        let r = run_contender(exp, opts, name, origin_addr, workload.clone(), say).await;
        if let Some(why) = &r.skipped {
            say(format!("{name}: skipped — {why}"));
        }
        results.contenders.push(r);
    }
    results.verdicts = crate::cache_verdicts::better_performers(&results);
    results.findings = findings(&results);
    Ok(results)
}

async fn run_contender(
    exp: &CacheExperiment,
    opts: &CacheOptions,
    name: &str,
    origin: SocketAddr,
    workload: capstan_workload::PolyWorkload,
    say: &(dyn Fn(String) + Send + Sync),
) -> ContenderResult {
    let mut out = ContenderResult {
        name: name.to_string(),
        ..Default::default()
    };
    let program = match program(name, &opts.exe) {
        Ok(p) => p,
        Err(why) => {
            out.skipped = Some(why);
            return out;
        }
    };
    let policy = capstan_policy(name);
    out.version = version(&program, if policy.is_some() { "--version" } else { "-V" });
    let dir = TempDir(std::env::temp_dir().join(format!(
        "capstan-lab-{name}-{}-{}",
        std::process::id(),
        free_loopback_port().map(|a| a.port()).unwrap_or(0)
    )));
    if let Err(e) = open_dir(&dir.0) {
        out.skipped = Some(e);
        return out;
    }
    let (cache, threads) = (workload.cache_bytes, exp.proxy_threads);
    let started = match (policy, name) {
        (Some(policy), _) => start_capstan(&program, &dir.0, origin, cache, threads, policy),
        (None, "varnish") => start_varnish(&program, &dir.0, origin, cache, threads),
        (None, _) => start_trafficserver(&program, &dir.0, origin, cache, threads),
    };
    let mut s = match started {
        Ok(s) => s,
        Err(why) => {
            out.skipped = Some(why);
            return out;
        }
    };
    out.setup = s.setup.clone();
    if let Err(why) = s.daemon.ready(s.addr, PROBE, Duration::from_secs(60)).await {
        out.skipped = Some(why);
        keep_log(&s.daemon, &opts.work_dir);
        return out;
    }
    let pid = s.daemon.child.id();
    let cpu0 = tree_cpu(pid);
    let config = PolyConfig {
        target: Target {
            host: s.addr.ip().to_string(),
            port: s.addr.port(),
            tls: false,
            path: "/".into(),
        },
        workload,
        timeout: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(2),
        // Every request ends as a response or a timeout: the report's counts add up.
        drain: Duration::from_secs(31),
        max_duration: Duration::from_secs(6 * 3600),
    };
    say(format!("{name}: running the workload ({})", out.setup));
    let sampler = Sampler::start(pid, Duration::from_secs(1));
    match capstan_bench::polygraph::run(config, None).await {
        Ok(r) => {
            out.surrogates = Some(sampler.finish(&r.phases));
            let cpu = tree_cpu(pid) - cpu0;
            let responses: u64 = r.phases.iter().map(|p| p.responses).sum();
            out.proxy_cpu_s = Some((cpu * 100.0).round() / 100.0);
            out.proxy_cpu_ms_per_1k =
                (responses > 0).then(|| (cpu * 1e6 / responses as f64 * 100.0).round() / 100.0);
            out.proxy_rss_mb = Some((tree_rss_mb(pid) * 10.0).round() / 10.0);
            out.result = Some(r);
        }
        Err(e) => out.skipped = Some(format!("the workload failed: {e}")),
    }
    keep_log(&s.daemon, &opts.work_dir);
    out
}

/// Copies a contender's log next to the report before its directory goes.
fn keep_log(d: &Daemon, work_dir: &Path) {
    let _ = std::fs::copy(&d.log, work_dir.join(format!("{}.log", d.name)));
}

fn phase<'a>(r: &'a ContenderResult, name: &str) -> Option<&'a PhaseResult> {
    r.result.as_ref()?.phases.iter().find(|p| p.name == name)
}

/// Sentences computed from the data: who had the higher DHR, throughput and faster hits per
/// phase, and whether each stayed within the offered hit ratio.
fn findings(r: &CacheResults) -> Vec<String> {
    let ran: Vec<&ContenderResult> = r.contenders.iter().filter(|c| c.result.is_some()).collect();
    let mut out = Vec::new();
    let Some(first) = ran.first().and_then(|c| c.result.as_ref()) else {
        return vec!["no contender ran".into()];
    };
    for p in &first.phases {
        let rows: Vec<(&str, &PhaseResult)> = ran
            .iter()
            .filter_map(|c| Some((c.name.as_str(), phase(c, &p.name)?)))
            .filter(|(_, x)| x.responses > 0)
            .collect();
        if rows.len() < 2 || !matches!(p.name.as_str(), "top1" | "inc" | "top2") {
            continue;
        }
        let best = |f: &dyn Fn(&PhaseResult) -> f64, low: bool| {
            rows.iter()
                .copied()
                .max_by(|a, b| {
                    let (x, y) = (f(a.1), f(b.1));
                    if low {
                        y.total_cmp(&x)
                    } else {
                        x.total_cmp(&y)
                    }
                })
                .map(|(n, x)| (n, f(x)))
        };
        if let Some((n, v)) = best(&|x| x.dhr, false) {
            out.push(format!("{}: highest DHR {n} ({:.1} %)", p.name, 100.0 * v));
        }
        if let Some((n, v)) = best(&|x| x.throughput_rps, false) {
            out.push(format!(
                "{}: highest throughput {n} ({v:.0} responses/s)",
                p.name
            ));
        }
        if let Some((n, v)) = best(&|x| if x.hits > 0 { x.hit_ms.mean } else { f64::MAX }, true) {
            out.push(format!("{}: fastest hits {n} ({v:.2} ms mean)", p.name));
        }
    }
    for c in &ran {
        let res = c.result.as_ref().expect("filtered");
        let over: Vec<String> = res
            .phases
            .iter()
            .filter(|p| p.responses > 100 && p.dhr > p.offered_dhr + 0.02)
            .map(|p| p.name.clone())
            .collect();
        if !over.is_empty() {
            out.push(format!(
                "{}: measured DHR above the offered hit ratio in {} (hits the workload did not \
                 offer: the hit rule counted some misses as hits)",
                c.name,
                over.join(", ")
            ));
        }
        if !res.completed {
            out.push(format!(
                "{}: stopped before every phase met its goal",
                c.name
            ));
        }
    }
    out.extend(crate::cache_plots::knee_findings(r));
    out.extend(against_thesis(r, &ran));
    out.extend(crate::cache_surrogates::surrogate_findings(r));
    out.extend(verdict_agreement(r));
    out
}

/// One sentence on how many of the thesis's better-performer calls ours agree with.
fn verdict_agreement(r: &CacheResults) -> Vec<String> {
    let checked: Vec<&Verdict> = r
        .verdicts
        .iter()
        .filter(|v| matches!(v.against_thesis.as_deref(), Some("agree" | "disagree")))
        .collect();
    if checked.is_empty() {
        return Vec::new();
    }
    let disagree: Vec<String> = checked
        .iter()
        .filter(|v| v.against_thesis.as_deref() == Some("disagree"))
        .map(|v| format!("{} {}", v.phase, v.metric))
        .collect();
    let mut s = format!(
        "better performer against the thesis: {} of {} calls agree",
        checked.len() - disagree.len(),
        checked.len()
    );
    if !disagree.is_empty() {
        s += &format!(" (disagree: {})", disagree.join(", "));
    }
    vec![s]
}

/// One line per number of the thesis: ours beside it.
fn against_thesis(r: &CacheResults, ran: &[&ContenderResult]) -> Vec<String> {
    let mut out = Vec::new();
    for p in &r.paper {
        let Some(ours) = ran
            .iter()
            .find(|c| c.name == p.contender)
            .and_then(|c| phase(c, &p.phase))
        else {
            continue;
        };
        let mut parts = Vec::new();
        if let (Some(d), Some(o)) = (p.dhr, p.offered_dhr) {
            parts.push(format!(
                "DHR {:.1} % of {:.1} % offered (thesis {d} % of {o} %)",
                100.0 * ours.dhr,
                100.0 * ours.offered_dhr
            ));
        } else if let Some(d) = p.dhr {
            parts.push(format!("DHR {:.1} % (thesis {d} %)", 100.0 * ours.dhr));
        }
        if let Some(t) = p.throughput_rps {
            parts.push(format!(
                "{:.0} responses/s (thesis {t})",
                ours.throughput_rps
            ));
        }
        if let Some(h) = p.hit_ms {
            parts.push(format!("hits {:.2} ms (thesis {h})", ours.hit_ms.mean));
        }
        if let Some(m) = p.miss_ms {
            parts.push(format!("misses {:.1} ms (thesis {m})", ours.miss_ms.mean));
        }
        out.push(format!(
            "{} {} against the thesis: {}",
            p.contender,
            p.phase,
            parts.join("; ")
        ));
    }
    out
}

fn pct(v: f64) -> String {
    format!("{:.1}", 100.0 * v)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "–".into(), |x| format!("{x:.digits$}"))
}

/// The per-contender, per-phase table (text) with the thesis's rows after ours, then the
/// better performer per phase and metric and the proxies' surrogate metrics per phase.
pub fn summary_table(r: &CacheResults) -> String {
    format!(
        "{}\n{}\n{}",
        phase_table(r),
        crate::cache_verdicts::verdict_table(r),
        crate::cache_surrogates::surrogate_table(r)
    )
}

/// Per contender and phase, the thesis's rows after ours.
fn phase_table(r: &CacheResults) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<13} {:<6} {:>8} {:>8} {:>6} {:>7} {:>6} {:>7} {:>8} {:>8} {:>8} {:>6}",
        "contender",
        "phase",
        "offered",
        "resp/s",
        "DHR%",
        "offDHR%",
        "BHR%",
        "offBHR%",
        "hit ms",
        "miss ms",
        "all ms",
        "errors"
    );
    for c in &r.contenders {
        let Some(res) = &c.result else {
            let _ = writeln!(
                s,
                "{:<13} skipped: {}",
                c.name,
                c.skipped.as_deref().unwrap_or("?")
            );
            continue;
        };
        for p in &res.phases {
            let errors: u64 = p.errors.values().sum();
            let _ = writeln!(
                s,
                "{:<13} {:<6} {:>8.1} {:>8.1} {:>6} {:>7} {:>6} {:>7} {:>8.2} {:>8.1} {:>8.1} {:>6}",
                c.name,
                p.name,
                p.offered_rps,
                p.throughput_rps,
                pct(p.dhr),
                pct(p.offered_dhr),
                pct(p.bhr),
                pct(p.offered_bhr),
                p.hit_ms.mean,
                p.miss_ms.mean,
                p.response_ms.mean,
                errors
            );
        }
    }
    for p in &r.paper {
        let _ = writeln!(
            s,
            "{:<13} {:<6} {:>8} {:>8} {:>6} {:>7} {:>6} {:>7} {:>8} {:>8} {:>8}   (thesis)",
            p.contender,
            p.phase,
            "",
            opt(p.throughput_rps, 1),
            opt(p.dhr, 1),
            opt(p.offered_dhr, 1),
            opt(p.bhr, 1),
            opt(p.offered_bhr, 1),
            opt(p.hit_ms, 1),
            opt(p.miss_ms, 1),
            opt(p.response_ms, 1),
        );
    }
    s
}

/// Writes `results.json` and `index.html` (tables: per contender and phase, the thesis's
/// numbers, the proxies' CPU and memory, the better performer per phase and metric, CPU and
/// RSS over time, findings) into `out`; returns the HTML's path.
pub fn write_report(r: &CacheResults, out: &Path) -> Result<PathBuf, LabError> {
    std::fs::create_dir_all(out)
        .map_err(|e| LabError::Report(format!("{}: {e}", out.display())))?;
    let json = serde_json::to_string_pretty(r).map_err(|e| LabError::Report(e.to_string()))?;
    std::fs::write(out.join("results.json"), json)
        .map_err(|e| LabError::Report(format!("cannot write results.json: {e}")))?;
    let mut h = Page::new(&r.title, &r.title);
    let _ = write!(
        h,
        "<p>Rebuilds {f}. Mode {m}: time scale {ts}, cache {cb:.1} MiB per \
         contender, origin think time × {th}. Load average at start: {la}.</p>\
         <p><code>{cmd}</code></p><h2>Results per phase</h2><pre>{table}</pre>",
        f = escape(&r.figure),
        m = r.mode,
        ts = r.time_scale,
        cb = r.cache_bytes as f64 / 1048576.0,
        th = r.think_scale,
        la = escape(r.load_at_start.trim()),
        cmd = escape(&r.command),
        table = escape(&phase_table(r)),
    );
    h.push_str("<h2>Contenders</h2><table><tr><th>contender</th><th>version</th><th>set-up</th><th>CPU s</th><th>CPU ms / 1000 resp</th><th>RSS MB</th><th>generator CPU %</th></tr>");
    for c in &r.contenders {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&c.name),
            escape(&c.version),
            escape(c.skipped.as_deref().map_or(c.setup.as_str(), |w| w)),
            opt(c.proxy_cpu_s, 2),
            opt(c.proxy_cpu_ms_per_1k, 1),
            opt(c.proxy_rss_mb, 1),
            opt(c.result.as_ref().map(|x| x.generator_cpu_percent), 1),
        );
    }
    h.push_str("</table>");
    h.push_str(&crate::cache_verdicts::verdict_html(r));
    h.push_str(&crate::cache_plots::plots_html(r)?);
    h.push_str(&crate::cache_surrogates::surrogate_html(r)?);
    h.push_str("<h2>Findings</h2><ul>");
    for f in &r.findings {
        let _ = write!(h, "<li>{}</li>", escape(f));
    }
    h.push_str("</ul><h2>The thesis's numbers</h2><ul>");
    for p in &r.paper {
        let _ = write!(
            h,
            "<li>{} {}: {}</li>",
            escape(&p.contender),
            escape(&p.phase),
            escape(&p.source)
        );
    }
    h.push_str(
        "</ul><p>Per-second time lines of every run are in results.json \
                (contenders[].result.timeline).</p>",
    );
    let path = out.join("index.html");
    std::fs::write(&path, h.finish())
        .map_err(|e| LabError::Report(format!("cannot write index.html: {e}")))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capstan_contender_names_its_eviction_policy() {
        assert_eq!(capstan_policy("capstan"), Some("lru"));
        assert_eq!(capstan_policy("capstan-gdsf"), Some("gdsf"));
        assert_eq!(capstan_policy("capstan-s3-fifo"), Some("s3-fifo"));
        for not in ["capstan-", "capstan-fifo", "capstangdsf", "varnish", "gdsf"] {
            assert_eq!(capstan_policy(not), None, "{not}");
        }
        assert!(check_contender("trafficserver").is_ok());
        assert!(check_contender("capstan-lfu-da").is_ok());
        let why = check_contender("capstan-arc").unwrap_err();
        assert!(
            why.contains("\"capstan-arc\"")
                && why.contains("capstan-POLICY")
                && why.contains("sieve"),
            "{why}"
        );
    }
}
