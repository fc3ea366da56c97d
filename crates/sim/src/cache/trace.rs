//! Request traces for the eviction study: a dense object table (size, cachable) and the sequence
//! of object indexes requested, read from a Common Log Format file or generated from a seed.
//!
//! Objects are renumbered 0, 1, 2, … so the replay can keep per-object state in plain vectors
//! (no hashing on the hot path besides the policy's own id map, which the switch has too).

use std::collections::HashMap;

use capstan_workload::tree::CAP_SIZE;
use capstan_workload::{parse_clf, stream, DocTree, Popularity, RecurrenceMix, TreeKind};
use serde::Serialize;

/// Largest trace the replay accepts: positions are `u32`, and `u32::MAX` means "never again".
pub const MAX_REQUESTS: usize = u32::MAX as usize - 1;
/// Largest generated object count (object indexes are `u32` too).
pub const MAX_OBJECTS: u64 = 100_000_000;
/// Generated sizes are clamped here: the CAP law's Pareto tail has no finite variance.
const MAX_OBJECT_BYTES: f64 = (1u64 << 30) as f64;

/// A trace ready to replay.
#[derive(Debug, Clone)]
pub struct Trace {
    /// The object index of each request, in order.
    pub requests: Vec<u32>,
    /// Size in bytes of each object (≥ 1).
    pub sizes: Vec<u64>,
    /// False for objects no cache may keep (Polygraph's uncachable share): always a miss.
    pub cachable: Vec<bool>,
    pub info: TraceInfo,
}

/// What the trace is, as written in the JSON and the report.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TraceInfo {
    /// `"clf"` or `"generated"`.
    pub source: String,
    /// One line: the file, or the generator and its parameters.
    pub description: String,
    pub requests: u64,
    /// Distinct objects requested.
    pub objects: u64,
    /// Bytes of the distinct cachable objects requested: cache sizes are fractions of this.
    pub working_set_bytes: u64,
    /// Sum of the sizes of all requests (the denominator of the byte hit ratio).
    pub requested_bytes: u64,
    /// Requests for uncachable objects (always misses, counted in both ratios' denominators).
    pub uncachable_requests: u64,
    /// Log lines read (CLF only; blank lines not counted).
    pub lines: u64,
    /// Lines that are not Common Log Format (CLF only).
    pub bad_lines: u64,
    /// Well-formed lines that carry no cachable request: not `GET`, a `"-"` request, or a path
    /// whose every response had zero bytes (CLF only).
    pub skipped_lines: u64,
    /// The first bad line's number and the parser's complaint, to find the problem quickly.
    pub first_bad_line: Option<String>,
}

/// How generated objects get their sizes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ObjectSizes {
    /// Every object 1 byte: DHR = BHR, and Belady is the exact optimum.
    Unit,
    /// Every object this many bytes.
    Const(u64),
    /// The CAP paper's Table 1 law: lognormal body (μ 7.640, σ 1.705) with a Pareto tail
    /// (α 1.383, k 2924 B), spliced as SURGE does; clamped to [1 B, 1 GiB].
    Cap,
    /// Web Polygraph's content mix as in the Bakhtiyari thesis (image exp(4.5 KB) 65 %, HTML
    /// exp(8.5 KB) 15 %, download logn(300 KB, 300 KB) 0.5 %, other logn(25 KB, 10 KB)), with its
    /// per-type cachable shares (80 %, 90 %, 95 %, 72 %): uncachable objects are always misses.
    Polygraph,
}

impl ObjectSizes {
    pub const HELP: &'static str = "unit, const:BYTES, cap or polygraph";

    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        match s.to_ascii_lowercase().as_str() {
            "unit" => Ok(ObjectSizes::Unit),
            "cap" => Ok(ObjectSizes::Cap),
            "polygraph" => Ok(ObjectSizes::Polygraph),
            other => match other.strip_prefix("const:").map(str::parse::<u64>) {
                Some(Ok(n)) if n > 0 => Ok(ObjectSizes::Const(n)),
                _ => Err(format!(
                    "unknown object size law {s:?} (expected {})",
                    Self::HELP
                )),
            },
        }
    }

    pub fn name(&self) -> String {
        match self {
            ObjectSizes::Unit => "unit".into(),
            ObjectSizes::Const(n) => format!("const:{n}"),
            ObjectSizes::Cap => "cap".into(),
            ObjectSizes::Polygraph => "polygraph".into(),
        }
    }
}

/// Parameters of a generated trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Generated {
    /// Zipf exponent (0 = uniform popularity).
    pub alpha: f64,
    pub objects: u64,
    pub requests: u64,
    pub seed: u64,
    pub sizes: ObjectSizes,
    /// Polygraph's recurrence ratio: the share of requests that revisit an object already
    /// requested (popularity applied over those); the rest ask for a new object. `None`: every
    /// request draws from all objects by popularity.
    pub recurrence: Option<f64>,
}

