//! What a run does: the library's input. The CLI builds one of these from flags; the lab builds
//! it directly.

use std::time::Duration;

use capstan_workload::{
    AccessLog, ArrivalKind, Burst, Dist, FileList, Phase, Popularity, SessionModel, TreeKind,
};

use crate::error::BenchError;

/// The server under test, from an `http://host[:port][/path]` or `https://…` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    /// `https://`: TLS (rustls) on every connection.
    pub tls: bool,
    /// Path and query of the URL (`/` when absent).
    pub path: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, BenchError> {
        let bad = |why: &str| BenchError::Config(format!("bad URL {url:?}: {why}"));
        let (rest, tls) = if let Some(r) = url.strip_prefix("http://") {
            (r, false)
        } else if let Some(r) = url.strip_prefix("https://") {
            (r, true)
        } else {
            return Err(bad("expected http://host[:port]/path or https://…"));
        };
        let default_port = if tls { 443 } else { 80 };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if authority.contains('@') {
            return Err(bad("user info is not supported"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6
                .find(']')
                .ok_or_else(|| bad("unterminated [IPv6] host"))?;
            let host = &v6[..end];
            let port = match &v6[end + 1..] {
                "" => default_port,
                p => p
                    .strip_prefix(':')
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| bad("bad port"))?,
            };
            (format!("[{host}]"), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad("bad port"))?),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() || host.contains(|c: char| c.is_whitespace()) {
            return Err(bad("bad host"));
        }
        if path.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(bad("the path contains spaces or control characters"));
        }
        Ok(Target {
            host,
            port,
            tls,
            path: path.to_string(),
        })
    }

    /// The `Host` header value.
    pub fn authority(&self) -> String {
        if self.port == if self.tls { 443 } else { 80 } {
            self.host.clone()
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}", self.authority(), self.path)
    }
}

/// How load is generated.
#[derive(Debug, Clone, PartialEq)]
pub enum Engine {
    /// S-Client open loop: requests start on a schedule regardless of responses.
    Open { rate: f64 },
    /// `clients` loops of request, response, think.
    Closed { clients: usize, think: Option<Dist> },
    /// Sessions arrive at `rate` per second and follow `model`.
    Sessions {
        rate: f64,
        model: SessionModel,
        /// Connections a client opens in parallel for a page's embedded objects.
        parallel: usize,
        /// Multiplies think times (1 = the model's; 0.01 makes a test session short).
        think_scale: f64,
    },
    /// Replays an access log.
    Replay { log: AccessLog, speed: ReplaySpeed },
    /// Banga & Druschel's S-Client (§4.2): `sockets` (D) sockets each connect, and an attempt
    /// not established within `connect_timeout` (T) is abandoned and a new one opened; an
    /// established connection is handed off with its request and the socket's next attempt
    /// starts T after this one began. The offered connection rate is D/T, whatever the server does.
    SClient { sockets: usize },
}

/// The HTTP version on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// HTTP/1.1 with keep-alive, else HTTP/1.0 (over TLS for `https://`).
    #[default]
    Http1,
    /// HTTP/2 over TLS (`--http2`, `https://` URLs only, ALPN `h2`): several requests at once
    /// per connection (`streams`).
    Http2,
    /// HTTP/3 over QUIC (`--http3`, `https://` URLs only): several requests at once per
    /// connection (`streams`).
    Http3,
}

