//! `--register etcd://HOST:PORT/PREFIX` of `capstan origin` and `capstan agent`: the node puts
//! its address under the prefix with a lease it keeps alive (capstan-discovery), so a switch
//! with an `etcd` discovery source follows it. On SIGTERM or Ctrl-C the key is deleted first;
//! the node keeps serving for `--deregister-wait` (the switch drains it meanwhile: its
//! requests in flight finish, no new ones come) and only then closes its listener. Killed, it
//! leaves the key to vanish when the lease expires (`--register-ttl`).

use std::net::SocketAddr;
use std::time::Duration;

use capstan_discovery::etcd::{self, NodeValue, Registration};

/// The registration flags, shared by `origin` and `agent`.
#[derive(clap::Args, Debug, Clone)]
pub struct RegisterArgs {
    /// Register this node in etcd under PREFIX (several endpoints: etcd://H1:P1,H2:P2/PREFIX),
    /// kept alive with a lease, deleted on SIGTERM before the listener closes [default: none]
    #[arg(long, value_name = "etcd://HOST:PORT/PREFIX")]
    register: Option<String>,

    /// The HOST:PORT a switch sends this node's requests to, registered with --register
    /// [default: the listen address]
    #[arg(long, value_name = "HOST:PORT")]
    advertise: Option<String>,

    /// Lease of the registration: a killed node's key vanishes this long after its last
    /// renewal (renewed every third of it) [default: 10s]
    #[arg(long, value_name = "TIME")]
    register_ttl: Option<String>,

    /// On SIGTERM, time between deleting the key and closing the listener, for the switches
    /// to stop sending requests [default: 2s]
    #[arg(long, value_name = "TIME")]
    deregister_wait: Option<String>,
}

/// A checked `--register`: what to put where.
pub struct Plan {
    settings: etcd::Settings,
    prefix: String,
    ttl: Duration,
    wait: Duration,
    advertise: Option<String>,
}

impl RegisterArgs {
    /// The registration asked for, checked before the node starts; `None` without
    /// `--register`.
    pub fn plan(&self) -> anyhow::Result<Option<Plan>> {
        let Some(url) = &self.register else {
            for (flag, given) in [
                ("--advertise", self.advertise.is_some()),
                ("--register-ttl", self.register_ttl.is_some()),
                ("--deregister-wait", self.deregister_wait.is_some()),
            ] {
                if given {
                    anyhow::bail!(
                        "{flag} applies to a registration: add --register etcd://HOST:PORT/PREFIX"
                    );
                }
            }
            return Ok(None);
        };
        let (endpoints, prefix) =
            etcd::parse_url(url).map_err(|e| anyhow::anyhow!("--register {e}"))?;
        if let Some(a) = &self.advertise {
            etcd::node::check_address(a).map_err(|e| anyhow::anyhow!("--advertise: {e}"))?;
        }
        let time = |flag: &str, value: &Option<String>, default: Duration| match value {
            Some(v) => capstan_bench::parse_duration(v).map_err(|e| anyhow::anyhow!("{flag}: {e}")),
            None => Ok(default),
        };
        let ttl = time(
            "--register-ttl",
            &self.register_ttl,
            Duration::from_secs(10),
        )?;
        if ttl < Duration::from_secs(1) {
            anyhow::bail!("--register-ttl: at least 1s (etcd's leases count whole seconds)");
        }
        Ok(Some(Plan {
            settings: etcd::Settings::new(endpoints),
            prefix,
            ttl,
            wait: time(
                "--deregister-wait",
                &self.deregister_wait,
                Duration::from_secs(2),
            )?,
            advertise: self.advertise.clone(),
        }))
    }

    /// Whether --advertise was given (the agent needs it: it does not serve the requests).
    pub fn advertises(&self) -> bool {
        self.advertise.is_some()
    }
}

impl Plan {
    /// Refuses a listen address no switch could reach when nothing else is advertised.
    pub fn check_listen(&self, listen: SocketAddr) -> anyhow::Result<()> {
        if self.advertise.is_none() && listen.ip().is_unspecified() {
            anyhow::bail!(
                "--register: the node listens on {listen}, which is no address a switch can \
                 reach; give --advertise HOST:PORT"
            );
        }
        Ok(())
    }

    /// Registers the node bound at `listen` (its address unless --advertise says otherwise),
    /// named `name` when given (the key is the name, else the address). Prints
    /// `registered KEY` on standard output.
    pub async fn register(
        &self,
        listen: SocketAddr,
        name: Option<&str>,
        report: Option<SocketAddr>,
    ) -> anyhow::Result<Registration> {
        let address = self.advertise.clone().unwrap_or_else(|| listen.to_string());
        let mut value = NodeValue::new(address.clone());
        value.name = name.map(str::to_string);
        value.report_address = report.map(|r| r.to_string());
        let key_name = name.unwrap_or(&address);
        let registration = etcd::register(
            self.settings.clone(),
            &self.prefix,
            key_name,
            value.to_json(),
            self.ttl,
        )
        .await
        .map_err(|e| anyhow::anyhow!("--register: {e}"))?;
        tracing::info!("registered {} in etcd as {address}", registration.key());
        println!("registered {}", registration.key());
        use std::io::Write;
        let _ = std::io::stdout().flush();
        Ok(registration)
    }

    /// On the way out: deletes the key, then waits `--deregister-wait` before the caller
    /// closes its listener. A failure to delete is logged (the lease still expires).
    pub async fn deregister(&self, registration: Registration) {
        let key = registration.key().to_string();
        match registration.shutdown().await {
            Ok(()) => tracing::info!(
                "deregistered {key}; serving {:?} more before closing",
                self.wait
            ),
            Err(e) => {
                tracing::warn!("could not delete {key} ({e}); it vanishes when its lease expires")
            }
        }
        tokio::time::sleep(self.wait).await;
    }
}
