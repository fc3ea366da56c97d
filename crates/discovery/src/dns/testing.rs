//! For tests (this crate's and the switch's): a real DNS server, dnsmasq, on a free loopback
//! port, serving the records a test writes in dnsmasq's configuration syntax:
//!
//! ```text
//! srv-host=_http._tcp.web.test,a.web.test,8080,0,5   # name,target,port,priority,weight
//! host-record=a.web.test,127.0.0.2                   # A (and AAAA) records
//! server=/fail.test/127.0.0.1#1                      # SERVFAIL: a dead upstream
//! ```
//!
//! dnsmasq answers for `.test` itself (NXDOMAIN for names it does not have) and asks no
//! upstream. It re-reads `srv-host` and `host-record` lines only when started, so
//! [`Dnsmasq::set_records`] restarts it on the same port: for the moment between, the server
//! does not answer, as a real one being reconfigured might not. All records get the TTL given
//! at start (`--local-ttl`).
//!
//! When `/usr/sbin/dnsmasq` (or `dnsmasq` on the `PATH`) is missing, [`Dnsmasq::start`] prints
//! a note and returns `None`: the test then returns early, skipped (Debian's `dnsmasq-base`
//! provides it; `.ci/run` installs it).

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running dnsmasq, stopped when dropped.
pub struct Dnsmasq {
    binary: PathBuf,
    dir: PathBuf,
    port: u16,
    ttl: u32,
    child: Option<Child>,
}

fn find_binary() -> Option<PathBuf> {
    let fixed = Path::new("/usr/sbin/dnsmasq");
    if fixed.exists() {
        return Some(fixed.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("dnsmasq"))
        .find(|p| p.exists())
}

/// A port free for both UDP and TCP on 127.0.0.1 just now.
fn free_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("a UDP socket on loopback");
        let port = udp.local_addr().expect("its address").port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

impl Dnsmasq {
    /// Starts dnsmasq with `records` (configuration lines) and this TTL (seconds) on every
    /// record, and waits until it accepts connections. `None` (with a note on stderr) when
    /// dnsmasq is not installed. Panics when it is but cannot start, with its log.
    pub async fn start(records: &str, ttl: u32) -> Option<Dnsmasq> {
        let Some(binary) = find_binary() else {
            eprintln!("NOTE: dnsmasq is not installed (Debian: dnsmasq-base); test skipped");
            return None;
        };
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("capstan-dnsmasq-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        let mut server = Dnsmasq {
            binary,
            dir,
            port: 0,
            ttl,
            child: None,
        };
        // Another process may take the port between our probe and dnsmasq's bind: try again.
        for _ in 0..5 {
            server.port = free_port();
            if server.launch(records).await.is_ok() {
                return Some(server);
            }
        }
        panic!("dnsmasq did not start: {}", server.log());
    }

    /// Where it listens (UDP and TCP).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Serves `records` instead (a restart on the same port).
    pub async fn set_records(&mut self, records: &str) {
        self.stop();
        if let Err(e) = self.launch(records).await {
            panic!("dnsmasq did not start again: {e}\n{}", self.log());
        }
    }

    /// Stops it: queries then get no answer.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again with the records it had.
    pub async fn resume(&mut self) {
        let records = std::fs::read_to_string(self.dir.join("records.conf")).unwrap_or_default();
        self.set_records(&records).await;
    }

    /// What dnsmasq logged (queries included), for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    async fn launch(&mut self, records: &str) -> Result<(), String> {
        let conf = self.dir.join("records.conf");
        std::fs::write(&conf, records).map_err(|e| e.to_string())?;
        let mut child = Command::new(&self.binary)
            .arg("--keep-in-foreground")
            .arg(format!("--port={}", self.port))
            .args(["--listen-address=127.0.0.1", "--bind-interfaces"])
            .args(["--no-resolv", "--no-hosts", "--no-poll", "--local=/test/"])
            .arg("--user=root")
            .arg(format!("--local-ttl={}", self.ttl))
            .arg(format!("--conf-file={}", conf.display()))
            .arg(format!("--pid-file={}", self.dir.join("pid").display()))
            .arg(format!("--log-facility={}", self.dir.join("log").display()))
            .arg("--log-queries")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.binary.display()))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("dnsmasq exited: {status}"));
            }
            let probe = tokio::net::TcpStream::connect(self.addr());
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_millis(200), probe).await {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err("dnsmasq did not listen within 10 s".into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A root trust anchor for DNSSEC validation (the 2017 root KSK, keytag 20326): with it and
/// no way to fetch the root's keys, every forwarded answer fails validation.
const ROOT_ANCHOR: &str =
    ".,20326,8,2,E06D44B80B8F1D39A95C0B0D7C65D08458E880409BBC683457104237C7F8EC8D";

impl Dnsmasq {
    /// An upstream for [`servfail_lines`]: it answers every `.example` name, unsigned.
    pub async fn start_servfail_upstream() -> Option<Dnsmasq> {
        Dnsmasq::start("local=/example/\naddress=/example/127.0.0.9\n", 30).await
    }
}

/// Configuration lines that make a dnsmasq answer SERVFAIL for every `.example` name it holds
/// no record for: it forwards them to `upstream` (from [`Dnsmasq::start_servfail_upstream`];
/// as its only server: dnsmasq checks no DNSSEC for a per-domain `server=/…/`) and checks
/// DNSSEC, which fails for want of signatures. Its own records (`srv-host`,
/// `host-record`) still answer.
pub fn servfail_lines(upstream: &Dnsmasq) -> String {
    let up = upstream.addr();
    format!(
        "server={}#{}\ndnssec\ndnssec-check-unsigned\ntrust-anchor={ROOT_ANCHOR}\n",
        up.ip(),
        up.port()
    )
}
