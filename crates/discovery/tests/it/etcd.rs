//! The etcd client against a real etcd on loopback (skipped with a note when etcd is not
//! installed): a watched prefix follows puts, deletes, lease expiry, a restart of etcd and a
//! compaction without missing or doubling an event; a registration lives while it is kept and
//! goes on shutdown, on drop (at lease expiry) and comes back after its lease is revoked.
//!
//! And against a fake gateway on loopback (always run): malformed answers, an error answer, a
//! member that does not answer, a dead endpoint before a live one, a watch stream gone silent
//! and a member that hangs while its watch stream stays open are each a one-line error naming
//! the endpoint, never a panic; the watch recovers after each.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use capstan_discovery::etcd::{self, register, watch_prefix, PrefixWatch, Settings, Snapshot};
use capstan_discovery::testing::{EtcdKv, EtcdServer};

const PREFIX: &str = "/capstan/test/";

fn settings(server: &EtcdServer) -> Settings {
    let mut s = Settings::new(vec![server.endpoint()]);
    s.connect_timeout = Duration::from_secs(2);
    s.request_timeout = Duration::from_secs(2);
    s
}

fn entries(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| (format!("{PREFIX}{k}"), v.as_bytes().to_vec()))
        .collect()
}

/// What a watch hands out, checked as it comes: every snapshot must be exactly what etcd
/// held under the prefix at the snapshot's revision (a missed or doubled event would show),
/// and revisions never go back.
struct Checked {
    watch: PrefixWatch,
    check: EtcdKv,
    last_revision: i64,
    errors: usize,
}

impl Checked {
    async fn new(server: &EtcdServer, settings: Settings) -> Checked {
        Checked {
            watch: watch_prefix(settings, PREFIX),
            check: server.kv(),
            last_revision: 0,
            errors: 0,
        }
    }

    /// Reads snapshots (and counts errors) until one has `want`; fails after 30 s.
    async fn until(&mut self, want: &BTreeMap<String, Vec<u8>>) -> Snapshot {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let next = tokio::time::timeout(left, self.watch.next()).await;
            let Ok(Some(next)) = next else {
                panic!("no snapshot with {want:?} within 30 s");
            };
            match next {
                Ok(snapshot) => {
                    self.verify(&snapshot).await;
                    if &snapshot.entries == want {
                        return snapshot;
                    }
                }
                Err(e) => {
                    assert!(e.to_string().starts_with("etcd http://"), "{e}");
                    self.errors += 1;
                }
            }
        }
    }

    async fn verify(&mut self, snapshot: &Snapshot) {
        assert!(
            snapshot.revision >= self.last_revision,
            "revision went back"
        );
        self.last_revision = snapshot.revision;
        match self.check.get_prefix(PREFIX, snapshot.revision) {
            Ok(truth) => {
                assert_eq!(
                    snapshot.entries, truth,
                    "snapshot at revision {}",
                    snapshot.revision
                );
            }
            // Compacted since (the compaction test), or etcd down this moment: nothing to
            // compare with.
            Err(e) => eprintln!("(not verified at {}: {e})", snapshot.revision),
        }
    }
}

#[tokio::test]
async fn puts_deletes_and_lease_expiry_show_up() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let kv = server.kv();
    kv.put(format!("{PREFIX}a"), "1").unwrap();
    kv.put("/capstan/other/x", "not watched").unwrap();
    let mut watch = Checked::new(&server, settings(&server)).await;
    watch.until(&entries(&[("a", "1")])).await;
    kv.put(format!("{PREFIX}b"), "2").unwrap();
    watch.until(&entries(&[("a", "1"), ("b", "2")])).await;
    kv.put(format!("{PREFIX}a"), "3").unwrap();
    kv.delete(format!("{PREFIX}b")).unwrap();
    watch.until(&entries(&[("a", "3")])).await;
    let lease = kv.lease_grant(2).unwrap();
    kv.put_leased(format!("{PREFIX}c"), "4", lease).unwrap();
    watch.until(&entries(&[("a", "3"), ("c", "4")])).await;
    // Nobody keeps the lease alive: etcd deletes the key.
    watch.until(&entries(&[("a", "3")])).await;
    assert_eq!(watch.errors, 0);
}

