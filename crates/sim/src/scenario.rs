//! Scenarios: the CAP paper's workloads (§4.2–4.3) as named presets, also loadable from TOML.
//!
//! Every number the paper gives is used as given; where it is silent the choice is ours and the
//! field's doc says so ("paper silent").

use capstan_model::NodeParams;
use serde::{Deserialize, Serialize};

/// The kinds of page request the paper distinguishes. The switch sees four CAP classes: static
/// and lightly dynamic pages are both `N`; `Disk` is `DB`, `Secure` is `CB`, `SecureDisk` `DCB`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Static,
    LightDynamic,
    Disk,
    Secure,
    SecureDisk,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Static,
        Kind::LightDynamic,
        Kind::Disk,
        Kind::Secure,
        Kind::SecureDisk,
    ];

    /// CAP class id as the switch classifies it: 0 N, 1 DB, 2 CB, 3 DCB.
    pub fn class(self) -> usize {
        match self {
            Kind::Static | Kind::LightDynamic => 0,
            Kind::Disk => 1,
            Kind::Secure => 2,
            Kind::SecureDisk => 3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Static => "static",
            Kind::LightDynamic => "light-dynamic",
            Kind::Disk => "disk",
            Kind::Secure => "secure",
            Kind::SecureDisk => "secure-disk",
        }
    }

    pub fn secure(self) -> bool {
        matches!(self, Kind::Secure | Kind::SecureDisk)
    }

    pub fn database(self) -> bool {
        matches!(self, Kind::Disk | Kind::SecureDisk)
    }
}

/// The CAP class names, in class-id order.
pub const CLASS_NAMES: [&str; 4] = ["N", "DB", "CB", "DCB"];

/// Share of page requests of each kind (need not sum to 1: normalised).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Mix {
    #[serde(rename = "static")]
    pub static_: f64,
    pub light_dynamic: f64,
    pub disk: f64,
    pub secure: f64,
    pub secure_disk: f64,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            static_: 1.0,
            light_dynamic: 0.0,
            disk: 0.0,
            secure: 0.0,
            secure_disk: 0.0,
        }
    }
}

impl Mix {
    pub fn share(&self, kind: Kind) -> f64 {
        match kind {
            Kind::Static => self.static_,
            Kind::LightDynamic => self.light_dynamic,
            Kind::Disk => self.disk,
            Kind::Secure => self.secure,
            Kind::SecureDisk => self.secure_disk,
        }
    }

    /// Normalised shares in `Kind::ALL` order.
    pub fn normalised(&self) -> [f64; 5] {
        let total: f64 = Kind::ALL.iter().map(|&k| self.share(k)).sum();
        Kind::ALL.map(|k| self.share(k) / total)
    }

    /// Share of each CAP class (N, DB, CB, DCB).
    pub fn class_shares(&self) -> [f64; 4] {
        let mut out = [0.0; 4];
        for (k, s) in Kind::ALL.iter().zip(self.normalised()) {
            out[k.class()] += s;
        }
        out
    }
}

