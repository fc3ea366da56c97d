//! `capstan origin`: run a test back-end node.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use capstan_origin::{OriginConfig, Resources};
use capstan_workload::{DocTree, TreeKind};

/// Flags override the config file, which overrides the built-in defaults shown here.
#[derive(clap::Args, Debug)]
#[command(after_help = "The node serves a generated document tree, the Jones \
                  thesis's CGI services (/cgi-bin/cpu_light.cgi, /cgi-bin/cpu_med.cgi, \
                  /cgi-bin/disk_load.cgi?file=PATH), /secure/… variants with the CAP paper's SSL \
                  costs, and a JSON load report at GET /_capstan/load.\n\n\
                  For checks against queueing theory (capstan lab validate), \
                  /cgi-bin/demand.cgi?ms=M[&law=const|exp][&queue=ps|fcfs] spends a CPU demand of \
                  mean M ms, constant or exponential, on the processor-shared CPU (ps) or on one \
                  of the --cores served first come first served from one queue (fcfs: M/M/c; \
                  emulated only).\n\n\
                  With --resources emulated (the default) each request waits in modelled CPU \
                  (processor sharing), disk (FCFS), NIC and memory-cache queues, so many nodes on \
                  one machine behave like separate machines. With --resources real it burns a \
                  calibrated CPU loop, does real synchronous disk I/O and serves real files \
                  written under --data-dir.\n\n\
                  With --partition K/N the node holds only its share of the tree on its own \
                  disk (hash_key(path) % N == K, the request path as the switch's locality key); \
                  a miss of another file is read over NFS, (1 + --remote-penalty) times the local \
                  disk read, on an FCFS path of its own, and the load report counts it under \
                  classes.static-remote.\n\n\
                  With --process-limit N the node serves like Apache's prefork server (Banga & \
                  Druschel §5.5): each connection holds a process from accept to close, at most N \
                  at once, the rest wait in the listen backlog (--backlog); each process in use \
                  takes --process-memory from the memory file cache, so long-lived (WAN) \
                  connections shrink the cache and turn hits into disk reads. The load report's \
                  `processes` (in_use, waiting, memory) and `cache.capacity_bytes` show it; \
                  --report-listen serves the report on an address no process limit applies to.\n\n\
                  Web Polygraph objects: any GET /pg/wWORLD/TYPE/ID_SIZE_C.EXT (the URLs \
                  `capstan bench --polygraph` asks for) is answered with SIZE bytes after the \
                  server think time (normal 0.3 s, sd 0.1 s; --polygraph-think-scale), with \
                  Cache-Control no-store when C is `u` and public with max-age up to the \
                  object's next modification when it is `c`, and Last-Modified, Expires and \
                  ETag from the type's life cycle (Bakhtiyari thesis §3.8).\n\n\
                  The secure class for real: --tls-listen ADDR --tls-cert PEM --tls-key PEM adds \
                  an HTTPS listener (rustls, TLS 1.2 and 1.3, ALPN http/1.1) serving everything \
                  the plain one does. With --resources real, /secure/… is served only over TLS \
                  and pays no modelled SSL cost: the real handshake (one per TLS session; \
                  resumed sessions are abbreviated) and the real encryption are its cost. \
                  /secure/… in the clear on a real node gets 403 saying so. With --resources \
                  emulated nothing changes: /secure/… pays the CAP paper's modelled SSL costs \
                  (Table 2) on either listener. The load report's `tls` object counts \
                  handshakes (completed, of them resumed; failed).\n\n\
                  With --register etcd://HOST:PORT/PREFIX the node puts its address \
                  (--advertise, or the listen address) at PREFIX + its name (--name, or the \
                  address) in etcd, as {\"address\":\"HOST:PORT\"} under a lease it renews, for \
                  a switch's etcd discovery source to follow. On SIGTERM or Ctrl-C it deletes \
                  the key first, serves --deregister-wait more while switches drain it, then \
                  closes its listener; killed, its key vanishes at lease expiry \
                  (--register-ttl).\n\n\
                  Response headers of its own: X-Origin-Node (the node's --name) on every \
                  response, and on the tree's files X-Origin-File-Cache: hit or miss in the \
                  emulated node's modelled memory file cache (not an HTTP cache; the switch's \
                  --debug-headers are X-Capstan-*).\n\n\
                  Prints `listening on ADDR` on standard output once it is serving, then \
                  `tls listening on ADDR` when there is a TLS listener, then `registered KEY` \
                  when --register has put its key.")]
pub struct OriginArgs {
    /// TOML file with any of the settings below (same names; node capacity under [node],
    /// [node.disk], [node.nic], [node.ssl]; service demands under [services]).
    #[arg(long, short = 'c', value_name = "FILE")]
    config: Option<PathBuf>,

    /// Address to listen on; port 0 picks a free one [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,

    /// Node name reported in /_capstan/load and the X-Origin-Node header [default: the listen
    /// address]
    #[arg(long, value_name = "NAME")]
    name: Option<String>,

    /// Document tree to serve [default: webstone]
    #[arg(long, value_name = "TREE", value_parser = ["webstone", "webstone-2000", "polygraph", "cap", "sweb"])]
    tree: Option<String>,

    /// Seed of the tree (same seed, byte-identical tree) [default: 1]
    #[arg(long, value_name = "N")]
    seed: Option<u64>,

    /// Number of objects for the polygraph and cap trees [default: 2000]
    #[arg(long, value_name = "N")]
    files: Option<usize>,

    /// Spend modelled time (emulated) or real CPU and disk (real) [default: emulated]
    #[arg(long, value_name = "MODE", value_parser = ["emulated", "real"])]
    resources: Option<String>,

    /// CPU cores of the node (processor shared among requests) [default: 1]
    #[arg(long, value_name = "N")]
    cores: Option<u32>,

    /// Speed factor of CPU, memory and disk; 0.5 doubles their times [default: 1.0]
    #[arg(long, value_name = "F", allow_negative_numbers = true)]
    speed: Option<f64>,

    /// Directory for the real-mode tree [default: <temp dir>/capstan-origin-TREE-seedN]
    #[arg(long, value_name = "DIR")]
    data_dir: Option<PathBuf>,

    /// Memory file cache size as a fraction of the tree (emulated mode) [default: 0.15]
    #[arg(long, value_name = "F")]
    cache_fraction: Option<f64>,

    /// CPU demand of /cgi-bin/cpu_light.cgi in ms [default: 40]
    #[arg(long, value_name = "MS")]
    cpu_light_ms: Option<f64>,

    /// CPU demand of /cgi-bin/cpu_med.cgi ("cpu heavy") in ms [default: 100]
    #[arg(long, value_name = "MS")]
    cpu_med_ms: Option<f64>,

    /// Disk demand of /cgi-bin/disk_load.cgi in emulated mode, in ms [default: 100]
    #[arg(long, value_name = "MS")]
    disk_load_ms: Option<f64>,

    /// Memory for file bodies kept after their first request, shared by later responses, in MiB;
    /// beyond it files are read (real) or synthesised (emulated) per request [default: 64 in real
    /// mode, 8 in emulated mode]
    #[arg(long, value_name = "MB")]
    body_memory_mb: Option<u64>,

    /// Node K of N: its disk holds the files whose path hashes to K, the rest are read over NFS
    /// (SWEB §3.2; emulated mode) [default: none, every file is local]
    #[arg(long, value_name = "K/N")]
    partition: Option<String>,

    /// How much more a remote (NFS) read costs than a local disk read: 0.6 is SWEB's Ethernet
    /// 50–70 %, 0.1 its Meiko CS-2 (b1 = 5, b2 = 4.5 MB/s) [default: 0.6]
    #[arg(long, value_name = "F", allow_negative_numbers = true)]
    remote_penalty: Option<f64>,

    /// Process-per-connection mode (Apache prefork; 152 in Banga & Druschel §5.5): at most N
    /// connections served at once, the rest wait in the backlog [default: none, event-driven]
    #[arg(long, value_name = "N")]
    process_limit: Option<u32>,

    /// Memory each process in use takes from the modelled file cache: 500KB, 512KiB, 1MB
    /// (≈ 500 KB per Apache process, §5.5) [default: 500KB]
    #[arg(long, value_name = "SIZE")]
    process_memory: Option<String>,

    /// Listen backlog: connections the kernel holds until accepted (at most net.core.somaxconn);
    /// beyond it SYNs are ignored and clients retransmit [default: 4096]
    #[arg(long, value_name = "N")]
    backlog: Option<u32>,

    /// Start with the modelled memory file cache holding the tree (every file read once, as
    /// much as fits), so a short run sees a warm server, not a cold disk (emulated mode)
    /// [default: cold]
    #[arg(long)]
    warm_cache: bool,

    /// Also serve GET /_capstan/load (only) on this address, outside the process limit, so it
    /// is readable while every process is busy [default: none]
    #[arg(long, value_name = "ADDR")]
    report_listen: Option<SocketAddr>,

    /// Also serve HTTPS on this address (needs --tls-cert and --tls-key); with --resources real,
    /// /secure/… is served only there [default: none]
    #[arg(long, value_name = "ADDR")]
    tls_listen: Option<SocketAddr>,

    /// PEM certificate chain of the TLS listener, the server's certificate first
    #[arg(long, value_name = "PEM")]
    tls_cert: Option<PathBuf>,

    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 RSA or SEC1 EC)
    #[arg(long, value_name = "PEM")]
    tls_key: Option<PathBuf>,

    /// Window of the "interval" figures in /_capstan/load, in ms [default: 1000]
    #[arg(long, value_name = "MS")]
    load_interval_ms: Option<u64>,

    /// Worker threads, each with its own event loop and its own listening socket
    /// (SO_REUSEPORT; with --process-limit they share one socket and its backlog); all share
    /// the node's tree and resource models [default: one per CPU of this machine]
    #[arg(long, value_name = "N")]
    threads: Option<usize>,

    /// Multiply the server think time of Web Polygraph objects (/pg/… URLs; normal(0.3 s,
    /// 0.1 s) unless the config file's polygraph_think says otherwise) by F; 0: none
    /// [default: 1]
    #[arg(long, value_name = "F")]
    polygraph_think_scale: Option<f64>,

    /// Print the tree as a WebStone file list (`/path weight #size`) and exit.
    #[arg(long)]
    print_filelist: bool,

    #[command(flatten)]
    register: Box<crate::register::RegisterArgs>,
}

