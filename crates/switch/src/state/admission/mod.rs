//! Admission: how many requests each node may have in flight, and what happens to the rest.
//!
//! Every node has a [`Gate`] between the policy's pick and the upstream connection:
//!
//! - **A concurrency limit.** By default *adaptive* ([`capstan_core::admission`]: Envoy's gradient controller,
//!   the limit follows the node's latency against its unloaded latency, so it finds the node's
//!   capacity without tuning; for HTTP/1.1 nodes the latency is timed at the socket,
//!   [`crate::net::node_clock`], so the switch's own delays do not count as the node's); or a fixed number (`limit = N`, HAProxy's per-server `maxconn`);
//!   or `"off"` (no gate at all: every request goes straight to the node, as before).
//! - **A bounded queue** (`queue`, per node) for requests that find the node at its limit,
//!   shortest expected job first: waiters are ordered by their class's recent latency on the
//!   node (first come, first served within a class), and a request that finds the queue full
//!   takes the place of the costliest waiter when that one's class is costlier than its own
//!   (the displaced request is shed). Under overload by an expensive class (a CGI), a cheap one
//!   (a static file) still gets the next free slot instead of being shed with it.
//! - **An express lane** for requests at least [`EXPRESS_RATIO`] times cheaper than the
//!   costliest class on the node: they do not wait for a slot but take one of `limit` express
//!   slots of their own. On a node that shares its CPU among the requests in flight, `limit`
//!   requests that cost a tenth of the others add at most a tenth of its load, while they would
//!   otherwise wait for an expensive request to finish (on a node at its limit those finish in
//!   bunches, so that wait is most of a costly request's time). At most `2 × limit` requests
//!   are in flight, the second half only cheap ones.
//! - **A scout** for a class whose cost on the node is not known yet, while another class's is:
//!   one such request at a time takes an express slot, so the class's cost is learned from one
//!   request rather than after the costly requests ahead of it in the queue (without it, the
//!   first static files sent to a node already overloaded by a CGI waited like the CGI, or were
//!   shed). One request of unknown cost adds at most one request's load to the node.
//!   A queued request waits at most `queue_timeout` (HAProxy's `timeout queue`) for a slot; then
//!   it goes to another node that has room if there is one (it never reached this one, so any
//!   method may move), else it gets `503` with `Retry-After`. When the wait was the node's
//!   fault — it was taken out while the request waited ([`Gate::evict_waiters`], at once), or
//!   no response came back from it all that time (it hangs) — the request may queue again at
//!   another node ([`Shed::Stalled`]): a hung node's queue must not become 503s while the
//!   others have room in theirs. A request is queued only when the node can be expected to
//!   start it in time — at most `limit × queue_timeout / latency` requests wait, with `latency`
//!   a moving average of the node's response-head times — so under overload the excess is shed
//!   at once instead of waiting out the timeout.
//! - **Shedding.** A request that finds the limit reached and the queue full is answered `503`
//!   with `Retry-After` at once, counted per node and reason (`queue-full`, `queue-timeout`).
//!
//! **What the policy sees.** The policy picks first among the nodes with a free slot, so a
//! request waits in a queue only when no node could take it at once (HAProxy queues a request
//! at a server only when every server is at its `maxconn`); a node whose limit is pinned low
//! while it measures its unloaded latency (see [`capstan_core::admission`]) then costs nobody a wait. When every
//! node is at its limit, the pick is among those with room in their queue; only when every node
//! that is otherwise up is saturated does the policy pick among them all, and the node it picks
//! sheds the request. A node's `active` in the view counts its queued requests as well as
//! those in flight: both are load the switch has committed to it, and least-connections or LARD
//! should steer away from a queue as from a busy node.
//!
//! **Accounting.** A slot is a [`Permit`], released by `Drop` whatever ends the request (its
//! response ends, the client goes away, a retry moves it, an error). A waiter that goes away
//! (the client closed, the queue timed out) leaves the queue in its own `Drop`, and a slot
//! granted to it in that instant is passed on, so the counts always return to zero.
//!
//! **Memory.** A queued request holds its parsed head and the task that waits (a few KB); the
//! queue bound caps that per node.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::oneshot;

pub(crate) use capstan_core::admission::{AdaptiveSettings, GradientLimiter, Sample};

/// How much cheaper than the costliest class on a node a class must be to take the express
/// lane.
pub(crate) const EXPRESS_RATIO: f64 = 10.0;

use crate::config::{Admission, LimitMode};