/// The site's content and the client sessions (CAP Table 1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Workload {
    /// Distinct pages on the site (paper silent; ours). Each page is an HTML object with a fixed
    /// set of embedded objects, so repeated requests for a page touch the same files.
    pub pages: usize,
    /// Zipf exponent of page popularity (paper silent; 1.0 is the classic web value).
    pub zipf_alpha: f64,
    /// Inverse Gaussian pages per session (Table 1: μ 3.86, λ 9.46), rounded, at least 1.
    pub pages_mu: f64,
    pub pages_lambda: f64,
    /// Pareto think time between pages (Table 1: α 1.4, k 2 s).
    pub think_alpha: f64,
    pub think_k_s: f64,
    /// Pareto objects per page including the HTML (Table 1: α 1.1–1.5, default 1.33, k 1),
    /// floored.
    pub objects_alpha: f64,
    /// Cap on objects per page (paper silent; the Pareto has infinite variance and a page with
    /// thousands of images is not a web page).
    pub max_objects: u32,
    /// Object size law: lognormal body (Table 1: μ 7.640, σ 1.705) spliced with a Pareto tail
    /// (α 1.383, k 2924 B), the `workload` crate's SURGE splice.
    pub size_mu: f64,
    pub size_sigma: f64,
    pub size_tail_alpha: f64,
    pub size_tail_k: f64,
    /// Largest object in bytes (paper silent; a 64 MB cap only trims the extreme tail).
    pub max_object_bytes: u64,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            pages: 5000,
            zipf_alpha: 1.0,
            pages_mu: 3.86,
            pages_lambda: 9.46,
            think_alpha: 1.4,
            think_k_s: 2.0,
            objects_alpha: 1.33,
            max_objects: 100,
            size_mu: 7.640,
            size_sigma: 1.705,
            size_tail_alpha: 1.383,
            size_tail_k: 2924.0,
            max_object_bytes: 64 << 20,
        }
    }
}

/// Service costs the paper does not give numbers for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Costs {
    /// Probability that a lightly dynamic page's HTML is cachable (paper: 0.3). The rest is
    /// generated: a disk access of its size that bypasses the cache, plus `light_dynamic_cpu_ms`.
    pub light_dynamic_cachable: f64,
    /// CPU to generate a lightly dynamic page (paper silent; ours: 5 ms).
    pub light_dynamic_cpu_ms: f64,
    /// Mean of the exponential back-end disk time of one database query (paper silent; ours:
    /// 20 ms, about one and a half random accesses of the paper's disk (one is ≈ 13.7 ms). At
    /// 100 ms, the Jones thesis's disk CGI, every policy saturates the back-ends at the
    /// paper's 200 clients/s on 8 nodes, which would compare nothing).
    pub db_disk_ms: f64,
    /// Web-node CPU to build the page from the query result (paper silent; `core`'s `disk`
    /// class: 5 ms).
    pub db_cpu_ms: f64,
    /// Back-end database servers; 0 means one per web node, each node talking to its own
    /// (paper: "replicated database servers", count not given).
    pub backends: usize,
    /// HTTP processes per node (Apache's MaxClients; paper silent; ours 256); connections past
    /// it wait in the node's accept queue.
    pub max_processes: u32,
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            light_dynamic_cachable: 0.3,
            light_dynamic_cpu_ms: 5.0,
            db_disk_ms: 20.0,
            db_cpu_ms: 5.0,
            backends: 0,
            max_processes: 256,
        }
    }
}

/// Which layer the switch dispatches at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Layer {
    /// Layer 7 for content-aware policies, layer 4 for the others.
    Auto,
    L4,
    L7,
}

/// The web switch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Switch {
    pub layer: Layer,
    /// Per-connection cost of a layer-4 switch (paper silent; ours 10 µs).
    pub l4_connection_us: f64,
    /// Per-connection cost of a layer-7 switch: accepting the connection, parsing the request
    /// and handing it off (Aron et al., USENIX 2000, as the paper says; ~300 µs there).
    pub l7_connection_us: f64,
    /// Per further request on a layer-7 persistent connection (multiple hand-off, Aron et al.;
    /// ours 50 µs).
    pub l7_request_us: f64,
    /// T_gat: how often server state is gathered, seconds; 0 means the switch sees live state.
    pub gather_interval_s: f64,
}

impl Default for Switch {
    fn default() -> Self {
        Switch {
            layer: Layer::Auto,
            l4_connection_us: 10.0,
            l7_connection_us: 300.0,
            l7_request_us: 50.0,
            gather_interval_s: 1.0,
        }
    }
}

/// One complete scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub mix: Mix,
    pub workload: Workload,
    pub costs: Costs,
    pub switch: Switch,
    pub node: NodeParams,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            name: "custom".into(),
            description: String::new(),
            mix: Mix::default(),
            workload: Workload::default(),
            costs: Costs::default(),
            switch: Switch::default(),
            node: NodeParams::default(),
        }
    }
}

