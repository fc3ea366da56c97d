//! Properties every policy shares, and each policy's characteristic behaviour next to LRU's.

use std::collections::{HashMap, HashSet};

use super::{new_evictor, EvictionKind, Evictor, ObjectId};

/// SplitMix64: a seeded generator, enough for test sequences.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Plays the store: keeps what the policy admits, evicts while over budget, and records victims.
struct Store {
    p: Box<dyn Evictor>,
    budget: u64,
    present: HashSet<ObjectId>,
    evicted: Vec<ObjectId>,
}

impl Store {
    fn new(kind: EvictionKind, budget: u64) -> Self {
        Store {
            p: new_evictor(kind, budget),
            budget,
            present: HashSet::new(),
            evicted: Vec::new(),
        }
    }

    /// A request: a hit touches, a miss admits (cost 1) and makes room. True on a hit.
    fn get(&mut self, id: ObjectId, size: u64) -> bool {
        if self.present.contains(&id) {
            self.p.touch(id);
            return true;
        }
        if self.p.admit(id, size, 1) {
            self.present.insert(id);
            while self.p.bytes() > self.budget {
                let v = self
                    .p
                    .victim()
                    .expect("over budget, so something is tracked");
                assert!(
                    self.present.remove(&v),
                    "{}: victim {v} was not stored",
                    self.p.name()
                );
                self.evicted.push(v);
            }
        }
        false
    }
}

fn check_totals(p: &dyn Evictor, model: &HashMap<ObjectId, u64>, step: usize) {
    assert_eq!(p.len(), model.len(), "{}: len at step {step}", p.name());
    assert_eq!(
        p.bytes(),
        model.values().sum::<u64>(),
        "{}: bytes at step {step}",
        p.name()
    );
    assert_eq!(p.is_empty(), model.is_empty());
}

/// Random admit / touch / remove / victim sequences (ids reused, so re-admits and ghost or history
/// hits happen): `len()` and `bytes()` always match what was admitted and not yet evicted or
/// removed, and `victim()` only names tracked objects.
#[test]
fn totals_stay_consistent_under_random_operations() {
    for kind in EvictionKind::ALL {
        for seed in 1..=4u64 {
            let capacity = 64 * 1024;
            let mut p = new_evictor(kind, capacity);
            let mut model: HashMap<ObjectId, u64> = HashMap::new();
            let mut rng = Rng(seed);
            for step in 0..20_000 {
                let id = rng.below(400);
                match rng.below(10) {
                    0..=3 => {
                        let size = 1 + rng.below(4096);
                        let cost = 1 + rng.below(1000);
                        if p.admit(id, size, cost) {
                            model.insert(id, size);
                        } else {
                            model.remove(&id);
                        }
                    }
                    4..=6 => p.touch(id),
                    7 => {
                        p.remove(id);
                        model.remove(&id);
                    }
                    _ => {
                        while p.bytes() > capacity / 2 {
                            let v = p.victim().expect("bytes > 0");
                            assert!(model.remove(&v).is_some(), "{kind:?}: untracked victim {v}");
                        }
                        if let Some(v) = p.victim() {
                            assert!(model.remove(&v).is_some(), "{kind:?}: untracked victim {v}");
                        }
                    }
                }
                check_totals(p.as_ref(), &model, step);
            }
        }
    }
}

/// `victim()` hands out every tracked object exactly once, then None.
#[test]
fn victim_drains_everything_exactly_once() {
    for kind in EvictionKind::ALL {
        let mut p = new_evictor(kind, 1 << 30);
        let mut rng = Rng(7);
        for id in 0..1000u64 {
            assert!(
                p.admit(id, 1 + rng.below(10_000), 1 + rng.below(100)),
                "{kind:?}"
            );
            for _ in 0..rng.below(4) {
                p.touch(rng.below(id + 1));
            }
        }
        let mut seen = HashSet::new();
        while let Some(v) = p.victim() {
            assert!(seen.insert(v), "{kind:?}: {v} evicted twice");
        }
        assert_eq!(seen.len(), 1000, "{kind:?}");
        assert_eq!((p.len(), p.bytes()), (0, 0), "{kind:?}");
        assert_eq!(p.victim(), None);
    }
}

/// Removing or touching an id the policy never saw changes nothing: the same victims follow.
#[test]
fn unknown_ids_are_ignored() {
    for kind in EvictionKind::ALL {
        let run = |noise: bool| {
            let mut p = new_evictor(kind, 10_000);
            let mut rng = Rng(11);
            let mut victims = Vec::new();
            for step in 0..3000u64 {
                let id = rng.below(60);
                if rng.below(3) == 0 {
                    p.touch(id);
                } else if p.admit(id, 100 + rng.below(400), 1) {
                    while p.bytes() > 10_000 {
                        victims.push(p.victim().unwrap());
                    }
                }
                if noise {
                    let (len, bytes) = (p.len(), p.bytes());
                    p.remove(1_000_000 + step);
                    p.touch(2_000_000 + step);
                    assert_eq!((p.len(), p.bytes()), (len, bytes), "{kind:?}");
                }
            }
            victims
        };
        assert_eq!(run(false), run(true), "{kind:?}");
    }
}

