//! The requests a run sends: a table of prebuilt request bytes, and per-stream pickers that
//! choose from it with seeded randomness.

use std::collections::HashMap;

use capstan_workload::{stream, DocTree, RecurrenceMix, Weighted, WorkloadRng};

use crate::config::{BenchConfig, Engine, Source, Target};
use crate::error::BenchError;

/// One prebuilt request.
#[derive(Debug, Clone)]
pub struct Request {
    pub bytes: Vec<u8>,
    pub head: bool,
    pub class: u16,
    pub path: String,
    pub method: String,
}

#[derive(Debug, Clone, Default)]
pub struct RequestTable {
    pub requests: Vec<Request>,
    pub classes: Vec<String>,
}

/// Above this many distinct paths, requests are grouped into classes by content type (tree) or
/// extension rather than one class per path.
const MAX_PATH_CLASSES: usize = 64;

impl RequestTable {
    /// Builds the table for `config`: one entry per distinct `(method, path)`.
    pub fn build(config: &BenchConfig) -> Result<RequestTable, BenchError> {
        let mut entries: Vec<(String, String, Option<String>)> = Vec::new(); // method, path, group
        let method = config.method.clone();
        match &config.engine {
            Engine::Replay { log, .. } => {
                let mut seen = HashMap::new();
                for e in &log.entries {
                    seen.entry((e.method.clone(), e.path.clone()))
                        .or_insert_with(|| {
                            entries.push((e.method.clone(), e.path.clone(), None));
                        });
                }
            }
            _ => match &config.source {
                Source::Url => entries.push((method, config.target.path.clone(), None)),
                Source::List(list) => {
                    for u in list {
                        entries.push((method.clone(), list_path(&config.target, u)?, None));
                    }
                }
                Source::FileList(fl) => {
                    for e in &fl.entries {
                        entries.push((method.clone(), e.path.clone(), None));
                    }
                }
                Source::Mix {
                    tree,
                    tree_seed,
                    files,
                    ..
                } => {
                    let t = DocTree::generate(*tree, *tree_seed, *files)
                        .map_err(|e| BenchError::Config(e.to_string()))?;
                    for f in &t.files {
                        let group = f
                            .path
                            .strip_prefix("/poly/")
                            .and_then(|p| p.split('/').next());
                        entries.push((method.clone(), f.path.clone(), group.map(str::to_string)));
                    }
                }
            },
        }
        let by_path = entries.len() <= MAX_PATH_CLASSES;
        let mut table = RequestTable::default();
        let mut class_ids: HashMap<String, u16> = HashMap::new();
        for (method, path, group) in entries {
            let label = if by_path {
                path.split('?').next().unwrap_or(&path).to_string()
            } else {
                group.unwrap_or_else(|| extension_group(&path))
            };
            let next = class_ids.len() as u16;
            let class = *class_ids.entry(label.clone()).or_insert_with(|| {
                table.classes.push(label);
                next
            });
            table.requests.push(Request {
                bytes: encode(config, &method, &path),
                head: method == "HEAD",
                class,
                path,
                method,
            });
        }
        Ok(table)
    }

    /// Index of the request for `(method, path)`, for log replay.
    pub fn index(&self) -> HashMap<(&str, &str), u32> {
        self.requests
            .iter()
            .enumerate()
            .map(|(i, r)| ((r.method.as_str(), r.path.as_str()), i as u32))
            .collect()
    }
}

fn list_path(target: &Target, entry: &str) -> Result<String, BenchError> {
    if entry.starts_with('/') {
        return Ok(entry.to_string());
    }
    let t = Target::parse(entry)?;
    if t.host != target.host || t.port != target.port || t.tls != target.tls {
        return Err(BenchError::Config(format!(
            "URL list entry {entry:?} is not on the target host {}",
            target.authority()
        )));
    }
    Ok(t.path)
}

/// A CGI script's own name (`cpu_light.cgi`: each script puts a different load on a node, so
/// they are worth telling apart), otherwise the file extension (`html`, `gif`, …) or `other`.
/// The class a response time is reported under: a CGI's name, else the file's extension.
pub fn extension_group(path: &str) -> String {
    let p = path.split('?').next().unwrap_or(path);
    let last = p.rsplit('/').next().unwrap_or("");
    if p.contains("/cgi-bin/") || p.ends_with(".cgi") {
        return if last.is_empty() { "cgi" } else { last }.to_string();
    }
    match last.rsplit_once('.') {
        Some((_, ext)) if !ext.is_empty() && ext.len() <= 8 => ext.to_ascii_lowercase(),
        _ => "other".into(),
    }
}

