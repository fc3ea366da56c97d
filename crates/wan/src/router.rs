//! The delay router: one thread that reads packets from the client-side and server-side TUN
//! devices, decides each one's departure time with its path's [`Link`], holds it in a
//! [`DelayLine`] and writes it to the other device when it is due.
//!
//! Packets are classified by client address (source going up, destination coming down), as
//! the paper's router classified by client machine. Anything that is not IPv4 between a known
//! client address and the server address is dropped and counted as unrouted — in particular the
//! router never passes traffic for other destinations, so a client namespace reaches the server
//! side and nothing else.

use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use crate::config::{Dir, PathConfig};
use crate::delayline::DelayLine;
use crate::link::{DropCause, Link, LinkParams, Verdict};
use crate::pacer::{self, now_ns, Lead, Pacer};
use crate::stats::{LinkCounters, PacerReport, PathReport, Report};
use crate::tun;
use crate::units::{format_rate, QueueLimit};

/// What the router emulates and between which addresses.
#[derive(Clone, Debug)]
pub struct RouterPlan {
    pub name: String,
    pub server: Ipv4Addr,
    pub paths: Vec<PathConfig>,
    /// Client addresses of each path, all in the server's /24.
    pub clients: Vec<Vec<Ipv4Addr>>,
    pub seed: u64,
    /// Ask for SCHED_FIFO for the router thread.
    pub realtime: bool,
    /// Longest the router may spin before a departure.
    pub max_lead: Duration,
}

/// Largest packet the router reads (the devices' MTU is 1500).
const BUFFER_SIZE: usize = 2048;
/// Packets read from one device before due packets are sent again.
const READ_BATCH: usize = 16;
/// Most packets held at once (≈ 200 MB of buffers); beyond it arrivals count as overflow.
const MAX_IN_ROUTER: usize = 100_000;
/// How often the published report is refreshed.
const PUBLISH_NS: u64 = 100_000_000;

/// A running router; dropping it stops the thread.
#[derive(Debug)]
pub struct Router {
    stop: Arc<AtomicBool>,
    report: Arc<Mutex<Report>>,
    thread: Option<JoinHandle<Result<()>>>,
}

impl Router {
    /// Starts the router thread on the two devices (client side, server side).
    pub fn spawn(plan: RouterPlan, client: OwnedFd, server: OwnedFd) -> Result<Router> {
        let stop = Arc::new(AtomicBool::new(false));
        let report = Arc::new(Mutex::new(Report::default()));
        let mut engine = Engine::new(&plan, [client, server]);
        *report.lock().unwrap_or_else(|e| e.into_inner()) =
            engine.report(&plan, now_ns(), &Lead::new(0, 0, 0), false, 0.0);
        let (stop2, report2) = (stop.clone(), report.clone());
        let thread = std::thread::Builder::new()
            .name("wan-router".into())
            .spawn(move || engine.run(&plan, &stop2, &report2))
            .context("cannot start the router thread")?;
        Ok(Router {
            stop,
            report,
            thread: Some(thread),
        })
    }

