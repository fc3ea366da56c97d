//! What the router emulates: paths, each for a group of client addresses, each direction with
//! its own parameters. Read from a TOML file or from `key=value,…` path specs on the command
//! line; both go through [`PathSpec::set`], so they accept the same keys and report the same
//! errors.
//!
//! ```toml
//! [[path]]
//! name = "modem"
//! clients = 2            # client addresses in this group
//! rtt = "150ms"          # latency = rtt / 2 each way (or: delay = "75ms", one way)
//! bandwidth = "56kbit"
//! queue = "20p"          # or "64KB"; default 1000 packets
//! loss = "1%"            # or "ge:1%,30%" (Gilbert-Elliott)
//! jitter = "5ms"         # reorder = true lets jitter reorder a flow
//! [path.up]              # client → server overrides
//! bandwidth = "33.6kbit"
//! ```

use crate::link::LinkParams;
use crate::loss::LossModel;
use crate::units::{parse_duration, parse_queue, parse_rate};

/// Direction of travel through the router.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dir {
    /// Client → server.
    Up,
    /// Server → client.
    Down,
}

impl Dir {
    pub const BOTH: [Dir; 2] = [Dir::Up, Dir::Down];
}

/// One emulated path, for a group of client addresses.
#[derive(Clone, Debug, PartialEq)]
pub struct PathConfig {
    pub name: String,
    /// How many client addresses the group has.
    pub clients: u32,
    pub up: LinkParams,
    pub down: LinkParams,
}

impl PathConfig {
    pub fn link(&self, dir: Dir) -> &LinkParams {
        match dir {
            Dir::Up => &self.up,
            Dir::Down => &self.down,
        }
    }
}

/// A whole emulation: its paths and the random seed for loss and jitter.
#[derive(Clone, Debug, PartialEq)]
pub struct WanConfig {
    /// Set-up name (for `capstan wan up`); None for a `run`.
    pub name: Option<String>,
    pub paths: Vec<PathConfig>,
    pub seed: u64,
}

/// Most client addresses one set-up hands out (one /24, less the server's).
pub const MAX_CLIENTS: u32 = 250;

impl WanConfig {
    /// Checks what single paths cannot: unique names, at least one path, address budget.
    pub fn validate(&self) -> Result<(), String> {
        if self.paths.is_empty() {
            return Err("no paths configured".into());
        }
        for (i, p) in self.paths.iter().enumerate() {
            if self.paths[..i].iter().any(|q| q.name == p.name) {
                return Err(format!("two paths are named '{}'", p.name));
            }
        }
        let clients: u32 = self.paths.iter().map(|p| p.clients).sum();
        if clients > MAX_CLIENTS {
            return Err(format!(
                "{clients} client addresses asked for; at most {MAX_CLIENTS}"
            ));
        }
        if let Some(name) = &self.name {
            check_name(name, "set-up")?;
        }
        Ok(())
    }

    /// Reads a TOML file's text (`name`, `seed`, `[[path]]` tables).
    pub fn from_toml(text: &str) -> Result<WanConfig, String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| {
            let message = e.message().trim().replace('\n', "; ");
            match e.span() {
                Some(span) => format!("line {}: {message}", line_of(text, span.start)),
                None => message,
            }
        })?;
        let mut config = WanConfig {
            name: None,
            paths: Vec::new(),
            seed: 1,
        };
        for (key, value) in &table {
            match (key.as_str(), value) {
                ("name", toml::Value::String(s)) => config.name = Some(s.clone()),
                ("seed", toml::Value::Integer(n)) if *n >= 0 => config.seed = *n as u64,
                ("path", toml::Value::Array(paths)) => {
                    for (i, p) in paths.iter().enumerate() {
                        let spec = PathSpec::from_toml(p, i)?;
                        config.paths.push(spec.build(i)?);
                    }
                }
                ("name" | "seed" | "path", _) => return Err(format!("'{key}' has the wrong type")),
                _ => return Err(format!("unknown key '{key}' (name, seed, [[path]])")),
            }
        }
        config.validate()?;
        Ok(config)
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

