//! Web Polygraph workloads as the Bakhtiyari thesis ran them (§3.3, §3.8–3.9, Tables 3.3–3.5,
//! 4.1–4.6): robots with a request rate (or best effort), content types with shares, size laws
//! and cachability, a working set that grows and then freezes, a recurrence ratio per phase, and
//! phases whose rate follows a profile (a share of the peak, constant or a ramp) until a goal —
//! a duration, a number of requests or a volume of bytes filled ("2 × cache size").
//!
//! Pure: [`Generator::next`] takes the time as an argument and returns the next request with
//! what an infinite cache would have done with it (the *offered* hit), so a load generator, the
//! simulator or a test can drive it alike.
//!
//! Objects are numbered in the order they are first requested; everything about object `k`
//! (content type, size, cachability, life cycle) is drawn from a stream seeded by `(seed, k)`,
//! and its URL carries type, size and cachability (`/pg/w7/img/123_4581_c.gif`), so any origin
//! that understands [`PolyObject::parse_path`] — `capstan origin` does — answers with the right
//! body length and `Cache-Control`, and so does a proxy in front of it.

use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::dist::{open01, uniform01, Dist};
use crate::rng::{fnv1a, splitmix64, stream};
use crate::tree::{LifeCycle, MAX_FILE_BYTES};
use crate::zipf::Popularity;

const KB: f64 = 1024.0;
const DAY: f64 = 86_400.0;
const YEAR: f64 = 365.0 * DAY;

/// One content type of the server's `contents` list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContentType {
    /// Short name, also the URL's directory (`img`, `html`, `dl`, `other`).
    pub name: String,
    /// Share of the objects (fractions of 1; normalised over the list).
    pub share: f64,
    /// Body size in bytes.
    pub size: Dist,
    /// Fraction of the objects that may be cached.
    pub cachable: f64,
    /// Object life cycle length in seconds (Polygraph's `obj_life_cycle.length`).
    pub life: Dist,
    /// File extension, with the dot.
    pub ext: String,
}

impl ContentType {
    /// The media type the origin sends for this type's extension.
    pub fn mime(ext: &str) -> &'static str {
        match ext {
            ".gif" => "image/gif",
            ".jpeg" | ".jpg" => "image/jpeg",
            ".png" => "image/png",
            ".html" | ".htm" => "text/html",
            ".zip" => "application/zip",
            ".gz" => "application/gzip",
            _ => "application/octet-stream",
        }
    }
}

/// The thesis's content types (§3.8.4 and Appendix 6.2 `contents.pg`): `contents = [cntImage:
/// 65%, cntHTML: 15%, cntDownload: 0.5%, cntOther]` (§3.8.6), so Other takes the remaining
/// 19.5 %. Image size is §3.8.4's `exp(4.5KB)` (the appendix's include file says `exp(9KB)`;
/// Table 4.1's generated mean of 4,612.66 bytes matches 4.5 KB). Other is the appendix's
/// `logn(25KB, 10KB)`, 72 % cachable.
pub fn thesis_contents() -> Vec<ContentType> {
    vec![
        ContentType {
            name: "img".into(),
            share: 0.65,
            size: Dist::Exp { mean: 4.5 * KB },
            cachable: 0.80,
            life: Dist::lognormal_mean_sd(30.0 * DAY, 7.0 * DAY),
            ext: ".gif".into(),
        },
        ContentType {
            name: "html".into(),
            share: 0.15,
            size: Dist::Exp { mean: 8.5 * KB },
            cachable: 0.90,
            life: Dist::lognormal_mean_sd(7.0 * DAY, DAY),
            ext: ".html".into(),
        },
        ContentType {
            name: "dl".into(),
            share: 0.005,
            size: Dist::lognormal_mean_sd(300.0 * KB, 300.0 * KB),
            cachable: 0.95,
            life: Dist::lognormal_mean_sd(0.5 * YEAR, 30.0 * DAY),
            ext: ".zip".into(),
        },
        ContentType {
            name: "other".into(),
            share: 1.0 - 0.65 - 0.15 - 0.005,
            size: Dist::lognormal_mean_sd(25.0 * KB, 10.0 * KB),
            cachable: 0.72,
            life: Dist::Uniform {
                low: DAY,
                high: YEAR,
            },
            ext: ".bin".into(),
        },
    ]
}

/// When a phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    /// Seconds (already multiplied by the workload's time scale).
    Duration(f64),
    /// Requests issued in the phase.
    Requests(u64),
    /// Bytes of new cachable objects requested in the phase (what a cache must store):
    /// Polygraph's `goal.fill_size`.
    FillBytes(u64),
}

/// A phase: the load factor (share of the peak rate) and the recurrence ratio move linearly from
/// their first to their last value as the goal is approached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolyPhase {
    pub name: String,
    pub load: (f64, f64),
    pub recurrence: (f64, f64),
    pub goal: Goal,
}

