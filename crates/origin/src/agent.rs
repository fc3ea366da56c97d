//! `capstan agent`: the load daemon for real back-ends (nginx, Apache) — SWEB's loadd beside a
//! server Capstan did not write. Every quarter interval it samples `/proc/stat` (CPU busy time),
//! `/proc/diskstats` (`io_ticks`: time a device had I/O in flight) and `/proc/net/dev` (bytes
//! against the link speed), and optionally nginx's `stub_status` (requests in progress and served),
//! and serves the very `LoadReport` an origin node serves at `GET /_capstan/load`, with
//! `resources = "agent"`.
//!
//! The utilisation of each quarter-interval tick is added up as busy seconds, so the report's
//! windows are the same time-weighted averages an origin's are, over the same window rule
//! (`LoadStats` in the private `load` module). The report describes the last tick (at most a
//! quarter interval ago), not the instant it is asked for.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use capstan_core::report::LoadReport;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::OriginError;
use crate::load::{Busy, LoadStats};
use crate::procfs::{self, Sample, Select};

/// What `capstan agent` is told.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// Where to serve the report; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Name in the report (default: the listen address).
    pub name: Option<String>,
    /// Length of the report's "last interval"; the machine is sampled four times per interval.
    pub interval: Duration,
    /// Block device to watch (`sda`, `nvme0n1`); `None`: the busiest of each tick.
    pub disk: Option<String>,
    /// Interface to watch (`eth0`); `None`: the busiest of each tick other than `lo`.
    pub net: Option<String>,
    /// Link speed of the interface, Mbit/s (each direction).
    pub link_mbps: f64,
    /// nginx `stub_status` URL (`http://127.0.0.1/nginx_status`): requests in progress become
    /// `active_requests`, requests handled become `served`.
    pub nginx_status: Option<String>,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 9901)),
            name: None,
            interval: Duration::from_secs(1),
            disk: None,
            net: None,
            link_mbps: 1000.0,
            nginx_status: None,
        }
    }
}

/// Shortest interval: a tick (a quarter of it) must be long enough for the kernel's counters
/// (CPU time in 10 ms ticks) to move.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

impl AgentConfig {
    fn validate(&self) -> Result<(), OriginError> {
        let bad = |m: String| Err(OriginError::Config(m));
        if self.interval < MIN_INTERVAL {
            return bad(format!(
                "interval must be at least {} ms, got {} ms",
                MIN_INTERVAL.as_millis(),
                self.interval.as_millis()
            ));
        }
        if !(self.link_mbps.is_finite() && self.link_mbps > 0.0) {
            return bad(format!(
                "link speed must be a positive number of Mbit/s, got {}",
                self.link_mbps
            ));
        }
        if let Some(url) = &self.nginx_status {
            StatusUrl::parse(url).map_err(OriginError::Config)?;
        }
        Ok(())
    }

    fn select(&self) -> Select {
        Select {
            disk: self.disk.clone(),
            net: self.net.clone(),
            link_bytes_per_s: self.link_mbps * 1e6 / 8.0,
        }
    }
}

/// Reads the three files, or says which one could not be read or understood.
fn read_sample(root: &Path) -> Result<Sample, String> {
    let read = |name: &str| {
        let path = root.join(name);
        std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))
    };
    Ok(Sample {
        cpu: procfs::parse_stat(&read("stat")?)?,
        disks: procfs::parse_diskstats(&read("diskstats")?)?,
        nets: procfs::parse_net_dev(&read("net/dev")?)?,
    })
}

/// A named disk or interface must exist now; otherwise the agent would report it idle forever.
fn check_names(config: &AgentConfig, first: &Sample) -> Result<(), OriginError> {
    if let Some(disk) = &config.disk {
        if !first.disks.iter().any(|d| &d.name == disk) {
            let have: Vec<&str> = first.disks.iter().map(|d| d.name.as_str()).collect();
            return Err(OriginError::Config(format!(
                "no disk {disk:?} in /proc/diskstats (have: {})",
                have.join(", ")
            )));
        }
    }
    if let Some(net) = &config.net {
        if !first.nets.iter().any(|n| &n.name == net) {
            let have: Vec<&str> = first.nets.iter().map(|n| n.name.as_str()).collect();
            return Err(OriginError::Config(format!(
                "no interface {net:?} in /proc/net/dev (have: {})",
                have.join(", ")
            )));
        }
    }
    Ok(())
}

