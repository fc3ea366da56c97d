//! The simulated site: pages, each an HTML object and a fixed set of embedded objects, with
//! sizes from the CAP paper's size law and Zipf popularity over pages.

use capstan_workload::dist::uniform01;
use capstan_workload::{stream, Dist, WorkloadRng};

use crate::scenario::Workload;

pub struct Site {
    /// Index of each page's first object (its HTML) in `sizes`; one extra entry at the end.
    pub first: Vec<u32>,
    pub sizes: Vec<u64>,
    /// Cache keys of the objects, made once so the run does not format strings.
    pub object_keys: Vec<String>,
    /// Page URLs: the locality key policies see.
    pub page_keys: Vec<String>,
    pub page_hashes: Vec<u64>,
    /// Cumulative popularity over pages (rank = page index).
    cdf: Vec<f64>,
    pub total_bytes: u64,
}

impl Site {
    pub fn generate(w: &Workload, seed: u64) -> Site {
        let mut rng = stream(seed, "sim-site");
        let size = Dist::LogNormalPareto {
            mu: w.size_mu,
            sigma: w.size_sigma,
            alpha: w.size_tail_alpha,
            k: w.size_tail_k,
        };
        let objects = Dist::Pareto {
            alpha: w.objects_alpha,
            k: 1.0,
        };
        let mut first = Vec::with_capacity(w.pages + 1);
        let mut sizes = Vec::new();
        for _ in 0..w.pages {
            first.push(sizes.len() as u32);
            let n = (objects.sample(&mut rng).floor() as u64).clamp(1, u64::from(w.max_objects));
            for _ in 0..n {
                let s = size
                    .sample(&mut rng)
                    .round()
                    .clamp(1.0, w.max_object_bytes as f64);
                sizes.push(s as u64);
            }
        }
        first.push(sizes.len() as u32);
        let object_keys = (0..sizes.len()).map(|i| format!("o{i}")).collect();
        let page_keys: Vec<String> = (0..w.pages).map(|i| format!("/page/{i}")).collect();
        let page_hashes = page_keys
            .iter()
            .map(|k| capstan_core::hash_key(k))
            .collect();
        let mut cdf = Vec::with_capacity(w.pages);
        let mut acc = 0.0;
        for rank in 1..=w.pages {
            acc += (rank as f64).powf(-w.zipf_alpha);
            cdf.push(acc);
        }
        for c in &mut cdf {
            *c /= acc;
        }
        let total_bytes = sizes.iter().sum();
        Site {
            first,
            sizes,
            object_keys,
            page_keys,
            page_hashes,
            cdf,
            total_bytes,
        }
    }

    pub fn pages(&self) -> usize {
        self.page_keys.len()
    }

    pub fn objects_of(&self, page: usize) -> std::ops::Range<usize> {
        self.first[page] as usize..self.first[page + 1] as usize
    }

    /// Objects (HTTP requests) per page request, weighted by popularity.
    pub fn mean_objects_per_page(&self) -> f64 {
        let mut prev = 0.0;
        let mut mean = 0.0;
        for (page, &c) in self.cdf.iter().enumerate() {
            mean += (c - prev) * self.objects_of(page).len() as f64;
            prev = c;
        }
        mean
    }

    /// A page drawn by popularity.
    pub fn draw_page(&self, rng: &mut WorkloadRng) -> usize {
        let u = uniform01(rng);
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn site_is_seeded_and_popular_pages_come_first() {
        let w = Workload::default();
        let a = Site::generate(&w, 3);
        let b = Site::generate(&w, 3);
        assert_eq!(a.sizes, b.sizes);
        assert_eq!(a.pages(), w.pages);
        let mut rng = stream(1, "t");
        let mut counts = vec![0u32; a.pages()];
        for _ in 0..100_000 {
            counts[a.draw_page(&mut rng)] += 1;
        }
        assert!(counts[0] > counts[10] && counts[10] > counts[1000]);
        let per_page = a.sizes.len() as f64 / a.pages() as f64;
        assert!((2.0..6.0).contains(&per_page), "{per_page}");
    }
}
