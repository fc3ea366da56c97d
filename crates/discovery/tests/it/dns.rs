//! DNS lookups against a real dnsmasq on a loopback port: SRV records with their targets'
//! addresses, weights and priorities, `host:port` A/AAAA answers, the answer's smallest TTL;
//! bad records dropped one by one (port 0, target `.`, a target that does not exist, an
//! unusable or repeated address) and the errors that refuse a whole answer (NXDOMAIN, no
//! records, SERVFAIL, REFUSED, no answer, nothing usable). Each test returns early with a note
//! when dnsmasq is not installed.

use std::net::SocketAddr;
use std::time::Duration;

use capstan_discovery::dns::testing::{servfail_lines, Dnsmasq};
use capstan_discovery::dns::{Answer, DnsError, DnsName, Options, Resolver};

fn resolver(server: &Dnsmasq) -> Resolver {
    Resolver::new(Options {
        resolvers: vec![server.addr()],
        timeout: Duration::from_millis(300),
        attempts: 2,
    })
    .unwrap()
}

async fn resolve(resolver: &Resolver, name: &str) -> Result<Answer, DnsError> {
    resolver.resolve(&DnsName::parse(name).unwrap()).await
}

/// `(address, priority, weight)` of every endpoint, in order.
fn endpoints(answer: &Answer) -> Vec<(String, u16, u16)> {
    answer
        .endpoints()
        .map(|(at, r)| (at.to_string(), r.priority, r.weight))
        .collect()
}

const WEB: &str = "\
srv-host=_http._tcp.web.test,b.web.test,8081,1,0
srv-host=_http._tcp.web.test,a.web.test,8080,0,5
srv-host=_http._tcp.web.test,gone.web.test,8082,0,1
srv-host=_http._tcp.web.test,a.web.test,0,0,1
host-record=a.web.test,127.0.0.2,3
host-record=b.web.test,127.0.0.3,::1
host-record=_x._tcp.web.test,127.0.0.5
";

#[tokio::test]
async fn srv_records_give_each_targets_addresses_port_weight_priority_and_the_smallest_ttl() {
    let Some(server) = Dnsmasq::start(WEB, 30).await else {
        return;
    };
    let answer = resolve(&resolver(&server), "_http._tcp.web.test.")
        .await
        .unwrap();
    // Lowest priority first; b has an A and an AAAA record.
    assert_eq!(
        endpoints(&answer),
        [
            ("127.0.0.2:8080".to_string(), 0, 5),
            ("127.0.0.3:8081".to_string(), 1, 0),
            ("[::1]:8081".to_string(), 1, 0),
        ]
    );
    assert_eq!(answer.records[0].target, "a.web.test");
    // a.web.test's own TTL (3 s) is below the SRV records' (30 s).
    assert_eq!(answer.ttl, Duration::from_secs(3));
    // The target that does not exist and the port 0 are dropped, each with its reason.
    let skipped = answer.skipped.join("\n");
    assert!(
        skipped.contains("gone.web.test:8082: no such name (NXDOMAIN)"),
        "{skipped}"
    );
    assert!(skipped.contains("a.web.test:0: port 0"), "{skipped}");
    assert_eq!(answer.skipped.len(), 2, "{skipped}");
}

#[tokio::test]
async fn host_and_port_gives_a_and_aaaa_addresses_and_literals_need_no_server() {
    let Some(server) = Dnsmasq::start(WEB, 30).await else {
        return;
    };
    let resolver = resolver(&server);
    let answer = resolve(&resolver, "b.web.test:9000").await.unwrap();
    let mut seen: Vec<String> = answer.endpoints().map(|(at, _)| at.to_string()).collect();
    seen.sort();
    assert_eq!(seen, ["127.0.0.3:9000", "[::1]:9000"]);
    assert_eq!(answer.ttl, Duration::from_secs(30));

    let stopped = Resolver::new(Options {
        resolvers: vec![SocketAddr::from(([127, 0, 0, 1], 9))],
        ..Options::default()
    })
    .unwrap();
    let literal = resolve(&stopped, "[::1]:8080").await.unwrap();
    assert_eq!(
        literal.endpoints().next().unwrap().0,
        "[::1]:8080".parse::<SocketAddr>().unwrap()
    );
    let e = resolve(&stopped, "0.0.0.0:8080").await.unwrap_err();
    assert_eq!(e.kind(), "no_usable_record", "{e}");
}

