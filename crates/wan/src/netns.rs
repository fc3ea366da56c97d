//! Network namespaces and interface configuration through iproute2's `ip`, and running code
//! inside a namespace from a thread of this process.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};

use anyhow::{anyhow, bail, Context, Result};

/// Where `ip netns add` pins named namespaces.
pub const NETNS_DIR: &str = "/run/netns";

/// Runs `ip ARGS`, turning a failure into one line with ip's own message.
pub fn ip(args: &[&str]) -> Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                anyhow!("the 'ip' command (iproute2) is not installed; apt-get install iproute2")
            }
            _ => anyhow!("cannot run ip: {e}"),
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!(
            "ip {} failed: {}",
            args.join(" "),
            err.trim().replace('\n', " ")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn exists(name: &str) -> bool {
    std::path::Path::new(NETNS_DIR).join(name).exists()
}

/// Names of the namespaces `ip netns` knows.
pub fn list() -> Vec<String> {
    std::fs::read_dir(NETNS_DIR)
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Creates a namespace with its loopback up.
pub fn add(name: &str) -> Result<()> {
    ip(&["netns", "add", name]).context("cannot create a network namespace")?;
    ip(&["-n", name, "link", "set", "lo", "up"])?;
    Ok(())
}

/// Kills what still runs in the namespace, then removes it.
pub fn delete(name: &str) -> Result<()> {
    if !exists(name) {
        return Ok(());
    }
    if let Ok(pids) = ip(&["netns", "pids", name]) {
        for pid in pids
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
        {
            // SAFETY: kill(2) has no memory effects; the pid was just listed as inside a
            // namespace this program created and is tearing down.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
    ip(&["netns", "delete", name]).map(|_| ())
}

/// Runs `f` on a new thread whose network namespace is `name`: sockets it opens live there.
/// The thread's result is an error when the namespace cannot be entered.
pub fn spawn_in<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> std::thread::JoinHandle<Result<T>> {
    let path = format!("{NETNS_DIR}/{name}");
    std::thread::spawn(move || {
        let file = File::open(&path).with_context(|| format!("no network namespace at {path}"))?;
        // SAFETY: setns(2) only changes this thread's namespace; the fd is an open nsfs file.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            let e = std::io::Error::last_os_error();
            bail!("cannot enter network namespace {path}: {e}");
        }
        Ok(f())
    })
}
