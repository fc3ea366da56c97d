//! Arrival processes: when requests (or sessions) start.
//!
//! A schedule is a *rate profile* λ(t) — the mean rate times a load factor that phases, a ramp
//! and an on/off burst shape — and a *unit-rate process* whose gaps have mean 1 (constant,
//! exponential for Poisson, Weibull). Each gap is spent as "work" against the integral of λ, so
//! the process keeps its shape while the rate changes, and the expected number of arrivals in
//! any interval is exactly ∫λ over it. Times are seconds from the start of the run; nothing here
//! reads a clock.

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::dist::open01;
use crate::rng::WorkloadRng;

/// The shape of the gaps between arrivals at unit rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "process", rename_all = "kebab-case")]
pub enum ArrivalKind {
    /// Evenly spaced: the schedule of a constant-rate client (wrk2, vegeta).
    Constant,
    /// Exponential gaps.
    Poisson,
    /// Weibull gaps with the given shape (below 1: burstier than Poisson), as the CAP paper
    /// models the inter-arrival time of hits.
    Weibull { shape: f64 },
}

impl ArrivalKind {
    fn unit_gap(&self, rng: &mut impl RngCore) -> f64 {
        match *self {
            ArrivalKind::Constant => 1.0,
            ArrivalKind::Poisson => -open01(rng).ln(),
            ArrivalKind::Weibull { shape } => {
                (-open01(rng).ln()).powf(1.0 / shape) / gamma(1.0 + 1.0 / shape)
            }
        }
    }
}

/// Γ(x) for x > 0 by the Lanczos approximation (g = 7, 9 terms; relative error ~1e-15).
pub fn gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma(1.0 - x))
    } else {
        let x = x - 1.0;
        let mut a = G[0];
        let t = x + 7.5;
        for (i, g) in G.iter().enumerate().skip(1) {
            a += g / (x + i as f64);
        }
        (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * a
    }
}

/// A stretch of the run whose load factor moves linearly from `from` to `to` (Polygraph phases:
/// warm, fill, top, dec, idle, inc, cool, ...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub name: String,
    pub duration_s: f64,
    pub from: f64,
    pub to: f64,
    /// Recurrence ratio during this phase, overriding the request mix's own.
    #[serde(default)]
    pub recurrence: Option<f64>,
}

/// On/off burstiness as in Banga & Druschel §5.4: for `fraction` of each `period_s` the rate is
/// `peak` times the mean; the rest of the period runs at the lower rate that keeps the mean.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Burst {
    pub peak: f64,
    pub fraction: f64,
    pub period_s: f64,
}

impl Burst {
    /// Load factor outside the burst: `(1 − peak·fraction) / (1 − fraction)`.
    pub fn low(&self) -> f64 {
        ((1.0 - self.peak * self.fraction) / (1.0 - self.fraction)).max(0.0)
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(self.peak >= 1.0 && self.peak.is_finite()) {
            return Err(format!("burst peak must be at least 1x, got {}", self.peak));
        }
        if !(self.fraction > 0.0 && self.fraction < 1.0) {
            return Err(format!(
                "burst fraction must be between 0 and 100 %, got {} %",
                self.fraction * 100.0
            ));
        }
        if self.peak * self.fraction > 1.0 + 1e-12 {
            return Err(format!(
                "a burst of {}x for {} % of the time would exceed the mean rate on its own",
                self.peak,
                self.fraction * 100.0
            ));
        }
        if !(self.period_s > 0.0 && self.period_s.is_finite()) {
            return Err(format!(
                "burst period must be positive, got {}s",
                self.period_s
            ));
        }
        Ok(())
    }

    /// The factor at `t`, and when it next changes. The burst sits at the start of each period.
    fn piece(&self, t: f64) -> (f64, f64) {
        let k = (t / self.period_s).floor();
        let start = k * self.period_s;
        let on_end = start + self.fraction * self.period_s;
        if t < on_end {
            (self.peak, on_end)
        } else {
            (self.low(), start + self.period_s)
        }
    }
}

