//! Packet loss models: independent (Bernoulli) drops, or the Gilbert–Elliott two-state model
//! whose bad state produces loss bursts (wireless links, congested peering).
//!
//! Pure: the random stream is passed in, so a seeded generator gives the same drops every run.

use rand::Rng;

use crate::units::parse_probability;

/// How a path direction loses packets.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LossModel {
    None,
    /// Each packet is dropped with this probability, independently of the others.
    Bernoulli(f64),
    /// Two states, Good and Bad. Before each packet the chain steps: Good → Bad with
    /// probability `p`, Bad → Good with `r`; the packet is then lost with the state's loss
    /// probability. Mean loss = p/(p+r)·loss_bad + r/(p+r)·loss_good; mean burst ≈ 1/r.
    GilbertElliott {
        p: f64,
        r: f64,
        loss_good: f64,
        loss_bad: f64,
    },
}

impl LossModel {
    /// `1%` (Bernoulli), `0`, or `ge:P,R[,LOSS_BAD[,LOSS_GOOD]]` such as `ge:1%,30%`
    /// (Gilbert–Elliott; loss in the bad state defaults to 100 %, in the good state to 0 %).
    pub fn parse(text: &str) -> Result<LossModel, String> {
        let t = text.trim();
        let Some(params) = t
            .strip_prefix("ge:")
            .or_else(|| t.strip_prefix("gilbert-elliott:"))
        else {
            let p = parse_probability(t)?;
            return Ok(if p == 0.0 {
                LossModel::None
            } else {
                LossModel::Bernoulli(p)
            });
        };
        let values = params
            .split(',')
            .map(|v| parse_probability(v.split('=').next_back().unwrap_or(v)))
            .collect::<Result<Vec<_>, _>>()?;
        let (p, r, loss_bad, loss_good) = match values[..] {
            [p, r] => (p, r, 1.0, 0.0),
            [p, r, b] => (p, r, b, 0.0),
            [p, r, b, g] => (p, r, b, g),
            _ => {
                return Err(format!(
                "bad Gilbert-Elliott loss '{text}' (ge:P,R[,LOSS_BAD[,LOSS_GOOD]], e.g. ge:1%,30%)"
            ))
            }
        };
        if r == 0.0 && p > 0.0 {
            return Err(format!(
                "Gilbert-Elliott loss '{text}' never leaves the bad state (R = 0)"
            ));
        }
        Ok(LossModel::GilbertElliott {
            p,
            r,
            loss_good,
            loss_bad,
        })
    }

    /// The long-run fraction of packets this model drops.
    pub fn mean_loss(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Bernoulli(p) => p,
            LossModel::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => {
                if p + r == 0.0 {
                    return loss_good;
                }
                (p * loss_bad + r * loss_good) / (p + r)
            }
        }
    }
}

impl std::fmt::Display for LossModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            LossModel::None => write!(f, "0%"),
            LossModel::Bernoulli(p) => write!(f, "{}%", p * 100.0),
            LossModel::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => write!(
                f,
                "ge:{}%,{}%,{}%,{}%",
                p * 100.0,
                r * 100.0,
                loss_bad * 100.0,
                loss_good * 100.0
            ),
        }
    }
}

/// A loss model with its state (the Gilbert–Elliott chain's current state).
#[derive(Clone, Debug)]
pub struct Loss {
    model: LossModel,
    bad: bool,
}

impl Loss {
    pub fn new(model: LossModel) -> Loss {
        Loss { model, bad: false }
    }

    /// Decides the fate of the next packet: true when it is lost.
    pub fn drops<R: Rng>(&mut self, rng: &mut R) -> bool {
        match self.model {
            LossModel::None => false,
            LossModel::Bernoulli(p) => rng.gen_bool(p),
            LossModel::GilbertElliott {
                p,
                r,
                loss_good,
                loss_bad,
            } => {
                let flip = if self.bad { r } else { p };
                if rng.gen_bool(flip) {
                    self.bad = !self.bad;
                }
                rng.gen_bool(if self.bad { loss_bad } else { loss_good })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_pcg::Pcg64Mcg;

    fn run(model: LossModel, n: usize) -> Vec<bool> {
        let mut rng = Pcg64Mcg::seed_from_u64(7);
        let mut loss = Loss::new(model);
        (0..n).map(|_| loss.drops(&mut rng)).collect()
    }

    /// Mean length of runs of consecutive drops.
    fn mean_burst(drops: &[bool]) -> f64 {
        let bursts = drops.windows(2).filter(|w| w[1] && !w[0]).count() + usize::from(drops[0]);
        drops.iter().filter(|&&d| d).count() as f64 / bursts as f64
    }

    #[test]
    fn bernoulli_drops_its_fraction_without_bursts() {
        let drops = run(LossModel::Bernoulli(0.05), 200_000);
        let rate = drops.iter().filter(|&&d| d).count() as f64 / drops.len() as f64;
        // 5 standard deviations of a binomial proportion at n = 200 000.
        assert!(
            (rate - 0.05).abs() < 5.0 * (0.05f64 * 0.95 / 200_000.0).sqrt(),
            "{rate}"
        );
        // Independent drops: bursts average 1/(1-p) ≈ 1.05 packets.
        assert!(mean_burst(&drops) < 1.1, "{}", mean_burst(&drops));
    }

    #[test]
    fn gilbert_elliott_matches_its_stationary_loss_and_burst_length() {
        let model = LossModel::parse("ge:1%,25%").unwrap();
        assert!((model.mean_loss() - 0.01 / 0.26).abs() < 1e-12);
        let drops = run(model, 400_000);
        let rate = drops.iter().filter(|&&d| d).count() as f64 / drops.len() as f64;
        assert!((rate / model.mean_loss() - 1.0).abs() < 0.1, "{rate}");
        // Bad state lasts 1/r = 4 packets on average, all lost.
        let burst = mean_burst(&drops);
        assert!((3.5..4.5).contains(&burst), "{burst}");
    }

    #[test]
    fn parsing() {
        assert_eq!(LossModel::parse("0"), Ok(LossModel::None));
        assert_eq!(LossModel::parse("2%"), Ok(LossModel::Bernoulli(0.02)));
        assert_eq!(
            LossModel::parse("ge:p=1%,r=30%,50%"),
            Ok(LossModel::GilbertElliott {
                p: 0.01,
                r: 0.3,
                loss_bad: 0.5,
                loss_good: 0.0
            })
        );
        assert!(LossModel::parse("ge:1%").is_err());
        assert!(LossModel::parse("ge:1%,0").is_err());
        assert!(LossModel::parse("often").is_err());
    }
}