#[tokio::test]
async fn a_name_that_does_not_exist_or_has_no_record_fails_the_answer() {
    let Some(server) = Dnsmasq::start(WEB, 30).await else {
        return;
    };
    let resolver = resolver(&server);
    let e = resolve(&resolver, "_http._tcp.nothing.test")
        .await
        .unwrap_err();
    assert_eq!(
        e,
        DnsError::NxDomain {
            name: "_http._tcp.nothing.test".into()
        }
    );
    let e = resolve(&resolver, "nothing.test:80").await.unwrap_err();
    assert_eq!(e.to_string(), "nothing.test: no such name (NXDOMAIN)");
    // _x._tcp.web.test exists (an A record) but has no SRV record.
    let e = resolve(&resolver, "_x._tcp.web.test").await.unwrap_err();
    assert_eq!(e.kind(), "no_records", "{e}");
    assert_eq!(e.to_string(), "_x._tcp.web.test: no SRV record");
    let e = resolve(&resolver, "web.test:80").await.unwrap_err();
    assert_eq!(e.to_string(), "web.test: no A or AAAA record");
}

#[tokio::test]
async fn servfail_refused_and_a_stopped_server_are_errors_not_empty_answers() {
    let Some(upstream) = Dnsmasq::start_servfail_upstream().await else {
        return;
    };
    let Some(mut server) = Dnsmasq::start(&servfail_lines(&upstream), 30).await else {
        return;
    };
    let resolver = resolver(&server);
    let e = resolve(&resolver, "_http._tcp.web.example")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), "servfail", "{e}\n{}", server.log());
    assert_eq!(
        e.to_string(),
        "_http._tcp.web.example: the server answered SERVFAIL"
    );
    // An SRV record whose target fails (SERVFAIL) fails the whole answer: the target may be
    // there still.
    let records = format!(
        "{}srv-host=_http._tcp.web.test,a.web.test,80\n\
         srv-host=_http._tcp.web.test,b.web.example,80\nhost-record=a.web.test,127.0.0.2\n",
        servfail_lines(&upstream)
    );
    server.set_records(&records).await;
    let e = resolve(&resolver, "_http._tcp.web.test").await.unwrap_err();
    assert_eq!(e.kind(), "servfail", "{e}");
    assert!(e.to_string().contains("target b.web.example"), "{e}");

    // No upstream at all: dnsmasq refuses names it does not hold.
    upstream_less(&mut server).await;
    let e = resolve(&resolver, "web.example:80").await.unwrap_err();
    assert_eq!(e.kind(), "rcode", "{e}");
    assert!(e.to_string().ends_with("answered REFUSED"), "{e}");

    // Stopped: no answer within the attempts.
    server.stop();
    let e = resolve(&resolver, "_http._tcp.web.test").await.unwrap_err();
    assert_eq!(
        e,
        DnsError::Timeout {
            name: "_http._tcp.web.test".into(),
            attempts: 2,
            timeout: Duration::from_millis(300)
        }
    );
    // And back.
    server.resume().await;
    assert_eq!(
        resolve(&resolver, "web.example:80")
            .await
            .unwrap_err()
            .kind(),
        "rcode"
    );
}

async fn upstream_less(server: &mut Dnsmasq) {
    server
        .set_records("host-record=a.web.test,127.0.0.2\n")
        .await;
}

