//! Decision cost of every dispatching policy: nanoseconds per `pick` on 4 and 16 nodes.
//!
//! Run: `cargo bench -p capstan-core --bench policies`. Each pick cycles through 1024 distinct
//! keys over the four CAP classes, against a view with uneven active counts (so the scanning
//! policies do real comparisons). LARD's table and peak-EWMA's averages are warmed first, so the
//! numbers are the steady state a switch sees. `sweb/sized-received` is SWEB as the simulator
//! runs it: every key in its size table and the view seen from the node that received the
//! request (`ReceivedAt`), against gathered CPU, disk and network loads.

use std::hint::black_box;
use std::time::Duration;

use capstan_core::{
    build_policy, hash_key, Gathered, NodeState, Outcome, PolicyContext, PolicySpec, ReceivedAt,
    RequestInfo, StaticView,
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
            let view = uneven_view(node_count);
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
    bench_sized_sweb(&mut group, &classes, &keys, &requests);
    group.finish();
}

/// Nodes with uneven active counts and gathered loads.
fn uneven_view(node_count: usize) -> StaticView {
    StaticView {
        now_nanos: 1_000_000_000,
        nodes: (0..node_count)
            .map(|i| NodeState {
                active: (i as u32 * 7) % 5,
                gathered: Gathered {
                    at_nanos: Some(0),
                    cpu: 0.1 * (i % 10) as f64,
                    disk: 0.05 * (i % 7) as f64,
                    net: 0.07 * (i % 5) as f64,
                    ..Default::default()
                },
                ..NodeState::default()
            })
            .collect(),
        ..StaticView::default()
    }
}

fn bench_sized_sweb(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    classes: &[String],
    keys: &[String],
    requests: &[RequestInfo<'_>],
) {
    let sizes: toml::Table = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), toml::Value::Integer(100 + 1_500 * i as i64)))
        .collect();
    let params: toml::Table = [("sizes".to_string(), toml::Value::Table(sizes))]
        .into_iter()
        .collect();
    let spec = PolicySpec::new("sweb", params).unwrap();
    for node_count in [4usize, 16] {
        let nodes: Vec<String> = (0..node_count).map(|i| format!("node-{i}")).collect();
        let ctx = PolicyContext {
            nodes: &nodes,
            classes,
        };
        let policy = build_policy(&spec, &ctx).unwrap();
        let view = uneven_view(node_count);
        let id = BenchmarkId::new("sweb/sized-received", node_count);
        group.bench_with_input(id, &node_count, |b, _| {
            let mut i = 0usize;
            b.iter(|| {
                i = (i + 1) % KEYS;
                let seen_from = ReceivedAt::new(&view, i % node_count);
                black_box(policy.pick(black_box(&requests[i]), &seen_from))
            });
        });
    }
}

criterion_group!(benches, bench_policies);
criterion_main!(benches);
