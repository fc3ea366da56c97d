//! `capstan agent`: the load daemon beside a real web server (nginx, Apache).

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use capstan_origin::agent::AgentConfig;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Serves the load report of `capstan origin` (GET /_capstan/load, the same \
                  JSON fields, \"resources\": \"agent\") for a machine running a web server \
                  Capstan did not write, so the switch can gather its load (SWEB's loadd). Every \
                  quarter --interval it samples /proc/stat (CPU busy time over all CPUs), \
                  /proc/diskstats (io_ticks: the time the disk had I/O in flight) and \
                  /proc/net/dev (the busier direction's bytes over --link-mbps). Linux only.\n\n\
                  The switch fetches the report from a node's own address, so let the web \
                  server pass the path on, e.g. in nginx: \
                  `location = /_capstan/load { proxy_pass http://127.0.0.1:9901; }` \
                  (examples/agent-nginx.conf).\n\n\
                  With --register etcd://HOST:PORT/PREFIX --advertise HOST:PORT (the web \
                  server's address) the agent registers the web server in etcd for a switch's \
                  etcd discovery source, with this agent as its load report address, under a \
                  lease it renews; on SIGTERM it deletes the key first and serves \
                  --deregister-wait more before stopping.\n\n\
                  Prints `listening on ADDR` on standard output once it is serving (then \
                  `registered KEY` with --register); stops on Ctrl-C or SIGTERM."
)]
pub struct AgentArgs {
    /// Address to serve the report on; port 0 picks a free one [default: 127.0.0.1:9901]
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,

    /// Node name in the report [default: the listen address]
    #[arg(long, value_name = "NAME")]
    name: Option<String>,

    /// Window of the report's "interval" figures (e.g. 500ms, 2s); the machine is sampled four
    /// times per interval [default: 1s]
    #[arg(long, value_name = "TIME")]
    interval: Option<String>,

    /// Block device whose busy time is the disk utilisation, as named in /proc/diskstats (sda,
    /// nvme0n1, vda) [default: the busiest device of each sample, loop and RAM devices aside]
    #[arg(long, value_name = "DEV")]
    disk: Option<String>,

    /// Network interface whose traffic is the network utilisation, as named in /proc/net/dev
    /// [default: the busiest interface of each sample other than lo]
    #[arg(long, value_name = "IFACE")]
    net: Option<String>,

    /// Link speed of the interface in Mbit/s, each direction [default: 1000]
    #[arg(long, value_name = "MBPS")]
    link_mbps: Option<f64>,

    /// nginx stub_status URL (http://HOST[:PORT]/PATH): its requests in progress become
    /// active_requests and its handled requests `served` [default: none; active_requests 0]
    #[arg(long, value_name = "URL")]
    nginx_status: Option<String>,

    #[command(flatten)]
    register: crate::register::RegisterArgs,
}

fn resolve(args: &AgentArgs) -> anyhow::Result<AgentConfig> {
    let mut c = AgentConfig::default();
    if let Some(v) = args.listen {
        c.listen = v;
    }
    c.name.clone_from(&args.name);
    if let Some(v) = &args.interval {
        c.interval =
            capstan_bench::parse_duration(v).map_err(|e| anyhow::anyhow!("--interval: {e}"))?;
    }
    c.disk.clone_from(&args.disk);
    c.net.clone_from(&args.net);
    if let Some(v) = args.link_mbps {
        c.link_mbps = v;
    }
    c.nginx_status.clone_from(&args.nginx_status);
    Ok(c)
}

pub fn run(args: AgentArgs) -> anyhow::Result<()> {
    let config = resolve(&args)?;
    let plan = args.register.plan()?;
    if plan.is_some() && !args.register.advertises() {
        anyhow::bail!(
            "--register needs --advertise HOST:PORT: the web server's address, which switches \
             send requests to (the agent only serves the load report)"
        );
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(async move {
        let stop = crate::origin::stop_signal()?;
        let agent = capstan_origin::agent::start(config).await?;
        tracing::info!("agent serving the load report on {}", agent.addr());
        println!("listening on {}", agent.addr());
        let _ = std::io::stdout().flush();
        let registration = match &plan {
            Some(plan) => {
                let report = Some(agent.addr());
                Some(
                    plan.register(agent.addr(), args.name.as_deref(), report)
                        .await?,
                )
            }
            None => None,
        };
        let stopped = stop.await;
        if let (Some(plan), Some(registration)) = (&plan, registration) {
            plan.deregister(registration).await;
        }
        agent.shutdown().await;
        stopped
    })
}