impl Protocol {
    /// The name in the JSON result (`protocol`).
    pub fn name(self, keepalive: bool) -> &'static str {
        match self {
            Protocol::Http1 if keepalive => "http/1.1",
            Protocol::Http1 => "http/1.0",
            Protocol::Http2 => "h2",
            Protocol::Http3 => "h3",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ReplaySpeed {
    /// Original timing divided by this factor (2 = twice as fast).
    Scale(f64),
    /// The log's requests, in order, at this constant rate.
    Rate(f64),
}

/// What each request asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The target URL's path.
    Url,
    /// Paths (or URLs on the target's host), equally likely.
    List(Vec<String>),
    /// A WebStone file list: paths with weights.
    FileList(FileList),
    /// Objects of a generated document tree (the same one `capstan origin --tree` serves),
    /// chosen by popularity, with an optional Polygraph recurrence ratio.
    Mix {
        tree: TreeKind,
        tree_seed: u64,
        files: Option<usize>,
        popularity: Popularity,
        recurrence: Option<f64>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct BenchConfig {
    pub target: Target,
    pub engine: Engine,
    /// Length of the schedule (phases may end it earlier).
    pub duration: Duration,
    /// Open engine: sockets allowed in connect state (connection per request) or connections
    /// in the pool (keep-alive).
    pub connections: usize,
    pub connect_timeout: Duration,
    /// Longest wait for a whole response, counted from the request's start.
    pub timeout: Duration,
    /// After the schedule ends, how long in-flight requests may still finish.
    pub drain: Duration,
    /// Latency statistics leave out the requests due in the first `settle` of the schedule
    /// (they are still sent and counted): a queue that starts empty reaches its steady state
    /// first, and a mean measured from an empty start would be too low (`capstan lab validate`).
    pub settle: Duration,
    /// HTTP/1.1 persistent connections; otherwise HTTP/1.0, one connection per request.
    pub keepalive: bool,
    /// Open engine: requests due while this many are in flight are dropped.
    pub max_inflight: Option<usize>,
    pub method: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<Vec<u8>>,
    pub source: Source,
    pub arrival: ArrivalKind,
    pub burst: Option<Burst>,
    pub ramp: Duration,
    pub phases: Vec<Phase>,
    pub seed: u64,
    /// `(i, n)`: this process is shard `i` (0-based) of `n`.
    pub shard: (u32, u32),
    /// Generator threads (each a single-threaded event loop).
    pub threads: usize,
    /// https: do not verify the server's certificate (any certificate, any name).
    pub insecure: bool,
    /// https: PEM certificates to trust instead of the system bundle (`--cacert`).
    pub ca_pem: Option<Vec<u8>>,
    /// https: each closed-loop client and each session keeps its own TLS session cache, as a
    /// browser per user does: its first connection makes a full handshake, its later ones resume
    /// (the CAP paper's key exchange "at least once for each client session"). Otherwise the
    /// whole run shares one cache, as one browser would, and nearly every handshake resumes.
    pub tls_session_per_client: bool,
    /// Follow one `http://` redirect per request (a switch in redirect mode): the request ends
    /// with the redirected answer and its latency includes both exchanges.
    pub follow_redirects: bool,
    /// Source addresses for new connections, used in turn (empty: the kernel's choice). Behind
    /// `capstan wan`, a client group's addresses select its emulated path.
    pub bind: Vec<std::net::IpAddr>,
    /// Addresses (`host:port`) to connect to instead of the URL's, as a DNS round-robin client
    /// does with one name's several addresses: the URL still gives the scheme, `Host` and path.
    /// New connection `i` goes to target `i mod N`; one refused or failed goes to the next
    /// target, so a dead target costs only the requests in flight on it. Empty: the URL's host.
    pub targets: Vec<String>,
    /// HTTP/1.x, HTTP/2 (`--http2`) or HTTP/3 (`--http3`).
    pub protocol: Protocol,
    /// HTTP/2 and HTTP/3: requests in flight at once on one connection (`--streams`). The open
    /// engine with keep-alive runs `connections × streams` requests at once over `connections`
    /// connections; a closed-loop run puts `streams` clients on each connection.
    pub streams: usize,
    /// Stop the run early when, this long after its start, not one response (of any status)
    /// has arrived and requests have failed: a dead or unreachable target, which the rest of
    /// the run would only measure again. The result says so (`gave_up`). None (the default):
    /// the whole duration, whatever happens.
    pub give_up_after: Option<Duration>,
}

impl BenchConfig {
    /// A config with the defaults of the CLI: open loop at `rate`, 10 s, connection per request.
    pub fn open(target: Target, rate: f64) -> BenchConfig {
        BenchConfig {
            target,
            engine: Engine::Open { rate },
            duration: Duration::from_secs(10),
            connections: 1000,
            connect_timeout: Duration::from_millis(500),
            timeout: Duration::from_secs(10),
            drain: Duration::from_secs(2),
            settle: Duration::ZERO,
            keepalive: false,
            max_inflight: None,
            method: "GET".into(),
            headers: Vec::new(),
            body: None,
            source: Source::Url,
            arrival: ArrivalKind::Constant,
            burst: None,
            ramp: Duration::ZERO,
            phases: Vec::new(),
            seed: 1,
            shard: (0, 1),
            threads: 1,
            insecure: false,
            ca_pem: None,
            tls_session_per_client: false,
            follow_redirects: false,
            bind: Vec::new(),
            targets: Vec::new(),
            protocol: Protocol::Http1,
            streams: 1,
            give_up_after: None,
        }
    }

    /// `--http2`, `--http3` and `--streams` with what they need and what they cannot be
    /// combined with.
    fn validate_protocol(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::Config(m));
        if self.streams == 0 {
            return bad("streams must be at least 1".into());
        }
        let flag = match self.protocol {
            Protocol::Http1 if self.streams > 1 => {
                return bad("--streams applies to --http2 and --http3 only (HTTP/1.1 has one request at a time per connection)".into());
            }
            Protocol::Http1 => return Ok(()),
            Protocol::Http2 => "--http2",
            Protocol::Http3 => "--http3",
        };
        if !self.target.tls {
            let why = match self.protocol {
                Protocol::Http3 => {
                    "HTTP/3 runs over QUIC, which is always encrypted (the UDP port is the URL's)"
                }
                _ => "HTTP/2 is negotiated by TLS ALPN (h2c is not supported)",
            };
            return bad(format!("{flag} needs an https:// URL: {why}"));
        }
        if self.follow_redirects {
            return bad(format!(
                "--follow-redirects follows http:// redirects; it does not go with {flag}"
            ));
        }
        if self.tls_session_per_client {
            return bad(format!("--tls-session-per-client does not go with {flag} (the run shares one session cache)"));
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |m: String| Err(BenchError::Config(m));
        let pos = |x: f64| x.is_finite() && x > 0.0;
        match &self.engine {
            Engine::Open { rate } if !pos(*rate) => {
                return bad(format!("rate must be positive, got {rate}"))
            }
            Engine::Closed { clients: 0, .. } => return bad("clients must be at least 1".into()),
            Engine::SClient { sockets: 0 } => return bad("sockets must be at least 1".into()),
            Engine::SClient { .. } if self.target.tls => {
                return bad("the S-Client engine (--sockets) takes http:// URLs only".into())
            }
            Engine::Closed { think: Some(d), .. } => d.validate().map_err(BenchError::Config)?,
            Engine::Sessions {
                rate,
                model,
                parallel,
                think_scale,
            } => {
                if !pos(*rate) {
                    return bad(format!("session rate must be positive, got {rate}"));
                }
                if *parallel == 0 {
                    return bad("parallel connections must be at least 1".into());
                }
                if !(think_scale.is_finite() && *think_scale >= 0.0) {
                    return bad(format!("think scale must be ≥ 0, got {think_scale}"));
                }
                model.validate().map_err(BenchError::Config)?;
            }
            Engine::Replay {
                speed: ReplaySpeed::Scale(f) | ReplaySpeed::Rate(f),
                ..
            } if !pos(*f) => return bad(format!("replay speed must be positive, got {f}")),
            _ => {}
        }
        if self.duration.is_zero()
            && self.phases.is_empty()
            && !matches!(self.engine, Engine::Replay { .. })
        {
            return bad("duration must be positive".into());
        }
        if !self.target.tls && (self.insecure || self.ca_pem.is_some()) {
            return bad("--insecure and --cacert apply to https:// URLs only".into());
        }
        if self.tls_session_per_client {
            if !self.target.tls {
                return bad("--tls-session-per-client applies to https:// URLs only".into());
            }
            if !matches!(self.engine, Engine::Closed { .. } | Engine::Sessions { .. }) {
                return bad(
                    "--tls-session-per-client needs clients (--clients) or sessions (--sessions)"
                        .into(),
                );
            }
        }
        self.validate_protocol()?;
        for t in &self.targets {
            split_host_port(t).map_err(BenchError::Config)?;
        }
        if self.connections == 0 {
            return bad("connections must be at least 1".into());
        }
        if self.connect_timeout.is_zero() || self.timeout.is_zero() {
            return bad("timeouts must be positive".into());
        }
        if self.max_inflight == Some(0) {
            return bad("max-inflight must be at least 1".into());
        }
        if self.threads == 0 || self.threads > 256 {
            return bad(format!(
                "threads must be between 1 and 256, got {}",
                self.threads
            ));
        }
        let (i, n) = self.shard;
        if n == 0 || i >= n {
            return bad(format!("shard must be i/n with 0 ≤ i < n, got {i}/{n}"));
        }
        if self.method.is_empty() || !self.method.bytes().all(|b| b.is_ascii_alphabetic()) {
            return bad(format!("bad method {:?}", self.method));
        }
        for (k, v) in &self.headers {
            if k.is_empty()
                || !k
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b))
                || v.contains(['\r', '\n'])
            {
                return bad(format!("bad header {k:?}"));
            }
        }
        if let Some(b) = &self.burst {
            b.validate().map_err(BenchError::Config)?;
        }
        if let Source::Mix {
            popularity,
            recurrence,
            ..
        } = &self.source
        {
            popularity.validate().map_err(BenchError::Config)?;
            if recurrence.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
                return bad("recurrence must be between 0 and 1".into());
            }
        }
        Ok(())
    }

