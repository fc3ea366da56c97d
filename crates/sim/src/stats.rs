//! Summaries over replications: point estimates with 95 % confidence intervals (Student t over
//! the per-replication values, the method of independent replications).

use serde::Serialize;

/// A value and the half-width of its 95 % confidence interval (0 with one replication).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Estimate {
    pub value: f64,
    pub ci95: f64,
}

pub use capstan_report::stats::t95;

impl Estimate {
    /// The mean and its 95 % CI half-width (capstan-report's Student t), rounded for the JSON.
    pub fn of(samples: &[f64]) -> Estimate {
        let e = capstan_report::Estimate::of(samples);
        Estimate {
            value: round(e.mean),
            ci95: round(e.ci95),
        }
    }
}

/// Rounds to 6 significant digits: the JSON should carry what the model means, not float noise.
pub fn round(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return if x.is_finite() { 0.0 } else { x };
    }
    let digits = 5 - x.abs().log10().floor() as i32;
    let f = 10f64.powi(digits.clamp(-300, 300));
    (x * f).round() / f
}

/// The `q`-quantile (0..=1) of sorted nanosecond samples, in milliseconds (nearest rank).
pub fn quantile_ms(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1e6
}

pub fn mean_ms(samples: &[u64]) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.iter().map(|&x| x as f64).sum::<f64>() / samples.len() as f64 / 1e6
}

/// Fraction of sorted samples at or below `x_ms`.
pub fn cdf_at(sorted: &[u64], x_ms: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let x = (x_ms * 1e6) as u64;
    sorted.partition_point(|&v| v <= x) as f64 / sorted.len() as f64
}

/// Page-latency grid of the CDF, ms: 40 log-spaced points from 10 ms to 100 s.
pub fn cdf_grid() -> Vec<f64> {
    (0..=40)
        .map(|i| round(10.0 * 10f64.powf(i as f64 / 10.0)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn estimates_and_quantiles() {
        let e = Estimate::of(&[1.0, 2.0, 3.0]);
        assert_eq!(e.value, 2.0);
        assert!((e.ci95 - 4.303 / 3f64.sqrt()).abs() < 1e-4);
        let s: Vec<u64> = (1..=100).map(|i| i * 1_000_000).collect();
        assert_eq!(quantile_ms(&s, 0.9), 90.0);
        assert_eq!(quantile_ms(&s, 0.5), 50.0);
        assert_eq!(cdf_at(&s, 10.0), 0.1);
        assert_eq!(round(1.234_567_89), 1.234_57);
        assert_eq!(cdf_grid().len(), 41);
    }
}
