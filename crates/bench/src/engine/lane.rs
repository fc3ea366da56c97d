//! A lane: the context all lanes share, and one lane's connections, requests and counters, which
//! every engine's loop drives.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Notify, Semaphore};
use tokio_rustls::TlsConnector;

use crate::config::BenchConfig;
use crate::http::{self, Conn, ErrorKind};
use crate::source::RequestTable;
use crate::stats::Stats;

/// Everything the lanes share, read-only.
pub(crate) struct Ctx {
    pub cfg: BenchConfig,
    pub table: RequestTable,
    /// Where connections go: the URL's address, or each of `cfg.targets` in turn.
    pub addrs: Vec<SocketAddr>,
    pub t0: Instant,
    pub window_s: f64,
    pub lanes: u64,
    /// Replay: each log entry's time from the start, in seconds.
    pub replay_times: Vec<f64>,
    pub replay_index: Vec<u32>,
    /// `https://` targets: the TLS client.
    pub tls: Option<crate::tls::Tls>,
    /// `--http2`, `--http3`: the multiplexing client (then `tls` is `None`).
    pub mux: Option<crate::mux::Client>,
    /// Set when the run gives up early (`give_up_after`): every lane ends its schedule and
    /// skips the drain.
    pub stopped: tokio::sync::watch::Receiver<bool>,
}

pub(crate) struct Lane {
    pub(super) ctx: Arc<Ctx>,
    pub(super) stats: RefCell<Stats>,
    /// Open engine, connection per request: sockets allowed in connect state.
    pub(super) connect_slots: Semaphore,
    /// Open engine, keep-alive: due requests (index, intended start) waiting for one of the
    /// connection workers, and the signal that one arrived.
    pub(super) queue: RefCell<VecDeque<(u32, Instant)>>,
    pub(super) work: Notify,
    /// Requests handed to a task or queued for a worker and not finished (waiting or in flight).
    pub(super) pending: Cell<usize>,
    /// How many connections this lane has opened: picks the next source address (`cfg.bind`).
    pub(super) opened: Cell<usize>,
    /// How many connections this lane has begun: picks the next target (`ctx.addrs`).
    pub(super) begun: Cell<usize>,
    /// Per target, until when it is tried last: it let a connect time out (a dead host drops
    /// SYNs rather than refusing), and each new connection should not wait for that again.
    pub(super) silent_until: RefCell<Vec<Option<Instant>>>,
    /// `--http2`, `--http3`: the lane's multiplexed connections.
    pub(super) mux_pool: crate::mux::Pool,
}

/// How long a target that let a connect time out is tried after the others.
const SILENT_FOR: Duration = Duration::from_secs(1);

impl Lane {
    pub(crate) fn timeout_deadline(&self, from: Instant) -> Instant {
        from + self.ctx.cfg.timeout
    }

    /// The source address of the next connection: the configured ones in turn, each lane
    /// starting at its own place; None leaves the choice to the kernel.
    pub(crate) fn next_source(&self) -> Option<std::net::IpAddr> {
        let bind = &self.ctx.cfg.bind;
        if bind.is_empty() {
            return None;
        }
        let n = self.opened.get();
        self.opened.set(n.wrapping_add(1));
        Some(bind[n % bind.len()])
    }

    /// The target of the next new connection: round robin over `ctx.addrs`, each lane starting
    /// at its own place so that lanes together go `i mod N`.
    pub(crate) fn next_target(&self) -> usize {
        let n = self.begun.get();
        self.begun.set(n.wrapping_add(1));
        n % self.ctx.addrs.len()
    }