#[tokio::test]
async fn a_restart_of_etcd_is_resumed_from_the_revision_seen() {
    let Some(mut server) = EtcdServer::start() else {
        return;
    };
    let kv = server.kv();
    kv.put(format!("{PREFIX}a"), "1").unwrap();
    let mut s = settings(&server);
    // Long enough for the changes below to land while the watch waits to reconnect.
    s.min_backoff = Duration::from_secs(2);
    let mut watch = Checked::new(&server, s).await;
    let before = watch.until(&entries(&[("a", "1")])).await;
    server.restart().unwrap();
    kv.put(format!("{PREFIX}b"), "2").unwrap();
    kv.put(format!("{PREFIX}b"), "3").unwrap();
    kv.delete(format!("{PREFIX}a")).unwrap();
    let after = watch.until(&entries(&[("b", "3")])).await;
    assert!(after.revision > before.revision);
    assert!(watch.errors > 0, "the outage was not reported");
    // And it still follows.
    kv.put(format!("{PREFIX}c"), "4").unwrap();
    watch.until(&entries(&[("b", "3"), ("c", "4")])).await;
}

#[tokio::test]
async fn history_compacted_during_an_outage_falls_back_to_a_get() {
    let Some(mut server) = EtcdServer::start() else {
        return;
    };
    let kv = server.kv();
    kv.put(format!("{PREFIX}a"), "1").unwrap();
    let mut s = settings(&server);
    s.min_backoff = Duration::from_secs(3);
    let mut watch = Checked::new(&server, s).await;
    watch.until(&entries(&[("a", "1")])).await;
    server.restart().unwrap();
    kv.delete(format!("{PREFIX}a")).unwrap();
    let revision = kv.put(format!("{PREFIX}b"), "2").unwrap();
    kv.compact(revision).unwrap();
    watch.until(&entries(&[("b", "2")])).await;
    kv.put(format!("{PREFIX}c"), "3").unwrap();
    watch.until(&entries(&[("b", "2"), ("c", "3")])).await;
}

fn value_of(kv: &EtcdKv, key: &str) -> Option<Vec<u8>> {
    kv.get(key).unwrap()
}

