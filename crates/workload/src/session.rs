//! Web sessions as the CAP paper models them (Casalicchio & Colajanni, Table 1): a session is a
//! run of page requests; each page brings embedded objects fetched after it; the user thinks
//! between pages.

use rand::RngCore;
use serde::{Deserialize, Serialize};

use crate::dist::Dist;

/// Most embedded objects one page may have. Pareto(1.33) has infinite variance, and one draw of
/// millions would turn a session into a flood; browsers and the paper's WebStone-based client
/// have a finite page too.
pub const MAX_OBJECTS_PER_PAGE: u32 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SessionModel {
    /// Page requests per session (rounded, at least 1).
    pub pages: Dist,
    /// Seconds between receiving a page (with its objects) and requesting the next.
    pub think_s: Dist,
    /// Objects per page *including* the base HTML page (rounded, at least 1).
    pub objects: Dist,
}

impl Default for SessionModel {
    /// Table 1: pages inverse Gaussian (μ 3.86, λ 9.46); think time Pareto (α 1.4, k 2 s);
    /// objects per page Pareto (α 1.1–1.5, default 1.33, k 1).
    fn default() -> Self {
        SessionModel {
            pages: Dist::InverseGaussian {
                mu: 3.86,
                lambda: 9.46,
            },
            think_s: Dist::Pareto { alpha: 1.4, k: 2.0 },
            objects: Dist::Pareto {
                alpha: 1.33,
                k: 1.0,
            },
        }
    }
}

/// One page of a session.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PagePlan {
    /// Embedded objects fetched after the base page (objects per page − 1).
    pub embedded: u32,
    /// Think time after this page; 0 after the last page.
    pub think_s: f64,
}

impl SessionModel {
    pub fn validate(&self) -> Result<(), String> {
        self.pages.validate()?;
        self.think_s.validate()?;
        self.objects.validate()
    }

    /// Draws a session: the page count, then for each page its objects and think time.
    pub fn sample(&self, rng: &mut impl RngCore) -> Vec<PagePlan> {
        let pages = (self.pages.sample(rng).round() as u32).max(1);
        (0..pages)
            .map(|i| {
                let objects =
                    (self.objects.sample(rng).round() as u32).clamp(1, MAX_OBJECTS_PER_PAGE + 1);
                let think = self.think_s.sample(rng);
                PagePlan {
                    embedded: objects - 1,
                    think_s: if i + 1 == pages { 0.0 } else { think },
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    #[test]
    fn table1_statistics() {
        let m = SessionModel::default();
        let mut r = stream(11, "sessions");
        let sessions: Vec<Vec<PagePlan>> = (0..100_000).map(|_| m.sample(&mut r)).collect();
        // Pages: inverse Gaussian mean 3.86; rounding to whole pages (at least 1) moves the
        // mean by a few hundredths only.
        let pages = sessions.iter().map(|s| s.len() as f64).sum::<f64>() / sessions.len() as f64;
        assert!((pages - 3.86).abs() / 3.86 < 0.03, "pages {pages}");
        // Heavy tails (α 1.4 and 1.33) have infinite variance, so sample means wander; their
        // medians k·2^(1/α) are sharp.
        let thinks: Vec<f64> = sessions
            .iter()
            .flat_map(|s| s[..s.len() - 1].iter().map(|p| p.think_s))
            .collect();
        let want = 2.0 * 2f64.powf(1.0 / 1.4);
        assert!((median(thinks.clone()) - want).abs() / want < 0.02);
        assert!(thinks.iter().all(|&t| t >= 2.0));
        // Objects per page: P(X ≥ 1.5) = 1.5^-1.33 gives P(round ≥ 2); check that share.
        let objs: Vec<u32> = sessions.iter().flatten().map(|p| p.embedded + 1).collect();
        let share = objs.iter().filter(|&&o| o >= 2).count() as f64 / objs.len() as f64;
        let want = 1.5f64.powf(-1.33);
        assert!((share - want).abs() < 0.01, "{share} vs {want}");
        assert!(sessions.iter().all(|s| s.last().unwrap().think_s == 0.0));
    }
}
