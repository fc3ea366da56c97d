//! How long a discovery refresh takes with a large cluster: a `file` source's list of 1,000
//! nodes parsed and applied through membership (the new `Cluster` built from the current one,
//! nodes that stay keeping their runtime) when 10 % of the nodes changed. Issue 32's goal:
//! < 50 ms. `cargo bench -p capstan-switch --bench discovery`.

use std::path::Path;

use capstan_switch::testing::discovery_refresh;
use capstan_switch::Config;
use criterion::{criterion_group, criterion_main, Criterion};

/// A node list of `n` nodes; `changed` of them (the first ones) at other addresses.
fn node_list(n: usize, changed: usize, generation: usize) -> String {
    let entries: Vec<String> = (0..n)
        .map(|i| {
            let (a, b) = (i / 250, i % 250 + 1);
            let third = if i < changed { 100 + generation % 2 } else { 1 };
            format!("{{\"address\": \"127.{third}.{a}.{b}:8080\"}}")
        })
        .collect();
    format!("{{\"nodes\": [{}]}}", entries.join(",\n"))
}

fn refresh(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("capstan-bench-discovery-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("nodes.json");
    std::fs::write(&file, node_list(1000, 0, 0)).unwrap();
    let text = format!(
        "listen = [\"127.0.0.1:0\"]\n[policy]\nname = \"least-connections\"\n\
         [[discovery]]\nfile = \"{}\"\ninterval = \"1h\"\n",
        file.display()
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let running = rt
        .block_on(capstan_switch::start(Config::parse(&text, None).unwrap()))
        .unwrap();
    let lists = [node_list(1000, 100, 0), node_list(1000, 100, 1)];
    let mut next = 0;
    let mut group = c.benchmark_group("discovery");
    group.sample_size(20);
    group.bench_function("1000 nodes, 10 % changed: parse and apply", |b| {
        b.iter(|| {
            next += 1;
            let list = &lists[next % 2];
            let now = rt
                .block_on(discovery_refresh(
                    &running.switch,
                    "file",
                    Path::new("n.json"),
                    list,
                ))
                .unwrap();
            assert_eq!(now.len(), 1000);
        })
    });
    group.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, refresh);
criterion_main!(benches);
