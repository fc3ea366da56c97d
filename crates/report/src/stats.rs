//! Summaries over repetitions: the mean and the half-width of its 95 % confidence interval,
//! Student t over the per-repetition values (the method of independent replications), and a
//! ratio of two contenders measured in pairs ([`PairedRatio`]: Student t over the pairs' log
//! ratios).

/// Two-sided 95 % Student t quantiles for 1..=30 degrees of freedom; beyond, the normal's 1.96.
const T95: [f64; 30] = [
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
    2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
    2.052, 2.048, 2.045, 2.042,
];

/// The two-sided 95 % Student t quantile for `dof` degrees of freedom (0 for none).
pub fn t95(dof: usize) -> f64 {
    if dof == 0 {
        0.0
    } else {
        T95.get(dof - 1).copied().unwrap_or(1.96)
    }
}

/// The arithmetic mean (0 for no samples).
pub fn mean(samples: &[f64]) -> f64 {
    if samples.is_empty() {
        0.0
    } else {
        samples.iter().sum::<f64>() / samples.len() as f64
    }
}

/// Half-width of the 95 % confidence interval of the mean: t(n−1) · s / √n; 0 with fewer than
/// two samples (one repetition says nothing about its own noise).
pub fn ci95_half_width(samples: &[f64]) -> f64 {
    let n = samples.len();
    if n < 2 {
        return 0.0;
    }
    let m = mean(samples);
    let var = samples.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64;
    t95(n - 1) * (var / n as f64).sqrt()
}

/// A mean and the half-width of its 95 % confidence interval.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Estimate {
    pub mean: f64,
    pub ci95: f64,
}

impl Estimate {
    pub fn of(samples: &[f64]) -> Estimate {
        Estimate {
            mean: mean(samples),
            ci95: ci95_half_width(samples),
        }
    }
}

/// A ratio a / b measured in pairs: each pair (aᵢ, bᵢ) was measured side by side (one round of
/// interleaved runs), so whatever slowed the machine during that round slowed both, and
/// aᵢ / bᵢ keeps the comparison while dropping the common factor.
///
/// The estimate works on dᵢ = ln(aᵢ / bᵢ): its mean d̄ and the 95 % Student-t interval
/// d̄ ± t(n−1) · s_d / √n over the pairs, taken back to ratios with exp. Logs make a common
/// multiplicative slow-down additive, and a / b and b / a the same interval turned over; the
/// centre is the geometric mean of the pair ratios, always inside the interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PairedRatio {
    /// exp(d̄): the geometric mean of the pairs' ratios.
    pub ratio: f64,
    /// The 95 % interval of the ratio; `None` with fewer than two pairs.
    pub interval: Option<(f64, f64)>,
    /// Pairs used (both values finite and positive).
    pub pairs: usize,
}

impl PairedRatio {
    /// The estimate over `pairs` (a, b); pairs with a value that is not finite and positive are
    /// left out (a window that completed nothing has no ratio). `None` when no pair is left.
    pub fn of(pairs: &[(f64, f64)]) -> Option<PairedRatio> {
        let logs: Vec<f64> = pairs
            .iter()
            .filter(|(a, b)| a.is_finite() && b.is_finite() && *a > 0.0 && *b > 0.0)
            .map(|(a, b)| (a / b).ln())
            .collect();
        if logs.is_empty() {
            return None;
        }
        let m = mean(&logs);
        let h = ci95_half_width(&logs);
        Some(PairedRatio {
            ratio: m.exp(),
            interval: (logs.len() >= 2).then(|| ((m - h).exp(), (m + h).exp())),
            pairs: logs.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paired_ratio_is_student_t_over_log_ratios() {
        // Ratios 1.1, 1.2, 1.3: logs 0.09531, 0.18232, 0.26236; mean 0.18000, s 0.08355,
        // s/√3 0.04824, t(2) 4.303 → half-width 0.20757; exp: 1.19722 [0.97281, 1.47339].
        let pairs = [(110.0, 100.0), (240.0, 200.0), (130.0, 100.0)];
        let r = PairedRatio::of(&pairs).unwrap();
        assert_eq!(r.pairs, 3);
        assert!((r.ratio - 1.19722).abs() < 1e-4, "{r:?}");
        let (lo, hi) = r.interval.unwrap();
        assert!(
            (lo - 0.97281).abs() < 1e-4 && (hi - 1.47339).abs() < 1e-4,
            "{r:?}"
        );
        // A common factor in a round (the machine twice as slow for both) changes nothing.
        let slowed = [(55.0, 50.0), (240.0, 200.0), (390.0, 300.0)];
        let s = PairedRatio::of(&slowed).unwrap();
        assert!((s.ratio - r.ratio).abs() < 1e-12);
        assert!((s.interval.unwrap().0 - lo).abs() < 1e-12);
        // Turned over: the reciprocal interval.
        let flipped: Vec<(f64, f64)> = pairs.iter().map(|&(a, b)| (b, a)).collect();
        let f = PairedRatio::of(&flipped).unwrap();
        let (flo, fhi) = f.interval.unwrap();
        assert!((f.ratio * r.ratio - 1.0).abs() < 1e-12);
        assert!((flo * hi - 1.0).abs() < 1e-12 && (fhi * lo - 1.0).abs() < 1e-12);
        // Identical ratios: a zero-width interval; one pair: no interval; nothing usable: none.
        let same = PairedRatio::of(&[(12.0, 10.0), (24.0, 20.0)]).unwrap();
        let (a, b) = same.interval.unwrap();
        assert!((a - 1.2).abs() < 1e-12 && (b - 1.2).abs() < 1e-12);
        let one = PairedRatio::of(&[(12.0, 10.0), (0.0, 10.0), (f64::NAN, 1.0)]).unwrap();
        assert_eq!((one.pairs, one.interval), (1, None));
        assert!(PairedRatio::of(&[(0.0, 1.0)]).is_none());
        assert!(PairedRatio::of(&[]).is_none());
    }

    #[test]
    fn half_width_matches_a_hand_computation() {
        // 10, 12, 14, 16: mean 13, s² = (9 + 1 + 1 + 9) / 3 = 20/3, s/√n = √(20/3)/2 = 1.29099,
        // t(3) = 3.182 → 4.10794.
        let e = Estimate::of(&[10.0, 12.0, 14.0, 16.0]);
        assert_eq!(e.mean, 13.0);
        assert!((e.ci95 - 4.10794).abs() < 1e-4, "{}", e.ci95);
        assert_eq!(ci95_half_width(&[5.0]), 0.0);
        assert_eq!(ci95_half_width(&[]), 0.0);
        assert_eq!(ci95_half_width(&[3.0, 3.0, 3.0]), 0.0);
        assert_eq!(t95(1), 12.706);
        assert_eq!(t95(100), 1.96);
    }
}
