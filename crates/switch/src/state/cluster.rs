//! The live cluster: nodes with their counters, the classifier and the policy built from one
//! configuration. A reload or a membership change builds a new `Cluster` and swaps it in whole;
//! nodes that stay keep their runtime (counters, health, drain) and the new policy takes over
//! what the old one learned about them ([`capstan_core::carry_over`]).
//!
//! A node takes new requests only while nothing says it is out: it is not draining, its active
//! checks pass, passive health has not backed it off, the outlier detector has not ejected it
//! ([`crate::state::outlier`]), and its load reports have not gone silent. Each node also has an
//! admission gate ([`crate::state::admission`]); a node at its concurrency limit with a full queue is
//! hidden from the policy for that pick while another node has room. For `health.slow_start` after it joins or comes back, the view offers it to the
//! policy on a share of the picks that ramps from 10 % to 100 % (see [`NodeRuntime::offered`]).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use capstan_core::{
    Classifier, ClusterView, Gathered, Needs, NodeId, NodeState, Policy, TierState, WeightSource,
};
use hdrhistogram::Histogram;
use http::uri::Authority;
use http::HeaderValue;

use crate::config::{Admission, Config, ConfigError, Health, NodeConfig};
use crate::state::admission::Gate;
use crate::state::health::CheckState;
use crate::state::outlier::{HasOutlier, OutlierState};

/// Monotonic time since the switch started, the clock the policies see.
#[derive(Clone, Copy, Debug)]
pub struct Epoch(Instant);

impl Epoch {
    pub(crate) fn new() -> Self {
        Epoch(Instant::now())
    }
    pub(crate) fn now_nanos(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
    /// `at` in this clock (0 for an instant before the switch started).
    pub(crate) fn nanos_at(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.0).as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Default for Epoch {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a request to a node failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FailureKind {
    Connect,
    Timeout,
    Other,
}

/// One back-end node and what the switch has seen of it.
#[derive(Debug)]
pub struct NodeRuntime {
    pub config: NodeConfig,
    pub authority: Authority,
    pub name_header: HeaderValue,
    pub active: AtomicU32,
    /// Responses received from the node (any status).
    pub served: AtomicU64,
    /// Requests answered with a redirect to this node (`[redirect]`).
    pub redirects: AtomicU64,
    pub connect_errors: AtomicU64,
    pub timeout_errors: AtomicU64,
    pub other_errors: AtomicU64,
    /// Requests sent to another node after this one failed them (connect failure, or the
    /// connection closed before a response head).
    pub retries: AtomicU64,
    consecutive_connect_failures: AtomicU32,
    /// `Epoch` nanoseconds until which passive health keeps the node out.
    down_until: AtomicU64,
    /// Requests placed per class, indexed by class id.
    pub class_placed: Vec<AtomicU64>,
    /// Response times in microseconds, from dispatch to the end of the body.
    pub latency_us: Mutex<Histogram<u64>>,
    /// Moving average of the same latencies (weight [`LATENCY_EWMA_WEIGHT`] on each new one),
    /// microseconds as `f64` bits; 0 before the first. What the tier's gossip tells the peers.
    latency_ewma_us: AtomicU64,
    /// What the tier's peers last said about the node, summed with this switch's counts once
    /// per gossip period (`crate::control::gossip`); unknown without a tier. A pick reads it
    /// without a lock ([`crate::state::tier_slot`]).
    tier: crate::state::tier_slot::TierSlot,
    /// Out because the tier's gossip says enough other switches have it out
    /// (`tier.ejection`, set once per gossip period by `crate::control::gossip`).
    tier_out: AtomicBool,
    /// What the gatherer last published for the node (gathered state, derived weight, silence).
    /// Swapped whole once per gathering round; a pick reads it without a lock.
    feedback: ArcSwap<Feedback>,
    /// Load reports gathered, and gathering attempts that failed.
    pub load_reports: AtomicU64,
    pub load_report_failures: AtomicU64,
    /// No new requests; in-flight ones finish (drained, or removed from the cluster).
    draining: AtomicBool,
    /// Active health checks.
    pub check: CheckState,
    /// `Epoch` nanoseconds when the node joined or came back; 0 when it has been in since the
    /// switch started. Slow start counts from here (or from the end of a passive back-off).
    returned_at: AtomicU64,
    /// `health.slow_start` of the configuration in force, nanoseconds (0: off).
    slow_start_nanos: AtomicU64,
    /// Concurrency limit and queue; shared with the same node rebuilt by a reload, so that
    /// requests in flight keep counting against it.
    pub admission: Arc<Gate>,
    /// Failures in a row and ejections.
    pub outlier: OutlierState,
}

/// Why a node takes no new requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OutReason {
    Draining,
    CheckFailed,
    BackedOff,
    Ejected,
    /// Other switches of the tier have it out (`tier.ejection`).
    TierEjected,
    Silent,
}

impl OutReason {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            OutReason::Draining => "draining",
            OutReason::CheckFailed => "check-down",
            OutReason::BackedOff => "backed-off",
            OutReason::Ejected => "ejected",
            OutReason::TierEjected => "tier-ejected",
            OutReason::Silent => "silent",
        }
    }
}

