//! `capstan bench`'s arguments, and the [`BenchConfig`] they make.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use capstan_bench::{
    parse_burst, parse_duration, parse_phases, BenchConfig, Engine, ReplaySpeed, Source, Target,
};
use capstan_workload::{
    parse_clf, parse_filelist, ArrivalKind, Dist, Popularity, SessionModel, TreeKind,
};

use crate::numbers::{amount, share, whole};

#[derive(clap::Args, Debug)]
#[command(
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    after_help = "ENGINES\n  \
      --rate R       open loop (S-Client): R requests/s started on schedule whatever the server \
                     does; connects abandoned after --connect-timeout and retried\n  \
      --clients N    closed loop: N clients, each waits for its response (+ --think)\n  \
      --sessions R   R sessions/s following the CAP paper's Table 1\n  \
      --replay LOG   a Common/Combined Log Format file, timing scaled by --replay-speed or at \
                     --replay-rate\n  \
      --sockets D    S-Client (Banga & Druschel §4.2): D sockets, each making one connect \
                     attempt per --connect-timeout T; an attempt not established within T is \
                     abandoned, so D/T attempts/s reach the server however far behind it is \
                     (abandoned attempts: \"connect timeouts\", counted as dropped)\n\n\
      --polygraph F  a Web Polygraph workload (robots, content types, working set, phases with \
                     goals) through a proxy; per phase hit/miss response times and DHR/BHR \
                     beside the offered hit ratio\n\n\
      --rate, --clients and --sessions are totals over all shards (--shard i/n).\n\n\
      EXAMPLES\n  \
      (against the README's cluster: a switch on 127.0.0.1:8080 in front of `capstan origin` nodes, \
      which serve the webstone tree — /file500.html, /file5k.html, /file50k.html, /file500k.html, \
      /file5m.html — and /cgi-bin/cpu_light.cgi, cpu_med.cgi, disk_load.cgi; the --tree polygraph \
      and --tree cap examples want nodes started with that --tree)\n  \
      capstan bench http://127.0.0.1:8080/file5k.html --rate 2000 --duration 30s\n  \
      capstan bench http://127.0.0.1:8080/file5k.html --clients 50 --keepalive --duration 10s --json out.json\n  \
      capstan bench http://127.0.0.1:8080/file50k.html --rate 500 --burst 6x5%/100s --duration 300s\n  \
      capstan bench http://127.0.0.1:8080/cgi-bin/cpu_light.cgi --rate 50 --keepalive --connections 20 --report r.html\n  \
      capstan bench http://127.0.0.1:8080/ --rate 500 --tree webstone --duration 30s\n  \
      capstan bench http://127.0.0.1:8080/ --rate 300 --tree polygraph --zipf 1.0 --recurrence 0.55\n  \
      capstan bench http://127.0.0.1:8080/ --sessions 20 --tree cap --duration 60s\n  \
      capstan bench http://127.0.0.1:8080/ --replay access.log --replay-speed 10\n  \
      capstan bench http://127.0.0.1:8080/file500.html --sockets 1000 --connect-timeout 500ms --duration 30s\n  \
      capstan bench http://127.0.0.1:8080/file5k.html --rate 5000 --max-error-rate 1  # past capacity\n  \
      capstan bench http://127.0.0.1:6081/ --polygraph experiments/polygraph/mixed-inc.toml --time-scale 0.01 --json pg.json\n  \
      capstan bench https://localhost:8443/file5k.html --clients 8 --keepalive --cacert ca.pem\n  \
      capstan bench https://localhost:8443/file5k.html --http3 --insecure --rate 500 -k --connections 2 --streams 8\n  \
      capstan bench http://127.0.0.1:8080/file5k.html --rate 1000 --phases phases.toml --shard 0/2 --json a.json\n  \
      capstan bench merge a.json b.json --json all.json\n  \
      sudo capstan bench http://127.0.0.1:8080/file5k.html --rate 200 --wan rtt=100ms,bandwidth=10mbit,loss=1%\n  \
      sudo capstan bench http://127.0.0.1:8080/file5k.html --rate 300 --wan rtt=20ms \\\n    \
      --wan-group name=lan,clients=3 --wan-group name=modem,clients=1,rtt=150ms,bandwidth=56kbit\n\n\
      WAN (--wan, --wan-group, --wan-config; root): the generator runs in the client namespace of \
      `capstan wan run` and reaches the target through the delay router; the target must be \
      http://127.0.0.1:PORT/ or localhost and its server must listen on 0.0.0.0. Path settings \
      are capstan wan's (rtt, delay, bandwidth, queue, loss, jitter, reorder, up./down. \
      prefixes; see capstan wan run --help). Each --wan-group is a client group with its own \
      path (--wan gives their defaults) and generates load in proportion to its clients \
      (addresses): rates, --clients, --connections and --max-inflight are split that way. \
      The result gets a `wan` section: per path its load, latency and the router's packets, \
      drops and delay error. Raise --connect-timeout on paths slower than its 500 ms.\n\n\
      Results: a summary on standard output; --json FILE writes the schema in \
      crates/bench/SCHEMA.md. Exit status: 0 when the run passed --max-error-rate, 1 when \
      nothing succeeded or too many requests failed (one line on standard error says why), 2 \
      for bad arguments. The generator warns (and marks the result limited) when its lag \
      p99 exceeds 1 ms or a generator thread uses more than 90 % of a core."
)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub(super) command: Option<BenchCommand>,

    /// Target URL, http://host[:port]/path or https://… (the path is requested unless a request
    /// source is given).
    #[arg(value_name = "URL", required = true)]
    pub(super) url: Option<String>,

    /// Open loop at R requests/s (the mean when bursts or phases shape it). Example: --rate 2000
    #[arg(long, value_name = "R", group = "engine", value_parser = amount("a rate in requests per second", "2000"))]
    pub(super) rate: Option<f64>,
    /// Closed loop with N clients. Example: --clients 64
    #[arg(long, value_name = "N", group = "engine", value_parser = whole::<usize>("of clients", "50"))]
    pub(super) clients: Option<usize>,
    /// CAP Table 1 sessions arriving at R per second. Example: --sessions 20
    #[arg(long, value_name = "R", group = "engine", value_parser = amount("a rate in sessions per second", "20"))]
    pub(super) sessions: Option<f64>,
    /// S-Client with D sockets, one connect attempt each per --connect-timeout T, abandoned if
    /// not established within T (D/T attempts/s). Example: --sockets 1000
    #[arg(long, value_name = "D", group = "engine", value_parser = whole::<usize>("of sockets", "1000"))]
    pub(super) sockets: Option<usize>,
    /// Replay an access log (Common or Combined Log Format). Example: --replay access.log
    #[arg(long, value_name = "LOG", group = "engine")]
    pub(super) replay: Option<PathBuf>,
    /// A Web Polygraph workload (TOML: robots, req_rate, cache_size, working set, content
    /// types, [[phase]] with load, recurrence and a duration, requests or fill goal; see
    /// experiments/polygraph/*.toml). Reports per phase offered rate, throughput, hit and miss
    /// response times, offered hit ratio beside the measured DHR and BHR (a hit is what the
    /// proxy marks one: `X-Cache: HIT`, `Cache-Status: …; hit`, or `…; collapsed` — a request
    /// that waited for another's fetch —, Varnish's `X-Varnish` with two ids, Traffic Server's
    /// `Via` lookup code `H`/`R`; else `Age`). Example:
    /// --polygraph experiments/polygraph/mixed-inc.toml
    #[arg(long, value_name = "FILE", group = "engine")]
    pub(super) polygraph: Option<PathBuf>,
    /// --polygraph: multiply every phase duration and the working-set length (e.g. 0.01 for a
    /// short run) [default: the file's time_scale]
    #[arg(long, value_name = "F", value_parser = amount("a scale factor", "0.01"))]
    pub(super) time_scale: Option<f64>,

    /// Length of the run [default: 10s; replay: the log's length]. Example: --duration 30s
    #[arg(long, short = 'd', value_name = "TIME")]
    pub(super) duration: Option<String>,
    /// Open loop: sockets allowed in connect state (connection per request), or connections in
    /// the pool (--keepalive); requests wait for a slot, keeping their intended start.
    /// Example: --connections 200
    #[arg(long, short = 'c', value_name = "D", default_value_t = 1000, value_parser = whole::<usize>("of connections", "200"))]
    pub(super) connections: usize,
    /// Abandon a connect attempt after this long and retry (S-Client). Example: --connect-timeout 500ms
    #[arg(long, value_name = "TIME", default_value = "500ms")]
    pub(super) connect_timeout: String,
    /// Give up on a request after this long from its start. Example: --timeout 10s
    #[arg(long, value_name = "TIME", default_value = "10s")]
    pub(super) timeout: String,
    /// After the schedule ends, let in-flight requests finish for this long. Example: --drain 2s
    #[arg(long, value_name = "TIME", default_value = "2s")]
    pub(super) drain: String,
    /// Connect to these addresses instead of the URL's host, as a DNS round-robin client does
    /// with one name's addresses: the URL still gives scheme, Host and path. New connection i
    /// goes to target i mod N; a target that refuses or does not answer passes the connection
    /// to the next, so a dead one costs only the requests in flight on it. The result gets
    /// per-target counts. Repeat or separate with commas.
    /// Example: --target 127.0.0.2:8080,127.0.0.3:8080
    #[arg(long, value_name = "HOST:PORT", value_delimiter = ',', conflicts_with_all = ["polygraph", "wan", "wan_group", "wan_config"])]
    pub(super) target: Vec<String>,
    /// HTTP/1.1 keep-alive connections (default: HTTP/1.0, a connection per request).
    #[arg(long, short = 'k')]
    pub(super) keepalive: bool,
    /// Follow one http:// redirect per request (a switch in [redirect] mode); the request ends
    /// with the redirected answer, and redirected requests are also reported apart
    /// (`redirected_ms` in the JSON).
    #[arg(long)]
    pub(super) follow_redirects: bool,
    /// https: trust the certificates in this PEM file instead of the system bundle.
    /// Example: --cacert ca.pem
    #[arg(long, value_name = "FILE")]
    pub(super) cacert: Option<PathBuf>,
    /// https: do not verify the server's certificate or name (self-signed test servers).
    /// Example: capstan bench https://127.0.0.1:8443/ --rate 100 --insecure
    #[arg(long)]
    pub(super) insecure: bool,
    /// https: each client (--clients) or session (--sessions) keeps its own TLS session cache,
    /// as a browser per user: a full handshake on its first connection, resumed ones after;
    /// without it the whole run shares one cache (one browser), so nearly every handshake
    /// resumes. Example: --clients 20 --tls-session-per-client
    #[arg(long)]
    pub(super) tls_session_per_client: bool,
    /// HTTP/3 over QUIC (quinn + h3) to an https:// URL, on the URL's port over UDP; with
    /// --insecure and --cacert as for https. Keep-alive (-k) shares --connections QUIC
    /// connections per generator thread, --streams requests at once on each; without it
    /// every request makes a connection (a QUIC handshake) of its own. A server that does not
    /// answer HTTP/3 stops the run at once with the handshake's error. A body that ends
    /// short of its Content-Length is an error (`closed`). QUIC runs quinn's BBR where the
    /// kernel's TCP runs BBR, else CUBIC, as the TCP protocols do. The JSON result says
    /// `"protocol": "h3"`. Example: capstan bench https://localhost:8443/ --http3 --insecure
    /// --clients 8 -k --streams 4
    #[arg(long, conflicts_with = "http2")]
    pub(super) http3: bool,
    /// HTTP/2 over TLS (ALPN h2, hyper's client) to an https:// URL, with --insecure and
    /// --cacert as for https; connections and --streams as for --http3. A server that does not
    /// choose h2 stops the run at once. The JSON result says `"protocol": "h2"`.
    /// Example: capstan bench https://localhost:8443/ --http2 --insecure --rate 500 -k --streams 8
    #[arg(long)]
    pub(super) http2: bool,
    /// --http2, --http3: requests in flight at once on one QUIC connection (open loop with -k:
    /// connections × streams workers; closed loop: clients share connections this many at a
    /// time) [default: 1]. Example: --streams 8
    #[arg(long, value_name = "N", value_parser = whole::<usize>("of streams per connection", "8"))]
    pub(super) streams: Option<usize>,
    /// Open loop: drop (and count) requests due while this many are in flight. Example: --max-inflight 5000
    #[arg(long, value_name = "N", value_parser = whole::<usize>("of requests", "5000"))]
    pub(super) max_inflight: Option<usize>,

    /// Gaps between arrivals: constant, poisson or weibull:SHAPE. Example: --arrival weibull:0.6
    #[arg(long, value_name = "PROCESS", default_value = "constant")]
    pub(super) arrival: String,
    /// On/off bursts: PEAKxPERCENT%/PERIOD, e.g. 6x5%/100s is 6x the mean rate for 5 % of every
    /// 100 s (Banga & Druschel Fig. 8).
    #[arg(long, value_name = "SPEC")]
    pub(super) burst: Option<String>,
    /// Rise linearly from 0 to the full rate over this time. Example: --ramp 10s
    #[arg(long, value_name = "TIME")]
    pub(super) ramp: Option<String>,
    /// Phase schedule, TOML: [[phase]] name, duration, load or from/to, recurrence.
    /// Example: --phases phases.toml
    #[arg(long, value_name = "FILE")]
    pub(super) phases: Option<PathBuf>,

    /// Closed loop think time: TIME (constant), exp:TIME (exponential mean) or pareto:ALPHA:TIME
    /// (Pareto with scale TIME). Example: --think exp:1s
    #[arg(long, value_name = "SPEC")]
    pub(super) think: Option<String>,
    /// Sessions: parallel connections for a page's embedded objects. Example: --parallel 4
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = whole::<usize>("of connections", "4"))]
    pub(super) parallel: usize,
    /// Sessions: multiply the Table 1 think times (0.1 = ten times shorter). Example: --think-scale 0.1
    #[arg(long, value_name = "F", default_value_t = 1.0, value_parser = amount("a factor", "0.1"))]
    pub(super) think_scale: f64,
    /// Replay: speed-up of the log's own timing. Example: --replay-speed 10
    #[arg(long, value_name = "F", conflicts_with = "replay_rate", value_parser = amount("a speed-up factor", "10"))]
    pub(super) replay_speed: Option<f64>,
    /// Replay: ignore the log's timing and send its requests at R/s. Example: --replay-rate 500
    #[arg(long, value_name = "R", value_parser = amount("a rate in requests per second", "500"))]
    pub(super) replay_rate: Option<f64>,

    /// Request paths (or URLs on the target host) from a file, one a line, equally likely.
    /// Example: --urls paths.txt
    #[arg(long, value_name = "FILE", group = "source")]
    pub(super) urls: Option<PathBuf>,
    /// WebStone file list (`/path weight` lines). Example: --filelist filelist.standard
    #[arg(long, value_name = "FILE", group = "source")]
    pub(super) filelist: Option<PathBuf>,
    /// Request objects of the document tree `capstan origin --tree` serves: webstone,
    /// webstone-2000, polygraph or cap. Example: --tree polygraph
    #[arg(long, value_name = "TREE", group = "source")]
    pub(super) tree: Option<String>,
    /// Seed of that tree (match the origin's --seed).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = whole::<u64>("for the seed", "7"))]
    pub(super) tree_seed: u64,
    /// Objects in a polygraph or cap tree (match the origin's --files).
    #[arg(long, value_name = "N", value_parser = whole::<usize>("of objects", "5000"))]
    pub(super) files: Option<usize>,
    /// Zipf popularity with this exponent over the tree's objects (default: uniform).
    /// Example: --zipf 1.0
    #[arg(long, value_name = "ALPHA", value_parser = amount("a Zipf exponent", "1.0"))]
    pub(super) zipf: Option<f64>,
    /// Polygraph recurrence ratio: share of requests that revisit an object requested before.
    /// Example: --recurrence 0.55
    #[arg(long, value_name = "R", value_parser = share)]
    pub(super) recurrence: Option<f64>,

    /// Request method. Example: -X POST
    #[arg(long, short = 'X', value_name = "METHOD", default_value = "GET")]
    pub(super) method: String,
    /// Extra request header, repeatable. Example: -H 'Accept: text/html'
    #[arg(long, short = 'H', value_name = "NAME: VALUE")]
    pub(super) header: Vec<String>,
    /// Request body. Example: --body 'a=1'
    #[arg(long, value_name = "TEXT", conflicts_with = "body_file")]
    pub(super) body: Option<String>,
    /// Request body from a file. Example: --body-file post.json
    #[arg(long, value_name = "FILE")]
    pub(super) body_file: Option<PathBuf>,

    /// Seed of every random stream: same seed, same requests. Example: --seed 7
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = whole::<u64>("for the seed", "7"))]
    pub(super) seed: u64,
    /// Run shard I of N (0-based) with 1/N of the load; merge the JSON results with
    /// `capstan bench merge`. Example: --shard 0/2
    #[arg(long, value_name = "I/N")]
    pub(super) shard: Option<String>,
    /// Generator threads, each a single-threaded event loop. Example: --threads 2
    #[arg(long, short = 't', value_name = "N", default_value_t = 1, value_parser = whole::<usize>("of generator threads", "2"))]
    pub(super) threads: usize,

    /// Write the result as JSON (schema: crates/bench/SCHEMA.md). Example: --json out.json
    #[arg(long, value_name = "FILE")]
    pub(super) json: Option<PathBuf>,
    /// Write a self-contained HTML report with plots. Example: --report run.html
    #[arg(long, value_name = "FILE")]
    pub(super) report: Option<PathBuf>,
    /// No progress line and no summary.
    #[arg(long, short = 'q')]
    pub(super) quiet: bool,
    /// Exit with status 1, and one line on standard error saying why (even with -q), when no
    /// request succeeded or more than this share of the finished requests failed. 2xx and 3xx
    /// responses succeed; transport errors (refused, reset, timeouts, …) and 4xx and 5xx
    /// responses fail; requests the generator dropped itself (--max-inflight, connection
    /// slots) never reached the server and count neither way. A run that has had no response
    /// at all, only errors, 5 s after its start stops then (a dead or unreachable target). A
    /// fraction or a percentage; 1 (100%) accepts any outcome and always runs the whole
    /// duration. Not applied to --polygraph (reported per phase) or `bench merge`.
    /// Example: --max-error-rate 1%
    #[arg(long, value_name = "SHARE", default_value = "0.5", value_parser = share)]
    pub(super) max_error_rate: f64,
    /// Print the first N scheduled requests (time, method, path) and exit without sending.
    /// Example: --print-requests 20
    #[arg(long, value_name = "N", value_parser = whole::<usize>("of requests", "20"))]
    pub(super) print_requests: Option<usize>,

    /// Run behind the WAN delay router (root): one path for every client, in capstan wan's
    /// path settings; with --wan-group, the defaults of every group.
    /// Example: --wan rtt=100ms,bandwidth=10mbit,loss=1%
    #[arg(long, value_name = "SPEC")]
    pub(super) wan: Option<String>,
    /// A client group with a path of its own, repeatable; a group's load is proportional to
    /// its clients (addresses). Example: --wan-group name=modem,clients=2,rtt=150ms,bandwidth=56kbit
    #[arg(long = "wan-group", value_name = "SPEC")]
    pub(super) wan_group: Vec<String>,
    /// WAN paths and client groups from a capstan wan TOML file. Example: --wan-config examples/wan.toml
    #[arg(long, value_name = "FILE", conflicts_with_all = ["wan", "wan_group"])]
    pub(super) wan_config: Option<PathBuf>,
    /// Set by `--wan` for the run inside the client namespace: where to leave its results.
    #[arg(long, value_name = "DIR", hide = true)]
    pub(super) wan_inner: Option<PathBuf>,
}

