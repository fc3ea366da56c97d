//! The tier experiment (`capstan lab tier`): K switches, each on its own loopback address and
//! under its own CPU quota, in front of the same emulated nodes, driven by one load generator
//! that spreads its connections over them as a DNS round-robin client does
//! (`capstan bench --target`). It measures what a tier of switches is worth: capacity against
//! K, the cache of K switches (independent, one big, sharded with `[tier] peers`), and a switch
//! killed mid-run. This module holds the schedule and the results (`results.json`); running is
//! in [`crate::run::tier`], the report in [`crate::report::tier`].

use serde::{Deserialize, Serialize};

use capstan_bench::{TargetResult, TimelineSecond};

/// The experiment's name on the command line.
pub const NAME: &str = "tier";

/// How long and how large a tier run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scale {
    /// K = 1, 2, 4; windows long enough for steady figures (a few minutes).
    Full,
    /// K = 1, 2; under 3 minutes.
    Quick,
    /// K = 1, 2 with second-long windows: for tests of the experiment's plumbing, no figures
    /// to read anything into.
    Smoke,
}

impl Scale {
    pub fn as_str(self) -> &'static str {
        match self {
            Scale::Full => "full",
            Scale::Quick => "quick",
            Scale::Smoke => "smoke",
        }
    }
}

/// A tier run's schedule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierPlan {
    pub scale: Scale,
    /// Tier sizes the capacity runs go through (the first is 1: the baseline).
    pub switches: Vec<usize>,
    /// CPUs of each switch's quota (when cgroups can be used).
    pub quota_cpus: f64,
    /// Worker threads of each switch.
    pub switch_threads: usize,
    /// Emulated nodes behind every switch.
    pub nodes: usize,
    /// Capacity: closed-loop keep-alive clients per switch of the tier, each asking for one
    /// small cached object, for `capacity_s` seconds.
    pub clients_per_switch: usize,
    pub capacity_s: u64,
    /// Cache runs: tier size, objects of the Polygraph content mix and their Zipf exponent.
    pub cache_switches: usize,
    pub files: usize,
    pub zipf: f64,
    /// Cache of each switch in MiB (the one-big-cache variant has `cache_switches` times this).
    pub cache_mib: u64,
    /// Open-loop rate of the cache runs, a fill window (not counted) then a measured window.
    pub cache_rate: f64,
    pub fill_s: u64,
    pub measure_s: u64,
    /// Kill run: its length and when the last switch of the tier is killed.
    pub kill_s: u64,
    pub kill_at_s: u64,
    /// Seed of the tree and the request stream.
    pub seed: u64,
    /// Views runs: `cache_switches` switches without a cache in front of nodes of these
    /// speeds, first a closed-loop calibration of their capacity through one switch with the
    /// tier's CPU (`calibrate_s`), then each policy and view open loop at `views_load` × that
    /// capacity for `views_s` seconds.
    #[serde(default)]
    pub views_node_speeds: Vec<f64>,
    #[serde(default)]
    pub views_load: f64,
    #[serde(default)]
    pub calibrate_s: u64,
    #[serde(default)]
    pub views_s: u64,
}

