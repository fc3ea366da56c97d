//! `capstan origin --register` and `capstan agent --register` as processes against a real
//! etcd (skipped with a note when etcd is not installed): the node's key appears under the
//! prefix; SIGTERM deletes it while the node still serves, and the node exits after; SIGKILL
//! leaves it to vanish at lease expiry. Bad flags are refused before the node starts. And the
//! whole path: `capstan serve` with an etcd source in front of registered origins, one of
//! which is stopped with SIGTERM while clients keep requesting: no request fails.
//! `capstan check --resolve` prints what an etcd prefix holds now, and with etcd down (or
//! never there: always run) one line naming the endpoint and what failed.

use crate::support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_discovery::etcd::{register, watch_prefix, NodeValue, PrefixWatch, Settings, Snapshot};
use capstan_discovery::testing::EtcdServer;
use support::{accepts, capstan, eventually, free_addr, get, run, spawn, try_http, Proc};

const PREFIX: &str = "/capstan/nodes/";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Reads the watch until a snapshot satisfies `want`; fails after 30 s.
fn until(
    rt: &tokio::runtime::Runtime,
    watch: &mut PrefixWatch,
    what: &str,
    want: impl Fn(&Snapshot) -> bool,
) -> Snapshot {
    rt.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, watch.next()).await {
                Ok(Some(Ok(snapshot))) if want(&snapshot) => return snapshot,
                Ok(Some(_)) => {}
                _ => panic!("etcd never showed {what} within 30 s"),
            }
        }
    })
}

fn registered_origin(server: &EtcdServer, extra: &[&str]) -> (Proc, SocketAddr) {
    let addr = free_addr();
    let (listen, url) = (
        addr.to_string(),
        format!(
            "etcd://{}{PREFIX}",
            server.endpoint().trim_start_matches("http://")
        ),
    );
    let mut args = vec!["origin", "--listen", &listen, "--register", &url];
    args.extend_from_slice(extra);
    (spawn(&args, addr), addr)
}

#[test]
fn sigterm_deletes_the_key_before_the_listener_closes() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let rt = runtime();
    let mut watch =
        rt.block_on(async { watch_prefix(Settings::new(vec![server.endpoint()]), PREFIX) });
    let (mut node, addr) = registered_origin(&server, &["--deregister-wait", "3s", "--name", "o1"]);
    let key = format!("{PREFIX}o1");
    let seen = until(&rt, &mut watch, "the node's key", |s| {
        s.entries.contains_key(&key)
    });
    let value = NodeValue::parse(&key, &seen.entries[&key]).unwrap();
    assert_eq!(value.address, addr.to_string());
    assert_eq!(value.name.as_deref(), Some("o1"));
    node.signal("TERM");
    until(&rt, &mut watch, "the key deleted", |s| {
        !s.entries.contains_key(&key)
    });
    // Deleted while the node still serves: switches drain it before it closes.
    assert!(
        node.0.try_wait().unwrap().is_none(),
        "exited before the key was deleted"
    );
    assert!(
        accepts(addr),
        "the listener closed before the key was deleted"
    );
    let status = node
        .wait_exit(Duration::from_secs(30))
        .expect("exits after the wait");
    assert!(status.success(), "{status}: {}", node.stderr_text());
}

#[test]
fn a_killed_node_is_removed_at_lease_expiry() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let rt = runtime();
    let mut watch =
        rt.block_on(async { watch_prefix(Settings::new(vec![server.endpoint()]), PREFIX) });
    let (mut node, addr) = registered_origin(&server, &["--register-ttl", "2s"]);
    let key = format!("{PREFIX}{addr}");
    until(&rt, &mut watch, "the node's key", |s| {
        s.entries.contains_key(&key)
    });
    node.signal("KILL");
    node.wait_exit(Duration::from_secs(30)).expect("killed");
    until(&rt, &mut watch, "the key expired", |s| {
        !s.entries.contains_key(&key)
    });
}

