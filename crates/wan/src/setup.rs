//! The namespaces, devices and addresses of one emulation, and their removal.
//!
//! Layout (N is a free /24 in 198.18.0.0/15, the range RFC 2544 sets aside for benchmarks):
//!
//! ```text
//!  client namespace cwan-PID-K           this process (router)           root namespace, or
//!  ┌──────────────────────┐   read/write   ┌────────┐  read/write   ┌ server namespace ────┐
//!  │ cwPIDkKc 198.18.N.2…  │ ─────────────▶ │ router │ ────────────▶ │ cwPIDkKs 198.18.N.1  │
//!  └──────────────────────┘ ◀───────────── └────────┘ ◀──────────── └──────────────────────┘
//! ```
//!
//! Both devices are TUN devices whose descriptors the router holds: every packet between the
//! client addresses and the server address crosses the router, in both directions, and nothing
//! is forwarded by the kernel. TUN devices vanish when the router's descriptors close (even on
//! SIGKILL); named namespaces do not, so each set-up records what it made in
//! `/run/capstan-wan/ID/state.json` *before* making it, and every later set-up removes the
//! leftovers of set-ups whose process is gone.

use std::fs;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::config::WanConfig;
use crate::netns;
use crate::tun::Tun;

/// Where set-ups record themselves.
pub const RUN_DIR: &str = "/run/capstan-wan";

/// What a set-up made, written before it makes it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// `run-PID` or `up-NAME`.
    pub id: String,
    pub name: String,
    pub pid: u32,
    /// The process's start time (clock ticks after boot), so a reused pid is not mistaken for it.
    pub start_time: u64,
    pub client_namespace: String,
    pub server_namespace: Option<String>,
    pub devices: Vec<String>,
    pub subnet: String,
    pub server: String,
    /// Client addresses per path, in path order.
    pub paths: Vec<(String, Vec<String>)>,
}

impl State {
    /// All namespaces this set-up owns.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v = vec![self.client_namespace.clone()];
        v.extend(self.server_namespace.clone());
        v
    }

    pub fn dir(&self) -> PathBuf {
        Path::new(RUN_DIR).join(&self.id)
    }

    pub fn stats_socket(&self) -> PathBuf {
        self.dir().join("stats.sock")
    }

    /// True while the process that made this set-up still runs.
    pub fn is_alive(&self) -> bool {
        process_start_time(self.pid) == Some(self.start_time)
    }

    pub fn server_addr(&self) -> Ipv4Addr {
        self.server.parse().unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    /// Client addresses of each path, parsed.
    pub fn client_addrs(&self) -> Vec<Vec<Ipv4Addr>> {
        self.paths
            .iter()
            .map(|(_, a)| a.iter().filter_map(|s| s.parse().ok()).collect())
            .collect()
    }
}

/// A live set-up; dropping it removes everything it made.
#[derive(Debug)]
pub struct Setup {
    pub state: State,
    client: Option<Tun>,
    server: Option<Tun>,
    removed: bool,
}

/// Fails with a clear message unless running as root.
pub fn require_root() -> Result<()> {
    // SAFETY: geteuid(2) has no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        bail!("capstan wan needs root (it makes network namespaces and TUN devices); run it with sudo");
    }
    Ok(())
}

impl Setup {
    /// Makes namespaces, devices and addresses for `config`. `name` gives a named set-up
    /// (`capstan wan up`), None a per-process one (`capstan wan run`).
    pub fn create(config: &WanConfig, name: Option<&str>, server_namespace: bool) -> Result<Setup> {
        require_root()?;
        fs::create_dir_all(RUN_DIR).with_context(|| format!("cannot create {RUN_DIR}"))?;
        let _lock = Lock::acquire(&Path::new(RUN_DIR).join("lock"))?;
        clean_stale();
        let pid = std::process::id();
        let state = plan_state(config, name, pid, server_namespace)?;
        if let Some(other) = read_state(&state.dir()) {
            bail!("a set-up named '{}' is already up (pid {}); stop it with: capstan wan down --name {}", other.name, other.pid, other.name);
        }
        write_state(&state)?;
        let mut setup = Setup {
            state,
            client: None,
            server: None,
            removed: false,
        };
        setup
            .build()
            .context("cannot set up the emulated network")?;
        Ok(setup)
    }

