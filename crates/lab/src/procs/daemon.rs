//! Server daemons the cache and WAN experiments start (Capstan, Varnish, Traffic Server,
//! apache2, nginx): a child process stopped when dropped, the version line a program prints,
//! and the CPU time and memory of a process and its descendants.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::procs::cluster::{cpu_seconds, get};

/// A process the lab started, stopped with SIGTERM (then SIGKILL after 5 s) when dropped.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) name: String,
    pub(crate) log: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet (so the
        // pid cannot have been reused).
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    pub(crate) fn spawn(name: &str, cmd: &mut Command, log: PathBuf) -> Result<Daemon, String> {
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {name}: {e}"))?;
        Ok(Daemon {
            child,
            name: name.to_string(),
            log,
        })
    }

    pub(crate) fn tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    }

    /// Waits until `probe` answers 200 through `addr`.
    pub(crate) async fn ready(
        &mut self,
        addr: SocketAddr,
        probe: &str,
        within: Duration,
    ) -> Result<(), String> {
        let end = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("{} exited ({status}): {}", self.name, self.tail()));
            }
            if get(addr, probe).await.is_ok() {
                return Ok(());
            }
            if Instant::now() >= end {
                return Err(format!(
                    "{} did not answer {probe} on {addr} within {within:?}: {}",
                    self.name,
                    self.tail()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The first line of `program flag`'s output that names a known server.
pub(crate) fn version(program: &Path, flag: &str) -> String {
    Command::new(program)
        .arg(flag)
        .output()
        .ok()
        .map(|o| {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            text.lines()
                .find(|l| {
                    ["varnish", "Traffic Server", "capstan", "Apache", "nginx"]
                        .iter()
                        .any(|name| l.contains(name))
                })
                .unwrap_or("")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// The processes of a tree rooted at `pid` (Varnish's cache process, Traffic Server's
/// threads are one process).
fn tree_pids(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    let entries: Vec<(u32, u32)> = std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
                .filter_map(|p| {
                    let s = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
                    let rest = &s[s.rfind(')')? + 1..];
                    let ppid = rest.split_whitespace().nth(1)?.parse().ok()?;
                    Some((p, ppid))
                })
                .collect()
        })
        .unwrap_or_default();
    while i < all.len() {
        let parent = all[i];
        all.extend(
            entries
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    all
}

/// CPU seconds of a process and its descendants.
pub(crate) fn tree_cpu(pid: u32) -> f64 {
    tree_pids(pid)
        .into_iter()
        .filter_map(|p| cpu_seconds(Some(p)))
        .sum()
}

pub(crate) fn tree_rss_mb(pid: u32) -> f64 {
    tree_pids(pid)
        .into_iter()
        .filter_map(|p| {
            let s = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            line.split_whitespace().nth(1)?.parse::<f64>().ok()
        })
        .sum::<f64>()
        / 1024.0
}
