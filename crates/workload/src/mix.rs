//! Which object a request asks for: weighted lists (WebStone file lists) and a Web Polygraph-like
//! choice with popularity and a recurrence ratio.

use rand::RngCore;

use crate::dist::uniform01;
use crate::zipf::Popularity;

/// Picks an index with probability proportional to its integer weight.
#[derive(Debug, Clone)]
pub struct Weighted {
    cumulative: Vec<u64>,
}

impl Weighted {
    pub fn new(weights: impl IntoIterator<Item = u64>) -> Result<Self, String> {
        let mut sum = 0u64;
        let cumulative: Vec<u64> = weights
            .into_iter()
            .map(|w| {
                sum = sum.saturating_add(w);
                sum
            })
            .collect();
        if sum == 0 {
            return Err("all weights are zero".into());
        }
        Ok(Weighted { cumulative })
    }

    pub fn sample(&self, rng: &mut impl RngCore) -> usize {
        let total = *self.cumulative.last().expect("non-empty by construction");
        let x = rng.next_u64() % total;
        self.cumulative.partition_point(|&c| c <= x)
    }
}

/// Polygraph's model of request recurrence: a request either revisits an object requested
/// before (with probability `recurrence`, the object chosen by popularity among those already
/// seen — these are the would-be cache hits) or asks for an object never requested yet. Without
/// a recurrence ratio, popularity applies to the whole set, ranked in a seeded random order so
/// that the most popular objects are not simply the first files.
#[derive(Debug, Clone)]
pub struct RecurrenceMix {
    popularity: Popularity,
    order: Vec<u32>,
    next_new: usize,
    seen: Vec<u32>,
}

impl RecurrenceMix {
    pub fn new(
        n: usize,
        popularity: Popularity,
        shuffle: &mut impl RngCore,
    ) -> Result<Self, String> {
        if n == 0 || n > u32::MAX as usize {
            return Err(format!("object count must be between 1 and {}", u32::MAX));
        }
        popularity.validate()?;
        let mut order: Vec<u32> = (0..n as u32).collect();
        for i in (1..n).rev() {
            let j = (uniform01(shuffle) * (i + 1) as f64) as usize;
            order.swap(i, j.min(i));
        }
        Ok(RecurrenceMix {
            popularity,
            order,
            next_new: 0,
            seen: Vec::new(),
        })
    }

    /// Objects requested so far (the working set).
    pub fn working_set(&self) -> usize {
        self.seen.len()
    }

    pub fn sample(&mut self, rng: &mut impl RngCore, recurrence: Option<f64>) -> usize {
        let Some(r) = recurrence else {
            let rank = self.popularity.sample_rank(self.order.len() as u64, rng);
            return self.order[(rank - 1) as usize] as usize;
        };
        let revisit = uniform01(rng) < r;
        if (!revisit || self.seen.is_empty()) && self.next_new < self.order.len() {
            let id = self.order[self.next_new];
            self.next_new += 1;
            self.seen.push(id);
            return id as usize;
        }
        let rank = self.popularity.sample_rank(self.seen.len() as u64, rng);
        self.seen[(rank - 1) as usize] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::stream;

    #[test]
    fn weighted_follows_weights() {
        let w = Weighted::new([350, 500, 140, 9, 1]).unwrap();
        let mut r = stream(1, "w");
        let mut c = [0u32; 5];
        for _ in 0..100_000 {
            c[w.sample(&mut r)] += 1;
        }
        assert!((c[0] as f64 / 1e5 - 0.35).abs() < 0.01 && (c[1] as f64 / 1e5 - 0.5).abs() < 0.01);
        assert!(c[4] > 50 && c[4] < 160, "{c:?}");
        assert!(Weighted::new([0, 0]).is_err());
        assert_eq!(Weighted::new([0, 3, 0]).unwrap().sample(&mut r), 1);
    }

    #[test]
    fn recurrence_ratio_is_the_revisit_share() {
        let mut r = stream(2, "m");
        let mut m = RecurrenceMix::new(
            100_000,
            Popularity::Zipf { alpha: 1.0 },
            &mut stream(2, "s"),
        )
        .unwrap();
        let mut seen = std::collections::HashSet::new();
        let mut repeats = 0;
        let n = 50_000;
        for _ in 0..n {
            if !seen.insert(m.sample(&mut r, Some(0.55))) {
                repeats += 1;
            }
        }
        let share = repeats as f64 / n as f64;
        assert!((share - 0.55).abs() < 0.01, "{share}");
        assert_eq!(m.working_set(), seen.len());
        // Once every object is seen, every request is a revisit.
        let mut small = RecurrenceMix::new(3, Popularity::Uniform, &mut stream(2, "s")).unwrap();
        let got: std::collections::HashSet<usize> =
            (0..50).map(|_| small.sample(&mut r, Some(0.0))).collect();
        assert_eq!(got.len(), 3);
    }
}