    /// Connects to the next target, or when it refuses or does not answer, to the one after it
    /// (a DNS round-robin client trying the name's next address): a dead target costs a connect
    /// attempt, not the request. A target that let a connect time out in the last second is
    /// tried last, so a silent host costs one timeout a second, not one per connection.
    async fn connect(
        &self,
        deadline: Instant,
        user: Option<&TlsConnector>,
    ) -> Result<Conn, ErrorKind> {
        let n = self.ctx.addrs.len();
        let first = self.next_target();
        let mut last = ErrorKind::ConnectError;
        let now = Instant::now();
        let mut order: Vec<usize> = (0..n).map(|k| (first + k) % n).collect();
        {
            let silent = self.silent_until.borrow();
            order.sort_by_key(|t| silent[*t].is_some_and(|until| until > now));
        }
        for target in order {
            // One target: retry timed-out attempts until the deadline (S-Client); several:
            // a timed-out attempt moves on to the next target.
            match self.connect_to(target, deadline, user, n == 1).await {
                Ok(mut c) => {
                    c.target = target;
                    let mut s = self.stats.borrow_mut();
                    s.targets[target].connects += 1;
                    if target != first {
                        s.targets[target].reconnects += 1;
                    }
                    return Ok(c);
                }
                Err(
                    e @ (ErrorKind::ConnectRefused
                    | ErrorKind::ConnectError
                    | ErrorKind::ConnectTimeout),
                ) => {
                    self.stats.borrow_mut().targets[target].refused += 1;
                    if e == ErrorKind::ConnectTimeout && n > 1 {
                        self.silent_until.borrow_mut()[target] = Some(Instant::now() + SILENT_FOR);
                    }
                    last = e;
                    if Instant::now() >= deadline {
                        break;
                    }
                }
                Err(e) => {
                    self.stats.borrow_mut().targets[target].errors += 1;
                    return Err(e);
                }
            }
        }
        self.stats.borrow_mut().targets[first].errors += 1;
        Err(last)
    }

