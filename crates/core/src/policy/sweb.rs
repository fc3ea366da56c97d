//! `sweb`: the multi-faceted scheduler of SWEB (Andresen, Yang, Holmedahl, Ibarra, "SWEB: Towards
//! a Scalable World Wide Web Server on Multicomputers", IPPS '96, §3.2).
//!
//! For each available node the broker estimates the request's completion time
//!
//! ```text
//! t_s = t_redirection + t_data + t_CPU        (+ t_net, the same for every node, not estimated)
//! ```
//!
//! and picks the least. With `F` the object's size:
//!
//! - **t_data**: local object (the node is its home, or `placement = "shared"`):
//!   `F / (b_disk × (1 − δ1))`, δ1 the node's gathered disk load. Remote object (fetched from its
//!   home over the interconnect, NFS in the paper): `F × (1 + remote_penalty) / (b_net × (1 −
//!   δ2))`, δ2 the node's gathered network load; the paper measured a 10 % penalty on the Meiko
//!   CS-2 and 50–70 % on Ethernet. A class's oracle `disk_ms` (a CGI's own disk work) is added at
//!   the node's disk, stretched by the same `1 / (1 − δ1)`.
//! - **t_CPU** = CPU load × operations / speed. Operations are the oracle's (SWEB's "miniature
//!   expert system": a user-supplied table of each task's demands): the class's `cpu_ms` plus
//!   `cpu_ms_per_mb` per MB sent. The CPU load is `1 / (1 − u)` for gathered CPU utilisation `u`:
//!   the stretch processor sharing gives a new job, i.e. the run-queue length a Unix load average
//!   counts (`u / (1 − u)`) plus the job itself. For every node but the deciding one it is
//!   inflated by σ (30 %), because its load is known only from its last report and a node wrongly
//!   believed idle would otherwise draw every redirection ("unsynchronized overloading").
//! - **t_redirection** = `2 × client_rtt_ms + connect_ms` for every node but the deciding one: the
//!   client receives a redirect and connects again.
//!
//! **The deciding node.** SWEB has no front end: DNS rotation hands a request to some node whose
//! broker decides, so the decider is [`ClusterView::receiving_node`] (the simulator sets it). A
//! central switch has received the request itself; there the decider is the object's home node,
//! which holds the data — serving elsewhere costs what a redirect would (a second hop and another
//! node's stale load), so the redirect and σ terms become a locality preference of about
//! `2 × client_rtt_ms + connect_ms`. With `placement = "shared"` and no receiving node there is no
//! decider: no σ, no redirect term. The decider keeps a request on a tie.
//!
//! **Object sizes**, in order: `sizes` (exact locality key, then glob patterns, longest pattern
//! first; `*` does not cross `/`, `**` does), the class's oracle `net_kb` (× 1000 bytes), then
//! `default_size_bytes`. MB is 10^6 bytes throughout, as in `capstan-model`.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::home_node::home_of;
use super::registry::{check, read, Params, Registration};
use super::support::{known_nodes, Rotor};
use super::{Needs, Policy, PolicyContext, PolicyError, RequestInfo};
use crate::class::{ClassId, ResourceProfile};
use crate::view::{ClusterView, NodeId, NodeState};

pub(super) const REGISTRATION: Registration = Registration {
    name: "sweb",
    about: "SWEB (Andresen et al.): least estimated t_redirection + t_data + t_CPU from gathered \
            CPU/disk/network loads and an oracle of demands",
    params: "sigma (0.3), remote_penalty (0.1), client_rtt_ms (10), connect_ms (4), \
             placement = partitioned|shared, disk_mb_s (5), interconnect_mb_s (5), speed (1), \
             nodes.NAME.{disk_mb_s, interconnect_mb_s, speed}, cpu_ms (1), cpu_ms_per_mb (10), \
             oracle.CLASS.{cpu_ms, disk_ms, net_kb}, sizes.\"KEY-OR-GLOB\" = bytes, \
             default_size_bytes (8886)",
    seeded: false,
    check: check::<SwebParams>,
    build: |params: &Params, ctx: &PolicyContext<'_>| {
        let p: SwebParams = read("sweb", params)?;
        Ok(Box::new(Sweb::new(&p, ctx)?))
    },
};

/// Utilisations are capped here so a saturated resource costs 100× an idle one, not infinity
/// (an infinite cost would make every saturated node tie).
const MAX_UTIL: f64 = 0.99;
const MB: f64 = 1e6;

/// Where the objects live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// Each object is on its home node's local disk (node `key_hash % nodes`, as
    /// `capstan origin --partition K/N` splits a tree); other nodes fetch it remotely.
    #[default]
    Partitioned,
    /// Every node has every object locally (replicated tree).
    Shared,
}

