//! Request routing and the node's services.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use capstan_core::report::LoadReport;
use capstan_core::text::percent_decode;
use capstan_model::Demand;
use capstan_workload::{stream, Dist, DocFile, DocTree, LifeCycle, WorkloadRng};
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode};
use http_body_util::Full;

use crate::config::{OriginConfig, Resources};
use crate::emulated::Emulated;
use crate::error::OriginError;
use crate::load::{Busy, Kind, LoadStats};
use crate::processes::{ProcessSlot, Processes};
use crate::real::{materialize, Real};

/// `X-Origin-Node`: the node's name (`--name`) on every response it serves. Named apart from
/// the switch's `--debug-headers` fields (`X-Capstan-Node`, `X-Capstan-Class`), which a node
/// must never be taken for.
pub const X_ORIGIN_NODE: &str = "x-origin-node";

/// `X-Origin-File-Cache: hit` or `miss`: whether an emulated node found a file in its modelled
/// memory file cache (the node's own page cache, not any HTTP cache); absent on real nodes and
/// on answers that are not files.
pub const X_ORIGIN_FILE_CACHE: &str = "x-origin-file-cache";

pub enum Res {
    Emulated(Arc<Emulated>),
    Real(Arc<Real>),
}

pub struct Node {
    pub config: OriginConfig,
    pub tree: DocTree,
    pub res: Res,
    pub stats: LoadStats,
    /// Process-per-connection mode (`process_limit`): the processes and their memory.
    pub processes: Option<Arc<Processes>>,
    pub name: String,
    name_header: Option<HeaderValue>,
    /// Headers of files that never change, built once: formatting dates and tags per request
    /// is a measurable share of serving a small file.
    fixed_headers: Vec<Option<FixedHeaders>>,
    /// File bodies kept in memory once read (real mode) or synthesised (emulated mode), as
    /// `Bytes`: every response of a file shares one buffer, and a response costs a reference
    /// count instead of a read and a copy. Bounded by `body_budget` bytes; files beyond it are
    /// read (or synthesised) per request.
    bodies: Vec<OnceLock<Bytes>>,
    body_budget: AtomicU64,
    /// Draws the demands of `/cgi-bin/demand.cgi?law=exp`, seeded by the node's seed and name
    /// so a run repeats.
    demand_rng: std::sync::Mutex<WorkloadRng>,
    /// Handshakes of the TLS listener (`tls_listen`), reported when there is one.
    pub tls: crate::tls::TlsCounters,
}

/// Default memory for file bodies kept in memory (`body_memory_mb`): real mode (the WebStone tree is 6 MB, webstone-2000
/// 38 MB) and emulated mode (where sixteen nodes may share one machine, and synthesising a body
/// is cheap anyway).
const REAL_BODY_MEMORY: u64 = 64 << 20;
const EMULATED_BODY_MEMORY: u64 = 8 << 20;

struct FixedHeaders {
    last_modified: HeaderValue,
    etag: HeaderValue,
    cache_control: HeaderValue,
}

type Resp = Response<Full<Bytes>>;

/// Freshness given to objects that never change (WebStone, CAP trees): one day.
const FIXED_MAX_AGE: u64 = 86_400;

impl Node {
    /// In process-per-connection mode, the idle process holding `permit` takes a newly
    /// accepted connection (its memory comes out of an emulated node's file cache).
    pub fn take_process(&self, permit: tokio::sync::OwnedSemaphorePermit) -> Option<ProcessSlot> {
        let processes = self.processes.as_ref()?;
        let memory = match &self.res {
            Res::Emulated(e) => Some(e.clone()),
            Res::Real(_) => None,
        };
        Some(ProcessSlot::take(processes, memory, permit))
    }