    /// Connects to target `target`, retrying timed-out attempts until `deadline` as an S-Client
    /// does when `retry`; over TLS with `user`'s own client when given (its own session cache),
    /// else the run's.
    async fn connect_to(
        &self,
        target: usize,
        deadline: Instant,
        user: Option<&TlsConnector>,
        retry: bool,
    ) -> Result<Conn, ErrorKind> {
        loop {
            let began = Instant::now();
            self.stats.borrow_mut().connect_attempts += 1;
            let left = deadline.saturating_duration_since(began);
            let t = self
                .ctx
                .cfg
                .connect_timeout
                .min(left.max(Duration::from_millis(1)));
            let from = self.next_source();
            match http::connect(self.ctx.addrs[target], from, t).await {
                Ok(s) => {
                    self.stats.borrow_mut().connected(began, Instant::now());
                    let Some(tls) = &self.ctx.tls else {
                        return Ok(Conn::new(s));
                    };
                    // The handshake counts in the request's latency, not in connect_ms.
                    let connector = user.unwrap_or(&tls.connector);
                    let hs = connector.connect(tls.name.clone(), s);
                    return match tokio::time::timeout_at(deadline.into(), hs).await {
                        Ok(Ok(s)) => Ok(Conn::new(s)),
                        Ok(Err(e)) => Err(ErrorKind::from_io(&e)),
                        Err(_) => Err(ErrorKind::ReadTimeout),
                    };
                }
                Err(ErrorKind::ConnectTimeout) => {
                    self.stats.borrow_mut().connect_timeouts += 1;
                    if !retry || Instant::now() >= deadline {
                        return Err(ErrorKind::ConnectTimeout);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One request on `conn` (connecting first if it is `None`); leaves a reusable connection
    /// in `conn`. Returns whether a response arrived.
    pub(crate) async fn fetch(
        &self,
        conn: &mut Option<Conn>,
        idx: u32,
        intended: Instant,
        use_connect_slots: bool,
    ) -> bool {
        self.fetch_as(None, conn, idx, intended, use_connect_slots)
            .await
    }

    /// [`Lane::fetch`] for a user with a TLS client of its own ([`crate::tls::Tls::for_user`]).
    pub(crate) async fn fetch_as(
        &self,
        user: Option<&TlsConnector>,
        conn: &mut Option<Conn>,
        idx: u32,
        intended: Instant,
        use_connect_slots: bool,
    ) -> bool {
        if self.ctx.mux.is_some() {
            return self.fetch_mux(idx, intended, use_connect_slots).await;
        }
        let req = &self.ctx.table.requests[idx as usize];
        let permit = if conn.is_none() && use_connect_slots {
            self.connect_slots.acquire().await.ok()
        } else {
            None
        };
        let sent = Instant::now();
        self.stats.borrow_mut().started(intended, sent);
        let deadline = self.timeout_deadline(sent);
        if conn.is_none() {
            match self.connect(deadline, user).await {
                Ok(c) => *conn = Some(c),
                Err(k) => {
                    self.stats.borrow_mut().error(req.class, k, Instant::now());
                    return false;
                }
            }
        }
        drop(permit);
        let c = conn.as_mut().expect("connected above");
        let keepalive = self.ctx.cfg.keepalive;
        let r = tokio::time::timeout_at(
            deadline.into(),
            c.roundtrip(&req.bytes, req.head, keepalive),
        )
        .await;
        let now = Instant::now();
        match r {
            Ok(Ok(resp)) => {
                self.stats.borrow_mut().targets[c.target].requests += 1;
                if !(resp.reusable && keepalive) {
                    *conn = None;
                }
                if let Some(location) = resp
                    .location
                    .as_deref()
                    .filter(|_| self.ctx.cfg.follow_redirects)
                {
                    return self
                        .follow(req.class, location, intended, sent, deadline)
                        .await;
                }
                self.stats
                    .borrow_mut()
                    .response(req.class, intended, sent, &resp, now);
                true
            }
            Ok(Err(k)) => {
                let mut s = self.stats.borrow_mut();
                s.targets[c.target].errors += 1;
                *conn = None;
                s.error(req.class, k, now);
                false
            }
            Err(_) => {
                let mut s = self.stats.borrow_mut();
                s.targets[c.target].errors += 1;
                *conn = None;
                s.error(req.class, ErrorKind::ReadTimeout, now);
                false
            }
        }
    }

    /// One HTTP/2 or HTTP/3 request: on a pooled connection with a free stream (keep-alive),
    /// else on a connection of its own, closed afterwards.
    async fn fetch_mux(&self, idx: u32, intended: Instant, use_connect_slots: bool) -> bool {
        let mux = self
            .ctx
            .mux
            .as_ref()
            .expect("fetch_mux runs with --http2/--http3");
        let req = &self.ctx.table.requests[idx as usize];
        let keepalive = self.ctx.cfg.keepalive;
        let permit = if use_connect_slots && !keepalive {
            self.connect_slots.acquire().await.ok()
        } else {
            None
        };
        let sent = Instant::now();
        self.stats.borrow_mut().started(intended, sent);
        let deadline = self.timeout_deadline(sent);
        let acquired = tokio::time::timeout_at(deadline.into(), async {
            if keepalive {
                self.mux_pool.acquire(|| self.open_mux(deadline)).await
            } else {
                self.open_mux(deadline).await.map(Rc::new)
            }
        })
        .await
        .unwrap_or(Err(ErrorKind::ConnectTimeout));
        drop(permit);
        let conn = match acquired {
            Ok(c) => c,
            Err(k) => {
                self.stats.borrow_mut().error(req.class, k, Instant::now());
                return false;
            }
        };
        let r = tokio::time::timeout_at(
            deadline.into(),
            mux.roundtrip(&conn, &req.method, &req.path, req.head),
        )
        .await
        .unwrap_or(Err(ErrorKind::ReadTimeout));
        let now = Instant::now();
        let ok = r.is_ok();
        {
            let mut s = self.stats.borrow_mut();
            match r {
                Ok(resp) => {
                    s.targets[conn.target].requests += 1;
                    s.response(req.class, intended, sent, &resp, now);
                }
                Err(k) => {
                    s.targets[conn.target].errors += 1;
                    s.error(req.class, k, now);
                }
            }
        }
        if keepalive {
            self.mux_pool.release(&conn, !ok);
        } else {
            conn.close();
        }
        ok
    }

    /// A new multiplexed connection to the next target, its connect and handshake bounded by
    /// the request's deadline (quinn and TCP retransmit lost handshake packets themselves;
    /// there is no S-Client retry).
    async fn open_mux(&self, deadline: Instant) -> Result<crate::mux::MuxConn, ErrorKind> {
        let mux = self
            .ctx
            .mux
            .as_ref()
            .expect("open_mux runs with --http2/--http3");
        let target = self.next_target();
        let from = self.next_source();
        let began = Instant::now();
        self.stats.borrow_mut().connect_attempts += 1;
        let wait = deadline.saturating_duration_since(began);
        match mux.connect(self.ctx.addrs[target], from, wait).await {
            Ok(mut c) => {
                c.target = target;
                let mut s = self.stats.borrow_mut();
                s.connected(began, Instant::now());
                s.targets[target].connects += 1;
                Ok(c)
            }
            Err(f) => {
                let mut s = self.stats.borrow_mut();
                if f.kind == ErrorKind::ConnectTimeout {
                    s.connect_timeouts += 1;
                }
                s.targets[target].refused += 1;
                Err(f.kind)
            }
        }
    }

    /// Follows a redirect once, on a new connection closed afterwards: the request ends with
    /// that answer (a second redirect is not followed: SWEB redirects a request at most once).
    async fn follow(
        &self,
        class: u16,
        location: &str,
        intended: Instant,
        sent: Instant,
        deadline: Instant,
    ) -> bool {
        let exchange = async {
            let (addr, request) = crate::http::redirect_request(location).await?;
            let from = self.next_source();
            let stream = http::connect(addr, from, self.ctx.cfg.connect_timeout).await?;
            Conn::new(stream).roundtrip(&request, false, false).await
        };
        let r = tokio::time::timeout_at(deadline.into(), exchange).await;
        let now = Instant::now();
        let mut stats = self.stats.borrow_mut();
        match r {
            Ok(Ok(resp)) => {
                stats.response(class, intended, sent, &resp, now);
                stats.redirected(intended, now);
                true
            }
            Ok(Err(k)) => {
                stats.error(class, k, now);
                false
            }
            Err(_) => {
                stats.error(class, ErrorKind::ReadTimeout, now);
                false
            }
        }
    }

    /// An open-loop request on a new connection: waits for a connect slot (keeping its
    /// intended start), connects, sends.
    pub(super) async fn open_request(self: Rc<Self>, idx: u32, intended: Instant) {
        let mut conn = None;
        self.fetch(&mut conn, idx, intended, true).await;
        self.pending.set(self.pending.get() - 1);
    }

    /// Open engine, keep-alive: one connection, taking due requests from the queue in order
    /// (each keeps its intended start, so waiting in the queue counts in its latency). A fixed
    /// set of these replaces a task and a semaphore wait per request, which cost more CPU than
    /// the request itself once the server falls behind and the queue is long.
    pub(super) async fn keepalive_worker(self: Rc<Self>) {
        let mut conn = None;
        loop {
            let next = self.queue.borrow_mut().pop_front();
            match next {
                Some((idx, intended)) => {
                    self.fetch(&mut conn, idx, intended, false).await;
                    self.pending.set(self.pending.get() - 1);
                }
                None => self.work.notified().await,
            }
        }
    }

    pub(super) fn at(&self, t: f64) -> Instant {
        self.ctx.t0 + Duration::from_secs_f64(t.max(0.0))
    }

    pub(crate) fn window_end(&self) -> Instant {
        self.at(self.ctx.window_s)
    }
}
