//! How long a reload takes with a large cluster: parsing and validating the configuration, then
//! building the new `Cluster` (classifier, policy, node runtimes carried over from the previous
//! generation) — everything `POST /reload` does before the swap. Issue goal: < 50 ms with 1,000
//! nodes. `cargo bench -p capstan-switch --bench reload`.

use capstan_switch::testing::Cluster;
use capstan_switch::Config;
use criterion::{criterion_group, criterion_main, Criterion};

fn config_text(nodes: usize, policy: &str) -> String {
    let mut text = format!(
        "listen = [\"127.0.0.1:8080\"]\n[policy]\nname = \"{policy}\"\n[load]\npath = \"/_capstan/load\"\n"
    );
    for i in 0..nodes {
        let (a, b) = (i / 250, i % 250);
        text.push_str(&format!(
            "[[node]]\nname = \"n{i}\"\naddress = \"10.0.{a}.{}:8080\"\nweight = {}\n",
            b + 1,
            1 + i % 3
        ));
    }
    text
}

fn reload(c: &mut Criterion) {
    let mut group = c.benchmark_group("reload");
    group.sample_size(20);
    for policy in ["round-robin", "lard", "consistent-hash", "cap"] {
        let text = config_text(1000, policy);
        let first = Cluster::build(Config::parse(&text, None).unwrap(), 1, None, 0).unwrap();
        group.bench_function(format!("1000 nodes, {policy}"), |b| {
            b.iter(|| {
                let config = Config::parse(&text, None).unwrap();
                Cluster::build(config, 2, Some(&first), 1).unwrap()
            })
        });
    }
    group.finish();
}

criterion_group!(benches, reload);
criterion_main!(benches);