fn encode(config: &BenchConfig, method: &str, path: &str) -> Vec<u8> {
    use std::fmt::Write;
    let mut s = String::with_capacity(128);
    let version = if config.keepalive {
        "HTTP/1.1"
    } else {
        "HTTP/1.0"
    };
    let _ = write!(
        s,
        "{method} {path} {version}\r\nHost: {}\r\n",
        config.target.authority()
    );
    let has = |name: &str| {
        config
            .headers
            .iter()
            .any(|(k, _)| k.eq_ignore_ascii_case(name))
    };
    if !has("user-agent") {
        s.push_str("User-Agent: capstan-bench\r\n");
    }
    for (k, v) in &config.headers {
        let _ = write!(s, "{k}: {v}\r\n");
    }
    let body = config.body.as_deref();
    if let Some(b) = body {
        if !has("content-length") {
            let _ = write!(s, "Content-Length: {}\r\n", b.len());
        }
    } else if matches!(method, "POST" | "PUT" | "PATCH") && !has("content-length") {
        s.push_str("Content-Length: 0\r\n");
    }
    s.push_str("\r\n");
    let mut v = s.into_bytes();
    if let Some(b) = body {
        v.extend_from_slice(b);
    }
    v
}

/// Chooses request indices for one stream (a generator thread of a shard, or a session).
pub enum Picker {
    Single,
    Weighted(Weighted, WorkloadRng),
    Uniform(u32, WorkloadRng),
    Mix(Box<RecurrenceMix>, Option<f64>, WorkloadRng),
}

impl Picker {
    /// The picker for stream `lane` (a distinct seeded stream per lane).
    pub fn new(
        config: &BenchConfig,
        table: &RequestTable,
        lane: u64,
    ) -> Result<Picker, BenchError> {
        let rng = stream(config.seed, &format!("bench-requests-{lane}"));
        Ok(match &config.source {
            _ if table.requests.len() == 1 => Picker::Single,
            Source::FileList(fl) => Picker::Weighted(
                Weighted::new(fl.entries.iter().map(|e| e.weight)).map_err(BenchError::Config)?,
                rng,
            ),
            Source::Mix {
                popularity,
                recurrence,
                ..
            } => {
                let mix = RecurrenceMix::new(
                    table.requests.len(),
                    *popularity,
                    &mut stream(config.seed, "bench-popularity-order"),
                )
                .map_err(BenchError::Config)?;
                Picker::Mix(Box::new(mix), *recurrence, rng)
            }
            _ => Picker::Uniform(table.requests.len() as u32, rng),
        })
    }

    /// The next request; `recurrence` overrides the mix's own ratio (a phase's).
    pub fn next(&mut self, recurrence: Option<f64>) -> u32 {
        match self {
            Picker::Single => 0,
            Picker::Weighted(w, rng) => w.sample(rng) as u32,
            Picker::Uniform(n, rng) => {
                (capstan_workload::dist::uniform01(rng) * *n as f64) as u32 % *n
            }
            Picker::Mix(m, r, rng) => m.sample(rng, recurrence.or(*r)) as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_workload::{Popularity, TreeKind};

    fn cfg() -> BenchConfig {
        BenchConfig::open(Target::parse("http://127.0.0.1:9/x").unwrap(), 10.0)
    }

    #[test]
    fn encodes_requests() {
        let mut c = cfg();
        c.method = "POST".into();
        c.body = Some(b"hello".to_vec());
        c.headers.push(("X-A".into(), "1".into()));
        let t = RequestTable::build(&c).unwrap();
        let s = String::from_utf8(t.requests[0].bytes.clone()).unwrap();
        assert_eq!(
            s,
            "POST /x HTTP/1.0\r\nHost: 127.0.0.1:9\r\nUser-Agent: capstan-bench\r\nX-A: 1\r\nContent-Length: 5\r\n\r\nhello"
        );
    }

    #[test]
    fn same_seed_same_sequence() {
        let mut c = cfg();
        c.source = Source::Mix {
            tree: TreeKind::Polygraph,
            tree_seed: 1,
            files: Some(500),
            popularity: Popularity::Zipf { alpha: 1.0 },
            recurrence: Some(0.5),
        };
        let t = RequestTable::build(&c).unwrap();
        assert_eq!(t.requests.len(), 500);
        assert!(t.classes.iter().any(|c| c == "img"), "{:?}", t.classes);
        let seq = |seed: u64| {
            let mut c = c.clone();
            c.seed = seed;
            let mut p = Picker::new(&c, &t, 0).unwrap();
            (0..200).map(|_| p.next(None)).collect::<Vec<_>>()
        };
        assert_eq!(seq(7), seq(7));
        assert_ne!(seq(7), seq(8));
    }

    #[test]
    fn large_lists_group_by_extension_and_cgi_scripts_by_name() {
        assert_eq!(extension_group("/dir/file5k.html"), "html");
        assert_eq!(extension_group("/a/B.GIF"), "gif");
        assert_eq!(extension_group("/cgi-bin/cpu_light.cgi"), "cpu_light.cgi");
        assert_eq!(
            extension_group("/cgi-bin/disk_load.cgi?file=/file5k.html"),
            "disk_load.cgi"
        );
        assert_eq!(extension_group("/cgi-bin/"), "cgi");
        assert_eq!(extension_group("/no-extension"), "other");
    }
}
