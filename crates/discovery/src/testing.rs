//! For tests (this crate's, the switch's, the CLI's): a real etcd server on free loopback
//! ports with its own data folder, which can be stopped and started again on the same ports
//! and data (a restart), and is killed and removed when dropped.
//!
//! [`EtcdServer::start`] gives `None`, after printing a note, when the `etcd` binary is not
//! installed or does not come up: the test then returns early (skipped, said so), as the
//! project's rules ask for tests of optional real servers.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running etcd (see the module doc).
pub struct EtcdServer {
    child: Option<Child>,
    dir: PathBuf,
    client: SocketAddr,
    peer: SocketAddr,
}

impl EtcdServer {
    /// Starts etcd and waits until it is healthy; `None` (with a note on stderr) if it cannot.
    pub fn start() -> Option<EtcdServer> {
        let binary = std::env::var("CAPSTAN_ETCD").unwrap_or_else(|_| "etcd".into());
        if Command::new(&binary)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            eprintln!("note: `{binary}` is not installed (Debian: etcd-server); etcd test skipped");
            return None;
        }
        static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("capstan-etcd-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!(
                "note: cannot make {}: {e}; etcd test skipped",
                dir.display()
            );
            return None;
        }
        let mut server = EtcdServer {
            child: None,
            dir,
            client: free_port(),
            peer: free_port(),
        };
        match server.run() {
            Ok(()) => Some(server),
            Err(e) => {
                eprintln!("note: etcd did not start ({e}); etcd test skipped");
                None
            }
        }
    }

    /// The client URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.client)
    }

    /// Kills the server (SIGKILL: what a crash does; etcd's log keeps what it acknowledged).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same ports and data folder and waits until it is healthy.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.run()
    }

    fn run(&mut self) -> Result<(), String> {
        let binary = std::env::var("CAPSTAN_ETCD").unwrap_or_else(|_| "etcd".into());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("etcd.log"))
            .map_err(|e| format!("cannot open its log: {e}"))?;
        let (client, peer) = (
            format!("http://{}", self.client),
            format!("http://{}", self.peer),
        );
        let child = Command::new(binary)
            .args(["--name", "default", "--data-dir"])
            .arg(self.dir.join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args([
                "--listen-peer-urls",
                &peer,
                "--initial-advertise-peer-urls",
                &peer,
            ])
            .args(["--initial-cluster", &format!("default={peer}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot run etcd: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("it exited ({status}); log: {}", self.log_tail()));
                }
            }
            if healthy(self.client) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop();
        Err(format!("not healthy within 30 s; log: {}", self.log_tail()))
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A loopback port nobody listens on now (etcd binds it a moment later).
fn free_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// etcd's `GET /health` says `"health":"true"` once it has a leader and serves requests.
fn healthy(client: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&client, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET /health HTTP/1.0\r\nHost: {client}\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.contains("\"health\":\"true\"")
}
