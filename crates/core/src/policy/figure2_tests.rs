//! The CAP paper's Figure 2 (Casalicchio & Colajanni, WWW10 2001), reproduced exactly.
//!
//! Two servers, A and B; classes N, DB, CB, DCB. Initial state: A has received one CB and one
//! DCB, B one N and one DB; CAP's next-server pointers (`*`) are on A for N and DB and on B for
//! CB and DCB. The request sequence is N₁ CB₁ CB₂ DB₁ DCB₁ N₂ DB₂ (the order in which RR, which
//! alternates from A, yields the assignments the figure gives). Expected:
//!
//! | policy | A                   | B                  | final A (N DB CB DCB) | final B |
//! |--------|---------------------|--------------------|-----------------------|---------|
//! | CAP    | N₁ CB₂ DB₁          | CB₁ DCB₁ N₂ DB₂    | 1 1 2 1               | 2 2 1 1 |
//! | RR     | N₁ CB₂ DCB₁ DB₂     | CB₁ DB₁ N₂         | 1 1 2 2               | 2 2 1 0 |
//! | LARD   | CB₁ CB₂ DB₁ DB₂     | N₁ DCB₁ N₂         | 0 2 3 1               | 3 1 0 1 |
//!
//! (For LARD the paper supposes DB and CB map to A and N and DCB to B.)

use super::support::testing::request;
use super::{build_policy, Cap, Policy, PolicyContext, PolicySpec};
use crate::view::{NodeId, StaticView};

const A: NodeId = 0;
const B: NodeId = 1;
const N: usize = 0;
const DB: usize = 1;
const CB: usize = 2;
const DCB: usize = 3;
const CLASS_NAMES: [&str; 4] = ["N", "DB", "CB", "DCB"];

/// The figure's request sequence, as (class, label).
const SEQUENCE: [(usize, &str); 7] = [
    (N, "N_1"),
    (CB, "CB_1"),
    (CB, "CB_2"),
    (DB, "DB_1"),
    (DCB, "DCB_1"),
    (N, "N_2"),
    (DB, "DB_2"),
];

/// Requests per class already on each server before the sequence: [A, B] × [N, DB, CB, DCB].
const INITIAL: [[u32; 4]; 2] = [[0, 0, 1, 1], [1, 1, 0, 0]];

fn build(name: &str) -> Box<dyn Policy> {
    let nodes = vec!["A".to_string(), "B".to_string()];
    let classes: Vec<String> = CLASS_NAMES.iter().map(|c| c.to_string()).collect();
    let ctx = PolicyContext {
        nodes: &nodes,
        classes: &classes,
    };
    build_policy(&PolicySpec::with_defaults(name).unwrap(), &ctx).unwrap()
}

/// Runs the sequence (the key is the class name, the unit LARD assigns in the figure) and
/// returns each server's labels and final per-class counts.
fn run(policy: &dyn Policy) -> ([Vec<&'static str>; 2], [[u32; 4]; 2]) {
    let view = StaticView::uniform(2);
    let mut assigned: [Vec<&'static str>; 2] = [Vec::new(), Vec::new()];
    let mut counts = INITIAL;
    for (class, label) in SEQUENCE {
        let node = policy
            .pick(&request(class, CLASS_NAMES[class]), &view)
            .unwrap();
        assigned[node].push(label);
        counts[node][class] += 1;
    }
    (assigned, counts)
}

fn only(node: NodeId) -> StaticView {
    let mut view = StaticView::uniform(2);
    view.nodes[1 - node].available = false;
    view
}

#[test]
fn cap_from_the_pointers_as_drawn() {
    let cap = Cap::with_pointers(&[A, A, B, B]);
    let (assigned, counts) = run(&cap);
    assert_eq!(assigned[A], ["N_1", "CB_2", "DB_1"]);
    assert_eq!(assigned[B], ["CB_1", "DCB_1", "N_2", "DB_2"]);
    assert_eq!(counts, [[1, 1, 2, 1], [2, 2, 1, 1]]);
}

#[test]
fn cap_reaches_the_initial_state_by_its_own_rules_and_then_matches() {
    // From fresh pointers: CB and DCB go to A; with A unavailable, N and DB go to B. That leaves
    // exactly the figure's initial state, pointers included (N and DB on A, CB and DCB on B).
    let cap = build("cap");
    let both = StaticView::uniform(2);
    assert_eq!(cap.pick(&request(CB, "CB"), &both), Some(A));
    assert_eq!(cap.pick(&request(DCB, "DCB"), &both), Some(A));
    assert_eq!(cap.pick(&request(N, "N"), &only(B)), Some(B));
    assert_eq!(cap.pick(&request(DB, "DB"), &only(B)), Some(B));
    let (assigned, counts) = run(cap.as_ref());
    assert_eq!(assigned[A], ["N_1", "CB_2", "DB_1"]);
    assert_eq!(assigned[B], ["CB_1", "DCB_1", "N_2", "DB_2"]);
    assert_eq!(counts, [[1, 1, 2, 1], [2, 2, 1, 1]]);
}

#[test]
fn round_robin_matches() {
    // One way RR reaches the initial state: CB→A, N→B, DCB→A, DB→B, leaving its pointer on A.
    let rr = build("round-robin");
    let view = StaticView::uniform(2);
    for (class, node) in [(CB, A), (N, B), (DCB, A), (DB, B)] {
        assert_eq!(
            rr.pick(&request(class, CLASS_NAMES[class]), &view),
            Some(node)
        );
    }
    let (assigned, counts) = run(rr.as_ref());
    assert_eq!(assigned[A], ["N_1", "CB_2", "DCB_1", "DB_2"]);
    assert_eq!(assigned[B], ["CB_1", "DB_1", "N_2"]);
    assert_eq!(counts, [[1, 1, 2, 2], [2, 2, 1, 0]]);
}

#[test]
fn lard_matches_with_the_papers_supposed_targets() {
    let lard = build("lard");
    // Establish the supposed targets: DB and CB on A, N and DCB on B.
    for (class, node) in [(DB, A), (CB, A), (N, B), (DCB, B)] {
        assert_eq!(
            lard.pick(&request(class, CLASS_NAMES[class]), &only(node)),
            Some(node)
        );
    }
    let (assigned, counts) = run(lard.as_ref());
    assert_eq!(assigned[A], ["CB_1", "CB_2", "DB_1", "DB_2"]);
    assert_eq!(assigned[B], ["N_1", "DCB_1", "N_2"]);
    assert_eq!(counts, [[0, 2, 3, 1], [3, 1, 0, 1]]);
}