    /// The mean offered request rate of the configured schedule (sessions: sessions per second).
    pub fn mean_rate(&self) -> Option<f64> {
        match &self.engine {
            Engine::Open { rate } => Some(*rate),
            Engine::Sessions { rate, .. } => Some(*rate),
            // The paper's offered rate: each socket tries at least once per T.
            Engine::SClient { sockets } => {
                Some(*sockets as f64 / self.connect_timeout.as_secs_f64().max(1e-9))
            }
            Engine::Replay {
                speed: ReplaySpeed::Rate(r),
                ..
            } => Some(*r),
            _ => None,
        }
    }

    pub fn engine_name(&self) -> &'static str {
        match self.engine {
            Engine::Open { .. } => "open",
            Engine::Closed { .. } => "closed",
            Engine::Sessions { .. } => "sessions",
            Engine::Replay { .. } => "replay",
            Engine::SClient { .. } => "sclient",
        }
    }
}

/// `host:port` or `[v6]:port` of a `--target`, as host (brackets removed) and port.
pub fn split_host_port(s: &str) -> Result<(String, u16), String> {
    let bad =
        |why: &str| format!("bad target {s:?}: {why} (expected HOST:PORT, e.g. 127.0.0.2:8080)");
    let (host, port) = s.rsplit_once(':').ok_or_else(|| bad("no port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host.contains(|c: char| c.is_whitespace() || c == '/') {
        return Err(bad("bad host"));
    }
    let port: u16 = port.parse().map_err(|_| bad("bad port"))?;
    if port == 0 {
        return Err(bad("port 0"));
    }
    Ok((host.to_string(), port))
}

/// Parses `6x5%/100s`: `peak`x the mean for `fraction`% of every `period`.
pub fn parse_burst(s: &str) -> Result<Burst, String> {
    let bad = || format!("bad burst {s:?} (expected PEAKxPERCENT%/PERIOD, e.g. 6x5%/100s)");
    let (peak, rest) = s.split_once(['x', 'X']).ok_or_else(bad)?;
    let (pct, period) = rest.split_once('/').ok_or_else(bad)?;
    let pct = pct.strip_suffix('%').ok_or_else(bad)?;
    let b = Burst {
        peak: peak.trim().parse().map_err(|_| bad())?,
        fraction: pct.trim().parse::<f64>().map_err(|_| bad())? / 100.0,
        period_s: parse_duration(period.trim())
            .map_err(|_| bad())?
            .as_secs_f64(),
    };
    b.validate()?;
    Ok(b)
}

/// `500ms`, `30s`, `2m`, `1h`, or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
    }
    humantime::parse_duration(s).map_err(|_| format!("bad duration {s:?} (e.g. 500ms, 30s, 2m)"))
}

