//! Summaries over repetitions: the mean and the half-width of its 95 % confidence interval,
//! Student t over the per-repetition values (the method of independent replications).

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

#[cfg(test)]
mod tests {
    use super::*;

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
