//! `join-idle-queue`: Lu et al.'s Join-Idle-Queue (Performance 2011) for the dispatchers of a
//! tier, with the idle queues derived from the shared view instead of messages from the nodes.
//!
//! In the paper each dispatcher keeps an I-queue of idle servers; a server that becomes idle
//! joins the I-queue of one dispatcher — a random one (JIQ-Random), or the one with the shortest
//! I-queue among `d` sampled (JIQ-SQ(d)) — and a dispatcher sends a job to a server it pops from
//! its I-queue, or to a random server when its I-queue is empty. Capstan's nodes send no such
//! messages, so every dispatcher derives all the I-queues from what the tier shares, the same way
//! at each dispatcher:
//!
//! - **Idle.** A node is idle when the tier snapshot ([`crate::TierState`]) says fewer than
//!   `threshold` requests are active on it (`threshold = 1`: none; more is the paper's lightly
//!   loaded variant, JIQ-LL). Without a fresh snapshot the dispatcher's own live count stands in
//!   (exact for a lone dispatcher).
//! - **Which I-queue.** The node's idle epoch is the tier's count of requests finished on it
//!   ([`crate::TierState::finished`]), which changes each time the node may have turned idle
//!   again, so each idle period is a fresh draw. Its candidates are `min(d, K)` distinct
//!   dispatchers drawn by hashing (node id, epoch): `c₀ = mix(node, epoch, 0) mod K`, further ones
//!   by the next hash or, on a repeat, the next unused index. JIQ-Random (`choices = 1`) joins
//!   `c₀`; JIQ-SQ(d) takes the idle nodes in node-id order and each joins the candidate whose
//!   I-queue is shortest so far, ties to the lowest dispatcher index (so with `d ≥ K` the idle
//!   nodes are dealt out round-robin). Every dispatcher with the same snapshot computes the same
//!   I-queues, so an idle node is in exactly one of them: the property that keeps the dispatchers
//!   from herding onto it.
//! - **Popping.** A node leaves this dispatcher's I-queue once the dispatcher has sent it enough
//!   requests since the snapshot to reach `threshold` (its live count rises above its reported
//!   one), which is the paper's removal on dispatch, with nothing to store.
//! - **Dispatch.** Among the nodes of its own I-queue the dispatcher takes the one with the
//!   fewest active requests (tier estimate), ties rotating; with an empty I-queue, a random
//!   available node.
//!
//! The tier's size K and this dispatcher's index come from the view
//! ([`crate::ClusterView::dispatcher`]: the switch numbers its live peers) unless `dispatchers`
//! and `dispatcher` are given. A dispatcher that ejected a node locally sees it unavailable and
//! skips it; the others may still count it, which only shortens one I-queue by a node.

use super::shared::{default_max_age_ms, Counts, ViewChoice};
use super::support::{count_available, mix64, nth_available, Rotor, SplitMix64};
use super::{Policy, PolicyError, RequestInfo};
use crate::view::{ClusterView, Dispatcher, NodeId, NodeState};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `join-idle-queue`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JiqParams {
    /// Dispatchers in the tier (K); with `dispatcher`, instead of the view's.
    dispatchers: Option<usize>,
    /// This dispatcher's index in `0..dispatchers`.
    dispatcher: Option<usize>,
    /// A node is idle while fewer than this many requests are active on it (default 1).
    #[serde(default = "one")]
    threshold: u32,
    /// I-queues sampled when a node joins: 1 is JIQ-Random, d ≥ 2 JIQ-SQ(d) (default 1).
    #[serde(default = "one")]
    choices: u32,
    /// Whose counts say a node is idle: the tier's (`shared`, default) or this switch's.
    #[serde(default = "shared")]
    view: ViewChoice,
    /// A tier snapshot older than this is ignored (local counts stand in).
    #[serde(default = "default_max_age_ms")]
    max_age_ms: f64,
    /// Seed of the random choice when the I-queue is empty.
    #[serde(default = "super::default_seed")]
    seed: u64,
}

fn one() -> u32 {
    1
}