/// A resolved, validated workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolyWorkload {
    /// Seeds objects and choices; also in every URL (Polygraph's `unique_world`: two seeds never
    /// share an object).
    pub seed: u64,
    pub robots: u32,
    /// Requests per second per robot; `None`: best effort (a robot asks again as soon as its
    /// answer arrives, §3.9.1).
    pub req_rate: Option<f64>,
    /// Connections a robot may have open at once (`open_conn_lmt`).
    pub open_conn_limit: u32,
    pub contents: Vec<ContentType>,
    pub popularity: Popularity,
    /// The working set stops growing (its size freezes; it keeps sliding to the newest objects)
    /// this many seconds after the start.
    pub working_set_length_s: Option<f64>,
    /// Cache size the `fill = "2x"` goals refer to, in bytes.
    pub cache_bytes: u64,
    pub phases: Vec<PolyPhase>,
    /// Server think time in seconds (`xact_think`), applied by the origin.
    pub think_s: Dist,
    /// Multiplies every duration (phases, working-set length); 1 runs the thesis's times.
    pub time_scale: f64,
}

impl PolyWorkload {
    /// Robots × per-robot rate, the rate of a phase at load factor 1.
    pub fn peak_rate(&self) -> Option<f64> {
        self.req_rate.map(|r| r * self.robots as f64)
    }

    /// The working-set length Polygraph computes from the working-set size and the fill rate:
    /// `working_set_length(WSS / (10KB × FillRate) / 5% / 80%)` (§3.8.2, Appendix 6.2).
    pub fn thesis_working_set_length(wss_bytes: f64, fill_rate: f64) -> f64 {
        wss_bytes / (10.0 * KB * fill_rate) / 0.05 / 0.80
    }

    /// Mean body size over the content mix.
    pub fn mean_object_bytes(&self) -> f64 {
        let total: f64 = self.contents.iter().map(|c| c.share).sum();
        self.contents
            .iter()
            .map(|c| c.share / total * c.size.mean().unwrap_or(0.0))
            .sum()
    }

