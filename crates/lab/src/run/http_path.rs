//! The HTTP path between the load generator, the switch and a node, measured on the running
//! cluster so that the simulator can model it (`capstan lab X --engine both`).
//!
//! The simulator's nodes spend exactly the origin's modelled demands; what a lab request pays
//! on top — connecting, the switch parsing and forwarding, the node's HTTP handling, the answer
//! copied through the switch and the client over loopback — is the HTTP path. It is measured,
//! not fitted: one closed-loop client fetches a small and a large file of the experiment's own
//! tree through the experiment's own switch (its policy, its connection mode), each after a
//! warm-up that puts it in every node's memory cache; the mean response less the model's time
//! for that cached file is the path at that size. Two sizes give a fixed part and a part per
//! byte. One client on an otherwise idle cluster: what a request pays when the machine's cores
//! are free, which under load is a lower bound.

use std::time::Duration;

use capstan_bench::{BenchConfig, Engine, Source, Target};

use crate::model::error::LabError;
use crate::model::results::{HttpPathProbe, PathSample};
use crate::procs::cluster::Cluster;
use crate::run::plan::{Plan, SeriesPlan};

/// The largest file the probe fetches: big enough for the per-byte part to show, small enough
/// to stay in a node's memory cache and to be fetched often in a second.
const LARGE_FILE_MAX: u64 = 1 << 20;
/// Each file is fetched this long unmeasured (into every node's cache), then this long measured.
const WARM: Duration = Duration::from_millis(400);
const MEASURE: Duration = Duration::from_millis(1200);

/// The two files the probe fetches: the tree's smallest, and its largest up to
/// [`LARGE_FILE_MAX`] and a quarter of a node's memory cache.
fn probe_files(
    plan: &Plan,
    s: &SeriesPlan,
    cache_bytes: u64,
) -> Result<[(String, u64); 2], LabError> {
    let tree = crate::run::simulate::series_tree(plan, s)?;
    let cap = LARGE_FILE_MAX.min(cache_bytes / 4);
    let small = tree.files.iter().min_by_key(|f| f.size);
    let large = tree
        .files
        .iter()
        .filter(|f| f.size <= cap)
        .max_by_key(|f| f.size);
    match (small, large) {
        (Some(a), Some(b)) if b.size > a.size => {
            Ok([(a.path.clone(), a.size), (b.path.clone(), b.size)])
        }
        _ => Err(LabError::Experiment(format!(
            "{}: the tree has no two files of different sizes that fit a node's cache, so the \
             HTTP path cannot be measured",
            s.tree
        ))),
    }
}

/// One closed-loop client on `path` for `length`: the mean response (ms) and the count.
async fn fetch(
    c: &Cluster,
    path: &str,
    keepalive: bool,
    length: Duration,
    seed: u64,
) -> Result<(f64, u64), LabError> {
    let target = Target::parse(&format!("http://{}{path}", c.listen))
        .map_err(|e| LabError::Run(e.to_string()))?;
    let mut cfg = BenchConfig::open(target, 1.0);
    cfg.engine = Engine::Closed {
        clients: 1,
        think: None,
    };
    cfg.source = Source::Url;
    cfg.keepalive = keepalive;
    cfg.duration = length;
    cfg.seed = seed;
    let r = capstan_bench::run(cfg, None)
        .await
        .map_err(|e| LabError::Run(e.to_string()))?;
    let l = &r.latency_ms.corrected;
    if l.count == 0 || r.errors_total > 0 {
        return Err(LabError::Run(format!(
            "the HTTP path probe of {path} got {} responses and {} errors",
            l.count, r.errors_total
        )));
    }
    Ok((l.mean, l.count))
}

/// Measures the path on a running cluster of series `s` (before its warm-up and levels).
pub async fn measure(plan: &Plan, s: &SeriesPlan, c: &Cluster) -> Result<HttpPathProbe, LabError> {
    let model = crate::run::simulate::CachedFileModel::new(plan, s)?;
    let files = probe_files(plan, s, model.cache_bytes())?;
    let mut samples = Vec::with_capacity(2);
    for (i, (path, bytes)) in files.into_iter().enumerate() {
        let seed = plan.seed ^ (0x9a7_0000 + i as u64);
        fetch(c, &path, plan.exp.load.keepalive, WARM, seed).await?;
        let (lab_mean_ms, requests) =
            fetch(c, &path, plan.exp.load.keepalive, MEASURE, seed + 1).await?;
        samples.push(PathSample {
            model_ms: crate::model::results::round(1e3 * model.time_s(bytes), 3),
            lab_mean_ms: crate::model::results::round(lab_mean_ms, 3),
            path,
            bytes,
            requests,
        });
    }
    let large = samples.pop().expect("two samples");
    let small = samples.pop().expect("two samples");
    Ok(fit(small, large))
}

/// The line through the two samples' excess over the model, kept non-negative: a probe faster
/// than the model (timer noise) is no path at all.
fn fit(small: PathSample, large: PathSample) -> HttpPathProbe {
    let excess = |p: &PathSample| (p.lab_mean_ms - p.model_ms).max(0.0);
    let (es, el) = (excess(&small), excess(&large));
    let per_byte_ms = ((el - es) / (large.bytes - small.bytes) as f64).max(0.0);
    let fixed_ms = (es - per_byte_ms * small.bytes as f64).max(0.0);
    HttpPathProbe {
        fixed_ms: crate::model::results::round(fixed_ms, 3),
        per_mb_ms: crate::model::results::round(per_byte_ms * 1e6, 3),
        small,
        large,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(bytes: u64, lab: f64, model: f64) -> PathSample {
        PathSample {
            path: "/f".into(),
            bytes,
            requests: 10,
            lab_mean_ms: lab,
            model_ms: model,
        }
    }

    #[test]
    fn two_sizes_give_a_fixed_part_and_one_per_byte() {
        // 0.4 ms fixed, 3 ms per MB: 500 B → 0.4015 ms over the model, 500 kB → 1.9 ms.
        let p = fit(sample(500, 1.4015, 1.0), sample(500_000, 48.9, 47.0));
        assert!((p.per_mb_ms - 3.0).abs() < 1e-3, "{p:?}");
        assert!((p.fixed_ms - 0.4).abs() < 1e-3, "{p:?}");
        let path = p.path();
        assert!((path.fixed_s - 0.0004).abs() < 1e-9);
        assert!((path.per_byte_s * 1e6 - 0.003).abs() < 1e-9);
    }

    #[test]
    fn a_probe_faster_than_the_model_is_no_path() {
        let p = fit(sample(500, 0.9, 1.0), sample(500_000, 46.0, 47.0));
        assert_eq!((p.fixed_ms, p.per_mb_ms), (0.0, 0.0));
        // A large file no slower per byte than a small one: all of it is fixed.
        let p = fit(sample(500, 2.0, 1.0), sample(500_000, 47.5, 47.0));
        assert_eq!(p.per_mb_ms, 0.0);
        assert!((p.fixed_ms - 1.0).abs() < 1e-9);
    }
}