fn shared() -> ViewChoice {
    ViewChoice::Shared
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "join-idle-queue",
    about: "Join-Idle-Queue (Lu et al. 2011): a node from this dispatcher's idle queue, else random",
    params: "threshold (default 1), choices (1: JIQ-Random; d: JIQ-SQ(d)), dispatchers + dispatcher (default: the tier's), view = shared (default) | local, max_age_ms (default 1000), seed",
    seeded: true,
    check: check::<JiqParams>,
    build: |params: &Params, _: &PolicyContext<'_>| {
        let p: JiqParams = read("join-idle-queue", params)?;
        let place = match (p.dispatchers, p.dispatcher) {
            (None, None) => None,
            (Some(count), Some(index)) if index < count => Some(Dispatcher { index, count }),
            (Some(count), Some(index)) => {
                return Err(PolicyError::Invalid(format!(
                    "join-idle-queue: dispatcher must be below dispatchers (got {index} of \
                     {count}; indices start at 0)"
                )))
            }
            _ => {
                return Err(PolicyError::Invalid(
                    "join-idle-queue: give both dispatchers and dispatcher, or neither (then the \
                     tier's own numbering is used)"
                        .into(),
                ))
            }
        };
        let counts = Counts::new("join-idle-queue", p.view, p.max_age_ms)?;
        let jiq = JoinIdleQueue::new(p.threshold, p.choices, counts, p.seed)?;
        Ok(Box::new(jiq.placed(place)))
    },
};

/// Join-Idle-Queue with I-queues derived from the shared view (see the module doc).
#[derive(Debug)]
pub struct JoinIdleQueue {
    threshold: u32,
    choices: u32,
    counts: Counts,
    place: Option<Dispatcher>,
    rng: SplitMix64,
    tie_break: Rotor,
}

/// Salt of the join hash, so it draws differently from other uses of `mix64`.
const JOIN_SALT: u64 = 0x6a69_712d_6a6f_696e;

impl JoinIdleQueue {
    pub fn new(threshold: u32, choices: u32, counts: Counts, seed: u64) -> Result<Self, PolicyError> {
        if threshold == 0 || choices == 0 {
            return Err(PolicyError::Invalid(format!(
                "join-idle-queue: threshold and choices must be at least 1 (got threshold = \
                 {threshold}, choices = {choices})"
            )));
        }
        Ok(JoinIdleQueue {
            threshold,
            choices,
            counts,
            place: None,
            rng: SplitMix64::new(seed),
            tie_break: Rotor::new(),
        })
    }

    /// Fixes this dispatcher's place in the tier instead of taking the view's (`None`: the view's).
    pub fn placed(mut self, place: Option<Dispatcher>) -> Self {
        self.place = place;
        self
    }

    fn place(&self, view: &dyn ClusterView) -> Dispatcher {
        let d = self.place.unwrap_or_else(|| view.dispatcher());
        let count = d.count.max(1);
        Dispatcher {
            index: d.index % count,
            count,
        }
    }

    /// Whether the snapshot (or, without a fresh one, the live count) shows the node idle to
    /// every dispatcher, and its idle epoch.
    fn joins(&self, state: &NodeState, now: u64) -> Option<u64> {
        if !state.available {
            return None;
        }
        if self.counts.is_shared(state, now) {
            (state.tier.active < self.threshold).then_some(state.tier.finished)
        } else {
            (state.active < self.threshold).then_some(0)
        }
    }

    /// A node the snapshot shows busy only because of this dispatcher's own requests, which
    /// have finished since: idle as far as anyone can know, and known to this dispatcher alone.
    fn idle_to_me_alone(&self, state: &NodeState, now: u64) -> bool {
        state.available
            && self.counts.is_shared(state, now)
            && state.tier.active >= self.threshold
            && state.tier.estimate_active(state.active) < self.threshold
    }

    /// The dispatchers whose I-queue an idle `node` of epoch `epoch` may join, in draw order.
    pub fn candidates(node: NodeId, epoch: u64, dispatchers: usize, choices: u32) -> Vec<usize> {
        let k = dispatchers.max(1);
        let want = (choices as usize).min(k);
        let mut out: Vec<usize> = Vec::with_capacity(want);
        let mut h = mix64(mix64(node as u64 ^ JOIN_SALT) ^ epoch);
        while out.len() < want {
            let mut c = (h % k as u64) as usize;
            while out.contains(&c) {
                c = (c + 1) % k;
            }
            out.push(c);
            h = mix64(h);
        }
        out
    }

