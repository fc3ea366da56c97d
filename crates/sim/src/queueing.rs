//! The event core and the `model` resources on textbook queues, so the simulator can be checked
//! against closed forms: M/M/1, M/G/1 processor sharing, M/M/c (Erlang C), and dispatching over
//! many servers (Mitzenmacher's power of two choices) through a `core` policy.

use capstan_core::{NodeState, Policy, RequestInfo, StaticView};
use capstan_model::{CpuPs, Fcfs};
use capstan_workload::{stream, Dist, WorkloadRng};

use crate::event::{nanos_ceil, nanos_round, secs, EventQueue, Nanos};

/// How each server serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discipline {
    /// First come, first served (the `model` crate's FCFS queue).
    Fcfs,
    /// Egalitarian processor sharing on one core (the `model` crate's CPU).
    Ps,
}

#[derive(Clone, Copy)]
enum Ev {
    Arrival,
    Departure { server: usize, arrived: Nanos },
    PsCheck { server: usize, gen: u64 },
}

enum Server {
    Fcfs(Fcfs),
    Ps { cpu: CpuPs, gen: u64 },
}

/// `servers` identical stations fed by Poisson arrivals at total rate `lambda`, service times
/// from `service`; `policy` picks the station from live active counts (`None`: station 0).
/// Returns the mean time in system of `jobs` jobs after the first `jobs / 10` (warm-up).
pub fn mean_response(
    servers: usize,
    discipline: Discipline,
    lambda: f64,
    service: Dist,
    policy: Option<&dyn Policy>,
    jobs: u64,
    seed: u64,
) -> f64 {
    let mut q: EventQueue<Ev> = EventQueue::new();
    let mut arrivals: WorkloadRng = stream(seed, "queue-arrivals");
    let mut services: WorkloadRng = stream(seed, "queue-services");
    let inter = Dist::Exp { mean: 1.0 / lambda };
    let mut st: Vec<Server> = (0..servers)
        .map(|_| match discipline {
            Discipline::Fcfs => Server::Fcfs(Fcfs::new()),
            Discipline::Ps => Server::Ps {
                cpu: CpuPs::new(1, 1.0),
                gen: 0,
            },
        })
        .collect();
    let mut view = StaticView {
        now_nanos: 0,
        nodes: vec![NodeState::default(); servers],
        ..StaticView::default()
    };
    let mut arrived_at: Vec<Nanos> = Vec::new();
    let warm = jobs / 10;
    let (mut issued, mut finished, mut measured) = (0u64, 0u64, 0u64);
    let mut sum = 0.0;
    q.schedule(0, Ev::Arrival);
    while let Some((now, ev)) = q.pop() {
        match ev {
            Ev::Arrival => {
                if issued < jobs {
                    q.after(nanos_round(inter.sample(&mut arrivals)), Ev::Arrival);
                }
                issued += 1;
                view.now_nanos = now;
                let server = match policy {
                    Some(p) => p
                        .pick(
                            &RequestInfo {
                                class: 0,
                                key: "/",
                                key_hash: 0,
                            },
                            &view,
                        )
                        .unwrap_or(0),
                    None => 0,
                };
                view.nodes[server].active += 1;
                let work = service.sample(&mut services);
                match &mut st[server] {
                    Server::Fcfs(f) => {
                        let slot = f.submit(secs(now), work);
                        q.schedule(
                            nanos_ceil(slot.finish),
                            Ev::Departure {
                                server,
                                arrived: now,
                            },
                        );
                    }
                    Server::Ps { cpu, gen } => {
                        arrived_at.push(now);
                        let id = (arrived_at.len() - 1) as u64;
                        for c in cpu.arrive(secs(now), id, work) {
                            q.schedule(
                                now,
                                Ev::Departure {
                                    server,
                                    arrived: arrived_at[c.id as usize],
                                },
                            );
                        }
                        *gen += 1;
                        if let Some(t) = cpu.next_completion() {
                            q.schedule(
                                nanos_ceil(t).max(now + 1),
                                Ev::PsCheck { server, gen: *gen },
                            );
                        }
                    }
                }
            }
            Ev::PsCheck { server, gen } => {
                if let Server::Ps { cpu, gen: g } = &mut st[server] {
                    if *g != gen {
                        continue;
                    }
                    for c in cpu.advance(secs(now) + 0.5e-9) {
                        q.schedule(
                            now,
                            Ev::Departure {
                                server,
                                arrived: arrived_at[c.id as usize],
                            },
                        );
                    }
                    *g += 1;
                    if let Some(t) = cpu.next_completion() {
                        q.schedule(nanos_ceil(t).max(now + 1), Ev::PsCheck { server, gen: *g });
                    }
                }
            }
            Ev::Departure { server, arrived } => {
                view.nodes[server].active -= 1;
                finished += 1;
                if finished > warm {
                    sum += secs(now - arrived);
                    measured += 1;
                }
            }
        }
    }
    sum / measured.max(1) as f64
}

/// M/M/c with one central FCFS queue: with service times drawn on arrival, sending each job to
/// the server that frees up first is exactly a central queue. Mean time in system.
pub fn mmc_mean_response(c: usize, lambda: f64, mu: f64, jobs: u64, seed: u64) -> f64 {
    let mut arrivals = stream(seed, "queue-arrivals");
    let mut services = stream(seed, "queue-services");
    let inter = Dist::Exp { mean: 1.0 / lambda };
    let service = Dist::Exp { mean: 1.0 / mu };
    let mut q: EventQueue<()> = EventQueue::new();
    let mut servers = vec![Fcfs::new(); c];
    let warm = jobs / 10;
    let mut sum = 0.0;
    let mut t: Nanos = 0;
    for i in 0..jobs {
        t += nanos_round(inter.sample(&mut arrivals));
        q.schedule(t, ());
        let (now, ()) = q.pop().unwrap_or((t, ()));
        let s = servers
            .iter_mut()
            .min_by(|a, b| a.busy_until().total_cmp(&b.busy_until()))
            .expect("c > 0");
        let slot = s.submit(secs(now), service.sample(&mut services));
        if i >= warm {
            sum += slot.finish - secs(now);
        }
    }
    sum / (jobs - warm).max(1) as f64
}

/// Erlang C: the probability an arrival waits in M/M/c, and the mean time in system.
pub fn erlang_c_response(c: usize, lambda: f64, mu: f64) -> f64 {
    let a = lambda / mu;
    let rho = a / c as f64;
    let mut term = 1.0;
    let mut sum = 1.0;
    for k in 1..c {
        term *= a / k as f64;
        sum += term;
    }
    let last = term * a / c as f64 / (1.0 - rho);
    let p_wait = last / (sum + last);
    p_wait / (c as f64 * mu - lambda) + 1.0 / mu
}

/// Mitzenmacher's limit for the supermarket model: mean time in system with d choices at
/// per-server load λ (service rate 1), `Σ_{i≥1} λ^((d^i − d)/(d − 1))`.
pub fn supermarket_limit(lambda: f64, d: u32) -> f64 {
    let d = f64::from(d);
    (1..40)
        .map(|i| lambda.powf((d.powi(i) - d) / (d - 1.0)))
        .take_while(|x| *x > 1e-15)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_forms() {
        assert!((supermarket_limit(0.5, 2) - 1.2657).abs() < 1e-3);
        assert!((supermarket_limit(0.9, 2) - 2.6135).abs() < 1e-3);
        // c = 1 is M/M/1.
        assert!((erlang_c_response(1, 0.5, 1.0) - 2.0).abs() < 1e-12);
    }
}