fn resolve(args: &OriginArgs) -> anyhow::Result<OriginConfig> {
    let mut c = match &args.config {
        Some(path) => OriginConfig::from_file(path)?,
        None => OriginConfig::default(),
    };
    if let Some(v) = args.listen {
        c.listen = v;
    }
    if let Some(v) = &args.name {
        c.name = Some(v.clone());
    }
    if let Some(v) = &args.tree {
        c.tree = v.parse::<TreeKind>()?;
    }
    if let Some(v) = args.seed {
        c.seed = v;
    }
    if let Some(v) = args.files {
        c.files = Some(v);
    }
    if let Some(v) = &args.resources {
        c.resources = v.parse::<Resources>().map_err(anyhow::Error::msg)?;
    }
    if let Some(v) = args.cores {
        c.node.cores = v;
    }
    if let Some(v) = args.speed {
        c.node.speed = v;
    }
    if let Some(v) = &args.data_dir {
        c.data_dir = Some(v.clone());
    }
    if let Some(v) = args.cache_fraction {
        c.node.cache_fraction = v;
    }
    if let Some(v) = args.cpu_light_ms {
        c.services.cpu_light_ms = v;
    }
    if let Some(v) = args.cpu_med_ms {
        c.services.cpu_med_ms = v;
    }
    if let Some(v) = args.disk_load_ms {
        c.services.disk_load_ms = v;
    }
    if let Some(v) = args.body_memory_mb {
        c.body_memory_mb = Some(v);
    }
    if let Some(v) = &args.partition {
        let p =
            capstan_origin::parse_partition(v).map_err(|e| anyhow::anyhow!("--partition: {e}"))?;
        c.partition = Some(p);
    }
    if let Some(v) = args.remote_penalty {
        c.node.remote_penalty = v;
    }
    if let Some(v) = args.process_limit {
        c.process_limit = Some(v);
    }
    if let Some(v) = &args.process_memory {
        c.process_memory =
            capstan_origin::parse_size(v).map_err(|e| anyhow::anyhow!("--process-memory: {e}"))?;
    }
    if args.process_memory.is_some() && c.process_limit.is_none() {
        anyhow::bail!(
            "--process-memory applies to process-per-connection mode: add --process-limit N"
        );
    }
    if let Some(v) = args.backlog {
        c.backlog = v;
    }
    if args.warm_cache {
        c.warm_cache = true;
    }
    if let Some(v) = args.report_listen {
        c.report_listen = Some(v);
    }
    if let Some(v) = args.polygraph_think_scale {
        c.polygraph_think_scale = v;
    }
    if let Some(v) = args.load_interval_ms {
        c.load_interval_ms = v;
    }
    if let Some(v) = args.tls_listen {
        c.tls_listen = Some(v);
    }
    if let Some(v) = &args.tls_cert {
        c.tls_cert = Some(v.clone());
    }
    if let Some(v) = &args.tls_key {
        c.tls_key = Some(v.clone());
    }
    c.validate()?;
    Ok(c)
}

