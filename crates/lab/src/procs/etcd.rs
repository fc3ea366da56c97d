//! An etcd the lab owns, for experiments whose nodes register themselves
//! (`capstan origin --register etcd://…`): one member on free loopback ports with its data in
//! a temporary folder, killed (SIGKILL, as a crash) and started again on the same ports and
//! data for a registry outage, and killed and its folder removed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::model::error::LabError;
use crate::procs::cluster;

/// The program run; `CAPSTAN_ETCD` names another (the tests' harness reads it too).
fn binary() -> String {
    std::env::var("CAPSTAN_ETCD").unwrap_or_else(|_| "etcd".into())
}

/// Whether etcd can be run at all, so a run that needs it fails before it starts anything.
pub fn check_installed() -> Result<(), LabError> {
    let installed = Command::new(binary())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    match installed {
        true => Ok(()),
        false => Err(LabError::Run(format!(
            "`{}` is not installed (Debian: etcd-server); --registry etcd needs it",
            binary()
        ))),
    }
}

/// How long etcd may take to answer `/health` after it is started.
const READY_DEADLINE: Duration = Duration::from_secs(30);

/// A running (or stopped, between [`EtcdProcess::kill`] and [`EtcdProcess::restart`]) etcd.
pub struct EtcdProcess {
    child: Option<Child>,
    data: PathBuf,
    log: PathBuf,
    client: SocketAddr,
    peer: SocketAddr,
}

impl EtcdProcess {
    /// Starts etcd (its log goes to `log_dir/etcd.log`) and waits until it is healthy.
    pub async fn start(log_dir: &Path) -> Result<EtcdProcess, LabError> {
        check_installed()?;
        let port = || cluster::free_loopback_port().map_err(|e| LabError::Run(e.to_string()));
        let data = std::env::temp_dir().join(format!("capstan-lab-etcd-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let mut etcd = EtcdProcess {
            child: None,
            data,
            log: log_dir.join("etcd.log"),
            client: port()?,
            peer: port()?,
        };
        etcd.run().await?;
        Ok(etcd)
    }

    /// The client URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.client)
    }

    /// The client address (`HOST:PORT`, for `etcd://HOST:PORT/PREFIX`).
    pub fn client(&self) -> SocketAddr {
        self.client
    }

    /// Kills it with SIGKILL: what a crash or a lost machine does (its log keeps what it
    /// acknowledged, so the restart has the same keys and leases).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same ports and data and waits until it is healthy.
    pub async fn restart(&mut self) -> Result<(), LabError> {
        self.kill();
        self.run().await
    }

    async fn run(&mut self) -> Result<(), LabError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| LabError::Run(format!("cannot write {}: {e}", self.log.display())))?;
        let err = log.try_clone().map_err(|e| LabError::Run(e.to_string()))?;
        let (client, peer) = (self.endpoint(), format!("http://{}", self.peer));
        let child = Command::new(binary())
            .args(["--name", "lab", "--data-dir"])
            .arg(&self.data)
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("lab={peer}")])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|e| LabError::Run(format!("cannot start etcd: {e}")))?;
        self.child = Some(child);
        self.wait_ready().await
    }

    /// Polls `GET /health` until etcd has a leader and serves (`"health":"true"`).
    async fn wait_ready(&mut self) -> Result<(), LabError> {
        let deadline = Instant::now() + READY_DEADLINE;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(LabError::Run(format!(
                    "etcd exited ({status}): {}",
                    self.log_tail()
                )));
            }
            let health = cluster::get(self.client, "/health").await;
            if health.is_ok_and(|body| body.contains("\"health\":\"true\"")) {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(LabError::Run(format!(
                    "etcd was not healthy within {READY_DEADLINE:?}: {}",
                    self.log_tail()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(3)..].join(" | ")
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}
