//! One run of a tier: K dispatchers, each with its own policy instance, in front of N FCFS nodes
//! with exponential service times, fed by Poisson arrivals that each reach one dispatcher
//! chosen uniformly (clients spread over the switches by DNS round robin or an L4 balancer).
//!
//! Each dispatcher counts only the requests it placed (its **local** view). When the policy
//! reads the **shared** view, every `gossip` period the dispatchers exchange their counts: each
//! node's tier-wide active requests, each dispatcher's own part of them and the requests the node
//! finished are snapshotted and shown as `core`'s `TierState`, aged from the snapshot's time —
//! as the switch's gossip feeds it. A period of 0 is an exact, always-current tier view.

use capstan_core::{
    build_policy, ClusterView, Dispatcher, NodeId, NodeState, Outcome, Policy, PolicyContext,
    RequestInfo, TierState,
};
use capstan_workload::dist::uniform01;
use capstan_workload::{stream, Dist};

use crate::event::{nanos_round, EventQueue, Nanos};
use crate::policy::PolicyChoice;

/// One run's parameters.
#[derive(Clone, Debug)]
pub struct TierRun {
    pub nodes: usize,
    pub dispatchers: usize,
    /// Offered load per node (arrival rate × mean service time ÷ nodes), in (0, 1).
    pub load: f64,
    pub policy: PolicyChoice,
    /// Gossip period in seconds; `None`: no shared view is fed (local counts only).
    pub gossip_s: Option<f64>,
    pub service_ms: f64,
    /// Requests in the run; the first `warmup` fraction are not measured.
    pub jobs: u64,
    pub warmup: f64,
    pub seed: u64,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct TierResult {
    /// Response times of the measured requests, nanoseconds, sorted.
    pub latencies: Vec<u64>,
    /// Measured requests sent to a node with no active request tier-wide at that moment.
    pub to_idle: u64,
    pub events: u64,
}

#[derive(Clone, Copy)]
enum Ev {
    Arrival,
    Departure {
        node: u32,
        dispatcher: u32,
        arrived: Nanos,
        measured: bool,
    },
    Gossip,
}

/// The tier's state: live counts and the last gossip snapshot.
struct Tier {
    /// Per dispatcher, per node: requests it placed that have not finished.
    own: Vec<Vec<u32>>,
    /// Per node: the sum of `own` over the dispatchers.
    total: Vec<u32>,
    /// Per node: requests finished.
    finished: Vec<u64>,
    /// The snapshot: per node, per dispatcher at `at`.
    snap_total: Vec<u32>,
    snap_own: Vec<Vec<u32>>,
    snap_finished: Vec<u64>,
    at: Option<Nanos>,
}

impl Tier {
    fn new(nodes: usize, dispatchers: usize) -> Tier {
        Tier {
            own: vec![vec![0; nodes]; dispatchers],
            total: vec![0; nodes],
            finished: vec![0; nodes],
            snap_total: vec![0; nodes],
            snap_own: vec![vec![0; nodes]; dispatchers],
            snap_finished: vec![0; nodes],
            at: None,
        }
    }

    fn gossip(&mut self, now: Nanos) {
        self.snap_total.copy_from_slice(&self.total);
        for (snap, own) in self.snap_own.iter_mut().zip(&self.own) {
            snap.copy_from_slice(own);
        }
        self.snap_finished.copy_from_slice(&self.finished);
        self.at = Some(now);
    }
}

/// What dispatcher `index` sees: its own live counts, and the snapshot (or, with an exact view,
/// the live tier) as `TierState`.
struct DispatcherView<'a> {
    now: Nanos,
    place: Dispatcher,
    own: &'a [u32],
    total: &'a [u32],
    own_then: &'a [u32],
    finished: &'a [u64],
    at: Option<Nanos>,
}

impl ClusterView for DispatcherView<'_> {
    fn now_nanos(&self) -> u64 {
        self.now
    }
    fn node_count(&self) -> usize {
        self.own.len()
    }
    fn node(&self, id: NodeId) -> NodeState {
        NodeState {
            active: self.own[id],
            tier: TierState {
                at_nanos: self.at,
                active: self.total[id],
                own_active: self.own_then[id],
                finished: self.finished[id],
                ..TierState::default()
            },
            ..NodeState::default()
        }
    }
    fn dispatcher(&self) -> Dispatcher {
        self.place
    }
}

