//! `capstan serve` and `capstan check`.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{bail, Context};
use capstan_core::{PolicySpec, RuleSpec};
use capstan_switch::resolve_address;
use capstan_switch::{Config, NodeConfig};
use clap::Args;

const SERVE_EXAMPLES: &str = "Examples:
  capstan serve --config examples/cap.toml
  capstan serve --listen 127.0.0.1:8080 --node 127.0.0.1:9001 --node 127.0.0.1:9002 \\
                --policy cap --class cpu=/cgi-bin/*
  capstan serve --listen 127.0.0.1:8080 --node a=127.0.0.1:9001@2 --node b=127.0.0.1:9002 \\
                --policy lard --policy-param t_low=10 --policy-param t_high=30 --admin 127.0.0.1:9900
  capstan serve --listen 127.0.0.1:8080 --node 127.0.0.1:9001 --cache 256MiB
  capstan serve --config examples/cache.toml          # every cache setting, commented
  capstan serve --config examples/health.toml         # health checks, slow start, membership
  capstan serve --config examples/overload.toml       # admission limits, queues, outlier ejection
  capstan serve --config examples/tls.toml            # HTTPS (certificates by SNI), HTTP/2, h2c
  capstan serve --config examples/operation.toml      # access log, WebSocket, PROXY protocol
  capstan serve --config examples/tier.toml --listen 127.0.0.3:8080   # one switch of a tier
  capstan serve --config /etc/capstan/capstan.toml --check-only   # validate, exit 0 or 1

Signals: SIGTERM/SIGINT stop accepting and let in-flight requests finish (timeouts.grace);
SIGHUP re-reads --config (as does POST /reload on the admin listener); a bad file is refused
and the running configuration keeps serving. SIGUSR1 reopens the access log file (logrotate).

Health: passive (health.fail_threshold connect failures take a node out for health.backoff);
active checks with health.check_path (GET every check_interval; fall failures out, rise
passes back; expect_status); health.slow_start ramps a joining or returning node's share.

Connections: limits.max_connections (10000) over every listener and max_connections on a
[[listener]] (HAProxy's bind maxconn): beyond them connections wait in the accept queue.
limits.max_connections_per_client (0 = off; also per [[listener]]) turns a client address's
next connection away with 429 and Retry-After (TLS listeners: closed); behind a trusted PROXY
balancer the declared client address counts. timeouts.client_send (60s) closes a connection
whose response write makes no progress (a client that stopped reading), freeing its node.

Overload (on by default): each node has an adaptive concurrency limit ([admission] limit =
\"adaptive\" | N | \"off\") and a queue (queue, queue_timeout); a request queues only when no
node has a free slot, and what fits in neither gets 503 with Retry-After at once.
timeouts.first_byte bounds one node's answer (then another node, or 504); [outlier] ejects a
node after consecutive_failures 5xx/timeouts/resets in a row.

TLS and HTTP/2: a [[listener]] with [[listener.certificate]] cert/key (PEM) terminates TLS
1.2/1.3 with the certificate for the client's SNI name (the first is the default), offers h2
and http/1.1 by ALPN, resumes sessions by tickets; h2c = true on a plain [[listener]] takes
HTTP/2 with prior knowledge; [http2] sets stream and header limits. Each HTTP/2 stream is
dispatched on its own; nodes get HTTP/1.1. Certificates are re-read on SIGHUP / POST /reload
(new handshakes get them, open connections keep theirs); a bad file or a key that does not
match its certificate is one error line (capstan check says the same).

A tier: [tier] peers = [\"IP:PORT\", …] lists every switch by its client listener, this one
included (each started with its own --listen); with [cache] the tier shares one cache (each
key owned by one live peer, one hop), PURGE and BAN reach every peer, and the switches gossip
their counts of every node over UDP on the listener port (tier.gossip_period; docs/tier.md).

Membership on the admin listener, without a reload: POST /nodes (name, address, weight as
JSON or query), POST /nodes/NAME/drain and /undrain, DELETE /nodes/NAME; in-flight requests
finish. A reload makes the file's node list the truth again (runtime changes are undone).";

#[derive(Args, Debug)]
#[command(after_help = SERVE_EXAMPLES)]
pub struct ServeArgs {
    /// Configuration file (TOML; see examples/). Flags below override what it says.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address to accept clients on (repeatable). Required without --config.
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Vec<String>,

    /// A back-end node, `[NAME=]HOST:PORT[@WEIGHT]` (repeatable; replaces the file's nodes).
    /// The name defaults to the address, the weight to 1.
    #[arg(long, value_name = "NODE")]
    pub node: Vec<String>,

    /// Dispatching policy.
    #[arg(long, value_name = "NAME", value_parser = clap::builder::PossibleValuesParser::new(PolicySpec::names()))]
    pub policy: Option<String>,

    /// A policy parameter, `KEY=VALUE` with a TOML value (repeatable; needs --policy),
    /// e.g. `t_high=65` or `epsilon=0.25`.
    #[arg(long, value_name = "KEY=VALUE", requires = "policy")]
    pub policy_param: Vec<String>,

    /// Put requests whose path matches PATTERN in class NAME (repeatable; checked before the
    /// built-in rules). PATTERN is a glob if it has `*`, `?` or `[`, else a path prefix. A new
    /// NAME defines a class with no resource profile.
    #[arg(long, value_name = "NAME=PATTERN")]
    pub class: Vec<String>,

    /// Admin listener for /status, /metrics, the status page, POST /reload and runtime
    /// membership (POST /nodes, POST /nodes/NAME/drain, DELETE /nodes/NAME).
    #[arg(long, value_name = "HOST:PORT")]
    pub admin: Option<String>,

    /// Turn the HTTP cache on with a memory tier of SIZE (e.g. `256MiB`, `1GB`), RFC 9111
    /// rules and the other `[cache]` defaults; with --config, sets its `cache.memory`.
    #[arg(long, value_name = "SIZE")]
    pub cache: Option<String>,

    /// File holding the admin bearer token (its whole content, without the final line break;
    /// at least 16 characters of A-Z a-z 0-9 - . _ ~ + /). With it, POST /reload,
    /// POST /cache/purge and every other non-GET admin request need
    /// `Authorization: Bearer TOKEN`. Overrides admin_token / admin_token_file in --config.
    #[arg(long, value_name = "PATH")]
    pub admin_token_file: Option<PathBuf>,

    /// Add X-Capstan-Node and X-Capstan-Class headers to responses.
    #[arg(long)]
    pub debug_headers: bool,

    /// Worker threads, each with its own event loop and listening socket (default: one per
    /// core).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// Print the resolved configuration and exit instead of serving.
    #[arg(long)]
    pub dry_run: bool,

    /// Validate the configuration (file and flags, as `capstan check` does, plus the access
    /// log file can be opened) and exit: 0 and `ok` when valid, 1 with one line when not.
    /// Run it before a reload, e.g. `ExecReload` in a systemd unit.
    #[arg(long, conflicts_with = "dry_run")]
    pub check_only: bool,
}

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 when the file is valid (the resolved cluster is printed), \
                        1 with one line `FILE:LINE:COLUMN: what is wrong` when it is not; \
                        with --resolve, also 1 when a [[discovery]] source gives no list."
)]
pub struct CheckArgs {
    /// The configuration file to check.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Also look at each [[discovery]] source once (read its file, ask its DNS servers) and
    /// print the nodes it gives now, with the entries it skips and why.
    #[arg(long)]
    pub resolve: bool,
}

pub fn check(args: CheckArgs) -> anyhow::Result<()> {
    let config = Config::load(&args.file)?;
    print!("{}", config.describe());
    if args.resolve {
        let failed = print_resolved(&config);
        if failed > 0 {
            bail!(
                "{failed} of {} discovery sources gave no list",
                config.discovery.len()
            );
        }
    }
    println!("ok: {}", args.file.display());
    Ok(())
}

/// `check --resolve`: each source's nodes now; returns how many sources failed. Every kind
/// goes through `capstan_switch::resolve_once` (a new kind needs nothing here).
fn print_resolved(config: &Config) -> usize {
    let mut failed = 0;
    for source in &config.discovery {
        let what = format!(
            "{} {} {}",
            source.name,
            source.kind.name(),
            source.kind.target()
        );
        match capstan_switch::resolve_once(source) {
            Ok(listing) => {
                println!("resolved  {what}: {} nodes", listing.nodes.len());
                for node in &listing.nodes {
                    println!(
                        "  {:<16} {:<22} weight {}",
                        node.name, node.address, node.weight
                    );
                }
                for line in &listing.standby {
                    println!("  standby  {line}");
                }
                for line in &listing.dropped {
                    println!("  skipped  {line}");
                }
            }
            Err(e) => {
                failed += 1;
                println!("resolved  {what}: error: {e}");
            }
        }
    }
    failed
}

/// `serve --check-only`: what `capstan check` checks, for the flags too, and what only starting
/// would find (an access log file that cannot be opened). Listeners are not bound: the running
/// switch holds them.
fn check_only(args: &ServeArgs, config: &Config) -> anyhow::Result<()> {
    if let Some(log) = &config.access_log {
        if log.path != "-" {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log.path)
                .with_context(|| format!("access_log.path: cannot open {}", log.path))?;
        }
    }
    for warning in config.warnings() {
        eprintln!("warning: {warning}");
    }
    match &args.config {
        Some(path) => println!("ok: {}", path.display()),
        None => println!("ok"),
    }
    Ok(())
}

pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = resolve_config(&args)?;
    if args.dry_run {
        print!("{}", config.describe());
        return Ok(());
    }
    if args.check_only {
        return check_only(&args, &config);
    }
    let threads = match args.threads {
        Some(0) => bail!("--threads must be at least 1"),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    capstan_switch::run(config, threads)
}

fn resolve_config(args: &ServeArgs) -> anyhow::Result<Config> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => {
            if args.listen.is_empty() {
                bail!("give --config FILE, or --listen and at least one --node");
            }
            Config::from_parts(Vec::new(), Vec::new())
        }
    };
    if !args.listen.is_empty() {
        config.listen = args
            .listen
            .iter()
            .map(|a| resolve_address(a).map_err(|e| anyhow::anyhow!("--listen: {e}")))
            .collect::<anyhow::Result<Vec<SocketAddr>>>()?;
    }
    if let Some(admin) = &args.admin {
        config.admin = Some(resolve_address(admin).map_err(|e| anyhow::anyhow!("--admin: {e}"))?);
    }
    if let Some(path) = &args.admin_token_file {
        let token = capstan_switch::AdminToken::from_file(path)
            .map_err(|e| anyhow::anyhow!("--admin-token-file: {e}"))?;
        config.admin_token = Some(token);
    }
    if !args.node.is_empty() {
        config.nodes = args
            .node
            .iter()
            .map(|n| parse_node(n))
            .collect::<anyhow::Result<_>>()?;
    }
    if let Some(policy) = &args.policy {
        config.policy = policy_from_flags(policy, &args.policy_param)?;
    }
    add_class_flags(&mut config, &args.class)?;
    if args.debug_headers {
        config.debug_headers = true;
    }
    if let Some(size) = &args.cache {
        let memory = size
            .parse::<capstan_switch::ByteSize>()
            .map_err(|e| anyhow::anyhow!("--cache: {e}"))?;
        let mut cache = config.cache.take().unwrap_or_default();
        cache.memory = memory;
        cache.max_object = cache.max_object.min(memory);
        config.cache = Some(cache);
    }
    config.validate()?;
    Ok(config)
}

/// `[NAME=]HOST:PORT[@WEIGHT]`.
fn parse_node(text: &str) -> anyhow::Result<NodeConfig> {
    let (name, rest) = match text.split_once('=') {
        Some((name, rest)) => (Some(name.trim()), rest),
        None => (None, text),
    };
    let (addr, weight) = match rest.rsplit_once('@') {
        Some((addr, w)) => {
            let weight: u32 = w.parse().ok().filter(|&w| w >= 1).with_context(|| {
                format!("--node {text}: weight `{w}` is not a whole number ≥ 1")
            })?;
            (addr, weight)
        }
        None => (rest, 1),
    };
    let address =
        resolve_address(addr.trim()).map_err(|e| anyhow::anyhow!("--node {text}: {e}"))?;
    let name = match name {
        Some("") => bail!("--node {text}: empty name before `=`"),
        Some(n) => n.to_string(),
        None => addr.trim().to_string(),
    };
    Ok(NodeConfig {
        name,
        address,
        weight,
        public_url: None,
        report_address: None,
        tls: None,
        protocol: Default::default(),
    })
}

fn policy_from_flags(name: &str, params: &[String]) -> anyhow::Result<PolicySpec> {
    let mut table = toml::Table::new();
    table.insert("name".into(), toml::Value::String(name.into()));
    for param in params {
        let (key, value) = param
            .split_once('=')
            .with_context(|| format!("--policy-param {param}: want KEY=VALUE"))?;
        let value = parse_toml_value(value.trim());
        table.insert(key.trim().to_string(), value);
    }
    capstan_switch::policy_from_table(&table)
        .map_err(|e| anyhow::anyhow!("--policy {name}: {}", e.message))
}

/// A TOML value (`65`, `0.25`, `true`, `["a","b"]`), or else the text as a string.
fn parse_toml_value(text: &str) -> toml::Value {
    format!("v = {text}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_string()))
}

fn add_class_flags(config: &mut Config, flags: &[String]) -> anyhow::Result<()> {
    let mut rules = Vec::new();
    for flag in flags {
        let (name, pattern) = flag
            .split_once('=')
            .filter(|(n, p)| !n.is_empty() && !p.is_empty())
            .with_context(|| format!("--class {flag}: want NAME=PATTERN, e.g. cpu=/cgi-bin/*"))?;
        if !config.classes.iter().any(|c| c.name == name) {
            config.classes.push(capstan_core::ClassSpec {
                name: name.to_string(),
                profile: Default::default(),
            });
        }
        let is_glob = pattern.contains(['*', '?', '[']);
        rules.push(RuleSpec {
            class: name.to_string(),
            glob: is_glob.then(|| pattern.to_string()),
            path_prefix: (!is_glob).then(|| pattern.to_string()),
            ..RuleSpec::default()
        });
    }
    rules.append(&mut config.rules);
    config.rules = rules;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_flags() {
        let n = parse_node("a=127.0.0.1:9001@3").unwrap();
        assert_eq!((n.name.as_str(), n.weight), ("a", 3));
        let n = parse_node("127.0.0.1:9002").unwrap();
        assert_eq!((n.name.as_str(), n.weight), ("127.0.0.1:9002", 1));
        assert!(parse_node("a=127.0.0.1:9001@0").is_err());
        assert!(parse_node("127.0.0.1").is_err());
        assert!(parse_node("=127.0.0.1:1").is_err());
    }

    #[test]
    fn toml_values_fall_back_to_strings() {
        assert_eq!(parse_toml_value("65"), toml::Value::Integer(65));
        assert_eq!(parse_toml_value("0.5"), toml::Value::Float(0.5));
        assert_eq!(parse_toml_value("abc"), toml::Value::String("abc".into()));
    }
}
