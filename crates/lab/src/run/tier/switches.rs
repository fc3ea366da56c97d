//! A tier of K switches for one measurement: switch `i` listens on 127.0.0.(10+i) at a port
//! common to all (so a peer list is known before any starts), in front of the same nodes, with a
//! cache of its own or a share of one sharded cache (`[tier] peers`), each put under its own CPU
//! quota. Dropping the tier kills its switches, then removes their cgroups.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::process::Command;

use crate::model::error::LabError;
use crate::model::tier::Quota;
use crate::procs::cluster::{self, Proc};
use crate::procs::quota::CpuQuota;

/// How the switches of a tier cache, and which policy they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheMode {
    /// Each switch its own cache of `mib` MiB; round-robin.
    Independent { mib: u64 },
    /// Each switch `mib` MiB of one cache sharded over the tier (`[tier] peers`); round-robin.
    Sharded { mib: u64 },
    /// No cache; `policy` with `view` when given (`"shared"`: the tier's gossiped counts, so
    /// the switches are peers of a `[tier]` without sharing a cache).
    Policy {
        policy: &'static str,
        view: Option<&'static str>,
    },
}

impl CacheMode {
    /// MiB of cache per switch (0: none).
    pub fn mib(self) -> u64 {
        match self {
            CacheMode::Independent { mib } | CacheMode::Sharded { mib } => mib,
            CacheMode::Policy { .. } => 0,
        }
    }
}

/// The running switches, their listeners and quotas.
pub struct Tier {
    /// Declared before `quotas`: the switches die before their cgroups are removed.
    switches: Vec<Option<Proc>>,
    addresses: Vec<String>,
    _quotas: Vec<CpuQuota>,
}

/// Switch `i`'s loopback address.
fn switch_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 10 + i as u8)
}

impl Tier {
    /// Starts `k` switches on 127.0.0.10.. at `port`, each (with `quota`) in its own cgroup of
    /// that many CPUs.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        exe: &Path,
        k: usize,
        port: u16,
        mode: CacheMode,
        nodes: &[(String, SocketAddr, SocketAddr)],
        threads: usize,
        quota: Option<f64>,
        dir: &Path,
    ) -> Result<Tier, LabError> {
        let addresses: Vec<String> = (0..k)
            .map(|i| SocketAddr::from((switch_ip(i), port)).to_string())
            .collect();
        let peers = match mode {
            CacheMode::Sharded { .. } | CacheMode::Policy { .. } => addresses.as_slice(),
            CacheMode::Independent { .. } => &[],
        };
        let config = config(mode, nodes, peers)?;
        let mut tier = Tier {
            switches: Vec::new(),
            addresses: addresses.clone(),
            _quotas: Vec::new(),
        };
        for (i, listen) in addresses.iter().enumerate() {
            let admin = cluster::free_loopback_port()
                .map_err(|e| LabError::Run(format!("no free port: {e}")))?;
            let listen: SocketAddr = listen.parse().expect("formatted above");
            let log_dir = dir.join(format!("switch{i}"));
            let proc =
                cluster::start_switch_at(exe, config.clone(), threads, listen, admin, &log_dir)
                    .await?;
            if let Some(cpus) = quota {
                let q = CpuQuota::new(&format!("capstan-lab-tier-s{i}"), cpus)
                    .map_err(LabError::Run)?;
                q.add(proc.pid()).map_err(LabError::Run)?;
                tier._quotas.push(q);
            }
            tier.switches.push(Some(proc));
        }
        Ok(tier)
    }

    pub fn len(&self) -> usize {
        self.addresses.len()
    }

    /// Each switch's listener, `IP:PORT`.
    pub fn addresses(&self) -> &[String] {
        &self.addresses
    }

    /// Kills the last switch (SIGKILL: no goodbye to clients or peers).
    pub fn kill_last(&mut self) {
        if let Some(last) = self.switches.last_mut() {
            drop(last.take());
        }
    }
}