impl Admission {
    /// The adaptive limiter's settings.
    pub(crate) fn adaptive(&self) -> AdaptiveSettings {
        AdaptiveSettings {
            min: self.min_limit,
            max: self.max_limit,
            initial: self.initial_limit,
            buffer: f64::from(self.latency_buffer_percent) / 100.0,
            probe_interval_nanos: u64::try_from(self.probe_interval.as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

/// Why a request was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shed {
    /// At the limit, and the queue was full (or the node could not start it in time).
    QueueFull,
    /// It waited `queue_timeout` in the queue without getting a slot.
    QueueTimeout,
    /// It waited for a node that stopped answering: the node was taken out while it waited
    /// ([`Gate::evict_waiters`]), or no response came back from it all the time it waited. The
    /// node's fault, not the load's: the request may wait again at another node.
    Stalled,
}

/// How a gate limits its node.
#[derive(Debug)]
enum Mode {
    Off,
    Fixed(u32),
    Adaptive(Box<GradientLimiter>),
}

/// The two kinds of express slot (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    /// A class much cheaper than the node's costliest.
    Express,
    /// A class whose cost on the node is not known yet.
    Scout,
}

/// What a waiter is told when it leaves the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grant {
    /// A slot is its own.
    Slot,
    /// A cheaper request took its place; it is shed.
    Displaced,
    /// The node was taken out of rotation; the waiter goes elsewhere.
    Evicted,
}

struct Waiter {
    id: u64,
    class: usize,
    /// Its class's expected latency on the node, nanoseconds (0 when unknown), when it came —
    /// or more, to stay behind an earlier waiter of its class (see [`GateState::enqueue`]).
    cost: f64,
    grant: oneshot::Sender<Grant>,
}

/// What the gate's lock protects.
struct GateState {
    mode: Mode,
    queue_max: u32,
    /// The live peers of the tier a fixed limit and the queue are shared out among
    /// (`tier.admission = "shared"`, see `crate::state::tier_share`); 1 otherwise.
    share_among: u32,
    queue_timeout: Duration,
    /// Requests holding a regular slot.
    in_flight: u32,
    /// Requests holding an express slot.
    express: u32,
    /// A request of a class of unknown cost holds an express slot (see the module doc).
    scouting: bool,
    /// Per class whose cost is not known yet: when its oldest request still out was sent.
    unknown_since: Vec<Option<u64>>,
    waiters: VecDeque<Waiter>,
    /// Moving average of response-head latency on regular slots, nanoseconds (0 before the
    /// first).
    latency_nanos: f64,
    /// The same per class, the cost that orders the queue (0 before the first).
    class_latency: Vec<f64>,
    /// When the node last answered a request (a response head), nanoseconds; 0 before.
    answered_at: u64,
    next_id: u64,
}

impl GateState {
    fn limit(&self) -> u32 {
        match &self.mode {
            Mode::Off => u32::MAX,
            Mode::Fixed(n) => crate::state::tier_share::limit_share(*n, self.share_among),
            Mode::Adaptive(l) => l.limit(),
        }
    }

    /// How many may wait now: the configured bound, or fewer when the node could not start
    /// more than that within the queue timeout at its current pace.
    fn queue_cap(&self) -> u32 {
        let queue_max = crate::state::tier_share::queue_share(self.queue_max, self.share_among);
        if self.latency_nanos <= 0.0 {
            return queue_max;
        }
        let startable =
            f64::from(self.limit()) * self.queue_timeout.as_nanos() as f64 / self.latency_nanos;
        queue_max.min((startable.ceil() as u32).max(1))
    }

    /// Hands free slots to the oldest waiters still waiting.
    fn grant_waiters(&mut self) {
        while self.in_flight < self.limit() {
            let Some(waiter) = self.waiters.pop_front() else {
                break;
            };
            if waiter.grant.send(Grant::Slot).is_ok() {
                self.in_flight += 1;
            }
        }
    }

    /// The measured latency of `class` on the node, 0 while none came back.
    fn known_cost(&self, class: usize) -> f64 {
        self.class_latency.get(class).copied().unwrap_or(0.0)
    }

    /// The expected latency of `class` on the node at `now_nanos`: the measured one, else how
    /// long its oldest request sent has been out (it costs at least that), else 0. A class
    /// never sent counts as free, so that it is served and its cost learned (a pessimistic
    /// guess would keep it out of a full queue for good).
    fn cost_of(&self, class: usize, now_nanos: u64) -> f64 {
        match self.known_cost(class) {
            0.0 => match self.unknown_since.get(class).copied().flatten() {
                Some(since) => now_nanos.saturating_sub(since) as f64,
                None => 0.0,
            },
            known => known,
        }
    }

    fn costliest(&self, now_nanos: u64) -> f64 {
        (0..self.class_latency.len())
            .map(|class| self.cost_of(class, now_nanos))
            .fold(0.0, f64::max)
    }

    /// The express slot a request of `class` may take now, if one is free: [`Lane::Express`]
    /// when its class is known and at least [`EXPRESS_RATIO`] times cheaper than the
    /// costliest; [`Lane::Scout`] when nothing of its cost is known (none came back, none is
    /// out) while something of another class's is, and nobody else scouts.
    fn express_lane(&self, class: usize, now_nanos: u64) -> Option<Lane> {
        if self.express >= self.limit() {
            return None;
        }
        let (cost, costliest) = (self.cost_of(class, now_nanos), self.costliest(now_nanos));
        if self.known_cost(class) > 0.0 && cost * EXPRESS_RATIO <= costliest {
            Some(Lane::Express)
        } else if cost == 0.0 && costliest > 0.0 && !self.scouting {
            Some(Lane::Scout)
        } else {
            None
        }
    }