    /// The latest published report (refreshed every 100 ms).
    pub fn report(&self) -> Report {
        self.report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A handle readers (the stats socket) can keep.
    pub fn report_handle(&self) -> Arc<Mutex<Report>> {
        self.report.clone()
    }

    /// True while the router thread runs (it ends on error or stop).
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Stops the thread and returns the final report, or the error that ended the router.
    pub fn stop(mut self) -> Result<Report> {
        self.halt()?;
        Ok(self.report())
    }

    fn halt(&mut self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take() {
            Some(t) => t
                .join()
                .map_err(|_| anyhow!("the router thread panicked"))?,
            None => Ok(()),
        }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// A packet waiting in the delay line.
struct Queued {
    link: usize,
    buf: Box<[u8]>,
    len: usize,
}

/// The router thread's state.
struct Engine {
    links: Vec<Link>,
    counters: Vec<LinkCounters>,
    line: DelayLine<Queued>,
    /// Path index + 1 by the last octet of a client address (0: not a client).
    path_of_octet: [u8; 256],
    subnet: [u8; 3],
    server: Ipv4Addr,
    pool: Vec<Box<[u8]>>,
    unrouted: u64,
    /// Client-side and server-side devices.
    fds: [OwnedFd; 2],
    started: u64,
}

fn link_index(path: usize, dir: Dir) -> usize {
    path * 2 + usize::from(dir == Dir::Down)
}

impl Engine {
    fn new(plan: &RouterPlan, fds: [OwnedFd; 2]) -> Engine {
        let mut links = Vec::new();
        for (i, p) in plan.paths.iter().enumerate() {
            for dir in Dir::BOTH {
                let seed =
                    plan.seed ^ (link_index(i, dir) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                links.push(Link::new(p.link(dir).clone(), seed));
            }
        }
        let mut path_of_octet = [0u8; 256];
        for (i, addrs) in plan.clients.iter().enumerate() {
            for a in addrs {
                path_of_octet[usize::from(a.octets()[3])] = i as u8 + 1;
            }
        }
        let o = plan.server.octets();
        Engine {
            counters: links.iter().map(|_| LinkCounters::default()).collect(),
            links,
            line: DelayLine::default(),
            path_of_octet,
            subnet: [o[0], o[1], o[2]],
            server: plan.server,
            pool: Vec::new(),
            unrouted: 0,
            fds,
            started: now_ns(),
        }
    }

    fn run(&mut self, plan: &RouterPlan, stop: &AtomicBool, report: &Mutex<Report>) -> Result<()> {
        let realtime = pacer::tune_router_thread(plan.realtime);
        let max_lead = plan.max_lead.as_nanos() as u64;
        let lead = Lead::new(max_lead.min(20_000), 1_000.min(max_lead), max_lead);
        let raw = [self.fds[0].as_raw_fd(), self.fds[1].as_raw_fd()];
        let mut pacer = Pacer::new(&raw, lead);
        let mut published = 0;
        let mut cpu_before = (now_ns(), pacer::thread_cpu_seconds());
        while !stop.load(Ordering::Relaxed) {
            self.read_arrivals(Dir::Up)?;
            self.read_arrivals(Dir::Down)?;
            self.send_due();
            let now = now_ns();
            if now - published >= PUBLISH_NS {
                published = now;
                let cpu = pacer::thread_cpu_seconds();
                let wall = now.saturating_sub(cpu_before.0).max(1) as f64 / 1e9;
                pacer.lead.cpu_share((cpu - cpu_before.1) / wall);
                cpu_before = (now, cpu);
                let r = self.report(
                    plan,
                    now,
                    &pacer.lead,
                    realtime,
                    pacer::thread_cpu_seconds(),
                );
                *report.lock().unwrap_or_else(|e| e.into_inner()) = r;
            }
            pacer
                .wait(self.line.next_departure())
                .context("router wait failed")?;
        }
        let r = self.report(
            plan,
            now_ns(),
            &pacer.lead,
            realtime,
            pacer::thread_cpu_seconds(),
        );
        *report.lock().unwrap_or_else(|e| e.into_inner()) = r;
        Ok(())
    }

    /// Reads up to a batch of packets arriving on one side and queues them.
    fn read_arrivals(&mut self, dir: Dir) -> Result<()> {
        let side = usize::from(dir == Dir::Down);
        for _ in 0..READ_BATCH {
            let mut buf = self
                .pool
                .pop()
                .unwrap_or_else(|| vec![0u8; BUFFER_SIZE].into_boxed_slice());
            let Some(len) = tun::read_packet(&self.fds[side], &mut buf)
                .context("cannot read from a TUN device")?
            else {
                self.pool.push(buf);
                return Ok(());
            };
            let now = now_ns();
            match self.classify(dir, &buf[..len]) {
                Some((link, flow)) => self.admit(now, link, flow, buf, len),
                None => {
                    self.unrouted += 1;
                    self.pool.push(buf);
                }
            }
        }
        Ok(())
    }

    /// The link a packet travels on, and its flow key.
    fn classify(&self, dir: Dir, packet: &[u8]) -> Option<(usize, u64)> {
        let h = crate::packet::parse(packet)?;
        let (client, server) = match dir {
            Dir::Up => (h.src, h.dst),
            Dir::Down => (h.dst, h.src),
        };
        let c = client.octets();
        if server != self.server || c[..3] != self.subnet {
            return None;
        }
        let path = usize::from(self.path_of_octet[usize::from(c[3])]).checked_sub(1)?;
        Some((link_index(path, dir), h.flow))
    }

    fn admit(&mut self, now: u64, link: usize, flow: u64, buf: Box<[u8]>, len: usize) {
        let c = &mut self.counters[link];
        c.packets_in += 1;
        c.bytes_in += len as u64;
        let verdict = if self.line.len() >= MAX_IN_ROUTER {
            None
        } else {
            Some(self.links[link].admit(now, len as u32, flow))
        };
        match verdict {
            Some(Verdict::Depart(at)) => {
                let (qp, qb) = self.links[link].queue_depth(now);
                c.max_queue_packets = c.max_queue_packets.max(qp);
                c.max_queue_bytes = c.max_queue_bytes.max(qb);
                c.in_router += 1;
                self.line.push(at, Queued { link, buf, len });
                return;
            }
            Some(Verdict::Drop(DropCause::Loss)) => c.drops.loss += 1,
            Some(Verdict::Drop(DropCause::Queue)) => c.drops.queue += 1,
            None => c.drops.overflow += 1,
        }
        self.pool.push(buf);
    }

    /// Writes every packet whose departure time has come.
    fn send_due(&mut self) {
        let mut now = now_ns();
        while let Some((due, q)) = self.line.pop_due(now) {
            // Up-going packets leave on the server side, down-going ones on the client side.
            let fd = &self.fds[1 - q.link % 2];
            let c = &mut self.counters[q.link];
            c.in_router -= 1;
            c.record_delay_error(now - due);
            match tun::write_packet(fd, &q.buf[..q.len]) {
                Ok(()) => {
                    c.packets_out += 1;
                    c.bytes_out += q.len as u64;
                }
                Err(_) => c.drops.write_error += 1,
            }
            self.pool.push(q.buf);
            now = now_ns();
        }
    }

    /// The report as of `now`; `cpu_s` is the router thread's CPU time so far.
    fn report(
        &mut self,
        plan: &RouterPlan,
        now: u64,
        lead: &Lead,
        realtime: bool,
        cpu_s: f64,
    ) -> Report {
        let mut paths = Vec::new();
        for (i, p) in plan.paths.iter().enumerate() {
            let mut dir_report = |dir: Dir| {
                let l = link_index(i, dir);
                let (qp, qb) = self.links[l].queue_depth(now);
                self.counters[l].report(qp, qb)
            };
            paths.push(PathReport {
                name: p.name.clone(),
                clients: plan.clients[i].iter().map(|a| a.to_string()).collect(),
                up_params: describe(&p.up),
                down_params: describe(&p.down),
                up: dir_report(Dir::Up),
                down: dir_report(Dir::Down),
            });
        }
        Report {
            name: plan.name.clone(),
            pid: std::process::id(),
            server: self.server.to_string(),
            uptime_s: now.saturating_sub(self.started) as f64 / 1e9,
            unrouted: self.unrouted,
            pacer: PacerReport {
                wakeups: lead.wakeups(),
                lead_us: lead.lead() as f64 / 1e3,
                lateness_p50_us: lead.lateness_quantile(0.5) as f64 / 1e3,
                lateness_p99_us: lead.lateness_quantile(0.99) as f64 / 1e3,
                realtime,
                router_cpu_s: cpu_s,
                busy_intervals: lead.busy_intervals(),
            },
            paths,
        }
    }
}

/// A direction's parameters in words, for the stats table.
pub fn describe(p: &LinkParams) -> String {
    let queue = match p.queue {
        QueueLimit::Bytes(b) => format!("{b}B"),
        QueueLimit::Packets(n) => format!("{n}p"),
        QueueLimit::Unlimited => "unlimited".into(),
    };
    let mut s = format!(
        "delay {:?} bw {} queue {} loss {}",
        p.latency,
        format_rate(p.bandwidth),
        queue,
        p.loss
    );
    if !p.jitter.is_zero() {
        s += &format!(
            " jitter {:?}{}",
            p.jitter,
            if p.reorder { " reorder" } else { "" }
        );
    }
    s
}