/// A phase schedule file (Polygraph-style):
///
/// ```toml
/// [[phase]]
/// name = "warm"
/// duration = "30s"
/// load = 0.1            # or: from = 0.1, to = 1.0 for a linear change
/// recurrence = 0.55     # optional
/// ```
pub fn parse_phases(text: &str) -> Result<Vec<Phase>, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        phase: Vec<P>,
    }
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct P {
        name: Option<String>,
        duration: String,
        load: Option<f64>,
        from: Option<f64>,
        to: Option<f64>,
        recurrence: Option<f64>,
    }
    let f: File =
        toml::from_str(text).map_err(|e| e.message().to_string() + &location(text, &e))?;
    if f.phase.is_empty() {
        return Err("no [[phase]] entries".into());
    }
    f.phase
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let name = p.name.unwrap_or_else(|| format!("phase{}", i + 1));
            let d = parse_duration(&p.duration).map_err(|e| format!("phase {name:?}: {e}"))?;
            let (from, to) = match (p.load, p.from, p.to) {
                (Some(l), None, None) => (l, l),
                (None, Some(a), Some(b)) => (a, b),
                (None, None, None) => (1.0, 1.0),
                _ => return Err(format!("phase {name:?}: give either load, or from and to")),
            };
            Ok(Phase {
                name,
                duration_s: d.as_secs_f64(),
                from,
                to,
                recurrence: p.recurrence,
            })
        })
        .collect()
}

