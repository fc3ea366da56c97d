//! Closed-loop clients over a weighted request list (a WebStone file list), dispatched request
//! by request through one `core` policy to nodes that spend their demands as `capstan origin
//! --resources emulated` does: the lab's experiments in virtual time (`capstan lab X --engine
//! sim|both`).
//!
//! Each client sends a request, waits for the whole response, thinks (exponential, or not at
//! all as in WebStone) and sends the next. The switch dispatches every request on arrival with
//! the policy, seeing its own active counts and, every T_gat, the nodes' load reports through
//! the same `core` gatherer the live switch uses. A node serves a request in the origin's
//! stages, each starting when the previous one ends: a static file is a memory-cache lookup,
//! a disk read on a miss (FCFS), CPU (processor shared over the cores) and the NIC (FCFS); a
//! CPU CGI is CPU then NIC; the disk CGI is one FCFS disk job then NIC.
//!
//! The HTTP path between client, switch and node (generator, switch and node processes,
//! loopback TCP) is a pure delay, [`HttpPath`]: half its fixed part before the switch
//! dispatches, the other half and a per-byte part after the node has sent the answer. It is
//! zero unless measured (`capstan lab X --engine both` measures it on the running cluster); the
//! model has no contention for it, so it is what one request pays on an idle machine. What it
//! still leaves out: the switch's own CPU and this machine's cores shared under load.

use capstan_core::{
    build_policy, GatherRules, Gatherer, LoadReport, NodeState, Outcome, Policy, PolicyContext,
    PolicySpec, StaticView, WeightSource,
};
use capstan_model::{CpuPs, Disk, LruBytes, Nic, NodeParams};
use capstan_workload::dist::uniform01;
use capstan_workload::{stream, Dist, WorkloadRng};

use crate::event::{nanos_ceil, nanos_round, secs, EventQueue, Nanos};
use crate::policy::request;

/// What a request asks of the node that serves it.
#[derive(Clone, Debug, PartialEq)]
pub enum Work {
    /// A file of the tree: `object` names it in the memory cache.
    Static { object: u64, bytes: u64 },
    /// CPU seconds at speed 1, then `bytes` of answer.
    Cpu { seconds: f64, bytes: u64 },
    /// Disk seconds at speed 1 (one FCFS job), then `bytes` of answer.
    Disk { seconds: f64, bytes: u64 },
}

/// One line of the request list.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestType {
    /// The request path: the locality key policies see.
    pub key: String,
    /// The switch's class of the request (an index into `ClosedConfig::classes`).
    pub class: usize,
    pub weight: u64,
    pub work: Work,
}

/// What the HTTP path adds to a request outside the node's resources: a fixed delay and one
/// per byte of the answer (copies through the switch and the client over loopback).
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct HttpPath {
    pub fixed_s: f64,
    pub per_byte_s: f64,
}

impl HttpPath {
    /// The part before the switch dispatches: connection set-up and the request's way in.
    fn inbound_s(&self) -> f64 {
        self.fixed_s / 2.0
    }

    /// The part after the node has sent the answer: the answer's way out to the client.
    fn outbound_s(&self, bytes: u64) -> f64 {
        self.fixed_s / 2.0 + self.per_byte_s * bytes as f64
    }
}

/// How clients draw their requests, and how the measured window starts.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Draws {
    /// Each client its own seeded stream; the window follows the warm-up without a pause.
    #[default]
    PerClient,
    /// As `capstan bench` with one generator thread draws them: one stream shared by every
    /// client in send order (the bench's `bench-requests-0` of `seed`; `warmup_seed` for the
    /// warm-up). The warm-up drains before the window, and the window starts with every client
    /// sending at once to idle nodes (memory caches kept), as each of the lab's runs does. The
    /// two worlds then see the same requests in the same order (common random numbers), so a
    /// short window's sampling noise is shared rather than compared.
    AsBench { seed: u64, warmup_seed: u64 },
}