/// The offered rate over time: `rate × phase factor(t) × burst factor(t)` until `end_s`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateProfile {
    pub rate: f64,
    pub end_s: f64,
    phases: Vec<(f64, f64, f64, f64)>, // (start, end, from, to)
    burst: Option<Burst>,
    /// The first segment is the ramp, not one of the caller's phases.
    ramp: bool,
}

/// Where the rate is linear: the rate at `t`, its slope, and where the piece ends.
struct Piece {
    rate: f64,
    slope: f64,
    end: f64,
}

impl RateProfile {
    /// `ramp_s` (may be 0) rises linearly from 0 to full rate before the phases (or the flat
    /// rest of the run) begin. With phases, the run ends with the last phase or at `duration_s`,
    /// whichever is first.
    pub fn new(
        rate: f64,
        duration_s: f64,
        ramp_s: f64,
        phases: &[Phase],
        burst: Option<Burst>,
    ) -> Result<RateProfile, String> {
        if !(rate.is_finite() && rate > 0.0) {
            return Err(format!("rate must be positive, got {rate}"));
        }
        if !(duration_s.is_finite() && duration_s > 0.0) {
            return Err(format!("duration must be positive, got {duration_s}s"));
        }
        if let Some(b) = burst {
            b.validate()?;
        }
        let mut segs = Vec::new();
        let mut t = 0.0;
        if ramp_s > 0.0 {
            segs.push((0.0, ramp_s, 0.0, 1.0));
            t = ramp_s;
        }
        for p in phases {
            if !(p.duration_s.is_finite() && p.duration_s > 0.0) {
                return Err(format!("phase {:?}: duration must be positive", p.name));
            }
            if !(p.from >= 0.0 && p.to >= 0.0 && p.from.is_finite() && p.to.is_finite()) {
                return Err(format!("phase {:?}: load factors must be ≥ 0", p.name));
            }
            if let Some(r) = p.recurrence {
                if !(0.0..=1.0).contains(&r) {
                    return Err(format!("phase {:?}: recurrence must be in [0, 1]", p.name));
                }
            }
            segs.push((t, t + p.duration_s, p.from, p.to));
            t += p.duration_s;
        }
        let end_s = if phases.is_empty() {
            if t < duration_s {
                segs.push((t, duration_s, 1.0, 1.0));
            }
            duration_s
        } else {
            t.min(duration_s)
        };
        Ok(RateProfile {
            rate,
            end_s,
            phases: segs,
            burst,
            ramp: ramp_s > 0.0,
        })
    }

    fn piece(&self, t: f64) -> Piece {
        let (mut factor, mut slope, mut end) = (0.0, 0.0, self.end_s);
        if let Some(&(s, e, from, to)) = self.phases.iter().find(|p| t >= p.0 && t < p.1) {
            slope = (to - from) / (e - s);
            factor = from + slope * (t - s);
            end = e.min(self.end_s);
        }
        if let Some(b) = &self.burst {
            let (f, e) = b.piece(t);
            factor *= f;
            slope *= f;
            end = end.min(e);
        }
        Piece {
            rate: self.rate * factor,
            slope: self.rate * slope,
            end,
        }
    }

    /// λ(t) in arrivals per second.
    pub fn rate_at(&self, t: f64) -> f64 {
        if t < 0.0 || t >= self.end_s {
            return 0.0;
        }
        self.piece(t).rate
    }

    /// The phase index at `t` in the list given to [`RateProfile::new`] (a ramp is not counted).
    pub fn phase_at(&self, t: f64) -> Option<usize> {
        let ramp = usize::from(self.ramp);
        let i = self.phases.iter().position(|p| t >= p.0 && t < p.1)?;
        i.checked_sub(ramp)
    }

    /// The time `x ≥ t` at which `∫_t^x λ = work`, or `None` if the run ends first.
    pub fn advance(&self, mut t: f64, mut work: f64) -> Option<f64> {
        while t < self.end_s {
            let p = self.piece(t);
            let len = p.end - t;
            let area = p.rate * len + 0.5 * p.slope * len * len;
            if area >= work && area > 0.0 {
                let d = if p.slope.abs() < 1e-12 {
                    work / p.rate
                } else {
                    let disc = (p.rate * p.rate + 2.0 * p.slope * work).max(0.0);
                    (disc.sqrt() - p.rate) / p.slope
                };
                let x = t + d.clamp(0.0, len);
                // Summed gaps drift by a few ulps; an arrival a nanosecond before the end is
                // that drift, not a real arrival (it would make shards disagree with one run).
                return (x < self.end_s - 1e-9).then_some(x);
            }
            work -= area.max(0.0);
            // Guard against a piece that makes no progress (floating point at its boundary).
            t = if p.end > t { p.end } else { t + 1e-9 };
        }
        None
    }

