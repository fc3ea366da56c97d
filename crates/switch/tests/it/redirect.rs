//! URL redirection (SWEB): 302 to the picked node's public address, never twice for a request.

use crate::common;

use capstan_switch::Config;
use common::*;
use hyper::StatusCode;

fn config(nodes: &[&Backend], redirect: &str) -> String {
    let mut text = String::from(
        "listen = [\"127.0.0.1:0\"]\nadmin = \"127.0.0.1:0\"\n[policy]\nname = \"round-robin\"\n",
    );
    text.push_str(redirect);
    text.push('\n');
    for node in nodes {
        text.push_str(&format!(
            "[[node]]\nname = \"{}\"\naddress = \"{}\"\npublic_url = \"http://{}\"\n",
            node.name, node.addr, node.addr
        ));
    }
    text
}

#[tokio::test]
async fn a_redirect_class_gets_the_picked_nodes_address_and_is_never_redirected_twice() {
    let (a, b) = (Backend::start("a").await, Backend::start("b").await);
    let redirect = "[redirect]\nclasses = [\"disk\"]\n";
    let sw = start_switch(&config(&[&a, &b], redirect)).await;
    let addr = sw.listen_addrs[0];

    let mut targets = Vec::new();
    for _ in 0..4 {
        let answer = get(addr, "/cgi-bin/disk_load.cgi?file=x").await;
        assert_eq!(answer.status, StatusCode::FOUND, "{}", answer.text());
        assert_eq!(answer.header("cache-control"), "no-store");
        targets.push(answer.header("location"));
    }
    let expect = |n: &Backend| {
        format!(
            "http://{}/cgi-bin/disk_load.cgi?file=x&capstan-redirected=1",
            n.addr
        )
    };
    // Round robin over the two nodes' public addresses; neither node was asked anything.
    assert_eq!(
        targets,
        vec![expect(&a), expect(&b), expect(&a), expect(&b)]
    );
    assert_eq!(a.hits() + b.hits(), 0);

    // A request that was redirected once is forwarded, whatever its class.
    let marked = get(addr, "/cgi-bin/disk_load.cgi?file=x&capstan-redirected=1").await;
    assert_eq!(marked.status, StatusCode::OK, "{}", marked.text());
    assert_eq!(a.hits() + b.hits(), 1);

    // Classes the section does not name are forwarded.
    let plain = get(addr, "/index.html").await;
    assert_eq!(plain.status, StatusCode::OK);

    let status = status_json(sw.admin_addr.unwrap()).await;
    assert_eq!(status["nodes"][0]["redirects"], 2, "{status}");
    assert_eq!(status["nodes"][1]["redirects"], 2, "{status}");
}

#[tokio::test]
async fn redirect_configuration_errors_are_specific() {
    let a = Backend::start("a").await;
    let without_url = format!(
        "listen = [\"127.0.0.1:0\"]\n[redirect]\n[[node]]\nname = \"a\"\naddress = \"{}\"\n",
        a.addr
    );
    let e = Config::parse(&without_url, Some("t.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("node `a` has none") && e.contains("public_url"),
        "{e}"
    );

    let bad_status = config(&[&a], "[redirect]\nstatus = 200\n");
    let e = Config::parse(&bad_status, Some("t.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("redirect.status 200 is not a redirect"), "{e}");

    let bad_class = config(&[&a], "[redirect]\nclasses = [\"nope\"]\n");
    let e = Config::parse(&bad_class, Some("t.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown class `nope`"), "{e}");

    let bad_url = format!(
        "listen = [\"127.0.0.1:0\"]\n[[node]]\nname = \"a\"\naddress = \"{}\"\npublic_url = \"ftp://x/y\"\n",
        a.addr
    );
    let e = Config::parse(&bad_url, Some("t.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.toml:5:") && e.contains("must be http://"),
        "{e}"
    );
}