#[derive(Clone, Debug)]
pub struct ClosedConfig {
    /// Every node's capacity (cores, speed, disk, NIC, cache fraction, static CPU).
    pub nodes: Vec<NodeParams>,
    /// The nodes' names as the policy knows them (its parameters may name nodes).
    pub node_names: Vec<String>,
    /// Bytes of the document tree (the memory cache is a fraction of it).
    pub tree_bytes: u64,
    pub requests: Vec<RequestType>,
    pub classes: Vec<String>,
    pub policy: PolicySpec,
    /// T_gat, seconds; 0: the policy sees live state.
    pub gather_interval_s: f64,
    pub clients: usize,
    /// Mean of the exponential think time, seconds (0: none).
    pub think_mean_s: f64,
    /// Requests sent before this are not measured, and utilisations start here.
    pub warmup_s: f64,
    /// The measured window after the warm-up, seconds.
    pub duration_s: f64,
    pub seed: u64,
    /// The HTTP path's delay (zero: requests move between client, switch and node instantly).
    pub http_path: HttpPath,
    pub draws: Draws,
}

/// One node's utilisation over the measured window (0–1; CPU per core).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClosedNodeUse {
    pub cpu: f64,
    pub disk: f64,
    pub nic: f64,
    pub served: u64,
}

#[derive(Clone, Debug, Default)]
pub struct ClosedResult {
    /// Responses completed inside the window, per second.
    pub throughput: f64,
    /// Response times (s) of the requests sent inside the window and finished by its end
    /// (plus the drain), sorted.
    pub latencies_s: Vec<f64>,
    /// The same response times per line of the request list (`ClosedConfig::requests`),
    /// unsorted: per-class comparisons with the lab.
    pub latencies_by_type_s: Vec<Vec<f64>>,
    pub nodes: Vec<ClosedNodeUse>,
    pub events: u64,
}

impl ClosedResult {
    pub fn mean_ms(&self) -> f64 {
        if self.latencies_s.is_empty() {
            return 0.0;
        }
        1e3 * self.latencies_s.iter().sum::<f64>() / self.latencies_s.len() as f64
    }

    pub fn quantile_ms(&self, q: f64) -> f64 {
        if self.latencies_s.is_empty() {
            return 0.0;
        }
        let i =
            ((q * self.latencies_s.len() as f64).ceil() as usize).clamp(1, self.latencies_s.len());
        1e3 * self.latencies_s[i - 1]
    }
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    Send { client: u32 },
    Dispatch { client: u32, kind: u32, sent: Nanos },
    Delivered { req: u32 },
    StageDone { req: u32 },
    CpuCheck { node: u32, gen: u64 },
    NicDone { req: u32 },
    Gather,
    Readings { end: bool },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Stage {
    Disk,
    Cpu,
}

#[derive(Clone, Copy)]
struct Req {
    client: u32,
    node: u32,
    kind: u32,
    sent: Nanos,
    /// When the switch dispatched it to the node (the node's own clock starts here).
    at_node: Nanos,
    /// CPU seconds and NIC bytes still to spend after the first stage.
    cpu_s: f64,
    bytes: u64,
    stage: Stage,
}

struct Node {
    params: NodeParams,
    cpu: CpuPs,
    gen: u64,
    disk: Disk,
    nic: Nic,
    cache: LruBytes,
    window_n: u64,
    window_s: f64,
    last: (f64, f64, f64),
    warm: (f64, f64, f64),
    done: (f64, f64, f64),
    served: u64,
}

/// Runs the configuration to the end of its window and returns what was measured.
pub fn run(cfg: &ClosedConfig) -> Result<ClosedResult, String> {
    let mut e = Closed::new(cfg)?;
    e.run();
    Ok(e.finish())
}

struct Closed<'a> {
    cfg: &'a ClosedConfig,
    policy: Box<dyn Policy>,
    weights: WeightSource,
    gatherer: Gatherer,
    gather_ns: Nanos,
    nodes: Vec<Node>,
    live: Vec<NodeState>,
    view: StaticView,
    q: EventQueue<Ev>,
    reqs: Vec<Req>,
    free: Vec<u32>,
    cdf: Vec<f64>,
    /// `Draws::AsBench`: the weights, the shared stream, and whether the window has begun.
    weighted: capstan_workload::Weighted,
    shared: Option<WorkloadRng>,
    in_window: bool,
    /// Clients back from the warm-up, waiting for the window.
    parked: Vec<u32>,
    hashes: Vec<u64>,
    clients: Vec<WorkloadRng>,
    warmup: Nanos,
    end: Nanos,
    completed_in_window: u64,
    latencies: Vec<f64>,
    latencies_by_type: Vec<Vec<f64>>,
    scratch: Vec<capstan_model::Completion>,
}

