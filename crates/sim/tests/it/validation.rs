//! The simulator against closed forms and the CAP paper's Figure 2.

use capstan_core::{build_policy, PolicyContext, PolicySpec};
use capstan_sim::engine::{dispatch_trace, RunConfig};
use capstan_sim::queueing::{
    erlang_c_response, mean_response, mmc_mean_response, supermarket_limit, Discipline,
};
use capstan_sim::{PolicyChoice, Scenario};
use capstan_workload::Dist;

fn within(got: f64, want: f64, rel: f64) -> bool {
    (got - want).abs() / want <= rel
}

/// Mean of several independent replications, so the 2 % bound is met with margin rather than by
/// luck of one seed.
fn mm1(rho: f64, discipline: Discipline, service: Dist, jobs: u64) -> f64 {
    let seeds = [11, 12, 13, 14];
    seeds
        .iter()
        .map(|&s| mean_response(1, discipline, rho, service, None, jobs, s))
        .sum::<f64>()
        / seeds.len() as f64
}

#[test]
fn mm1_mean_response_at_rho_half_and_0_8() {
    for (rho, jobs) in [(0.5, 400_000), (0.8, 1_000_000)] {
        let got = mm1(rho, Discipline::Fcfs, Dist::Exp { mean: 1.0 }, jobs);
        let want = 1.0 / (1.0 - rho);
        assert!(within(got, want, 0.02), "rho {rho}: {got} vs {want}");
    }
}

#[test]
fn processor_sharing_is_insensitive_to_the_service_law() {
    // M/M/1-PS has the M/M/1 mean; M/D/1-PS too (PS insensitivity), unlike M/D/1-FCFS, whose
    // mean is 1 + ρ/(2(1-ρ)) — so this tells the disciplines apart.
    let rho = 0.8;
    let ps_exp = mm1(rho, Discipline::Ps, Dist::Exp { mean: 1.0 }, 600_000);
    assert!(within(ps_exp, 5.0, 0.03), "M/M/1-PS {ps_exp}");
    let ps_det = mm1(rho, Discipline::Ps, Dist::Const { value: 1.0 }, 400_000);
    assert!(within(ps_det, 5.0, 0.03), "M/D/1-PS {ps_det}");
    let fcfs_det = mm1(rho, Discipline::Fcfs, Dist::Const { value: 1.0 }, 400_000);
    assert!(within(fcfs_det, 3.0, 0.03), "M/D/1-FCFS {fcfs_det}");
}

#[test]
fn mmc_matches_erlang_c() {
    for (c, rho) in [(2usize, 0.7), (4, 0.8)] {
        let lambda = rho * c as f64;
        let got = [1u64, 2, 3]
            .iter()
            .map(|&s| mmc_mean_response(c, lambda, 1.0, 500_000, s))
            .sum::<f64>()
            / 3.0;
        let want = erlang_c_response(c, lambda, 1.0);
        assert!(within(got, want, 0.02), "M/M/{c} at {rho}: {got} vs {want}");
    }
}

#[test]
fn two_choices_matches_mitzenmacher() {
    let servers = 100;
    let names: Vec<String> = (0..servers).map(|i| format!("s{i}")).collect();
    let classes = vec!["all".to_string()];
    for (lambda, want, jobs) in [(0.5, 1.266, 400_000u64), (0.9, 2.614, 1_200_000)] {
        let policy = build_policy(
            &PolicySpec::with_defaults("two-choices")
                .unwrap()
                .with_param("seed", toml::Value::Integer(5))
                .unwrap(),
            &PolicyContext {
                nodes: &names,
                classes: &classes,
            },
        )
        .unwrap();
        let got = mean_response(
            servers,
            Discipline::Fcfs,
            lambda * servers as f64,
            Dist::Exp { mean: 1.0 },
            Some(policy.as_ref()),
            jobs,
            7,
        );
        assert!(within(got, want, 0.05), "λ {lambda}: {got} vs {want}");
        assert!(within(supermarket_limit(lambda, 2), want, 0.001));
    }
}

const A: usize = 0;
const B: usize = 1;
const N: usize = 0;
const DB: usize = 1;
const CB: usize = 2;
const DCB: usize = 3;

fn trace(policy: &str, seq: &[usize]) -> Vec<usize> {
    let cfg = RunConfig {
        scenario: Scenario::named("commerce").unwrap(),
        policy: PolicyChoice::parse(policy).unwrap(),
        nodes: 2,
        rate: 1.0,
        duration_s: 1.0,
        warmup_s: 0.0,
        seed: 1,
    };
    // One request every 10 ms, through the simulated switch with its costs and events.
    let reqs: Vec<(u64, usize, &str)> = seq
        .iter()
        .enumerate()
        .map(|(i, &c)| (i as u64 * 10_000_000, c, "/page/0"))
        .collect();
    dispatch_trace(cfg, &reqs).unwrap()
}

#[test]
fn cap_figure_2_inside_the_simulator() {
    // The figure's sequence N1 CB1 CB2 DB1 DCB1 N2 DB2, after a prefix that leaves CAP's
    // pointers as drawn (N and DB on A, CB and DCB on B) with B holding an N and a DB and A a
    // CB and a DCB (A also keeps one N and one DB from the prefix, which no pointer looks at).
    let prefix = [N, N, DB, DB, CB, DCB];
    let seq = [N, CB, CB, DB, DCB, N, DB];
    let all: Vec<usize> = prefix.iter().chain(&seq).copied().collect();
    let got = trace("cap", &all);
    assert_eq!(&got[..6], &[A, B, A, B, A, A]);
    // Paper: A gets N1 CB2 DB1, B gets CB1 DCB1 N2 DB2.
    assert_eq!(&got[6..], &[A, B, A, A, B, B, B]);

    // Round robin from A after CB→A, N→B, DCB→A, DB→B: A gets N1 CB2 DCB1 DB2, B CB1 DB1 N2.
    let prefix = [CB, N, DCB, DB];
    let all: Vec<usize> = prefix.iter().chain(&seq).copied().collect();
    let got = trace("round-robin", &all);
    assert_eq!(&got[..4], &[A, B, A, B]);
    assert_eq!(&got[4..], &[A, B, A, B, A, B, A]);
}
