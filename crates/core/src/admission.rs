//! The adaptive concurrency limit of one node (the switch's admission gates use it, and the
//! simulator may run the very same limiter), as pure logic: no clock, no I/O, no locks; every
//! sample carries its own time, so the tests drive it with made-up latencies.
//!
//! It is Envoy's gradient controller (adaptive-concurrency filter), with the latency of each
//! sample taken relative to its *class*:
//!
//! - **Baseline.** Every so often (`probe_interval`, plus up to 15 % jitter) the limit is pinned
//!   to `min` while [`PROBE_SAMPLES`] requests that started with at most `min` in flight come
//!   back; the median of each class's samples becomes that class's baseline, the latency of the
//!   node (nearly) unloaded. Between probes, a class without a baseline takes the median of its
//!   first [`CLEAN_SAMPLES`] *clean* samples — requests that found at most `min` in flight when
//!   they started and when they ended — so a lightly loaded node never needs pinning; when
//!   [`UNKNOWN_BEFORE_PROBE`] samples of classes without a baseline come back loaded instead (a
//!   node overloaded from its first request), a probe starts at once. (Envoy keeps one minRTT per
//!   cluster and starts with a probe; a web node's classes differ by orders of magnitude — a
//!   static file in a millisecond, a CGI in a hundred — so one minimum would read every CGI
//!   request as queueing.)
//! - **Gradient.** Over each window of at least [`WINDOW_NANOS`], counting only requests sent
//!   after the window began (a node's latency answers a new limit only a response time later;
//!   samples of requests sent under the previous limit would make the limit swing, so a window
//!   lasts at least one response time), the median of the samples' ratios
//!   `latency / baseline(class)` is the queueing the node adds; `gradient = (1 + buffer) /
//!   median`, clamped to [0.5, 2]. The new limit is `gradient × limit + √(gradient × limit)`:
//!   the square root is Envoy's headroom, which lets the limit grow while latency stays at the
//!   baseline and keeps it from settling below what the node can run in parallel.
//! - **Bounds.** The limit stays within [`min`, `max`]. It does not grow in a window whose peak
//!   concurrency stayed under half the limit (Netflix concurrency-limits: a limit the traffic
//!   never reaches says nothing about the node), so a quiet node keeps a limit near what it
//!   has shown it can carry. A limit stuck at `min` for 5 windows starts a probe at once (the
//!   node may have become slower for good; Envoy does the same).
//!
//! On a node that serves one request at a time in processor sharing (an emulated 1-core node),
//! latency grows linearly with concurrency, so the limit settles a few requests above one
//! core's worth; on a node with `c` cores it settles near `1.25 c` plus the headroom — in both
//! cases the node stays busy and the rest waits in the switch's queue, not in the node.

/// Length of one sampling window (Envoy's `concurrency_update_interval` in its example).
pub const WINDOW_NANOS: u64 = 100_000_000;
/// Samples a window needs before it may change the limit.
pub const MIN_WINDOW_SAMPLES: usize = 3;
/// Ratios kept per window; a window that fills up closes early.
const MAX_WINDOW_SAMPLES: usize = 256;
/// Samples a probe collects before it sets the baselines (Envoy's `request_count` default).
pub const PROBE_SAMPLES: usize = 50;
/// A probe that has run this long ends with what it has, if that is at least
/// [`MIN_PROBE_SAMPLES`] (a node with little traffic should not stay pinned).
pub const PROBE_MAX_NANOS: u64 = 2_000_000_000;
pub const MIN_PROBE_SAMPLES: usize = 5;
/// Clean samples that give a class without a baseline its baseline (their median).
pub const CLEAN_SAMPLES: usize = 5;
/// Loaded samples of classes without a baseline that start a probe.
pub const UNKNOWN_BEFORE_PROBE: u32 = 20;
/// Windows in a row at the minimum that start a probe.
const WINDOWS_AT_MIN_BEFORE_PROBE: u32 = 5;
/// Envoy's bounds on the gradient.
const GRADIENT_MIN: f64 = 0.5;
const GRADIENT_MAX: f64 = 2.0;
/// Largest jitter added to the probe interval, as a share of it (Envoy's default 15 %).
const PROBE_JITTER: f64 = 0.15;