impl<'a> Closed<'a> {
    fn new(cfg: &'a ClosedConfig) -> Result<Closed<'a>, String> {
        if cfg.nodes.is_empty() || cfg.clients == 0 || cfg.requests.is_empty() {
            return Err("a closed-loop run needs nodes, clients and requests".into());
        }
        if !(cfg.duration_s > 0.0 && cfg.warmup_s >= 0.0 && cfg.gather_interval_s >= 0.0) {
            return Err("duration must be positive, warm-up and T_gat non-negative".into());
        }
        let path = cfg.http_path;
        if !(path.fixed_s >= 0.0
            && path.per_byte_s >= 0.0
            && (path.fixed_s + path.per_byte_s).is_finite())
        {
            return Err("the HTTP path's delays must be finite and non-negative".into());
        }
        let total: f64 = cfg.requests.iter().map(|r| r.weight as f64).sum();
        if total <= 0.0 {
            return Err("the request list has no weight".into());
        }
        if cfg.node_names.len() != cfg.nodes.len() {
            return Err("one name per node is needed".into());
        }
        let names = &cfg.node_names;
        let policy = build_policy(
            &cfg.policy,
            &PolicyContext {
                nodes: names,
                classes: &cfg.classes,
            },
        )
        .map_err(|e| e.to_string().replace('\n', " "))?;
        let mut acc = 0.0;
        let cdf = cfg
            .requests
            .iter()
            .map(|r| {
                acc += r.weight as f64 / total;
                acc
            })
            .collect();
        let nodes = cfg
            .nodes
            .iter()
            .map(|p| Node {
                cpu: CpuPs::new(p.cores, p.speed),
                gen: 0,
                disk: Disk::new(p.disk, p.speed),
                nic: Nic::new(p.nic),
                cache: LruBytes::new(p.cache_bytes(cfg.tree_bytes)),
                window_n: 0,
                window_s: 0.0,
                last: (0.0, 0.0, 0.0),
                warm: (0.0, 0.0, 0.0),
                done: (0.0, 0.0, 0.0),
                served: 0,
                params: p.clone(),
            })
            .collect();
        let n = cfg.nodes.len();
        Ok(Closed {
            weights: policy.needs().weights,
            policy,
            gatherer: Gatherer::new(n, GatherRules::default(), 0),
            gather_ns: nanos_round(cfg.gather_interval_s),
            nodes,
            live: vec![NodeState::default(); n],
            view: StaticView::uniform(n),
            q: EventQueue::new(),
            reqs: Vec::new(),
            free: Vec::new(),
            cdf,
            weighted: capstan_workload::Weighted::new(cfg.requests.iter().map(|r| r.weight))?,
            shared: match cfg.draws {
                Draws::PerClient => None,
                Draws::AsBench { warmup_seed, .. } => Some(stream(warmup_seed, "bench-requests-0")),
            },
            in_window: false,
            parked: Vec::new(),
            hashes: cfg
                .requests
                .iter()
                .map(|r| capstan_core::hash_key(&r.key))
                .collect(),
            clients: (0..cfg.clients)
                .map(|c| stream(cfg.seed, &format!("closed-client-{c}")))
                .collect(),
            warmup: nanos_round(cfg.warmup_s),
            end: nanos_round(cfg.warmup_s + cfg.duration_s),
            completed_in_window: 0,
            latencies: Vec::new(),
            latencies_by_type: vec![Vec::new(); cfg.requests.len()],
            scratch: Vec::new(),
            cfg,
        })
    }

    fn run(&mut self) {
        self.q.schedule(0, Ev::Gather);
        if self.shared.is_some() && self.warmup == 0 {
            // No warm-up: the window (and its clients) start at once.
            self.begin_window(0);
        } else {
            for c in 0..self.cfg.clients {
                self.q.schedule(0, Ev::Send { client: c as u32 });
            }
        }
        if self.shared.is_none() {
            self.in_window = true;
            self.q.schedule(self.warmup, Ev::Readings { end: false });
            self.q.schedule(self.end, Ev::Readings { end: true });
        }
        // Requests sent inside the window may finish after it (as the lab's drain lets them).
        let drain = nanos_round(self.cfg.duration_s.max(2.0));
        while let Some((now, ev)) = self.q.pop() {
            if self.in_window && now > self.end + drain {
                break;
            }
            match ev {
                Ev::Send { client } => self.send(now, client),
                Ev::Dispatch { client, kind, sent } => {
                    self.dispatch(now, client, kind as usize, sent)
                }
                Ev::Delivered { req } => self.delivered(now, req),
                Ev::StageDone { req } => self.after_disk(now, req),
                Ev::CpuCheck { node, gen } => self.cpu_check(now, node as usize, gen),
                Ev::NicDone { req } => self.node_done(now, req),
                Ev::Gather => self.gather(now),
                Ev::Readings { end } => self.readings(now, end),
            }
        }
    }

    /// `Draws::AsBench`: the warm-up has drained; every client starts the window at once on the
    /// measured stream.
    fn begin_window(&mut self, now: Nanos) {
        let Draws::AsBench { seed, .. } = self.cfg.draws else {
            return;
        };
        self.in_window = true;
        self.shared = Some(stream(seed, "bench-requests-0"));
        self.warmup = now;
        self.end = now + nanos_round(self.cfg.duration_s);
        self.readings(now, false);
        self.q.schedule(self.end, Ev::Readings { end: true });
        for c in 0..self.cfg.clients {
            self.q.schedule(now, Ev::Send { client: c as u32 });
        }
        self.parked.clear();
    }

    /// The next request's line in the request list.
    fn draw(&mut self, client: u32) -> usize {
        match &mut self.shared {
            Some(rng) => self.weighted.sample(rng),
            None => {
                let u = uniform01(&mut self.clients[client as usize]);
                self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
            }
        }
    }

    fn send(&mut self, now: Nanos, client: u32) {
        if !self.in_window && now >= self.warmup {
            // The warm-up is over: this client waits; the last one back starts the window.
            self.parked.push(client);
            if self.parked.len() == self.cfg.clients {
                self.begin_window(now);
            }
            return;
        }
        if now >= self.end {
            return;
        }
        let kind = self.draw(client);
        let inbound = nanos_round(self.cfg.http_path.inbound_s());
        if inbound == 0 {
            self.dispatch(now, client, kind, now);
        } else {
            let kind = kind as u32;
            self.q.schedule(
                now + inbound,
                Ev::Dispatch {
                    client,
                    kind,
                    sent: now,
                },
            );
        }
    }

    /// The request reaches the switch, which picks its node; the node starts on it.
    fn dispatch(&mut self, now: Nanos, client: u32, kind: usize, sent: Nanos) {
        let rt = &self.cfg.requests[kind];
        if self.gather_ns == 0 {
            self.show_gathered_state(now);
        }
        self.view.now_nanos = now;
        let node = self
            .policy
            .pick(&request(rt.class, &rt.key, self.hashes[kind]), &self.view)
            .unwrap_or(0);
        self.live[node].active += 1;
        let n = &mut self.nodes[node];
        let t = secs(now);
        let (disk_s, cpu_s, bytes) = match rt.work {
            Work::Static { object, bytes } => {
                let hit = n.cache.access_id(object, bytes);
                let d = n.params.static_file(bytes, hit);
                (d.disk_s, d.cpu_s, d.nic_bytes)
            }
            Work::Cpu { seconds, bytes } => (0.0, seconds, bytes),
            Work::Disk { seconds, bytes } => (seconds, 0.0, bytes),
        };
        let r = Req {
            client,
            node: node as u32,
            kind: kind as u32,
            sent,
            at_node: now,
            cpu_s,
            bytes,
            stage: Stage::Disk,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.reqs[id as usize] = r;
                id
            }
            None => {
                self.reqs.push(r);
                (self.reqs.len() - 1) as u32
            }
        };
        if disk_s > 0.0 {
            let slot = self.nodes[node].disk.busy_for(t, disk_s);
            self.q
                .schedule(nanos_ceil(slot.finish), Ev::StageDone { req: id });
        } else {
            self.after_disk(now, id);
        }
    }