/// One node's capacities, overriding the policy-wide defaults.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwebNode {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk_mb_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interconnect_mb_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speed: Option<f64>,
}

/// SWEB's parameters: the `[policy]` table with `name = "sweb"`. Every field has a default; the
/// paper's where it gives one (section in brackets).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwebParams {
    /// σ, the inflation of other nodes' CPU load (§3.2: 30 %).
    pub sigma: f64,
    /// Extra cost of a remote fetch over the interconnect's rate (§3.2: ≈ 10 % on the Meiko CS-2,
    /// 50–70 % over Ethernet; default 0.1).
    pub remote_penalty: f64,
    /// Client round-trip time for the redirect term, ms (the paper hand-codes it and gives no
    /// value; default 10, ours).
    pub client_rtt_ms: f64,
    /// Connection set-up for the redirect term, ms (default 4: §4.3's cost of generating a
    /// redirection, the nearest number the paper gives).
    pub connect_ms: f64,
    pub placement: Placement,
    /// Local disk bandwidth b_disk, MB/s (§3.3: b1 = 5).
    pub disk_mb_s: f64,
    /// Interconnect (remote-fetch) bandwidth b_net, MB/s (default 5: with the 10 % penalty a
    /// remote fetch runs at 4.5 MB/s, §3.3's b2).
    pub interconnect_mb_s: f64,
    /// Relative CPU speed (default 1).
    pub speed: f64,
    /// Per-node overrides by node name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub nodes: BTreeMap<String, SwebNode>,
    /// CPU ms at speed 1 per request of a class absent from `oracle` (default 1, the model's
    /// static-file cost).
    pub cpu_ms: f64,
    /// CPU ms at speed 1 per MB sent (default 10: the model's 100 MB/s memory copy).
    pub cpu_ms_per_mb: f64,
    /// The oracle: demands by class name (`cpu_ms`, `disk_ms`, `net_kb` as the size fallback).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub oracle: BTreeMap<String, ResourceProfile>,
    /// Object sizes in bytes by locality key or glob.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub sizes: BTreeMap<String, u64>,
    /// Size of an object nothing else sizes (default 8,886 B: the mean of the CAP paper's Table 1
    /// lognormal body, e^(7.640 + 1.705²/2)).
    pub default_size_bytes: u64,
}

impl Default for SwebParams {
    fn default() -> Self {
        SwebParams {
            sigma: 0.3,
            remote_penalty: 0.1,
            client_rtt_ms: 10.0,
            connect_ms: 4.0,
            placement: Placement::Partitioned,
            disk_mb_s: 5.0,
            interconnect_mb_s: 5.0,
            speed: 1.0,
            nodes: BTreeMap::new(),
            cpu_ms: 1.0,
            cpu_ms_per_mb: 10.0,
            oracle: BTreeMap::new(),
            sizes: BTreeMap::new(),
            default_size_bytes: 8_886,
        }
    }
}

/// A cost estimate, seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    pub redirect_s: f64,
    pub data_s: f64,
    pub cpu_s: f64,
}

impl Cost {
    pub fn total(&self) -> f64 {
        self.redirect_s + self.data_s + self.cpu_s
    }
}

/// A node's capacities as the cost needs them: seconds per byte read locally and remotely (the
/// remote penalty included) and per second of CPU work at speed 1. Reciprocals, so a decision
/// multiplies instead of dividing.
#[derive(Clone, Copy, Debug)]
struct Capacity {
    local_s_per_byte: f64,
    remote_s_per_byte: f64,
    cpu_stretch: f64,
}

/// What the oracle says about one class (seconds at speed 1; size in bytes).
#[derive(Clone, Copy, Debug)]
struct ClassDemand {
    cpu_s: f64,
    disk_s: f64,
    size: Option<u64>,
}

/// Object sizes: exact keys, then globs longest first.
#[derive(Debug, Default)]
struct SizeTable {
    exact: HashMap<String, u64>,
    globs: Vec<(globset::GlobMatcher, u64)>,
}

impl SizeTable {
    fn get(&self, key: &str) -> Option<u64> {
        if let Some(&bytes) = self.exact.get(key) {
            return Some(bytes);
        }
        self.globs
            .iter()
            .find(|(g, _)| g.is_match(key))
            .map(|&(_, bytes)| bytes)
    }
}

/// The SWEB broker (see the module doc).
#[derive(Debug)]
pub struct Sweb {
    nodes: Vec<Capacity>,
    classes: Vec<ClassDemand>,
    default_class: ClassDemand,
    cpu_s_per_byte: f64,
    sizes: SizeTable,
    default_size: u64,
    sigma: f64,
    redirect_s: f64,
    placement: Placement,
    /// Tie-break start when there is no decider.
    rotor: Rotor,
}