/// Polls until `key` holds `want` (`None`: is absent); fails after 30 s.
async fn wait_for(kv: &EtcdKv, key: &str, want: Option<&[u8]>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while value_of(kv, key).as_deref() != want {
        assert!(
            Instant::now() < deadline,
            "{key} is not {want:?} after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_registration_lives_until_shutdown_and_survives_a_revoked_lease() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let value = etcd::NodeValue::new("127.0.0.1:8080").to_json();
    let registration = register(
        settings(&server),
        PREFIX,
        "n1",
        value.clone(),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let key = format!("{PREFIX}n1");
    assert_eq!(registration.key(), key);
    let kv = server.kv();
    assert_eq!(value_of(&kv, &key), Some(value.clone()));
    // Kept alive: still there after several TTLs (the key's lease is the one we hold). A
    // property over a span of time: the key is looked at every 200 ms for 5 s (2.5 TTLs).
    let mut status = registration.status();
    let first_lease = status.borrow().lease;
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(5) {
        assert_eq!(value_of(&kv, &key), Some(value.clone()));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Someone revokes the lease (the key goes with it): the registration puts it back.
    kv.lease_revoke(first_lease).unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        status.wait_for(|s| s.registrations == 2 && s.lease != first_lease),
    )
    .await
    .expect("registered again within 30 s")
    .unwrap();
    wait_for(&kv, &key, Some(&value)).await;
    registration.shutdown().await.unwrap();
    assert_eq!(value_of(&kv, &key), None, "shutdown deletes at once");
}

#[tokio::test]
async fn a_dropped_registration_goes_at_lease_expiry() {
    let Some(server) = EtcdServer::start() else {
        return;
    };
    let registration = register(
        settings(&server),
        "/capstan/test",
        "n2",
        b"x".to_vec(),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let key = format!("{PREFIX}n2");
    let kv = server.kv();
    assert_eq!(value_of(&kv, &key), Some(b"x".to_vec()));
    let lease = registration.status().borrow().lease;
    drop(registration);
    // Still there just after the drop (not deleted), gone once the lease has expired.
    let left = kv.lease_ttl(lease).unwrap();
    assert!(left > 0, "the lease outlives the handle until its TTL");
    wait_for(&kv, &key, None).await;
}

#[tokio::test]
async fn a_registration_survives_an_etcd_restart() {
    let Some(mut server) = EtcdServer::start() else {
        return;
    };
    let registration = register(
        settings(&server),
        PREFIX,
        "n3",
        b"y".to_vec(),
        Duration::from_secs(2),
    )
    .await
    .unwrap();
    let key = format!("{PREFIX}n3");
    let kv = server.kv();
    server.stop();
    // Down longer than the TTL: the lease may or may not survive (etcd extends leases on
    // start); either way the key must be back, and held. The sleep is the outage's length
    // (what the test does to etcd), not a wait for something to happen.
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.restart().unwrap();
    wait_for(&kv, &key, Some(b"y")).await;
    let mut status = registration.status();
    tokio::time::timeout(
        Duration::from_secs(30),
        status.wait_for(|s| s.error.is_none()),
    )
    .await
    .expect("renewing again within 30 s")
    .unwrap();
    let since = Instant::now();
    while since.elapsed() < Duration::from_secs(5) {
        assert_eq!(value_of(&kv, &key).as_deref(), Some(&b"y"[..]));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    registration.shutdown().await.unwrap();
    assert_eq!(value_of(&kv, &key), None);
}

#[tokio::test]
async fn an_unreachable_etcd_is_an_error_at_registration() {
    let settings = Settings {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
        ..Settings::new(vec!["http://127.0.0.1:1".into()])
    };
    let e = register(settings, PREFIX, "n", b"z".to_vec(), Duration::from_secs(2))
        .await
        .err()
        .expect("no etcd there");
    assert_eq!(
        e.to_string(),
        "etcd http://127.0.0.1:1: grant a lease of 2s: connection refused"
    );
    let bad = Settings::new(vec!["127.0.0.1:2379".into()]);
    let e = register(bad, PREFIX, "n", b"z".to_vec(), Duration::from_secs(2))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, etcd::Error::Invalid(_)), "{e}");
}

/// What the fake gateway answers to one request.
#[derive(Clone)]
enum Reply {
    /// A status and a body, then the connection closes.
    Whole(u16, String),
    /// 200 and these lines of a stream, then silence with the connection open.
    Stream(Vec<String>),
    /// Nothing at all, the connection open.
    Hang,
}

/// A fake etcd gateway on a loopback port from the kernel: each connection carries one
/// request, answered by `reply(path, n)` (`n`: how many requests to that path came before).
async fn fake_gateway(
    reply: impl Fn(&str, usize) -> Reply + Send + Sync + 'static,
) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let reply = std::sync::Arc::new(reply);
    let counts = std::sync::Arc::new(std::sync::Mutex::new(BTreeMap::<String, usize>::new()));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (reply, counts) = (reply.clone(), counts.clone());
            tokio::spawn(async move {
                let Some(path) = read_request(&mut socket).await else {
                    return;
                };
                let n = {
                    let mut counts = counts.lock().unwrap();
                    let count = counts.entry(path.clone()).or_default();
                    *count += 1;
                    *count - 1
                };
                answer(&mut socket, reply(&path, n)).await;
            });
        }
    });
    addr
}

/// Reads one request, head and body (Content-Length); its path.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = socket.read(&mut buf).await.ok().filter(|n| *n > 0)?;
        request.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&request).to_string();
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        let length = (head.lines())
            .filter_map(|l| l.split_once(':'))
            .find(|(name, _)| name.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if body.len() >= length {
            return head.split(' ').nth(1).map(str::to_string);
        }
    }
}

/// Writes the reply; a stream or a hang then holds the connection open until the test ends.
async fn answer(socket: &mut tokio::net::TcpStream, reply: Reply) {
    use tokio::io::AsyncWriteExt;
    let text = match reply {
        Reply::Whole(status, body) => format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
        Reply::Stream(lines) => {
            let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n";
            lines.iter().fold(head.to_string(), |all, l| all + l + "\n")
        }
        Reply::Hang => String::new(),
    };
    let _ = socket.write_all(text.as_bytes()).await;
    if !text.contains("Connection: close") {
        std::future::pending::<()>().await;
    }
}

fn short(endpoints: Vec<String>) -> Settings {
    Settings {
        connect_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
        min_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        ..Settings::new(endpoints)
    }
}

/// A loopback address nobody listens on (the kernel's free port, released).
fn dead_endpoint() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", listener.local_addr().unwrap())
}

const RANGE: &str = r#"{"header":{"revision":"3"},"kvs":[{"key":"L2NhcHN0YW4vdGVzdC9h","mod_revision":"2","value":"MQ=="}]}"#;

