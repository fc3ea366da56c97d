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
//! The run computes the verdicts and findings; the report ([`crate::report::cache`]) shows per
//! contender and phase the offered rate, throughput, DHR and BHR beside the offered hit ratio,
//! hit and miss response times, errors, the proxy's CPU time and memory, and the thesis's own
//! numbers (Table 4.6 and §4.4) beside ours; the better performer per phase and metric beside
//! the thesis's call ([`verdicts`]); and the proxies' CPU, memory and disk I/O sampled every
//! second ([`surrogates`]); hit and miss response-time CDFs and response time against offered
//! rate ([`plots`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use capstan_bench::polygraph::{PhaseResult, PolyConfig};
use capstan_bench::Target;

use crate::model::cache::*;
use crate::model::error::LabError;
use crate::procs::cluster::free_loopback_port;
use crate::procs::daemon::{tree_cpu, tree_rss_mb, version, Daemon};
use surrogates::Sampler;

pub(crate) mod plots;
pub(crate) mod surrogates;
pub(crate) mod verdicts;

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
    crate::procs::servers::ensure_package(package, &Path::new(debian).join(name))
        .map_err(|why| format!("{name} is not installed ({why})"))
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
    let records = include_str!("../../../../../benches/cache/trafficserver/records.config")
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
        include_str!("../../../../../benches/cache/trafficserver/ip_allow.yaml"),
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
    results.verdicts = crate::run::cache::verdicts::better_performers(&results);
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
    out.extend(crate::run::cache::plots::knee_findings(r));
    out.extend(against_thesis(r, &ran));
    out.extend(crate::run::cache::surrogates::surrogate_findings(r));
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