    /// The disk stage is over (or there was none): the CPU stage, or straight to the NIC.
    fn after_disk(&mut self, now: Nanos, req: u32) {
        let r = &mut self.reqs[req as usize];
        r.stage = Stage::Cpu;
        let (node, cpu_s) = (r.node as usize, r.cpu_s);
        if cpu_s <= 0.0 {
            self.cpu_done(now, req);
            return;
        }
        let mut done = std::mem::take(&mut self.scratch);
        self.nodes[node]
            .cpu
            .arrive_into(secs(now), u64::from(req), cpu_s, &mut done);
        for c in done.drain(..) {
            self.cpu_done(now, c.id as u32);
        }
        self.scratch = done;
        self.reschedule_cpu(now, node);
    }

    fn reschedule_cpu(&mut self, now: Nanos, node: usize) {
        let n = &mut self.nodes[node];
        n.gen += 1;
        if let Some(t) = n.cpu.next_completion() {
            let at = nanos_ceil(t).max(now + 1);
            self.q.schedule(
                at,
                Ev::CpuCheck {
                    node: node as u32,
                    gen: n.gen,
                },
            );
        }
    }

    fn cpu_check(&mut self, now: Nanos, node: usize, gen: u64) {
        if self.nodes[node].gen != gen {
            return;
        }
        self.advance_cpu(now, node, 0.5e-9);
        self.reschedule_cpu(now, node);
    }