#[test]
fn an_agent_registers_its_web_server_with_itself_as_report_address() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let rt = runtime();
    let mut watch =
        rt.block_on(async { watch_prefix(Settings::new(vec![server.endpoint()]), PREFIX) });
    let agent = free_addr();
    let (listen, url) = (
        agent.to_string(),
        format!(
            "etcd://{}{PREFIX}",
            server.endpoint().trim_start_matches("http://")
        ),
    );
    let args = [
        "agent",
        "--listen",
        &listen,
        "--register",
        &url,
        "--advertise",
        "127.0.0.1:8080",
    ];
    let mut node = spawn(&args, agent);
    let key = format!("{PREFIX}127.0.0.1:8080");
    let seen = until(&rt, &mut watch, "the agent's key", |s| {
        s.entries.contains_key(&key)
    });
    let value = NodeValue::parse(&key, &seen.entries[&key]).unwrap();
    assert_eq!(value.report_address, Some(agent.to_string()));
    node.signal("TERM");
    until(&rt, &mut watch, "the key deleted", |s| {
        !s.entries.contains_key(&key)
    });
    assert!(node
        .wait_exit(Duration::from_secs(30))
        .is_some_and(|s| s.success()));
}

#[test]
fn bad_registration_flags_are_refused_before_the_node_starts() {
    let refused = |args: &[&str], says: &str| {
        let out = run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(err.contains(says), "{args:?}: {err}");
    };
    refused(
        &[
            "origin",
            "--listen",
            "127.0.0.1:0",
            "--register",
            "http://127.0.0.1:2379/p",
        ],
        "etcd://HOST:PORT/PREFIX",
    );
    refused(
        &[
            "origin",
            "--listen",
            "0.0.0.0:0",
            "--register",
            "etcd://127.0.0.1:2379/p",
        ],
        "give --advertise",
    );
    refused(
        &[
            "origin",
            "--listen",
            "127.0.0.1:0",
            "--advertise",
            "127.0.0.1:1",
        ],
        "--advertise applies to a registration",
    );
    refused(
        &[
            "agent",
            "--listen",
            "127.0.0.1:0",
            "--register",
            "etcd://127.0.0.1:2379/p",
        ],
        "--register needs --advertise",
    );
    refused(
        &[
            "origin",
            "--listen",
            "127.0.0.1:0",
            "--register",
            "etcd://127.0.0.1:2379/p",
            "--advertise",
            "h:0",
        ],
        "port 0",
    );
    // Nobody at the etcd address: the node says so and exits (it does not serve unregistered).
    let out = capstan()
        .args([
            "origin",
            "--listen",
            "127.0.0.1:0",
            "--register",
            "etcd://127.0.0.1:1/p",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--register: etcd http://127.0.0.1:1"), "{err}");
}

/// Clients requesting through the switch, one request per connection, counting failures.
struct Clients {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Clients {
    fn start(addr: SocketAddr, n: usize) -> Clients {
        let stop = Arc::new(AtomicBool::new(false));
        let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let threads = (0..n)
            .map(|_| {
                let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let answered =
                            try_http(addr, "GET", "/file5k.html").is_ok_and(|r| r.status == 200);
                        let counter = if answered { &ok } else { &failed };
                        counter.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        Clients {
            stop,
            ok,
            failed,
            threads,
        }
    }

    fn ok(&self) -> u64 {
        self.ok.load(Ordering::Relaxed)
    }

    fn finish(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        (
            self.ok.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

fn status(admin: SocketAddr) -> serde_json::Value {
    serde_json::from_slice(&get(admin, "/status").body).unwrap()
}

fn served(admin: SocketAddr, node: &str) -> Option<u64> {
    let status = status(admin);
    let nodes = status["nodes"].as_array()?;
    nodes.iter().find(|n| n["name"] == node)?["served"].as_u64()
}

#[test]
fn a_switch_drains_an_origin_stopped_with_sigterm_and_no_request_fails() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let rt = runtime();
    // A value that is not a node, put by someone else: the switch logs it and leaves it out.
    let settings = Settings::new(vec![server.endpoint()]);
    let ttl = Duration::from_secs(30);
    let _junk = rt
        .block_on(register(settings, PREFIX, "junk", b"hello".to_vec(), ttl))
        .unwrap();
    let (mut o1, _) = registered_origin(&server, &["--name", "o1", "--deregister-wait", "2s"]);
    let (_o2, _) = registered_origin(&server, &["--name", "o2"]);
    let (listen, admin) = (free_addr(), free_addr());
    let dir = std::env::temp_dir().join(format!("capstan-register-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("switch.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"{listen}\"]\nadmin = \"{admin}\"\n[[discovery]]\netcd = [\"{}\"]\n\
             prefix = \"{PREFIX}\"\n",
            server.endpoint()
        ),
    )
    .unwrap();
    let mut switch = spawn(&["serve", "--config", config.to_str().unwrap()], listen);
    eventually("o1 and o2 in the cluster", || {
        served(admin, "etcd-o1").is_some() && served(admin, "etcd-o2").is_some()
    });
    let clients = Clients::start(listen, 3);
    eventually("requests served by o1", || {
        served(admin, "etcd-o1") > Some(20)
    });
    o1.signal("TERM");
    let exited = o1.wait_exit(Duration::from_secs(30)).expect("o1 exits");
    assert!(exited.success(), "{exited}");
    assert_eq!(served(admin, "etcd-o1"), None, "o1 is out of the cluster");
    let after = clients.ok();
    eventually("requests after o1 left", || clients.ok() > after + 100);
    let (ok, failed) = clients.finish();
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
    switch.signal("TERM");
    switch.wait_exit(Duration::from_secs(30));
    let log = switch.stderr_text();
    assert!(
        log.contains("key `/capstan/nodes/junk`: not a node: expected value"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_resolve_prints_what_an_etcd_prefix_gives_now() {
    let Some(mut server) = EtcdServer::start() else {
        return;
    };
    let rt = runtime();
    let settings = Settings::new(vec![server.endpoint()]);
    let ttl = Duration::from_secs(30);
    let good = NodeValue::new("127.0.0.1:9001").to_json();
    let _good = rt
        .block_on(register(settings.clone(), PREFIX, "a", good, ttl))
        .unwrap();
    let _junk = rt
        .block_on(register(settings, PREFIX, "junk", b"hello".to_vec(), ttl))
        .unwrap();
    let dir = std::env::temp_dir().join(format!("capstan-resolve-etcd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("switch.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"127.0.0.1:0\"]\n[[discovery]]\netcd = [\"{}\"]\nprefix = \"{PREFIX}\"\n\
             timeout = \"1s\"\n",
            server.endpoint()
        ),
    )
    .unwrap();
    let out = run(&["check", "--resolve", config.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let head = format!(
        "resolved  etcd etcd {} {PREFIX}: 1 nodes",
        server.endpoint()
    );
    assert!(text.contains(&head), "{text}");
    assert!(text.contains("etcd-127.0.0.1:9001"), "{text}");
    assert!(
        text.contains("  skipped  key `/capstan/nodes/junk`: not a node"),
        "{text}"
    );
    server.stop();
    let out = run(&["check", "--resolve", config.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(": error: etcd http://127.0.0.1:"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_resolve_with_etcd_down_names_the_endpoint_and_the_refused_connection() {
    // Nobody listens there (a free port, never handed out twice in this process).
    let dead = free_addr();
    let dir = std::env::temp_dir().join(format!("capstan-etcd-down-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("switch.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"127.0.0.1:0\"]\n[[discovery]]\netcd = [\"http://{dead}\"]\n\
             prefix = \"{PREFIX}\"\ntimeout = \"1s\"\n"
        ),
    )
    .unwrap();
    let out = run(&["check", "--resolve", config.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    let line = format!(
        "resolved  etcd etcd http://{dead} {PREFIX}: error: etcd http://{dead}: range {PREFIX}: \
         connection refused"
    );
    assert!(
        text.lines().any(|l| l == line),
        "wanted the line\n{line}\nin\n{text}"
    );
}