fn check_name(name: &str, what: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bad {what} name '{name}' (letters, digits, - and _, up to 32)"
        ))
    }
}

/// Settings for one path as given, before defaults and direction overrides are applied.
#[derive(Clone, Debug, Default)]
pub struct PathSpec {
    name: Option<String>,
    clients: Option<u32>,
    /// (direction or both, key, value), in the order given.
    settings: Vec<(Option<Dir>, String, String)>,
}

/// Keys that describe a direction's link.
const LINK_KEYS: &str = "rtt, delay, bandwidth, queue, loss, jitter, reorder";

impl PathSpec {
    /// Parses `name=modem,clients=2,rtt=100ms,up.bandwidth=1mbit` (the `--path` flag).
    pub fn parse(text: &str) -> Result<PathSpec, String> {
        let mut spec = PathSpec::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("bad path setting '{item}' (want key=value)"))?;
            spec.set(key.trim(), value.trim())?;
        }
        Ok(spec)
    }

    /// True when nothing was set.
    pub fn is_empty(&self) -> bool {
        self.name.is_none() && self.clients.is_none() && self.settings.is_empty()
    }

    /// These settings as defaults, overridden by `other`'s.
    pub fn then(mut self, other: PathSpec) -> PathSpec {
        self.name = other.name.or(self.name);
        self.clients = other.clients.or(self.clients);
        self.settings.extend(other.settings);
        self
    }

    fn from_toml(value: &toml::Value, index: usize) -> Result<PathSpec, String> {
        let table = value
            .as_table()
            .ok_or_else(|| format!("path {} is not a table", index + 1))?;
        let mut spec = PathSpec::default();
        for (key, value) in table {
            match value {
                toml::Value::Table(sub) if key == "up" || key == "down" => {
                    for (k, v) in sub {
                        spec.set(&format!("{key}.{k}"), &scalar(v)?)?;
                    }
                }
                v => spec.set(key, &scalar(v)?)?,
            }
        }
        Ok(spec)
    }

    /// Records one setting; `up.`/`down.` prefixes limit it to one direction.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        let (dir, bare) = match key.split_once('.') {
            Some(("up", k)) => (Some(Dir::Up), k),
            Some(("down", k)) => (Some(Dir::Down), k),
            _ => (None, key),
        };
        match (dir, bare) {
            (None, "name") => {
                check_name(value, "path")?;
                self.name = Some(value.to_string());
            }
            (None, "clients") => {
                let n = value
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=MAX_CLIENTS).contains(n))
                    .ok_or_else(|| format!("bad clients '{value}' (1 to {MAX_CLIENTS})"))?;
                self.clients = Some(n);
            }
            (Some(_), "rtt") => {
                return Err(format!(
                    "'{key}': rtt covers both directions; use {}.delay",
                    key.split('.').next().unwrap_or("up")
                ))
            }
            (
                _,
                "rtt" | "delay" | "latency" | "bandwidth" | "queue" | "loss" | "jitter" | "reorder",
            ) => {
                // Check now, so the error names the setting as written.
                apply(&mut LinkParams::default(), bare, value)?;
                self.settings
                    .push((dir, bare.to_string(), value.to_string()));
            }
            _ => {
                return Err(format!(
                    "unknown path setting '{key}' (name, clients, {LINK_KEYS})"
                ))
            }
        }
        Ok(())
    }

    /// Applies the settings for both directions first, then each direction's own.
    pub fn build(&self, index: usize) -> Result<PathConfig, String> {
        let mut up = LinkParams::default();
        let mut down = LinkParams::default();
        for pass in [None, Some(Dir::Up), Some(Dir::Down)] {
            for (dir, key, value) in self.settings.iter().filter(|s| s.0 == pass) {
                if *dir != Some(Dir::Down) {
                    apply(&mut up, key, value)?;
                }
                if *dir != Some(Dir::Up) {
                    apply(&mut down, key, value)?;
                }
            }
        }
        Ok(PathConfig {
            name: self
                .name
                .clone()
                .unwrap_or_else(|| format!("path{}", index + 1)),
            clients: self.clients.unwrap_or(1),
            up,
            down,
        })
    }
}