    /// Completes the CPU jobs done by `now` (+ `slack` seconds, for rounding to nanoseconds).
    fn advance_cpu(&mut self, now: Nanos, node: usize, slack: f64) -> bool {
        let mut done = std::mem::take(&mut self.scratch);
        self.nodes[node]
            .cpu
            .advance_into(secs(now) + slack, &mut done);
        let any = !done.is_empty();
        for c in done.drain(..) {
            self.cpu_done(now, c.id as u32);
        }
        self.scratch = done;
        any
    }

    fn cpu_done(&mut self, now: Nanos, req: u32) {
        let r = self.reqs[req as usize];
        let slot = self.nodes[r.node as usize].nic.send(secs(now), r.bytes);
        self.q
            .schedule(nanos_ceil(slot.finish), Ev::NicDone { req });
    }

    /// The node has sent the answer: its own account of the request ends here; the client has
    /// it once the HTTP path's way out is over.
    fn node_done(&mut self, now: Nanos, req: u32) {
        let r = self.reqs[req as usize];
        let n = &mut self.nodes[r.node as usize];
        n.window_n += 1;
        n.window_s += secs(now - r.at_node);
        let outbound = nanos_round(self.cfg.http_path.outbound_s(r.bytes));
        if outbound == 0 {
            self.delivered(now, req);
        } else {
            self.q.schedule(now + outbound, Ev::Delivered { req });
        }
    }

    /// The client has the whole answer (and the switch has forwarded it): the request is done
    /// for the policy, and the client thinks and sends the next.
    fn delivered(&mut self, now: Nanos, req: u32) {
        let r = self.reqs[req as usize];
        let node = r.node as usize;
        let latency = now - r.sent;
        if self.in_window && r.sent >= self.warmup && r.sent < self.end {
            self.latencies.push(secs(latency));
            self.latencies_by_type[r.kind as usize].push(secs(latency));
        }
        if self.in_window && now >= self.warmup && now < self.end {
            self.completed_in_window += 1;
            self.nodes[node].served += 1;
        }
        self.live[node].active -= 1;
        let rt = &self.cfg.requests[r.kind as usize];
        self.policy.on_done(
            node,
            &request(rt.class, &rt.key, self.hashes[r.kind as usize]),
            &Outcome {
                ok: true,
                latency_nanos: latency,
                finished_at_nanos: now,
            },
        );
        self.free.push(req);
        let think = if self.cfg.think_mean_s > 0.0 {
            Dist::Exp {
                mean: self.cfg.think_mean_s,
            }
            .sample(&mut self.clients[r.client as usize])
        } else {
            0.0
        };
        self.q
            .schedule(now + nanos_round(think), Ev::Send { client: r.client });
    }

    /// Every T_gat (every second when the policy sees live state): each node's load report
    /// over the last interval, into the gatherer, as the switch gathers `/_capstan/load`.
    fn gather(&mut self, now: Nanos) {
        let interval = if self.gather_ns == 0 {
            1_000_000_000
        } else {
            self.gather_ns
        };
        for i in 0..self.nodes.len() {
            if self.advance_cpu(now, i, 0.0) {
                self.reschedule_cpu(now, i);
            }
        }
        if now > 0 {
            for i in 0..self.nodes.len() {
                let report = self.load_report(now, i, interval);
                self.gatherer.record(i, &report, now);
            }
        }
        for n in &mut self.nodes {
            n.window_n = 0;
            n.window_s = 0.0;
        }
        if self.gather_ns != 0 {
            self.show_gathered_state(now);
        }
        if now < self.end {
            self.q.after(interval, Ev::Gather);
        }
    }

