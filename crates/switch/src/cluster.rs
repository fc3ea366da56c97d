//! The live cluster: nodes with their counters, the classifier and the policy built from one
//! configuration. A reload builds a new `Cluster` and swaps it in whole.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use arc_swap::ArcSwap;
use capstan_core::{
    Classifier, ClusterView, Gathered, Needs, NodeId, NodeState, Policy, WeightSource,
};
use hdrhistogram::Histogram;
use http::uri::Authority;
use http::HeaderValue;

use crate::config::{Config, ConfigError, Health, NodeConfig};

/// Monotonic time since the switch started, the clock the policies see.
#[derive(Clone, Copy, Debug)]
pub struct Epoch(Instant);

impl Epoch {
    pub fn new() -> Self {
        Epoch(Instant::now())
    }
    pub fn now_nanos(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl Default for Epoch {
    fn default() -> Self {
        Self::new()
    }
}

/// Why a request to a node failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
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
    /// What the gatherer last published for the node (gathered state, derived weight, silence).
    /// Swapped whole once per gathering round; a pick reads it without a lock.
    feedback: ArcSwap<Feedback>,
    /// Load reports gathered, and gathering attempts that failed.
    pub load_reports: AtomicU64,
    pub load_report_failures: AtomicU64,
}

impl NodeRuntime {
    fn new(config: NodeConfig, classes: usize) -> Result<Self, String> {
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
            feedback: ArcSwap::from_pointee(Feedback::default()),
            load_reports: AtomicU64::new(0),
            load_report_failures: AtomicU64::new(0),
        })
    }

    pub fn is_up(&self, now_nanos: u64) -> bool {
        now_nanos >= self.down_until.load(Ordering::Relaxed)
    }

    /// Counts a failure; connect failures past the threshold take the node out for the back-off.
    /// The counter is not reset when the node is taken out, so one more failure after the
    /// back-off takes it out again at once.
    pub fn record_failure(&self, kind: FailureKind, now_nanos: u64, health: &Health) {
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

    pub fn record_response(&self) {
        self.served.fetch_add(1, Ordering::Relaxed);
        if self.consecutive_connect_failures.load(Ordering::Relaxed) != 0 {
            self.consecutive_connect_failures
                .store(0, Ordering::Relaxed);
        }
    }

    /// The utilisation the node last reported (busiest resource), 0 when it never has.
    pub fn load(&self) -> f64 {
        self.feedback.load().gathered.load()
    }

    /// What the gatherer last published for the node.
    pub fn feedback(&self) -> Feedback {
        **self.feedback.load()
    }

    pub(crate) fn publish(&self, feedback: Feedback) {
        self.feedback.store(Arc::new(feedback));
    }

    pub fn record_latency(&self, micros: u64) {
        if let Ok(mut h) = self.latency_us.lock() {
            h.saturating_record(micros.max(1));
        }
    }
}

/// The gathered side of a node's state as the gatherer publishes it after each round.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Feedback {
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
    pub generation: u64,
    pub config: Arc<Config>,
    pub classifier: Classifier,
    pub policy: Box<dyn Policy>,
    /// What the policy reads (its own declaration), so the gatherer knows what to feed it.
    pub needs: Needs,
    pub nodes: Vec<Arc<NodeRuntime>>,
    pub class_headers: Vec<HeaderValue>,
}

impl Cluster {
    /// Builds a cluster; node counters carry over from `previous` for nodes whose name, address
    /// and the class list are unchanged, so a reload does not reset what the status page shows.
    pub fn build(
        config: Config,
        generation: u64,
        previous: Option<&Cluster>,
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
        let classes_unchanged =
            previous.is_some_and(|p| p.classifier.classes() == classifier.classes());
        // By name, so a reload of a large cluster stays linear.
        let before: std::collections::HashMap<&str, &Arc<NodeRuntime>> = previous
            .filter(|_| classes_unchanged)
            .map(|p| {
                p.nodes
                    .iter()
                    .map(|n| (n.config.name.as_str(), n))
                    .collect()
            })
            .unwrap_or_default();
        let mut nodes = Vec::with_capacity(config.nodes.len());
        for node in &config.nodes {
            let reused = before.get(node.name.as_str()).filter(|n| n.config == *node);
            nodes.push(match reused {
                Some(n) => Arc::clone(n),
                None => Arc::new(
                    NodeRuntime::new(node.clone(), classifier.classes().len()).map_err(plain)?,
                ),
            });
        }
        let class_headers = classifier
            .classes()
            .iter()
            .map(|c| HeaderValue::from_str(&c.name))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| plain("a class name is not valid in a header".into()))?;
        Ok(Cluster {
            generation,
            config: Arc::new(config),
            classifier,
            needs: policy.needs(),
            policy,
            nodes,
            class_headers,
        })
    }
}

/// The cluster as a policy sees it at one instant, optionally hiding one node (the one a retry
/// must avoid).
pub struct LiveView<'a> {
    pub now_nanos: u64,
    pub nodes: &'a [Arc<NodeRuntime>],
    pub exclude: Option<NodeId>,
    /// Where weights come from (the policy's declared needs).
    pub weights: WeightSource,
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
            available: node.is_up(self.now_nanos) && !feedback.silent && self.exclude != Some(id),
            weight: match self.weights {
                WeightSource::Configured => node.config.weight,
                _ => feedback.weight,
            },
            active: node.active.load(Ordering::Relaxed),
            gathered: feedback.gathered,
        }
    }
}