/// Renders a TOML scalar as the text the flag form would carry.
fn scalar(v: &toml::Value) -> Result<String, String> {
    match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(format!("unexpected {} in a path", other.type_str())),
    }
}

/// Sets one key of a direction's parameters.
fn apply(link: &mut LinkParams, key: &str, value: &str) -> Result<(), String> {
    match key {
        "rtt" => link.latency = parse_duration(value)? / 2,
        "delay" | "latency" => link.latency = parse_duration(value)?,
        "bandwidth" => link.bandwidth = parse_rate(value)?,
        "queue" => link.queue = parse_queue(value)?,
        "loss" => link.loss = LossModel::parse(value)?,
        "jitter" => link.jitter = parse_duration(value)?,
        "reorder" => {
            link.reorder = value
                .parse()
                .map_err(|_| format!("bad reorder '{value}' (true or false)"))?
        }
        _ => return Err(format!("unknown path setting '{key}'")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::QueueLimit;
    use std::time::Duration;

    #[test]
    fn flag_spec_sets_both_directions_then_overrides() {
        let p = PathSpec::parse("up.bandwidth=1mbit,name=dsl,rtt=40ms,bandwidth=8mbit,clients=3")
            .unwrap()
            .build(0)
            .unwrap();
        assert_eq!(p.name, "dsl");
        assert_eq!(p.clients, 3);
        assert_eq!(p.up.latency, Duration::from_millis(20));
        assert_eq!(p.down.latency, Duration::from_millis(20));
        assert_eq!(p.up.bandwidth, Some(1_000_000));
        assert_eq!(p.down.bandwidth, Some(8_000_000));
    }

    #[test]
    fn toml_file_with_two_paths() {
        let c = WanConfig::from_toml(
            r#"
            name = "lab"
            seed = 7
            [[path]]
            name = "lan"
            rtt = "1ms"
            [[path]]
            name = "modem"
            clients = 2
            delay = "75ms"
            bandwidth = "56kbit"
            queue = "20p"
            loss = "ge:1%,30%"
            [path.down]
            bandwidth = "33.6kbit"
            jitter = "2ms"
            "#,
        )
        .unwrap();
        assert_eq!(c.name.as_deref(), Some("lab"));
        assert_eq!(c.seed, 7);
        assert_eq!(c.paths.len(), 2);
        let modem = &c.paths[1];
        assert_eq!(modem.up.bandwidth, Some(56_000));
        assert_eq!(modem.down.bandwidth, Some(33_600));
        assert_eq!(modem.down.jitter, Duration::from_millis(2));
        assert_eq!(modem.up.jitter, Duration::ZERO);
        assert_eq!(modem.up.queue, QueueLimit::Packets(20));
        assert!(matches!(modem.up.loss, LossModel::GilbertElliott { .. }));
    }

    #[test]
    fn the_example_file_is_valid() {
        let c = WanConfig::from_toml(include_str!("../../../examples/wan.toml")).unwrap();
        let names: Vec<&str> = c.paths.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["lan", "modem", "backbone", "wireless"]);
        assert_eq!(c.paths[1].up.bandwidth, Some(33_600));
    }

    #[test]
    fn errors_are_one_line_and_name_the_problem() {
        let cases = [
            ("[[path]]\nbandwidth = \"fast\"", "bad rate 'fast'"),
            (
                "[[path]]\nspeed = \"1mbit\"",
                "unknown path setting 'speed'",
            ),
            ("colour = 1", "unknown key 'colour'"),
            (
                "[[path]]\nname = \"a\"\n[[path]]\nname = \"a\"",
                "two paths are named 'a'",
            ),
            ("", "no paths configured"),
            (
                "[[path]]\n[path.up]\nrtt = \"10ms\"",
                "rtt covers both directions",
            ),
            ("[[path\n", "line 1"),
        ];
        for (text, want) in cases {
            let err = WanConfig::from_toml(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