/// The limiter's settings (`[admission]`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptiveSettings {
    pub min: u32,
    pub max: u32,
    /// The limit before anything is known of the node.
    pub initial: u32,
    /// Latency above the baseline tolerated before the limit falls (Envoy's `buffer`, 0.25).
    pub buffer: f64,
    pub probe_interval_nanos: u64,
}

/// One response head that came back from the node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub class: usize,
    /// From sending the request to its response head.
    pub latency_nanos: u64,
    /// Requests in flight on the node when this one was admitted, itself included.
    pub in_flight: u32,
    /// Requests in flight on the node when its response head came back, itself included.
    pub in_flight_at_end: u32,
    pub at_nanos: u64,
}

#[derive(Clone, Debug, Default)]
struct Window {
    started_at: u64,
    ratios: Vec<f64>,
    peak_in_flight: u32,
}

#[derive(Clone, Debug)]
struct Probe {
    started_at: u64,
    samples: Vec<(usize, u64)>,
}

/// The limit and what it is computed from.
#[derive(Clone, Debug)]
pub struct GradientLimiter {
    settings: AdaptiveSettings,
    limit: f64,
    /// Per class: the node's unloaded latency, nanoseconds.
    baselines: Vec<Option<u64>>,
    /// Per class without a baseline: its clean samples so far.
    clean: Vec<Vec<u64>>,
    /// Loaded samples of classes without a baseline since the last probe.
    unknown: u32,
    window: Window,
    probe: Option<Probe>,
    next_probe_at: u64,
    windows_at_min: u32,
    /// The last window's median ratio (for `/status`), 0 before the first.
    last_ratio: f64,
    /// No probe has ended yet: the limit is the initial guess, not a measured one.
    untracked: bool,
}

impl GradientLimiter {
    /// A limiter at `initial`, for a node serving `classes` classes, from `now_nanos`.
    pub fn new(settings: AdaptiveSettings, classes: usize, now_nanos: u64) -> Self {
        let mut limiter = GradientLimiter {
            settings,
            limit: f64::from(settings.initial.clamp(settings.min, settings.max)),
            baselines: vec![None; classes],
            clean: vec![Vec::new(); classes],
            unknown: 0,
            window: Window {
                started_at: now_nanos,
                ..Window::default()
            },
            probe: None,
            next_probe_at: 0,
            windows_at_min: 0,
            last_ratio: 0.0,
            untracked: true,
        };
        limiter.schedule_probe(now_nanos);
        limiter
    }

    pub fn settings(&self) -> AdaptiveSettings {
        self.settings
    }

    /// Requests the node may have in flight now.
    pub fn limit(&self) -> u32 {
        match self.probe {
            Some(_) => self.settings.min,
            None => self.limit.round() as u32,
        }
    }

    /// Whether the limit is pinned to `min` while baselines are measured.
    pub fn is_probing(&self) -> bool {
        self.probe.is_some()
    }

    /// The baseline of `class`, nanoseconds, once known.
    #[cfg(test)]
    pub(crate) fn baseline(&self, class: usize) -> Option<u64> {
        self.baselines.get(class).copied().flatten()
    }

    /// The median latency ratio of the last window that counted (1 = unloaded).
    pub fn last_ratio(&self) -> f64 {
        self.last_ratio
    }