    /// Fraction of objects that are cachable, over the mix.
    pub fn cachable_share(&self) -> f64 {
        let total: f64 = self.contents.iter().map(|c| c.share).sum();
        self.contents
            .iter()
            .map(|c| c.share / total * c.cachable)
            .sum()
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.robots == 0 {
            return Err("robots must be at least 1".into());
        }
        if let Some(r) = self.req_rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(format!("req_rate must be a positive rate, got {r}"));
            }
        }
        if self.open_conn_limit == 0 {
            return Err("open_conn_limit must be at least 1".into());
        }
        if self.contents.is_empty() {
            return Err("at least one content type is needed".into());
        }
        for c in &self.contents {
            if !(c.share.is_finite() && c.share >= 0.0) {
                return Err(format!("content {}: share must be ≥ 0", c.name));
            }
            if !(0.0..=1.0).contains(&c.cachable) {
                return Err(format!("content {}: cachable must be 0–100 %", c.name));
            }
            let bad = |ch: char| !(ch.is_ascii_alphanumeric() || ch == '-');
            if c.name.is_empty() || c.name.chars().any(bad) {
                return Err(format!(
                    "content name {:?} must be letters, digits or '-'",
                    c.name
                ));
            }
            if !c.ext.starts_with('.') || c.ext[1..].chars().any(bad) {
                return Err(format!(
                    "content {}: ext must look like \".gif\", got {:?}",
                    c.name, c.ext
                ));
            }
            c.size.validate()?;
            c.life.validate()?;
        }
        if self.contents.iter().map(|c| c.share).sum::<f64>() <= 0.0 {
            return Err("content shares sum to zero".into());
        }
        self.popularity.validate()?;
        self.think_s.validate()?;
        if self.phases.is_empty() {
            return Err("at least one phase is needed".into());
        }
        for p in &self.phases {
            let (a, b) = p.load;
            if !(a.is_finite() && b.is_finite() && a >= 0.0 && b >= 0.0) {
                return Err(format!("phase {}: load must be ≥ 0", p.name));
            }
            let (r0, r1) = p.recurrence;
            if !((0.0..=1.0).contains(&r0) && (0.0..=1.0).contains(&r1)) {
                return Err(format!("phase {}: recurrence must be 0–100 %", p.name));
            }
            let ok = match p.goal {
                Goal::Duration(d) => d.is_finite() && d > 0.0,
                Goal::Requests(n) => n > 0,
                Goal::FillBytes(n) => n > 0,
            };
            if !ok {
                return Err(format!("phase {}: its goal must be positive", p.name));
            }
            if self.req_rate.is_some() && matches!(p.goal, Goal::Requests(_) | Goal::FillBytes(_)) {
                let a = p.load.0.max(p.load.1);
                if a <= 0.0 {
                    return Err(format!(
                        "phase {}: a request or fill goal needs a load above 0",
                        p.name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// An object of the Polygraph world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolyObject {
    pub id: u64,
    /// Index into the workload's `contents`.
    pub kind: usize,
    pub size: u64,
    pub cachable: bool,
}

/// What an origin learns from a Polygraph URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedObject {
    pub world: u64,
    pub kind: String,
    pub id: u64,
    pub size: u64,
    pub cachable: bool,
    pub content_type: &'static str,
    /// Modified every `period_s` from `phase_s` on (the type's life law, seeded by the URL).
    pub life: LifeCycle,
}

/// The URL prefix of Polygraph objects.
pub const PREFIX: &str = "/pg/";

impl PolyObject {
    /// `/pg/w{world}/{type}/{id}_{size}_{c|u}{ext}`.
    pub fn path(&self, world: u64, contents: &[ContentType]) -> String {
        let c = &contents[self.kind];
        let mut s = String::with_capacity(48);
        let _ = write!(
            s,
            "{PREFIX}w{world}/{}/{}_{}_{}{}",
            c.name,
            self.id,
            self.size,
            if self.cachable { 'c' } else { 'u' },
            c.ext
        );
        s
    }

    /// Reads a Polygraph URL path back; the life cycle follows the thesis's law for the type
    /// (unknown types get Other's). Errors name what is wrong.
    pub fn parse_path(path: &str) -> Result<ParsedObject, String> {
        let rest = path
            .strip_prefix(PREFIX)
            .ok_or_else(|| format!("not a Polygraph object (no {PREFIX} prefix): {path}"))?;
        let mut parts = rest.splitn(3, '/');
        let (Some(w), Some(kind), Some(file)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "expected /pg/wWORLD/TYPE/ID_SIZE_C.EXT, got {path}"
            ));
        };
        let world = w
            .strip_prefix('w')
            .and_then(|n| n.parse::<u64>().ok())
            .ok_or_else(|| format!("bad world {w:?} in {path}"))?;
        let (stem, ext) = match file.rfind('.') {
            Some(i) => (&file[..i], &file[i..]),
            None => (file, ""),
        };
        let f: Vec<&str> = stem.split('_').collect();
        let [id, size, c] = f[..] else {
            return Err(format!("expected ID_SIZE_C in {file:?}"));
        };
        let id = id
            .parse::<u64>()
            .map_err(|_| format!("bad object id {id:?} in {path}"))?;
        let size = size
            .parse::<u64>()
            .ok()
            .filter(|s| *s <= MAX_FILE_BYTES)
            .ok_or_else(|| format!("bad size {size:?} in {path} (at most {MAX_FILE_BYTES})"))?;
        let cachable = match c {
            "c" => true,
            "u" => false,
            _ => return Err(format!("cachability must be c or u, got {c:?} in {path}")),
        };
        let contents = thesis_contents();
        let law = contents
            .iter()
            .find(|t| t.name == kind)
            .unwrap_or(&contents[3])
            .life;
        let mut rng = stream(fnv1a(path.as_bytes()), "polygraph-life");
        let period = law.sample(&mut rng).max(1.0);
        let phase = uniform01(&mut rng) * period;
        Ok(ParsedObject {
            world,
            kind: kind.to_string(),
            id,
            size,
            cachable,
            content_type: ContentType::mime(ext),
            life: LifeCycle::Cyclic {
                period_s: period.round() as u64,
                phase_s: phase.round() as u64,
            },
        })
    }
}

/// Object `id` of the world `seed`: its type, size and cachability from its own stream.
pub fn object(seed: u64, contents: &[ContentType], id: u64) -> PolyObject {
    let mut rng = stream(seed ^ splitmix64(id), "polygraph-object");
    let total: f64 = contents.iter().map(|c| c.share).sum();
    let mut u = uniform01(&mut rng) * total;
    let mut kind = contents.len() - 1;
    for (i, c) in contents.iter().enumerate() {
        u -= c.share;
        if u < 0.0 {
            kind = i;
            break;
        }
    }
    let c = &contents[kind];
    let size = (c.size.sample(&mut rng).round() as u64).clamp(1, MAX_FILE_BYTES);
    let cachable = uniform01(&mut rng) < c.cachable;
    PolyObject {
        id,
        kind,
        size,
        cachable,
    }
}

/// One request the workload asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct PolyRequest {
    pub object: PolyObject,
    pub path: String,
    /// Index of the phase it belongs to.
    pub phase: usize,
    /// The object was requested before.
    pub repeat: bool,
    /// An infinite cache would have answered it: a repeat of a cachable object.
    pub offered_hit: bool,
}

/// Counters of one phase, as the generator sees them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTally {
    pub name: String,
    pub start_s: f64,
    /// Set when the phase ended.
    pub end_s: Option<f64>,
    pub requests: u64,
    pub repeats: u64,
    pub offered_hits: u64,
    pub bytes: u64,
    pub offered_hit_bytes: u64,
    /// Bytes of new cachable objects (the fill goal's measure).
    pub fill_bytes: u64,
}