impl TierPlan {
    pub fn new(scale: Scale) -> TierPlan {
        let (switches, capacity_s, fill_s, measure_s, kill_s) = match scale {
            Scale::Full => (vec![1, 2, 4], 10, 20, 30, 30),
            Scale::Quick => (vec![1, 2], 5, 8, 10, 14),
            Scale::Smoke => (vec![1, 2], 1, 1, 2, 4),
        };
        let (calibrate_s, views_s) = match scale {
            Scale::Full => (10, 20),
            Scale::Quick => (4, 6),
            Scale::Smoke => (1, 1),
        };
        TierPlan {
            scale,
            cache_switches: *switches.last().expect("at least one size"),
            switches,
            // The tier, not the machine, must be the limit: at K = 4 quotas of 0.25 CPU add up
            // to 1 CPU, and with the load generator's 0.7 at 63 k responses/s a 2-core
            // machine was full (K = 4 measured 0.87-0.91 x K x one switch's, K = 2 0.94-0.95).
            // The full scale's 0.15 leaves K = 4 at 0.6 CPU.
            quota_cpus: if scale == Scale::Full { 0.15 } else { 0.25 },
            switch_threads: 1,
            nodes: 2,
            clients_per_switch: 16,
            capacity_s,
            files: if scale == Scale::Smoke { 400 } else { 4000 },
            zipf: 0.8,
            cache_mib: if scale == Scale::Smoke { 1 } else { 4 },
            cache_rate: if scale == Scale::Smoke { 200.0 } else { 800.0 },
            fill_s,
            measure_s,
            kill_s,
            kill_at_s: kill_s / 2,
            seed: 1,
            views_node_speeds: vec![1.0, 1.0, 0.5, 0.5],
            views_load: 0.8,
            calibrate_s,
            views_s,
        }
    }
}

/// Whether each switch ran under its own CPU quota, and how.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Quota {
    pub applied: bool,
    /// The method (cgroup v1 or v2 file and figures), or why there was none.
    pub detail: String,
}

/// Saturated throughput of a tier of `switches`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CapacityRow {
    pub switches: usize,
    pub clients: usize,
    /// Responses per second over the window.
    pub responses_per_s: f64,
    /// This over `switches` × the one-switch figure (1.0 for one switch).
    pub ratio_to_k_times_one: f64,
    pub errors: u64,
    pub p99_ms: f64,
    /// Per switch of the tier: its address and responses.
    pub targets: Vec<TargetResult>,
    /// The load generator's busiest thread, % of a core, and whether it limited the run
    /// (`capstan bench`'s self-check): then the figure is the client's, not the tier's.
    pub generator_cpu_percent: f64,
    pub generator_limited: bool,
}

/// One way of giving K switches a cache.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheRow {
    /// `independent`, `one-big` or `sharded`.
    pub variant: String,
    pub switches: usize,
    /// Cache of each switch, MiB.
    pub cache_mib_each: u64,
    /// False: not run (`note` says why, e.g. "not available in this build").
    pub available: bool,
    pub note: String,
    /// Requests the schedule made due in the measured window, and the responses to them.
    pub offered: u64,
    pub responses: u64,
    pub errors: u64,
    /// Requests the nodes served in the measured window.
    pub node_requests: u64,
    /// Document hit ratio of the tier as the nodes see it: 1 − node requests / responses.
    pub dhr: f64,
}

/// A switch killed (SIGKILL) mid-run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KillResult {
    /// The cache variant of the tier that ran (`sharded` where available, else `independent`).
    pub variant: String,
    pub switches: usize,
    /// The killed switch's listener.
    pub killed: String,
    pub at_s: f64,
    /// Failed requests of the whole run, and per target.
    pub errors: u64,
    pub responses: u64,
    pub targets: Vec<TargetResult>,
    /// Node requests per second, sampled by the lab (seconds since the load started).
    pub node_rate: Vec<(f64, f64)>,
    /// Median node-request rate in the seconds before the kill.
    pub node_rate_before: f64,
    /// Seconds after the kill until the node-request rate settled (stayed within 25 % of its
    /// median over the rest of the run for two seconds); None if it did not in the run.
    pub settle_s: Option<f64>,
    pub timeline: Vec<TimelineSecond>,
}

/// One policy with one view, on a tier without a cache.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ViewRow {
    /// The `[policy] name`.
    pub policy: String,
    /// `local` (each switch its own counts), `shared` (the tier's, gossiped), or `-` for a
    /// policy that reads no counts (CAP).
    pub view: String,
    pub offered: u64,
    pub responses: u64,
    pub errors: u64,
    /// Response time percentiles, ms (corrected for coordinated omission).
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
}

/// The policies with each switch's local view against the tier's shared view.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ViewsResult {
    pub switches: usize,
    pub node_speeds: Vec<f64>,
    /// The nodes' calibrated capacity (closed loop through one switch), responses/s.
    pub capacity_rps: f64,
    /// The open-loop rate every row ran at.
    pub rate: f64,
    pub rows: Vec<ViewRow>,
}