    fn show_gathered_state(&mut self, now: Nanos) {
        let active: Vec<u32> = self.live.iter().map(|n| n.active).collect();
        let configured: Vec<u32> = self.live.iter().map(|n| n.weight).collect();
        self.gatherer
            .end_round(now, self.weights, &active, &configured);
        self.view.nodes.copy_from_slice(&self.live);
        for (i, state) in self.view.nodes.iter_mut().enumerate() {
            self.gatherer.apply(i, state, self.weights);
        }
    }

    fn busy(&self, i: usize, t: f64) -> (f64, f64, f64) {
        let n = &self.nodes[i];
        (
            n.cpu.busy_core_seconds() / f64::from(n.params.cores),
            n.disk.busy_seconds(t),
            n.nic.busy_seconds(t),
        )
    }

    fn load_report(&mut self, now: Nanos, i: usize, interval: Nanos) -> LoadReport {
        let b = self.busy(i, secs(now));
        let n = &mut self.nodes[i];
        let report = LoadReport {
            active_requests: u64::from(self.live[i].active),
            interval: capstan_core::report::Window::from_busy(
                secs(interval),
                (b.0 - n.last.0, b.1 - n.last.1, b.2 - n.last.2),
                n.window_n,
                n.window_s,
            ),
            ..LoadReport::default()
        };
        n.last = b;
        report
    }

    fn readings(&mut self, now: Nanos, end: bool) {
        for i in 0..self.nodes.len() {
            if self.advance_cpu(now, i, 0.0) {
                self.reschedule_cpu(now, i);
            }
            let b = self.busy(i, secs(now));
            if end {
                self.nodes[i].done = b;
            } else {
                self.nodes[i].warm = b;
            }
        }
    }