    pub async fn build(
        config: OriginConfig,
        tree: DocTree,
        addr: SocketAddr,
    ) -> Result<Arc<Node>, OriginError> {
        let res = match config.resources {
            Resources::Emulated => {
                let e = Emulated::new(&config.node, tree.total_bytes());
                if config.warm_cache {
                    e.warm(tree.files.iter().map(|f| (f.path.as_str(), f.size)));
                }
                Res::Emulated(e)
            }
            Resources::Real => {
                let dir = config.data_dir();
                let (tree, dir2) = (tree.clone(), dir.clone());
                tokio::task::spawn_blocking(move || materialize(&tree, &dir2))
                    .await
                    .map_err(|e| OriginError::Config(format!("tree writer failed: {e}")))??;
                let n = &config.node;
                let (cores, speed, nic) = (n.cores, n.speed, n.nic.mbit_per_s);
                let real = tokio::task::spawn_blocking(move || Real::new(cores, speed, nic, dir))
                    .await
                    .map_err(|e| OriginError::Config(format!("cpu calibration failed: {e}")))??;
                Res::Real(real)
            }
        };
        let fixed_headers = tree
            .files
            .iter()
            .map(|f| match f.life {
                LifeCycle::Fixed { .. } => {
                    let v = f.validators(0);
                    Some(FixedHeaders {
                        last_modified: http_date(v.last_modified),
                        etag: HeaderValue::from_str(&v.etag).ok()?,
                        cache_control: HeaderValue::from_str(&if f.cachable {
                            format!("public, max-age={FIXED_MAX_AGE}")
                        } else {
                            "no-store".to_string()
                        })
                        .ok()?,
                    })
                }
                LifeCycle::Cyclic { .. } => None,
            })
            .collect();
        let name = config.name.clone().unwrap_or_else(|| addr.to_string());
        let body_budget = AtomicU64::new(match (config.body_memory_mb, &res) {
            (Some(mb), _) => mb.saturating_mul(1 << 20),
            (None, Res::Real(_)) => REAL_BODY_MEMORY,
            (None, Res::Emulated(_)) => EMULATED_BODY_MEMORY,
        });
        Ok(Arc::new(Node {
            demand_rng: std::sync::Mutex::new(stream(
                config.seed,
                &format!("origin-demand-{name}"),
            )),
            bodies: tree.files.iter().map(|_| OnceLock::new()).collect(),
            tls: Default::default(),
            body_budget,
            name_header: HeaderValue::from_str(&name).ok(),
            fixed_headers,
            name,
            stats: LoadStats::new(config.load_interval_ms as f64 / 1e3),
            processes: config
                .process_limit
                .map(|n| Arc::new(Processes::new(n, config.process_memory, config.backlog))),
            config,
            tree,
            res,
        }))
    }

    pub fn busy(&self) -> Busy {
        match &self.res {
            Res::Emulated(e) => e.busy(),
            Res::Real(r) => r.busy(),
        }
    }

    pub fn report(&self) -> LoadReport {
        let busy = self.busy();
        let windows = self.stats.windows(busy);
        let cache = match &self.res {
            Res::Emulated(e) => Some(e.cache_report()),
            Res::Real(_) => None,
        };
        LoadReport {
            node: self.name.clone(),
            resources: self.config.resources.name().to_string(),
            tree: self.config.tree.to_string(),
            cores: self.config.node.cores,
            speed: self.config.node.speed,
            uptime_s: busy.at,
            active_requests: self.stats.active.load(Ordering::Relaxed),
            served: windows.since_start.served,
            mean_service_ms: windows.since_start.mean_service_ms,
            interval: windows.interval,
            since_start: windows.since_start,
            classes: windows.classes,
            partition: self.config.partition,
            cache,
            timer: match &self.res {
                Res::Emulated(e) => Some(e.lateness()),
                Res::Real(_) => None,
            },
            processes: self.processes.as_ref().map(|p| p.report()),
        }
    }

    /// Whether this node's own disk holds the object at request path `path` (always, unless
    /// the node is one partition of the tree).
    fn holds(&self, path: &str) -> bool {
        self.config
            .partition
            .is_none_or(|p| p.holds(capstan_core::hash_key(path)))
    }

    /// Model time now (emulated), where a request's chain of stages starts; 0 in real mode.
    fn clock(&self) -> f64 {
        match &self.res {
            Res::Emulated(e) => e.now(),
            Res::Real(_) => 0.0,
        }
    }