    /// ∫λ over `[a, b)`: the expected number of arrivals.
    pub fn expected(&self, a: f64, b: f64) -> f64 {
        let mut t = a.max(0.0);
        let b = b.min(self.end_s);
        let mut sum = 0.0;
        while t < b {
            let p = self.piece(t);
            let e = p.end.min(b);
            let len = e - t;
            sum += p.rate * len + 0.5 * p.slope * len * len;
            t = if e > t { e } else { t + 1e-9 };
        }
        sum
    }
}

/// Arrival times of one stream, in seconds from the start.
#[derive(Debug, Clone)]
pub struct Arrivals {
    profile: RateProfile,
    kind: ArrivalKind,
    rng: WorkloadRng,
    t: f64,
    pending: f64,
}

impl Arrivals {
    /// `phase` in `[0, 1)` is the work spent before the first arrival of a constant schedule;
    /// shard `i` of `n` uses `i / n` so that the shards' union is one evenly spaced schedule.
    pub fn new(profile: RateProfile, kind: ArrivalKind, rng: WorkloadRng, phase: f64) -> Self {
        Arrivals {
            profile,
            kind,
            rng,
            t: 0.0,
            pending: phase,
        }
    }

    pub fn profile(&self) -> &RateProfile {
        &self.profile
    }
}