#[tokio::test]
async fn malformed_and_error_answers_are_one_line_errors_naming_the_endpoint() {
    let cases = [
        (
            Reply::Whole(200, r#"{"header":{"revision":"3"},"kvs":[{"key":"!!"}]}"#.into()),
            "malformed answer: kvs[0]: key is not base64 (",
        ),
        (Reply::Whole(200, "<html>hello</html>".into()), "malformed answer: not JSON ("),
        (Reply::Whole(200, r#"{"header":{"revision":"3"},"kvs":[{"key""#.into()), "malformed answer: it ends within a JSON value"),
        (Reply::Whole(200, r#"{"kvs":[]}"#.into()), "malformed answer: no header"),
        (Reply::Whole(200, String::new()), "malformed answer: an empty answer"),
        (
            Reply::Whole(401, r#"{"error":"etcdserver: user name is empty","message":"etcdserver: user name is empty","code":16}"#.into()),
            "etcd answered 401: etcdserver: user name is empty",
        ),
        (Reply::Whole(404, "404 page not found\n".into()), "etcd answered 404: 404 page not found"),
        (Reply::Hang, "no answer within 500ms"),
    ];
    for (reply, want) in cases {
        let addr = fake_gateway(move |_, _| reply.clone()).await;
        let e = etcd::get_prefix(&short(vec![format!("http://{addr}")]), PREFIX)
            .await
            .unwrap_err();
        let head = format!("etcd http://{addr}: range {PREFIX}: {want}");
        assert!(e.to_string().starts_with(&head), "{e}\nwanted: {head}…");
        assert!(!e.to_string().contains('\n'), "{e}");
    }
}

#[tokio::test]
async fn a_dead_endpoint_is_passed_over_and_every_failure_is_named() {
    let addr = fake_gateway(|_, _| Reply::Whole(200, RANGE.into())).await;
    let (dead, live) = (dead_endpoint(), format!("http://{addr}"));
    let got = etcd::get_prefix(&short(vec![dead.clone(), live]), PREFIX)
        .await
        .unwrap();
    assert_eq!((got.revision, got.entries), (3, entries(&[("a", "1")])));
    let other = dead_endpoint();
    let e = etcd::get_prefix(&short(vec![dead.clone(), other.clone()]), PREFIX)
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("etcd {dead}: range {PREFIX}: connection refused; {other}: connection refused")
    );
}

/// Reads the watch until an error containing `want`, then until the next snapshot (it
/// recovered); fails after 30 s.
async fn error_then_recovery(watch: &mut PrefixWatch, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut error = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let next = tokio::time::timeout(left, watch.next()).await;
        match (next, &error) {
            (Ok(Some(Err(e))), None) if e.to_string().contains(want) => error = Some(e.to_string()),
            (Ok(Some(Ok(_))), Some(e)) => return e.clone(),
            (Ok(Some(_)), _) => {}
            (other, _) => panic!("no error with `{want}` and recovery within 30 s: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_silent_watch_stream_is_taken_for_dead_and_opened_again() {
    let created = r#"{"result":{"header":{"revision":"3"},"created":true}}"#;
    let addr = fake_gateway(move |path, _| match path {
        "/v3/watch" => Reply::Stream(vec![created.into()]),
        _ => Reply::Whole(200, RANGE.into()),
    })
    .await;
    let settings = Settings {
        watch_silence: Duration::from_millis(1500),
        ..short(vec![format!("http://{addr}")])
    };
    let mut watch = watch_prefix(settings, PREFIX);
    let e = error_then_recovery(&mut watch, "no watch response within 1.5s").await;
    assert!(
        e.starts_with(&format!(
            "etcd http://{addr}: watch {PREFIX} from revision 4: "
        )),
        "{e}"
    );
}

#[tokio::test]
async fn a_member_that_stops_answering_ends_its_watch_stream() {
    let created = r#"{"result":{"header":{"revision":"3"},"created":true}}"#;
    let addr = fake_gateway(move |path, n| match (path, n) {
        ("/v3/watch", _) => Reply::Stream(vec![created.into()]),
        // The first range and the check before the second watch are answered; the check
        // while the first watch runs is not.
        (_, 1) => Reply::Hang,
        _ => Reply::Whole(200, RANGE.into()),
    })
    .await;
    let mut watch = watch_prefix(short(vec![format!("http://{addr}")]), PREFIX);
    let e = error_then_recovery(&mut watch, "no answer within 500ms").await;
    assert_eq!(
        e,
        format!(
            "etcd http://{addr}: watch {PREFIX} (checking that the member answers): no answer \
             within 500ms"
        )
    );
}