/// An `http://host[:port]/path` URL, the only kind stub_status needs.
#[derive(Debug, Clone, PartialEq)]
struct StatusUrl {
    host: String,
    port: u16,
    path: String,
}

impl StatusUrl {
    fn parse(url: &str) -> Result<StatusUrl, String> {
        let bad = |why: &str| format!("bad nginx status URL {url:?}: {why}");
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| bad("only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let number = |p: &str| {
            p.parse::<u16>()
                .map_err(|_| bad("the port is not a number"))
        };
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (host, after) = v6.split_once(']').ok_or_else(|| bad("no ']'"))?;
                match after.strip_prefix(':') {
                    Some(p) => (host, number(p)?),
                    None if after.is_empty() => (host, 80),
                    None => return Err(bad("text after ']'")),
                }
            }
            None => match authority.rsplit_once(':') {
                Some((host, p)) => (host, number(p)?),
                None => (authority, 80),
            },
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        Ok(StatusUrl {
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }
}

/// What nginx's `stub_status` page says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StubStatus {
    /// Requests handled since nginx started (this page's own requests included).
    pub requests: u64,
    /// Connections reading a request or writing a response (this page's own request included).
    pub reading: u64,
    pub writing: u64,
}

/// Parses the stub_status page:
///
/// ```text
/// Active connections: 291
/// server accepts handled requests
///  16630948 16630948 31070465
/// Reading: 6 Writing: 179 Waiting: 106
/// ```
pub fn parse_stub_status(text: &str) -> Result<StubStatus, String> {
    let bad = || "not an nginx stub_status page".to_string();
    let lines: Vec<&str> = text.lines().collect();
    let counters = lines
        .iter()
        .position(|l| l.trim() == "server accepts handled requests")
        .and_then(|i| lines.get(i + 1))
        .ok_or_else(bad)?;
    let requests = counters
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .ok_or_else(bad)?;
    let rw = lines
        .iter()
        .find(|l| l.trim_start().starts_with("Reading:"))
        .ok_or_else(bad)?;
    let f: Vec<&str> = rw.split_whitespace().collect();
    let value = |key: &str| {
        f.iter()
            .position(|w| *w == key)
            .and_then(|i| f.get(i + 1))
            .and_then(|v| v.parse().ok())
            .ok_or_else(bad)
    };
    Ok(StubStatus {
        requests,
        reading: value("Reading:")?,
        writing: value("Writing:")?,
    })
}

/// Fetches the status page over HTTP/1.0 within `limit`.
async fn fetch_status(url: &StatusUrl, limit: Duration) -> Result<StubStatus, String> {
    let fetch = async {
        let mut s = TcpStream::connect((url.host.as_str(), url.port))
            .await
            .map_err(|e| format!("cannot connect to {}:{}: {e}", url.host, url.port))?;
        let req = format!("GET {} HTTP/1.0\r\nHost: {}\r\n\r\n", url.path, url.host);
        s.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        s.take(64 * 1024)
            .read_to_end(&mut buf)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&buf);
        let (head, body) = text.split_once("\r\n\r\n").ok_or("no response head")?;
        if head.split_whitespace().nth(1) != Some("200") {
            return Err(format!(
                "status page answered {:?}",
                head.lines().next().unwrap_or("")
            ));
        }
        parse_stub_status(body)
    };
    tokio::time::timeout(limit, fetch)
        .await
        .map_err(|_| "status page timed out".to_string())?
}

