//! One simulation run: client sessions, the web switch, web nodes and back-end servers, in
//! virtual time, dispatched by one `core` policy.
//!
//! A page request is one HTTP/1.1 connection (CAP §4.1: "each HTTP process serves all files
//! specified in a Web request"): the switch dispatches it once, at its per-connection cost plus,
//! at layer 7, a per-request cost for each embedded object; the chosen node's process serves the
//! HTML and then each embedded object in turn. Every object goes disk (on a cache miss) → CPU
//! (processor shared) → NIC (FCFS). A page is complete when its last object has been sent.

use std::collections::VecDeque;

use capstan_core::{
    build_policy, GatherRules, Gatherer, LoadReport, NodeState, Outcome, Policy, PolicyContext,
    StaticView, WeightSource,
};
use capstan_model::{CpuPs, Disk, LruBytes, Nic, NodeParams};
use capstan_workload::dist::uniform01;
use capstan_workload::rng::splitmix64;
use capstan_workload::{stream, Dist, WorkloadRng};
use rand::SeedableRng;

use crate::event::{nanos_ceil, nanos_round, secs, EventQueue, Nanos};
use crate::policy::{request, PolicyChoice};
use crate::scenario::{Kind, Layer, Scenario, CLASS_NAMES};
use crate::site::Site;

/// What to run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub scenario: Scenario,
    pub policy: PolicyChoice,
    pub nodes: usize,
    /// New client sessions per second (Poisson).
    pub rate: f64,
    /// Simulated time during which sessions arrive, seconds.
    pub duration_s: f64,
    /// Pages started before this are not measured, seconds.
    pub warmup_s: f64,
    pub seed: u64,
}

/// Utilisation of one node's resources over the measured interval.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct NodeUse {
    pub cpu: f64,
    pub disk: f64,
    pub nic: f64,
    pub backend_disk: f64,
    pub pages: u64,
}

/// The outcome of one run.
#[derive(Clone, Debug, Default)]
pub struct RunResult {
    /// Page latencies of measured pages, nanoseconds, sorted.
    pub latencies: Vec<u64>,
    /// Per CAP class, sorted page latencies.
    pub class_latencies: [Vec<u64>; 4],
    /// Measured pages still unfinished when the drain limit was hit (counted with their age).
    pub censored: u64,
    pub nodes: Vec<NodeUse>,
    pub cache_lookups: u64,
    pub cache_hits: u64,
    pub sessions: u64,
    /// HTTP requests (objects) sent during the arrival period, warm-up included.
    pub requests: u64,
    pub events: u64,
    /// The layer the switch dispatched at (resolved from the policy's needs when `auto`).
    pub layer: Option<Layer>,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    SessionArrival,
    PageStart {
        session: u32,
    },
    Dispatch {
        page: u32,
    },
    DiskDone {
        page: u32,
    },
    BackendDone {
        page: u32,
    },
    CpuCheck {
        node: u32,
        gen: u64,
    },
    NicDone {
        page: u32,
    },
    Gather,
    /// Busy-time readings at the end of warm-up and at the end of the arrival period.
    Readings {
        end: bool,
    },
}

struct Session {
    rng: WorkloadRng,
    pages_left: u32,
    handshake_done: bool,
}

#[derive(Clone, Copy)]
struct Page {
    session: u32,
    node: u32,
    kind: Kind,
    page: u32,
    obj: u32,
    nobj: u32,
    started: Nanos,
    at_node: Nanos,
    /// Database disk time of this page's query, drawn at the start so every policy sees the
    /// same workload.
    db_s: f64,
    /// Whether a lightly dynamic page's HTML is cachable this time.
    cachable: bool,
    /// CPU beyond the static-file cost for the current object.
    extra_cpu_s: f64,
    /// Bytes the current object puts on the NIC (set when it reaches the CPU).
    nic_bytes: u64,
    handshake: bool,
    measured: bool,
}

struct Node {
    cpu: CpuPs,
    cpu_gen: u64,
    disk: Disk,
    nic: Nic,
    cache: LruBytes,
    backend: usize,
    procs: u32,
    accept: VecDeque<u32>,
    /// Completions and total service time since the last gather (for WRR_time).
    window_n: u64,
    window_s: f64,
    /// Busy readings at the last gather (for the reported load).
    last_cpu: f64,
    last_disk: f64,
    last_nic: f64,
    /// Busy readings (cpu, disk, nic, backend) at the end of warm-up and of the run.
    warm: (f64, f64, f64, f64),
    done: (f64, f64, f64, f64),
    pages: u64,
}