pub fn run(args: OriginArgs) -> anyhow::Result<()> {
    let config = resolve(&args)?;
    let plan = args.register.plan()?;
    if let Some(plan) = &plan {
        plan.check_listen(config.listen)?;
    }
    let name = args.name.clone();
    if args.print_filelist {
        let tree = DocTree::generate(config.tree, config.seed, config.files)?;
        let mut out = std::io::stdout().lock();
        write!(out, "{}", tree.filelist())?;
        return Ok(());
    }
    let threads = match args.threads {
        Some(0) => anyhow::bail!("--threads must be at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let mut placement = match config.partition {
        Some(p) => format!(", partition {}/{}", p.index, p.count),
        None => String::new(),
    };
    if let Some(n) = config.process_limit {
        placement += &format!(
            ", {n} processes of {} bytes, backlog {}",
            config.process_memory, config.backlog
        );
    }
    let summary = format!(
        "{} tree (seed {}), {} resources, {} core(s) at speed {}{placement}, {threads} worker \
         thread(s)",
        config.tree, config.seed, config.resources, config.node.cores, config.node.speed
    );
    let bound_at = std::sync::OnceLock::new();
    let stopped = capstan_origin::serve_threads_bound(
        config,
        threads,
        |bound| {
            let addr = bound.addr;
            let _ = bound_at.set(addr);
            tracing::info!("origin serving the {summary} on {addr}");
            println!("listening on {addr}");
            if let Some(tls) = bound.tls {
                println!("tls listening on {tls}");
            }
            let _ = std::io::stdout().flush();
        },
        || async {
            // Watched before registering: a SIGTERM during registration still deregisters.
            let stop = stop_signal()?;
            let Some(plan) = &plan else {
                return stop.await;
            };
            let addr = *bound_at.get().expect("the node is bound before it waits");
            let registration = plan.register(addr, name.as_deref(), None).await?;
            let stopped = stop.await;
            // Deleted before the listener closes (when this returns), so switches drain it.
            plan.deregister(registration).await;
            stopped
        },
    )?;
    stopped
}

/// Ctrl-C, or SIGTERM from whoever started the node (the lab, a service manager), watched
/// from the call on (not from the first poll), so a SIGTERM that comes while the node
/// registers is not lost.
pub(crate) fn stop_signal() -> anyhow::Result<impl std::future::Future<Output = anyhow::Result<()>>>
{
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
        let mut int = signal(SignalKind::interrupt()).context("cannot watch Ctrl-C")?;
        Ok(async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            Ok(())
        })
    }
    #[cfg(not(unix))]
    Ok(async { tokio::signal::ctrl_c().await.context("cannot watch Ctrl-C") })
}