    fn finish(mut self) -> ClosedResult {
        self.latencies.sort_by(f64::total_cmp);
        let span = self.cfg.duration_s;
        ClosedResult {
            throughput: self.completed_in_window as f64 / span,
            nodes: self
                .nodes
                .iter()
                .map(|n| ClosedNodeUse {
                    cpu: (n.done.0 - n.warm.0) / span,
                    disk: (n.done.1 - n.warm.1) / span,
                    nic: (n.done.2 - n.warm.2) / span,
                    served: n.served,
                })
                .collect(),
            latencies_s: self.latencies,
            latencies_by_type_s: self.latencies_by_type,
            events: self.q.popped(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(clients: usize, requests: Vec<RequestType>) -> ClosedConfig {
        ClosedConfig {
            nodes: vec![NodeParams::default(); 2],
            node_names: vec!["a".into(), "b".into()],
            tree_bytes: 1 << 20,
            requests,
            classes: vec!["static".into(), "cpu".into()],
            policy: PolicySpec::with_defaults("round-robin").unwrap(),
            gather_interval_s: 0.1,
            clients,
            think_mean_s: 0.0,
            warmup_s: 1.0,
            duration_s: 20.0,
            seed: 1,
            http_path: HttpPath::default(),
            draws: Draws::PerClient,
        }
    }

    #[test]
    fn one_client_on_constant_cpu_work_is_a_loop_of_that_work() {
        let c = cfg(
            1,
            vec![RequestType {
                key: "/cgi-bin/cpu_light.cgi".into(),
                class: 1,
                weight: 1,
                work: Work::Cpu {
                    seconds: 0.040,
                    bytes: 0,
                },
            }],
        );
        let r = run(&c).unwrap();
        assert!((r.throughput - 25.0).abs() < 0.1, "{}", r.throughput);
        assert!((r.mean_ms() - 40.0).abs() < 0.01, "{}", r.mean_ms());
        // Round robin alternates, so each node is busy half the time.
        for n in &r.nodes {
            assert!((n.cpu - 0.5).abs() < 0.01, "{n:?}");
        }
    }

    #[test]
    fn closed_loop_obeys_littles_law_and_saturates() {
        let work = |s: f64| Work::Cpu {
            seconds: s,
            bytes: 100,
        };
        let reqs = vec![
            RequestType {
                key: "/a".into(),
                class: 1,
                weight: 3,
                work: work(0.010),
            },
            RequestType {
                key: "/b".into(),
                class: 1,
                weight: 1,
                work: work(0.050),
            },
        ];
        let r = run(&cfg(16, reqs)).unwrap();
        // N = X · R with no think time, within the edges of the window.
        let n = r.throughput * r.mean_ms() / 1e3;
        assert!((n - 16.0).abs() < 0.5, "{n}");
        // Two nodes, mean demand 20 ms: at most 100 requests/s.
        assert!(
            r.throughput > 95.0 && r.throughput <= 100.5,
            "{}",
            r.throughput
        );
    }

    /// One client, one node's worth of constant CPU work: every request is the work plus the
    /// whole path (fixed, and per byte of its answer); the node's busy time is the work alone.
    #[test]
    fn the_http_path_is_a_delay_outside_the_nodes() {
        let mut c = cfg(
            1,
            vec![RequestType {
                key: "/cgi-bin/cpu_light.cgi".into(),
                class: 1,
                weight: 1,
                work: Work::Cpu {
                    seconds: 0.040,
                    bytes: 100_000,
                },
            }],
        );
        c.nodes[0].nic.mbit_per_s = 1e6;
        c.nodes[1].nic.mbit_per_s = 1e6;
        c.http_path = HttpPath {
            fixed_s: 0.002,
            per_byte_s: 1e-8,
        };
        let r = run(&c).unwrap();
        let nic_s = 100_000.0 * 8.0 / 1e12;
        let cycle_s = 0.040 + nic_s + 0.002 + 0.001;
        assert!(
            (r.mean_ms() - 1e3 * cycle_s).abs() < 0.01,
            "{}",
            r.mean_ms()
        );
        assert!(
            (r.throughput - 1.0 / cycle_s).abs() < 0.1,
            "{}",
            r.throughput
        );
        let busy: f64 = r.nodes.iter().map(|n| n.cpu).sum();
        assert!((busy - 0.040 / cycle_s).abs() < 0.01, "{busy}");
        c.http_path.fixed_s = -1.0;
        assert!(run(&c).is_err());
    }

    /// `Draws::AsBench`: the window's requests are the generator's own sequence from its first
    /// draw (the warm-up drew from another stream and drained first), in send order.
    #[test]
    fn as_bench_draws_the_generators_sequence_after_a_drained_warm_up() {
        let work = |s: f64| Work::Cpu {
            seconds: s,
            bytes: 100,
        };
        let reqs = vec![
            RequestType {
                key: "/a".into(),
                class: 1,
                weight: 3,
                work: work(0.010),
            },
            RequestType {
                key: "/b".into(),
                class: 1,
                weight: 1,
                work: work(0.030),
            },
        ];
        let mut c = cfg(1, reqs);
        c.duration_s = 2.0;
        c.warmup_s = 0.5;
        c.draws = Draws::AsBench {
            seed: 42,
            warmup_seed: 7,
        };
        let r = run(&c).unwrap();
        let sent: usize = r.latencies_by_type_s.iter().map(Vec::len).sum();
        let weights = capstan_workload::Weighted::new([3, 1]).unwrap();
        let mut rng = stream(42, "bench-requests-0");
        let mut expected = [0usize; 2];
        for _ in 0..sent {
            expected[weights.sample(&mut rng)] += 1;
        }
        let got: Vec<usize> = r.latencies_by_type_s.iter().map(Vec::len).collect();
        assert_eq!(got, expected);
        // One client on idle nodes: every response is its work alone (plus the NIC's bytes).
        for (v, w) in r.latencies_by_type_s.iter().zip([0.010, 0.030]) {
            assert!(v.iter().all(|l| (l - w).abs() < 1e-4), "{v:?}");
        }
        // The window is the configured one: about 2 s of a 15 ms mean cycle.
        assert!((sent as f64 - 2.0 / 0.015).abs() < 30.0, "{sent}");
        // Without a warm-up the window starts at once, with each client once.
        c.warmup_s = 0.0;
        c.requests.truncate(1);
        let r = run(&c).unwrap();
        assert!((r.throughput - 100.0).abs() < 1.0, "{}", r.throughput);
    }
}
