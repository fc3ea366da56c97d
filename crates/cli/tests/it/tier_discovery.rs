//! A tier whose peers are found, not listed (issue 33): three `capstan serve` processes on
//! 127.0.0.2–4 that register themselves in a real etcd (skipped with a note when etcd is not
//! installed) find each other, make one node request per key, and a switch stopped with
//! SIGTERM deletes its key and leaves the ring; the registry stopped keeps the peer set; a bad
//! registry value is skipped and counted. Peers from DNS SRV (dnsmasq, skipped when missing):
//! one cache, a record whose target does not resolve skipped, the DNS server gone keeps the
//! set. Peers from a file: a line removed takes its peer out, a file gone bad keeps the last
//! set. `capstan check` prints the source and places its errors. And what the shared view changes: with
//! `admission = "shared"` two switches never put more than the node's limit on it at once, and
//! with `ejection = "any"` a node ejected at one switch is skipped by the other, and back
//! there once that switch's reports age out (it died).

use crate::support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use capstan_discovery::dns::testing::Dnsmasq;
use capstan_discovery::etcd::{get_prefix, register, Registration, Settings};
use capstan_discovery::testing::EtcdServer;
use serde_json::Value;
use support::*;

/// A node that answers every GET with its path (cachable for a minute; `/slow/…` after
/// 150 ms; everything with a 500 when it `fails`), counts the requests per path and the most
/// it had at once.
struct Node {
    addr: SocketAddr,
    counts: Arc<Mutex<HashMap<String, u64>>>,
    max_concurrent: Arc<AtomicU32>,
}

impl Node {
    fn start(fails: bool) -> Node {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let counts = Arc::new(Mutex::new(HashMap::new()));
        let max_concurrent = Arc::new(AtomicU32::new(0));
        let now = Arc::new(AtomicU32::new(0));
        let (c, m) = (Arc::clone(&counts), Arc::clone(&max_concurrent));
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (c, m, now) = (Arc::clone(&c), Arc::clone(&m), Arc::clone(&now));
                std::thread::spawn(move || serve(stream, &c, &m, &now, fails));
            }
        });
        Node {
            addr,
            counts,
            max_concurrent,
        }
    }

    fn count(&self, path: &str) -> u64 {
        self.counts.lock().unwrap().get(path).copied().unwrap_or(0)
    }

    /// Requests whose path starts with `prefix`.
    fn total(&self, prefix: &str) -> u64 {
        let counts = self.counts.lock().unwrap();
        (counts.iter())
            .filter(|(p, _)| p.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }
}