impl PhaseTally {
    pub fn offered_dhr(&self) -> f64 {
        ratio(self.offered_hits, self.requests)
    }
    pub fn offered_bhr(&self) -> f64 {
        ratio(self.offered_hit_bytes, self.bytes)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// The state of a run: which phase, how far towards its goal, the working set.
#[derive(Debug, Clone)]
pub struct Generator {
    w: PolyWorkload,
    phase: usize,
    tallies: Vec<PhaseTally>,
    /// Objects `lo..next_id` may recur (the working set); `next_id` is the next new object.
    lo: u64,
    next_id: u64,
    /// Set once the working set stops growing: its size in objects and bytes then.
    frozen: Option<(u64, u64)>,
    ws_bytes: u64,
    rng: crate::rng::WorkloadRng,
    arrivals: crate::rng::WorkloadRng,
}

impl Generator {
    pub fn new(w: PolyWorkload) -> Result<Generator, String> {
        w.validate()?;
        let tallies = vec![PhaseTally {
            name: w.phases[0].name.clone(),
            ..Default::default()
        }];
        Ok(Generator {
            rng: stream(w.seed, "polygraph-requests"),
            arrivals: stream(w.seed, "polygraph-arrivals"),
            w,
            phase: 0,
            tallies,
            lo: 0,
            next_id: 0,
            frozen: None,
            ws_bytes: 0,
        })
    }

    pub fn workload(&self) -> &PolyWorkload {
        &self.w
    }

    /// The current phase, `None` once every phase has met its goal.
    pub fn phase(&self) -> Option<usize> {
        (self.phase < self.w.phases.len()).then_some(self.phase)
    }

    /// Per-phase counters so far (phases not reached yet are absent).
    pub fn tallies(&self) -> &[PhaseTally] {
        &self.tallies
    }

    /// Objects and bytes in the working set, and whether it is frozen.
    pub fn working_set(&self) -> (u64, u64, bool) {
        (self.next_id - self.lo, self.ws_bytes, self.frozen.is_some())
    }

    /// How far the current phase is towards its goal at `t`, 0–1.
    fn progress(&self, t: f64) -> f64 {
        let Some(p) = self.w.phases.get(self.phase) else {
            return 1.0;
        };
        let tally = &self.tallies[self.phase];
        let f = match p.goal {
            Goal::Duration(d) => (t - tally.start_s) / d,
            Goal::Requests(n) => tally.requests as f64 / n as f64,
            Goal::FillBytes(n) => tally.fill_bytes as f64 / n as f64,
        };
        f.clamp(0.0, 1.0)
    }

    fn lerp((a, b): (f64, f64), f: f64) -> f64 {
        a + (b - a) * f
    }

    /// The load factor (share of the peak rate) at `t`; 0 after the last phase.
    pub fn load_factor(&self, t: f64) -> f64 {
        match self.w.phases.get(self.phase) {
            Some(p) => Self::lerp(p.load, self.progress(t)),
            None => 0.0,
        }
    }

    /// The offered request rate at `t` (requests/s); `None` for best effort.
    pub fn offered_rate(&self, t: f64) -> Option<f64> {
        self.w.peak_rate().map(|r| r * self.load_factor(t))
    }

    /// Ends the phases whose goal is met at `t` (a duration can run out without requests).
    /// Returns whether the workload is still running.
    pub fn advance(&mut self, t: f64) -> bool {
        while self.phase < self.w.phases.len() && self.progress(t) >= 1.0 {
            let end = match self.w.phases[self.phase].goal {
                Goal::Duration(d) => self.tallies[self.phase].start_s + d,
                _ => t,
            };
            self.tallies[self.phase].end_s = Some(end);
            self.phase += 1;
            if let Some(p) = self.w.phases.get(self.phase) {
                self.tallies.push(PhaseTally {
                    name: p.name.clone(),
                    start_s: end,
                    ..Default::default()
                });
            }
        }
        self.phase < self.w.phases.len()
    }

    /// When the next request of an open-loop run is due, after one at `t`: Poisson arrivals at
    /// the offered rate, the rate read every 10 ms of the gap so ramps are followed. `None` when
    /// the workload ends first (or is best effort).
    pub fn next_arrival(&mut self, t: f64) -> Option<f64> {
        let peak = self.w.peak_rate()?;
        let mut work = -open01(&mut self.arrivals).ln();
        let mut now = t;
        const STEP: f64 = 0.01;
        loop {
            if !self.advance(now) {
                return None;
            }
            let rate = peak * self.load_factor(now);
            let step = match self.w.phases[self.phase].goal {
                Goal::Duration(d) => STEP.min(self.tallies[self.phase].start_s + d - now),
                _ => STEP,
            }
            .max(1e-9);
            if rate * step >= work {
                return Some(now + work / rate);
            }
            work -= rate * step;
            now += step;
        }
    }

    /// The next request at `t`, or `None` when every phase has met its goal.
    pub fn next(&mut self, t: f64) -> Option<PolyRequest> {
        if !self.advance(t) {
            return None;
        }
        self.grow_or_freeze(t);
        let p = &self.w.phases[self.phase];
        let recurrence = Self::lerp(p.recurrence, self.progress(t));
        let pool = self.next_id - self.lo;
        let revisit = pool > 0 && uniform01(&mut self.rng) < recurrence;
        let (object, repeat) = if revisit {
            let rank = self.w.popularity.sample_rank(pool, &mut self.rng);
            let id = self.lo + rank - 1;
            (object(self.w.seed, &self.w.contents, id), true)
        } else {
            let o = object(self.w.seed, &self.w.contents, self.next_id);
            self.next_id += 1;
            self.ws_bytes += o.size;
            if self.frozen.is_some() {
                // A frozen working set keeps its size: the oldest object leaves it.
                let old = object(self.w.seed, &self.w.contents, self.lo);
                self.ws_bytes -= old.size;
                self.lo += 1;
            }
            (o, false)
        };
        let offered_hit = repeat && object.cachable;
        let tally = &mut self.tallies[self.phase];
        tally.requests += 1;
        tally.bytes += object.size;
        if repeat {
            tally.repeats += 1;
        }
        if offered_hit {
            tally.offered_hits += 1;
            tally.offered_hit_bytes += object.size;
        }
        if !repeat && object.cachable {
            tally.fill_bytes += object.size;
        }
        let phase = self.phase;
        self.advance(t);
        Some(PolyRequest {
            path: object.path(self.w.seed, &self.w.contents),
            object,
            phase,
            repeat,
            offered_hit,
        })
    }

    fn grow_or_freeze(&mut self, t: f64) {
        if self.frozen.is_none()
            && self
                .w
                .working_set_length_s
                .is_some_and(|l| t >= l * self.w.time_scale)
        {
            self.frozen = Some((self.next_id - self.lo, self.ws_bytes));
        }
    }

    /// The working set's size when it froze: (objects, bytes).
    pub fn frozen(&self) -> Option<(u64, u64)> {
        self.frozen
    }
}

/// Offered hits of a request sequence by hand: a request is an offered hit when its object is
/// cachable and was requested before. Returns (offered hits, offered hit bytes).
pub fn offered_hits(seq: &[(u64, u64, bool)]) -> (u64, u64) {
    let mut seen = std::collections::HashSet::new();
    let (mut hits, mut bytes) = (0, 0);
    for &(id, size, cachable) in seq {
        if !seen.insert(id) && cachable {
            hits += 1;
            bytes += size;
        }
    }
    (hits, bytes)
}

/// A workload file (`capstan bench --polygraph FILE.toml`, the lab's cache experiments): the
/// fields of [`PolyWorkload`] as a person writes them, with units.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolyFile {
    #[serde(default = "one")]
    pub seed: u64,
    pub robots: u32,
    /// Requests per second per robot; absent: best effort.
    pub req_rate: Option<f64>,
    #[serde(default = "four")]
    pub open_conn_limit: u32,
    /// `"1100MB"`: what `fill = "2x"` multiplies.
    pub cache_size: String,
    /// Working-set size (`WSS`, e.g. `"100MB"`) and fill rate (requests/s) give the working-set
    /// length by the thesis's formula; `working_set_length` sets it directly.
    pub working_set: Option<String>,
    pub fill_rate: Option<f64>,
    pub working_set_length: Option<String>,
    /// `"uniform"` (the thesis's `popUnif()`) or `"zipf:ALPHA"`.
    #[serde(default = "uniform")]
    pub popularity: String,
    /// Server think time, seconds: default `{ dist = "normal", mean = 0.3, sd = 0.1 }`.
    pub think: Option<Dist>,
    #[serde(default = "unit")]
    pub time_scale: f64,
    /// Content types; absent: the thesis's four ([`thesis_contents`]).
    #[serde(default, rename = "content")]
    pub contents: Vec<ContentType>,
    #[serde(rename = "phase")]
    pub phases: Vec<PhaseFile>,
}

/// One `[[phase]]`: `load = "10%..100%"` (an empty start continues from the previous phase's
/// end), `recurrence = "5%"` or `"5%..95%"`, and exactly one of `duration`, `requests`, `fill`
/// (`"2x"` of the cache size, or a size).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseFile {
    pub name: String,
    #[serde(default = "full")]
    pub load: String,
    #[serde(default = "ninety_five")]
    pub recurrence: String,
    pub duration: Option<String>,
    pub requests: Option<u64>,
    pub fill: Option<String>,
}