/// Weight of each new latency in the node's moving average: about the last ten requests.
const LATENCY_EWMA_WEIGHT: f64 = 0.1;

/// Share of the picks a slow-starting node is offered on at first: enough to warm its caches
/// and connections, too little to swamp it.
pub(crate) const SLOW_START_FLOOR: f64 = 0.1;

impl NodeRuntime {
    fn new(
        config: NodeConfig,
        classes: usize,
        admission: &Admission,
        now_nanos: u64,
    ) -> Result<Self, String> {
        let authority = Authority::try_from(config.address.to_string())
            .map_err(|e| format!("node `{}`: {e}", config.name))?;
        let name_header = HeaderValue::from_str(&config.name)
            .map_err(|_| format!("node name `{}` is not valid in a header", config.name))?;
        Ok(NodeRuntime {
            config,
            authority,
            name_header,
            active: AtomicU32::new(0),
            served: AtomicU64::new(0),
            redirects: AtomicU64::new(0),
            connect_errors: AtomicU64::new(0),
            timeout_errors: AtomicU64::new(0),
            other_errors: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            consecutive_connect_failures: AtomicU32::new(0),
            down_until: AtomicU64::new(0),
            class_placed: (0..classes).map(|_| AtomicU64::new(0)).collect(),
            latency_us: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"),
            ),
            latency_ewma_us: AtomicU64::new(0),
            tier: crate::state::tier_slot::TierSlot::default(),
            tier_out: AtomicBool::new(false),
            feedback: ArcSwap::from_pointee(Feedback::default()),
            load_reports: AtomicU64::new(0),
            load_report_failures: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            check: CheckState::default(),
            returned_at: AtomicU64::new(0),
            slow_start_nanos: AtomicU64::new(0),
            admission: Arc::new(Gate::new(admission, classes, now_nanos)),
            outlier: OutlierState::default(),
        })
    }

    /// Takes over what decides whether `old` (the same node, rebuilt for a new weight or class
    /// list) takes requests: drain, checks, passive back-off, ejection, gathered state, slow
    /// start, and its admission gate; and its counters.
    fn inherit(&mut self, old: &NodeRuntime) {
        self.admission = Arc::clone(&old.admission);
        self.outlier.copy_from(&old.outlier);
        self.draining
            .store(old.draining.load(Ordering::Relaxed), Ordering::Relaxed);
        self.tier_out
            .store(old.tier_out.load(Ordering::Relaxed), Ordering::Relaxed);
        self.check.copy_from(&old.check);
        for (to, from) in [
            (&self.down_until, &old.down_until),
            (&self.returned_at, &old.returned_at),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.consecutive_connect_failures.store(
            old.consecutive_connect_failures.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
        // Its counters go on (a new weight must not reset them in `/metrics`); what the old
        // runtime's requests in flight count after this is not carried.
        for (to, from) in [
            (&self.served, &old.served),
            (&self.redirects, &old.redirects),
            (&self.connect_errors, &old.connect_errors),
            (&self.timeout_errors, &old.timeout_errors),
            (&self.other_errors, &old.other_errors),
            (&self.retries, &old.retries),
            (&self.load_reports, &old.load_reports),
            (&self.load_report_failures, &old.load_report_failures),
        ] {
            to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
        }
        if self.class_placed.len() == old.class_placed.len() {
            for (to, from) in self.class_placed.iter().zip(&old.class_placed) {
                to.store(from.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        self.publish(old.feedback());
        self.tier.store(old.tier.load());
        self.latency_ewma_us.store(
            old.latency_ewma_us.load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }

    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Starts (`true`) or ends a drain; ending one counts as coming back (slow start).
    pub(crate) fn set_draining(&self, draining: bool, now_nanos: u64) {
        let was = self.draining.swap(draining, Ordering::Relaxed);
        if draining && !was {
            self.admission.evict_waiters();
        }
        if was && !draining {
            self.came_back(now_nanos);
        }
    }

    /// The node joined or came back at `now_nanos`: slow start begins.
    pub(crate) fn came_back(&self, now_nanos: u64) {
        self.returned_at.store(now_nanos.max(1), Ordering::Relaxed);
    }

    /// Why the node takes no new requests at `now_nanos`, or `None` when it takes them.
    pub(crate) fn out_reason(&self, now_nanos: u64) -> Option<OutReason> {
        self.out_reason_with(&self.feedback.load(), now_nanos)
    }

    fn out_reason_with(&self, feedback: &Feedback, now_nanos: u64) -> Option<OutReason> {
        if self.is_draining() {
            Some(OutReason::Draining)
        } else if !self.check.is_up() {
            Some(OutReason::CheckFailed)
        } else if !self.is_up(now_nanos) {
            Some(OutReason::BackedOff)
        } else if self.outlier.is_ejected(now_nanos) {
            Some(OutReason::Ejected)
        } else if self.tier_out.load(Ordering::Relaxed) {
            Some(OutReason::TierEjected)
        } else if feedback.silent {
            Some(OutReason::Silent)
        } else {
            None
        }
    }

    /// While the node slow-starts: how much longer, and the share of picks it is offered on.
    pub(crate) fn slow_start(&self, now_nanos: u64) -> Option<(Duration, f64)> {
        let length = self.slow_start_nanos.load(Ordering::Relaxed);
        // A passive back-off or an ejection ends without an event; its end is a return like
        // any other.
        let since = self
            .returned_at
            .load(Ordering::Relaxed)
            .max(self.down_until.load(Ordering::Relaxed))
            .max(self.outlier.ejected_until());
        if length == 0 || since == 0 || now_nanos < since {
            return None;
        }
        let elapsed = now_nanos - since;
        (elapsed < length).then(|| {
            let share =
                SLOW_START_FLOOR + (1.0 - SLOW_START_FLOOR) * elapsed as f64 / length as f64;
            (Duration::from_nanos(length - elapsed), share)
        })
    }

    /// Whether the view offers node `id` to the policy for the pick at `now_nanos`: it takes
    /// requests and, while slow-starting, this pick falls in its share. The draw hashes the
    /// pick's time and the node id, so every look at the node within one pick agrees (a policy
    /// may read a node several times per pick) and successive picks draw independently.
    ///
    /// Every policy honours this, as it honours availability: round robin, WRR and CAP skip
    /// the node on the other picks, least-connections and LARD see it only on its share. A
    /// LARD target on a slow-starting node that is not offered moves like one on a node that
    /// is out, so slow start costs some locality while it lasts.
    #[cfg(test)]
    pub(crate) fn offered(&self, id: NodeId, now_nanos: u64) -> bool {
        let feedback = self.feedback.load();
        self.out_reason_with(&feedback, now_nanos).is_none() && self.draw(id, now_nanos)
    }

    fn draw(&self, id: NodeId, now_nanos: u64) -> bool {
        match self.slow_start(now_nanos) {
            None => true,
            Some((_, share)) => {
                let bits = capstan_core::mix64(
                    now_nanos ^ (id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                );
                let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
                unit < share
            }
        }
    }

    pub(crate) fn is_up(&self, now_nanos: u64) -> bool {
        now_nanos >= self.down_until.load(Ordering::Relaxed)
    }

    /// Counts a failure; connect failures past the threshold take the node out for the back-off.
    /// The counter is not reset when the node is taken out, so one more failure after the
    /// back-off takes it out again at once.
    pub(crate) fn record_failure(&self, kind: FailureKind, now_nanos: u64, health: &Health) {
        match kind {
            FailureKind::Connect => {
                self.connect_errors.fetch_add(1, Ordering::Relaxed);
                let failures = self
                    .consecutive_connect_failures
                    .fetch_add(1, Ordering::Relaxed)
                    + 1;
                if failures >= health.fail_threshold {
                    let backoff = u64::try_from(health.backoff.as_nanos()).unwrap_or(u64::MAX);
                    self.down_until
                        .store(now_nanos.saturating_add(backoff), Ordering::Relaxed);
                    self.admission.evict_waiters();
                    tracing::warn!(
                        node = %self.config.name,
                        failures,
                        "node taken out after consecutive connect failures for {}",
                        humantime::format_duration(health.backoff)
                    );
                }
            }
            FailureKind::Timeout => {
                self.timeout_errors.fetch_add(1, Ordering::Relaxed);
            }
            FailureKind::Other => {
                self.other_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn record_response(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
        if self.consecutive_connect_failures.load(Ordering::Relaxed) != 0 {
            self.consecutive_connect_failures
                .store(0, Ordering::Relaxed);
        }
    }

    /// The utilisation the node last reported (busiest resource), 0 when it never has.
    pub(crate) fn load(&self) -> f64 {
        self.feedback.load().gathered.load()
    }

    /// What the gatherer last published for the node.
    pub(crate) fn feedback(&self) -> Feedback {
        **self.feedback.load()
    }

    pub(crate) fn publish(&self, feedback: Feedback) {
        self.feedback.store(Arc::new(feedback));
    }

    pub(crate) fn record_latency(&self, micros: u64) {
        if let Ok(mut h) = self.latency_us.lock() {
            h.saturating_record(micros.max(1));
            // Under the histogram's lock, so concurrent updates do not lose one another.
            let old = f64::from_bits(self.latency_ewma_us.load(Ordering::Relaxed));
            let new = match old > 0.0 {
                true => old + LATENCY_EWMA_WEIGHT * (micros as f64 - old),
                false => micros.max(1) as f64,
            };
            self.latency_ewma_us.store(new.to_bits(), Ordering::Relaxed);
        }
    }

    /// The moving average of the node's latency, microseconds (0 before its first response).
    pub(crate) fn latency_ewma_us(&self) -> f64 {
        f64::from_bits(self.latency_ewma_us.load(Ordering::Relaxed))
    }

    /// What the tier last shared about the node (unknown without a tier or its gossip).
    pub(crate) fn tier_state(&self) -> TierState {
        self.tier.load()
    }

    /// Publishes the tier-wide state the gossip summed for the node.
    pub(crate) fn publish_tier(&self, state: TierState) {
        self.tier.store(state);
    }

    /// Whether the node is out by the tier's say-so (`tier.ejection`).
    pub(crate) fn is_tier_out(&self) -> bool {
        self.tier_out.load(Ordering::Relaxed)
    }

    /// Takes the node out by the tier's say-so, or lets it back; true when that changed.
    pub(crate) fn set_tier_out(&self, out: bool) -> bool {
        let was = self.tier_out.swap(out, Ordering::Relaxed);
        if out && !was {
            self.admission.evict_waiters();
        }
        was != out
    }

    /// This switch's live count of the node as a policy sees it: in flight, and waiting in its
    /// admission queue (load committed to the node as much).
    pub(crate) fn live_active(&self) -> u32 {
        self.active
            .load(Ordering::Relaxed)
            .saturating_add(self.admission.queued())
    }
}

impl HasOutlier for NodeRuntime {
    fn outlier(&self) -> &OutlierState {
        &self.outlier
    }

    fn out_by_tier(&self) -> bool {
        self.is_tier_out()
    }
}

/// The gathered side of a node's state as the gatherer publishes it after each round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Feedback {
    pub gathered: Gathered,
    /// Weight derived from gathered state (used when the policy asks for derived weights).
    pub weight: u32,
    /// The node's reports stopped for longer than `load.silent_after`: it is unavailable.
    pub silent: bool,
}

impl Default for Feedback {
    fn default() -> Self {
        Feedback {
            gathered: Gathered::default(),
            weight: 1,
            silent: false,
        }
    }
}

/// Everything one configuration resolves to.
pub struct Cluster {
    /// 1 at start, one more at each reload or membership change.
    pub generation: u64,
    /// The configuration it was built from.
    pub config: Arc<Config>,
    /// The request classifier of its classes and rules.
    pub classifier: Classifier,
    /// The dispatching policy.
    pub policy: Box<dyn Policy>,
    /// What the policy reads (its own declaration), so the gatherer knows what to feed it.
    pub needs: Needs,
    /// Every node's runtime, by node id.
    pub nodes: Vec<Arc<NodeRuntime>>,
    /// Each class's name as a header value (`X-Capstan-Class`, the access log), by class id.
    pub class_headers: Vec<HeaderValue>,
    /// `timeouts.first_byte` of each class, by class id.
    pub first_byte: Vec<Duration>,
    /// TLS settings of the nodes reached over TLS (see `crate::upstream::tls`).
    pub node_tls: Arc<crate::state::node_tls::TlsToNodes>,
    /// The cache's RFC 9111 rules (`[cache]`), built once here so a hit borrows them.
    pub cache_rules: Option<capstan_cache::rfc::CacheRules>,
}

impl Cluster {
    /// Builds a cluster at `now_nanos`. With `previous` (a reload or a membership change):
    /// nodes whose name, address and weight (and the class list) are unchanged keep their
    /// runtime, so counters, health and drain carry over; a node with the same name and address
    /// but a new weight keeps its health and drain; a node new to the list joins now (slow
    /// start); the new policy takes over what the old one learned about nodes that stay.
    pub fn build(
        config: Config,
        generation: u64,
        previous: Option<&Cluster>,
        now_nanos: u64,
    ) -> Result<Cluster, ConfigError> {
        let plain = |message: String| ConfigError {
            file: config.source.as_ref().map(|p| p.display().to_string()),
            line: 0,
            column: 0,
            message,
        };
        let classifier = config.classifier().map_err(|e| plain(e.to_string()))?;
        let policy = config
            .build_policy_for(&classifier)
            .map_err(|e| plain(format!("policy {}: {e}", config.policy.name())))?;
        let nodes = node_runtimes(&config, &classifier, previous, now_nanos).map_err(plain)?;
        let class_headers = classifier
            .classes()
            .iter()
            .map(|c| HeaderValue::from_str(&c.name))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| plain("a class name is not valid in a header".into()))?;
        if let Some(previous) = previous {
            let old_to_new: Vec<Option<NodeId>> = previous
                .nodes
                .iter()
                .map(|old| nodes.iter().position(|n| same_node(&n.config, &old.config)))
                .collect();
            capstan_core::carry_over(&*policy, &*previous.policy, &old_to_new);
        }
        let checks_changed =
            previous.is_none_or(|p| p.config.health.check_path != config.health.check_path);
        let slow_start = u64::try_from(config.health.slow_start.as_nanos()).unwrap_or(u64::MAX);
        for node in &nodes {
            if checks_changed {
                node.check.reset();
            }
            node.slow_start_nanos.store(slow_start, Ordering::Relaxed);
            node.admission
                .configure(&config.admission, classifier.classes().len(), now_nanos);
        }
        let first_byte = classifier
            .classes()
            .iter()
            .map(|c| {
                config
                    .timeouts
                    .first_byte_by_class
                    .get(&c.name)
                    .map_or(config.timeouts.first_byte, |t| t.into_inner())
            })
            .collect();
        let node_tls = Arc::new(crate::state::node_tls::TlsToNodes::of(&config.nodes));
        Ok(Cluster {
            node_tls,
            cache_rules: config.cache.as_ref().map(|c| c.rules()),
            generation,
            config: Arc::new(config),
            classifier,
            needs: policy.needs(),
            policy,
            nodes,
            class_headers,
            first_byte,
        })
    }

    /// The node called `name`, with its id.
    pub(crate) fn node_named(&self, name: &str) -> Option<(NodeId, &Arc<NodeRuntime>)> {
        self.nodes
            .iter()
            .enumerate()
            .find(|(_, n)| n.config.name == name)
    }
}

/// The same back-end: a node keeps its identity (and what policies learned about it) while its
/// name and address stay; a new weight does not make it another node.
fn same_node(a: &NodeConfig, b: &NodeConfig) -> bool {
    a.name == b.name && a.address == b.address
}

/// The runtime of every configured node: reused, rebuilt from the same node's, or new.
fn node_runtimes(
    config: &Config,
    classifier: &Classifier,
    previous: Option<&Cluster>,
    now_nanos: u64,
) -> Result<Vec<Arc<NodeRuntime>>, String> {
    let classes = classifier.classes();
    let classes_unchanged = previous.is_some_and(|p| p.classifier.classes() == classes);
    // By name, so a reload of a large cluster stays linear.
    let by_name: std::collections::HashMap<&str, &Arc<NodeRuntime>> = previous
        .map(|p| {
            p.nodes
                .iter()
                .map(|n| (n.config.name.as_str(), n))
                .collect()
        })
        .unwrap_or_default();
    let mut nodes = Vec::with_capacity(config.nodes.len());
    for node in &config.nodes {
        let before = by_name
            .get(node.name.as_str())
            .copied()
            .filter(|n| same_node(&n.config, node));
        let runtime = match before {
            Some(old) if classes_unchanged && old.config == *node => Arc::clone(old),
            Some(old) => {
                let mut fresh =
                    NodeRuntime::new(node.clone(), classes.len(), &config.admission, now_nanos)?;
                fresh.inherit(old);
                Arc::new(fresh)
            }
            None => {
                let fresh =
                    NodeRuntime::new(node.clone(), classes.len(), &config.admission, now_nanos)?;
                if previous.is_some() {
                    fresh.came_back(now_nanos);
                }
                Arc::new(fresh)
            }
        };
        nodes.push(runtime);
    }
    Ok(nodes)
}

/// The cluster as a policy sees it at one instant, optionally hiding one node (the one a retry
/// must avoid).
pub(crate) struct LiveView<'a> {
    pub now_nanos: u64,
    pub nodes: &'a [Arc<NodeRuntime>],
    pub exclude: Option<NodeId>,
    /// Where weights come from (the policy's declared needs).
    pub weights: WeightSource,
    /// Which nodes the admission gates hide from the pick (see [`Hide`]).
    pub hide: Hide,
    /// The tier this switch is part of: which dispatcher of how many it is
    /// ([`ClusterView::dispatcher`]), worked out only when a policy asks.
    pub tier: Option<&'a crate::state::tier::Tier>,
}

/// Which nodes a pick skips because of their admission gate. The switch picks with
/// [`Hide::Full`] first, then [`Hide::Saturated`], then [`Hide::Nothing`]: a request waits in a
/// node's queue only when no node has a free slot (HAProxy sends a request to a server's queue
/// only when every server is at its `maxconn`), and is shed only when every queue is full too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hide {
    /// Every node that is up may be picked.
    Nothing,
    /// Nodes at their limit with a full queue (a request sent there would be shed).
    Saturated,
    /// Nodes at their limit (a request sent there would wait in the queue, or be shed).
    Full,
}

impl ClusterView for LiveView<'_> {
    fn now_nanos(&self) -> u64 {
        self.now_nanos
    }

    fn node_count(&self) -> usize {
        self.nodes.len()
    }

    fn node(&self, id: NodeId) -> NodeState {
        let node = &self.nodes[id];
        let feedback = node.feedback.load();
        NodeState {
            available: self.exclude != Some(id)
                && !match self.hide {
                    Hide::Nothing => false,
                    Hide::Saturated => node.admission.is_saturated(),
                    Hide::Full => !node.admission.has_free_slot(),
                }
                && node.out_reason_with(&feedback, self.now_nanos).is_none()
                && node.draw(id, self.now_nanos),
            weight: match self.weights {
                WeightSource::Configured => node.config.weight,
                _ => feedback.weight,
            },
            active: node.live_active(),
            gathered: feedback.gathered,
            tier: node.tier_state(),
        }
    }

    fn dispatcher(&self) -> capstan_core::Dispatcher {
        self.tier
            .map_or(capstan_core::Dispatcher::ALONE, |t| t.dispatcher())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    fn config(nodes: &[(&str, u16, u32)], policy: &str) -> Config {
        let nodes = nodes
            .iter()
            .map(|&(name, port, weight)| NodeConfig {
                name: name.into(),
                address: ([127, 0, 0, 1], port).into(),
                weight,
                public_url: None,
                report_address: None,
                tls: None,
                protocol: Default::default(),
            })
            .collect();
        let mut config = Config::from_parts(vec!["127.0.0.1:0".parse().unwrap()], nodes);
        config.policy = capstan_core::PolicySpec::with_defaults(policy).unwrap();
        config
    }

    fn pick(cluster: &Cluster, key: &str, now_nanos: u64) -> String {
        let view = LiveView {
            now_nanos,
            nodes: &cluster.nodes,
            exclude: None,
            weights: cluster.needs.weights,
            hide: Hide::Full,
            tier: None,
        };
        let req = crate::state::request::request_info(0, key);
        let id = cluster.policy.pick(&req, &view).expect("a node");
        cluster.nodes[id].config.name.clone()
    }

    #[test]
    fn a_rebuild_keeps_runtimes_and_lard_targets_of_nodes_that_stay() {
        let first =
            Cluster::build(config(&[("a", 1, 1), ("b", 2, 1)], "lard"), 1, None, 0).unwrap();
        let keys: Vec<String> = (0..20).map(|i| format!("/k{i}")).collect();
        let before: Vec<String> = keys.iter().map(|k| pick(&first, k, 1)).collect();
        first.nodes[0].set_draining(true, 1);
        // c joins in front of the others, b's weight changes: ids shift, identities do not.
        let next = config(&[("c", 3, 1), ("a", 1, 1), ("b", 2, 5)], "lard");
        let second = Cluster::build(next, 2, Some(&first), 10 * SECOND).unwrap();
        assert!(
            Arc::ptr_eq(&first.nodes[0], &second.nodes[1]),
            "a is reused"
        );
        assert!(
            !Arc::ptr_eq(&first.nodes[1], &second.nodes[2]),
            "b is rebuilt"
        );
        assert!(second.nodes[1].is_draining(), "a's drain carries over");
        first.nodes[0].set_draining(false, 10 * SECOND);
        assert_eq!(
            second.nodes[0].slow_start(10 * SECOND),
            None,
            "slow start is off"
        );
        for (key, was) in keys.iter().zip(&before) {
            assert_eq!(&pick(&second, key, 10 * SECOND), was, "{key}");
        }
    }

    #[test]
    fn a_joining_node_slow_starts_and_its_share_ramps_from_a_tenth() {
        let mut with_slow_start = config(&[("a", 1, 1)], "round-robin");
        with_slow_start.health.slow_start = std::time::Duration::from_secs(10);
        let first = Cluster::build(with_slow_start.clone(), 1, None, 0).unwrap();
        assert_eq!(
            first.nodes[0].slow_start(SECOND),
            None,
            "nodes at start do not"
        );
        let mut next = with_slow_start;
        next.nodes.push(NodeConfig {
            name: "b".into(),
            address: "127.0.0.1:2".parse().unwrap(),
            weight: 1,
            public_url: None,
            report_address: None,
            tls: None,
            protocol: Default::default(),
        });
        let second = Cluster::build(next, 2, Some(&first), 100 * SECOND).unwrap();
        let b = &second.nodes[1];
        let (left, share) = b.slow_start(100 * SECOND).unwrap();
        assert_eq!((left, share), (std::time::Duration::from_secs(10), 0.1));
        let (_, share) = b.slow_start(105 * SECOND).unwrap();
        assert!((share - 0.55).abs() < 1e-9, "{share}");
        assert_eq!(b.slow_start(110 * SECOND), None);
        // The draw offers it on about its share of the picks, on a spread of pick times.
        let offered = |at: u64| {
            (0..10_000u64)
                .filter(|i| b.offered(1, at + i * 997))
                .count()
        };
        let early = offered(100 * SECOND);
        assert!((800..1300).contains(&early), "{early}");
        assert_eq!(offered(110 * SECOND), 10_000);
        // Undrained: it comes back, so it slow-starts again.
        b.set_draining(true, 200 * SECOND);
        assert!(!b.offered(1, 200 * SECOND));
        assert_eq!(b.out_reason(200 * SECOND), Some(OutReason::Draining));
        b.set_draining(false, 300 * SECOND);
        assert!(b.slow_start(301 * SECOND).is_some());
    }

    #[test]
    fn the_end_of_a_passive_back_off_starts_slow_start() {
        let mut c = config(&[("a", 1, 1), ("b", 2, 1)], "round-robin");
        c.health.slow_start = std::time::Duration::from_secs(10);
        c.health.fail_threshold = 1;
        c.health.backoff = std::time::Duration::from_secs(5);
        let cluster = Cluster::build(c, 1, None, 0).unwrap();
        let a = &cluster.nodes[0];
        a.record_failure(FailureKind::Connect, SECOND, &cluster.config.health);
        assert_eq!(a.out_reason(2 * SECOND), Some(OutReason::BackedOff));
        assert_eq!(a.out_reason(6 * SECOND), None);
        let (_, share) = a.slow_start(6 * SECOND).unwrap();
        assert!((share - 0.1).abs() < 1e-9, "{share}");
    }

    #[test]
    fn checks_that_change_path_or_stop_forget_their_results() {
        let mut c = config(&[("a", 1, 1)], "round-robin");
        c.health.check_path = Some("/health".into());
        let first = Cluster::build(c.clone(), 1, None, 0).unwrap();
        let failed = crate::state::health::CheckResult {
            passed: false,
            status: None,
            error: Some("refused".into()),
        };
        first.nodes[0].check.record(&failed, 1, 1);
        assert_eq!(first.nodes[0].out_reason(0), Some(OutReason::CheckFailed));
        let same = Cluster::build(c.clone(), 2, Some(&first), 0).unwrap();
        assert!(
            !same.nodes[0].check.is_up(),
            "same checks: the result stands"
        );
        c.health.check_path = None;
        let off = Cluster::build(c, 3, Some(&same), 0).unwrap();
        assert!(
            off.nodes[0].check.is_up(),
            "no checks: nothing keeps the node out"
        );
    }

    #[test]
    fn the_view_shows_a_policy_what_the_tier_shared() {
        let mut shared = config(&[("a", 1, 1), ("b", 2, 1)], "least-connections");
        shared.policy = shared
            .policy
            .with_param("view", toml::Value::String("shared".into()))
            .unwrap();
        let cluster = Cluster::build(shared, 1, None, 0).unwrap();
        let picks = |now| -> Vec<String> { (0..4).map(|_| pick(&cluster, "/", now)).collect() };
        // No tier state: local counts, all 0, so ties rotate over both.
        let local = picks(SECOND);
        assert!(local.contains(&"a".to_string()) && local.contains(&"b".to_string()));
        // The other switches have 5 requests on a: b has fewer across the tier, every time.
        cluster.nodes[0].publish_tier(TierState {
            at_nanos: Some(SECOND),
            active: 5,
            ..TierState::default()
        });
        assert_eq!(cluster.nodes[0].tier_state().active, 5);
        assert!(picks(SECOND).iter().all(|n| n == "b"));
        // Older than the policy's max_age_ms (1 s): ignored again.
        assert!(picks(3 * SECOND).contains(&"a".to_string()));
    }
}
