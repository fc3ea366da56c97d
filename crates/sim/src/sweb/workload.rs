//! The files and the request stream of SWEB's experiments (§4).
//!
//! Requests come in bursts, as the paper's clients launched them: at the start of every second of
//! the test, that second's share of the rate arrives at once ("a burst of requests would arrive
//! nearly simultaneously", §4.1); fractional rates carry over, so 2.5 rps gives 2, 3, 2, 3, …
//! Files are spread evenly over the nodes' disks: file `j` of node `k`'s share has a key whose
//! hash puts it on `k` by the partition rule (`hash % nodes`), so each node holds the same number
//! of files.

use serde::Serialize;

use capstan_core::hash_key;
use capstan_workload::dist::uniform01;
use capstan_workload::stream;

use crate::event::{nanos_round, Nanos};

/// One file of the document tree.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct File {
    pub key: String,
    pub hash: u64,
    pub bytes: u64,
}

/// The files and when each request arrives for which file.
#[derive(Clone, Debug, Default)]
pub struct Workload {
    pub files: Vec<File>,
    /// `(arrival time, file index)`, in arrival order.
    pub arrivals: Vec<(Nanos, u32)>,
    /// End of the arrival period.
    pub duration: Nanos,
}

/// A key for file `j` whose home is node `home` of `nodes`.
fn key_on(home: usize, j: usize, nodes: usize) -> (String, u64) {
    (0u64..)
        .map(|salt| format!("/sweb/n{home}/file{j}-{salt}"))
        .map(|key| {
            let hash = hash_key(&key);
            (key, hash)
        })
        .find(|(_, hash)| hash % nodes as u64 == home as u64)
        .expect("some salt lands on every node")
}

/// Arrival times of `rate` requests per second over `duration_s`, in bursts at whole seconds.
fn bursts(rate: f64, duration_s: f64) -> Vec<Nanos> {
    let seconds = duration_s.ceil() as u64;
    let mut out = Vec::new();
    for s in 0..seconds {
        let count = ((s + 1) as f64 * rate).floor() - (s as f64 * rate).floor();
        out.extend(std::iter::repeat_n(nanos_round(s as f64), count as usize));
    }
    out
}

impl Workload {
    /// SWEB's skewed test (§4.2): every request for one file of `bytes` on one node.
    pub fn skewed(nodes: usize, rate: f64, duration_s: f64, bytes: u64, seed: u64) -> Workload {
        let (key, hash) = key_on(seed as usize % nodes, 0, nodes);
        Workload {
            files: vec![File { key, hash, bytes }],
            arrivals: bursts(rate, duration_s)
                .into_iter()
                .map(|t| (t, 0))
                .collect(),
            duration: nanos_round(duration_s),
        }
    }

    /// `per_node` files on every node with sizes evenly spaced over `[min, max]` bytes, dealt to
    /// the nodes in a seeded random order; each request picks a file uniformly at random.
    pub fn sizes(
        nodes: usize,
        per_node: usize,
        (min, max): (u64, u64),
        rate: f64,
        duration_s: f64,
        seed: u64,
    ) -> Workload {
        let count = nodes * per_node;
        let mut sizes: Vec<u64> = (0..count)
            .map(|i| {
                let f = if count > 1 {
                    i as f64 / (count - 1) as f64
                } else {
                    1.0
                };
                (min as f64 + f * (max - min) as f64).round() as u64
            })
            .collect();
        let mut rng = stream(seed, "sweb-file-sizes");
        for i in (1..sizes.len()).rev() {
            let j = (uniform01(&mut rng) * (i + 1) as f64) as usize;
            sizes.swap(i, j.min(i));
        }
        let files = sizes
            .into_iter()
            .enumerate()
            .map(|(i, bytes)| {
                let (key, hash) = key_on(i % nodes, i / nodes, nodes);
                File { key, hash, bytes }
            })
            .collect();
        let mut pick = stream(seed, "sweb-requests");
        let arrivals = bursts(rate, duration_s)
            .into_iter()
            .map(|t| {
                let f = (uniform01(&mut pick) * count as f64) as usize;
                (t, f.min(count - 1) as u32)
            })
            .collect();
        Workload {
            files,
            arrivals,
            duration: nanos_round(duration_s),
        }
    }

    /// Mean size of the requested files, bytes.
    pub fn mean_request_bytes(&self) -> f64 {
        let total: f64 = self
            .arrivals
            .iter()
            .map(|&(_, f)| self.files[f as usize].bytes as f64)
            .sum();
        total / self.arrivals.len().max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_core::report::Partition;

    #[test]
    fn bursts_carry_fractions_over() {
        let b = bursts(2.5, 4.0);
        let per_second: Vec<usize> = (0..4)
            .map(|s| b.iter().filter(|&&t| t == nanos_round(s as f64)).count())
            .collect();
        assert_eq!(per_second, vec![2, 3, 2, 3]);
    }

    #[test]
    fn files_are_spread_evenly_by_the_partition_rule() {
        let w = Workload::sizes(6, 10, (100, 1_500_000), 10.0, 5.0, 1);
        for home in 0..6u32 {
            let part = Partition {
                index: home,
                count: 6,
            };
            assert_eq!(w.files.iter().filter(|f| part.holds(f.hash)).count(), 10);
        }
        let mut sizes: Vec<u64> = w.files.iter().map(|f| f.bytes).collect();
        sizes.sort_unstable();
        assert_eq!((sizes[0], sizes[59]), (100, 1_500_000));
        assert_eq!(w.arrivals.len(), 50);
        let again = Workload::sizes(6, 10, (100, 1_500_000), 10.0, 5.0, 1);
        assert_eq!(w.files, again.files);
        assert_eq!(w.arrivals, again.arrivals);
    }

    #[test]
    fn the_skewed_stream_asks_for_one_file() {
        let w = Workload::skewed(6, 8.0, 45.0, 1_500_000, 3);
        assert_eq!(w.files.len(), 1);
        assert_eq!(w.files[0].hash % 6, 3);
        assert_eq!(w.arrivals.len(), 360);
    }
}
