//! Policies by name with parameters, as the command line writes them: `lard`,
//! `lard:t_low=10,t_high=30`, `weighted-round-robin:metric=service-time,gather=2`.
//!
//! Parameters the core policy knows go to `core`'s `PolicySpec` unchanged (so a name or
//! parameter the switch accepts, the simulator accepts). One parameter is the simulator's:
//! `gather` (T_gat in seconds for this policy, overriding the scenario's; 0 = live state). Where
//! the paper is the reference the simulator changes one default: `weighted-round-robin` without
//! a `metric` is the CAP paper's WRR_num (`metric=active`), not the switch's static weights. The
//! weights themselves are derived by `core`'s gatherer, as in the switch.

use capstan_core::{PolicySpec, RequestInfo};

/// How WRR's weights are derived from gathered server state (`core`'s `metric`).
pub use capstan_core::policy::WrrMetric as Metric;

/// A policy as chosen for a run.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyChoice {
    /// The text it was given as (the report's label).
    pub label: String,
    pub spec: PolicySpec,
    pub metric: Metric,
    pub gather_s: Option<f64>,
    /// False when the spec names a seed: then every replication uses it.
    pub seed_given: bool,
}

impl PolicyChoice {
    pub fn parse(text: &str) -> Result<PolicyChoice, String> {
        let text = text.trim();
        let (name, params) = match text.split_once(':') {
            Some((n, p)) => (n.trim(), p),
            None => (text, ""),
        };
        if capstan_core::policy::lookup(name).is_none() {
            return Err(format!(
                "unknown policy `{name}` (known: {})",
                PolicySpec::names().join(", ")
            ));
        }
        let mut table = toml::Table::new();
        table.insert("name".into(), toml::Value::String(name.into()));
        let mut metric = if name == "weighted-round-robin" {
            Metric::Active
        } else {
            Metric::Static
        };
        let mut gather_s = None;
        let mut seed_given = false;
        for kv in params.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("policy `{name}`: parameter `{kv}` is not KEY=VALUE"))?;
            let (k, v) = (k.trim().replace('-', "_"), v.trim());
            match k.as_str() {
                "gather" => {
                    let g: f64 = v
                        .trim_end_matches('s')
                        .parse()
                        .ok()
                        .filter(|g: &f64| g.is_finite() && *g >= 0.0)
                        .ok_or_else(|| {
                            format!("policy `{name}`: gather must be seconds ≥ 0, got `{v}`")
                        })?;
                    gather_s = Some(g);
                }
                "metric" if name == "weighted-round-robin" => {
                    metric = parse_metric(v)
                        .ok_or_else(|| format!("policy `{name}`: {METRIC_ERROR}, got `{v}`"))?;
                    table.insert(k, toml::Value::String(metric_name(metric).into()));
                }
                _ => {
                    if k == "seed" {
                        seed_given = true;
                    }
                    table.insert(k, parse_value(v));
                }
            }
        }
        if name == "weighted-round-robin" && !table.contains_key("metric") {
            table.insert(
                "metric".into(),
                toml::Value::String(metric_name(metric).into()),
            );
        }
        let spec: PolicySpec =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    format!("policy `{name}`: {}", e.message().replace('\n', " "))
                })?;
        Ok(PolicyChoice {
            label: text.to_string(),
            spec,
            metric,
            gather_s,
            seed_given,
        })
    }

    /// The spec for one replication: random policies get a seed derived from the run's unless
    /// one was given.
    pub fn spec_for_seed(&self, seed: u64) -> PolicySpec {
        // TOML integers are signed: the derived seed keeps 63 bits.
        let derived = capstan_workload::rng::splitmix64(seed ^ 0x706f_6c69_6379) >> 1;
        if self.spec.registration().seeded && !self.seed_given {
            let seed = toml::Value::Integer(derived as i64);
            if let Ok(spec) = self.spec.with_param("seed", seed) {
                return spec;
            }
        }
        self.spec.clone()
    }
}

const METRIC_ERROR: &str = "metric must be active, service-time or static";

fn metric_name(m: Metric) -> &'static str {
    match m {
        Metric::Static => "static",
        Metric::Active => "active",
        Metric::ServiceTime => "service-time",
    }
}

fn parse_metric(v: &str) -> Option<Metric> {
    match v {
        "active" | "num" => Some(Metric::Active),
        "service-time" | "service_time" | "time" => Some(Metric::ServiceTime),
        "static" => Some(Metric::Static),
        _ => None,
    }
}

fn parse_value(v: &str) -> toml::Value {
    if let Ok(i) = v.parse::<i64>() {
        toml::Value::Integer(i)
    } else if let Ok(f) = v.parse::<f64>() {
        toml::Value::Float(f)
    } else if let Ok(b) = v.parse::<bool>() {
        toml::Value::Boolean(b)
    } else {
        toml::Value::String(v.to_string())
    }
}

/// A request as the policy sees it.
pub fn request<'a>(class: usize, key: &'a str, key_hash: u64) -> RequestInfo<'a> {
    RequestInfo {
        class,
        key,
        key_hash,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_and_parameters() {
        let p = PolicyChoice::parse("lard:t_low=10,t_high=30").unwrap();
        assert_eq!(p.spec.name(), "lard");
        assert_eq!(p.spec.param("t_low"), Some(&toml::Value::Integer(10)));
        assert_eq!(p.spec.param("t_high"), Some(&toml::Value::Integer(30)));
        let w = PolicyChoice::parse("weighted-round-robin:metric=service-time,gather=2").unwrap();
        assert_eq!(w.metric, Metric::ServiceTime);
        assert_eq!(w.gather_s, Some(2.0));
        assert_eq!(
            PolicyChoice::parse("weighted-round-robin").unwrap().metric,
            Metric::Active
        );
        assert!(PolicyChoice::parse("cap-load:max_load=0.8").is_ok());
        assert!(PolicyChoice::parse("nope")
            .unwrap_err()
            .contains("unknown policy"));
        assert!(PolicyChoice::parse("cap:max_load=1").is_err());
        assert!(PolicyChoice::parse("lard:t_low").is_err());
        for name in PolicySpec::names() {
            PolicyChoice::parse(name).unwrap();
        }
    }
}