    /// Spend `seconds` of CPU, starting at model time `at`; returns when (in model time) it
    /// finished. Real mode burns the calibrated loop and keeps `at`.
    async fn cpu(&self, at: f64, seconds: f64) -> f64 {
        match &self.res {
            Res::Emulated(e) => e.cpu(at, seconds).await,
            Res::Real(r) => {
                r.cpu(seconds).await;
                at
            }
        }
    }

    /// Send `bytes` of response: modelled link time when emulated, a byte count when real (the
    /// real NIC does the real work after we return).
    async fn nic(&self, at: f64, bytes: u64) -> f64 {
        match &self.res {
            Res::Emulated(e) => e.nic(at, bytes).await,
            Res::Real(r) => {
                r.sent(bytes);
                at
            }
        }
    }

    /// The body of file `index`: from memory when it has been kept, otherwise read (real) or
    /// synthesised (emulated), and kept while the memory budget lasts.
    async fn body(&self, index: usize) -> std::io::Result<Bytes> {
        let cell = &self.bodies[index];
        if let Some(b) = cell.get() {
            return Ok(b.clone());
        }
        let f = &self.tree.files[index];
        let b = match &self.res {
            Res::Emulated(_) => Bytes::from(self.tree.content(f)),
            Res::Real(r) => Bytes::from(r.read_file(&f.path, f.size).await?),
        };
        let len = b.len() as u64;
        let fits = self
            .body_budget
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(len)
            })
            .is_ok();
        if fits && cell.set(b.clone()).is_err() {
            // Another worker kept it first: give the budget back.
            self.body_budget.fetch_add(len, Ordering::Relaxed);
        }
        Ok(b)
    }

    /// The SSL costs on top of a response of `bytes`.
    fn ssl(&self, bytes: u64) -> Demand {
        let p = &self.config.node;
        p.secure(
            Demand::default(),
            bytes,
            self.config.services.secure_handshake_every_request,
        )
    }
}

/// Decrements the active-request count however the request ends (including the client going
/// away mid-request, which drops the handler future).
struct Active<'a>(&'a LoadStats);

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Answers one request; `over_tls`: it came on the TLS listener.
pub async fn handle<B>(
    node: Arc<Node>,
    req: Request<B>,
    over_tls: bool,
) -> Result<Resp, Infallible> {
    let path = req.uri().path();
    let head = req.method() == Method::HEAD;
    if req.method() != Method::GET && !head {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(r);
    }
    if path == "/_capstan/load" {
        return Ok(load_report(&node));
    }
    let (secure, inner) = match path.strip_prefix("/secure") {
        Some(rest) if rest.starts_with('/') => (true, rest),
        _ => (false, path),
    };
    let real = matches!(node.res, Res::Real(_));
    if secure && real && !over_tls {
        return Ok(needs_tls(&node));
    }
    node.stats.active.fetch_add(1, Ordering::Relaxed);
    let _active = Active(&node.stats);
    let t = Instant::now();
    // A real node's secure request has paid the real handshake and pays the real encryption:
    // the modelled SSL costs would count them twice. An emulated node models them as before.
    let modelled_ssl = secure && !real;
    let (kind, mut resp) = serve(&node, &req, path, inner, modelled_ssl).await;
    let kind = if secure {
        kind.map(|_| Kind::Secure)
    } else {
        kind
    };
    node.stats.finished(t.elapsed().as_nanos() as u64, kind);
    if let Some(v) = &node.name_header {
        resp.headers_mut().insert(X_ORIGIN_NODE, v.clone());
    }
    resp.headers_mut()
        .insert(header::SERVER, HeaderValue::from_static("capstan-origin"));
    if head {
        let (parts, body) = resp.into_parts();
        let len = http_body_util::BodyExt::collect(body)
            .await
            .map(|b| b.to_bytes().len())
            .unwrap_or(0);
        let mut r = Response::from_parts(parts, Full::new(Bytes::new()));
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        return Ok(r);
    }
    Ok(resp)
}

/// `/secure/…` in the clear on a real node: refused, as Apache's `SSLRequireSSL` does, with
/// where to go instead. 403 rather than a redirect: the switch and the load generator must not
/// quietly turn the secure class into a plain one.
fn needs_tls(node: &Node) -> Resp {
    let where_ = match node.config.tls_listen {
        Some(_) => "use this node's TLS listener (--tls-listen)".to_string(),
        None => "this node has no TLS listener: start it with --tls-listen ADDR --tls-cert PEM \
                 --tls-key PEM"
            .to_string(),
    };
    text(
        StatusCode::FORBIDDEN,
        &format!(
            "/secure/ needs TLS with --resources real (the real handshake and encryption are \
             the secure class's cost): {where_}\n"
        ),
    )
}

