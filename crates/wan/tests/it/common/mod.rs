//! Helpers for the namespace tests: skipping without root, starting an emulation, UDP echo
//! and round-trip measurements from inside the client namespace.

#![allow(dead_code)]

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_wan::router::{Router, RouterPlan};
use capstan_wan::stats::Report;
use capstan_wan::{Setup, WanConfig};

/// True when the tests can make namespaces and TUN devices; otherwise prints why the test is
/// skipped (not root, no iproute2, no /dev/net/tun, namespaces not allowed in this container).
pub fn can_run(test: &str) -> bool {
    match missing() {
        None => true,
        Some(why) => {
            eprintln!("skipped {test}: {why}");
            false
        }
    }
}

fn missing() -> Option<&'static str> {
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces, TUN devices)");
    }
    if std::process::Command::new("ip").arg("-V").output().is_err() {
        return Some("needs iproute2 (ip)");
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Some("needs /dev/net/tun");
    }
    // SAFETY: unshare(CLONE_NEWNET) only moves this short-lived probe thread into a new,
    // empty network namespace; the thread ends right after.
    let probe = std::thread::spawn(|| unsafe { libc::unshare(libc::CLONE_NEWNET) } == 0);
    if !probe.join().unwrap_or(false) {
        return Some("cannot make network namespaces here (no CAP_SYS_ADMIN?)");
    }
    None
}

/// Serialises the tests of one binary that carry traffic: two at once on a 2-core machine
/// would measure each other. Hold the guard for the whole test.
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running emulation: router first, so it stops before the set-up is removed.
pub struct Emulation {
    pub router: Router,
    pub setup: Setup,
}

impl Emulation {
    pub fn start(config_toml: &str) -> Emulation {
        Emulation::start_with(WanConfig::from_toml(config_toml).expect("test config is valid"))
    }

    pub fn start_with(config: WanConfig) -> Emulation {
        let mut setup = Setup::create(&config, None, false).expect("set-up");
        let s = &setup.state;
        let plan = RouterPlan {
            name: s.name.clone(),
            server: s.server_addr(),
            paths: config.paths.clone(),
            clients: s.client_addrs(),
            seed: config.seed,
            realtime: true,
            max_lead: Duration::from_micros(200),
        };
        let (c, d) = setup.take_devices().expect("devices");
        let router = Router::spawn(plan, c, d).expect("router");
        Emulation { router, setup }
    }

    pub fn server(&self) -> Ipv4Addr {
        self.setup.state.server_addr()
    }

    pub fn client_ns(&self) -> String {
        self.setup.state.client_namespace.clone()
    }

    /// The client addresses of path `i`.
    pub fn clients(&self, i: usize) -> Vec<Ipv4Addr> {
        self.setup.state.client_addrs()[i].clone()
    }

    /// Polls the router's report until `done` holds (deadline 10 s).
    pub fn report_when(&self, done: impl Fn(&Report) -> bool) -> Report {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let r = self.router.report();
            if done(&r) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "report never reached the expected state: {r:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Gives the calling test thread real-time priority (below the router's), so that on a loaded
/// machine the test measures the router rather than how long its own threads wait for a CPU.
pub fn realtime() {
    let param = libc::sched_param { sched_priority: 5 };
    // SAFETY: pid 0 is the calling thread; `param` is valid for the call. Failure is harmless.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
}

/// A UDP echo server in this (root) namespace; stops when dropped.
pub struct Echo {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Echo {
    pub fn start(ip: Ipv4Addr) -> Echo {
        let socket = UdpSocket::bind((ip, 0)).expect("bind echo");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        std::thread::spawn(move || {
            realtime();
            let mut buf = [0u8; 2048];
            while !stop2.load(Ordering::Relaxed) {
                if let Ok((n, from)) = socket.recv_from(&mut buf) {
                    let _ = socket.send_to(&buf[..n], from);
                }
            }
        });
        Echo { addr, stop }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// `n` UDP round trips from `client` (inside namespace `ns`) to `server`, in milliseconds.
pub fn udp_rtts(ns: &str, client: Ipv4Addr, server: SocketAddr, n: usize) -> Vec<f64> {
    capstan_wan::netns::spawn_in(ns, move || {
        realtime();
        let s = UdpSocket::bind((client, 0)).expect("bind client");
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        for i in 0..n as u32 {
            let start = Instant::now();
            s.send_to(&i.to_be_bytes(), server).expect("send");
            // Answers to earlier (timed-out) probes are skipped by their sequence number.
            loop {
                let (len, _) = s.recv_from(&mut buf).expect("echo answer within 2 s");
                if len == 4 && buf[..4] == i.to_be_bytes() {
                    break;
                }
            }
            out.push(start.elapsed().as_secs_f64() * 1e3);
        }
        out
    })
    .join()
    .expect("client thread")
    .expect("enter namespace")
}

pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[s.len() / 2]
}

pub fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Extra milliseconds allowed above an emulated delay: scheduling on a loaded, shared 2-core
/// machine. On a quiet machine the median is 0.4–0.9 ms over; a busy CI run saw 3.6 ms, so the
/// bound is 10 ms — wide enough for noise, narrow enough to catch a delay applied twice or per
/// direction. The router's precision is a benchmark's claim (crates/wan/bench.sh), not a
/// test's. Override with CAPSTAN_WAN_TEST_SLACK_MS.
pub fn slack_ms() -> f64 {
    std::env::var("CAPSTAN_WAN_TEST_SLACK_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10.0)
}

/// True when namespace `name` exists.
pub fn netns_exists(name: &str) -> bool {
    capstan_wan::netns::exists(name)
}

/// True when network device `dev` exists in the root namespace.
pub fn device_exists(dev: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(dev).exists()
}

/// Gives a socket a large receive buffer, so a receiver thread that the scheduler holds back
/// does not drop what the router delivered (those drops would look like path loss).
pub fn big_receive_buffer(socket: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 8 << 20;
    // SAFETY: setsockopt reads one c_int from `size`, which lives for the call; the fd is open.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
}
