//! The models against queueing theory's closed forms, driven by a tiny event loop in virtual time
//! (the same way the simulator will drive them).

use capstan_model::{CpuPs, Disk, DiskParams, Fcfs};
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;

fn exp(rng: &mut Pcg64, mean: f64) -> f64 {
    // 1 - u lies in (0, 1], so the log is finite.
    -mean * (1.0 - rng.gen::<f64>()).ln()
}

/// Mean response time of an FCFS queue fed Poisson arrivals at `lambda` with service times from
/// `service`.
fn fcfs_mean_response(
    n: usize,
    lambda: f64,
    seed: u64,
    mut service: impl FnMut(&mut Pcg64) -> f64,
) -> f64 {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut q = Fcfs::new();
    let mut t = 0.0;
    let mut total = 0.0;
    for _ in 0..n {
        t += exp(&mut rng, 1.0 / lambda);
        let s = service(&mut rng);
        total += q.submit(t, s).finish - t;
    }
    total / n as f64
}

#[test]
fn mm1_fcfs_mean_response_is_one_over_mu_minus_lambda() {
    let (lambda, mu) = (0.5, 1.0);
    let got = fcfs_mean_response(400_000, lambda, 1, |r| exp(r, 1.0 / mu));
    let want = 1.0 / (mu - lambda);
    assert!((got - want).abs() / want < 0.03, "got {got}, want {want}");
}

#[test]
fn md1_disk_matches_pollaczek_khinchine() {
    // Every request reads the same 50 KB file, so the disk's service time is deterministic.
    let mut disk = Disk::new(DiskParams::default(), 1.0);
    let d = DiskParams::default().access_time_s(51_250);
    let rho = 0.6;
    let lambda = rho / d;
    let mut rng = Pcg64::seed_from_u64(2);
    let n = 300_000;
    let mut t = 0.0;
    let mut total = 0.0;
    for _ in 0..n {
        t += exp(&mut rng, 1.0 / lambda);
        total += disk.read(t, 51_250).finish - t;
    }
    let got = total / n as f64;
    // P-K: W = rho * E[S^2] / (2 E[S] (1 - rho)) with E[S^2] = d^2, so W = rho d / (2 (1 - rho)).
    let want = d + rho * d / (2.0 * (1.0 - rho));
    assert!((got - want).abs() / want < 0.03, "got {got}, want {want}");
    // The disk was busy rho of the time.
    let util = disk.busy_seconds(t) / t;
    assert!((util - rho).abs() < 0.02, "utilisation {util}");
}

/// Mean response time of a processor-sharing CPU with Poisson arrivals.
fn ps_mean_response(
    cores: u32,
    n: usize,
    lambda: f64,
    seed: u64,
    mut service: impl FnMut(&mut Pcg64) -> f64,
) -> (f64, f64) {
    let mut rng = Pcg64::seed_from_u64(seed);
    let mut cpu = CpuPs::new(cores, 1.0);
    let mut arrivals = Vec::with_capacity(n);
    let mut next_arrival = exp(&mut rng, 1.0 / lambda);
    let mut total = 0.0;
    let mut finished = 0usize;
    let mut record = |done: Vec<capstan_model::Completion>, arrivals: &Vec<f64>| {
        for c in done {
            total += c.at - arrivals[c.id as usize];
            finished += 1;
        }
    };
    while arrivals.len() < n {
        match cpu.next_completion() {
            Some(tc) if tc < next_arrival => record(cpu.advance(tc), &arrivals),
            _ => {
                let id = arrivals.len() as u64;
                arrivals.push(next_arrival);
                let s = service(&mut rng);
                let done = cpu.arrive(next_arrival, id, s);
                record(done, &arrivals);
                next_arrival += exp(&mut rng, 1.0 / lambda);
            }
        }
    }
    while let Some(tc) = cpu.next_completion() {
        record(cpu.advance(tc), &arrivals);
    }
    assert_eq!(finished, n);
    (total / n as f64, cpu.utilisation_since_start())
}

#[test]
fn mg1_processor_sharing_mean_response_is_es_over_one_minus_rho() {
    // Uniform service on [0, 0.2 s]: not exponential, yet PS's mean response depends only on E[S].
    let (es, lambda) = (0.1, 5.0);
    let rho = lambda * es;
    let (got, _) = ps_mean_response(1, 300_000, lambda, 3, |r| r.gen::<f64>() * 2.0 * es);
    let want = es / (1.0 - rho);
    assert!((got - want).abs() / want < 0.04, "got {got}, want {want}");
}

#[test]
fn md1_processor_sharing_is_insensitive_too() {
    let (es, lambda) = (0.1, 6.0);
    let (got, util) = ps_mean_response(1, 300_000, lambda, 4, |_| es);
    let want = es / (1.0 - lambda * es);
    assert!((got - want).abs() / want < 0.04, "got {got}, want {want}");
    assert!((util - 0.6).abs() < 0.02, "utilisation {util}");
}

#[test]
fn two_cores_light_load_is_nearly_delay_free() {
    // With two cores and ρ per core 0.25, PS on c cores is M/G/c-PS; at this load most jobs run
    // alone on a core, so the mean response must lie between E[S] and the 1-core PS value.
    let es = 0.1;
    let (got, util) = ps_mean_response(2, 100_000, 5.0, 5, |r| exp(r, es));
    assert!(got > es && got < es / (1.0 - 0.5), "got {got}");
    assert!((util - 0.25).abs() < 0.02, "utilisation {util}");
}