fn serve(
    mut s: TcpStream,
    counts: &Mutex<HashMap<String, u64>>,
    max: &AtomicU32,
    now: &AtomicU32,
    fails: bool,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match s.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end + 4);
        let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
        *counts.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
        let at_once = now.fetch_add(1, Ordering::SeqCst) + 1;
        max.fetch_max(at_once, Ordering::SeqCst);
        if path.starts_with("/slow/") {
            std::thread::sleep(Duration::from_millis(150));
        }
        now.fetch_sub(1, Ordering::SeqCst);
        let status = match fails {
            true => "500 Internal Server Error",
            false => "200 OK",
        };
        let body = format!("object {path}\n");
        let reply = format!(
            "HTTP/1.1 {status}\r\nCache-Control: max-age=60\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if s.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// A folder removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("capstan-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Switches on 127.0.0.2, .3, … (one port for all), each with an admin listener, started from
/// one configuration file.
struct Switches {
    procs: Vec<Option<Proc>>,
    listen: Vec<SocketAddr>,
    admin: Vec<SocketAddr>,
}

impl Switches {
    fn start(config: &Path, count: u8, port: u16) -> Switches {
        let admin_port = support::free_port_on(&[
            "127.0.0.2",
            "127.0.0.3",
            "127.0.0.4",
            "127.0.0.5",
            "127.0.0.6",
        ]);
        let at =
            |i: u8, p: u16| -> SocketAddr { format!("127.0.0.{}:{p}", i + 2).parse().unwrap() };
        let listen: Vec<SocketAddr> = (0..count).map(|i| at(i, port)).collect();
        let admin: Vec<SocketAddr> = (0..count).map(|i| at(i, admin_port)).collect();
        let procs = (0..usize::from(count))
            .map(|i| {
                let (l, a) = (listen[i].to_string(), admin[i].to_string());
                let args = [
                    "serve",
                    "--config",
                    config.to_str().unwrap(),
                    "--listen",
                    &l,
                    "--admin",
                    &a,
                    "--threads",
                    "1",
                ];
                Some(spawn(&args, listen[i]))
            })
            .collect();
        Switches {
            procs,
            listen,
            admin,
        }
    }

    fn status(&self, i: usize) -> Value {
        let reply = get(self.admin[i], "/status");
        assert_eq!(reply.status, 200);
        serde_json::from_slice(&reply.body).expect("/status is JSON")
    }

    /// Waits until switch `i`'s tier satisfies `check`.
    fn wait_tier(&self, i: usize, what: &str, check: impl Fn(&Value) -> bool) {
        eventually(what, || check(&self.status(i)["tier"]));
    }

    /// Waits until switch `i` has exactly the switches `want` (indices) as peers, every one up.
    fn wait_peers(&self, i: usize, want: &[usize]) {
        let mut addresses: Vec<String> = want.iter().map(|&s| self.listen[s].to_string()).collect();
        addresses.sort();
        self.wait_tier(i, &format!("switch {i} with peers {addresses:?}"), |t| {
            let peers = t["peers"].as_array().unwrap();
            let have: Vec<&str> = peers
                .iter()
                .map(|p| p["address"].as_str().unwrap())
                .collect();
            have == addresses && peers.iter().all(|p| p["state"] != "down")
        });
    }

    /// The switch that owns `path` (as the one asked says), by index.
    fn owner_of(&self, path: &str) -> usize {
        let reply = http(self.listen[0], "GET", path);
        assert_eq!(reply.status, 200, "{path}");
        match reply.header("x-capstan-tier-owner") {
            Some(owner) => (self.listen.iter())
                .position(|a| a.to_string() == owner)
                .expect("the owner is a switch"),
            None => 0,
        }
    }
}

/// The common part of every switch's configuration.
fn config(node: SocketAddr, listen: SocketAddr, tier: &str) -> String {
    format!(
        "listen = [\"{listen}\"]\ndebug_headers = true\n[[node]]\naddress = \"{node}\"\n\
         [cache]\n[tier]\nhealth_interval = \"100ms\"\nhealth_timeout = \"300ms\"\n\
         local_copy_after = 0\n{tier}"
    )
}

fn put(rt: &tokio::runtime::Runtime, server: &EtcdServer, key: &str, value: &str) -> Registration {
    rt.block_on(register(
        Settings::new(vec![server.endpoint()]),
        "/capstan/tier/",
        key,
        value.as_bytes().to_vec(),
        Duration::from_secs(30),
    ))
    .expect("etcd takes the key")
}

#[test]
fn switches_registered_in_etcd_find_each_other_and_leave_the_ring() {
    let Some(mut server) = EtcdServer::start() else {
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    // Two bad registry values: not JSON, and port 0.
    let _bad = [
        put(&rt, &server, "garbage", "hello"),
        put(&rt, &server, "port-zero", r#"{"address":"127.0.0.9:0"}"#),
    ];
    let node = Node::start(false);
    let dir = TempDir::new("tier-etcd");
    let port = support::free_port_on(&[
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
        "127.0.0.5",
        "127.0.0.6",
    ]);
    let file = dir.0.join("tier.toml");
    let first: SocketAddr = format!("127.0.0.2:{port}").parse().unwrap();
    let tier = format!(
        "discovery = {{ etcd = [\"{}\"], prefix = \"/capstan/tier/\", timeout = \"1s\" }}\n\
         register = true\nregister_ttl = \"10s\"\n",
        server.endpoint()
    );
    std::fs::write(&file, config(node.addr, first, &tier)).unwrap();
    let mut switches = Switches::start(&file, 3, port);
    for i in 0..3 {
        switches.wait_peers(i, &[0, 1, 2]);
    }
    let tier = &switches.status(0)["tier"];
    let discovery = &tier["discovery"];
    assert_eq!(discovery["state"], "ok", "{discovery}");
    assert!(
        tier["peers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["source"] == "etcd"),
        "{tier}"
    );
    let skipped = discovery["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{discovery}");
    assert!(
        skipped
            .iter()
            .any(|s| s.as_str().unwrap().contains("port 0")),
        "{discovery}"
    );
    assert_eq!(discovery["skipped_total"], 2);
    assert_eq!(
        discovery["registration"]["key"],
        format!("/capstan/tier/{first}"),
        "{discovery}"
    );

    // One node request per key across the tier.
    let keys: Vec<String> = (0..6).map(|k| format!("/object/{k}")).collect();
    for key in &keys {
        for &at in &switches.listen {
            assert_eq!(http(at, "GET", key).status, 200);
        }
        assert_eq!(node.count(key), 1, "{key} filled once by the tier");
    }

    // The third switch stops cleanly: its key goes, the others take it out of the ring, and
    // a key it owned is served by another (filled again once).
    let key = (0..100)
        .map(|k| format!("/moved/{k}"))
        .find(|k| switches.owner_of(k) == 2)
        .expect("some key is the third switch's");
    let mut third = switches.procs[2].take().unwrap();
    third.signal("TERM");
    assert!(
        third.wait_exit(Duration::from_secs(10)).is_some(),
        "stopped"
    );
    // Deleted on the way out, not left to its 10 s lease.
    let keys = registered(&rt, &server);
    let key_of = |i: usize| format!("/capstan/tier/{}", switches.listen[i]);
    assert!(!keys.contains(&key_of(2)), "{keys:?}");
    assert!(keys.contains(&key_of(0)), "{keys:?}");
    for i in 0..2 {
        switches.wait_peers(i, &[0, 1]);
    }
    for &at in &switches.listen[..2] {
        let reply = http(at, "GET", &key);
        assert_eq!(reply.status, 200);
        assert_ne!(
            reply.header("x-capstan-tier-owner"),
            Some(switches.listen[2].to_string())
        );
    }
    assert_eq!(node.count(&key), 2, "the new owner filled it once");

    // etcd stops: the peer set stays, /status says why.
    server.stop();
    switches.wait_tier(0, "the source in error", |t| {
        t["discovery"]["state"] == "error"
    });
    switches.wait_peers(0, &[0, 1]);
    let fresh = "/while-etcd-is-down";
    for &at in &switches.listen[..2] {
        assert_eq!(http(at, "GET", fresh).status, 200);
    }
    assert_eq!(node.count(fresh), 1, "still one cache without the registry");

    // etcd back: the source is good again and both switches are still registered.
    server.restart().expect("etcd restarts");
    for i in 0..2 {
        switches.wait_tier(i, "the source good again", |t| {
            t["discovery"]["state"] == "ok"
        });
        switches.wait_peers(i, &[0, 1]);
    }
    let keys = registered(&rt, &server);
    assert!(
        keys.contains(&key_of(0)) && keys.contains(&key_of(1)),
        "{keys:?}"
    );
}

/// The keys under the tier's prefix now.
fn registered(rt: &tokio::runtime::Runtime, server: &EtcdServer) -> Vec<String> {
    let settings = Settings::new(vec![server.endpoint()]);
    let snapshot = rt
        .block_on(get_prefix(&settings, "/capstan/tier/"))
        .expect("etcd answers");
    snapshot.entries.keys().cloned().collect()
}

#[test]
fn peers_from_a_file_follow_its_lines_and_a_bad_file_keeps_the_last_set() {
    let node = Node::start(false);
    let dir = TempDir::new("tier-file");
    let port = support::free_port_on(&[
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
        "127.0.0.5",
        "127.0.0.6",
    ]);
    let peers_file = dir.0.join("peers.json");
    let at = |i: u8| format!("127.0.0.{}:{port}", i + 2);
    let list = |peers: &[u8]| {
        let entries: Vec<String> = peers
            .iter()
            .map(|&i| format!("{{\"address\":\"{}\"}}", at(i)))
            .collect();
        format!("{{\"nodes\":[{}]}}", entries.join(","))
    };
    std::fs::write(&peers_file, list(&[0, 1, 2])).unwrap();
    let file = dir.0.join("tier.toml");
    // The first switch is also listed statically: it comes from both.
    let tier = format!(
        "peers = [\"{}\"]\ndiscovery = {{ file = \"peers.json\", interval = \"100ms\", hold = \"200ms\" }}\n",
        at(0)
    );
    std::fs::write(&file, config(node.addr, at(0).parse().unwrap(), &tier)).unwrap();
    let switches = Switches::start(&file, 3, port);
    for i in 0..3 {
        switches.wait_peers(i, &[0, 1, 2]);
    }
    let sources: Vec<Value> = (switches.status(1)["tier"]["peers"]
        .as_array()
        .unwrap()
        .iter())
    .map(|p| p["source"].clone())
    .collect();
    assert_eq!(sources, ["static+file", "file", "file"]);
    for k in 0..4 {
        let key = format!("/f/{k}");
        for &a in &switches.listen {
            assert_eq!(http(a, "GET", &key).status, 200);
        }
        assert_eq!(node.count(&key), 1, "{key}");
    }
    // The third switch's line removed: it leaves every switch's ring, itself excepted (a
    // switch always has itself).
    std::fs::write(&peers_file, list(&[0, 1])).unwrap();
    switches.wait_peers(0, &[0, 1]);
    switches.wait_peers(1, &[0, 1]);
    switches.wait_peers(2, &[0, 1, 2]);
    // A file gone bad is an error; the last good set stays.
    std::fs::write(&peers_file, "{\"nodes\":[{\"address\":\"nowhere\"}]}").unwrap();
    switches.wait_tier(0, "the bad file seen", |t| {
        t["discovery"]["state"] == "error"
            && t["discovery"]["last_error"]
                .as_str()
                .unwrap()
                .contains("nowhere")
    });
    switches.wait_peers(0, &[0, 1]);
}

#[test]
fn the_shared_view_shares_a_nodes_limit_and_its_ejections() {
    let node = Node::start(false);
    let failing = Node::start(true);
    let dir = TempDir::new("tier-share");
    let port = support::free_port_on(&[
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
        "127.0.0.5",
        "127.0.0.6",
    ]);
    let at = |i: u8| format!("127.0.0.{}:{port}", i + 2);
    let file = dir.0.join("tier.toml");
    std::fs::write(
        &file,
        format!(
            "listen = [\"{}\"]\n[[node]]\nname = \"good\"\naddress = \"{}\"\n\
             [[node]]\nname = \"bad\"\naddress = \"{}\"\n\
             [admission]\nlimit = 4\nqueue = 100\nqueue_timeout = \"20s\"\n\
             [outlier]\nconsecutive_failures = 2\nbase_ejection = \"60s\"\n\
             [tier]\npeers = [\"{}\", \"{}\"]\nhealth_interval = \"100ms\"\n\
             gossip_period = \"50ms\"\nadmission = \"shared\"\nejection = \"any\"\n",
            at(0),
            node.addr,
            failing.addr,
            at(0),
            at(1)
        ),
    )
    .unwrap();
    let switches = Switches::start(&file, 2, port);
    switches.wait_peers(0, &[0, 1]);
    switches.wait_peers(1, &[0, 1]);
    let nodes = |i: usize| switches.status(i)["nodes"].as_array().unwrap().clone();
    for i in 0..2 {
        let limit = nodes(i)[0]["admission"]["limit"].clone();
        assert_eq!(limit, 2, "each switch takes half of 4");
    }

    // `bad` fails at the first switch until ejected there.
    eventually("bad ejected at the first switch", || {
        http(switches.listen[0], "GET", "/x");
        nodes(0)[1]["state"] == "ejected"
    });
    // The second switch has it out too, by the gossip alone, and sends it nothing.
    switches.wait_tier(1, "bad out by the tier", |t| {
        t["gossip"]["nodes"][1]["tier_ejected"] == true && t["gossip"]["tier_ejections"] == 1
    });
    assert_eq!(nodes(1)[1]["state"], "tier-ejected");
    for _ in 0..10 {
        assert_eq!(http(switches.listen[1], "GET", "/y").status, 200);
    }
    assert_eq!(failing.count("/y"), 0, "nothing sent to bad");
    assert_eq!(node.count("/y"), 10, "good served them");

    // Load from both switches on `good` (limit 4 shared): never more than 4 at once there.
    let threads: Vec<_> = (0..12)
        .map(|t| {
            let to = switches.listen[t % 2];
            std::thread::spawn(move || {
                for r in 0..3 {
                    let reply = http(to, "GET", &format!("/slow/{t}-{r}"));
                    assert_eq!(reply.status, 200);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(node.total("/slow/"), 36);
    let max = node.max_concurrent.load(Ordering::SeqCst);
    assert!(
        max <= 4,
        "good had {max} requests at once from the tier, more than its limit 4"
    );

    // The first switch gone, its reports age out: `bad` is back at the second.
    switches.procs[0].as_ref().unwrap().signal("KILL");
    switches.wait_tier(
        1,
        "bad back once the first switch's reports aged out",
        |t| t["gossip"]["nodes"][1]["tier_ejected"] == false,
    );
    assert_eq!(nodes(1)[1]["state"], "up");
}

#[test]
fn check_prints_the_source_of_peers_and_places_its_errors() {
    let dir = TempDir::new("tier-check");
    let write = |name: &str, tier: &str| {
        let path = dir.0.join(name);
        std::fs::write(
            &path,
            format!(
                "listen = [\"127.0.0.2:8080\"]\n[[node]]\naddress = \"127.0.0.1:9001\"\n\
                 [admission]\nlimit = 8\n[tier]\n{tier}"
            ),
        )
        .unwrap();
        path.to_str().unwrap().to_string()
    };
    let good = write(
        "good.toml",
        "discovery = { etcd = [\"http://127.0.0.1:2379\"], prefix = \"/capstan/tier/\" }\n\
         register = true\nadmission = \"shared\"\nejection = \"majority\"\n",
    );
    let out = run(&["check", &good]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for line in [
        "tier      peers from etcd http://127.0.0.1:2379 /capstan/tier/, this switch registered under a 10s lease",
        "admission limits shared: each switch takes limit / live peers",
        "a node most of the reporting switches have out is out here too",
    ] {
        assert!(text.contains(line), "{line:?} not in:\n{text}");
    }
    // A bad prefix is placed at its value; `register` without etcd is named.
    let bad = write(
        "bad.toml",
        "discovery = { etcd = [\"http://127.0.0.1:2379\"], prefix = \"capstan/tier\" }\n",
    );
    let out = run(&["check", &bad]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bad.toml:7:58: tier.discovery: etcd prefix `capstan/tier` must start with /"),
        "{err}"
    );
    // Shared admission with an adaptive limit shares nothing: said so.
    let adaptive = dir.0.join("adaptive.toml");
    std::fs::write(
        &adaptive,
        std::fs::read_to_string(&good)
            .unwrap()
            .replace("limit = 8", "limit = \"adaptive\""),
    )
    .unwrap();
    let out = run(&["check", adaptive.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("warning   tier.admission = \"shared\" shares a fixed [admission] limit"),
        "{text}"
    );
    let file = write(
        "file.toml",
        "discovery = { file = \"peers.json\" }\nregister = true\n",
    );
    let err = String::from_utf8_lossy(&run(&["check", &file]).stderr).into_owned();
    assert!(
        err.contains("tier.register puts this switch in etcd"),
        "{err}"
    );
}

#[test]
fn switches_found_by_dns_srv_share_one_cache_and_skip_a_bad_record() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let port = support::free_port_on(&[
        "127.0.0.2",
        "127.0.0.3",
        "127.0.0.4",
        "127.0.0.5",
        "127.0.0.6",
    ]);
    // Two switches, and a record whose target does not resolve.
    let records = format!(
        "srv-host=_capstan._tcp.tier.test,s2.tier.test,{port},0,1\n\
         srv-host=_capstan._tcp.tier.test,s3.tier.test,{port},0,1\n\
         srv-host=_capstan._tcp.tier.test,gone.tier.test,{port},0,1\n\
         host-record=s2.tier.test,127.0.0.2\nhost-record=s3.tier.test,127.0.0.3\n"
    );
    let Some(mut dns) = rt.block_on(Dnsmasq::start(&records, 1)) else {
        return;
    };
    let node = Node::start(false);
    let dir = TempDir::new("tier-dns");
    let file = dir.0.join("tier.toml");
    let tier = format!(
        "discovery = {{ dns = \"_capstan._tcp.tier.test\", resolvers = [\"{}\"], \
         min_ttl = \"100ms\", timeout = \"200ms\", attempts = 1 }}\n",
        dns.addr()
    );
    let first = format!("127.0.0.2:{port}").parse().unwrap();
    std::fs::write(&file, config(node.addr, first, &tier)).unwrap();
    let switches = Switches::start(&file, 2, port);
    for i in 0..2 {
        switches.wait_peers(i, &[0, 1]);
    }
    let discovery = &switches.status(1)["tier"]["discovery"];
    assert_eq!(discovery["kind"], "dns");
    assert!(
        discovery["skipped"].to_string().contains("gone.tier.test"),
        "{discovery}"
    );
    for k in 0..4 {
        let key = format!("/d/{k}");
        for &a in &switches.listen {
            assert_eq!(http(a, "GET", &key).status, 200);
        }
        assert_eq!(node.count(&key), 1, "{key}");
    }
    // The DNS server gone: the peers stay.
    dns.stop();
    switches.wait_tier(0, "the lookups failing", |t| {
        t["discovery"]["state"] == "error"
    });
    switches.wait_peers(0, &[0, 1]);
}