/// One policy and view in the lab and in the simulator's tier model (`lab tier --engine both`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MirrorRow {
    pub policy: String,
    pub view: String,
    pub lab_p90_ms: f64,
    pub sim_p90_ms: f64,
}

/// The views runs again in `capstan sim tier`: as many dispatchers and nodes, the same load
/// against capacity, a mean service time that gives the simulated nodes the lab's calibrated
/// capacity, gossip every 100 ms.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimMirror {
    pub dispatchers: usize,
    pub nodes: usize,
    pub load: f64,
    pub service_ms: f64,
    pub jobs_per_node: u64,
    pub replications: usize,
    pub rows: Vec<MirrorRow>,
    /// Per policy: whether the lab and the simulator agree on which view has the lower p90
    /// (or both call it level within 10 %).
    pub agreement: Vec<String>,
}

/// Says, for each policy run with both views in both worlds, whether the lab and the simulator
/// agree on the direction of the shared view's effect on p90.
pub fn mirror_agreement(rows: &[MirrorRow]) -> Vec<String> {
    let mut out = Vec::new();
    let get = |p: &str, v: &str| rows.iter().find(|r| r.policy == p && r.view == v);
    let direction = |local: f64, shared: f64| match shared / local.max(1e-9) {
        x if x < 0.9 => "lower",
        x if x > 1.1 => "higher",
        _ => "level",
    };
    let mut policies: Vec<&str> = rows.iter().map(|r| r.policy.as_str()).collect();
    policies.dedup();
    for p in policies {
        let (Some(l), Some(s)) = (get(p, "local"), get(p, "shared")) else {
            continue;
        };
        let lab = direction(l.lab_p90_ms, s.lab_p90_ms);
        let sim = direction(l.sim_p90_ms, s.sim_p90_ms);
        out.push(match lab == sim {
            true => {
                format!("{p}: agree — the shared view's p90 is {lab} than the local one's in both")
            }
            false => format!(
                "{p}: disagree — {lab} in the lab, {sim} in the simulator (its nodes are equal, \
                 serve one request at a time with exponential times and see no switch CPU; the \
                 lab's are unequal emulated nodes with the Polygraph mix's costs)"
            ),
        });
    }
    out
}

/// What `results.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierResults {
    pub name: String,
    pub title: String,
    pub command: String,
    pub plan: TierPlan,
    pub quota: Quota,
    /// Whether this build's switch takes `[tier] peers` (`capstan check` on a generated
    /// config), with its answer.
    pub tier_supported: bool,
    pub tier_check: String,
    pub capacity: Vec<CapacityRow>,
    pub cache: Vec<CacheRow>,
    pub kill: Option<KillResult>,
    #[serde(default)]
    pub views: Option<ViewsResult>,
    /// With `--engine both`: the views runs mirrored in the simulator.
    #[serde(default)]
    pub sim: Option<SimMirror>,
    /// What the issue asks for that this run does not measure yet, and why.
    pub not_measured: Vec<String>,
    pub findings: Vec<String>,
}