/// The paper's figure and numbers for each named scenario, for the report.
pub struct PaperResult {
    pub figure: &'static str,
    pub finding: &'static str,
}

pub const NAMES: [&str; 6] = [
    "publishing-static",
    "publishing-dynamic",
    "transaction",
    "commerce-secure",
    "commerce-mixed",
    "commerce",
];

impl Scenario {
    /// A named scenario, or `None`.
    pub fn named(name: &str) -> Option<Scenario> {
        let mix = |s: f64, l: f64, d: f64, c: f64, dc: f64| Mix {
            static_: s,
            light_dynamic: l,
            disk: d,
            secure: c,
            secure_disk: dc,
        };
        let (mix, description) = match name {
            "publishing-static" => (
                mix(1.0, 0.0, 0.0, 0.0, 0.0),
                "Web publishing, static documents only (CAP §4.3.2, Fig. 4a)",
            ),
            "publishing-dynamic" => (
                mix(0.0, 1.0, 0.0, 0.0, 0.0),
                "Web publishing, lightly dynamic documents cachable with probability 0.3 (Fig. 4b)",
            ),
            "transaction" => (
                mix(0.6, 0.0, 0.4, 0.0, 0.0),
                "Web transaction: 60 % static, 40 % disk-bound database queries (§4.3.3, Fig. 5)",
            ),
            "commerce-secure" => (
                mix(0.3, 0.3, 0.0, 0.4, 0.0),
                "Web commerce: 30 % static, 30 % lightly dynamic, 40 % secure (Fig. 6a)",
            ),
            "commerce-mixed" => (
                mix(0.3, 0.3, 0.2, 0.2, 0.0),
                "Web commerce: 30 % static, 30 % lightly dynamic, 20 % CPU-bound (secure), \
                 20 % disk-bound (Fig. 6b)",
            ),
            "commerce" => (
                mix(0.3, 0.3, 0.1, 0.2, 0.1),
                "Web commerce: 30 % static, 30 % lightly dynamic, 20 % secure, 10 % disk-bound, \
                 10 % secure and disk-bound (Fig. 6c)",
            ),
            _ => return None,
        };
        Some(Scenario {
            name: name.to_string(),
            description: description.to_string(),
            mix,
            ..Scenario::default()
        })
    }

    /// What the paper reports for this scenario (text of §4.3; the figures' curves are not
    /// available as data).
    pub fn paper(name: &str) -> Option<PaperResult> {
        let (figure, finding) = match name {
            "publishing-static" => (
                "Fig. 4a",
                "LARD best: P(page latency < 1 s) very high for LARD, about 0.9 for CAP, 0.8 for WRR",
            ),
            "publishing-dynamic" => (
                "Fig. 4b",
                "CAP and LARD similar, LARD slightly better; CAP and WRR as in 4a, LARD penalised by a lower hit rate",
            ),
            "transaction" => (
                "Fig. 5",
                "90th percentile: CAP < 2 s, WRR about 7 s, LARD about 20 s; StaticPartitioning worse than LARD",
            ),
            "commerce-secure" => (
                "Fig. 6a",
                "every policy deteriorates; CAP still best",
            ),
            "commerce-mixed" => (
                "Fig. 6b",
                "CAP 90th percentile about 2.5 s; P(latency < 2.5 s) about 0.68 for WRR and StaticPartitioning, < 0.4 for LARD",
            ),
            "commerce" => (
                "Fig. 6c",
                "90th percentile: CAP < 5 s, WRR 20 s, LARD > 35 s; P(latency < 5 s): WRR 0.66, LARD 0.72, StaticPartitioning 0.37",
            ),
            _ => return None,
        };
        Some(PaperResult { figure, finding })
    }