/// The load report as the origin sends it: core's wire format and, with a TLS listener, its
/// handshake counts (a field readers of the wire format that do not know it skip).
#[derive(serde::Serialize)]
struct OriginReport {
    #[serde(flatten)]
    report: LoadReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<crate::tls::TlsReport>,
}

/// `GET /_capstan/load`: the node's report as JSON.
fn load_report(node: &Node) -> Resp {
    let report = OriginReport {
        report: node.report(),
        tls: node.config.tls_listen.map(|_| node.tls.report()),
    };
    let body = serde_json::to_vec_pretty(&report).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(body)));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The report address (`report_listen`): the load report and nothing else.
pub async fn handle_report<B>(node: Arc<Node>, req: Request<B>) -> Result<Resp, Infallible> {
    Ok(match (req.method(), req.uri().path()) {
        (&Method::GET | &Method::HEAD, "/_capstan/load") => load_report(&node),
        _ => text(
            StatusCode::NOT_FOUND,
            "this address serves only GET /_capstan/load\n",
        ),
    })
}

fn text(status: StatusCode, body: &str) -> Resp {
    let mut r = Response::new(Full::new(Bytes::copy_from_slice(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Serves `path` (the request path without `/secure`) and says which kind of request it was;
/// `None` for requests of no reported kind (unknown objects). `full_path` is the locality key;
/// `secure`: add the modelled SSL costs (a secure request on an emulated node).
async fn serve<B>(
    node: &Node,
    req: &Request<B>,
    full_path: &str,
    path: &str,
    secure: bool,
) -> (Option<Kind>, Resp) {
    let services = &node.config.services;
    match path {
        "/cgi-bin/cpu_light.cgi" => (
            Some(Kind::CpuLight),
            cgi(node, "cpu_light", services.cpu_light_ms, secure).await,
        ),
        "/cgi-bin/cpu_med.cgi" => (
            Some(Kind::CpuMed),
            cgi(node, "cpu_med", services.cpu_med_ms, secure).await,
        ),
        "/cgi-bin/disk_load.cgi" => (
            Some(Kind::DiskLoad),
            disk_load(node, req.uri().query(), secure).await,
        ),
        "/cgi-bin/demand.cgi" => (Some(Kind::Demand), demand(node, req.uri().query()).await),
        _ if path.starts_with(capstan_workload::polygraph::PREFIX) => {
            (Some(Kind::Static), polygraph_object(node, req, path).await)
        }
        _ => match node.tree.position(path) {
            Some(i) => {
                let local = node.holds(full_path);
                let kind = if local {
                    Kind::Static
                } else {
                    Kind::StaticRemote
                };
                (Some(kind), static_file(node, req, i, secure, local).await)
            }
            None => (
                None,
                text(StatusCode::NOT_FOUND, &format!("no such object: {path}\n")),
            ),
        },
    }
}

/// A CPU-bound CGI: `ms` of CPU, then a short text answer.
async fn cgi(node: &Node, name: &str, ms: f64, secure: bool) -> Resp {
    let body = format!("{name} done: {ms} ms of cpu on {}\n", node.name);
    let len = body.len() as u64;
    let ssl = if secure {
        node.ssl(len)
    } else {
        Demand::default()
    };
    let t = node.cpu(node.clock(), ms / 1e3 + ssl.cpu_s).await;
    node.nic(t, len + ssl.nic_bytes).await;
    text(StatusCode::OK, &body)
}

/// How `/cgi-bin/demand.cgi` spends its demand.
#[derive(Debug, Clone, Copy, PartialEq)]
struct DemandSpec {
    mean_ms: f64,
    exponential: bool,
    fcfs: bool,
}

/// Parses `ms=M[&law=const|exp][&queue=ps|fcfs]`; the error is one line.
fn demand_spec(query: Option<&str>) -> Result<DemandSpec, String> {
    let mut spec = DemandSpec {
        mean_ms: f64::NAN,
        exponential: false,
        fcfs: false,
    };
    for (k, v) in query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
    {
        match (k, v) {
            ("ms", v) => spec.mean_ms = v.parse().unwrap_or(f64::NAN),
            ("law", "const") => spec.exponential = false,
            ("law", "exp") => spec.exponential = true,
            ("queue", "ps") => spec.fcfs = false,
            ("queue", "fcfs") => spec.fcfs = true,
            _ => {
                return Err(format!(
                    "demand.cgi: bad parameter {k}={v:?} (ms=M, law=const|exp, queue=ps|fcfs)"
                ))
            }
        }
    }
    if !(spec.mean_ms > 0.0 && spec.mean_ms <= 60_000.0) {
        return Err("demand.cgi needs ms=M, a mean CPU demand from 0 to 60000 ms".into());
    }
    Ok(spec)
}

/// A CPU demand the request states (for checks against queueing theory): `ms` of CPU at speed
/// 1, constant or drawn from an exponential law with that mean, spent on the processor-shared
/// CPU (`queue=ps`) or on one of the cores first come first served (`queue=fcfs`, emulated
/// only).
async fn demand(node: &Node, query: Option<&str>) -> Resp {
    let spec = match demand_spec(query) {
        Ok(s) => s,
        Err(e) => return text(StatusCode::BAD_REQUEST, &format!("{e}\n")),
    };
    let seconds = if spec.exponential {
        let mut rng = node.demand_rng.lock().unwrap_or_else(|p| p.into_inner());
        Dist::Exp {
            mean: spec.mean_ms / 1e3,
        }
        .sample(&mut *rng)
    } else {
        spec.mean_ms / 1e3
    };
    let body = format!(
        "demand done: {:.3} ms of cpu on {}\n",
        seconds * 1e3,
        node.name
    );
    let t = match (&node.res, spec.fcfs) {
        (Res::Emulated(e), true) => e.cpu_fcfs(e.now(), seconds).await,
        (Res::Real(_), true) => {
            return text(
                StatusCode::NOT_IMPLEMENTED,
                "demand.cgi: queue=fcfs needs --resources emulated\n",
            )
        }
        (_, false) => node.cpu(node.clock(), seconds).await,
    };
    node.nic(t, body.len() as u64).await;
    text(StatusCode::OK, &body)
}

/// Map the `file=` parameter to an object of the tree. The thesis passes an absolute path on the
/// Apache host (`/home/webston/apache/htdocs/file50k.html`), so after an exact match we try the
/// part after `/htdocs`, then the bare file name.
fn resolve<'a>(tree: &'a DocTree, file: &str) -> Option<&'a DocFile> {
    if let Some(f) = tree.get(file) {
        return Some(f);
    }
    if let Some(i) = file.find("/htdocs/") {
        if let Some(f) = tree.get(&file[i + "/htdocs".len()..]) {
            return Some(f);
        }
    }
    let base = file.rsplit('/').next()?;
    tree.get(&format!("/{base}"))
}

async fn disk_load(node: &Node, query: Option<&str>, secure: bool) -> Resp {
    let file = query.and_then(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "file")
            .map(|(_, v)| percent_decode(v))
    });
    let Some(file) = file else {
        return text(
            StatusCode::BAD_REQUEST,
            "disk_load.cgi needs ?file=PATH (an object of the tree)\n",
        );
    };
    let Some(f) = resolve(&node.tree, &file) else {
        return text(
            StatusCode::NOT_FOUND,
            &format!("disk_load.cgi: no such object: {file}\n"),
        );
    };
    let t = match &node.res {
        Res::Emulated(e) => {
            e.disk(e.now(), node.config.services.disk_load_ms / 1e3)
                .await
        }
        Res::Real(r) => {
            if let Err(err) = r.disk_load(&f.path).await {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("disk_load.cgi: {err}\n"),
                );
            }
            0.0
        }
    };
    let body = format!(
        "disk_load done: read, synced and deleted a copy of {} ({} bytes) on {}\n",
        f.path, f.size, node.name
    );
    let len = body.len() as u64;
    if secure {
        let ssl = node.ssl(len);
        let t = node.cpu(t, ssl.cpu_s).await;
        node.nic(t, len + ssl.nic_bytes).await;
    } else {
        node.nic(t, len).await;
    }
    text(StatusCode::OK, &body)
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn http_date(secs: u64) -> HeaderValue {
    let s = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs));
    HeaderValue::from_str(&s).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A Web Polygraph object named by its URL (`capstan_workload::polygraph`): its size, type
