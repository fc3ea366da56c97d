//! Self-registration: one key bound to a lease, the lease kept alive from a task.
//!
//! [`register`] grants a lease of `ttl`, puts the key with it and returns once both are done
//! (so a misconfigured endpoint is an error at start, not a silent retry). The task then
//! renews the lease every third of `ttl`. When the connection fails it reconnects (doubling
//! backoff) and checks that the lease still exists and the key still holds the value; a lease
//! that is gone (etcd did not hear from us within `ttl`, or someone revoked it) is replaced by
//! a new one and the key put again.
//!
//! [`Registration::shutdown`] deletes the key and revokes the lease: a clean exit leaves no
//! node behind for a switch to try. Dropping the handle only stops the renewals: the key
//! vanishes when the lease expires, as it does when the process is killed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, PutOptions};
use tokio::sync::watch;

use super::{Backoff, Error, Settings};

/// How a registration stands, for whoever wants to watch it (logs say the same).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The lease the key is bound to now (0: none yet).
    pub lease: i64,
    /// How many times the key was put under a new lease (1 after [`register`]).
    pub registrations: u64,
    /// The last failure, until a renewal or registration succeeds again.
    pub error: Option<String>,
}

/// A registered key. See the module doc for what shutting down and dropping do.
pub struct Registration {
    settings: Settings,
    key: String,
    shared: Arc<Mutex<Shared>>,
    status: watch::Receiver<Status>,
    task: tokio::task::JoinHandle<()>,
}

/// What the keepalive task and `shutdown` both need.
struct Shared {
    client: Option<Client>,
    lease: i64,
}

/// Registers `value` at `prefix` + `name` under a lease of `ttl` (whole seconds, at least 1;
/// etcd may raise a very short one to its minimum). Call within a Tokio runtime.
pub async fn register(
    settings: Settings,
    prefix: &str,
    name: &str,
    value: Vec<u8>,
    ttl: Duration,
) -> Result<Registration, Error> {
    super::check_prefix(prefix).map_err(Error::Invalid)?;
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(Error::Invalid(format!(
            "etcd key name `{name}` is empty or has spaces"
        )));
    }
    let key = match prefix.ends_with('/') {
        true => format!("{prefix}{name}"),
        false => format!("{prefix}/{name}"),
    };
    let ttl_s = i64::try_from(ttl.as_millis().div_ceil(1000).max(1)).unwrap_or(i64::MAX);
    let client = settings.connect().await?;
    let lease = put_new(&settings, &client, &key, &value, ttl_s).await?;
    let status = Status {
        lease,
        registrations: 1,
        error: None,
    };
    let (status_tx, status_rx) = watch::channel(status);
    let shared = Arc::new(Mutex::new(Shared {
        client: Some(client),
        lease,
    }));
    let keeper = Keeper {
        settings: settings.clone(),
        key: key.clone(),
        value,
        ttl_s,
        shared: shared.clone(),
        status: status_tx,
    };
    let task = tokio::spawn(keeper.run());
    Ok(Registration {
        settings,
        key,
        shared,
        status: status_rx,
        task,
    })
}