/// The running totals the report is made of.
struct Totals {
    busy: Busy,
    sample: Sample,
    sampled_at: Instant,
    /// From stub_status: requests in progress (this agent's own status request excluded), and
    /// the handled-requests counter last seen.
    active: u64,
    nginx_requests: Option<u64>,
    /// The status page's last failure, so it is logged once, not every tick.
    nginx_error: Option<String>,
}

struct Agent {
    config: AgentConfig,
    name: String,
    started: Instant,
    select: Select,
    status_url: Option<StatusUrl>,
    stats: LoadStats,
    totals: Mutex<Totals>,
}

impl Agent {
    fn lock(&self) -> std::sync::MutexGuard<'_, Totals> {
        self.totals.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One tick: add this tick's utilisations as busy seconds, and note nginx's counters.
    async fn tick(&self) {
        let nginx = match &self.status_url {
            Some(url) => Some(fetch_status(url, self.config.interval / 4).await),
            None => None,
        };
        let sample = read_sample(Path::new("/proc"));
        let now = Instant::now();
        let mut t = self.lock();
        match sample {
            Ok(sample) => {
                let dt = now.duration_since(t.sampled_at).as_secs_f64();
                let u = procfs::utilisation(&t.sample, &sample, dt, &self.select);
                t.busy.cpu_s += u.cpu * dt;
                t.busy.disk_s += u.disk * dt;
                t.busy.nic_s += u.net * dt;
                t.sample = sample;
                t.sampled_at = now;
            }
            // /proc does not go away on a running Linux; if it did, the time counts as idle.
            Err(e) => tracing::warn!("{e}"),
        }
        t.busy.at = now.duration_since(self.started).as_secs_f64();
        if let Some(status) = nginx {
            self.note_nginx(&mut t, status);
        }
        let busy = t.busy;
        drop(t);
        self.stats.tick(busy);
    }

    fn note_nginx(&self, t: &mut Totals, status: Result<StubStatus, String>) {
        match status {
            Ok(s) => {
                // Our own status request is one of those being written, and one of those handled.
                t.active = (s.reading + s.writing).saturating_sub(1);
                if let Some(before) = t.nginx_requests {
                    self.stats
                        .served_elsewhere(s.requests.saturating_sub(before).saturating_sub(1));
                }
                t.nginx_requests = Some(s.requests);
                if t.nginx_error.take().is_some() {
                    tracing::info!("nginx status page answers again");
                }
            }
            Err(e) => {
                if t.nginx_error.as_ref() != Some(&e) {
                    tracing::warn!("nginx status: {e}");
                }
                t.nginx_error = Some(e);
            }
        }
    }

    fn report(&self) -> LoadReport {
        let (busy, active, cpus) = {
            let t = self.lock();
            (t.busy, t.active, t.sample.cpu.cpus)
        };
        let w = self.stats.windows(busy);
        LoadReport {
            node: self.name.clone(),
            resources: "agent".into(),
            cores: cpus,
            speed: 1.0,
            uptime_s: self.started.elapsed().as_secs_f64(),
            active_requests: active,
            served: w.since_start.served,
            mean_service_ms: w.since_start.mean_service_ms,
            interval: w.interval,
            since_start: w.since_start,
            ..LoadReport::default()
        }
    }
}

/// An agent that is up and serving its report.
pub struct RunningAgent {
    addr: SocketAddr,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl RunningAgent {
    /// The address actually bound (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop sampling and serving.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
    }
}