    /// A request of `class` goes to the node at `now_nanos`: while the class's cost is unknown,
    /// the first one sent starts the clock of [`GateState::cost_of`].
    fn sent(&mut self, class: usize, now_nanos: u64) {
        if self.known_cost(class) > 0.0 {
            return;
        }
        if class >= self.unknown_since.len() {
            self.unknown_since.resize(class + 1, None);
        }
        self.unknown_since[class].get_or_insert(now_nanos);
    }

    /// Queues a waiter of `class` and `cost` in its place (after every waiter that costs no
    /// more); when the queue is full, only in place of a costlier waiter, who is told it is
    /// displaced. `None` when there is no place for it.
    ///
    /// Within a class the queue is first come, first served: the class's cost is a moving
    /// average, and a newcomer that came while it was lower must not sort ahead of an earlier
    /// waiter of its own class — under a standing queue that waiter would be overtaken again
    /// and again until its queue timeout (seen as 503s under an HTTP/2 load of one class).
    fn enqueue(&mut self, class: usize, cost: f64) -> Option<(u64, oneshot::Receiver<Grant>)> {
        let cost = self
            .waiters
            .iter()
            .rev()
            .find(|w| w.class == class)
            .map_or(cost, |earlier| earlier.cost.max(cost));
        if self.waiters.len() as u32 >= self.queue_cap() {
            let costliest = self.waiters.back().map_or(0.0, |w| w.cost);
            if costliest <= cost {
                return None;
            }
            let displaced = self
                .waiters
                .pop_back()
                .expect("a full queue has a last waiter");
            let _ = displaced.grant.send(Grant::Displaced);
        }
        let (tx, rx) = oneshot::channel();
        let id = self.next_id;
        self.next_id += 1;
        let at = self.waiters.partition_point(|w| w.cost <= cost);
        self.waiters.insert(
            at,
            Waiter {
                id,
                class,
                cost,
                grant: tx,
            },
        );
        Some((id, rx))
    }
}

/// One node's admission: its limit, its queue and its counters.
pub struct Gate {
    state: Mutex<GateState>,
    /// Copies of the state for lock-free reads (the policy's view, `/status`, metrics).
    limit: AtomicU32,
    in_flight: AtomicU32,
    express: AtomicU32,
    queued: AtomicU32,
    queue_cap: AtomicU32,
    pub shed_queue_full: AtomicU64,
    pub shed_queue_timeout: AtomicU64,
}

impl std::fmt::Debug for Gate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gate")
            .field("limit", &self.limit.load(Ordering::Relaxed))
            .field("in_flight", &self.in_flight.load(Ordering::Relaxed))
            .field("queued", &self.queued.load(Ordering::Relaxed))
            .finish()
    }
}

/// A gate's state as `/status` shows it.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct GateStatus {
    /// `adaptive`, `fixed` or `off`.
    pub mode: &'static str,
    /// Requests the node may have in flight now (absent when off).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    pub in_flight: u32,
    /// Of `in_flight`, requests on express slots (cheap classes; see the module doc).
    pub express: u32,
    pub queued: u32,
    /// How many may wait now (the bound, or fewer: what the node can start in time).
    pub queue_cap: u32,
    pub shed: ShedCounts,
    /// Adaptive: the limit is pinned to the minimum while the baselines are measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probing: Option<bool>,
    /// Adaptive: the last window's median latency over the class baselines (1 = unloaded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ratio: Option<f64>,
    /// Recent response-head latency of each class on the node, ms (what orders the queue),
    /// by class id; 0 for a class not seen yet. (`/status` shows them by class name.)
    #[serde(skip)]
    pub class_latency_ms: Vec<f64>,
}

#[derive(Clone, Copy, Debug, serde::Serialize)]
pub(crate) struct ShedCounts {
    pub queue_full: u64,
    pub queue_timeout: u64,
}

/// A slot on a node; dropping it frees the slot for the next request.
#[must_use]
pub(crate) struct Permit {
    gate: Option<Arc<Gate>>,
    /// Requests in flight on the node when this one was admitted, itself included.
    pub in_flight: u32,
    /// An express slot (see the module doc).
    pub express: bool,
    /// The node's scout: an express slot for a class of unknown cost.
    pub scout: bool,
    class: usize,
}

impl Permit {
    /// A permit of a node whose admission is off: it holds nothing.
    pub(crate) fn unlimited() -> Permit {
        Permit {
            gate: None,
            in_flight: 0,
            express: false,
            scout: false,
            class: 0,
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.release(self.express, self.scout, Some(self.class));
        }
    }
}

