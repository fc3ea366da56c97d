//! One run of the SWEB cluster model: nodes with a local disk holding their share of the files
//! and remote (NFS) access to the others' shares, DNS rotation, a broker on every node that may
//! redirect a request once, and loadd reports every T_gat through `core`'s [`Gatherer`].
//!
//! A request's way, in virtual time:
//!
//! 1. It arrives at node `r`, the next in the DNS rotation (arrival order); the policy decides at
//!    once, seeing the cluster from `r` ([`ReceivedAt`]): the gathered state of the last loadd
//!    round.
//! 2. `r`'s CPU preprocesses it (parse, path, broker: `preprocess_ms`, §3.3's A).
//! 3. Redirected (`n ≠ r`): `r`'s CPU writes the redirect (`redirect_ms`, §3.3's O), the client
//!    takes `2 × client_rtt_ms + connect_ms` to come back, and `n`'s CPU preprocesses it again.
//! 4. Data: from `n`'s local disk when `n` is the file's home (FCFS at `disk_mb_s`, §3.3's b1),
//!    otherwise over `n`'s NFS link (FCFS at `interconnect_mb_s / (1 + remote_penalty)`, §3.3's
//!    b2). The home's side of a remote read is not charged: §3.3 charges each fetch only to the
//!    node that serves the request (the home answers from its file cache), which is also what
//!    the paper's skewed test needs — 8 rps × 1.5 MB = 12 MB/s would swamp any one 5 MB/s disk,
//!    yet round robin answered in 3.7 s.
//! 5. `n`'s CPU (processor shared) spends `cpu_ms + cpu_ms_per_mb × size` to send it; the
//!    request is complete then (the trip to the client, t_net, is the same for every policy and
//!    is not modelled).

use serde::Serialize;

use capstan_core::policy::{home_of, Placement, SwebParams};
use capstan_core::report::Window;
use capstan_core::{
    build_policy, GatherRules, Gatherer, LoadReport, NodeState, Policy, PolicyContext, PolicySpec,
    ReceivedAt, RequestInfo, StaticView, WeightSource,
};
use capstan_model::{Completion, CpuPs, Disk, DiskParams, Nic, NicParams};

use super::workload::Workload;
use crate::event::{nanos_ceil, nanos_round, secs, EventQueue, Nanos};
use crate::policy::PolicyChoice;

/// Shortest loadd period the model accepts, seconds.
pub const MIN_GATHER_S: f64 = 0.01;

/// The modelled cluster. Defaults: the paper's Meiko CS-2 set-up (§3.3, §4.1, §4.3) where it
/// gives a number, ours otherwise (marked).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cluster {
    /// Nodes (§4.1: six CS-2 nodes).
    pub nodes: usize,
    /// Local disk bandwidth, MB/s (§3.3: b1 = 5).
    pub disk_mb_s: f64,
    /// Interconnect rate of a remote (NFS) read before the penalty, MB/s (ours: 5, so that with
    /// the penalty a remote read runs at 4.5 MB/s, §3.3's b2).
    pub interconnect_mb_s: f64,
    /// Extra time of a remote read (§3.2: ≈ 10 % on the Meiko).
    pub remote_penalty: f64,
    /// CPU to preprocess a request and run the broker, ms (§4.3: cost estimation 1–4 ms; 3).
    pub preprocess_ms: f64,
    /// CPU to generate a redirection, ms (§4.3: 4).
    pub redirect_ms: f64,
    /// Client round trip, ms (ours: 10, the `sweb` policy's default).
    pub client_rtt_ms: f64,
    /// Connection set-up after a redirect, ms (ours: 4, the `sweb` policy's default).
    pub connect_ms: f64,
    /// CPU per request besides sending (fork, headers), ms (ours: 5).
    pub cpu_ms: f64,
    /// CPU per MB sent, ms (48.5: TCP at 51.5 % of the CS-2's 40 MB/s peak, §4.1).
    pub cpu_ms_per_mb: f64,
    /// loadd period T_gat, s (§3.1: "every 2–3 seconds"; 2).
    pub gather_s: f64,
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            nodes: 6,
            disk_mb_s: 5.0,
            interconnect_mb_s: 5.0,
            remote_penalty: 0.1,
            preprocess_ms: 3.0,
            redirect_ms: 4.0,
            client_rtt_ms: 10.0,
            connect_ms: 4.0,
            cpu_ms: 5.0,
            cpu_ms_per_mb: 48.5,
            gather_s: 2.0,
        }
    }
}