#[derive(clap::Subcommand, Debug)]
pub(super) enum BenchCommand {
    /// Merge JSON results of shards exactly (histograms added). Example: capstan bench merge a.json b.json --json all.json
    Merge(MergeArgs),
}

#[derive(clap::Args, Debug)]
pub(super) struct MergeArgs {
    /// Result files from `capstan bench --json`.
    #[arg(value_name = "FILE", required = true, num_args = 1..)]
    pub(super) files: Vec<PathBuf>,
    /// Write the merged result here (default: summary only).
    #[arg(long, value_name = "FILE")]
    pub(super) json: Option<PathBuf>,
    /// Write an HTML report of the merged result.
    #[arg(long, value_name = "FILE")]
    pub(super) report: Option<PathBuf>,
    #[arg(long, short = 'q')]
    pub(super) quiet: bool,
}

pub(super) fn read(path: &Path, what: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

pub(super) fn dur(s: &str, flag: &str) -> anyhow::Result<Duration> {
    parse_duration(s).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

fn parse_think(s: &str) -> anyhow::Result<Dist> {
    let bad =
        || anyhow::anyhow!("--think: bad {s:?} (expected TIME, exp:TIME or pareto:ALPHA:TIME)");
    let parts: Vec<&str> = s.split(':').collect();
    let secs = |x: &str| {
        parse_duration(x)
            .map(|d| d.as_secs_f64())
            .map_err(|_| bad())
    };
    let d = match parts.as_slice() {
        [t] => Dist::Const { value: secs(t)? },
        ["exp", t] => Dist::Exp { mean: secs(t)? },
        ["pareto", a, t] => Dist::Pareto {
            alpha: a.parse().map_err(|_| bad())?,
            k: secs(t)?,
        },
        _ => return Err(bad()),
    };
    d.validate().map_err(|e| anyhow::anyhow!("--think: {e}"))?;
    Ok(d)
}

pub(super) fn build(a: &BenchArgs) -> anyhow::Result<BenchConfig> {
    let url = a.url.as_deref().context("a target URL is required")?;
    let target = Target::parse(url)?;
    let mut c = BenchConfig::open(target, 1.0);
    c.duration = match &a.duration {
        Some(d) => dur(d, "duration")?,
        None if a.replay.is_some() => Duration::ZERO,
        None => Duration::from_secs(10),
    };
    c.engine = if let Some(r) = a.rate {
        Engine::Open { rate: r }
    } else if let Some(n) = a.clients {
        Engine::Closed {
            clients: n,
            think: a.think.as_deref().map(parse_think).transpose()?,
        }
    } else if let Some(r) = a.sessions {
        Engine::Sessions {
            rate: r,
            model: SessionModel::default(),
            parallel: a.parallel,
            think_scale: a.think_scale,
        }
    } else if let Some(d) = a.sockets {
        Engine::SClient { sockets: d }
    } else if let Some(p) = &a.replay {
        let log =
            parse_clf(&read(p, "log")?).map_err(|e| anyhow::anyhow!("log {}: {e}", p.display()))?;
        let speed = match (a.replay_speed, a.replay_rate) {
            (_, Some(r)) => ReplaySpeed::Rate(r),
            (Some(f), None) => ReplaySpeed::Scale(f),
            (None, None) => ReplaySpeed::Scale(1.0),
        };
        Engine::Replay { log, speed }
    } else {
        bail!("choose an engine: --rate R, --clients N, --sessions R, --sockets D or --replay LOG");
    };
    if a.think.is_some() && a.clients.is_none() {
        bail!("--think applies to --clients (sessions use --think-scale)");
    }
    c.connections = a.connections;
    c.targets = a.target.clone();
    c.connect_timeout = dur(&a.connect_timeout, "connect-timeout")?;
    c.timeout = dur(&a.timeout, "timeout")?;
    c.drain = dur(&a.drain, "drain")?;
    c.keepalive = a.keepalive;
    c.follow_redirects = a.follow_redirects;
    c.insecure = a.insecure;
    c.tls_session_per_client = a.tls_session_per_client;
    if a.http3 {
        c.protocol = capstan_bench::Protocol::Http3;
    } else if a.http2 {
        c.protocol = capstan_bench::Protocol::Http2;
    }
    c.streams = a.streams.unwrap_or(1);
    if let Some(p) = &a.cacert {
        c.ca_pem = Some(
            std::fs::read(p).with_context(|| format!("cannot read --cacert {}", p.display()))?,
        );
    }
    c.max_inflight = a.max_inflight;
    c.arrival = match a.arrival.as_str() {
        "constant" => ArrivalKind::Constant,
        "poisson" => ArrivalKind::Poisson,
        s => match s.strip_prefix("weibull:").map(str::parse::<f64>) {
            Some(Ok(shape)) if shape > 0.0 && shape.is_finite() => ArrivalKind::Weibull { shape },
            _ => bail!("--arrival: expected constant, poisson or weibull:SHAPE, got {s:?}"),
        },
    };
    if let Some(b) = &a.burst {
        c.burst = Some(parse_burst(b).map_err(|e| anyhow::anyhow!("--burst: {e}"))?);
    }
    if let Some(r) = &a.ramp {
        c.ramp = dur(r, "ramp")?;
    }
    if let Some(p) = &a.phases {
        c.phases = parse_phases(&read(p, "phase file")?)
            .map_err(|e| anyhow::anyhow!("phase file {}: {e}", p.display()))?;
        if a.duration.is_none() {
            c.duration = Duration::ZERO;
        }
    }
    let popularity = match a.zipf {
        Some(alpha) => Popularity::Zipf { alpha },
        None => Popularity::Uniform,
    };
    c.source = if let Some(p) = &a.urls {
        let list: Vec<String> = read(p, "URL list")?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect();
        if list.is_empty() {
            bail!("URL list {} has no entries", p.display());
        }
        Source::List(list)
    } else if let Some(p) = &a.filelist {
        Source::FileList(
            parse_filelist(&read(p, "file list")?)
                .map_err(|e| anyhow::anyhow!("file list {}: {e}", p.display()))?,
        )
    } else if let Some(t) = &a.tree {
        Source::Mix {
            tree: t.parse::<TreeKind>()?,
            tree_seed: a.tree_seed,
            files: a.files,
            popularity,
            recurrence: a.recurrence,
        }
    } else {
        if a.zipf.is_some() || a.recurrence.is_some() || a.files.is_some() {
            bail!("--zipf, --recurrence and --files need --tree");
        }
        Source::Url
    };
    c.method = a.method.to_ascii_uppercase();
    for h in &a.header {
        let (k, v) = h
            .split_once(':')
            .with_context(|| format!("-H {h:?}: expected 'Name: value'"))?;
        c.headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    c.body = match (&a.body, &a.body_file) {
        (Some(b), _) => Some(b.clone().into_bytes()),
        (None, Some(p)) => Some(
            std::fs::read(p).with_context(|| format!("cannot read body file {}", p.display()))?,
        ),
        _ => None,
    };
    c.seed = a.seed;
    if let Some(s) = &a.shard {
        let bad = || anyhow::anyhow!("--shard: expected I/N with 0 ≤ I < N, got {s:?}");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        c.shard = (
            i.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
    }
    c.threads = a.threads;
    c.give_up_after = (a.max_error_rate < 1.0).then_some(GIVE_UP_AFTER);
    c.validate()?;
    Ok(c)
}

/// A run with no response at all, only errors, this long after its start stops then.
const GIVE_UP_AFTER: Duration = Duration::from_secs(5);
