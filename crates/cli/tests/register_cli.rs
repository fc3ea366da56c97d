//! `capstan origin --register` and `capstan agent --register` as processes against a real
//! etcd (skipped with a note when etcd is not installed): the node's key appears under the
//! prefix; SIGTERM deletes it while the node still serves, and the node exits after; SIGKILL
//! leaves it to vanish at lease expiry. Bad flags are refused before the node starts.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use capstan_discovery::etcd::{watch_prefix, NodeValue, PrefixWatch, Settings, Snapshot};
use capstan_discovery::testing::EtcdServer;
use support::{accepts, capstan, free_addr, run, spawn, Proc};

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