fn location(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!(" (line {line})")
        }
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = Target::parse("http://127.0.0.1:8080/a?b=c").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("127.0.0.1", 8080, "/a?b=c")
        );
        assert_eq!(Target::parse("http://example.org").unwrap().path, "/");
        assert_eq!(
            Target::parse("http://[::1]:9/").unwrap().authority(),
            "[::1]:9"
        );
        assert!(Target::parse("ftp://x/").is_err());
        assert!(Target::parse("http://x:notaport/").is_err());
        let t = Target::parse("https://localhost/x").unwrap();
        assert!(t.tls);
        assert_eq!((t.port, t.authority()), (443, "localhost".to_string()));
        assert_eq!(t.url(), "https://localhost/x");
        let t = Target::parse("https://127.0.0.1:8443").unwrap();
        assert_eq!(
            (t.port, t.url().as_str()),
            (8443, "https://127.0.0.1:8443/")
        );
        assert!(!Target::parse("http://x/").unwrap().tls);
    }

    #[test]
    fn target_addresses() {
        assert_eq!(
            split_host_port("127.0.0.2:8080").unwrap(),
            ("127.0.0.2".to_string(), 8080)
        );
        assert_eq!(split_host_port("[::1]:9").unwrap(), ("::1".to_string(), 9));
        assert!(split_host_port("127.0.0.2")
            .unwrap_err()
            .contains("no port"));
        assert!(split_host_port("h:0").is_err());
        assert!(split_host_port("http://h:80/x").is_err());
        let mut c = BenchConfig::open(Target::parse("http://x/").unwrap(), 1.0);
        c.targets = vec!["a:1".into(), "b".into()];
        assert!(c.validate().is_err());
    }

    #[test]
    fn bursts_and_durations() {
        let b = parse_burst("6x5%/100s").unwrap();
        assert_eq!((b.peak, b.fraction, b.period_s), (6.0, 0.05, 100.0));
        assert!(parse_burst("6x50%/100s").is_err());
        assert!(parse_burst("6/5%").is_err());
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert!(parse_duration("soon").is_err());
    }

    #[test]
    fn phase_files() {
        let p = parse_phases(
            "[[phase]]\nname = \"warm\"\nduration = \"10s\"\nfrom = 0.0\nto = 1.0\n\
             [[phase]]\nduration = \"5s\"\nload = 0.5\nrecurrence = 0.55\n",
        )
        .unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].from, p[0].to, p[0].duration_s), (0.0, 1.0, 10.0));
        assert_eq!(
            (p[1].name.as_str(), p[1].from, p[1].recurrence),
            ("phase2", 0.5, Some(0.55))
        );
        assert!(parse_phases("[[phase]]\nduration = \"x\"\n").is_err());
        let e = parse_phases("[[phase]]\nduration = \"1s\"\nbogus = 1\n").unwrap_err();
        assert!(e.contains("line 3"), "{e}");
    }
}
