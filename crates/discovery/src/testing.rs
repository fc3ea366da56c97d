//! For tests (this crate's, the switch's, the CLI's): a real etcd server on free loopback
//! ports with its own data folder, which can be stopped and started again on the same ports
//! and data (a restart), and is killed and removed when dropped; and [`EtcdKv`], the tests'
//! own blocking client of its JSON gateway (plain HTTP/1.0 over a `TcpStream`, so what a test
//! checks with does not share code with the client it tests).
//!
//! [`EtcdServer::start`] gives `None`, after printing a note, when the `etcd` binary is not
//! installed or does not come up: the test then returns early (skipped, said so), as the
//! project's rules ask for tests of optional real servers.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

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

    /// A client of this server's JSON gateway for the test's own puts and reads (it stays
    /// valid across restarts: same port).
    pub fn kv(&self) -> EtcdKv {
        EtcdKv {
            client: self.client,
        }
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

/// A blocking client of etcd's JSON gateway, for tests (see the module doc). Every call
/// returns what went wrong as text; tests unwrap.
#[derive(Clone, Copy, Debug)]
pub struct EtcdKv {
    client: SocketAddr,
}

impl EtcdKv {
    /// Puts `key` = `value`; the store's revision after the put.
    pub fn put(&self, key: impl AsRef<str>, value: impl AsRef<[u8]>) -> Result<i64, String> {
        self.put_leased(key, value, 0)
    }

    /// Puts `key` = `value` bound to `lease`; the store's revision after the put.
    pub fn put_leased(
        &self,
        key: impl AsRef<str>,
        value: impl AsRef<[u8]>,
        lease: i64,
    ) -> Result<i64, String> {
        let body =
            json!({"key": b64(key.as_ref()), "value": b64(value), "lease": lease.to_string()});
        int(&self.post("/v3/kv/put", body)?["header"]["revision"])
    }

    /// Deletes `key`.
    pub fn delete(&self, key: impl AsRef<str>) -> Result<(), String> {
        self.post("/v3/kv/deleterange", json!({ "key": b64(key.as_ref()) }))
            .map(drop)
    }

    /// The value of `key` now, if it has one.
    pub fn get(&self, key: impl AsRef<str>) -> Result<Option<Vec<u8>>, String> {
        let answer = self.post("/v3/kv/range", json!({ "key": b64(key.as_ref()) }))?;
        let kvs = kvs(&answer)?;
        Ok(kvs.into_values().next())
    }

    /// Every key under `prefix` and its value, at `revision` (0: now).
    pub fn get_prefix(
        &self,
        prefix: &str,
        revision: i64,
    ) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let mut end = prefix.as_bytes().to_vec();
        match end.last_mut() {
            Some(last) if *last < 0xff => *last += 1,
            _ => return Err(format!("prefix `{prefix}`: give one ending below 0xff")),
        }
        let body = json!({"key": b64(prefix), "range_end": b64(end),
            "revision": revision.to_string()});
        kvs(&self.post("/v3/kv/range", body)?)
    }

    /// Grants a lease of `ttl_s` seconds; its id.
    pub fn lease_grant(&self, ttl_s: i64) -> Result<i64, String> {
        int(&self.post("/v3/lease/grant", json!({ "TTL": ttl_s.to_string() }))?["ID"])
    }

    /// Revokes a lease (its keys go with it).
    pub fn lease_revoke(&self, lease: i64) -> Result<(), String> {
        (self.post("/v3/lease/revoke", json!({ "ID": lease.to_string() }))).map(drop)
    }

    /// The seconds a lease has left (-1: it does not exist).
    pub fn lease_ttl(&self, lease: i64) -> Result<i64, String> {
        int(&self.post("/v3/lease/timetolive", json!({ "ID": lease.to_string() }))?["TTL"])
    }

    /// Compacts the store's history up to `revision`.
    pub fn compact(&self, revision: i64) -> Result<(), String> {
        let body = json!({ "revision": revision.to_string(), "physical": true });
        self.post("/v3/kv/compaction", body).map(drop)
    }

    /// `POST path` with `body` (HTTP/1.0: the server closes when done); the JSON answer, or
    /// the status and body of one that is not 200.
    fn post(&self, path: &str, body: Value) -> Result<Value, String> {
        let at = |e: String| format!("etcd {} {path}: {e}", self.client);
        let mut stream = TcpStream::connect_timeout(&self.client, Duration::from_secs(5))
            .map_err(|e| at(e.to_string()))?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let body = body.to_string();
        let request = format!(
            "POST {path} HTTP/1.0\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            self.client,
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| at(e.to_string()))?;
        let mut answer = String::new();
        stream
            .read_to_string(&mut answer)
            .map_err(|e| at(e.to_string()))?;
        let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
        if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
            return Err(at(format!("{}: {body}", head.lines().next().unwrap_or(""))));
        }
        serde_json::from_str(body).map_err(|e| at(format!("{e}: {body}")))
    }
}

fn b64(bytes: impl AsRef<[u8]>) -> String {
    STANDARD.encode(bytes)
}

/// An int64 of the gateway's (a string; absent: 0).
fn int(value: &Value) -> Result<i64, String> {
    match value {
        Value::Null => Ok(0),
        Value::String(s) => s.parse().map_err(|_| format!("`{s}` is not a number")),
        other => other.as_i64().ok_or(format!("`{other}` is not a number")),
    }
}

/// A range answer's keys and values.
fn kvs(answer: &Value) -> Result<BTreeMap<String, Vec<u8>>, String> {
    let unbase64 = |v: &Value| {
        STANDARD
            .decode(v.as_str().unwrap_or(""))
            .map_err(|e| format!("bad base64 {v}: {e}"))
    };
    let mut out = BTreeMap::new();
    for kv in answer["kvs"].as_array().into_iter().flatten() {
        let key = String::from_utf8_lossy(&unbase64(&kv["key"])?).into_owned();
        out.insert(key, unbase64(&kv["value"])?);
    }
    Ok(out)
}