fn one() -> u64 {
    1
}
fn four() -> u32 {
    4
}
fn unit() -> f64 {
    1.0
}
fn uniform() -> String {
    "uniform".into()
}
fn full() -> String {
    "100%".into()
}
fn ninety_five() -> String {
    "95%".into()
}

/// `"95%"` → 0.95 (a bare number is a fraction: `"0.95"`).
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("expected a percentage like \"95%\", got {s:?}"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!("expected a percentage ≥ 0, got {s:?}"))
    }
}

/// `"A..B"` or `"A"`; an empty `A` is `prev`.
fn parse_range(s: &str, prev: f64) -> Result<(f64, f64), String> {
    match s.split_once("..") {
        Some((a, b)) => {
            let a = if a.trim().is_empty() {
                prev
            } else {
                parse_percent(a)?
            };
            Ok((a, parse_percent(b)?))
        }
        None => {
            let v = parse_percent(s)?;
            Ok((v, v))
        }
    }
}

/// `"4.5KB"`, `"100MB"`, `"1GiB"`, `"512"` (bytes); K/M/G are powers of 1024 as in Polygraph.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("expected a size like \"100MB\", got {s:?}"))?;
    let m = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "kib" => KB,
        "m" | "mb" | "mib" => KB * KB,
        "g" | "gb" | "gib" => KB * KB * KB,
        u => return Err(format!("unknown size unit {u:?} in {s:?} (B, KB, MB, GB)")),
    };
    Ok((v * m).round() as u64)
}

