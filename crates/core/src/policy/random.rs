use super::support::{count_available, nth_available, SplitMix64};
use super::{Policy, RequestInfo};
use crate::view::{ClusterView, NodeId};

use super::registry::{check, read, Params, Registration};
use super::PolicyContext;

/// Parameters of `random`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RandomParams {
    /// Seed of the policy's own random stream: same seed, same choices (in a single-threaded
    /// run such as the simulator).
    #[serde(default = "super::default_seed")]
    seed: u64,
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "random",
    about: "uniform over the available nodes (the CAP paper's RAN)",
    params: "seed (default 1)",
    seeded: true,
    check: check::<RandomParams>,
    build: |params: &Params, _ctx: &PolicyContext<'_>| {
        let p: RandomParams = read("random", params)?;
        Ok(Box::new(Random::new(p.seed)))
    },
};

/// Uniform over the available nodes, from the policy's own seeded stream (no global RNG, so the
/// simulator reproduces a run from its seed).
#[derive(Debug)]
pub struct Random {
    rng: SplitMix64,
}

impl Random {
    pub fn new(seed: u64) -> Self {
        Random {
            rng: SplitMix64::new(seed),
        }
    }
}

impl Policy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn pick(&self, _req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let n = view.node_count();
        let available = count_available(view, n);
        if available == 0 {
            return None;
        }
        nth_available(view, n, self.rng.below(available))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::support::testing::{check_common_behaviour, picks};
    use crate::view::StaticView;

    #[test]
    fn spreads_uniformly_and_is_reproducible_from_its_seed() {
        let view = StaticView::uniform(4);
        let a = picks(&Random::new(9), &view, 4000);
        assert_eq!(a, picks(&Random::new(9), &view, 4000));
        assert_ne!(a, picks(&Random::new(10), &view, 4000));
        for node in 0..4 {
            let share = a.iter().filter(|&&id| id == node).count();
            assert!((850..1150).contains(&share), "node {node}: {share}");
        }
    }

    #[test]
    fn shared_behaviour() {
        check_common_behaviour(&Random::new(1), 4);
    }
}
