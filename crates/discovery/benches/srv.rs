//! How long one SRV lookup takes with many records, against a real dnsmasq on loopback: the SRV
//! answer (over TCP when it is truncated over UDP), then every target's A and AAAA records
//! (dnsmasq sends no additional section, so each target is two more queries, 64 targets at a
//! time). Issue 32 asks for 10,000 SRV records resolved and applied in < 1 s, which one DNS
//! answer cannot carry: a message holds at most 65,535 bytes (about 2,500 SRV records with short
//! targets), and dnsmasq 2.90 sends broken name compression in answers past 16 KB (about 330 such
//! records; hickory refuses them, so the lookup fails rather than taking a part). 10,000 nodes
//! through DNS are many names; this measures one name of 100 and of 300 records. Without dnsmasq
//! it says so and measures nothing. `cargo bench -p capstan-discovery --bench srv`.

use std::time::Duration;

use capstan_discovery::dns::testing::Dnsmasq;
use capstan_discovery::dns::{DnsName, Options, Resolver};
use criterion::{criterion_group, criterion_main, Criterion};

fn records(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        let (a, b) = (i / 250, i % 250 + 1);
        text.push_str(&format!(
            "srv-host=_http._tcp.big.test,h{i}.big.test,8080,0,1\n"
        ));
        text.push_str(&format!("host-record=h{i}.big.test,10.1.{a}.{b}\n"));
    }
    text
}

fn lookup(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut group = c.benchmark_group("srv");
    group.sample_size(10);
    for n in [100, 300] {
        let Some(server) = rt.block_on(Dnsmasq::start(&records(n), 30)) else {
            eprintln!("note: dnsmasq is not installed; nothing measured");
            return;
        };
        let resolver = Resolver::new(Options {
            resolvers: vec![server.addr()],
            timeout: Duration::from_secs(2),
            attempts: 1,
        })
        .unwrap();
        let name = DnsName::parse("_http._tcp.big.test.").unwrap();
        group.bench_function(format!("{n} SRV records and their targets"), |b| {
            b.iter(|| {
                let answer = rt.block_on(resolver.resolve(&name)).unwrap();
                assert_eq!(answer.endpoints().count(), n);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, lookup);
criterion_main!(benches);