impl Generated {
    fn validate(&self) -> Result<(), String> {
        Popularity::Zipf { alpha: self.alpha }.validate()?;
        if self.objects == 0 || self.objects > MAX_OBJECTS {
            return Err(format!("--objects must be between 1 and {MAX_OBJECTS}"));
        }
        if self.requests == 0 || self.requests > MAX_REQUESTS as u64 {
            return Err(format!("--requests must be between 1 and {MAX_REQUESTS}"));
        }
        if let Some(r) = self.recurrence {
            if !(0.0..=1.0).contains(&r) {
                return Err(format!("--recurrence must be in [0, 1], got {r}"));
            }
        }
        if self.sizes == ObjectSizes::Polygraph && self.objects > DocTree::MAX_FILES as u64 {
            return Err(format!(
                "--object-sizes polygraph allows at most {} objects",
                DocTree::MAX_FILES
            ));
        }
        Ok(())
    }

    fn description(&self) -> String {
        let mut d = format!(
            "zipf({}) over {} objects, {} requests, seed {}, object sizes {}",
            self.alpha,
            self.objects,
            self.requests,
            self.seed,
            self.sizes.name()
        );
        if let Some(r) = self.recurrence {
            d.push_str(&format!(", recurrence {r}"));
        }
        d
    }
}

/// A generated trace: object sizes from the stream `(seed, "simcache-sizes")`, requests from
/// `(seed, "simcache-requests")`, so changing the request count keeps the objects.
pub fn generate(g: &Generated) -> Result<Trace, String> {
    g.validate()?;
    let n = g.objects as usize;
    let (sizes, cachable) = object_table(g.sizes, n, g.seed)?;
    let popularity = Popularity::Zipf { alpha: g.alpha };
    let mut rng = stream(g.seed, "simcache-requests");
    let mut requests = Vec::with_capacity(g.requests as usize);
    match g.recurrence {
        None => {
            for _ in 0..g.requests {
                requests.push((popularity.sample_rank(g.objects, &mut rng) - 1) as u32);
            }
        }
        Some(r) => {
            let mut mix = RecurrenceMix::new(n, popularity, &mut stream(g.seed, "simcache-order"))?;
            for _ in 0..g.requests {
                requests.push(mix.sample(&mut rng, Some(r)) as u32);
            }
        }
    }
    Ok(finish(
        requests,
        sizes,
        cachable,
        TraceInfo {
            source: "generated".into(),
            description: g.description(),
            ..TraceInfo::default()
        },
    ))
}

fn object_table(law: ObjectSizes, n: usize, seed: u64) -> Result<(Vec<u64>, Vec<bool>), String> {
    let clamp = |x: f64| x.round().clamp(1.0, MAX_OBJECT_BYTES) as u64;
    let sizes = match law {
        ObjectSizes::Unit => vec![1; n],
        ObjectSizes::Const(b) => vec![b; n],
        ObjectSizes::Cap => {
            let mut rng = stream(seed, "simcache-sizes");
            (0..n).map(|_| clamp(CAP_SIZE.sample(&mut rng))).collect()
        }
        ObjectSizes::Polygraph => {
            let tree =
                DocTree::generate(TreeKind::Polygraph, seed, Some(n)).map_err(|e| e.to_string())?;
            let sizes = tree.files.iter().map(|f| f.size.max(1)).collect();
            let cachable = tree.files.iter().map(|f| f.cachable).collect();
            return Ok((sizes, cachable));
        }
    };
    Ok((sizes, vec![true; n]))
}

/// Reads a Common Log Format (or Combined) log: one request per line, the object is the path
/// (query included), its size the largest response byte count seen for it. Only `GET` requests
/// are replayed. Lines that do not parse are counted, never fatal; a log with no usable request
/// is an error.
pub fn from_clf(text: &str, name: &str) -> Result<Trace, String> {
    let mut info = TraceInfo {
        source: "clf".into(),
        description: format!("Common Log Format file {name}"),
        ..TraceInfo::default()
    };
    let mut index: HashMap<String, u32> = HashMap::new();
    let mut sizes: Vec<u64> = Vec::new();
    let mut requests: Vec<u32> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        info.lines += 1;
        // `parse_clf` stops at the first bad line, so each line is parsed on its own; a lone
        // `"-"` request parses to an empty log, which it reports as an error on line 0.
        let entry = match parse_clf(line) {
            Ok(mut log) => log.entries.pop(),
            Err(e) if e.line == 0 => None,
            Err(e) => {
                info.bad_lines += 1;
                if info.first_bad_line.is_none() {
                    info.first_bad_line = Some(format!("line {}: {}", i + 1, e.message));
                }
                continue;
            }
        };
        let Some(entry) = entry.filter(|e| e.method == "GET") else {
            info.skipped_lines += 1;
            continue;
        };
        let next = index.len() as u32;
        let id = *index.entry(entry.path).or_insert(next);
        if id == next {
            sizes.push(0);
        }
        sizes[id as usize] = sizes[id as usize].max(entry.bytes);
        requests.push(id);
        if requests.len() > MAX_REQUESTS {
            return Err(format!("{name}: more than {MAX_REQUESTS} requests"));
        }
    }
    // A path that only ever answered with no body (304s, errors) has nothing to cache.
    let before = requests.len();
    requests.retain(|&id| sizes[id as usize] > 0);
    info.skipped_lines += (before - requests.len()) as u64;
    if info.lines == 0 {
        return Err(format!(
            "{name} is empty (expected a Common Log Format access log)"
        ));
    }
    if requests.is_empty() {
        return Err(format!(
            "{name}: no GET request with a response size in {} line(s) ({} not Common Log Format{})",
            info.lines,
            info.bad_lines,
            info.first_bad_line
                .as_deref()
                .map(|l| format!(", first: {l}"))
                .unwrap_or_default()
        ));
    }
    let n = sizes.len();
    Ok(finish(requests, sizes, vec![true; n], info))
}