#[tokio::test]
async fn bad_records_are_dropped_one_by_one_and_an_answer_of_only_bad_ones_fails() {
    let records = "\
srv-host=_http._tcp.bad.test,gone.bad.test,80
srv-host=_http._tcp.bad.test,a.bad.test,0
srv-host=_http._tcp.bad.test,zero.bad.test,80
srv-host=_http._tcp.none.test,.
srv-host=_http._tcp.twice.test,a.bad.test,80,0,1
srv-host=_http._tcp.twice.test,alias.bad.test,80,1,9
srv-host=_http._tcp.twice.test,.
host-record=a.bad.test,127.0.0.2
host-record=alias.bad.test,127.0.0.2
host-record=zero.bad.test,0.0.0.0
";
    let Some(server) = Dnsmasq::start(records, 30).await else {
        return;
    };
    let resolver = resolver(&server);
    let e = resolve(&resolver, "_http._tcp.bad.test").await.unwrap_err();
    let DnsError::NoUsableRecord { reasons, .. } = &e else {
        panic!("{e:?}");
    };
    for why in [
        "gone.bad.test:80: no such name (NXDOMAIN)",
        "a.bad.test:0: port 0",
        "0.0.0.0:80: unspecified address",
    ] {
        assert!(reasons.contains(why), "{why} in {reasons}");
    }
    // Only `.`: the zone says there is no service, an explicitly empty answer.
    let none = resolve(&resolver, "_http._tcp.none.test").await.unwrap();
    assert!(none.records.is_empty(), "{none:?}");
    assert_eq!(
        none.skipped,
        ["_http._tcp.none.test: target `.` (no service there)"]
    );
    // The same address and port from two records: the lower priority keeps it, once.
    let twice = resolve(&resolver, "_http._tcp.twice.test").await.unwrap();
    assert_eq!(
        endpoints(&twice),
        [("127.0.0.2:80".to_string(), 0, 1)],
        "{twice:?}"
    );
    let skipped = twice.skipped.join("\n");
    assert!(
        skipped.contains("alias.bad.test: 127.0.0.2:80: given by another record already"),
        "{skipped}"
    );
}

#[tokio::test]
async fn records_change_between_lookups_and_a_large_answer_comes_over_tcp() {
    let Some(mut server) = Dnsmasq::start(WEB, 30).await else {
        return;
    };
    let resolver = resolver(&server);
    assert_eq!(
        resolve(&resolver, "_http._tcp.web.test")
            .await
            .unwrap()
            .records
            .len(),
        2
    );
    // 300 SRV records do not fit a UDP answer: the server truncates it, the client asks
    // again over TCP.
    let mut records = String::new();
    for i in 0..300 {
        let port = 10_000 + i;
        records.push_str(&format!(
            "srv-host=_http._tcp.web.test,n{i}.web.test,{port},0,{i}\n"
        ));
        records.push_str(&format!(
            "host-record=n{i}.web.test,127.0.{}.{}\n",
            i / 200,
            1 + i % 200
        ));
    }
    server.set_records(&records).await;
    let answer = resolve(&resolver, "_http._tcp.web.test").await.unwrap();
    assert_eq!(answer.records.len(), 300, "{:?}", answer.skipped);
    assert!(answer.skipped.is_empty(), "{:?}", answer.skipped);
    let n7 = answer
        .records
        .iter()
        .find(|r| r.target == "n7.web.test")
        .unwrap();
    assert_eq!((n7.port, n7.weight), (10_007, 7));
    assert_eq!(
        n7.addresses,
        ["127.0.0.8".parse::<std::net::IpAddr>().unwrap()]
    );
}

#[tokio::test]
async fn an_answer_too_big_for_udp_is_asked_again_over_tcp_and_taken_whole() {
    // 300 SRV records do not fit a 4,096-byte EDNS datagram: the UDP answer is truncated, and
    // taking its part as the set would drain every node it left out.
    let mut records = String::new();
    for i in 0..300 {
        records.push_str(&format!(
            "srv-host=_http._tcp.big.test,h{i}.big.test,8080,0,1\n\
             host-record=h{i}.big.test,10.1.{}.{}\n",
            i / 250,
            i % 250 + 1
        ));
    }
    let Some(server) = Dnsmasq::start(&records, 30).await else {
        return;
    };
    let answer = resolve(&resolver(&server), "_http._tcp.big.test.")
        .await
        .unwrap();
    assert_eq!(answer.endpoints().count(), 300, "{:?}", answer.skipped);
}