/// The findings in words, from the figures (said as measured, with what limits them).
pub fn findings(r: &TierResults) -> Vec<String> {
    let mut f = Vec::new();
    if !r.quota.applied {
        f.push(format!(
            "The switches ran without CPU quotas ({}); capacity against K then measures the \
             machine's spare CPU as much as the tier.",
            r.quota.detail
        ));
    }
    if let Some(one) = r.capacity.first() {
        for c in &r.capacity[1..] {
            f.push(format!(
                "Capacity: {} switches gave {:.0} responses/s, {:.2} × {} × one switch's \
                 {:.0}/s ({}; the issue's target is ≥ 0.9).",
                c.switches,
                c.responses_per_s,
                c.ratio_to_k_times_one,
                c.switches,
                one.responses_per_s,
                if c.ratio_to_k_times_one >= 0.9 {
                    "met"
                } else {
                    "not met in this run"
                }
            ));
        }
    }
    for c in r.capacity.iter().filter(|c| c.generator_limited) {
        f.push(format!(
            "With {} switch(es) the load generator limited the run (its busiest thread at \
             {:.0} % of a core, or late): that capacity is the client's, not the tier's.",
            c.switches, c.generator_cpu_percent
        ));
    }
    let row = |v: &str| r.cache.iter().find(|c| c.variant == v && c.available);
    if let (Some(ind), Some(big)) = (row("independent"), row("one-big")) {
        f.push(format!(
            "Cache: {} independent caches of {} MiB reached a DHR of {:.3} ({} node requests); \
             one cache of {} MiB {:.3} ({} node requests).",
            ind.switches,
            ind.cache_mib_each,
            ind.dhr,
            ind.node_requests,
            big.cache_mib_each,
            big.dhr,
            big.node_requests
        ));
        match row("sharded") {
            Some(sh) => f.push(format!(
                "The sharded tier ({} × {} MiB, [tier] peers) reached {:.3}: {:.2} × one big \
                 cache's (target ≥ 0.95) and {:.2} × the independent caches' (target ≥ 1.3), \
                 with {} node requests.",
                sh.switches,
                sh.cache_mib_each,
                sh.dhr,
                sh.dhr / big.dhr.max(1e-9),
                sh.dhr / ind.dhr.max(1e-9),
                sh.node_requests
            )),
            None => f.push(format!(
                "The sharded tier was not measured: {}.",
                r.tier_check
            )),
        }
    }
    for c in r.cache.iter().filter(|c| c.available) {
        if (c.responses as f64) < 0.9 * c.offered as f64 {
            f.push(format!(
                "The {} variant fell behind the offered load ({} responses of {} requests \
                 due): its switches or the nodes were saturated, so its DHR is over the requests \
                 they took.",
                c.variant, c.responses, c.offered
            ));
        }
    }
    if let Some(k) = &r.kill {
        let settle = match k.settle_s {
            Some(s) => format!("the nodes' request rate settled {s:.1} s after the kill"),
            None => "the nodes' request rate did not settle within the run".into(),
        };
        f.push(format!(
            "Killing {} ({} tier of {}) at {:.1} s failed {} of {} requests (those on \
             connections open to it, at most one each; new connections meant for it were \
             refused and went to the next switch); {settle} (before: {:.0} \
             node requests/s).",
            k.killed,
            k.variant,
            k.switches,
            k.at_s,
            k.errors,
            k.responses + k.errors,
            k.node_rate_before
        ));
    }
    if let Some(v) = &r.views {
        f.extend(views_findings(v));
    }
    if let Some(m) = &r.sim {
        f.push(format!(
            "The simulator ({} dispatchers, {} nodes, load {:.2}, service {:.1} ms so its capacity is \
             the lab's, gossip every 100 ms): {}.",
            m.dispatchers,
            m.nodes,
            m.load,
            m.service_ms,
            m.agreement.join("; ")
        ));
    }
    if let Some(first) = r.not_measured.first() {
        f.push(format!("Not measured yet: {first}"));
    }
    f
}

/// Each policy's p90 with the local view against the shared one.
fn views_findings(v: &ViewsResult) -> Vec<String> {
    let mut f = vec![format!(
        "Policies on a tier of {} switches without a cache, nodes of speeds {:?} (calibrated \
         capacity {:.0} responses/s), open loop at {:.0} requests/s:",
        v.switches, v.node_speeds, v.capacity_rps, v.rate
    )];
    let row = |p: &str, view: &str| v.rows.iter().find(|r| r.policy == p && r.view == view);
    for r in v.rows.iter().filter(|r| r.view != "shared") {
        let Some(shared) = row(&r.policy, "shared").filter(|_| r.view == "local") else {
            f.push(format!(
                "{}: p90 {:.1} ms, p99 {:.1} ms ({} errors; no counts read, so no view to share).",
                r.policy, r.p90_ms, r.p99_ms, r.errors
            ));
            continue;
        };
        let ratio = shared.p90_ms / r.p90_ms.max(1e-9);
        let verdict = match ratio {
            x if x < 0.9 => "the shared view lowered it",
            x if x > 1.1 => "the shared view raised it",
            _ => "level within 10 %",
        };
        f.push(format!(
            "{}: p90 {:.1} ms with each switch's local view, {:.1} ms with the shared view \
             ({ratio:.2} ×: {verdict}); p99 {:.1} → {:.1} ms; errors {} and {}.",
            r.policy, r.p90_ms, shared.p90_ms, r.p99_ms, shared.p99_ms, r.errors, shared.errors
        ));
    }
    f
}

