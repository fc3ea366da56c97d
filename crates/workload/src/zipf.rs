//! Popularity: Zipf(α) and uniform choice over `n` objects.

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::dist::uniform01;

/// How often each of `n` objects is requested, by rank.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "law", rename_all = "kebab-case")]
pub enum Popularity {
    Uniform,
    /// `P(rank k) ∝ 1 / k^alpha`.
    Zipf {
        alpha: f64,
    },
}

impl Popularity {
    /// A rank in `1..=n` (`n ≥ 1`).
    pub fn sample_rank(&self, n: u64, rng: &mut impl RngCore) -> u64 {
        match *self {
            Popularity::Uniform => 1 + ((uniform01(rng) * n as f64) as u64).min(n - 1),
            Popularity::Zipf { alpha } => zipf_rank(alpha, n, rng),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Popularity::Zipf { alpha } if !(alpha.is_finite() && alpha >= 0.0) => {
                Err(format!("zipf exponent must be ≥ 0, got {alpha}"))
            }
            _ => Ok(()),
        }
    }
}

/// Rejection-inversion sampling of Hörmann & Derflinger (1996), "Rejection-inversion to generate
/// variates from monotone discrete distributions": O(1) time and memory for any `n` and any
/// exponent ≥ 0, so the support can grow between draws (recurrence over a growing working set)
/// without rebuilding a table.
fn zipf_rank(s: f64, n: u64, rng: &mut impl RngCore) -> u64 {
    if n <= 1 {
        return 1;
    }
    let h = |x: f64| (-s * x.ln()).exp();
    let h_integral = |x: f64| {
        let lx = x.ln();
        helper2((1.0 - s) * lx) * lx
    };
    let h_integral_inv = |x: f64| {
        let t = (x * (1.0 - s)).max(-1.0);
        (helper1(t) * x).exp()
    };
    let hx1 = h_integral(1.5) - 1.0;
    let hn = h_integral(n as f64 + 0.5);
    let threshold = 2.0 - h_integral_inv(h_integral(2.5) - h(2.0));
    loop {
        let u = hn + uniform01(rng) * (hx1 - hn);
        let x = h_integral_inv(u);
        let k = ((x + 0.5) as u64).clamp(1, n);
        let kf = k as f64;
        if kf - x <= threshold || u >= h_integral(kf + 0.5) - h(kf) {
            return k;
        }
    }
}

/// `ln(1 + x) / x`, continuous at 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x − 1) / x`, continuous at 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    fn pmf(s: f64, n: u64) -> Vec<f64> {
        let w: Vec<f64> = (1..=n).map(|k| (k as f64).powf(-s)).collect();
        let z: f64 = w.iter().sum();
        w.into_iter().map(|x| x / z).collect()
    }

    #[test]
    fn zipf_frequencies_match_the_pmf() {
        for (s, n) in [(1.0, 50u64), (0.8, 1000), (1.4, 10), (0.0, 7)] {
            let p = Popularity::Zipf { alpha: s };
            let mut r = stream(9, "zipf");
            let draws = 400_000;
            let mut counts = vec![0u64; n as usize];
            for _ in 0..draws {
                counts[(p.sample_rank(n, &mut r) - 1) as usize] += 1;
            }
            let want = pmf(s, n);
            for k in 0..(n as usize).min(5) {
                let got = counts[k] as f64 / draws as f64;
                // Five standard errors of a binomial proportion.
                let se = (want[k] * (1.0 - want[k]) / draws as f64).sqrt();
                assert!(
                    (got - want[k]).abs() < 5.0 * se,
                    "s={s} n={n} rank {}: {got} vs {}",
                    k + 1,
                    want[k]
                );
            }
        }
    }

    #[test]
    fn uniform_and_edge_cases() {
        let mut r = stream(1, "u");
        let mut c = [0u32; 4];
        for _ in 0..40_000 {
            c[(Popularity::Uniform.sample_rank(4, &mut r) - 1) as usize] += 1;
        }
        assert!(c.iter().all(|&x| (9_500..10_500).contains(&x)), "{c:?}");
        assert_eq!(Popularity::Zipf { alpha: 1.0 }.sample_rank(1, &mut r), 1);
        assert!(Popularity::Zipf { alpha: -1.0 }.validate().is_err());
    }
}
