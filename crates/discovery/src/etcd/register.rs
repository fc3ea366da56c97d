//! Self-registration: one key bound to a lease, the lease kept alive from a task.
//!
//! [`register`] grants a lease of `ttl`, puts the key with it and returns once both are done
//! (so a misconfigured endpoint is an error at start, not a silent retry). The task then
//! renews the lease every third of `ttl`, one keepalive request each time (the JSON gateway
//! answers one keepalive per request). When a renewal fails it reconnects (doubling
//! backoff) and checks that the lease still exists and the key still holds the value; a lease
//! that is gone (etcd did not hear from us within `ttl`, or someone revoked it) is replaced by
//! a new one and the key put again.
//!
//! [`Registration::shutdown`] deletes the key and revokes the lease: a clean exit leaves no
//! node behind for a switch to try. Dropping the handle only stops the renewals: the key
//! vanishes when the lease expires, as it does when the process is killed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::gateway::Gateway;
use super::wire;
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
    /// The client in use; `None` after a failure, so the next attempt starts on fresh
    /// connections.
    client: Option<Gateway>,
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
    let client = Gateway::new(&settings)?;
    let lease = put_new(&client, &key, &value, ttl_s).await?;
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
            None => Gateway::new(&self.settings)?,
        };
        let doing = format!("delete {}", self.key);
        let body = wire::delete(&self.key);
        client
            .call("/v3/kv/deleterange", &doing, &body, wire::header)
            .await?;
        // The key is gone already; a lease that expired meanwhile is not a failure.
        let doing = format!("revoke lease {lease:x}");
        let body = wire::lease(lease);
        let revoked = client
            .call("/v3/lease/revoke", &doing, &body, wire::header)
            .await;
        match revoked {
            Err(failed) if failed.not_found() => Ok(()),
            other => other.map(|_| ()).map_err(Error::from),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Grants a lease and puts the key with it; the lease's id.
async fn put_new(client: &Gateway, key: &str, value: &[u8], ttl_s: i64) -> Result<i64, Error> {
    let doing = format!("grant a lease of {ttl_s}s");
    let body = wire::lease_grant(ttl_s);
    let granted = client
        .call("/v3/lease/grant", &doing, &body, wire::lease_answer)
        .await?;
    put(client, key, value, granted.id).await?;
    Ok(granted.id)
}

async fn put(client: &Gateway, key: &str, value: &[u8], lease: i64) -> Result<(), Error> {
    let doing = format!("put {key}");
    let body = wire::put(key, value, lease);
    client
        .call("/v3/kv/put", &doing, &body, wire::header)
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
    async fn round(&self, client: &Gateway, check: &mut bool, backoff: &mut Backoff) -> Stopped {
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

    async fn connected(&self) -> Result<Gateway, Error> {
        if let Some(client) = self.lock().client.clone() {
            return Ok(client);
        }
        let client = Gateway::new(&self.settings)?;
        self.lock().client = Some(client.clone());
        Ok(client)
    }

    async fn register_again(&self, client: &Gateway) -> Result<i64, Error> {
        let lease = put_new(client, &self.key, &self.value, self.ttl_s).await?;
        self.set_lease(lease);
        self.status.send_modify(|s| s.registrations += 1);
        tracing::info!(key = %self.key, "registered in etcd again under lease {lease:x}");
        Ok(lease)
    }

    /// After a reconnection: the lease's id if it still exists and the key holds the value
    /// (put back if not), 0 if the lease is gone.
    async fn recheck(&self, client: &Gateway, lease: i64) -> Result<i64, Error> {
        let doing = format!("look up lease {lease:x}");
        let body = wire::lease(lease);
        let left = client
            .call("/v3/lease/timetolive", &doing, &body, wire::lease_answer)
            .await?;
        if left.ttl <= 0 {
            return Ok(0);
        }
        let doing = format!("range {}", self.key);
        let body = wire::range_key(&self.key);
        let now = client
            .call("/v3/kv/range", &doing, &body, wire::range)
            .await?;
        let ours = (now.kvs.first()).is_some_and(|kv| kv.value == self.value && kv.lease == lease);
        if !ours {
            tracing::warn!(key = %self.key, "the registered key was changed or deleted; putting it back");
            put(client, &self.key, &self.value, lease).await?;
        }
        Ok(lease)
    }

    /// Renews the lease every third of its TTL until that fails or the lease is gone.
    async fn renew(&self, client: &Gateway, lease: i64) -> Stopped {
        let period = Duration::from_millis((self.ttl_s as u64 * 1000 / 3).max(200));
        let doing = format!("renew lease {lease:x}");
        let body = wire::lease(lease);
        loop {
            tokio::time::sleep(period).await;
            let answer = client.call("/v3/lease/keepalive", &doing, &body, wire::lease_answer);
            match answer.await {
                Ok(renewed) if renewed.ttl > 0 => {}
                // etcd answers a keepalive of a lease it no longer has with no TTL.
                Ok(_) => return Stopped::LeaseLost,
                Err(failed) if failed.not_found() => return Stopped::LeaseLost,
                Err(failed) => return Stopped::Failed(failed.into()),
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