/// Fills in the counts every trace reports.
fn finish(requests: Vec<u32>, sizes: Vec<u64>, cachable: Vec<bool>, mut info: TraceInfo) -> Trace {
    let mut seen = vec![false; sizes.len()];
    for &r in &requests {
        let o = r as usize;
        info.requested_bytes += sizes[o];
        if !cachable[o] {
            info.uncachable_requests += 1;
        }
        if !seen[o] {
            seen[o] = true;
            info.objects += 1;
            if cachable[o] {
                info.working_set_bytes += sizes[o];
            }
        }
    }
    info.requests = requests.len() as u64;
    Trace {
        requests,
        sizes,
        cachable,
        info,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clf_lines_good_bad_and_skipped() {
        let text = "\
1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"GET /a.gif HTTP/1.0\" 200 100
1.2.3.4 - - [10/Oct/2000:13:55:37 -0700] \"GET /b.html HTTP/1.0\" 200 40 \"ref\" \"ua\"
this is not a log line

1.2.3.4 - - [10/Oct/2000:13:55:38 -0700] \"GET /a.gif HTTP/1.0\" 304 -
1.2.3.4 - - [10/Oct/2000:13:55:39 -0700] \"POST /form HTTP/1.0\" 200 10
1.2.3.4 - - [10/Oct/2000:13:55:40 -0700] \"-\" 408 0
1.2.3.4 - - [99/Oct/2000:13:55:41 -0700] \"GET /a.gif HTTP/1.0\" 200 100
1.2.3.4 - - [10/Oct/2000:13:55:42 -0700] \"GET /empty HTTP/1.0\" 404 0
1.2.3.4 - - [10/Oct/2000:13:55:43 -0700] \"GET /b.html HTTP/1.0\" 200 60
";
        let t = from_clf(text, "t.log").unwrap();
        // Kept: /a.gif, /b.html, /a.gif (304, size from the 200), /b.html.
        assert_eq!(t.requests, vec![0, 1, 0, 1]);
        assert_eq!(t.sizes[0], 100);
        assert_eq!(t.sizes[1], 60, "largest byte count seen for the path");
        let i = &t.info;
        assert_eq!((i.lines, i.bad_lines, i.skipped_lines), (9, 2, 3));
        assert!(i.first_bad_line.as_deref().unwrap().starts_with("line 3:"));
        assert_eq!(
            (i.objects, i.working_set_bytes, i.requested_bytes),
            (2, 160, 320)
        );
    }

    #[test]
    fn clf_without_requests_is_an_error() {
        let e = from_clf("garbage\nmore garbage\n", "x.log").unwrap_err();
        assert!(
            e.contains("2 line(s)") && e.contains("first: line 1"),
            "{e}"
        );
        assert!(from_clf("\n\n", "e.log")
            .unwrap_err()
            .contains("e.log is empty"));
    }

    #[test]
    fn generated_traces_are_seeded() {
        let g = Generated {
            alpha: 0.8,
            objects: 1000,
            requests: 5000,
            seed: 3,
            sizes: ObjectSizes::Cap,
            recurrence: None,
        };
        let a = generate(&g).unwrap();
        let b = generate(&g).unwrap();
        assert_eq!((&a.requests, &a.sizes), (&b.requests, &b.sizes));
        let c = generate(&Generated {
            seed: 4,
            ..g.clone()
        })
        .unwrap();
        assert_ne!(a.requests, c.requests);
        assert!(a.sizes.iter().all(|&s| s >= 1));
        // Zipf: object 0 is the most requested.
        let count = |o: u32| a.requests.iter().filter(|&&r| r == o).count();
        assert!(count(0) > count(10) && count(0) > count(500));
        let p = generate(&Generated {
            sizes: ObjectSizes::Polygraph,
            recurrence: Some(0.55),
            ..g
        })
        .unwrap();
        assert!(p.info.uncachable_requests > 0 && p.cachable.iter().any(|&c| c));
        assert!(ObjectSizes::parse("const:0").is_err() && ObjectSizes::parse("big").is_err());
        assert_eq!(ObjectSizes::parse("const:512"), Ok(ObjectSizes::Const(512)));
    }
}