/// A run in progress. Build with [`Engine::new`], then [`Engine::run`].
pub struct Engine {
    cfg: RunConfig,
    params: NodeParams,
    site: Site,
    policy: Box<dyn Policy>,
    /// Where the policy's weights come from (its declared needs).
    weights: WeightSource,
    /// Turns the nodes' simulated load reports into the state the policy sees, as in the switch.
    gatherer: Gatherer,
    layer: Layer,
    gather_ns: Nanos,
    q: EventQueue<Ev>,
    arrivals: WorkloadRng,
    session_seq: u64,
    sessions: Vec<Session>,
    free_sessions: Vec<u32>,
    pages: Vec<Page>,
    free_pages: Vec<u32>,
    nodes: Vec<Node>,
    backends: Vec<Disk>,
    switch: capstan_model::Fcfs,
    /// What the switch knows right now (its own connection counts).
    live: Vec<NodeState>,
    /// What the policy is shown: `live` when T_gat is 0, otherwise the last gathered copy.
    view: StaticView,
    end: Nanos,
    warmup: Nanos,
    result: RunResult,
    /// Scripted mode: every dispatch decision in order.
    trace: Option<Vec<usize>>,
    pages_dist: Dist,
    think: Dist,
    /// Scratch buffer for CPU completions, reused so completing a job allocates nothing.
    completions: Vec<capstan_model::Completion>,
    /// Scratch buffers for the gatherer's round (live and configured per-node counts), reused
    /// because in live mode (T_gat = 0) a round ends at every dispatch.
    round_active: Vec<u32>,
    round_weights: Vec<u32>,
}

/// Node names as policies see them (`n0`, `n1`, …).
pub fn node_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("n{i}")).collect()
}