/// A place in a node's queue; leaving it (granted or not) is settled by `Drop`.
struct Ticket<'a> {
    gate: &'a Arc<Gate>,
    id: u64,
    grant: oneshot::Receiver<Grant>,
    /// The grant has been seen and dealt with.
    settled: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        // After `close`, no grant can arrive: either one already did (a slot goes back; a
        // displaced waiter is out of the queue already), or the entry is still queued and
        // comes out.
        self.grant.close();
        match self.grant.try_recv() {
            Ok(Grant::Slot) => self.gate.release(false, false, None),
            Ok(Grant::Displaced | Grant::Evicted) => {}
            Err(_) => self.gate.leave_queue(self.id),
        }
    }
}

impl Gate {
    /// A gate for `settings` on a node serving `classes` classes.
    pub(crate) fn new(settings: &Admission, classes: usize, now_nanos: u64) -> Gate {
        let gate = Gate {
            state: Mutex::new(GateState {
                mode: Mode::Off,
                queue_max: 0,
                share_among: 1,
                queue_timeout: Duration::ZERO,
                in_flight: 0,
                express: 0,
                scouting: false,
                unknown_since: Vec::new(),
                waiters: VecDeque::new(),
                latency_nanos: 0.0,
                class_latency: vec![0.0; classes],
                answered_at: 0,
                next_id: 0,
            }),
            limit: AtomicU32::new(u32::MAX),
            in_flight: AtomicU32::new(0),
            express: AtomicU32::new(0),
            queued: AtomicU32::new(0),
            queue_cap: AtomicU32::new(0),
            shed_queue_full: AtomicU64::new(0),
            shed_queue_timeout: AtomicU64::new(0),
        };
        gate.configure(settings, classes, now_nanos);
        gate
    }

    fn lock(&self) -> MutexGuard<'_, GateState> {
        // The state is a few counters kept consistent under the lock; a panic elsewhere while
        // holding it leaves nothing half-done that matters more than stopping admission.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies a (re)loaded configuration. An adaptive limiter whose settings and classes are
    /// unchanged keeps what it learned; a new limit lets waiters in at once.
    pub(crate) fn configure(&self, settings: &Admission, classes: usize, now_nanos: u64) {
        let mut state = self.lock();
        state.class_latency.resize(classes, 0.0);
        state.queue_max = settings.queue;
        state.queue_timeout = settings.queue_timeout;
        let adaptive = settings.adaptive();
        state.mode = match (
            settings.limit,
            std::mem::replace(&mut state.mode, Mode::Off),
        ) {
            (LimitMode::Off, _) => Mode::Off,
            (LimitMode::Fixed(n), _) => Mode::Fixed(n),
            (LimitMode::Adaptive, Mode::Adaptive(old)) if old.settings() == adaptive => {
                Mode::Adaptive(old)
            }
            (LimitMode::Adaptive, _) => {
                Mode::Adaptive(Box::new(GradientLimiter::new(adaptive, classes, now_nanos)))
            }
        };
        state.grant_waiters();
        self.publish(&state);
    }

    /// Shares a fixed limit and the queue out among `live` switches of a tier (1: this switch
    /// has them whole). An adaptive limit is left as it is: it follows the node's latency,
    /// which the other switches' requests raise as much as this one's.
    pub(crate) fn share_among(&self, live: u32) {
        let mut state = self.lock();
        if state.share_among == live.max(1) {
            return;
        }
        state.share_among = live.max(1);
        state.grant_waiters();
        self.publish(&state);
    }

    fn publish(&self, state: &GateState) {
        self.limit.store(state.limit(), Ordering::Relaxed);
        self.in_flight.store(state.in_flight, Ordering::Relaxed);
        self.express.store(state.express, Ordering::Relaxed);
        self.queued
            .store(state.waiters.len() as u32, Ordering::Relaxed);
        self.queue_cap.store(state.queue_cap(), Ordering::Relaxed);
    }