    /// Makes what the state describes; a failure leaves the rest to Drop.
    fn build(&mut self) -> Result<()> {
        let s = self.state.clone();
        let (dev_c, dev_s) = (&s.devices[0], &s.devices[1]);
        netns::add(&s.client_namespace)?;
        let client = Tun::create(dev_c)?;
        netns::ip(&["link", "set", dev_c, "netns", &s.client_namespace])?;
        let addrs: Vec<String> = s.paths.iter().flat_map(|(_, a)| a.clone()).collect();
        configure(Some(&s.client_namespace), dev_c, &addrs)?;
        self.client = Some(client);
        let server = Tun::create(dev_s)?;
        if let Some(ns) = &s.server_namespace {
            netns::add(ns)?;
            netns::ip(&["link", "set", dev_s, "netns", ns])?;
        }
        configure(
            s.server_namespace.as_deref(),
            dev_s,
            std::slice::from_ref(&s.server),
        )?;
        self.server = Some(server);
        Ok(())
    }

    /// Hands the devices' descriptors to the router (client side, server side).
    pub fn take_devices(&mut self) -> Result<(OwnedFd, OwnedFd)> {
        match (self.client.take(), self.server.take()) {
            (Some(c), Some(s)) => Ok((c.fd, s.fd)),
            _ => bail!("the devices were already taken"),
        }
    }

    /// Removes namespaces and the state directory; devices go with their descriptors.
    pub fn remove(&mut self) -> Result<()> {
        if self.removed {
            return Ok(());
        }
        self.removed = true;
        self.client = None;
        self.server = None;
        remove_state(&self.state)
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            eprintln!("capstan wan: cleanup incomplete: {e:#}");
        }
    }
}

/// Gives a device its addresses (a /24 each) and brings it up, without IPv6 link-local.
fn configure(ns: Option<&str>, dev: &str, addrs: &[String]) -> Result<()> {
    let ip = |args: &[&str]| -> Result<String> {
        let mut all: Vec<&str> = ns.map(|n| vec!["-n", n]).unwrap_or_default();
        all.extend_from_slice(args);
        netns::ip(&all)
    };
    // Older iproute2 lacks addrgenmode; then the device only sends IPv6 noise, counted unrouted.
    let _ = ip(&["link", "set", "dev", dev, "addrgenmode", "none"]);
    for a in addrs {
        ip(&["addr", "add", &format!("{a}/24"), "dev", dev])?;
    }
    ip(&[
        "link",
        "set",
        "dev",
        dev,
        "mtu",
        "1500",
        "txqueuelen",
        "4096",
        "up",
    ])?;
    Ok(())
}

/// Set-ups made by this process so far: several can coexist (parallel tests).
static MADE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Chooses names, a free /24 and the addresses of every path.
fn plan_state(config: &WanConfig, name: Option<&str>, pid: u32, server_ns: bool) -> Result<State> {
    let k = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (id, display, client_ns) = match name {
        Some(n) => (format!("up-{n}"), n.to_string(), format!("cwan-{n}")),
        None => (
            format!("run-{pid}-{k}"),
            format!("run-{pid}-{k}"),
            format!("cwan-{pid}-{k}"),
        ),
    };
    let base = free_subnet(pid, k)?;
    let addr = |host: u32| Ipv4Addr::from(u32::from(base) + host).to_string();
    let mut next = 2;
    let mut paths = Vec::new();
    for p in &config.paths {
        paths.push((p.name.clone(), (next..next + p.clients).map(addr).collect()));
        next += p.clients;
    }
    Ok(State {
        id,
        name: display,
        pid,
        start_time: process_start_time(pid).unwrap_or(0),
        server_namespace: server_ns.then(|| format!("{client_ns}-srv")),
        client_namespace: client_ns,
        devices: vec![format!("cw{pid}k{k}c"), format!("cw{pid}k{k}s")],
        subnet: format!("{base}/24"),
        server: addr(1),
        paths,
    })
}