impl Cluster {
    /// The rate of a remote read, MB/s (§3.3's b2).
    pub fn remote_mb_s(&self) -> f64 {
        self.interconnect_mb_s / (1.0 + self.remote_penalty)
    }

    fn redirect_delay_s(&self) -> f64 {
        (2.0 * self.client_rtt_ms + self.connect_ms) / 1e3
    }

    /// The `sweb` policy's parameters for this cluster: the architecture's numbers and the exact
    /// file sizes, as SWEB's configuration file and `stat` of the requested file give them.
    pub fn sweb_params(&self, workload: &Workload) -> SwebParams {
        SwebParams {
            placement: Placement::Partitioned,
            disk_mb_s: self.disk_mb_s,
            interconnect_mb_s: self.interconnect_mb_s,
            remote_penalty: self.remote_penalty,
            speed: 1.0,
            nodes: Default::default(),
            cpu_ms: self.cpu_ms,
            cpu_ms_per_mb: self.cpu_ms_per_mb,
            oracle: Default::default(),
            sizes: workload
                .files
                .iter()
                .map(|f| (f.key.clone(), f.bytes))
                .collect(),
            client_rtt_ms: self.client_rtt_ms,
            connect_ms: self.connect_ms,
            ..SwebParams::default()
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.nodes == 0 {
            return Err("at least one node is needed".into());
        }
        let positive = [
            ("disk_mb_s", self.disk_mb_s),
            ("interconnect_mb_s", self.interconnect_mb_s),
            ("gather_s", self.gather_s),
        ];
        if let Some((name, v)) = positive.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
            return Err(format!("{name} must be positive, got {v}"));
        }
        Ok(())
    }
}

/// One node's utilisation over the arrival period and the requests it served.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NodeUse {
    pub cpu: f64,
    pub disk: f64,
    pub nfs: f64,
    pub served: u64,
}

/// What one run measured.
#[derive(Clone, Debug, Default)]
pub struct RunOutcome {
    /// Response times (arrival at the first node to the last byte sent), seconds, sorted.
    pub response_s: Vec<f64>,
    pub redirects: u64,
    /// Requests that had arrived but were unfinished when arrivals stopped.
    pub backlog_at_end: u64,
    pub nodes: Vec<NodeUse>,
    pub events: u64,
}

/// Where a request's current CPU job is in its way (module doc).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stage {
    Preprocess,
    Redirect,
    Reprocess,
    Send,
}

#[derive(Clone, Copy, Debug)]
struct Req {
    arrive: Nanos,
    file: u32,
    received: u32,
    node: u32,
    stage: Stage,
    done: Option<Nanos>,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    Arrival(u32),
    CpuCheck { node: u32, gen: u64 },
    FetchDone(u32),
    Reconnect(u32),
    Gather,
    Readings,
}

struct Node {
    cpu: CpuPs,
    gen: u64,
    disk: Disk,
    nfs: Nic,
    /// Busy readings at the last gather: CPU, disk, NFS.
    last: (f64, f64, f64),
    window_served: u64,
    window_service_s: f64,
    in_flight: u32,
    served: u64,
}

/// A run in progress.
pub struct Run<'a> {
    cluster: &'a Cluster,
    workload: &'a Workload,
    policy: Box<dyn Policy>,
    weights: WeightSource,
    gatherer: Gatherer,
    gather_ns: Nanos,
    view: StaticView,
    live: Vec<NodeState>,
    nodes: Vec<Node>,
    reqs: Vec<Req>,
    q: EventQueue<Ev>,
    finished: usize,
    redirects: u64,
    readings: Vec<(f64, f64, f64)>,
    scratch: Vec<Completion>,
}