fn invalid(message: String) -> PolicyError {
    PolicyError::Invalid(format!("sweb: {message}"))
}

fn check_number(name: &str, value: f64, positive: bool) -> Result<f64, PolicyError> {
    let ok = value.is_finite() && if positive { value > 0.0 } else { value >= 0.0 };
    if ok {
        Ok(value)
    } else {
        let want = if positive { "> 0" } else { "≥ 0" };
        Err(invalid(format!(
            "{name} must be a number {want}, got {value}"
        )))
    }
}

impl Sweb {
    pub fn new(params: &SwebParams, ctx: &PolicyContext<'_>) -> Result<Self, PolicyError> {
        let p = params;
        check_number("sigma", p.sigma, false)?;
        check_number("remote_penalty", p.remote_penalty, false)?;
        check_number("client_rtt_ms", p.client_rtt_ms, false)?;
        check_number("connect_ms", p.connect_ms, false)?;
        check_number("cpu_ms", p.cpu_ms, false)?;
        check_number("cpu_ms_per_mb", p.cpu_ms_per_mb, false)?;
        Ok(Sweb {
            nodes: capacities(p, ctx)?
                .into_iter()
                .map(|c| c.with_penalty(p.remote_penalty))
                .collect(),
            classes: class_demands(p, ctx)?,
            default_class: ClassDemand {
                cpu_s: p.cpu_ms / 1e3,
                disk_s: 0.0,
                size: None,
            },
            cpu_s_per_byte: p.cpu_ms_per_mb / 1e3 / MB,
            sizes: size_table(&p.sizes)?,
            default_size: p.default_size_bytes,
            sigma: p.sigma,
            redirect_s: (2.0 * p.client_rtt_ms + p.connect_ms) / 1e3,
            placement: p.placement,
            rotor: Rotor::new(),
        })
    }

    /// The object's size in bytes, as the broker estimates it.
    pub fn size_of(&self, req: &RequestInfo<'_>) -> u64 {
        self.sizes
            .get(req.key)
            .or_else(|| self.demand(req.class).size)
            .unwrap_or(self.default_size)
    }

    fn demand(&self, class: ClassId) -> ClassDemand {
        self.classes
            .get(class)
            .copied()
            .unwrap_or(self.default_class)
    }

    /// The node holding the object locally (`None` when every node does).
    fn home(&self, req: &RequestInfo<'_>, nodes: usize) -> Option<NodeId> {
        match self.placement {
            Placement::Partitioned => home_of(req.key_hash, nodes),
            Placement::Shared => None,
        }
    }

    /// The node deciding for this request (see the module doc).
    fn decider(
        &self,
        view: &dyn ClusterView,
        home: Option<NodeId>,
        nodes: usize,
    ) -> Option<NodeId> {
        view.receiving_node().filter(|&r| r < nodes).or(home)
    }

    fn job(&self, req: &RequestInfo<'_>, home: Option<NodeId>, decider: Option<NodeId>) -> Job {
        let size = self.size_of(req) as f64;
        let demand = self.demand(req.class);
        Job {
            size,
            demand,
            operations_s: demand.cpu_s + size * self.cpu_s_per_byte,
            home,
            decider,
        }
    }

    /// The estimated cost of serving `req` on node `node` of `view` (whatever its availability).
    pub fn estimate(&self, req: &RequestInfo<'_>, view: &dyn ClusterView, node: NodeId) -> Cost {
        let nodes = known_nodes(view, self.nodes.len());
        let home = self.home(req, nodes);
        let decider = self.decider(view, home, nodes);
        let job = self.job(req, home, decider);
        self.cost(&job, node, &view.node(node))
    }

    fn cost(&self, job: &Job, node: NodeId, state: &NodeState) -> Cost {
        let cap = self.nodes[node];
        let g = &state.gathered;
        let headroom = |u: f64| 1.0 - u.clamp(0.0, MAX_UTIL);
        let local = job.home.is_none_or(|h| h == node);
        let mut data_s = if local {
            (job.size * cap.local_s_per_byte + job.demand.disk_s) / headroom(g.disk)
        } else {
            job.size * cap.remote_s_per_byte / headroom(g.net)
        };
        if !local && job.demand.disk_s > 0.0 {
            data_s += job.demand.disk_s / headroom(g.disk);
        }
        let deciding = job.decider.is_none_or(|d| d == node);
        let sigma = if deciding { 1.0 } else { 1.0 + self.sigma };
        Cost {
            redirect_s: if deciding { 0.0 } else { self.redirect_s },
            data_s,
            cpu_s: sigma * job.operations_s * cap.cpu_stretch / headroom(g.cpu),
        }
    }
}

