//! Random variates with pinned sampling algorithms.

use rand::RngCore;
use serde::{Deserialize, Serialize};

/// A uniform draw in `[0, 1)` with 53 random bits.
pub fn uniform01(rng: &mut impl RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A uniform draw in `(0, 1]`, safe to take the logarithm of or divide by.
pub fn open01(rng: &mut impl RngCore) -> f64 {
    1.0 - uniform01(rng)
}

/// A standard normal draw by Box–Muller (one of the pair is discarded, so each call consumes
/// exactly two uniforms and streams stay aligned).
pub fn std_normal(rng: &mut impl RngCore) -> f64 {
    let u1 = open01(rng);
    let u2 = uniform01(rng);
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Standard normal CDF, via the Chebyshev-fitted complementary error function of Numerical
/// Recipes (`erfcc`, fractional error below 1.2e-7 everywhere), which is plenty for checking
/// mass splits and needs no special-function crate.
pub fn std_normal_cdf(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// A probability distribution over non-negative reals, as written in a configuration file:
/// `{ dist = "exp", mean = 4608.0 }`, `{ dist = "log-normal", mu = 7.64, sigma = 1.705 }`, ...
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Dist {
    Const {
        value: f64,
    },
    Uniform {
        low: f64,
        high: f64,
    },
    Exp {
        mean: f64,
    },
    /// Normal with mean `mean` and standard deviation `sd`, negative draws clamped to 0 (a
    /// duration or a size cannot be negative): Polygraph's `norm(0.3sec, 0.1sec)` think time.
    Normal {
        mean: f64,
        sd: f64,
    },
    /// `ln X ~ N(mu, sigma²)`.
    LogNormal {
        mu: f64,
        sigma: f64,
    },
    /// `P(X > x) = (k / x)^alpha` for `x ≥ k`.
    Pareto {
        alpha: f64,
        k: f64,
    },
    Weibull {
        shape: f64,
        scale: f64,
    },
    /// Inverse Gaussian (Wald) with mean `mu` and shape `lambda`.
    InverseGaussian {
        mu: f64,
        lambda: f64,
    },
    /// Lognormal body with a Pareto tail, spliced at the Pareto scale `k` the way SURGE does it
    /// (Barford & Crovella, SIGMETRICS 1998): draw the lognormal; if it falls below `k` it is the
    /// size, otherwise the size is a fresh Pareto(`alpha`, `k`) draw. The body therefore holds
    /// `Φ((ln k − mu) / sigma)` of the mass and the CDF is continuous at `k`.
    LogNormalPareto {
        mu: f64,
        sigma: f64,
        alpha: f64,
        k: f64,
    },
}

impl Dist {
    /// Polygraph's `logn(mean, sd)`, which gives the mean and standard deviation of the
    /// lognormal variable itself rather than of its logarithm.
    pub fn lognormal_mean_sd(mean: f64, sd: f64) -> Dist {
        let sigma2 = (1.0 + (sd * sd) / (mean * mean)).ln();
        Dist::LogNormal {
            mu: mean.ln() - sigma2 / 2.0,
            sigma: sigma2.sqrt(),
        }
    }

    pub fn sample(&self, rng: &mut impl RngCore) -> f64 {
        match *self {
            Dist::Const { value } => value,
            Dist::Uniform { low, high } => low + (high - low) * uniform01(rng),
            Dist::Exp { mean } => -mean * open01(rng).ln(),
            Dist::Normal { mean, sd } => (mean + sd * std_normal(rng)).max(0.0),
            Dist::LogNormal { mu, sigma } => (mu + sigma * std_normal(rng)).exp(),
            Dist::Pareto { alpha, k } => k / open01(rng).powf(1.0 / alpha),
            Dist::Weibull { shape, scale } => scale * (-open01(rng).ln()).powf(1.0 / shape),
            Dist::InverseGaussian { mu, lambda } => {
                // Michael, Schucany & Haas (1976).
                let nu = std_normal(rng);
                let y = nu * nu;
                let x = mu + mu * mu * y / (2.0 * lambda)
                    - mu / (2.0 * lambda) * (4.0 * mu * lambda * y + mu * mu * y * y).sqrt();
                if uniform01(rng) <= mu / (mu + x) {
                    x
                } else {
                    mu * mu / x
                }
            }
            Dist::LogNormalPareto {
                mu,
                sigma,
                alpha,
                k,
            } => {
                let z = std_normal(rng);
                if z < (k.ln() - mu) / sigma {
                    (mu + sigma * z).exp()
                } else {
                    k / open01(rng).powf(1.0 / alpha)
                }
            }
        }
    }

    /// The mean, where it is finite and has a closed form here.
    pub fn mean(&self) -> Option<f64> {
        match *self {
            Dist::Const { value } => Some(value),
            Dist::Uniform { low, high } => Some((low + high) / 2.0),
            Dist::Exp { mean } => Some(mean),
            // The clamp at 0 moves the mean only when 0 is within reach (mean < 4 sd).
            Dist::Normal { mean, sd } if mean >= 4.0 * sd => Some(mean),
            Dist::LogNormal { mu, sigma } => Some((mu + sigma * sigma / 2.0).exp()),
            Dist::Pareto { alpha, k } if alpha > 1.0 => Some(alpha * k / (alpha - 1.0)),
            Dist::InverseGaussian { mu, .. } => Some(mu),
            _ => None,
        }
    }

    /// Fraction of a [`Dist::LogNormalPareto`] that comes from the body; 1 for other laws.
    pub fn body_fraction(&self) -> f64 {
        match *self {
            Dist::LogNormalPareto { mu, sigma, k, .. } => std_normal_cdf((k.ln() - mu) / sigma),
            _ => 1.0,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let pos = |v: f64| v.is_finite() && v > 0.0;
        let ok = match *self {
            Dist::Const { value } => value.is_finite() && value >= 0.0,
            Dist::Uniform { low, high } => low.is_finite() && high.is_finite() && low <= high,
            Dist::Exp { mean } => pos(mean),
            Dist::Normal { mean, sd } => mean.is_finite() && sd.is_finite() && sd >= 0.0,
            Dist::LogNormal { mu, sigma } => mu.is_finite() && pos(sigma),
            Dist::Pareto { alpha, k } => pos(alpha) && pos(k),
            Dist::Weibull { shape, scale } => pos(shape) && pos(scale),
            Dist::InverseGaussian { mu, lambda } => pos(mu) && pos(lambda),
            Dist::LogNormalPareto {
                mu,
                sigma,
                alpha,
                k,
            } => mu.is_finite() && pos(sigma) && pos(alpha) && pos(k),
        };
        if ok {
            Ok(())
        } else {
            Err(format!("invalid distribution parameters: {self:?}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    fn sample_mean(d: Dist, n: usize) -> f64 {
        let mut r = stream(7, "dist-test");
        (0..n).map(|_| d.sample(&mut r)).sum::<f64>() / n as f64
    }

    fn near(got: f64, want: f64, rel: f64) -> bool {
        (got - want).abs() / want.abs() < rel
    }

    #[test]
    fn means_match_closed_forms() {
        let cases = [
            Dist::Exp { mean: 4608.0 },
            Dist::Uniform {
                low: 86_400.0,
                high: 31_536_000.0,
            },
            Dist::LogNormal {
                mu: 7.640,
                sigma: 1.0,
            },
            Dist::Pareto { alpha: 3.0, k: 2.0 },
            Dist::InverseGaussian {
                mu: 3.86,
                lambda: 9.46,
            },
        ];
        for d in cases {
            let got = sample_mean(d, 400_000);
            let want = d.mean().unwrap();
            assert!(near(got, want, 0.02), "{d:?}: {got} vs {want}");
        }
        // Weibull with shape 1 is exponential.
        let w = sample_mean(
            Dist::Weibull {
                shape: 1.0,
                scale: 2.0,
            },
            400_000,
        );
        assert!(near(w, 2.0, 0.02), "{w}");
    }

    #[test]
    fn polygraph_lognormal_parameterisation() {
        let d = Dist::lognormal_mean_sd(300.0 * 1024.0, 300.0 * 1024.0);
        assert!(near(d.mean().unwrap(), 307_200.0, 1e-9));
        let mut r = stream(1, "x");
        let xs: Vec<f64> = (0..400_000).map(|_| d.sample(&mut r)).collect();
        let m = xs.iter().sum::<f64>() / xs.len() as f64;
        let sd = (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64).sqrt();
        assert!(
            near(m, 307_200.0, 0.02) && near(sd, 307_200.0, 0.06),
            "{m} {sd}"
        );
    }

    #[test]
    fn surge_splice_puts_the_right_mass_in_the_body() {
        // CAP Table 1: body lognormal(7.640, 1.705), tail Pareto(1.383, 2924).
        let d = Dist::LogNormalPareto {
            mu: 7.640,
            sigma: 1.705,
            alpha: 1.383,
            k: 2924.0,
        };
        let body = d.body_fraction();
        assert!((body - 0.579).abs() < 0.002, "{body}");
        let mut r = stream(3, "x");
        let n = 200_000;
        let below = (0..n).filter(|_| d.sample(&mut r) < 2924.0).count() as f64 / n as f64;
        assert!((below - body).abs() < 0.005, "{below} vs {body}");
    }

    #[test]
    fn normal_cdf_reference_points() {
        assert!((std_normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((std_normal_cdf(1.959_964) - 0.975).abs() < 1e-6);
        assert!((std_normal_cdf(-1.0) - 0.158_655_25).abs() < 1e-6);
    }

    #[test]
    fn config_syntax() {
        #[derive(Deserialize)]
        struct W {
            size: Dist,
        }
        let w: W = toml::from_str("size = { dist = \"exp\", mean = 4608.0 }").unwrap();
        assert_eq!(w.size, Dist::Exp { mean: 4608.0 });
        assert!(Dist::Exp { mean: -1.0 }.validate().is_err());
    }
}