/// Builds the policy a choice names for this cluster and workload. `sweb` gets
/// [`Cluster::sweb_params`] as its defaults; the parameters the user wrote override them.
pub fn build(
    choice: &PolicyChoice,
    cluster: &Cluster,
    workload: &Workload,
) -> Result<Box<dyn Policy>, String> {
    let names: Vec<String> = (0..cluster.nodes).map(|i| format!("n{i}")).collect();
    let classes = vec!["file".to_string()];
    let spec = if choice.spec.name() == "sweb" {
        let mut params = toml::Table::try_from(cluster.sweb_params(workload))
            .map_err(|e| format!("sweb parameters: {e}"))?;
        params.extend(choice.spec.params().clone());
        PolicySpec::new("sweb", params).map_err(|e| e.to_string())?
    } else {
        choice.spec.clone()
    };
    let ctx = PolicyContext {
        nodes: &names,
        classes: &classes,
    };
    build_policy(&spec, &ctx).map_err(|e| e.to_string())
}

impl<'a> Run<'a> {
    pub fn new(
        cluster: &'a Cluster,
        workload: &'a Workload,
        choice: &PolicyChoice,
    ) -> Result<Run<'a>, String> {
        cluster.validate()?;
        let policy =
            build(choice, cluster, workload).map_err(|e| format!("{}: {e}", choice.label))?;
        let disk = DiskParams {
            transfer_mb_per_s: cluster.disk_mb_s,
            ..DiskParams::default()
        };
        let nfs = NicParams {
            mbit_per_s: cluster.remote_mb_s() * 8.0,
        };
        let nodes = (0..cluster.nodes)
            .map(|_| Node {
                cpu: CpuPs::new(1, 1.0),
                gen: 0,
                disk: Disk::new(disk, 1.0),
                nfs: Nic::new(nfs),
                last: (0.0, 0.0, 0.0),
                window_served: 0,
                window_service_s: 0.0,
                in_flight: 0,
                served: 0,
            })
            .collect();
        let reqs = workload
            .arrivals
            .iter()
            .map(|&(arrive, file)| Req {
                arrive,
                file,
                received: 0,
                node: 0,
                stage: Stage::Preprocess,
                done: None,
            })
            .collect();
        let gather_s = choice.gather_s.unwrap_or(cluster.gather_s);
        if gather_s < MIN_GATHER_S {
            // The loadd model reports utilisation over its interval; there is no live mode.
            return Err(format!(
                "{}: gather must be at least {MIN_GATHER_S} s in the SWEB model, got {gather_s}",
                choice.label
            ));
        }
        Ok(Run {
            weights: policy.needs().weights,
            policy,
            gatherer: Gatherer::new(cluster.nodes, GatherRules::default(), 0),
            gather_ns: nanos_round(gather_s).max(1),
            view: StaticView::uniform(cluster.nodes),
            live: vec![NodeState::default(); cluster.nodes],
            nodes,
            reqs,
            q: EventQueue::new(),
            finished: 0,
            redirects: 0,
            readings: Vec::new(),
            scratch: Vec::new(),
            cluster,
            workload,
        })
    }

    /// Runs until every request has finished.
    pub fn run(mut self) -> RunOutcome {
        for (i, r) in self.reqs.iter().enumerate() {
            self.q.schedule(r.arrive, Ev::Arrival(i as u32));
        }
        self.q.schedule(0, Ev::Gather);
        self.q.schedule(self.workload.duration, Ev::Readings);
        while let Some((now, ev)) = self.q.pop() {
            match ev {
                Ev::Arrival(i) => self.arrival(now, i),
                Ev::CpuCheck { node, gen } => self.cpu_check(now, node as usize, gen),
                Ev::FetchDone(i) => self.start_cpu(now, i, Stage::Send),
                Ev::Reconnect(i) => self.start_cpu(now, i, Stage::Reprocess),
                Ev::Gather => self.gather(now),
                Ev::Readings => self.take_readings(now),
            }
        }
        self.outcome()
    }

    fn arrival(&mut self, now: Nanos, i: u32) {
        let received = i as usize % self.cluster.nodes;
        let file = &self.workload.files[self.reqs[i as usize].file as usize];
        let info = RequestInfo {
            class: 0,
            key: &file.key,
            key_hash: file.hash,
        };
        let seen_from = ReceivedAt::new(&self.view, received);
        let node = self
            .policy
            .pick(&info, &seen_from)
            .filter(|&n| n < self.cluster.nodes)
            .unwrap_or(received);
        let r = &mut self.reqs[i as usize];
        r.received = received as u32;
        r.node = node as u32;
        if node != received {
            self.redirects += 1;
        }
        self.live[node].active += 1;
        self.nodes[node].in_flight += 1;
        self.start_cpu(now, i, Stage::Preprocess);
    }

    /// Puts request `i`'s CPU job of `stage` on the node that does it.
    fn start_cpu(&mut self, now: Nanos, i: u32, stage: Stage) {
        let r = &mut self.reqs[i as usize];
        r.stage = stage;
        let c = self.cluster;
        let (node, work_ms) = match stage {
            Stage::Preprocess => (r.received, c.preprocess_ms),
            Stage::Redirect => (r.received, c.redirect_ms),
            Stage::Reprocess => (r.node, c.preprocess_ms),
            Stage::Send => {
                let mb = self.workload.files[r.file as usize].bytes as f64 / 1e6;
                (r.node, c.cpu_ms + c.cpu_ms_per_mb * mb)
            }
        };
        let node = node as usize;
        let mut done = std::mem::take(&mut self.scratch);
        self.nodes[node]
            .cpu
            .arrive_into(secs(now), u64::from(i), work_ms / 1e3, &mut done);
        self.complete_cpu(now, node, done);
    }

    fn cpu_check(&mut self, now: Nanos, node: usize, gen: u64) {
        if self.nodes[node].gen != gen {
            return;
        }
        // Half a nanosecond past `now`: the event time is the completion rounded up to a whole
        // nanosecond, and converting it back to seconds may land a hair short.
        let mut done = std::mem::take(&mut self.scratch);
        self.nodes[node]
            .cpu
            .advance_into(secs(now) + 0.5e-9, &mut done);
        self.complete_cpu(now, node, done);
    }

    /// Handles CPU completions on `node` and schedules its next check.
    fn complete_cpu(&mut self, now: Nanos, node: usize, mut done: Vec<Completion>) {
        for c in done.drain(..) {
            self.cpu_done(now, c.id as u32);
        }
        self.scratch = done;
        let n = &mut self.nodes[node];
        n.gen += 1;
        if let Some(t) = n.cpu.next_completion() {
            let at = nanos_ceil(t).max(now + 1);
            let gen = n.gen;
            self.q.schedule(
                at,
                Ev::CpuCheck {
                    node: node as u32,
                    gen,
                },
            );
        }
    }

    fn cpu_done(&mut self, now: Nanos, i: u32) {
        let r = self.reqs[i as usize];
        match r.stage {
            Stage::Preprocess if r.node != r.received => self.start_cpu(now, i, Stage::Redirect),
            Stage::Preprocess | Stage::Reprocess => self.fetch(now, i),
            Stage::Redirect => {
                let delay = nanos_round(self.cluster.redirect_delay_s());
                self.q.after(delay, Ev::Reconnect(i));
            }
            Stage::Send => self.finish(now, i),
        }
    }

    /// Reads the file from the serving node's disk or over its NFS link.
    fn fetch(&mut self, now: Nanos, i: u32) {
        let r = self.reqs[i as usize];
        let file = &self.workload.files[r.file as usize];
        let node = &mut self.nodes[r.node as usize];
        let home = home_of(file.hash, self.cluster.nodes);
        let slot = if home == Some(r.node as usize) {
            let s = file.bytes as f64 / (self.cluster.disk_mb_s * 1e6);
            node.disk.busy_for(secs(now), s)
        } else {
            node.nfs.send(secs(now), file.bytes)
        };
        self.q.schedule(nanos_ceil(slot.finish), Ev::FetchDone(i));
    }

    fn finish(&mut self, now: Nanos, i: u32) {
        let r = &mut self.reqs[i as usize];
        r.done = Some(now);
        let service_s = secs(now - r.arrive);
        let node = r.node as usize;
        self.live[node].active -= 1;
        let n = &mut self.nodes[node];
        n.in_flight -= 1;
        n.served += 1;
        n.window_served += 1;
        n.window_service_s += service_s;
        self.finished += 1;
    }

    /// Brings every CPU up to `now` (for a busy-time reading); completions found on the way are
    /// handled, not lost.
    fn settle(&mut self, now: Nanos) {
        for node in 0..self.nodes.len() {
            let mut done = std::mem::take(&mut self.scratch);
            self.nodes[node].cpu.advance_into(secs(now), &mut done);
            if done.is_empty() {
                self.scratch = done;
            } else {
                self.complete_cpu(now, node, done);
            }
        }
    }

    /// loadd: every node's report over the last T_gat, into the gatherer, then into the view.
    fn gather(&mut self, now: Nanos) {
        self.settle(now);
        if now > 0 {
            for i in 0..self.nodes.len() {
                let report = self.load_report(now, i);
                self.gatherer.record(i, &report, now);
            }
        }
        let live_active: Vec<u32> = self.live.iter().map(|n| n.active).collect();
        let configured: Vec<u32> = self.live.iter().map(|n| n.weight).collect();
        self.gatherer
            .end_round(now, self.weights, &live_active, &configured);
        self.view.nodes.copy_from_slice(&self.live);
        for (i, state) in self.view.nodes.iter_mut().enumerate() {
            self.gatherer.apply(i, state, self.weights);
        }
        if self.finished < self.reqs.len() {
            self.q.after(self.gather_ns, Ev::Gather);
        }
    }

    /// Node `i`'s report for the interval ending `now`, as `capstan origin` builds its own.
    fn load_report(&mut self, now: Nanos, i: usize) -> LoadReport {
        let t = secs(now);
        let dt = secs(self.gather_ns);
        let n = &mut self.nodes[i];
        let busy = (
            n.cpu.busy_core_seconds(),
            n.disk.busy_seconds(t),
            n.nfs.busy_seconds(t),
        );
        let delta = (busy.0 - n.last.0, busy.1 - n.last.1, busy.2 - n.last.2);
        let report = LoadReport {
            active_requests: u64::from(n.in_flight),
            served: n.served,
            interval: Window::from_busy(dt, delta, n.window_served, n.window_service_s),
            ..LoadReport::default()
        };
        n.last = busy;
        n.window_served = 0;
        n.window_service_s = 0.0;
        report
    }

    fn take_readings(&mut self, now: Nanos) {
        self.settle(now);
        let t = secs(now);
        self.readings = self
            .nodes
            .iter()
            .map(|n| {
                (
                    n.cpu.busy_core_seconds(),
                    n.disk.busy_seconds(t),
                    n.nfs.busy_seconds(t),
                )
            })
            .collect();
    }

    fn outcome(self) -> RunOutcome {
        let end = self.workload.duration;
        let span = secs(end).max(1e-9);
        let mut response_s: Vec<f64> = self
            .reqs
            .iter()
            .filter_map(|r| r.done.map(|d| secs(d - r.arrive)))
            .collect();
        response_s.sort_by(f64::total_cmp);
        let nodes = self
            .nodes
            .iter()
            .zip(&self.readings)
            .map(|(n, r)| NodeUse {
                cpu: r.0 / span,
                disk: r.1 / span,
                nfs: r.2 / span,
                served: n.served,
            })
            .collect();
        RunOutcome {
            response_s,
            redirects: self.redirects,
            backlog_at_end: self
                .reqs
                .iter()
                .filter(|r| r.arrive < end && r.done.is_none_or(|d| d > end))
                .count() as u64,
            nodes,
            events: self.q.popped(),
        }
    }
}
