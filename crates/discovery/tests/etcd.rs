//! The etcd client against a real etcd on loopback (skipped with a note when etcd is not
//! installed): a watched prefix follows puts, deletes, lease expiry, a restart of etcd and a
//! compaction without missing or doubling an event; a registration lives while it is kept and
//! goes on shutdown, on drop (at lease expiry) and comes back after its lease is revoked.

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