/// `"5min"`, `"60s"`, `"250ms"`, `"2h"` → seconds.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("expected a duration like \"5min\", got {s:?}"))?;
    let m = match unit.trim() {
        "ms" => 1e-3,
        "" | "s" | "sec" => 1.0,
        "m" | "min" => 60.0,
        "h" | "hour" => 3600.0,
        u => return Err(format!("unknown time unit {u:?} in {s:?} (ms, s, min, h)")),
    };
    Ok(v * m)
}

fn parse_popularity(s: &str) -> Result<Popularity, String> {
    match s.split_once(':') {
        None if s == "uniform" => Ok(Popularity::Uniform),
        Some(("zipf", a)) => a
            .parse::<f64>()
            .map(|alpha| Popularity::Zipf { alpha })
            .map_err(|_| format!("bad zipf exponent in {s:?}")),
        _ => Err(format!(
            "popularity must be \"uniform\" or \"zipf:ALPHA\", got {s:?}"
        )),
    }
}

impl PolyFile {
    /// Parses and resolves a workload file; errors are one line.
    pub fn parse(text: &str) -> Result<PolyWorkload, String> {
        let f: PolyFile = toml::from_str(text).map_err(|e| {
            let m = e.message().to_string();
            match e.span() {
                Some(span) => {
                    let line = text[..span.start].matches('\n').count() + 1;
                    format!("line {line}: {m}")
                }
                None => m,
            }
        })?;
        f.resolve()
    }

