use super::support::{count_available, nth_available, SplitMix64};
use super::{Policy, RequestInfo};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `two-choices`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TwoChoicesParams {
    /// Seed of the policy's own random stream.
    #[serde(default = "super::default_seed")]
    seed: u64,
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "two-choices",
    about: "the power of two choices: two random available nodes, fewer active requests wins",
    params: "seed (default 1)",
    seeded: true,
    check: check::<TwoChoicesParams>,
    build: |params: &Params, _: &PolicyContext<'_>| {
        let p: TwoChoicesParams = read("two-choices", params)?;
        Ok(Box::new(TwoChoices::new(p.seed)))
    },
};

/// The power of two choices (Mitzenmacher; Envoy's least_request): sample two distinct available
/// nodes at random and take the one with fewer active requests. Nearly as good as a full
/// least-connections scan at avoiding hot spots, but without every switch thread herding onto the
/// same momentarily idle node.
#[derive(Debug)]
pub struct TwoChoices {
    rng: SplitMix64,
}

impl TwoChoices {
    pub fn new(seed: u64) -> Self {
        TwoChoices {
            rng: SplitMix64::new(seed),
        }
    }
}

impl Policy for TwoChoices {
    fn name(&self) -> &'static str {
        "two-choices"
    }

    fn pick(&self, _req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let n = view.node_count();
        let available = count_available(view, n);
        match available {
            0 => return None,
            1 => return nth_available(view, n, 0),
            _ => {}
        }
        let first = self.rng.below(available);
        // Drawing the second from the other `available - 1` ranks keeps the two distinct
        // without a retry loop.
        let mut second = self.rng.below(available - 1);
        if second >= first {
            second += 1;
        }
        let a = nth_available(view, n, first)?;
        let b = nth_available(view, n, second)?;
        let (sa, sb) = (view.node(a), view.node(b));
        // `a` is itself a uniform draw, so giving it equal-load ties stays unbiased.
        let b_wins = sb.active < sa.active || (sb.active == sa.active && sb.weight > sa.weight);
        Some(if b_wins { b } else { a })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, picks};
    use crate::view::StaticView;

    #[test]
    fn never_picks_the_busiest_of_three_and_prefers_the_idle_one() {
        let mut view = StaticView::uniform(3);
        view.nodes[0].active = 10;
        view.nodes[1].active = 5;
        view.nodes[2].active = 0;
        let chosen = picks(&TwoChoices::new(3), &view, 3000);
        assert!(!chosen.contains(&0));
        let idle = chosen.iter().filter(|&&id| id == 2).count();
        // Node 2 wins whenever it is sampled: in 2 of the 3 possible pairs.
        assert!((1850..2150).contains(&idle), "{idle}");
    }

    #[test]
    fn two_nodes_always_compare_both() {
        let mut view = StaticView::uniform(2);
        view.nodes[0].active = 1;
        assert!(picks(&TwoChoices::new(5), &view, 100)
            .iter()
            .all(|&id| id == 1));
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&TwoChoices::new(1), 4);
    }
}