/// The keys requests carry (for key-aware policies such as LARD): uniform over this many objects.
const OBJECTS: u64 = 10_000;

/// Runs one tier to the end and returns its measurements.
pub fn run(cfg: &TierRun) -> Result<TierResult, String> {
    validate(cfg)?;
    let policies = build_policies(cfg)?;
    let mut q: EventQueue<Ev> = EventQueue::new();
    let mut arrivals = stream(cfg.seed, "tier-arrivals");
    let mut services = stream(cfg.seed, "tier-services");
    let mut choices = stream(cfg.seed, "tier-dispatchers");
    let service = Dist::Exp {
        mean: cfg.service_ms / 1e3,
    };
    let rate = cfg.load * cfg.nodes as f64 / (cfg.service_ms / 1e3);
    let inter = Dist::Exp { mean: 1.0 / rate };
    let mut tier = Tier::new(cfg.nodes, cfg.dispatchers);
    let mut busy_until: Vec<Nanos> = vec![0; cfg.nodes];
    let exact = cfg.gossip_s == Some(0.0);
    let period = cfg.gossip_s.filter(|&p| p > 0.0).map(nanos_round);
    let warm = (cfg.jobs as f64 * cfg.warmup) as u64;
    let mut result = TierResult::default();
    let mut issued = 0u64;
    q.schedule(0, Ev::Arrival);
    if period.is_some() {
        q.schedule(0, Ev::Gossip);
    }
    while let Some((now, ev)) = q.pop() {
        match ev {
            Ev::Arrival => {
                issued += 1;
                if issued < cfg.jobs {
                    q.after(nanos_round(inter.sample(&mut arrivals)), Ev::Arrival);
                }
                let k = ((uniform01(&mut choices) * cfg.dispatchers as f64) as usize)
                    .min(cfg.dispatchers - 1);
                let key_hash = capstan_core::mix64(issued) % OBJECTS;
                let req = RequestInfo {
                    class: 0,
                    key: "/",
                    key_hash,
                };
                let node = {
                    let view = view_of(&tier, k, cfg, now, exact);
                    policies[k].pick(&req, &view).unwrap_or(0)
                };
                let measured = issued > warm;
                if measured && tier.total[node] == 0 {
                    result.to_idle += 1;
                }
                tier.own[k][node] += 1;
                tier.total[node] += 1;
                let start = busy_until[node].max(now);
                let finish = start + nanos_round(service.sample(&mut services)).max(1);
                busy_until[node] = finish;
                q.schedule(
                    finish,
                    Ev::Departure {
                        node: node as u32,
                        dispatcher: k as u32,
                        arrived: now,
                        measured,
                    },
                );
            }
            Ev::Departure {
                node,
                dispatcher,
                arrived,
                measured,
            } => {
                let (node, k) = (node as usize, dispatcher as usize);
                tier.own[k][node] -= 1;
                tier.total[node] -= 1;
                tier.finished[node] += 1;
                let latency = now - arrived;
                if measured {
                    result.latencies.push(latency);
                }
                let outcome = Outcome {
                    ok: true,
                    latency_nanos: latency,
                    finished_at_nanos: now,
                };
                let req = RequestInfo {
                    class: 0,
                    key: "/",
                    key_hash: 0,
                };
                policies[k].on_done(node, &req, &outcome);
            }
            Ev::Gossip => {
                tier.gossip(now);
                if let (Some(p), true) = (period, issued < cfg.jobs) {
                    q.after(p, Ev::Gossip);
                }
            }
        }
    }
    result.latencies.sort_unstable();
    result.events = q.popped();
    Ok(result)
}

fn view_of<'a>(
    tier: &'a Tier,
    k: usize,
    cfg: &TierRun,
    now: Nanos,
    exact: bool,
) -> DispatcherView<'a> {
    let place = Dispatcher {
        index: k,
        count: cfg.dispatchers,
    };
    if exact {
        return DispatcherView {
            now,
            place,
            own: &tier.own[k],
            total: &tier.total,
            own_then: &tier.own[k],
            finished: &tier.finished,
            at: Some(now),
        };
    }
    DispatcherView {
        now,
        place,
        own: &tier.own[k],
        total: &tier.snap_total,
        own_then: &tier.snap_own[k],
        finished: &tier.snap_finished,
        at: tier.at,
    }
}

