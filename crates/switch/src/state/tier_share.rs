//! What the tier's shared view changes at one switch, as pure rules: its share of a node's
//! admission limit (`tier.admission = "shared"`), and whether a node other switches have out
//! is out here too (`tier.ejection`), never so many that the cluster empties.
//!
//! **The share.** Each switch applies `⌊limit / live⌋` (at least 1) of a node's fixed limit and
//! `⌊queue / live⌋` of its queue, `live` being the peers that are up at this switch, itself
//! included. When every switch sees the same peers up, the node never has more than `limit`
//! requests from the tier at once, whatever each switch's load — a hard bound. A share by
//! demand (each switch's part of the tier-wide active count) would follow the load better but
//! bound nothing: each switch decides on the others' counts as of the last gossip period, so
//! two switches that both see the others idle would both take most of the limit. Below one
//! request per switch (`limit < live`) each still takes 1, and the bound is `live`.
//!
//! **Ejection by the tier.** A switch's gossip says, per node, whether it has the node out
//! (outlier ejection, passive back-off, failed checks). `any`: one live peer saying so is
//! enough; `majority`: more than half of the switches whose report of the node counts, this one
//! included. Such a node is taken out here only while the budget of the outlier detector allows
//! (`outlier.max_ejected_percent` of the nodes out by ejection, local or the tier's, and never
//! the last node in), nodes the tier has out already keeping their place first.

use crate::config::sections::tier::TierEjection;

/// This switch's part of a node's limit `limit` among `live` live peers.
pub(crate) fn limit_share(limit: u32, live: u32) -> u32 {
    (limit / live.max(1)).max(1)
}

/// This switch's part of a node's queue bound `queue` among `live` live peers (no queue stays
/// none).
pub(crate) fn queue_share(queue: u32, live: u32) -> u32 {
    match queue {
        0 => 0,
        q => (q / live.max(1)).max(1),
    }
}

/// Whether the tier has a node out by `rule`: `others_out` of the `others` live peers whose
/// report of it counts say it is out; `own_out`: this switch has it out itself.
pub(crate) fn tier_has_out(
    rule: TierEjection,
    own_out: bool,
    others_out: usize,
    others: usize,
) -> bool {
    match rule {
        TierEjection::Local => false,
        TierEjection::Any => others_out > 0,
        TierEjection::Majority => {
            let out = others_out + usize::from(own_out);
            others_out > 0 && 2 * out > others + 1
        }
    }
}

/// One node as the ejection budget sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// The tier has it out ([`tier_has_out`]).
    pub wanted: bool,
    /// It is out by this switch's tier ejection now.
    pub tier_out: bool,
    /// This switch's outlier detector has it ejected.
    pub ejected_here: bool,
    /// Out here for any other reason (checks, back-off, drain, silence).
    pub out_otherwise: bool,
}

/// Which nodes are out by the tier's say-so after this round, and how many the budget kept in:
/// at most `max_out` nodes out by ejection (this switch's or the tier's), and at least one node
/// in. Nodes the tier has out already go first, so a standing ejection does not flap.
pub(crate) fn tier_ejections(nodes: &[Candidate], max_out: usize) -> (Vec<bool>, usize) {
    let mut ejected = nodes.iter().filter(|n| n.ejected_here).count();
    let mut in_now = (nodes.iter())
        .filter(|n| !n.ejected_here && !n.out_otherwise)
        .count();
    let mut out = vec![false; nodes.len()];
    let mut prevented = 0;
    let order = (0..nodes.len())
        .filter(|&i| nodes[i].tier_out)
        .chain((0..nodes.len()).filter(|&i| !nodes[i].tier_out));
    for i in order {
        let n = nodes[i];
        if !n.wanted {
            continue;
        }
        if n.ejected_here || n.out_otherwise {
            // Out already: the tier's say-so takes nothing more out.
            out[i] = true;
            continue;
        }
        if ejected < max_out && in_now > 1 {
            out[i] = true;
            ejected += 1;
            in_now -= 1;
        } else {
            prevented += 1;
        }
    }
    (out, prevented)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_a_limit_sum_to_at_most_the_limit() {
        // 10 among 3 switches: 3 each, 9 in all; a lone switch takes the whole limit.
        assert_eq!(limit_share(10, 3), 3);
        assert_eq!(limit_share(10, 1), 10);
        assert_eq!(limit_share(8, 2), 4);
        // Fewer slots than switches: one each.
        assert_eq!(limit_share(2, 5), 1);
        assert_eq!(limit_share(7, 0), 7, "never divided by zero");
        for live in 1..=8 {
            for limit in live..=64 {
                assert!(limit_share(limit, live) * live <= limit, "{limit}/{live}");
            }
        }
        assert_eq!(queue_share(0, 3), 0);
        assert_eq!(queue_share(100, 3), 33);
        assert_eq!(queue_share(2, 4), 1);
    }

    #[test]
    fn any_takes_one_peer_majority_more_than_half_with_this_switch() {
        assert!(!tier_has_out(TierEjection::Local, true, 3, 3));
        assert!(tier_has_out(TierEjection::Any, false, 1, 4));
        assert!(
            !tier_has_out(TierEjection::Any, true, 0, 4),
            "own ejection is not the tier's"
        );
        // Two switches: the other one alone is half, not more.
        assert!(!tier_has_out(TierEjection::Majority, false, 1, 1));
        // Three: two others of three switches.
        assert!(tier_has_out(TierEjection::Majority, false, 2, 2));
        assert!(!tier_has_out(TierEjection::Majority, false, 1, 2));
        // This switch has it out too: with one other of three that is two of three.
        assert!(tier_has_out(TierEjection::Majority, true, 1, 2));
        assert!(!tier_has_out(TierEjection::Majority, true, 0, 2));
    }

    fn wanted() -> Candidate {
        Candidate {
            wanted: true,
            ..Candidate::default()
        }
    }

    #[test]
    fn the_tier_never_takes_out_more_than_the_budget_nor_the_last_node() {
        // Four nodes, budget 2, one ejected here already: one more may go.
        let nodes = [
            Candidate {
                ejected_here: true,
                ..Candidate::default()
            },
            wanted(),
            wanted(),
            Candidate::default(),
        ];
        assert_eq!(
            tier_ejections(&nodes, 2),
            (vec![false, true, false, false], 1)
        );
        // The one out already keeps its place over an earlier newcomer.
        let nodes = [
            wanted(),
            Candidate {
                tier_out: true,
                ..wanted()
            },
        ];
        assert_eq!(tier_ejections(&nodes, 5), (vec![false, true], 1));
        // Two nodes, both wanted out: one stays in.
        assert_eq!(tier_ejections(&[wanted(), wanted()], 2).0, [true, false]);
        // A node out otherwise is marked without spending the budget.
        let nodes = [
            Candidate {
                out_otherwise: true,
                ..wanted()
            },
            wanted(),
            Candidate::default(),
        ];
        assert_eq!(tier_ejections(&nodes, 1), (vec![true, true, false], 0));
        // A lone node is never taken out.
        assert_eq!(tier_ejections(&[wanted()], 1), (vec![false], 1));
    }
}