    pub fn resolve(self) -> Result<PolyWorkload, String> {
        let cache_bytes = parse_bytes(&self.cache_size)?;
        let scale = self.time_scale;
        if !(scale.is_finite() && scale > 0.0) {
            return Err(format!("time_scale must be positive, got {scale}"));
        }
        let working_set_length_s =
            match (&self.working_set_length, &self.working_set, self.fill_rate) {
                (Some(l), _, _) => Some(parse_seconds(l)?),
                (None, Some(wss), Some(rate)) if rate > 0.0 => Some(
                    PolyWorkload::thesis_working_set_length(parse_bytes(wss)? as f64, rate),
                ),
                (None, Some(_), _) => {
                    return Err("working_set needs a positive fill_rate (requests/s)".into())
                }
                (None, None, _) => None,
            };
        let mut phases = Vec::new();
        let mut prev = 0.0;
        for p in self.phases {
            let load = parse_range(&p.load, prev).map_err(|e| format!("phase {}: {e}", p.name))?;
            prev = load.1;
            let recurrence =
                parse_range(&p.recurrence, 0.0).map_err(|e| format!("phase {}: {e}", p.name))?;
            let goal = match (&p.duration, p.requests, &p.fill) {
                (Some(d), None, None) => Goal::Duration(parse_seconds(d)? * scale),
                (None, Some(n), None) => Goal::Requests(n),
                (None, None, Some(f)) => Goal::FillBytes(match f.trim().strip_suffix('x') {
                    Some(k) => {
                        let k: f64 = k
                            .trim()
                            .parse()
                            .map_err(|_| format!("phase {}: bad fill {f:?}", p.name))?;
                        (k * cache_bytes as f64).round() as u64
                    }
                    None => parse_bytes(f).map_err(|e| format!("phase {}: fill: {e}", p.name))?,
                }),
                _ => {
                    return Err(format!(
                        "phase {}: give exactly one goal: duration, requests or fill",
                        p.name
                    ))
                }
            };
            phases.push(PolyPhase {
                name: p.name,
                load,
                recurrence,
                goal,
            });
        }
        let w = PolyWorkload {
            seed: self.seed,
            robots: self.robots,
            req_rate: self.req_rate,
            open_conn_limit: self.open_conn_limit,
            contents: if self.contents.is_empty() {
                thesis_contents()
            } else {
                self.contents
            },
            popularity: parse_popularity(&self.popularity)?,
            working_set_length_s,
            cache_bytes,
            phases,
            think_s: self.think.unwrap_or(Dist::Normal { mean: 0.3, sd: 0.1 }),
            time_scale: scale,
        };
        w.validate()?;
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mixed(extra: &str) -> String {
        format!(
            "seed = 3\nrobots = 100\nreq_rate = 1.0\ncache_size = \"1MB\"\n{extra}\n\
             [[phase]]\nname = \"fill\"\nload = \"100%\"\nrecurrence = \"5%\"\nfill = \"2x\"\n\
             [[phase]]\nname = \"top1\"\nrecurrence = \"95%\"\nrequests = 20000\n"
        )
    }

    /// Four standard deviations of a binomial share over `n` draws.
    fn tol(p: f64, n: f64) -> f64 {
        4.0 * (p * (1.0 - p) / n).sqrt()
    }

    #[test]
    fn content_shares_sizes_and_cachability_follow_the_thesis() {
        let contents = thesis_contents();
        let total: f64 = contents.iter().map(|c| c.share).sum();
        assert!((total - 1.0).abs() < 1e-12, "shares sum to {total}");
        assert!((contents[3].share - 0.195).abs() < 1e-12);
        let n = 200_000u64;
        let objs: Vec<PolyObject> = (0..n).map(|id| object(9, &contents, id)).collect();
        for (k, c) in contents.iter().enumerate() {
            let of: Vec<&PolyObject> = objs.iter().filter(|o| o.kind == k).collect();
            let m = of.len() as f64;
            let share = m / n as f64;
            assert!(
                (share - c.share).abs() < tol(c.share, n as f64),
                "{} share {share}",
                c.name
            );
            let cach = of.iter().filter(|o| o.cachable).count() as f64 / m;
            assert!(
                (cach - c.cachable).abs() < tol(c.cachable, m),
                "{} cachable {cach}",
                c.name
            );
            let mean = of.iter().map(|o| o.size as f64).sum::<f64>() / m;
            let want = c.size.mean().unwrap();
            // Standard deviation of each law: exp → mean; logn(300KB, 300KB) → 300 KB;
            // logn(25KB, 10KB) → 10 KB. Four standard errors.
            let sd = match c.name.as_str() {
                "img" | "html" | "dl" => want,
                _ => 10.0 * KB,
            };
            assert!(
                (mean - want).abs() < 4.0 * sd / m.sqrt(),
                "{} mean {mean} vs {want}",
                c.name
            );
        }
    }

    #[test]
    fn a_fill_goal_ends_its_phase_at_the_volume() {
        let w = PolyFile::parse(&mixed("")).unwrap();
        assert_eq!(w.phases[0].goal, Goal::FillBytes(2 << 20));
        let mut g = Generator::new(w).unwrap();
        let mut t = 0.0;
        let mut last_fill_request = None;
        while g.phase() == Some(0) {
            let r = g.next(t).unwrap();
            if r.phase == 0 && !r.repeat && r.object.cachable {
                last_fill_request = Some(r.object.size);
            }
            t += 0.01;
        }
        let fill = &g.tallies()[0];
        assert!(fill.fill_bytes >= 2 << 20, "{}", fill.fill_bytes);
        // It ends with the request that crossed the goal, not later.
        assert!(fill.fill_bytes - last_fill_request.unwrap() < 2 << 20);
        assert_eq!(fill.end_s, Some(t - 0.01));
        assert_eq!(g.tallies()[1].name, "top1");
    }

    #[test]
    fn recurrence_95_percent_gives_95_percent_repeats() {
        let mut g = Generator::new(PolyFile::parse(&mixed("")).unwrap()).unwrap();
        let mut seen = std::collections::HashSet::new();
        let (mut n, mut repeats) = (0u64, 0u64);
        let mut t = 0.0;
        while let Some(r) = g.next(t) {
            let fresh = seen.insert(r.object.id);
            assert_eq!(fresh, !r.repeat, "the generator's repeat flag is the truth");
            if r.phase == 1 {
                n += 1;
                repeats += u64::from(!fresh);
            }
            t += 0.01;
        }
        let share = repeats as f64 / n as f64;
        assert_eq!(n, 20_000);
        assert!((share - 0.95).abs() < tol(0.95, n as f64), "{share}");
        let fill = &g.tallies()[0];
        let s = fill.repeats as f64 / fill.requests as f64;
        assert!((s - 0.05).abs() < 0.02, "fill repeats {s}");
    }

    #[test]
    fn offered_hit_ratio_by_hand_and_from_the_generator() {
        // (object, size, cachable): a=1 cachable, b=2 not, c=3 cachable.
        let seq = [
            (1, 100, true),
            (2, 50, false),
            (1, 100, true), // hit
            (2, 50, false), // repeat, not cachable: miss
            (3, 10, true),
            (1, 100, true), // hit
            (3, 10, true),  // hit
        ];
        assert_eq!(offered_hits(&seq), (3, 210));
        // DHR 3/7, BHR 210/420.
        let mut g = Generator::new(PolyFile::parse(&mixed("")).unwrap()).unwrap();
        let mut all = Vec::new();
        let mut t = 0.0;
        while let Some(r) = g.next(t) {
            all.push((r.object.id, r.object.size, r.object.cachable));
            t += 0.01;
        }
        let (hits, bytes) = offered_hits(&all);
        let tallied: u64 = g.tallies().iter().map(|p| p.offered_hits).sum();
        let tallied_bytes: u64 = g.tallies().iter().map(|p| p.offered_hit_bytes).sum();
        assert_eq!((hits, bytes), (tallied, tallied_bytes));
        // After the fill, ≈ recurrence × cachable share.
        let top = &g.tallies()[1];
        let want = 0.95 * g.workload().cachable_share();
        assert!(
            (top.offered_dhr() - want).abs() < 0.02,
            "{}",
            top.offered_dhr()
        );
    }

    #[test]
    fn the_working_set_freezes_and_slides() {
        let w = PolyFile::parse(&mixed("working_set_length = \"10s\"")).unwrap();
        let mut g = Generator::new(w).unwrap();
        let mut t = 0.0;
        let mut lowest_after_freeze = u64::MAX;
        while let Some(r) = g.next(t) {
            t += 0.01;
            if g.frozen().is_some() && r.repeat {
                lowest_after_freeze = lowest_after_freeze.min(r.object.id);
            }
        }
        let (objects, _) = g.frozen().expect("froze at 10 s");
        assert_eq!(g.working_set().0, objects, "its size stays");
        assert!(g.working_set().2);
        assert!(lowest_after_freeze > 0, "the oldest objects left the set");
        // The thesis's formula: 100 MB / (10 KB × 160/s) / 5% / 80% = 1600 s.
        let l = PolyWorkload::thesis_working_set_length(100.0 * KB * KB, 160.0);
        assert!((l - 1600.0).abs() < 1e-6, "{l}");
    }

    #[test]
    fn arrivals_follow_the_rate_profile() {
        let text = "robots = 200\nreq_rate = 1.0\ncache_size = \"1MB\"\n\
                    [[phase]]\nname = \"top\"\nload = \"50%\"\nduration = \"20s\"\n\
                    [[phase]]\nname = \"inc\"\nload = \"..100%\"\nduration = \"20s\"\n";
        let mut g = Generator::new(PolyFile::parse(text).unwrap()).unwrap();
        let mut t = 0.0;
        let mut per_phase = [0u32; 2];
        while let Some(next) = g.next_arrival(t) {
            t = next;
            match g.next(t) {
                Some(r) => per_phase[r.phase] += 1,
                None => break,
            }
        }
        // 100/s for 20 s; then 100 → 200/s over 20 s: 3000. Poisson: ±4√n.
        assert!(
            (per_phase[0] as f64 - 2000.0).abs() < 4.0 * 2000f64.sqrt(),
            "{per_phase:?}"
        );
        assert!(
            (per_phase[1] as f64 - 3000.0).abs() < 4.0 * 3000f64.sqrt(),
            "{per_phase:?}"
        );
        assert!(g.tallies()[1]
            .end_s
            .is_some_and(|e| (e - 40.0).abs() < 1e-9));
    }

    #[test]
    fn urls_carry_the_object_and_bad_ones_are_refused() {
        let contents = thesis_contents();
        let o = PolyObject {
            id: 42,
            kind: 1,
            size: 8713,
            cachable: false,
        };
        let p = o.path(7, &contents);
        assert_eq!(p, "/pg/w7/html/42_8713_u.html");
        let parsed = PolyObject::parse_path(&p).unwrap();
        assert_eq!((parsed.world, parsed.id, parsed.size), (7, 42, 8713));
        assert!(!parsed.cachable && parsed.content_type == "text/html");
        assert_eq!(PolyObject::parse_path(&p).unwrap().life, parsed.life);
        for bad in [
            "/pg/w7/html/42_8713.html",
            "/pg/x7/html/42_1_c.html",
            "/pg/w7/html/42_1_z.html",
            "/pg/w7/html/4x_1_c.html",
            "/pg/w7/html/1_999999999999_c.bin",
            "/pg/w7",
            "/other",
        ] {
            assert!(PolyObject::parse_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_files_give_one_line_errors() {
        let cases = [
            (mixed("").replace("fill = \"2x\"", ""), "exactly one goal"),
            (mixed("").replace("\"5%\"", "\"five\""), "percentage"),
            (mixed("popularity = \"pareto\""), "popularity"),
            (mixed("").replace("\"1MB\"", "\"1 parsec\""), "unit"),
            (mixed("colour = 1"), "line 5"),
            (mixed("").replace("robots = 100", "robots = 0"), "robots"),
        ];
        for (text, says) in cases {
            let e = PolyFile::parse(&text).unwrap_err();
            assert!(e.contains(says), "{e} should say {says}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        assert_eq!(parse_bytes("4.5KB").unwrap(), 4608);
        assert_eq!(parse_seconds("5min").unwrap(), 300.0);
    }
}