fn validate(cfg: &TierRun) -> Result<(), String> {
    if cfg.nodes == 0 || cfg.dispatchers == 0 {
        return Err("a tier needs at least one node and one dispatcher".into());
    }
    if !(cfg.load > 0.0 && cfg.load < 1.0) {
        return Err(format!("load {} is not in (0, 1)", cfg.load));
    }
    if !(cfg.service_ms.is_finite() && cfg.service_ms > 0.0) {
        return Err("the mean service time must be positive".into());
    }
    if cfg.jobs == 0 || !(0.0..1.0).contains(&cfg.warmup) {
        return Err("a run needs requests, and a warm-up fraction in [0, 1)".into());
    }
    Ok(())
}

/// One policy instance per dispatcher, each with its own seed and started at its own phase:
/// dispatcher `k` first makes `k·N/K` picks on an idle view, as switches that started at
/// different times have moved their round-robin pointers apart. Without it every pointer would
/// start on node 0 and the dispatchers would move in step, herding on the same nodes.
fn build_policies(cfg: &TierRun) -> Result<Vec<Box<dyn Policy>>, String> {
    let names = crate::engine::node_names(cfg.nodes);
    let classes = vec!["all".to_string()];
    let ctx = PolicyContext {
        nodes: &names,
        classes: &classes,
    };
    let idle = capstan_core::StaticView::uniform(cfg.nodes);
    let req = RequestInfo {
        class: 0,
        key: "/",
        key_hash: 0,
    };
    (0..cfg.dispatchers)
        .map(|k| {
            let seed = capstan_core::mix64(cfg.seed ^ ((k as u64 + 1) << 32));
            let spec = cfg.policy.spec_for_seed(seed);
            let policy =
                build_policy(&spec, &ctx).map_err(|e| format!("{}: {e}", cfg.policy.label))?;
            for _ in 0..k * cfg.nodes / cfg.dispatchers {
                policy.pick(&req, &idle);
            }
            Ok(policy)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(policy: &str, k: usize, gossip_s: Option<f64>) -> TierRun {
        TierRun {
            nodes: 20,
            dispatchers: k,
            load: 0.8,
            policy: PolicyChoice::parse(policy).unwrap(),
            gossip_s,
            service_ms: 10.0,
            jobs: 20_000,
            warmup: 0.2,
            seed: 3,
        }
    }

    fn mean(r: &TierResult) -> f64 {
        crate::stats::mean_ms(&r.latencies)
    }

    #[test]
    fn random_matches_m_m_1_and_runs_are_reproducible() {
        let a = run(&cfg("random", 4, None)).unwrap();
        assert_eq!(a.latencies, run(&cfg("random", 4, None)).unwrap().latencies);
        assert_eq!(a.latencies.len(), 16_000);
        // M/M/1 at ρ = 0.8 with a 10 ms mean: 50 ms in system (short run: within 25 %).
        let m = mean(&a);
        assert!((37.5..62.5).contains(&m), "{m}");
    }

    /// With one dispatcher, local least-connections is join-the-shortest-queue; with many and
    /// local counts it loses that, and the exact shared view gives it back.
    #[test]
    fn a_shared_view_restores_what_many_dispatchers_lose() {
        let alone = mean(&run(&cfg("least-connections", 1, None)).unwrap());
        let local = mean(&run(&cfg("least-connections", 8, None)).unwrap());
        let shared = mean(&run(&cfg("least-connections:view=shared", 8, Some(0.0))).unwrap());
        assert!(alone < 0.8 * local, "alone {alone}, local {local}");
        assert!(shared < 0.8 * local, "shared {shared}, local {local}");
        let jiq = run(&cfg("join-idle-queue", 8, Some(0.0))).unwrap();
        let random = run(&cfg("random", 8, None)).unwrap();
        assert!(mean(&jiq) < 0.8 * mean(&random));
        assert!(
            jiq.to_idle > 2 * random.to_idle,
            "{} {}",
            jiq.to_idle,
            random.to_idle
        );
    }

    #[test]
    fn bad_runs_are_refused() {
        let mut c = cfg("random", 1, None);
        c.load = 1.0;
        assert!(run(&c).unwrap_err().contains("load"));
        c.load = 0.5;
        c.dispatchers = 0;
        assert!(run(&c).is_err());
    }
}