impl Iterator for Arrivals {
    type Item = f64;
    fn next(&mut self) -> Option<f64> {
        let work = match self.kind {
            // A constant first arrival comes after its phase; a random one after a full gap.
            ArrivalKind::Constant => std::mem::replace(&mut self.pending, 1.0),
            _ => self.kind.unit_gap(&mut self.rng),
        };
        let next = self.profile.advance(self.t, work)?;
        self.t = next;
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    fn count_in(v: &[f64], a: f64, b: f64) -> usize {
        v.iter().filter(|&&t| t >= a && t < b).count()
    }

    #[test]
    fn constant_is_exact_and_shards_interleave() {
        let p = RateProfile::new(100.0, 2.0, 0.0, &[], None).unwrap();
        let a: Vec<f64> =
            Arrivals::new(p.clone(), ArrivalKind::Constant, stream(1, "a"), 0.0).collect();
        assert_eq!(a.len(), 200);
        assert!((a[1] - a[0] - 0.01).abs() < 1e-12);
        let half = RateProfile::new(50.0, 2.0, 0.0, &[], None).unwrap();
        let s0: Vec<f64> =
            Arrivals::new(half.clone(), ArrivalKind::Constant, stream(1, "a"), 0.0).collect();
        let s1: Vec<f64> =
            Arrivals::new(half, ArrivalKind::Constant, stream(1, "a"), 0.5).collect();
        let mut u: Vec<f64> = s0.into_iter().chain(s1).collect();
        u.sort_by(f64::total_cmp);
        for (x, y) in u.iter().zip(&a) {
            assert!((x - y).abs() < 1e-9);
        }
    }

    #[test]
    fn poisson_and_weibull_have_the_right_mean_rate() {
        for kind in [ArrivalKind::Poisson, ArrivalKind::Weibull { shape: 0.6 }] {
            let p = RateProfile::new(1000.0, 100.0, 0.0, &[], None).unwrap();
            let n = Arrivals::new(p, kind, stream(5, "a"), 0.0).count() as f64;
            assert!((n - 100_000.0).abs() < 2_000.0, "{kind:?}: {n}");
        }
        // Poisson gaps: coefficient of variation 1.
        let p = RateProfile::new(10.0, 10_000.0, 0.0, &[], None).unwrap();
        let t: Vec<f64> = Arrivals::new(p, ArrivalKind::Poisson, stream(2, "a"), 0.0).collect();
        let gaps: Vec<f64> = t.windows(2).map(|w| w[1] - w[0]).collect();
        let m = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let sd = (gaps.iter().map(|g| (g - m) * (g - m)).sum::<f64>() / gaps.len() as f64).sqrt();
        assert!(
            (m - 0.1).abs() < 0.002 && (sd / m - 1.0).abs() < 0.03,
            "{m} {sd}"
        );
    }

    #[test]
    fn burst_duty_cycle_and_peak() {
        // Banga & Druschel's (6, 5): 6x the mean for 5 % of each 100 s period.
        let b = Burst {
            peak: 6.0,
            fraction: 0.05,
            period_s: 100.0,
        };
        assert!((b.low() - 0.7 / 0.95).abs() < 1e-12);
        let p = RateProfile::new(100.0, 200.0, 0.0, &[], Some(b)).unwrap();
        let a: Vec<f64> =
            Arrivals::new(p.clone(), ArrivalKind::Constant, stream(1, "b"), 0.0).collect();
        assert!((a.len() as f64 - 20_000.0).abs() <= 1.0, "{}", a.len());
        // ±1: an arrival due exactly on a boundary may land either side by a rounding error.
        assert!(count_in(&a, 0.0, 5.0).abs_diff(3000) <= 1);
        assert!(count_in(&a, 100.0, 105.0).abs_diff(3000) <= 1);
        let low = count_in(&a, 10.0, 11.0) as f64;
        assert!((low - 100.0 * 0.7 / 0.95).abs() <= 1.0, "{low}");
        assert!((p.expected(0.0, 100.0) - 10_000.0).abs() < 1e-6);
        assert!(Burst {
            peak: 6.0,
            fraction: 0.5,
            period_s: 1.0
        }
        .validate()
        .is_err());
    }

    #[test]
    fn ramp_and_phases() {
        let phases = [
            Phase {
                name: "inc".into(),
                duration_s: 10.0,
                from: 0.0,
                to: 1.0,
                recurrence: None,
            },
            Phase {
                name: "top".into(),
                duration_s: 10.0,
                from: 1.0,
                to: 1.0,
                recurrence: Some(0.5),
            },
            Phase {
                name: "idle".into(),
                duration_s: 5.0,
                from: 0.0,
                to: 0.0,
                recurrence: None,
            },
            Phase {
                name: "dec".into(),
                duration_s: 10.0,
                from: 1.0,
                to: 0.5,
                recurrence: None,
            },
        ];
        let p = RateProfile::new(100.0, 1e9, 0.0, &phases, None).unwrap();
        assert_eq!(p.end_s, 35.0);
        let a: Vec<f64> =
            Arrivals::new(p.clone(), ArrivalKind::Constant, stream(1, "p"), 0.0).collect();
        assert!((count_in(&a, 0.0, 10.0) as f64 - 500.0).abs() <= 1.0);
        assert!((count_in(&a, 10.0, 20.0) as f64 - 1000.0).abs() <= 1.0);
        assert_eq!(count_in(&a, 20.0, 25.0), 0);
        assert!((count_in(&a, 25.0, 35.0) as f64 - 750.0).abs() <= 1.0);
        assert_eq!(p.phase_at(12.0), Some(1));
        // Quadratic inversion: arrivals on the rising ramp follow t = sqrt(2k / slope).
        let k = 50.0;
        assert!(
            (a[50] - (2.0 * k / 10.0f64).sqrt()).abs() < 1e-6,
            "{}",
            a[50]
        );
        let ramp = RateProfile::new(100.0, 20.0, 10.0, &[], None).unwrap();
        assert!((ramp.expected(0.0, 20.0) - 1500.0).abs() < 1e-6);
        assert_eq!(ramp.phase_at(5.0), None);
    }

    #[test]
    fn gamma_reference_values() {
        assert!((gamma(1.0) - 1.0).abs() < 1e-12);
        assert!((gamma(5.0) - 24.0).abs() < 1e-9);
        assert!((gamma(0.5) - std::f64::consts::PI.sqrt()).abs() < 1e-12);
    }
}