/// Checks the configuration, takes a first sample, binds and starts sampling and serving on the
/// current runtime.
pub async fn start(config: AgentConfig) -> Result<RunningAgent, OriginError> {
    config.validate()?;
    let first = read_sample(Path::new("/proc")).map_err(OriginError::Config)?;
    check_names(&config, &first)?;
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|error| OriginError::Bind {
            addr: config.listen,
            error,
        })?;
    let addr = listener.local_addr().map_err(|error| OriginError::Bind {
        addr: config.listen,
        error,
    })?;
    let now = Instant::now();
    let agent = Arc::new(Agent {
        name: config.name.clone().unwrap_or_else(|| addr.to_string()),
        started: now,
        select: config.select(),
        status_url: config
            .nginx_status
            .as_deref()
            .map(StatusUrl::parse)
            .transpose()
            .map_err(OriginError::Config)?,
        stats: LoadStats::new(config.interval.as_secs_f64()),
        totals: Mutex::new(Totals {
            busy: Busy::default(),
            sample: first,
            sampled_at: now,
            active: 0,
            nginx_requests: None,
            nginx_error: None,
        }),
        config,
    });
    let (stop, stopped) = watch::channel(false);
    let sampler = tokio::spawn(sample_loop(agent.clone(), stopped.clone()));
    let server = tokio::spawn(accept_loop(agent, listener, stopped));
    Ok(RunningAgent {
        addr,
        stop,
        tasks: vec![sampler, server],
    })
}

async fn sample_loop(agent: Arc<Agent>, mut stopped: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(agent.config.interval / 4);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick of an interval fires at once; the first sample was taken at start.
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => agent.tick().await,
            _ = async { stopped.wait_for(|s| *s).await.is_ok() } => return,
        }
    }
}

async fn accept_loop(agent: Arc<Agent>, listener: TcpListener, mut stopped: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let agent = agent.clone();
                    tokio::spawn(async move {
                        let svc = service_fn(move |req| answer(agent.clone(), req));
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), svc)
                            .await;
                    });
                }
                Err(e) => {
                    // Out of descriptors and the like: back off instead of spinning.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            _ = async { stopped.wait_for(|s| *s).await.is_ok() } => return,
        }
    }
}

async fn answer<B>(
    agent: Arc<Agent>,
    req: Request<B>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let plain = |status: StatusCode, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n".into());
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(r);
    }
    if req.uri().path() != "/_capstan/load" {
        let body = format!(
            "capstan agent serves only /_capstan/load, not {}\n",
            req.uri().path()
        );
        return Ok(plain(StatusCode::NOT_FOUND, body));
    }
    let body = serde_json::to_vec_pretty(&agent.report()).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stub_status_parses() {
        let page = "Active connections: 291 \nserver accepts handled requests\n 16630948 16630948 \
                    31070465 \nReading: 6 Writing: 179 Waiting: 106 \n";
        assert_eq!(
            parse_stub_status(page),
            Ok(StubStatus {
                requests: 31_070_465,
                reading: 6,
                writing: 179
            })
        );
        assert!(parse_stub_status("<html>hello</html>").is_err());
        assert!(parse_stub_status("server accepts handled requests\n 1 2\nReading: 1\n").is_err());
    }

    #[test]
    fn status_urls() {
        let u = StatusUrl::parse("http://127.0.0.1:8080/nginx_status").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8080, "/nginx_status")
        );
        let u = StatusUrl::parse("http://localhost").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("localhost", 80, "/")
        );
        let u = StatusUrl::parse("http://[::1]:81/s").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 81));
        for (url, why) in [
            ("https://x/s", "only http://"),
            ("http://x:port/s", "port is not a number"),
            ("http:///s", "no host"),
        ] {
            let e = StatusUrl::parse(url).unwrap_err();
            assert!(e.contains(why), "{url}: {e}");
        }
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let c = AgentConfig {
            interval: Duration::from_millis(10),
            ..AgentConfig::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("at least 100 ms"));
        let c = AgentConfig {
            link_mbps: 0.0,
            ..AgentConfig::default()
        };
        assert!(c.validate().unwrap_err().to_string().contains("link speed"));
        let first = Sample {
            disks: vec![procfs::DiskTicks {
                name: "vda".into(),
                io_ticks_ms: 0,
            }],
            ..Sample::default()
        };
        let c = AgentConfig {
            disk: Some("sdz".into()),
            ..AgentConfig::default()
        };
        let e = check_names(&c, &first).unwrap_err().to_string();
        assert!(e.contains("\"sdz\"") && e.contains("have: vda"), "{e}");
    }
}