    /// Walks the I-queues as derived from `view`, calling `member(node, state)` for each node of
    /// this dispatcher's I-queue that it has not yet filled since the snapshot; returns how many
    /// nodes are available.
    fn walk(&self, view: &dyn ClusterView, mut member: impl FnMut(NodeId, &NodeState)) -> usize {
        let Dispatcher { index, count } = self.place(view);
        let now = view.now_nanos();
        let mut lengths = vec![0u32; if self.choices > 1 { count } else { 0 }];
        let mut available = 0;
        for id in 0..view.node_count() {
            let state = view.node(id);
            available += usize::from(state.available);
            let Some(epoch) = self.joins(&state, now) else {
                if self.idle_to_me_alone(&state, now) {
                    member(id, &state);
                }
                continue;
            };
            let candidates = Self::candidates(id, epoch, count, self.choices);
            let owner = if self.choices > 1 {
                let owner = *candidates
                    .iter()
                    .min_by_key(|&&c| (lengths[c], c))
                    .expect("at least one candidate");
                lengths[owner] += 1;
                owner
            } else {
                candidates[0]
            };
            if owner == index && self.counts.active(&state, now) < self.threshold {
                member(id, &state);
            }
        }
        available
    }

    /// This dispatcher's I-queue as derived from `view`, in node-id order.
    pub fn idle_queue(&self, view: &dyn ClusterView) -> Vec<NodeId> {
        let mut queue = Vec::new();
        self.walk(view, |id, _| queue.push(id));
        queue
    }
}