/// Admitting a tracked id again replaces its size; too large, it is dropped.
#[test]
fn readmit_replaces_size() {
    for kind in EvictionKind::ALL {
        let mut p = new_evictor(kind, 1000);
        assert!(p.admit(1, 100, 1), "{kind:?}");
        assert!(p.admit(2, 50, 1), "{kind:?}");
        assert!(p.admit(1, 300, 1), "{kind:?}");
        assert_eq!((p.len(), p.bytes()), (2, 350), "{kind:?}");
        assert!(p.admit(1, 20, 1), "{kind:?}");
        assert_eq!((p.len(), p.bytes()), (2, 70), "{kind:?}");
        assert!(!p.admit(1, 1001, 1), "{kind:?}: larger than the capacity");
        assert_eq!((p.len(), p.bytes()), (1, 50), "{kind:?}");
        assert_eq!(p.victim(), Some(2), "{kind:?}");
        assert_eq!(p.victim(), None, "{kind:?}");
    }
}

#[test]
fn objects_larger_than_the_capacity_are_declined() {
    for kind in EvictionKind::ALL {
        let mut p = new_evictor(kind, 1000);
        assert!(!p.admit(1, 1001, 1), "{kind:?}");
        assert!(p.is_empty());
        assert!(p.admit(2, 1000, 1), "{kind:?}");
        assert_eq!(p.bytes(), 1000);
    }
}

#[test]
fn names_parse_and_print() {
    let names: Vec<&str> = EvictionKind::ALL.iter().map(|k| k.name()).collect();
    assert_eq!(
        names,
        ["lru", "lfu-da", "gdsf", "clfus", "s3-fifo", "sieve"]
    );
    for kind in EvictionKind::ALL {
        assert_eq!(kind.name().parse::<EvictionKind>(), Ok(kind));
        assert_eq!(kind.name().to_uppercase().parse::<EvictionKind>(), Ok(kind));
        assert_eq!(kind.to_string(), kind.name());
        assert_eq!(new_evictor(kind, 1).name(), kind.name());
        // The serde name is the same as `name()`.
        use serde::de::{value::Error, value::StrDeserializer, IntoDeserializer};
        use serde::Deserialize;
        let de: StrDeserializer<Error> = kind.name().into_deserializer();
        assert_eq!(EvictionKind::deserialize(de), Ok(kind));
    }
    let err = "arc".parse::<EvictionKind>().unwrap_err();
    assert!(err.contains("\"arc\""), "{err}");
    assert!(
        err.contains("lru, lfu-da, gdsf, clfus, s3-fifo, sieve"),
        "{err}"
    );
}

/// Budget 100 one-byte objects. H is requested 6 times, then 300 one-time objects stream past.
/// LRU loses H after 100 of them; the frequency- and visit-aware policies keep it.
#[test]
fn hot_object_survives_a_scan_except_under_lru() {
    for kind in EvictionKind::ALL {
        let mut s = Store::new(kind, 100);
        const HOT: ObjectId = 1_000_000;
        for _ in 0..6 {
            s.get(HOT, 1);
        }
        for id in 0..300 {
            s.get(id, 1);
        }
        let kept = s.present.contains(&HOT);
        assert_eq!(kept, kind != EvictionKind::Lru, "{kind:?}");
        assert!(s.get(HOT, 1) || kind == EvictionKind::Lru);
    }
}

/// GDSF: a budget of 1000 bytes holds five 100-byte objects and one of 500. One more small
/// object: LRU evicts the oldest small one; GDSF the large one (H = 1/500 < 1/100).
#[test]
fn gdsf_evicts_the_large_object_first() {
    for kind in [EvictionKind::Lru, EvictionKind::Gdsf] {
        let mut s = Store::new(kind, 1000);
        for id in 0..5 {
            s.get(id, 100);
        }
        s.get(99, 500);
        s.get(5, 100);
        let expected = if kind == EvictionKind::Gdsf { 99 } else { 0 };
        assert_eq!(s.evicted, [expected], "{kind:?}");
    }
}

/// LFU-DA's aging: P was requested 8 times long ago; since then a stream of new objects, each
/// requested twice, churns a 3-object cache. Each eviction raises L towards the keys of the
/// newcomers, so P (key 8 + its old L = 8) is eventually evicted. Plain LFU (L fixed at 0) would
/// keep P forever: no newcomer reaches more than 2 references.
#[test]
fn lfu_da_ages_out_a_formerly_popular_object() {
    let mut s = Store::new(EvictionKind::LfuDa, 3);
    const P: ObjectId = 1_000_000;
    for _ in 0..8 {
        s.get(P, 1);
    }
    let mut round = 0;
    while s.present.contains(&P) {
        s.get(round, 1);
        s.get(round, 1);
        round += 1;
        assert!(round < 1000, "P never aged out");
    }
    assert!(
        round > 3,
        "P outlived several turnovers first ({round} rounds)"
    );
}