/// Seconds after `at` until `rate` settles: the first sample from which the next two seconds'
/// samples stay within 25 % of the median of all samples after `at` (None: never, or too few).
pub fn settle_time(rate: &[(f64, f64)], at: f64) -> Option<f64> {
    let after: Vec<(f64, f64)> = rate.iter().copied().filter(|(t, _)| *t > at).collect();
    let level = median(after.iter().map(|p| p.1).collect())?;
    let within = |v: f64| (v - level).abs() <= 0.25 * level.max(1.0);
    for (i, (t, _)) in after.iter().enumerate() {
        let span: Vec<&(f64, f64)> = after[i..].iter().filter(|p| p.0 <= t + 2.0).collect();
        let covers = after.last().is_some_and(|l| l.0 >= t + 2.0);
        if covers && span.iter().all(|p| within(p.1)) {
            return Some(((t - at) * 100.0).round() / 100.0);
        }
    }
    None
}

pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settles_after_a_spike() {
        // Flat at 10/s, a spike after the kill at t = 5, flat again from t = 7.
        let mut rate: Vec<(f64, f64)> = (0..20).map(|i| (i as f64 * 0.5, 10.0)).collect();
        for p in rate.iter_mut().filter(|p| p.0 > 5.0 && p.0 < 7.0) {
            p.1 = 60.0;
        }
        assert_eq!(settle_time(&rate, 5.0), Some(2.0));
        // No spike: settled at once.
        let flat: Vec<(f64, f64)> = (0..20).map(|i| (i as f64 * 0.5, 10.0)).collect();
        assert_eq!(settle_time(&flat, 5.0), Some(0.5));
        // Never flat for two seconds.
        let saw: Vec<(f64, f64)> = (0..20)
            .map(|i| (i as f64 * 0.5, if i % 2 == 0 { 1.0 } else { 50.0 }))
            .collect();
        assert_eq!(settle_time(&saw, 5.0), None);
        assert_eq!(settle_time(&[], 1.0), None);
    }

    #[test]
    fn the_lab_and_the_simulator_agree_on_the_direction_or_say_why_not() {
        let row = |p: &str, v: &str, lab: f64, sim: f64| MirrorRow {
            policy: p.into(),
            view: v.into(),
            lab_p90_ms: lab,
            sim_p90_ms: sim,
        };
        let rows = [
            row("least-connections", "local", 100.0, 50.0),
            row("least-connections", "shared", 60.0, 20.0),
            row("join-idle-queue", "local", 100.0, 50.0),
            row("join-idle-queue", "shared", 105.0, 70.0),
        ];
        let a = mirror_agreement(&rows);
        assert_eq!(a.len(), 2);
        assert!(
            a[0].starts_with("least-connections: agree") && a[0].contains("lower"),
            "{a:?}"
        );
        assert!(
            a[1].starts_with("join-idle-queue: disagree — level in the lab, higher"),
            "{a:?}"
        );
    }

    #[test]
    fn plans() {
        let q = TierPlan::new(Scale::Quick);
        assert_eq!(q.switches, vec![1, 2]);
        assert_eq!(q.cache_switches, 2);
        assert_eq!(TierPlan::new(Scale::Full).switches, vec![1, 2, 4]);
        assert!(q.kill_at_s < q.kill_s);
    }
}