    /// Whether a request sent here now would be shed: at the limit, and no room to wait.
    pub(crate) fn is_saturated(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) >= self.limit.load(Ordering::Relaxed)
            && self.queued.load(Ordering::Relaxed) >= self.queue_cap.load(Ordering::Relaxed)
    }

    /// Whether a request sent here now would be admitted at once: under the limit, and nobody
    /// waiting ahead of it.
    pub(crate) fn has_free_slot(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) < self.limit.load(Ordering::Relaxed)
            && self.queued.load(Ordering::Relaxed) == 0
    }

    /// Requests waiting for a slot.
    pub(crate) fn queued(&self) -> u32 {
        self.queued.load(Ordering::Relaxed)
    }

    /// The current limit (`u32::MAX` when off).
    pub(crate) fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// Takes a slot for a request of `class` sent at `now_nanos`: at once when the node is
    /// under its limit and nobody waits (or on the express lane), else after waiting in the
    /// queue; or the reason it cannot have one.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        class: usize,
        now_nanos: u64,
    ) -> Result<Permit, Shed> {
        let (id, grant, timeout) = {
            let mut state = self.lock();
            if let Some(permit) = self.admit_now(&mut state, class, now_nanos) {
                return Ok(permit);
            }
            let cost = state.cost_of(class, now_nanos);
            let Some((id, rx)) = state.enqueue(class, cost) else {
                drop(state);
                self.shed_queue_full.fetch_add(1, Ordering::Relaxed);
                return Err(Shed::QueueFull);
            };
            self.publish(&state);
            (id, rx, state.queue_timeout)
        };
        let mut ticket = Ticket {
            gate: self,
            id,
            grant,
            settled: false,
        };
        let waited = tokio::time::timeout(timeout, &mut ticket.grant).await;
        // Out of time (or the sender gone): a grant may have come in this very moment.
        let grant = match waited {
            Ok(Ok(grant)) => Some(grant),
            Ok(Err(_)) | Err(_) => {
                ticket.grant.close();
                ticket.grant.try_recv().ok()
            }
        };
        ticket.settled = grant.is_some();
        drop(ticket);
        match grant {
            Some(Grant::Slot) => {
                let mut permit = self.permit(self.in_flight(), false);
                permit.class = class;
                Ok(permit)
            }
            Some(Grant::Displaced) => {
                self.shed_queue_full.fetch_add(1, Ordering::Relaxed);
                Err(Shed::QueueFull)
            }
            // Not counted here: the request goes on to another node, and is counted as shed
            // only if it finds no place there.
            Some(Grant::Evicted) => Err(Shed::Stalled),
            None if self.lock().answered_at < now_nanos => Err(Shed::Stalled),
            None => {
                self.shed_queue_timeout.fetch_add(1, Ordering::Relaxed);
                Err(Shed::QueueTimeout)
            }
        }
    }

    /// The node went out of rotation: every waiter leaves the queue at once, to be placed
    /// elsewhere ([`Shed::Stalled`]) rather than wait out the queue timeout for a node that will
    /// not take it.
    pub(crate) fn evict_waiters(&self) {
        let mut state = self.lock();
        for waiter in state.waiters.drain(..) {
            let _ = waiter.grant.send(Grant::Evicted);
        }
        self.publish(&state);
    }

    /// Counts a request shed after [`Shed::Stalled`] found no other place.
    pub(crate) fn count_stalled_shed(&self) {
        self.shed_queue_timeout.fetch_add(1, Ordering::Relaxed);
    }

    /// A slot without waiting: a regular one, an express one or the scout's, if one is free.
    fn admit_now(
        self: &Arc<Self>,
        state: &mut GateState,
        class: usize,
        now_nanos: u64,
    ) -> Option<Permit> {
        if matches!(state.mode, Mode::Off) {
            return Some(Permit::unlimited());
        }
        let mut permit = if state.in_flight < state.limit() && state.waiters.is_empty() {
            state.in_flight += 1;
            self.permit(state.in_flight + state.express, false)
        } else if let Some(lane) = state.express_lane(class, now_nanos) {
            let scout = lane == Lane::Scout;
            state.express += 1;
            state.scouting |= scout;
            let mut permit = self.permit(state.in_flight + state.express, true);
            permit.scout = scout;
            permit
        } else {
            return None;
        };
        permit.class = class;
        state.sent(class, now_nanos);
        self.publish(state);
        Some(permit)
    }

    fn permit(self: &Arc<Self>, in_flight: u32, express: bool) -> Permit {
        Permit {
            gate: Some(Arc::clone(self)),
            in_flight,
            express,
            scout: false,
            class: 0,
        }
    }

    /// Requests in flight on the node through this gate, express ones included.
    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed) + self.express.load(Ordering::Relaxed)
    }

    /// Frees a slot; `class` is the request's when it held one, so that a class whose request
    /// ended without a sample (the client left) stops looking as costly as its age.
    fn release(&self, express: bool, scout: bool, class: Option<usize>) {
        let mut state = self.lock();
        if scout {
            state.scouting = false;
        }
        if let Some(since) = class.and_then(|c| state.unknown_since.get_mut(c)) {
            *since = None;
        }
        if express {
            state.express = state.express.saturating_sub(1);
        } else {
            state.in_flight = state.in_flight.saturating_sub(1);
            state.grant_waiters();
        }
        self.publish(&state);
    }

    fn leave_queue(&self, id: u64) {
        let mut state = self.lock();
        if let Some(at) = state.waiters.iter().position(|w| w.id == id) {
            state.waiters.remove(at);
        }
        self.publish(&state);
    }

    /// A request sent `latency_nanos` ago ended: its response head came back (`answered`), or
    /// its first-byte timeout ran out, which the limiter counts as that much latency.
    pub(crate) fn record(
        &self,
        class: usize,
        latency_nanos: u64,
        permit: &Permit,
        now_nanos: u64,
        answered: bool,
    ) {
        if permit.gate.is_none() {
            return;
        }
        let mut state = self.lock();
        if answered {
            state.answered_at = state.answered_at.max(now_nanos);
        }
        let latency = latency_nanos as f64;
        // Moving averages over about the last eight responses.
        let average = |avg: f64| match avg {
            0.0 => latency,
            avg => avg + (latency - avg) / 8.0,
        };
        // The pace that sizes the queue is that of the regular slots the queue waits for.
        if !permit.express {
            state.latency_nanos = average(state.latency_nanos);
        }
        if class >= state.class_latency.len() {
            state.class_latency.resize(class + 1, 0.0);
        }
        state.class_latency[class] = average(state.class_latency[class]);
        let in_flight_at_end = state.in_flight + state.express;
        if let Mode::Adaptive(limiter) = &mut state.mode {
            limiter.record(Sample {
                class,
                latency_nanos,
                in_flight: permit.in_flight,
                in_flight_at_end,
                at_nanos: now_nanos,
            });
            state.grant_waiters();
        }
        self.publish(&state);
    }

    /// What `/status` shows.
    pub(crate) fn status(&self) -> GateStatus {
        let state = self.lock();
        let (mode, probing, ratio) = match &state.mode {
            Mode::Off => ("off", None, None),
            Mode::Fixed(_) => ("fixed", None, None),
            Mode::Adaptive(l) => ("adaptive", Some(l.is_probing()), Some(l.last_ratio())),
        };
        GateStatus {
            mode,
            limit: (mode != "off").then(|| state.limit()),
            in_flight: state.in_flight + state.express,
            express: state.express,
            queued: state.waiters.len() as u32,
            queue_cap: match mode {
                "off" => 0,
                _ => state.queue_cap(),
            },
            shed: ShedCounts {
                queue_full: self.shed_queue_full.load(Ordering::Relaxed),
                queue_timeout: self.shed_queue_timeout.load(Ordering::Relaxed),
            },
            probing,
            latency_ratio: ratio,
            class_latency_ms: state.class_latency.iter().map(|l| l / 1e6).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(limit: u32, queue: u32, timeout_ms: u64) -> Arc<Gate> {
        let settings = Admission {
            limit: LimitMode::Fixed(limit),
            queue,
            queue_timeout: Duration::from_millis(timeout_ms),
            ..Admission::default()
        };
        Arc::new(Gate::new(&settings, 1, 0))
    }

    #[tokio::test]
    async fn permits_come_back_on_drop_and_pass_to_the_oldest_waiter() {
        let gate = fixed(2, 2, 10_000);
        let a = gate.admit(0, 0).await.unwrap();
        let b = gate.admit(0, 0).await.unwrap();
        assert_eq!((a.in_flight, b.in_flight), (1, 2));
        let waiting = {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { gate.admit(0, 0).await.map(|p| p.in_flight) })
        };
        while gate.queued() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!gate.is_saturated(), "one place left in the queue");
        let second = {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { gate.admit(0, 0).await.is_ok() })
        };
        while gate.queued() < 2 {
            tokio::task::yield_now().await;
        }
        assert!(gate.is_saturated());
        assert_eq!(gate.admit(0, 0).await.err(), Some(Shed::QueueFull));
        drop(a);
        assert_eq!(waiting.await.unwrap(), Ok(2));
        drop(b);
        assert!(second.await.unwrap());
        let status = gate.status();
        assert_eq!((status.in_flight, status.queued), (0, 0));
        assert_eq!(status.shed.queue_full, 1);
    }

    #[tokio::test]
    async fn waiters_of_one_class_are_served_in_order_when_its_cost_falls() {
        let gate = fixed(1, 10, 10_000);
        let held = gate.admit(0, 0).await.unwrap();
        gate.record(0, 30_000_000, &held, 1, true);
        let wait = |name: &'static str| {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move {
                let permit = gate.admit(0, 0).await.unwrap();
                (name, permit)
            })
        };
        let first = wait("first");
        while gate.queued() < 1 {
            tokio::task::yield_now().await;
        }
        // The class's moving average falls (responses got faster) before the next one queues.
        for _ in 0..20 {
            gate.record(0, 1_000_000, &held, 2, true);
        }
        let second = wait("second");
        while gate.queued() < 2 {
            tokio::task::yield_now().await;
        }
        drop(held);
        let (name, permit) = tokio::select! {
            done = first => done.unwrap(),
            done = second => done.unwrap(),
        };
        assert_eq!(name, "first", "the earlier waiter of the class goes first");
        drop(permit);
    }

    #[tokio::test]
    async fn a_waiter_that_times_out_or_goes_away_leaves_the_queue() {
        let gate = fixed(1, 4, 50);
        let held = gate.admit(0, 0).await.unwrap();
        assert_eq!(gate.admit(0, 0).await.err(), Some(Shed::QueueTimeout));
        assert_eq!(gate.queued(), 0);
        drop(held);
        let status = gate.status();
        assert_eq!((status.in_flight, status.queued), (0, 0));
        assert_eq!(status.shed.queue_timeout, 1);
        // The waiter that goes away waits at a gate whose queue timeout a thread held back by a
        // busy machine cannot reach before the abort: it leaves because it was dropped.
        let gate = fixed(1, 4, 60_000);
        let held = gate.admit(0, 0).await.unwrap();
        let abandoned = {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { gate.admit(0, 0).await.is_ok() })
        };
        while gate.queued() == 0 {
            tokio::task::yield_now().await;
        }
        abandoned.abort();
        let _ = abandoned.await;
        assert_eq!(gate.queued(), 0, "the dropped waiter left its place");
        drop(held);
        let status = gate.status();
        assert_eq!((status.in_flight, status.queued), (0, 0));
        assert_eq!(status.shed.queue_timeout, 0);
    }

    #[tokio::test]
    async fn a_waiter_of_a_node_that_answers_nothing_is_told_it_stalled() {
        let gate = fixed(1, 4, 50);
        let held = gate.admit(0, 1).await.unwrap();
        // Nothing came back from the node all the time it waited: the node's fault, and not
        // counted as shed here (the request goes on to another node).
        assert_eq!(gate.admit(0, 2).await.err(), Some(Shed::Stalled));
        assert_eq!(gate.status().shed.queue_timeout, 0);
        // A first-byte timeout is no answer either.
        gate.record(0, 1_000, &held, 3, false);
        assert_eq!(gate.admit(0, 4).await.err(), Some(Shed::Stalled));
        drop(held);
        // The node answered while the next one waited: the wait was the load's. The answer
        // must come before the wait ends, so this gate's queue timeout is long enough that a
        // thread held back by a busy machine still gives it in time.
        let gate = fixed(1, 4, 500);
        let held = gate.admit(0, 1).await.unwrap();
        let waiting = {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { gate.admit(0, 5).await.err() })
        };
        while gate.queued() == 0 {
            tokio::task::yield_now().await;
        }
        gate.record(0, 1_000, &held, 6, true);
        assert_eq!(waiting.await.unwrap(), Some(Shed::QueueTimeout));
        assert_eq!(gate.status().shed.queue_timeout, 1);
        drop(held);
    }

    #[tokio::test]
    async fn waiters_leave_at_once_when_their_node_is_taken_out() {
        let gate = fixed(1, 4, 60_000);
        let held = gate.admit(0, 0).await.unwrap();
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let gate = Arc::clone(&gate);
                tokio::spawn(async move { gate.admit(0, 1).await.err() })
            })
            .collect();
        while gate.queued() < 2 {
            tokio::task::yield_now().await;
        }
        gate.evict_waiters();
        for waiter in waiters {
            assert_eq!(waiter.await.unwrap(), Some(Shed::Stalled));
        }
        assert_eq!(gate.queued(), 0);
        drop(held);
        let status = gate.status();
        assert_eq!((status.in_flight, status.shed.queue_timeout), (0, 0));
    }

    #[tokio::test]
    async fn the_queue_holds_only_what_the_node_can_start_in_time() {
        let gate = fixed(2, 100, 1000);
        let permit = gate.admit(0, 0).await.unwrap();
        // Responses take 500 ms: two slots start four requests a second, so four may wait
        // for one second.
        gate.record(0, 500_000_000, &permit, 1, true);
        assert_eq!(gate.status().queue_cap, 4);
    }

    #[tokio::test]
    async fn a_cheap_request_waits_ahead_of_costly_ones_and_displaces_them_when_full() {
        let gate = fixed(1, 2, 10_000);
        let held = gate.admit(0, 0).await.unwrap();
        // Class 1 costs 100 ms on this node, class 2 twenty (too much for the express lane).
        gate.record(1, 100_000_000, &held, 1, true);
        gate.record(2, 20_000_000, &held, 1, true);
        let wait = |class| {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { gate.admit(class, 0).await.map(|p| (class, p)) })
        };
        let costly = [wait(1), wait(1)];
        while gate.queued() < 2 {
            tokio::task::yield_now().await;
        }
        // The queue is full of costly waiters: a cheap one takes the last one's place…
        let cheap = wait(2);
        let displaced = loop {
            if let Some(i) = costly.iter().position(|c| c.is_finished()) {
                break i;
            }
            tokio::task::yield_now().await;
        };
        let [first, second] = costly;
        let (displaced, kept) = match displaced {
            0 => (first, second),
            _ => (second, first),
        };
        assert_eq!(displaced.await.unwrap().err(), Some(Shed::QueueFull));
        assert_eq!(gate.queued(), 2);
        // …and gets the next slot before the costly one that came earlier.
        drop(held);
        let (class, slot) = cheap.await.unwrap().unwrap();
        assert_eq!(class, 2);
        assert!(!kept.is_finished());
        assert_eq!(gate.status().shed.queue_full, 1);
        drop(slot);
        assert_eq!(kept.await.unwrap().unwrap().0, 1);
    }

    #[tokio::test]
    async fn much_cheaper_requests_take_the_express_lane() {
        let gate = fixed(2, 0, 1000);
        let a = gate.admit(1, 0).await.unwrap();
        let b = gate.admit(1, 0).await.unwrap();
        assert_eq!(
            gate.admit(2, 0).await.err(),
            Some(Shed::QueueFull),
            "class 2 is unknown"
        );
        // Class 1 costs 100 ms on this node, class 2 ten, class 3 five.
        gate.record(1, 100_000_000, &a, 1, true);
        gate.record(2, 10_000_000, &a, 1, true);
        gate.record(3, 5_000_000, &a, 1, true);
        assert_eq!(gate.admit(1, 0).await.err(), Some(Shed::QueueFull));
        let cheap = [
            gate.admit(2, 0).await.unwrap(),
            gate.admit(3, 0).await.unwrap(),
        ];
        assert!(cheap.iter().all(|p| p.express));
        assert_eq!(
            gate.admit(3, 0).await.err(),
            Some(Shed::QueueFull),
            "express is full too"
        );
        let status = gate.status();
        assert_eq!((status.in_flight, status.express), (4, 2));
        drop(cheap);
        drop((a, b));
        assert_eq!(gate.status().in_flight, 0);
    }

    #[tokio::test]
    async fn one_request_of_a_class_of_unknown_cost_scouts_past_the_queue() {
        let gate = fixed(1, 5, 10_000);
        let held = gate.admit(1, 0).await.unwrap();
        let wait = |class| {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { gate.admit(class, 0).await })
        };
        // Nothing is known of the node yet: nobody scouts, class 2 waits.
        let unknown_early = wait(2);
        while gate.queued() < 1 {
            tokio::task::yield_now().await;
        }
        // Class 1 costs 100 ms here; class 2 is still unknown, so one of it scouts…
        gate.record(1, 100_000_000, &held, 1, true);
        let scout = gate.admit(2, 0).await.unwrap();
        assert!(scout.express && scout.scout);
        // …and only one: the next waits like everybody else.
        let second = wait(2);
        while gate.queued() < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!((gate.status().in_flight, gate.status().express), (2, 1));
        drop(scout);
        let next_scout = gate.admit(3, 0).await.unwrap();
        assert!(next_scout.scout, "the scout's slot is free again");
        drop(next_scout);
        drop(held);
        let first = unknown_early.await.unwrap().unwrap();
        assert!(!first.express);
        drop(first);
        drop(second.await.unwrap().unwrap());
        let status = gate.status();
        assert_eq!((status.in_flight, status.express, status.queued), (0, 0, 0));
    }

    #[tokio::test]
    async fn a_class_still_out_costs_at_least_its_age() {
        const MS: u64 = 1_000_000;
        let gate = fixed(1, 5, 10_000);
        // A CGI (class 1) goes out at 0 and has not come back; a static file (class 2) took
        // 5 ms.
        let cgi = gate.admit(1, 0).await.unwrap();
        gate.record(2, 5 * MS, &cgi, 1, true);
        // At 200 ms the CGI has cost at least 200 ms, forty times the static file: the static
        // file takes the express lane instead of waiting behind it.
        let fast = gate.admit(2, 200 * MS).await.unwrap();
        assert!(fast.express && !fast.scout);
        drop(fast);
        // The CGI ends without a sample (its client left): its age no longer counts, so the
        // next static file finds nothing costlier than itself and waits for a slot.
        let another_cgi = gate.admit(1, 300 * MS);
        drop(cgi);
        let another_cgi = another_cgi.await.unwrap();
        let waiting = {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { gate.admit(2, 300 * MS).await })
        };
        while gate.queued() < 1 {
            tokio::task::yield_now().await;
        }
        drop(another_cgi);
        assert!(!waiting.await.unwrap().unwrap().express);
        assert_eq!(gate.status().in_flight, 0);
    }

    #[tokio::test]
    async fn off_admits_everything_and_holds_nothing() {
        let gate = Arc::new(Gate::new(
            &Admission {
                limit: LimitMode::Off,
                ..Admission::default()
            },
            1,
            0,
        ));
        let permits: Vec<Permit> = futures_admit(&gate, 1000).await;
        assert_eq!(permits.len(), 1000);
        assert!(!gate.is_saturated());
        assert_eq!(gate.status().in_flight, 0);
    }

    #[tokio::test]
    async fn a_shared_limit_and_queue_are_this_switchs_part() {
        // limit 6 and queue 4 among 3 switches: 2 in flight and 1 waiting here.
        let gate = fixed(6, 4, 60_000);
        gate.share_among(3);
        assert_eq!(gate.limit(), 2);
        let held = futures_admit(&gate, 2).await;
        assert!(!gate.has_free_slot());
        let waiting = {
            let gate = Arc::clone(&gate);
            tokio::spawn(async move { gate.admit(0, 0).await.map(|_| ()) })
        };
        while gate.queued() == 0 {
            tokio::task::yield_now().await;
        }
        assert_eq!(gate.admit(0, 0).await.err(), Some(Shed::QueueFull));
        // Alone again: the whole limit, and the waiter gets its slot at once.
        gate.share_among(1);
        assert_eq!(gate.limit(), 6);
        assert_eq!(waiting.await.unwrap(), Ok(()));
        drop(held);
    }

    async fn futures_admit(gate: &Arc<Gate>, n: usize) -> Vec<Permit> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(gate.admit(0, 0).await.unwrap());
        }
        out
    }
}