    /// Takes a response's latency into account; the limit may change.
    pub fn record(&mut self, sample: Sample) {
        if sample.class >= self.baselines.len() {
            self.baselines.resize(sample.class + 1, None);
            self.clean.resize(sample.class + 1, Vec::new());
        }
        if self.probe.is_some() {
            self.record_probe(sample);
            return;
        }
        let Some(baseline) = self.baselines[sample.class] else {
            self.learn_baseline(sample);
            return;
        };
        self.untracked = false;
        let sent_at = sample.at_nanos.saturating_sub(sample.latency_nanos);
        if sent_at >= self.window.started_at && self.window.ratios.len() < MAX_WINDOW_SAMPLES {
            let latency = sample.latency_nanos as f64;
            self.window.ratios.push(latency / baseline.max(1) as f64);
        }
        self.window.peak_in_flight = self.window.peak_in_flight.max(sample.in_flight);
        let elapsed = sample.at_nanos.saturating_sub(self.window.started_at);
        let full = self.window.ratios.len() >= MAX_WINDOW_SAMPLES;
        if (elapsed >= WINDOW_NANOS || full) && self.window.ratios.len() >= MIN_WINDOW_SAMPLES {
            self.close_window(sample.at_nanos);
        }
        if sample.at_nanos >= self.next_probe_at {
            self.start_probe(sample.at_nanos);
        }
    }

    /// A sample of a class without a baseline: clean ones build it, loaded ones may call for a
    /// probe.
    fn learn_baseline(&mut self, sample: Sample) {
        let min = self.settings.min;
        if sample.in_flight <= min && sample.in_flight_at_end <= min {
            let clean = &mut self.clean[sample.class];
            clean.push(sample.latency_nanos.max(1));
            if clean.len() >= CLEAN_SAMPLES {
                let mut values: Vec<f64> = clean.drain(..).map(|l| l as f64).collect();
                self.baselines[sample.class] = Some(median(&mut values) as u64);
            }
            return;
        }
        self.unknown += 1;
        if self.unknown >= UNKNOWN_BEFORE_PROBE {
            self.start_probe(sample.at_nanos);
        }
    }

    fn close_window(&mut self, now_nanos: u64) {
        let ratio = median(&mut self.window.ratios);
        self.last_ratio = ratio;
        let gradient = ((1.0 + self.settings.buffer) / ratio).clamp(GRADIENT_MIN, GRADIENT_MAX);
        let scaled = gradient * self.limit;
        let mut next = scaled + scaled.sqrt();
        let app_limited = f64::from(self.window.peak_in_flight) * 2.0 < self.limit;
        if next > self.limit && app_limited {
            next = self.limit;
        }
        let (min, max) = (f64::from(self.settings.min), f64::from(self.settings.max));
        self.limit = next.clamp(min, max);
        self.window = Window {
            started_at: now_nanos,
            ..Window::default()
        };
        self.windows_at_min = match self.limit <= min {
            true => self.windows_at_min + 1,
            false => 0,
        };
        if self.windows_at_min >= WINDOWS_AT_MIN_BEFORE_PROBE {
            self.start_probe(now_nanos);
        }
    }

    fn start_probe(&mut self, now_nanos: u64) {
        self.windows_at_min = 0;
        self.unknown = 0;
        self.probe = Some(Probe {
            started_at: now_nanos,
            samples: Vec::with_capacity(PROBE_SAMPLES),
        });
    }

    fn record_probe(&mut self, sample: Sample) {
        let probe = self.probe.as_mut().expect("called while probing");
        // Only a request that started with the node as unloaded as the probe makes it counts.
        if sample.in_flight <= self.settings.min {
            probe
                .samples
                .push((sample.class, sample.latency_nanos.max(1)));
        }
        let ran = sample.at_nanos.saturating_sub(probe.started_at);
        let enough = probe.samples.len() >= PROBE_SAMPLES
            || (ran >= PROBE_MAX_NANOS && probe.samples.len() >= MIN_PROBE_SAMPLES);
        if !enough {
            return;
        }
        let samples = std::mem::take(&mut probe.samples);
        self.probe = None;
        // The first probe of a node loaded before anything was known of it: the initial limit
        // was a guess, so the limit starts from the minimum and grows from there. Later probes
        // give back the limit the node had earned.
        if self.untracked {
            self.limit = f64::from(self.settings.min);
            self.untracked = false;
        }
        for class in 0..self.baselines.len() {
            let mut of_class: Vec<f64> = samples
                .iter()
                .filter(|(c, _)| *c == class)
                .map(|&(_, l)| l as f64)
                .collect();
            if !of_class.is_empty() {
                self.baselines[class] = Some(median(&mut of_class) as u64);
                self.clean[class].clear();
            }
        }
        self.window = Window {
            started_at: sample.at_nanos,
            ..Window::default()
        };
        self.schedule_probe(sample.at_nanos);
    }