/// A switch's configuration: the mode's policy over the nodes, no admission limit, its cache,
/// and with `peers` the `[tier]` section listing every switch of the tier.
fn config(
    mode: CacheMode,
    nodes: &[(String, SocketAddr, SocketAddr)],
    peers: &[String],
) -> Result<toml::Table, LabError> {
    let mut text = match mode {
        CacheMode::Policy {
            policy,
            view: Some(view),
        } => format!("[policy]\nname = \"{policy}\"\nview = \"{view}\"\n"),
        CacheMode::Policy { policy, view: None } => format!("[policy]\nname = \"{policy}\"\n"),
        _ => "[policy]\nname = \"round-robin\"\n".to_string(),
    };
    text.push_str(
        "\n# Nodes are emulated and unlimited: no admission limit in front of them.\n\
         [admission]\nlimit = \"off\"\n\n",
    );
    for (name, addr, report) in nodes {
        text.push_str(&format!(
            "[[node]]\nname = \"{name}\"\naddress = \"{addr}\"\nreport_address = \"{report}\"\n\n"
        ));
    }
    let mib = mode.mib();
    if mib > 0 {
        // Objects up to a quarter of the cache, as the cache experiment does.
        let max_kib = ((mib << 10) / 4).clamp(1, 8 << 10);
        text.push_str(&format!(
            "[cache]\nmemory = \"{mib}MiB\"\nmax_object = \"{max_kib}KiB\"\n"
        ));
    }
    if !peers.is_empty() {
        let list: Vec<String> = peers.iter().map(|p| format!("\"{p}\"")).collect();
        text.push_str(&format!("\n[tier]\npeers = [{}]\n", list.join(", ")));
    }
    toml::from_str(&text).map_err(|e| LabError::Run(format!("the lab's switch config: {e}")))
}

/// A port free on 127.0.0.10 … 127.0.0.(10+k-1) alike.
pub fn common_port(k: usize) -> Result<u16, LabError> {
    for _ in 0..50 {
        let port = cluster::free_loopback_port()
            .map_err(|e| LabError::Run(format!("no free port: {e}")))?
            .port();
        let free = (0..k).all(|i| TcpListener::bind((switch_ip(i), port)).is_ok());
        if free {
            return Ok(port);
        }
    }
    Err(LabError::Run(format!(
        "no port free on all of 127.0.0.10–127.0.0.{}",
        9 + k
    )))
}

/// Whether this build's switch takes `[tier] peers`: `capstan check` on a generated sharded
/// config, with its answer (the first line of its error when it refuses).
pub fn check_support(
    exe: &Path,
    dir: &Path,
    nodes: &[(String, SocketAddr, SocketAddr)],
) -> (bool, String) {
    let peers = ["127.0.0.10:8080".to_string(), "127.0.0.11:8080".to_string()];
    let mut table = match config(CacheMode::Sharded { mib: 4 }, nodes, &peers) {
        Ok(t) => t,
        Err(e) => return (false, e.to_string()),
    };
    table.insert(
        "listen".into(),
        toml::Value::Array(vec![peers[0].clone().into()]),
    );
    let path = dir.join("tier-check.toml");
    let text = toml::to_string(&table).unwrap_or_default();
    if let Err(e) = std::fs::write(&path, text) {
        return (false, format!("cannot write {}: {e}", path.display()));
    }
    match Command::new(exe).arg("check").arg(&path).output() {
        Ok(out) if out.status.success() => (true, "capstan check accepts [tier] peers".into()),
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            // serde lists every known key after the reason: the reason is enough.
            let reason = first.split(", expected").next().unwrap_or(first).trim();
            (false, format!("capstan check refuses [tier]: {reason}"))
        }
        Err(e) => (false, format!("cannot run capstan check: {e}")),
    }
}

/// Whether a CPU quota can be made here and a process put under it (one is made, a `sleep`
/// put in it, both removed), and how.
pub fn probe_quota(cpus: f64) -> Quota {
    let probe = CpuQuota::new("capstan-lab-tier-probe", cpus).and_then(|q| {
        let mut child = Command::new("sleep")
            .arg("5")
            .spawn()
            .map_err(|e| format!("cannot start sleep to try the quota: {e}"))?;
        let added = q.add(child.id());
        let _ = child.kill();
        let _ = child.wait();
        added.map(|()| q)
    });
    match probe {
        Ok(q) => Quota {
            applied: true,
            detail: format!("each switch in its own cgroup: {}", q.method),
        },
        Err(e) => Quota {
            applied: false,
            detail: format!(
                "no quota (the switches share the machine's CPUs, so the machine, not the tier, \
                 may be the bottleneck): {e}"
            ),
        },
    }
}
