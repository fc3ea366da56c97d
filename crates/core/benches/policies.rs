//! Decision cost of every dispatching policy: nanoseconds per `pick` on 4 and 16 nodes.
//!
//! Run: `cargo bench -p capstan-core --bench policies`. Each pick cycles through 1024 distinct
//! keys over the four CAP classes, against a view with uneven active counts (so the scanning
//! policies do real comparisons). LARD's table and peak-EWMA's averages are warmed first, so the
//! numbers are the steady state a switch sees.

use std::hint::black_box;
use std::time::Duration;

use capstan_core::{
    build_policy, hash_key, NodeState, Outcome, PolicyContext, PolicySpec, RequestInfo, StaticView,
};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

const KEYS: usize = 1024;

fn bench_policies(c: &mut Criterion) {
    let classes: Vec<String> = ["static", "disk", "cpu", "cpu-disk"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let keys: Vec<String> = (0..KEYS).map(|i| format!("/docs/page{i}.html")).collect();
    let requests: Vec<RequestInfo<'_>> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| RequestInfo {
            class: i % classes.len(),
            key,
            key_hash: hash_key(key),
        })
        .collect();

    let mut group = c.benchmark_group("pick");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for name in PolicySpec::names() {
        for node_count in [4usize, 16] {
            let nodes: Vec<String> = (0..node_count).map(|i| format!("node-{i}")).collect();
            let ctx = PolicyContext {
                nodes: &nodes,
                classes: &classes,
            };
            let policy = build_policy(&PolicySpec::with_defaults(name).unwrap(), &ctx).unwrap();
            let view = StaticView {
                now_nanos: 1_000_000_000,
                nodes: (0..node_count)
                    .map(|i| NodeState {
                        active: (i as u32 * 7) % 5,
                        gathered: capstan_core::Gathered {
                            at_nanos: Some(0),
                            cpu: 0.1 * (i % 10) as f64,
                            ..Default::default()
                        },
                        ..NodeState::default()
                    })
                    .collect(),
            };
            for (i, request) in requests.iter().enumerate() {
                if let Some(node) = policy.pick(request, &view) {
                    let outcome = Outcome {
                        ok: true,
                        latency_nanos: 1_000_000 + (i as u64 % 7) * 100_000,
                        finished_at_nanos: view.now_nanos,
                    };
                    policy.on_done(node, request, &outcome);
                }
            }
            group.bench_with_input(BenchmarkId::new(name, node_count), &node_count, |b, _| {
                let mut i = 0usize;
                b.iter(|| {
                    i = (i + 1) % KEYS;
                    black_box(policy.pick(black_box(&requests[i]), &view))
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench_policies);
criterion_main!(benches);