/// The ideal static partitioning of the CAP paper: each class present gets nodes in proportion
/// to its share of arrivals (largest remainder, at least one each).
pub fn ideal_partitions(scenario: &Scenario, nodes: usize) -> capstan_core::policy::Partitions {
    let shares = scenario.mix.class_shares();
    let present: Vec<usize> = (0..4).filter(|&c| shares[c] > 0.0).collect();
    let names = node_names(nodes);
    let mut out = capstan_core::policy::Partitions::new();
    if present.len() > nodes {
        // Too few nodes to dedicate one per class: deal classes out over the nodes.
        for (i, &c) in present.iter().enumerate() {
            out.insert(CLASS_NAMES[c].into(), vec![names[i % nodes].clone()]);
        }
        return out;
    }
    let spare = nodes - present.len();
    let total: f64 = present.iter().map(|&c| shares[c]).sum();
    let exact: Vec<f64> = present
        .iter()
        .map(|&c| shares[c] / total * spare as f64)
        .collect();
    let mut count: Vec<usize> = exact.iter().map(|e| 1 + e.floor() as usize).collect();
    let mut left = nodes - count.iter().sum::<usize>();
    let mut order: Vec<usize> = (0..present.len()).collect();
    order.sort_by(|&a, &b| {
        let ra = exact[a] - exact[a].floor();
        let rb = exact[b] - exact[b].floor();
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    for &i in order.iter().cycle() {
        if left == 0 {
            break;
        }
        count[i] += 1;
        left -= 1;
    }
    let mut next = 0;
    for (i, &c) in present.iter().enumerate() {
        out.insert(CLASS_NAMES[c].into(), names[next..next + count[i]].to_vec());
        next += count[i];
    }
    out
}

impl Engine {
    pub fn new(cfg: RunConfig) -> Result<Engine, String> {
        cfg.scenario.validate()?;
        if cfg.nodes == 0 {
            return Err("at least one node is needed".into());
        }
        if !(cfg.rate.is_finite() && cfg.rate > 0.0) {
            return Err("rate must be a positive number of clients per second".into());
        }
        if !(cfg.duration_s.is_finite() && cfg.duration_s > 0.0) {
            return Err("duration must be positive".into());
        }
        let sc = &cfg.scenario;
        let names = node_names(cfg.nodes);
        let classes: Vec<String> = CLASS_NAMES.iter().map(|s| s.to_string()).collect();
        let mut spec = cfg.policy.spec_for_seed(cfg.seed);
        // Static partitioning without partitions gets the scenario's ideal ones (the CAP
        // paper's rival is tuned to the workload).
        if spec.name() == "static-partitioning" && spec.param("partitions").is_none() {
            let ideal = toml::Value::try_from(ideal_partitions(sc, cfg.nodes))
                .map_err(|e| e.to_string())?;
            spec = spec
                .with_param("partitions", ideal)
                .map_err(|e| e.to_string())?;
        }
        let policy = build_policy(
            &spec,
            &PolicyContext {
                nodes: &names,
                classes: &classes,
            },
        )
        .map_err(|e| e.to_string())?;
        let site = Site::generate(&sc.workload, cfg.seed);
        let params = sc.node.clone();
        let cache_bytes = params.cache_bytes(site.total_bytes);
        let backends_n = if sc.costs.backends == 0 {
            cfg.nodes
        } else {
            sc.costs.backends
        };
        let nodes = (0..cfg.nodes)
            .map(|i| Node {
                cpu: CpuPs::new(params.cores, params.speed),
                cpu_gen: 0,
                disk: Disk::new(params.disk, params.speed),
                nic: Nic::new(params.nic),
                cache: LruBytes::new(cache_bytes),
                backend: i % backends_n,
                procs: 0,
                accept: VecDeque::new(),
                window_n: 0,
                window_s: 0.0,
                last_cpu: 0.0,
                last_disk: 0.0,
                last_nic: 0.0,
                warm: (0.0, 0.0, 0.0, 0.0),
                done: (0.0, 0.0, 0.0, 0.0),
                pages: 0,
            })
            .collect();
        let backends = (0..backends_n)
            .map(|_| Disk::new(params.disk, params.speed))
            .collect();
        let gather_s = cfg.policy.gather_s.unwrap_or(sc.switch.gather_interval_s);
        let needs = policy.needs();
        let layer = match sc.switch.layer {
            Layer::Auto if needs.request_content => Layer::L7,
            Layer::Auto => Layer::L4,
            other => other,
        };
        let w = &sc.workload;
        let warmup = nanos_round(cfg.warmup_s.max(0.0));
        let end = nanos_round(cfg.duration_s);
        Ok(Engine {
            weights: needs.weights,
            gatherer: Gatherer::new(cfg.nodes, GatherRules::default(), 0),
            layer,
            gather_ns: nanos_round(gather_s),
            q: EventQueue::new(),
            arrivals: stream(cfg.seed, "sim-arrivals"),
            session_seq: 0,
            sessions: Vec::new(),
            free_sessions: Vec::new(),
            pages: Vec::new(),
            free_pages: Vec::new(),
            nodes,
            backends,
            switch: capstan_model::Fcfs::new(),
            live: vec![NodeState::default(); cfg.nodes],
            view: StaticView::uniform(cfg.nodes),
            end,
            warmup,
            result: RunResult {
                nodes: vec![NodeUse::default(); cfg.nodes],
                layer: Some(layer),
                ..RunResult::default()
            },
            trace: None,
            pages_dist: Dist::InverseGaussian {
                mu: w.pages_mu,
                lambda: w.pages_lambda,
            },
            think: Dist::Pareto {
                alpha: w.think_alpha,
                k: w.think_k_s,
            },
            completions: Vec::new(),
            round_active: Vec::with_capacity(cfg.nodes),
            round_weights: Vec::with_capacity(cfg.nodes),
            policy,
            params,
            site,
            cfg,
        })
    }

    /// Runs to the end: sessions arrive until the duration, then pages in flight drain (up to
    /// one more duration; pages still unfinished then are counted as censored at their age).
    pub fn run(mut self) -> RunResult {
        self.q.schedule(0, Ev::SessionArrival);
        // Load (for cap-load) is sampled every T_gat, or every second when state is live.
        self.q.schedule(0, Ev::Gather);
        self.q.schedule(self.warmup, Ev::Readings { end: false });
        self.q.schedule(self.end, Ev::Readings { end: true });
        let hard_stop = self.end.saturating_mul(2);
        while let Some((now, ev)) = self.q.pop() {
            if now > hard_stop {
                break;
            }
            self.handle(now, ev);
            if now >= self.end && self.pages.len() == self.free_pages.len() {
                break;
            }
        }
        self.finish()
    }

    fn handle(&mut self, now: Nanos, ev: Ev) {
        match ev {
            Ev::SessionArrival => self.session_arrival(now),
            Ev::PageStart { session } => self.page_start(now, session),
            Ev::Dispatch { page } => self.dispatch(now, page),
            Ev::DiskDone { page } | Ev::BackendDone { page } => self.cpu_stage(now, page),
            Ev::CpuCheck { node, gen } => self.cpu_check(now, node as usize, gen),
            Ev::NicDone { page } => self.object_sent(now, page),
            Ev::Gather => self.gather(now),
            Ev::Readings { end } => self.take_readings(now, end),
        }
    }

    fn session_arrival(&mut self, now: Nanos) {
        if now >= self.end {
            return;
        }
        let gap = Dist::Exp {
            mean: 1.0 / self.cfg.rate,
        }
        .sample(&mut self.arrivals);
        self.q.after(nanos_round(gap).max(1), Ev::SessionArrival);
        // Each session draws from its own stream, so the workload a session generates does not
        // depend on the order events of other sessions are handled in (which depends on the
        // policy): every policy sees the same sessions, pages and costs.
        self.session_seq += 1;
        let mut rng = WorkloadRng::seed_from_u64(splitmix64(
            self.cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ self.session_seq,
        ));
        let pages = self.pages_dist.sample(&mut rng).round().max(1.0) as u32;
        let s = Session {
            rng,
            pages_left: pages,
            handshake_done: false,
        };
        let id = match self.free_sessions.pop() {
            Some(id) => {
                self.sessions[id as usize] = s;
                id
            }
            None => {
                self.sessions.push(s);
                (self.sessions.len() - 1) as u32
            }
        };
        self.result.sessions += 1;
        self.page_start(now, id);
    }

    fn page_start(&mut self, now: Nanos, session: u32) {
        if now >= self.end {
            self.free_sessions.push(session);
            return;
        }
        let mix = self.cfg.scenario.mix.normalised();
        let costs = &self.cfg.scenario.costs;
        let s = &mut self.sessions[session as usize];
        let u = uniform01(&mut s.rng);
        let mut acc = 0.0;
        let mut kind = Kind::Static;
        for (k, share) in Kind::ALL.iter().zip(mix) {
            acc += share;
            kind = *k;
            if u < acc && share > 0.0 {
                break;
            }
        }
        let page_id = self.site.draw_page(&mut s.rng);
        let db_s = Dist::Exp {
            mean: costs.db_disk_ms.max(1e-9) / 1e3,
        }
        .sample(&mut s.rng);
        let cachable = uniform01(&mut s.rng) < costs.light_dynamic_cachable;
        let handshake = kind.secure() && !s.handshake_done;
        if handshake {
            s.handshake_done = true;
        }
        let objs = self.site.objects_of(page_id);
        let nobj = (objs.end - objs.start) as u32;
        let p = Page {
            session,
            node: 0,
            kind,
            page: page_id as u32,
            obj: 0,
            nobj,
            started: now,
            at_node: now,
            db_s,
            cachable,
            extra_cpu_s: 0.0,
            nic_bytes: 0,
            handshake,
            measured: now >= self.warmup,
        };
        let id = match self.free_pages.pop() {
            Some(id) => {
                self.pages[id as usize] = p;
                id
            }
            None => {
                self.pages.push(p);
                (self.pages.len() - 1) as u32
            }
        };
        let sw = &self.cfg.scenario.switch;
        let cost_us = match self.layer {
            Layer::L7 => sw.l7_connection_us + sw.l7_request_us * f64::from(nobj - 1),
            _ => sw.l4_connection_us,
        };
        let slot = self.switch.submit(secs(now), cost_us * 1e-6);
        self.q
            .schedule(nanos_ceil(slot.finish), Ev::Dispatch { page: id });
    }

    fn dispatch(&mut self, now: Nanos, page: u32) {
        let p = self.pages[page as usize];
        if self.gather_ns == 0 {
            self.show_gathered_state(now);
        }
        self.view.now_nanos = now;
        let key = &self.site.page_keys[p.page as usize];
        let req = request(p.kind.class(), key, self.site.page_hashes[p.page as usize]);
        let node = self.policy.pick(&req, &self.view).unwrap_or(0);
        if let Some(t) = &mut self.trace {
            t.push(node);
        }
        self.live[node].active += 1;
        self.pages[page as usize].node = node as u32;
        let n = &mut self.nodes[node];
        if n.procs < self.cfg.scenario.costs.max_processes {
            self.begin_service(now, page);
        } else {
            n.accept.push_back(page);
        }
    }

    fn begin_service(&mut self, now: Nanos, page: u32) {
        let p = &mut self.pages[page as usize];
        p.at_node = now;
        p.obj = 0;
        self.nodes[p.node as usize].procs += 1;
        self.start_object(now, page);
    }

    fn start_object(&mut self, now: Nanos, page: u32) {
        let p = self.pages[page as usize];
        let obj = self.site.first[p.page as usize] as usize + p.obj as usize;
        let size = self.site.sizes[obj];
        let node = &mut self.nodes[p.node as usize];
        let t = secs(now);
        let costs = &self.cfg.scenario.costs;
        if p.obj == 0 && p.kind.database() {
            let slot = self.backends[node.backend].busy_for(t, p.db_s);
            self.pages[page as usize].extra_cpu_s = costs.db_cpu_ms / 1e3;
            self.q
                .schedule(nanos_ceil(slot.finish), Ev::BackendDone { page });
            return;
        }
        self.pages[page as usize].extra_cpu_s = 0.0;
        if p.obj == 0 && p.kind == Kind::LightDynamic && !p.cachable {
            // Generated: its data comes from disk every time and bypasses the cache.
            self.pages[page as usize].extra_cpu_s = costs.light_dynamic_cpu_ms / 1e3;
            let slot = node.disk.read(t, size);
            self.q
                .schedule(nanos_ceil(slot.finish), Ev::DiskDone { page });
            return;
        }
        let hit = node.cache.access_id(obj as u64, size);
        if p.measured {
            self.result.cache_lookups += 1;
            self.result.cache_hits += u64::from(hit);
        }
        if hit {
            self.cpu_stage(now, page);
        } else {
            let slot = node.disk.read(t, size);
            self.q
                .schedule(nanos_ceil(slot.finish), Ev::DiskDone { page });
        }
    }

    fn object_work(&self, p: &Page) -> (f64, u64) {
        let obj = self.site.first[p.page as usize] as usize + p.obj as usize;
        let size = self.site.sizes[obj];
        let base = self.params.static_file(size, true);
        let mut d = base;
        d.cpu_s += p.extra_cpu_s;
        if p.kind.secure() {
            d = self.params.secure(d, size, p.handshake && p.obj == 0);
        }
        (d.cpu_s, d.nic_bytes)
    }

    fn cpu_stage(&mut self, now: Nanos, page: u32) {
        let p = self.pages[page as usize];
        let (work, bytes) = self.object_work(&p);
        self.pages[page as usize].nic_bytes = bytes;
        let node = p.node as usize;
        let mut done = std::mem::take(&mut self.completions);
        self.nodes[node]
            .cpu
            .arrive_into(secs(now), u64::from(page), work, &mut done);
        for c in done.drain(..) {
            self.cpu_done(now, c.id as u32);
        }
        self.completions = done;
        self.reschedule_cpu(now, node);
    }

    fn reschedule_cpu(&mut self, now: Nanos, node: usize) {
        let n = &mut self.nodes[node];
        n.cpu_gen += 1;
        if let Some(t) = n.cpu.next_completion() {
            let at = nanos_ceil(t).max(now + 1);
            self.q.schedule(
                at,
                Ev::CpuCheck {
                    node: node as u32,
                    gen: n.cpu_gen,
                },
            );
        }
    }

    fn cpu_check(&mut self, now: Nanos, node: usize, gen: u64) {
        if self.nodes[node].cpu_gen != gen {
            return;
        }
        // Half a nanosecond past `now`: the event time is the completion time rounded up to a
        // whole nanosecond, and converting it back to float seconds may land a hair short.
        let mut done = std::mem::take(&mut self.completions);
        self.nodes[node]
            .cpu
            .advance_into(secs(now) + 0.5e-9, &mut done);
        for c in done.drain(..) {
            self.cpu_done(now, c.id as u32);
        }
        self.completions = done;
        self.reschedule_cpu(now, node);
    }

    /// Brings a node's CPU up to `now` (for a busy-time reading). Advancing changes no job's
    /// completion time, so scheduled CPU checks stay valid — except for a job that completes
    /// exactly at `now` whose check has not popped yet: it is completed here, not lost.
    fn settle_cpu(&mut self, now: Nanos, node: usize) {
        let mut done = std::mem::take(&mut self.completions);
        self.nodes[node].cpu.advance_into(secs(now), &mut done);
        let any = !done.is_empty();
        for c in done.drain(..) {
            self.cpu_done(now, c.id as u32);
        }
        self.completions = done;
        if any {
            self.reschedule_cpu(now, node);
        }
    }

    fn cpu_done(&mut self, now: Nanos, page: u32) {
        let p = &self.pages[page as usize];
        let slot = self.nodes[p.node as usize].nic.send(secs(now), p.nic_bytes);
        self.q
            .schedule(nanos_ceil(slot.finish), Ev::NicDone { page });
    }

    fn object_sent(&mut self, now: Nanos, page: u32) {
        if now < self.end {
            self.result.requests += 1;
        }
        let p = &mut self.pages[page as usize];
        p.obj += 1;
        if p.obj < p.nobj {
            self.start_object(now, page);
        } else {
            self.page_done(now, page);
        }
    }

    fn page_done(&mut self, now: Nanos, page: u32) {
        let p = self.pages[page as usize];
        let node = p.node as usize;
        let latency = now - p.started;
        if p.measured {
            self.result.latencies.push(latency);
            self.result.class_latencies[p.kind.class()].push(latency);
            self.result.nodes[node].pages += 1;
        }
        self.live[node].active -= 1;
        let n = &mut self.nodes[node];
        n.procs -= 1;
        n.pages += 1;
        n.window_n += 1;
        n.window_s += secs(now - p.at_node);
        let key = &self.site.page_keys[p.page as usize];
        let req = request(p.kind.class(), key, self.site.page_hashes[p.page as usize]);
        self.policy.on_done(
            node,
            &req,
            &Outcome {
                ok: true,
                latency_nanos: now - p.at_node,
                finished_at_nanos: now,
            },
        );
        self.free_pages.push(page);
        if let Some(next) = self.nodes[node].accept.pop_front() {
            self.begin_service(now, next);
        }
        let s = &mut self.sessions[p.session as usize];
        s.pages_left -= 1;
        if s.pages_left == 0 || self.trace.is_some() {
            self.free_sessions.push(p.session);
        } else {
            let think = self.think.sample(&mut s.rng);
            self.q
                .after(nanos_round(think), Ev::PageStart { session: p.session });
        }
    }

    /// Each node's load report over the last `interval`, built from its models as
    /// `capstan origin` builds it from its counters, then fed to the gatherer.
    fn gather(&mut self, now: Nanos) {
        let interval = if self.gather_ns == 0 {
            1_000_000_000
        } else {
            self.gather_ns
        };
        for i in 0..self.nodes.len() {
            self.settle_cpu(now, i);
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

    /// Ends a gathering round and shows its result to the policy: the dispatcher's counts as
    /// of now, weights derived now, the gathered reports. In live mode (T_gat = 0) this runs at
    /// every dispatch, the reports being those of the last second.
    fn show_gathered_state(&mut self, now: Nanos) {
        self.round_active.clear();
        self.round_active.extend(self.live.iter().map(|n| n.active));
        self.round_weights.clear();
        self.round_weights
            .extend(self.live.iter().map(|n| n.weight));
        self.gatherer
            .end_round(now, self.weights, &self.round_active, &self.round_weights);
        self.view.nodes.copy_from_slice(&self.live);
        for (i, state) in self.view.nodes.iter_mut().enumerate() {
            self.gatherer.apply(i, state, self.weights);
        }
    }

    /// Node `i`'s report for the window of length `interval` ending `now`.
    fn load_report(&mut self, now: Nanos, i: usize, interval: Nanos) -> LoadReport {
        let t = secs(now);
        let dt = secs(interval);
        let cores = f64::from(self.params.cores);
        let n = &mut self.nodes[i];
        let cpu = n.cpu.busy_core_seconds();
        let disk = n.disk.busy_seconds(t);
        let nic = n.nic.busy_seconds(t);
        let busy = (
            (cpu - n.last_cpu) / cores,
            disk - n.last_disk,
            nic - n.last_nic,
        );
        let report = LoadReport {
            active_requests: u64::from(self.live[i].active),
            interval: capstan_core::report::Window::from_busy(dt, busy, n.window_n, n.window_s),
            ..LoadReport::default()
        };
        n.last_cpu = cpu;
        n.last_disk = disk;
        n.last_nic = nic;
        report
    }

    fn take_readings(&mut self, now: Nanos, end: bool) {
        let t = secs(now);
        for i in 0..self.nodes.len() {
            self.settle_cpu(now, i);
        }
        for n in &mut self.nodes {
            let r = (
                n.cpu.busy_core_seconds(),
                n.disk.busy_seconds(t),
                n.nic.busy_seconds(t),
                self.backends[n.backend].busy_seconds(t),
            );
            if end {
                n.done = r;
            } else {
                n.warm = r;
            }
        }
    }

    fn finish(mut self) -> RunResult {
        let now = self.q.now();
        // Pages still in flight at the drain limit are the slowest ones: count them at their age
        // rather than drop them, which would flatter an overloaded policy.
        let open: Vec<Page> = {
            let mut free = vec![false; self.pages.len()];
            for &f in &self.free_pages {
                free[f as usize] = true;
            }
            self.pages
                .iter()
                .zip(free)
                .filter(|(p, f)| !f && p.measured)
                .map(|(p, _)| *p)
                .collect()
        };
        for p in open {
            self.result.censored += 1;
            self.result.latencies.push(now - p.started);
            self.result.class_latencies[p.kind.class()].push(now - p.started);
        }
        let span = secs(self.end.saturating_sub(self.warmup)).max(1e-9);
        let cores = f64::from(self.params.cores);
        let mut users = vec![0usize; self.backends.len()];
        for n in &self.nodes {
            users[n.backend] += 1;
        }
        for (u, n) in self.result.nodes.iter_mut().zip(&self.nodes) {
            u.cpu = (n.done.0 - n.warm.0) / (cores * span);
            u.disk = (n.done.1 - n.warm.1) / span;
            u.nic = (n.done.2 - n.warm.2) / span;
            // A shared back-end's busy time is split evenly among the nodes using it.
            u.backend_disk = (n.done.3 - n.warm.3) / span / users[n.backend] as f64;
        }
        self.result.latencies.sort_unstable();
        for c in &mut self.result.class_latencies {
            c.sort_unstable();
        }
        self.result.events = self.q.popped();
        self.result
    }
}

/// Runs a scripted sequence of one-object static pages `(time, class, key)` through the
/// simulator's switch and returns the node each was dispatched to, in order. For checking that
/// policies behave inside the simulator as they do alone (the CAP paper's Figure 2).
pub fn dispatch_trace(
    cfg: RunConfig,
    requests: &[(Nanos, usize, &str)],
) -> Result<Vec<usize>, String> {
    let mut e = Engine::new(cfg)?;
    e.trace = Some(Vec::new());
    let kinds = [Kind::Static, Kind::Disk, Kind::Secure, Kind::SecureDisk];
    for &(at, class, key) in requests {
        let kind = *kinds.get(class).ok_or("class out of range")?;
        e.sessions.push(Session {
            rng: stream(0, "trace"),
            pages_left: 1,
            handshake_done: true,
        });
        let page = e.site.page_keys.iter().position(|k| k == key).unwrap_or(0) as u32;
        e.pages.push(Page {
            session: (e.sessions.len() - 1) as u32,
            node: 0,
            kind,
            page,
            obj: 0,
            nobj: 1,
            started: at,
            at_node: at,
            db_s: 0.001,
            cachable: true,
            extra_cpu_s: 0.0,
            nic_bytes: 0,
            handshake: false,
            measured: false,
        });
        e.q.schedule(
            at,
            Ev::Dispatch {
                page: (e.pages.len() - 1) as u32,
            },
        );
    }
    while let Some((now, ev)) = e.q.pop() {
        if matches!(ev, Ev::Gather | Ev::SessionArrival) {
            continue;
        }
        e.handle(now, ev);
    }
    Ok(e.trace.take().unwrap_or_default())
}