    /// The next probe: one interval on, plus a jitter drawn from the time itself, so that
    /// nodes do not all probe at once.
    fn schedule_probe(&mut self, now_nanos: u64) {
        let interval = self.settings.probe_interval_nanos as f64;
        let unit = (crate::policy::mix64(now_nanos) >> 11) as f64 / (1u64 << 53) as f64;
        self.next_probe_at =
            now_nanos.saturating_add((interval * (1.0 + PROBE_JITTER * unit)) as u64);
    }
}

/// The median of a non-empty list (reorders it).
fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    match values.len() % 2 {
        1 => values[mid],
        _ => (values[mid - 1] + values[mid]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn settings() -> AdaptiveSettings {
        AdaptiveSettings {
            min: 3,
            max: 500,
            initial: 20,
            buffer: 0.25,
            probe_interval_nanos: 30_000 * MS,
        }
    }

    fn sample(class: usize, latency: u64, in_flight: u32, at: u64) -> Sample {
        Sample {
            class,
            latency_nanos: latency,
            in_flight,
            in_flight_at_end: in_flight,
            at_nanos: at,
        }
    }

    /// A lightly loaded start: clean samples of `latency` give class 0 its baseline.
    fn learn(l: &mut GradientLimiter, now: &mut u64, latency: u64) {
        for _ in 0..CLEAN_SAMPLES {
            *now += MS;
            l.record(sample(0, latency, 1, *now));
        }
        assert_eq!(l.baseline(0), Some(latency));
    }

    /// Feeds `count` samples of `latency` spread over `span`, each with the node at its limit
    /// (the traffic offered is more than the limit), from `*now`; returns the limit after.
    fn drive(l: &mut GradientLimiter, now: &mut u64, latency: u64, count: u64, span: u64) -> u32 {
        for _ in 0..count {
            *now += span / count;
            let in_flight = l.limit();
            l.record(sample(0, latency, in_flight, *now));
        }
        l.limit()
    }

    #[test]
    fn the_limit_rises_while_latency_stays_at_the_baseline() {
        let mut l = GradientLimiter::new(settings(), 1, 0);
        let mut now = 0;
        assert_eq!(l.limit(), 20);
        learn(&mut l, &mut now, 10 * MS);
        let after_a_second = drive(&mut l, &mut now, 10 * MS, 100, 1000 * MS);
        assert!(after_a_second > 100, "{after_a_second}");
        let later = drive(&mut l, &mut now, 10 * MS, 100, 1000 * MS);
        assert_eq!(later, 500, "bounded by max");
    }

    #[test]
    fn the_limit_falls_when_the_node_slows_and_never_below_min() {
        let mut l = GradientLimiter::new(settings(), 1, 0);
        let mut now = 0;
        learn(&mut l, &mut now, 10 * MS);
        let high = drive(&mut l, &mut now, 10 * MS, 100, 1000 * MS);
        assert!(high > 100);
        // Four times the baseline: the gradient is 1.25 / 4, clamped to 0.5 per window.
        let lower = drive(&mut l, &mut now, 40 * MS, 20, 240 * MS);
        assert!(lower < high * 3 / 4, "{lower} vs {high}");
        let low = drive(&mut l, &mut now, 40 * MS, 100, 1000 * MS);
        assert_eq!(low, 3, "down to min, never below");
    }

    #[test]
    fn a_node_overloaded_from_the_start_is_probed_and_its_limit_settles() {
        // One core shared by the requests in flight: latency = concurrency × 10 ms. The node is
        // loaded from the first request, so no clean sample ever comes back by itself.
        let mut l = GradientLimiter::new(settings(), 1, 0);
        let mut now = 0;
        let mut probed = false;
        for _ in 0..300 {
            let limit = l.limit();
            drive(&mut l, &mut now, u64::from(limit) * 10 * MS, 10, 100 * MS);
            probed |= l.is_probing();
        }
        assert!(probed, "a probe measured the baseline");
        assert_eq!(l.baseline(0), Some(30 * MS), "latency at min concurrency");
        let settled = l.limit();
        assert!((3..=8).contains(&settled), "{settled}");
    }

    #[test]
    fn an_unreached_limit_does_not_grow() {
        let mut l = GradientLimiter::new(settings(), 1, 0);
        let mut now = 0;
        for _ in 0..300 {
            now += 10 * MS;
            l.record(sample(0, 10 * MS, 2, now));
        }
        assert_eq!(
            l.baseline(0),
            Some(10 * MS),
            "clean samples made the baseline"
        );
        assert!(!l.is_probing(), "a lightly loaded node is never pinned");
        assert_eq!(
            l.limit(),
            20,
            "two in flight say nothing about a limit of 20"
        );
    }

    #[test]
    fn classes_are_measured_against_their_own_baseline() {
        let mut l = GradientLimiter::new(settings(), 2, 0);
        let mut now = 0;
        for i in 0..2 * CLEAN_SAMPLES {
            now += MS;
            l.record(sample(
                i % 2,
                if i % 2 == 0 { MS } else { 100 * MS },
                1,
                now,
            ));
        }
        // A mix of 1 ms static files and 100 ms CGIs, each at its baseline: no queueing.
        for i in 0..3000 {
            now += MS;
            let in_flight = l.limit();
            let latency = if i % 2 == 0 { MS } else { 100 * MS };
            l.record(sample(i % 2, latency, in_flight, now));
        }
        assert_eq!(
            l.limit(),
            500,
            "a mix of classes is not mistaken for queueing"
        );
    }

    #[test]
    fn a_probe_pins_the_limit_to_min_and_measures_the_baselines_again() {
        let mut l = GradientLimiter::new(settings(), 1, 0);
        let mut now = 0;
        learn(&mut l, &mut now, 10 * MS);
        drive(&mut l, &mut now, 10 * MS, 100, 1000 * MS);
        // Thirty seconds on (plus jitter) the probe starts.
        now += 35_000 * MS;
        drive(&mut l, &mut now, 10 * MS, 1, MS);
        assert!(l.is_probing());
        assert_eq!(l.limit(), 3);
        // Samples that started with more than `min` in flight do not count…
        for _ in 0..60 {
            now += MS;
            l.record(sample(0, 50 * MS, 10, now));
        }
        assert!(l.is_probing());
        // …those at `min` do; their median is the new baseline.
        for i in 0..PROBE_SAMPLES as u64 {
            now += MS;
            l.record(sample(0, (20 + i % 3) * MS, 3, now));
        }
        assert!(!l.is_probing());
        assert_eq!(l.baseline(0), Some(21 * MS));
        assert!(l.limit() > 3, "the limit from before the probe is back");
    }

    #[test]
    fn a_limit_stuck_at_min_probes_and_takes_a_slower_node_as_it_is() {
        let mut l = GradientLimiter::new(settings(), 1, 0);
        let mut now = 0;
        learn(&mut l, &mut now, 10 * MS);
        // The node is now 10 times slower for good: the limit falls to min, then a probe
        // measures the new baseline and the limit can rise again.
        drive(&mut l, &mut now, 100 * MS, 300, 3000 * MS);
        assert_eq!(l.baseline(0), Some(100 * MS));
        let risen = drive(&mut l, &mut now, 100 * MS, 100, 1000 * MS);
        assert!(risen > 20, "{risen}");
    }
}