/// CLFUS declines a huge object that would displace many hot small ones; LRU takes it and loses
/// the small ones.
#[test]
fn clfus_declines_a_huge_cold_object() {
    for kind in [EvictionKind::Lru, EvictionKind::Clfus] {
        let mut s = Store::new(kind, 10_000);
        for round in 0..5 {
            for id in 0..10 {
                let hit = s.get(id, 900);
                assert_eq!(hit, round > 0, "{kind:?}");
            }
        }
        for _ in 0..3 {
            s.get(99, 8000);
        }
        let small_kept = (0..10).filter(|id| s.present.contains(id)).count();
        if kind == EvictionKind::Clfus {
            assert!(!s.present.contains(&99));
            assert_eq!(small_kept, 10);
        } else {
            assert!(s.present.contains(&99));
            assert_eq!(small_kept, 2);
        }
    }
}

/// Zipf-like traffic through every policy: all of them keep the store within budget and answer
/// for what they admitted; the hit ratios land in a plausible band (a smoke check, not a ranking).
#[test]
fn skewed_traffic_hit_ratios_are_plausible() {
    for kind in EvictionKind::ALL {
        let budget = 200 * 1000;
        let mut s = Store::new(kind, budget);
        let mut rng = Rng(3);
        let mut hits = 0;
        let n = 50_000;
        for _ in 0..n {
            // Approximately Zipf(1) over 10 000 ids: id = floor(10000^u) - 1.
            let u = (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
            let id = (10_000f64.powf(u) as u64).saturating_sub(1);
            let size = 500 + (id * 7919) % 1000;
            if s.get(id, size) {
                hits += 1;
            }
            assert!(s.p.bytes() <= budget);
            assert_eq!(s.p.len(), s.present.len());
        }
        let ratio = f64::from(hits) / f64::from(n);
        assert!((0.3..0.8).contains(&ratio), "{kind:?}: hit ratio {ratio}");
    }
}

/// Drives `new` and `old` through the same long random trace — admits (re-admits too), hits with
/// one object hit far more than the others, removals, and evictions down to a budget — and
/// requires the same victim at every step. `sizes` and `costs` bound the random sizes and costs;
/// small bounds make many equal keys, so the tie order is checked as well.
fn same_victims(mut new: Box<dyn Evictor>, mut old: Box<dyn Evictor>, sizes: u64, costs: u64) {
    const HOT: ObjectId = 0;
    let budget = 2000 * sizes / 2;
    let mut rng = Rng(0x5eed);
    assert_eq!(new.admit(HOT, 1, 1), old.admit(HOT, 1, 1));
    let mut victims = 0;
    for step in 0..400_000 {
        let id = 1 + rng.below(5000);
        match rng.below(20) {
            0..=6 => {
                let (size, cost) = (1 + rng.below(sizes), 1 + rng.below(costs));
                assert_eq!(new.admit(id, size, cost), old.admit(id, size, cost));
                while new.bytes() > budget {
                    assert_eq!(new.victim(), old.victim(), "{}: step {step}", new.name());
                    victims += 1;
                }
            }
            7..=8 => {
                new.touch(HOT);
                old.touch(HOT);
            }
            9..=18 => {
                new.touch(id);
                old.touch(id);
            }
            _ => {
                new.remove(id);
                old.remove(id);
            }
        }
        assert_eq!((new.len(), new.bytes()), (old.len(), old.bytes()));
    }
    assert!(victims > 50_000, "{}: only {victims} victims", new.name());
    while let Some(v) = old.victim() {
        assert_eq!(new.victim(), Some(v), "{}: draining", new.name());
    }
    assert_eq!(new.victim(), None);
}

/// LFU-DA's bucket ring evicts exactly what the indexed heap it replaced evicted (the hot object
/// gets ~40 000 hits, so keys beyond the ring's window are exercised too).
#[test]
fn lfu_da_victims_match_the_heap_implementation() {
    use super::{lfu_da::LfuDa, reference::HeapLfuDa};
    let capacity = 1 << 30;
    same_victims(
        Box::new(LfuDa::new(capacity)),
        Box::new(HeapLfuDa::new(capacity)),
        64 * 1024,
        5000,
    );
}

/// GDSF's radix queue evicts exactly what the indexed heap it replaced evicted, with distinct
/// priorities (random sizes and costs) and with many equal ones (few sizes, cost 1).
#[test]
fn gdsf_victims_match_the_heap_implementation() {
    use super::{gdsf::Gdsf, reference::HeapGdsf};
    let capacity = 1 << 30;
    for (sizes, costs) in [(64 * 1024, 5000), (4, 1)] {
        same_victims(
            Box::new(Gdsf::new(capacity)),
            Box::new(HeapGdsf::new(capacity)),
            sizes,
            costs,
        );
    }
}