/// A /24 of 198.18.0.0/15 that no live set-up and no route or address here uses.
///
/// The search starts at a different /24 for each set-up a process makes (`made`), so a new one
/// does not reuse the subnet of one just removed: the host's sockets of that run (a TCP FIN
/// still being retransmitted to a client address) would reach the new namespace, be answered
/// with a reset, and show up in its path counters.
fn free_subnet(pid: u32, made: u32) -> Result<Ipv4Addr> {
    let mut taken: Vec<(u32, u32)> = live_states()
        .iter()
        .filter_map(|s| parse_prefix(&s.subnet))
        .collect();
    for args in [
        &["-4", "-o", "route", "show", "table", "all"][..],
        &["-4", "-o", "addr", "show"][..],
    ] {
        let out = netns::ip(args)?;
        taken.extend(
            out.split_whitespace()
                .filter_map(parse_prefix)
                .filter(|&(_, len)| len > 0),
        );
    }
    let pool = u32::from(Ipv4Addr::new(198, 18, 0, 0));
    for i in 0..512 {
        let candidate = pool + (pid.wrapping_add(made).wrapping_add(i) % 512) * 256;
        let overlaps = taken.iter().any(|&(net, len)| {
            let mask = |l: u32| if l == 0 { 0 } else { u32::MAX << (32 - l) };
            let m = mask(len.min(24));
            net & m == candidate & m
        });
        if !overlaps {
            return Ok(Ipv4Addr::from(candidate));
        }
    }
    bail!("no free /24 left in 198.18.0.0/15 for another set-up")
}

/// `a.b.c.d/len` or `a.b.c.d` (a /32) → (network, len).
fn parse_prefix(text: &str) -> Option<(u32, u32)> {
    let (addr, len) = match text.split_once('/') {
        Some((a, l)) => (a, l.parse().ok().filter(|&l| l <= 32)?),
        None => (text, 32),
    };
    Some((u32::from(addr.parse::<Ipv4Addr>().ok()?), len))
}

/// A process's start time from /proc (field 22 of stat), None when it is not running.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces; fields after its ')' start at field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn read_state(dir: &Path) -> Option<State> {
    serde_json::from_str(&fs::read_to_string(dir.join("state.json")).ok()?).ok()
}

fn write_state(state: &State) -> Result<()> {
    let dir = state.dir();
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let tmp = dir.join("state.json.tmp");
    let mut f =
        fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    f.write_all(serde_json::to_string_pretty(state)?.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, dir.join("state.json"))?;
    Ok(())
}

/// Every recorded set-up, alive or not.
pub fn all_states() -> Vec<State> {
    let Ok(dir) = fs::read_dir(RUN_DIR) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| read_state(&e.path()))
        .collect()
}

/// Set-ups whose process still runs.
pub fn live_states() -> Vec<State> {
    all_states().into_iter().filter(State::is_alive).collect()
}

/// Removes what a set-up made (except devices, which die with their process).
fn remove_state(state: &State) -> Result<()> {
    let mut first_error = None;
    for ns in state.namespaces() {
        if let Err(e) = netns::delete(&ns) {
            first_error.get_or_insert(e);
        }
    }
    let _ = fs::remove_dir_all(state.dir());
    first_error.map_or(Ok(()), Err)
}

/// Removes the leftovers of set-ups whose process is gone (killed, crashed), and namespaces
/// named like a per-process set-up whose process is gone. Returns what was removed.
pub fn clean_stale() -> Vec<String> {
    let mut removed = Vec::new();
    let states = all_states();
    for s in states.iter().filter(|s| !s.is_alive()) {
        if remove_state(s).is_ok() {
            removed.push(s.id.clone());
        }
    }
    let known: Vec<String> = states.iter().flat_map(State::namespaces).collect();
    for ns in netns::list() {
        // Per-process set-ups are named cwan-PID-K (and cwan-PID-K-srv).
        let pid = ns
            .strip_prefix("cwan-")
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !known.contains(&ns)
                && process_start_time(pid).is_none()
                && netns::delete(&ns).is_ok()
            {
                removed.push(ns);
            }
        }
    }
    removed
}

/// An exclusive lock on a file, released on drop.
struct Lock(fs::File);

impl Lock {
    fn acquire(path: &Path) -> Result<Lock> {
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        // SAFETY: flock(2) on a descriptor this function owns; no memory is passed.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            bail!(
                "cannot lock {}: {}",
                path.display(),
                std::io::Error::last_os_error()
            );
        }
        Ok(Lock(f))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        // SAFETY: as above; unlocking a descriptor this value owns.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(parse_prefix("198.18.3.0/24"), Some((0xc612_0300, 24)));
        assert_eq!(parse_prefix("10.0.0.1"), Some((0x0a00_0001, 32)));
        assert_eq!(parse_prefix("default"), None);
        assert_eq!(parse_prefix("1.2.3.4/40"), None);
    }

    #[test]
    fn own_start_time_is_readable() {
        assert!(process_start_time(std::process::id()).is_some());
        assert_eq!(process_start_time(u32::MAX), None);
    }
}
