//! `power-of-d`: the power of d choices on the tier's counts.

use super::shared::{default_max_age_ms, Counts, ViewChoice};
use super::support::{count_available, SplitMix64};
use super::{Policy, PolicyError, RequestInfo};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `power-of-d`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct PowerOfDParams {
    /// Nodes sampled per request (≥ 1; 1 is random, 2 is the power of two choices).
    #[serde(default = "default_d")]
    d: usize,
    /// Whose active requests count: the tier's (`shared`, default) or this switch's (`local`).
    #[serde(default = "shared")]
    view: ViewChoice,
    /// A tier snapshot older than this is ignored (the node's local count is used).
    #[serde(default = "default_max_age_ms")]
    max_age_ms: f64,
    /// Seed of the policy's own random stream.
    #[serde(default = "super::default_seed")]
    seed: u64,
}

fn default_d() -> usize {
    2
}

fn shared() -> ViewChoice {
    ViewChoice::Shared
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "power-of-d",
    about: "d random available nodes, fewest active requests wins, counted tier-wide where fresh",
    params: "d (default 2), view = shared (default) | local, max_age_ms (default 1000), seed (default 1)",
    seeded: true,
    check: check::<PowerOfDParams>,
    build: |params: &Params, _: &PolicyContext<'_>| {
        let p: PowerOfDParams = read("power-of-d", params)?;
        let counts = Counts::new("power-of-d", p.view, p.max_age_ms)?;
        Ok(Box::new(PowerOfD::new(p.d, counts, p.seed)?))
    },
};

/// The power of d choices (Mitzenmacher; Vvedenskaya et al.) for many dispatchers: sample `d`
/// distinct available nodes at random and take the one with the fewest active requests, counted
/// across the tier when its snapshot is fresh (see `shared`) and locally otherwise. Sampling
/// keeps the dispatchers of a tier from all herding onto the one node a stale snapshot shows as
/// least loaded, which a full least-connections scan on the same snapshot does.
#[derive(Debug)]
pub struct PowerOfD {
    d: usize,
    counts: Counts,
    rng: SplitMix64,
}

impl PowerOfD {
    pub fn new(d: usize, counts: Counts, seed: u64) -> Result<Self, PolicyError> {
        if d == 0 {
            return Err(PolicyError::Invalid(
                "power-of-d: d must be at least 1 (1 is random, 2 the power of two choices)".into(),
            ));
        }
        Ok(PowerOfD {
            d,
            counts,
            rng: SplitMix64::new(seed),
        })
    }

    /// `d` distinct ranks in `0..available` (all of them when `d ≥ available`), by Floyd's
    /// algorithm, in the order drawn.
    fn sample(&self, available: usize) -> Vec<usize> {
        if self.d >= available {
            return (0..available).collect();
        }
        let mut chosen = Vec::with_capacity(self.d);
        for j in available - self.d..available {
            let t = self.rng.below(j + 1);
            chosen.push(if chosen.contains(&t) { j } else { t });
        }
        chosen
    }
}

impl Policy for PowerOfD {
    fn name(&self) -> &'static str {
        "power-of-d"
    }

    fn pick(&self, _req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let n = view.node_count();
        let available = count_available(view, n);
        if available == 0 {
            return None;
        }
        let ranks = self.sample(available);
        // One pass maps the sampled ranks to node ids (ranks sorted, order of drawing kept).
        let mut order: Vec<(usize, usize)> = ranks.iter().enumerate().map(|(i, &r)| (r, i)).collect();
        order.sort_unstable();
        let mut ids = vec![0; ranks.len()];
        let mut next = order.iter().peekable();
        let mut rank = 0;
        for id in 0..n {
            if !view.node(id).available {
                continue;
            }
            while let Some(&&(r, i)) = next.peek() {
                if r != rank {
                    break;
                }
                ids[i] = id;
                next.next();
            }
            rank += 1;
        }
        let now = view.now_nanos();
        // Ties go to the larger weight, then to the first drawn (itself a uniform draw).
        ids.into_iter()
            .map(|id| (id, view.node(id)))
            .min_by_key(|(_, s)| (self.counts.active(s, now), std::cmp::Reverse(s.weight)))
            .map(|(id, _)| id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, picks};
    use crate::view::{StaticView, TierState};

    fn shared() -> Counts {
        Counts::new("t", ViewChoice::Shared, 1000.0).unwrap()
    }

    #[test]
    fn d_one_is_random_and_d_all_is_least_connections() {
        let mut view = StaticView::uniform(4);
        view.nodes[0].active = 3;
        view.nodes[1].active = 1;
        view.nodes[2].active = 2;
        view.nodes[3].active = 5;
        let all = PowerOfD::new(4, shared(), 1).unwrap();
        assert!(picks(&all, &view, 20).iter().all(|&id| id == 1));
        let one = PowerOfD::new(1, shared(), 1).unwrap();
        let chosen = picks(&one, &view, 4000);
        for node in 0..4 {
            let share = chosen.iter().filter(|&&id| id == node).count();
            assert!((850..1150).contains(&share), "node {node}: {share}");
        }
    }

    #[test]
    fn two_choices_never_take_the_busiest_and_favour_the_idle() {
        let mut view = StaticView::uniform(3);
        view.nodes[0].active = 10;
        view.nodes[1].active = 5;
        let chosen = picks(&PowerOfD::new(2, shared(), 3).unwrap(), &view, 3000);
        assert!(!chosen.contains(&0));
        let idle = chosen.iter().filter(|&&id| id == 2).count();
        assert!((1850..2150).contains(&idle), "{idle}");
    }

    #[test]
    fn counts_come_from_the_tier_when_fresh() {
        let mut view = StaticView::uniform(2);
        view.now_nanos = 100;
        view.nodes[0].tier = TierState {
            at_nanos: Some(100),
            active: 8,
            ..TierState::default()
        };
        view.nodes[1].active = 2;
        let shared_all = PowerOfD::new(2, shared(), 1).unwrap();
        assert!(picks(&shared_all, &view, 10).iter().all(|&id| id == 1));
        let local = PowerOfD::new(2, Counts::LOCAL, 1).unwrap();
        assert!(picks(&local, &view, 10).iter().all(|&id| id == 0));
        assert!(PowerOfD::new(0, shared(), 1)
            .unwrap_err()
            .to_string()
            .contains("at least 1"));
    }

    #[test]
    fn shared_behaviour() {
        for d in [1, 2, 3, 10] {
            check_common_behaviour(&PowerOfD::new(d, shared(), 1).unwrap(), 4);
        }
    }
}