/// What one decision needs, computed once per request.
struct Job {
    size: f64,
    demand: ClassDemand,
    /// CPU work at speed 1: the class's own plus the per-byte cost of sending.
    operations_s: f64,
    home: Option<NodeId>,
    decider: Option<NodeId>,
}

impl Capacity {
    fn with_penalty(self, remote_penalty: f64) -> Capacity {
        Capacity {
            remote_s_per_byte: self.remote_s_per_byte * (1.0 + remote_penalty),
            ..self
        }
    }
}

fn capacities(p: &SwebParams, ctx: &PolicyContext<'_>) -> Result<Vec<Capacity>, PolicyError> {
    if let Some(name) = p.nodes.keys().find(|n| !ctx.nodes.contains(n)) {
        return Err(invalid(format!(
            "nodes names node `{name}`, which is not defined"
        )));
    }
    ctx.nodes
        .iter()
        .map(|name| {
            let o = p.nodes.get(name).copied().unwrap_or_default();
            let field = |f: &str| format!("{f} of node `{name}`");
            let disk = check_number(
                &field("disk_mb_s"),
                o.disk_mb_s.unwrap_or(p.disk_mb_s),
                true,
            )?;
            let net = o.interconnect_mb_s.unwrap_or(p.interconnect_mb_s);
            let net = check_number(&field("interconnect_mb_s"), net, true)?;
            let speed = check_number(&field("speed"), o.speed.unwrap_or(p.speed), true)?;
            Ok(Capacity {
                local_s_per_byte: 1.0 / (disk * MB),
                remote_s_per_byte: 1.0 / (net * MB),
                cpu_stretch: 1.0 / speed,
            })
        })
        .collect()
}

fn class_demands(p: &SwebParams, ctx: &PolicyContext<'_>) -> Result<Vec<ClassDemand>, PolicyError> {
    if let Some(name) = p.oracle.keys().find(|c| !ctx.classes.contains(c)) {
        return Err(invalid(format!(
            "oracle names class `{name}`, which is not defined"
        )));
    }
    ctx.classes
        .iter()
        .map(|name| {
            let Some(profile) = p.oracle.get(name) else {
                return Ok(ClassDemand {
                    cpu_s: p.cpu_ms / 1e3,
                    disk_s: 0.0,
                    size: None,
                });
            };
            for (field, v) in [
                ("cpu_ms", profile.cpu_ms),
                ("disk_ms", profile.disk_ms),
                ("net_kb", profile.net_kb),
            ] {
                check_number(&format!("oracle {field} of class `{name}`"), v, false)?;
            }
            Ok(ClassDemand {
                cpu_s: profile.cpu_ms / 1e3,
                disk_s: profile.disk_ms / 1e3,
                size: (profile.net_kb > 0.0).then(|| (profile.net_kb * 1e3).round() as u64),
            })
        })
        .collect()
}

fn size_table(sizes: &BTreeMap<String, u64>) -> Result<SizeTable, PolicyError> {
    let mut table = SizeTable::default();
    for (pattern, &bytes) in sizes {
        if pattern.contains(['*', '?', '[', '{']) {
            let glob = globset::GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map_err(|e| invalid(format!("sizes pattern `{pattern}`: {e}")))?;
            table.globs.push((glob.compile_matcher(), bytes));
        } else {
            table.exact.insert(pattern.clone(), bytes);
        }
    }
    table
        .globs
        .sort_by_key(|g| std::cmp::Reverse(g.0.glob().glob().len()));
    Ok(table)
}

impl Policy for Sweb {
    fn name(&self) -> &'static str {
        "sweb"
    }

    fn needs(&self) -> Needs {
        Needs {
            request_content: true,
            gathered_load: true,
            ..Needs::default()
        }
    }

    fn pick(&self, req: &RequestInfo<'_>, view: &dyn ClusterView) -> Option<NodeId> {
        let nodes = known_nodes(view, self.nodes.len());
        if nodes == 0 {
            return None;
        }
        let home = self.home(req, nodes);
        let decider = self.decider(view, home, nodes);
        let job = self.job(req, home, decider);
        // The decider is looked at first and strict `<` keeps the first minimum, so it keeps a
        // request on a tie; without one, ties rotate.
        let start = decider.unwrap_or_else(|| self.rotor.spin(nodes));
        let mut best: Option<(NodeId, f64)> = None;
        for i in 0..nodes {
            let id = (start + i) % nodes;
            let state = view.node(id);
            if !state.available {
                continue;
            }
            let t = self.cost(&job, id, &state).total();
            if best.is_none_or(|(_, b)| t < b) {
                best = Some((id, t));
            }
        }
        best.map(|(id, _)| id)
    }
}

#[cfg(test)]
mod tests;