/// and cachability come from the path, its validators from the type's life cycle; it is
/// answered after the server think time (`xact_think`).
async fn polygraph_object<B>(node: &Node, req: &Request<B>, path: &str) -> Resp {
    let o = match capstan_workload::polygraph::PolyObject::parse_path(path) {
        Ok(o) => o,
        Err(e) => return text(StatusCode::NOT_FOUND, &format!("{e}\n")),
    };
    let scale = node.config.polygraph_think_scale;
    if scale > 0.0 {
        static DRAWS: AtomicU64 = AtomicU64::new(0);
        let mut rng = capstan_workload::stream(
            node.config.seed ^ DRAWS.fetch_add(1, Ordering::Relaxed),
            "origin-think",
        );
        let think = node.config.polygraph_think.sample(&mut rng) * scale;
        tokio::time::sleep(Duration::from_secs_f64(think.clamp(0.0, 3600.0))).await;
    }
    let now = unix_now();
    let file = DocFile::synthetic(path, o.size, o.content_type, o.cachable, o.life);
    let v = file.validators(now);
    let not_modified = o.cachable
        && req
            .headers()
            .get(header::IF_NONE_MATCH)
            .and_then(|h| h.to_str().ok())
            .is_some_and(|h| h.split(',').any(|t| t.trim() == v.etag || t.trim() == "*"));
    let body = if not_modified {
        Bytes::new()
    } else {
        let key = capstan_workload::rng::fnv1a(path.as_bytes());
        Bytes::from(node.tree.synthesize(key, o.size))
    };
    if let Res::Real(r) = &node.res {
        r.sent(body.len() as u64);
    }
    let mut r = Response::new(Full::new(body));
    if not_modified {
        *r.status_mut() = StatusCode::NOT_MODIFIED;
    }
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(o.content_type),
    );
    h.insert(header::LAST_MODIFIED, http_date(v.last_modified));
    if let Ok(etag) = HeaderValue::from_str(&v.etag) {
        h.insert(header::ETAG, etag);
    }
    let cc = match (o.cachable, v.expires) {
        (false, _) => "no-store".to_string(),
        (true, Some(exp)) => {
            h.insert(header::EXPIRES, http_date(exp));
            format!("public, max-age={}", exp.saturating_sub(now))
        }
        (true, None) => format!("public, max-age={FIXED_MAX_AGE}"),
    };
    if let Ok(cc) = HeaderValue::from_str(&cc) {
        h.insert(header::CACHE_CONTROL, cc);
    }
    r
}