impl Registration {
    /// The full key registered.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How the registration stands; changes as leases are renewed or replaced.
    pub fn status(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    /// Stops renewing, deletes the key, revokes the lease. Once this returns `Ok`, etcd no
    /// longer has the key (a watcher sees the delete).
    pub async fn shutdown(self) -> Result<(), Error> {
        self.task.abort();
        let (client, lease) = {
            let shared = self.shared.lock().unwrap_or_else(|p| p.into_inner());
            (shared.client.clone(), shared.lease)
        };
        let client = match client {
            Some(c) => c,
            None => self.settings.connect().await?,
        };
        let mut kv = client.kv_client();
        (self.settings)
            .request(
                format!("delete {}", self.key),
                kv.delete(self.key.as_str(), None),
            )
            .await?;
        let mut leases = client.lease_client();
        // The key is gone already; a lease that expired meanwhile is not a failure.
        match (self.settings)
            .request(format!("revoke lease {lease:x}"), leases.revoke(lease))
            .await
        {
            Err(Error::Etcd(e)) if e.contains("not found") => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Grants a lease and puts the key with it; the lease's id.
async fn put_new(
    settings: &Settings,
    client: &Client,
    key: &str,
    value: &[u8],
    ttl_s: i64,
) -> Result<i64, Error> {
    let mut leases = client.lease_client();
    let lease = settings
        .request(
            format!("grant a lease of {ttl_s}s"),
            leases.grant(ttl_s, None),
        )
        .await?
        .id();
    put(settings, client, key, value, lease).await?;
    Ok(lease)
}

async fn put(
    settings: &Settings,
    client: &Client,
    key: &str,
    value: &[u8],
    lease: i64,
) -> Result<(), Error> {
    let mut kv = client.kv_client();
    settings
        .request(
            format!("put {key}"),
            kv.put(key, value, Some(PutOptions::new().with_lease(lease))),
        )
        .await?;
    Ok(())
}

/// The task that keeps the registration alive.
struct Keeper {
    settings: Settings,
    key: String,
    value: Vec<u8>,
    ttl_s: i64,
    shared: Arc<Mutex<Shared>>,
    status: watch::Sender<Status>,
}

/// Why renewing stopped.
enum Stopped {
    /// etcd says the lease no longer exists.
    LeaseLost,
    Failed(Error),
}

impl Keeper {
    async fn run(self) {
        let mut backoff = Backoff::new(&self.settings);
        // After a failure the lease and key are checked before renewing again.
        let mut check = false;
        loop {
            let stopped = match self.connected().await {
                Ok(client) => self.round(&client, &mut check, &mut backoff).await,
                Err(e) => Stopped::Failed(e),
            };
            match stopped {
                Stopped::LeaseLost => {
                    tracing::warn!(key = %self.key, "etcd lease lost; registering again");
                    self.set_lease(0);
                }
                Stopped::Failed(e) => {
                    self.failed(e);
                    self.lock().client = None;
                    check = true;
                    backoff.wait().await;
                }
            }
        }
    }

    /// Registers again if needed, then renews until something stops it.
    async fn round(&self, client: &Client, check: &mut bool, backoff: &mut Backoff) -> Stopped {
        let lease = self.lock().lease;
        let ready = match (lease, *check) {
            (0, _) => self.register_again(client).await,
            (lease, true) => self.recheck(client, lease).await,
            (lease, false) => Ok(lease),
        };
        let lease = match ready {
            Ok(0) => return Stopped::LeaseLost,
            Ok(lease) => lease,
            Err(e) => return Stopped::Failed(e),
        };
        *check = false;
        if self.status.borrow().error.is_some() {
            tracing::info!(key = %self.key, "etcd registration renewed again");
        }
        self.status.send_modify(|s| s.error = None);
        backoff.reset();
        self.renew(client, lease).await
    }

    async fn connected(&self) -> Result<Client, Error> {
        if let Some(client) = self.lock().client.clone() {
            return Ok(client);
        }
        let client = self.settings.connect().await?;
        self.lock().client = Some(client.clone());
        Ok(client)
    }

    async fn register_again(&self, client: &Client) -> Result<i64, Error> {
        let lease = put_new(&self.settings, client, &self.key, &self.value, self.ttl_s).await?;
        self.set_lease(lease);
        self.status.send_modify(|s| s.registrations += 1);
        tracing::info!(key = %self.key, "registered in etcd again under lease {lease:x}");
        Ok(lease)
    }

    /// After a reconnection: the lease's id if it still exists and the key holds the value
    /// (put back if not), 0 if the lease is gone.
    async fn recheck(&self, client: &Client, lease: i64) -> Result<i64, Error> {
        let mut leases = client.lease_client();
        let left = (self.settings)
            .request(
                format!("look up lease {lease:x}"),
                leases.time_to_live(lease, None),
            )
            .await?
            .ttl();
        if left <= 0 {
            return Ok(0);
        }
        let mut kv = client.kv_client();
        let now = (self.settings)
            .request(format!("get {}", self.key), kv.get(self.key.as_str(), None))
            .await?;
        let ours = now
            .kvs()
            .first()
            .is_some_and(|kv| kv.value() == self.value && kv.lease() == lease);
        if !ours {
            tracing::warn!(key = %self.key, "the registered key was changed or deleted; putting it back");
            put(&self.settings, client, &self.key, &self.value, lease).await?;
        }
        Ok(lease)
    }

    /// Renews the lease every third of its TTL until that fails or the lease is gone.
    async fn renew(&self, client: &Client, lease: i64) -> Stopped {
        let mut leases = client.lease_client();
        let opened = (self.settings)
            .request(
                format!("keep lease {lease:x} alive"),
                leases.keep_alive(lease),
            )
            .await;
        let (mut keeper, mut stream) = match opened {
            Ok(pair) => pair,
            Err(Error::Etcd(e)) if e.contains("lease not found") => return Stopped::LeaseLost,
            Err(e) => return Stopped::Failed(e),
        };
        let period = Duration::from_millis((self.ttl_s as u64 * 1000 / 3).max(200));
        loop {
            tokio::time::sleep(period).await;
            if let Err(e) = keeper.keep_alive().await {
                return Stopped::Failed(self.settings.failed("renew the lease", e));
            }
            let answer = (self.settings)
                .request(format!("renew lease {lease:x}"), stream.message())
                .await;
            match answer {
                Ok(Some(r)) if r.ttl() > 0 => {}
                Ok(Some(_)) => return Stopped::LeaseLost,
                Ok(None) => {
                    let e = self
                        .settings
                        .failed("renew the lease", "the server ended the stream");
                    return Stopped::Failed(e);
                }
                Err(e) => return Stopped::Failed(e),
            }
        }
    }

    fn failed(&self, e: Error) {
        let message = e.to_string();
        if self.status.borrow().error.as_deref() != Some(message.as_str()) {
            tracing::warn!(key = %self.key, "etcd registration: {message}; retrying");
        }
        self.status.send_modify(|s| s.error = Some(message));
    }

    fn set_lease(&self, lease: i64) {
        self.lock().lease = lease;
        self.status.send_modify(|s| s.lease = lease);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}