    /// Parses a scenario from TOML; a `base = "NAME"` key starts from a named scenario.
    pub fn from_toml(text: &str) -> Result<Scenario, String> {
        let mut value: toml::Table = toml::from_str(text).map_err(|e| one_line(&e.to_string()))?;
        let base = match value.remove("base") {
            None => Scenario::default(),
            Some(toml::Value::String(b)) => {
                Scenario::named(&b).ok_or_else(|| format!("unknown base scenario `{b}`"))?
            }
            Some(_) => return Err("`base` must be a scenario name".into()),
        };
        let mut merged = toml::Table::try_from(&base).map_err(|e| e.to_string())?;
        merge(&mut merged, value);
        let s: Scenario = merged
            .try_into()
            .map_err(|e: toml::de::Error| one_line(&e.to_string()))?;
        s.validate()?;
        Ok(s)
    }

    pub fn validate(&self) -> Result<(), String> {
        let shares = Kind::ALL.map(|k| self.mix.share(k));
        if shares.iter().any(|s| !s.is_finite() || *s < 0.0) || shares.iter().sum::<f64>() <= 0.0 {
            return Err("mix shares must be non-negative and not all zero".into());
        }
        let w = &self.workload;
        let pos = |v: f64| v.is_finite() && v > 0.0;
        if w.pages == 0 || w.max_objects == 0 || w.max_object_bytes == 0 {
            return Err("workload pages, max-objects and max-object-bytes must be positive".into());
        }
        if !(pos(w.pages_mu)
            && pos(w.pages_lambda)
            && pos(w.think_alpha)
            && w.think_k_s.is_finite()
            && w.think_k_s >= 0.0
            && pos(w.objects_alpha)
            && pos(w.size_sigma)
            && pos(w.size_tail_alpha)
            && pos(w.size_tail_k)
            && w.zipf_alpha.is_finite()
            && w.zipf_alpha >= 0.0)
        {
            return Err("workload distribution parameters must be positive numbers".into());
        }
        let c = &self.costs;
        if !(0.0..=1.0).contains(&c.light_dynamic_cachable) {
            return Err("costs light-dynamic-cachable must be a probability".into());
        }
        if !(c.db_disk_ms >= 0.0 && c.db_cpu_ms >= 0.0 && c.light_dynamic_cpu_ms >= 0.0) {
            return Err("costs must be non-negative".into());
        }
        if c.max_processes == 0 {
            return Err("costs max-processes must be at least 1".into());
        }
        let s = &self.switch;
        if !(s.l4_connection_us >= 0.0
            && s.l7_connection_us >= 0.0
            && s.l7_request_us >= 0.0
            && s.gather_interval_s >= 0.0
            && s.gather_interval_s.is_finite())
        {
            return Err("switch costs and gather-interval-s must be non-negative".into());
        }
        self.node.validate().map_err(|e| format!("node: {e}"))
    }
}

fn merge(into: &mut toml::Table, from: toml::Table) {
    for (k, v) in from {
        match (into.get_mut(&k), v) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => merge(a, b),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_scenarios_exist_and_validate() {
        for n in NAMES {
            let s = Scenario::named(n).unwrap();
            s.validate().unwrap();
            assert!(Scenario::paper(n).is_some());
        }
        let c = Scenario::named("commerce").unwrap().mix.class_shares();
        assert!((c[0] - 0.6).abs() < 1e-12 && (c[3] - 0.1).abs() < 1e-12);
    }

    #[test]
    fn toml_overrides_a_base() {
        let s = Scenario::from_toml(
            "base = \"transaction\"\nname = \"t2\"\n[costs]\ndb-disk-ms = 50.0\n[node]\ncores = 2\n",
        )
        .unwrap();
        assert_eq!(s.name, "t2");
        assert_eq!(s.costs.db_disk_ms, 50.0);
        assert_eq!(s.node.cores, 2);
        assert_eq!(s.mix.disk, 0.4);
        assert!(Scenario::from_toml("[costs]\nbogus = 1\n").is_err());
        assert!(Scenario::from_toml("base = \"nope\"").is_err());
    }
}