impl Policy for JoinIdleQueue {
    fn name(&self) -> &'static str {
        "join-idle-queue"
    }

    fn pick(&self, _req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let n = view.node_count();
        let now = view.now_nanos();
        let start = self.tie_break.spin(n);
        // Fewest active first, then the first in circular order from `start`.
        let mut best: Option<(u32, usize, NodeId)> = None;
        let available = self.walk(view, |id, state| {
            let key = (self.counts.active(state, now), (id + n - start) % n.max(1), id);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        });
        if let Some((_, _, id)) = best {
            return Some(id);
        }
        if available == 0 {
            return None;
        }
        nth_available(view, n, self.rng.below(count_available(view, n).max(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, picks, request};
    use crate::view::{StaticView, TierState};

    const MS: u64 = 1_000_000;

    fn jiq(threshold: u32, choices: u32, place: Option<(usize, usize)>) -> JoinIdleQueue {
        let counts = Counts::new("t", ViewChoice::Shared, 1000.0).unwrap();
        JoinIdleQueue::new(threshold, choices, counts, 1)
            .unwrap()
            .placed(place.map(|(index, count)| Dispatcher { index, count }))
    }

    /// A tier snapshot taken at time 0 with these tier-wide active counts, each node's
    /// `finished` its id (so epochs differ), seen at 1 ms by a dispatcher with nothing live.
    fn snapshot(tier_active: &[u32]) -> StaticView {
        let mut view = StaticView::uniform(tier_active.len());
        view.now_nanos = MS;
        for (id, (node, &active)) in view.nodes.iter_mut().zip(tier_active).enumerate() {
            node.tier = TierState {
                at_nanos: Some(0),
                active,
                finished: id as u64,
                ..TierState::default()
            };
        }
        view
    }

    /// One dispatcher: its I-queue is every idle node; it sends to them, then at random.
    #[test]
    fn a_lone_dispatcher_queues_every_idle_node_and_pops_on_dispatch() {
        let policy = jiq(1, 1, None);
        // Nodes 1 and 3 are idle tier-wide; 0 and 2 are busy (requests of other dispatchers).
        let mut view = snapshot(&[2, 0, 1, 0]);
        assert_eq!(policy.idle_queue(&view), vec![1, 3]);
        let first = policy.pick(&request(0, "/"), &view).unwrap();
        assert!(first == 1 || first == 3);
        // Dispatching to it removes it from the I-queue: the live count is now above the
        // reported one.
        view.nodes[first].active += 1;
        assert_eq!(policy.idle_queue(&view), vec![4 - first]);
        assert_eq!(policy.pick(&request(0, "/"), &view), Some(4 - first));
        view.nodes[4 - first].active += 1;
        assert!(policy.idle_queue(&view).is_empty());
        // Empty I-queue: random over the available nodes, busy ones included.
        let chosen = picks(&policy, &view, 4000);
        for node in 0..4 {
            let share = chosen.iter().filter(|&&id| id == node).count();
            assert!((850..1150).contains(&share), "node {node}: {share}");
        }
    }

    /// K dispatchers with the same snapshot split the idle nodes: each idle node is in exactly
    /// one I-queue, busy nodes in none.
    #[test]
    fn the_i_queues_partition_the_idle_nodes() {
        let tier: Vec<u32> = (0..40).map(|i| u32::from(i % 3 == 0)).collect();
        let view = snapshot(&tier);
        for choices in [1, 2, 3] {
            let mut seen = Vec::new();
            for index in 0..3 {
                seen.extend(jiq(1, choices, Some((index, 3))).idle_queue(&view));
            }
            seen.sort_unstable();
            let idle: Vec<NodeId> = (0..40).filter(|i| i % 3 != 0).collect();
            assert_eq!(seen, idle, "choices {choices}");
        }
        // JIQ-Random's draw is the node's first candidate, which moves with the idle epoch.
        let owners: std::collections::BTreeSet<usize> = (0..50)
            .map(|epoch| JoinIdleQueue::candidates(7, epoch, 3, 1)[0])
            .collect();
        assert_eq!(owners.len(), 3);
    }

    /// JIQ-SQ(d) with d ≥ K: each idle node, in id order, joins the shortest I-queue, ties to
    /// the lowest index — the idle nodes are dealt out round-robin, worked by hand:
    /// idle 0, 2, 3, 5, 6, 7 → dispatcher 0 gets 0, 5; 1 gets 2, 6; 2 gets 3, 7.
    #[test]
    fn sq_d_with_every_dispatcher_sampled_deals_idle_nodes_round_robin() {
        let view = snapshot(&[0, 4, 0, 0, 1, 0, 0, 0]);
        let queues: Vec<Vec<NodeId>> = (0..3)
            .map(|i| jiq(1, 3, Some((i, 3))).idle_queue(&view))
            .collect();
        assert_eq!(queues, vec![vec![0, 5], vec![2, 6], vec![3, 7]]);
        // Dispatcher 1 sends to its own idle nodes only, never to 0, 3, 5 or 7.
        let d1 = jiq(1, 3, Some((1, 3)));
        let first = d1.pick(&request(0, "/"), &view).unwrap();
        assert!(first == 2 || first == 6, "{first}");
    }

    /// The lightly loaded variant: a node joins while fewer than `threshold` requests are active,
    /// and is preferred by fewest active; this dispatcher's own requests since the snapshot count.
    #[test]
    fn a_threshold_admits_lightly_loaded_nodes_and_fills_them_up() {
        let policy = jiq(3, 1, None);
        let mut view = snapshot(&[2, 5, 1, 3]);
        assert_eq!(policy.idle_queue(&view), vec![0, 2]);
        assert_eq!(policy.pick(&request(0, "/"), &view), Some(2));
        view.nodes[2].active = 2;
        // Node 2 now has 1 + 2 = 3: out. Node 0 (2) remains.
        assert_eq!(policy.idle_queue(&view), vec![0]);
        assert_eq!(policy.pick(&request(0, "/"), &view), Some(0));
    }

    /// Without a fresh snapshot the dispatcher's live counts decide (exact for one dispatcher).
    #[test]
    fn a_stale_snapshot_falls_back_to_local_counts() {
        let policy = jiq(1, 1, None);
        let mut view = snapshot(&[0, 0, 3]);
        view.now_nanos = 5_000 * MS;
        view.nodes[0].active = 1;
        assert_eq!(policy.idle_queue(&view), vec![1, 2]);
        let local = JoinIdleQueue::new(1, 1, Counts::LOCAL, 1).unwrap();
        assert_eq!(local.idle_queue(&snapshot(&[5, 5, 5])), vec![0, 1, 2]);
    }

    #[test]
    fn parameters_are_validated() {
        assert!(JoinIdleQueue::new(0, 1, Counts::LOCAL, 1).is_err());
        assert!(JoinIdleQueue::new(1, 0, Counts::LOCAL, 1).is_err());
        let build = |text: &str| {
            let params: toml::Table = toml::from_str(text).unwrap();
            let nodes = vec!["a".to_string()];
            (REGISTRATION.build)(&params, &PolicyContext { nodes: &nodes, classes: &[] })
                .err()
                .map(|e| e.to_string())
        };
        assert!(build("dispatchers = 4\ndispatcher = 4").unwrap().contains("below"));
        assert!(build("dispatchers = 4").unwrap().contains("both"));
        assert_eq!(build("dispatchers = 4\ndispatcher = 3\nchoices = 2"), None);
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&jiq(1, 1, None), 4);
        check_common_behaviour(&jiq(2, 2, Some((1, 3))), 4);
        check_common_behaviour(&JoinIdleQueue::new(1, 1, Counts::LOCAL, 1).unwrap(), 4);
    }
}