/// A file of the tree; `local` when this node's own disk holds it (else a miss reads it over
/// NFS).
async fn static_file<B>(
    node: &Node,
    req: &Request<B>,
    index: usize,
    secure: bool,
    local: bool,
) -> Resp {
    let f = &node.tree.files[index];
    let fixed = node.fixed_headers[index].as_ref();
    // Only objects with a life cycle need the wall-clock time (one system call saved per
    // request of an unchanging file).
    let now = if fixed.is_some() { 0 } else { unix_now() };
    let v = match fixed {
        Some(_) => None,
        None => Some(f.validators(now)),
    };
    let not_modified = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| {
            let etag = match (fixed, &v) {
                (Some(fh), _) => fh.etag.to_str().unwrap_or(""),
                (None, Some(v)) => v.etag.as_str(),
                (None, None) => "",
            };
            h.split(',').any(|t| t.trim() == etag || t.trim() == "*")
        });

    let mut cache_header = None;
    let body: Bytes = if not_modified {
        // A revalidation costs the request overhead but no file transfer.
        node.cpu(node.clock(), node.config.node.static_cpu_ms / 1e3)
            .await;
        Bytes::new()
    } else {
        match &node.res {
            Res::Emulated(e) => {
                let hit = e.cache_access(&f.path, f.size);
                cache_header = Some(if hit { "hit" } else { "miss" });
                let p = &node.config.node;
                let mut d = p.static_file(f.size, hit);
                if secure {
                    d = p.secure(
                        d,
                        f.size,
                        node.config.services.secure_handshake_every_request,
                    );
                }
                // Each stage starts at the model time the previous one finished. A miss of a
                // file another node holds reads it from there instead of the local disk.
                let t = if local || hit {
                    e.disk(e.now(), d.disk_s).await
                } else {
                    e.remote(e.now(), p.remote_read_s(f.size)).await
                };
                let t = e.cpu(t, d.cpu_s).await;
                e.nic(t, d.nic_bytes).await;
                match node.body(index).await {
                    Ok(b) => b,
                    Err(err) => {
                        return text(
                            StatusCode::INTERNAL_SERVER_ERROR,
                            &format!("cannot make {}: {err}\n", f.path),
                        )
                    }
                }
            }
            Res::Real(r) => match node.body(index).await {
                Ok(b) => {
                    if secure {
                        let ssl = node.ssl(f.size);
                        r.cpu(ssl.cpu_s).await;
                        r.sent(ssl.nic_bytes);
                    }
                    r.sent(b.len() as u64);
                    b
                }
                Err(err) => {
                    return text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &format!("cannot read {}: {err}\n", f.path),
                    )
                }
            },
        }
    };

    let mut r = Response::new(Full::new(body));
    if not_modified {
        *r.status_mut() = StatusCode::NOT_MODIFIED;
    }
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(f.content_type),
    );
    if let Some(fh) = fixed {
        h.insert(header::LAST_MODIFIED, fh.last_modified.clone());
        h.insert(header::ETAG, fh.etag.clone());
        h.insert(header::CACHE_CONTROL, fh.cache_control.clone());
    } else if let Some(v) = v {
        h.insert(header::LAST_MODIFIED, http_date(v.last_modified));
        if let Ok(etag) = HeaderValue::from_str(&v.etag) {
            h.insert(header::ETAG, etag);
        }
        let cc = match (f.cachable, v.expires) {
            (false, _) => "no-store".to_string(),
            (true, Some(exp)) => {
                h.insert(header::EXPIRES, http_date(exp));
                format!("public, max-age={}", exp.saturating_sub(now))
            }
            (true, None) => format!("public, max-age={FIXED_MAX_AGE}"),
        };
        if let Ok(cc) = HeaderValue::from_str(&cc) {
            h.insert(header::CACHE_CONTROL, cc);
        }
    }
    if let Some(c) = cache_header {
        h.insert(X_ORIGIN_FILE_CACHE, HeaderValue::from_static(c));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_workload::TreeKind;

    #[test]
    fn demand_parameters() {
        let s = demand_spec(Some("ms=5&law=exp&queue=fcfs")).unwrap();
        assert_eq!((s.mean_ms, s.exponential, s.fcfs), (5.0, true, true));
        let s = demand_spec(Some("ms=2.5")).unwrap();
        assert_eq!((s.mean_ms, s.exponential, s.fcfs), (2.5, false, false));
        for bad in [
            None,
            Some("ms=0"),
            Some("ms=x"),
            Some("ms=1&law=pareto"),
            Some("ms=1&queue=lifo"),
            Some("ms=1&x"),
        ] {
            let e = demand_spec(bad).unwrap_err();
            assert!(
                e.starts_with("demand.cgi") && !e.contains('\n'),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("%2Ffile50k.html"), "/file50k.html");
        assert_eq!(percent_decode("a+b%zz%4"), "a b%zz%4");
    }

    #[test]
    fn disk_load_file_parameter_forms() {
        let t = DocTree::generate(TreeKind::Webstone, 1, None).unwrap();
        for p in [
            "/file50k.html",
            "/home/webston/apache/htdocs/file50k.html",
            "file50k.html",
        ] {
            assert_eq!(resolve(&t, p).unwrap().path, "/file50k.html", "{p}");
        }
        assert!(resolve(&t, "/nope.html").is_none());
    }
}
