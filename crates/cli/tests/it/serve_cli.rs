//! `capstan serve` and `capstan check` as a user runs them.

use crate::support;

use std::io::{Read, Write};
use std::time::Duration;

use support::*;

#[test]
fn serve_and_check_help_describe_every_option() {
    let out = run(&["serve", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--config",
        "--listen",
        "--node",
        "--policy",
        "--policy-param",
        "--class",
        "--admin",
        "--admin-token-file",
        "--debug-headers",
        "--cache",
        "--threads",
        "--dry-run",
        "SIGHUP",
        "SIGTERM",
        "TLS",
        "HTTP/2",
        "examples/tls.toml",
        "max_connections_per_client",
        "client_send",
    ] {
        assert!(help.contains(flag), "serve --help lacks {flag}:\n{help}");
    }
    for policy in capstan_core::PolicySpec::names() {
        assert!(help.contains(policy), "serve --help lacks policy {policy}");
    }
    let out = run(&["check", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(
        help.contains("<FILE>") && help.contains("LINE:COLUMN"),
        "{help}"
    );
}

#[test]
fn check_accepts_every_example() {
    let dir = repo_root().join("examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        // `wan.toml` configures `capstan wan`, not the switch (its own test parses it).
        let switch_config = path.file_name().is_some_and(|n| n != "wan.toml");
        if switch_config && path.extension().is_some_and(|e| e == "toml") {
            let out = run(&["check", path.to_str().unwrap()]);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                stdout.contains("policy ") && stdout.contains("nodes "),
                "{stdout}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 5, "examples checked: {checked}");
}

#[test]
fn check_describes_the_connection_limits() {
    let dir = std::env::temp_dir().join(format!("capstan-cli-limits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("limits.toml");
    let text = "listen = [\"127.0.0.1:8080\"]\n\
                [timeouts]\nclient_send = \"5s\"\n\
                [limits]\nmax_connections_per_client = 4\n\
                [[listener]]\naddress = \"127.0.0.1:8081\"\nmax_connections = 2\n\
                max_connections_per_client = 0\n\
                [[node]]\naddress = \"127.0.0.1:9001\"\n";
    std::fs::write(&path, text).unwrap();
    let out = run(&["check", path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for said in [
        "client send 5s",
        "per client address 4",
        "http://127.0.0.1:8081, at most 2 connections, no per-client limit",
    ] {
        assert!(stdout.contains(said), "lacks `{said}`:\n{stdout}");
    }
}

fn check_error(text: &str) -> (String, i32) {
    let dir = std::env::temp_dir().join(format!("capstan-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("bad-{}.toml", text.len()));
    std::fs::write(&path, text).unwrap();
    let out = run(&["check", path.to_str().unwrap()]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    let prefix = format!("capstan: {}:", path.display());
    assert!(stderr.starts_with(&prefix), "{stderr}");
    (
        stderr.trim_end()[prefix.len()..].to_string(),
        out.status.code().unwrap(),
    )
}

#[test]
fn check_names_file_line_and_column_of_each_mistake() {
    let node = "[[node]]\naddress = \"127.0.0.1:9001\"\n";
    let cases = [
        (format!("listen = [\"127.0.0.1:8080\"\n{node}"), "2:1:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n{node}weight = 0\n"), "2:1:"),
        (format!("listen = [\"127.0.0.1:8080\"]\npolicy = 3\n{node}"), "2:10:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n[policy]\nname = \"lard\"\nt_high = \"x\"\n{node}"), "4:10:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n[policy]\nname = \"lard\"\nt_low = 70\nt_high = 65\n{node}"), "2:1:"),
        (format!("listen = [\"localhost\"]\n{node}"), "1:11:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n{node}[[rule]]\nclass = \"gold\"\nglob = \"/a/*\"\n"), "4:1:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n{node}[[rule]]\nclass = \"cpu\"\nregex = \"(\"\n"), "4:1:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n{node}[limits]\nmax_headers = -1\n"), "5:15:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n{node}[timeouts]\nupstream = \"fast\"\n"), "5:12:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n{node}[upstream]\nretry_budget_percent = 101\n"), "5:24:"),
        (format!("listen = [\"127.0.0.1:8080\"]\nadmin_token_file = \"/no/such/token\"\n{node}"), "2:20:"),
        (format!("listen = [\"127.0.0.1:8080\"]\nadmin_token = \"too short\"\n{node}"), "2:15:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n{node}[timeouts]\nclient_send = \"0s\"\n"), "5:15:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n{node}[limits]\nmax_connections_per_client = -1\n"), "5:30:"),
        (format!("listen = [\"127.0.0.1:8080\"]\n[[listener]]\naddress = \"127.0.0.1:8081\"\nmax_connections = 0\n{node}"), "4:19:"),
    ];
    for (text, location) in cases {
        let (rest, code) = check_error(&text);
        assert_eq!(code, 1);
        assert!(
            rest.starts_with(location),
            "want {location} in `{rest}` for\n{text}"
        );
        assert!(
            rest.len() > location.len() + 5,
            "says what is wrong: {rest}"
        );
    }
    let out = run(&["check", "/no/such/file.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.starts_with("capstan: /no/such/file.toml:1:1: cannot read"),
        "{stderr}"
    );
}

#[test]
fn bad_flags_are_one_line_errors() {
    for (args, want) in [
        (
            &[
                "serve",
                "--policy",
                "fastest",
                "--listen",
                "127.0.0.1:1",
                "--node",
                "127.0.0.1:2",
            ][..],
            "fastest",
        ),
        (
            &["serve", "--listen", "127.0.0.1:1", "--node", "nowhere"][..],
            "no port",
        ),
        (&["serve", "--listen", "127.0.0.1:1"][..], "no node"),
        (&["serve"][..], "--config"),
        (
            &[
                "serve",
                "--listen",
                "127.0.0.1:1",
                "--node",
                "a=127.0.0.1:2@x",
            ][..],
            "weight",
        ),
        (
            &[
                "serve",
                "--listen",
                "127.0.0.1:1",
                "--node",
                "127.0.0.1:2",
                "--policy",
                "lard",
                "--policy-param",
                "t_low=oops",
            ][..],
            "t_low",
        ),
        (
            &[
                "serve",
                "--listen",
                "127.0.0.1:1",
                "--node",
                "127.0.0.1:2",
                "--class",
                "nopattern",
            ][..],
            "NAME=PATTERN",
        ),
        (&["serve", "--bogus"][..], "--bogus"),
        (
            &[
                "serve",
                "--listen",
                "127.0.0.1:1",
                "--node",
                "127.0.0.1:2",
                "--cache",
                "lots",
            ][..],
            "--cache",
        ),
        (
            &[
                "serve",
                "--listen",
                "127.0.0.1:1",
                "--node",
                "127.0.0.1:2",
                "--cache",
                "100KB",
            ][..],
            "at least 1MiB",
        ),
        (
            &[
                "serve",
                "--listen",
                "127.0.0.1:1",
                "--node",
                "127.0.0.1:2",
                "--admin-token-file",
                "/no/such/token",
            ][..],
            "--admin-token-file: cannot read /no/such/token",
        ),
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: want {want} in {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// Four `capstan origin` nodes and the switch in front, once per policy, as the README shows.
#[test]
fn example_cluster_answers_through_every_policy() {
    let nodes: Vec<_> = (0..4).map(|_| origin(&[])).collect();
    let node_flags: Vec<String> = nodes
        .iter()
        .enumerate()
        .map(|(i, (_, addr))| format!("node{}={addr}", i + 1))
        .collect();
    let mut runs: Vec<Vec<String>> = capstan_core::PolicySpec::names()
        .iter()
        .map(|p| vec!["--policy".to_string(), p.to_string()])
        .collect();
    for example in [
        "cap",
        "balance",
        "weighted",
        "locality",
        "partitioning",
        "health",
    ] {
        let path = repo_root().join(format!("examples/{example}.toml"));
        runs.push(vec!["--config".into(), path.display().to_string()]);
    }
    for run_args in runs {
        let listen = free_addr();
        let admin = free_addr();
        let mut args: Vec<String> = vec![
            "serve".into(),
            "--listen".into(),
            listen.to_string(),
            "--admin".into(),
            admin.to_string(),
            "--debug-headers".into(),
        ];
        args.extend(run_args.iter().cloned());
        for flag in &node_flags {
            args.push("--node".into());
            args.push(flag.clone());
        }
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let _switch = spawn(&arg_refs, listen);
        for path in [
            "/file5k.html",
            "/cgi-bin/cpu_light.cgi",
            "/cgi-bin/disk_load.cgi?file=file500.html",
        ] {
            let reply = get(listen, path);
            assert_eq!(reply.status, 200, "{run_args:?} {path}: {}", reply.text());
            let node = reply.header("x-capstan-node").unwrap_or_default();
            assert!(node.starts_with("node"), "{run_args:?}: {}", reply.head);
        }
        assert_eq!(get(listen, "/file5k.html").body.len(), 5125);
        let status = get(admin, "/status");
        assert_eq!(status.status, 200);
        assert!(status.text().contains("\"served\""));
    }
}

#[test]
fn sigterm_lets_in_flight_requests_finish_and_exits_zero() {
    let (_node, node_addr) = origin(&["--cpu-med-ms", "700"]);
    let listen = free_addr();
    let (l, n) = (listen.to_string(), node_addr.to_string());
    let mut switch = spawn(&["serve", "--listen", &l, "--node", &n], listen);
    let in_flight = std::thread::spawn(move || get(listen, "/cgi-bin/cpu_med.cgi"));
    // In flight: at the node (its load report counts it for the 700 ms it runs), polled for.
    eventually("the request at the node", || {
        let rep: serde_json::Value =
            serde_json::from_slice(&get(node_addr, "/_capstan/load").body).unwrap();
        rep["active_requests"] == 1
    });
    switch.signal("TERM");
    let reply = in_flight.join().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.text());
    let status = switch.wait_exit(Duration::from_secs(10)).expect("exits");
    assert!(status.success(), "{status}");
}

#[test]
fn sighup_reloads_and_a_bad_file_keeps_the_old_configuration() {
    let (_node, node_addr) = origin(&[]);
    let listen = free_addr();
    let admin = free_addr();
    let dir = std::env::temp_dir().join(format!("capstan-hup-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("switch.toml");
    let config = |policy: &str| {
        format!(
            "listen = [\"{listen}\"]\nadmin = \"{admin}\"\n[policy]\nname = \"{policy}\"\n[[node]]\naddress = \"{node_addr}\"\n"
        )
    };
    std::fs::write(&path, config("round-robin")).unwrap();
    let mut switch = spawn(&["serve", "--config", path.to_str().unwrap()], listen);
    // The switch's log, read as it comes: a refused reload shows only there.
    let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let mut stderr = switch.0.stderr.take().unwrap();
    let reader = {
        let log = log.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                log.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let policy = || {
        let text = get(admin, "/status").text();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        v["policy"].as_str().unwrap().to_string()
    };
    assert_eq!(policy(), "round-robin");
    std::fs::write(&path, config("two-choices")).unwrap();
    switch.signal("HUP");
    eventually("the new policy", || policy() == "two-choices");
    std::fs::write(&path, "listen = [").unwrap();
    switch.signal("HUP");
    // Polled for in the log, not given a fixed pause: the reload was tried, and refused.
    eventually("the bad reload refused", || {
        log.lock().unwrap().contains("reload refused")
    });
    assert_eq!(policy(), "two-choices");
    assert_eq!(get(listen, "/file500.html").status, 200);
    switch.signal("TERM");
    assert!(switch.wait_exit(Duration::from_secs(10)).unwrap().success());
    reader.join().unwrap();
    let stderr = log.lock().unwrap().clone();
    assert!(stderr.contains("reload refused"), "{stderr}");
}

/// A 1 GiB download passes through while the switch's peak memory stays small.
#[test]
fn a_gigabyte_streams_through_in_bounded_memory() {
    const TOTAL: u64 = 1 << 30;
    let backend_addr = big_body_backend(TOTAL, "");
    let listen = free_addr();
    let (l, b) = (listen.to_string(), backend_addr.to_string());
    let switch = spawn(&["serve", "--listen", &l, "--node", &b], listen);
    let received = download_size(listen, "/big");
    assert!(
        received > TOTAL,
        "head and all {TOTAL} body bytes: {received}"
    );
    let peak_kb = peak_rss_kb(switch.pid());
    assert!(
        peak_kb < 64 * 1024,
        "peak resident memory {peak_kb} KiB for a 1 GiB body"
    );
}

#[test]
fn a_port_in_use_is_a_clear_error_even_with_several_workers() {
    let (_node, node_addr) = origin(&[]);
    let listen = free_addr();
    let (l, n) = (listen.to_string(), node_addr.to_string());
    let _first = spawn(
        &["serve", "--threads", "2", "--listen", &l, "--node", &n],
        listen,
    );
    let out = run(&["serve", "--threads", "2", "--listen", &l, "--node", &n]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(&format!("cannot listen on {l}")),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

fn token_file(name: &str, token: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-cli-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("{token}\n")).unwrap();
    path
}

/// A node at the switch's own listener (a forwarding loop) is called out; one elsewhere is not.
#[test]
fn a_node_at_the_switchs_own_listener_is_warned_about() {
    let out = run(&[
        "serve",
        "--dry-run",
        "--listen",
        "0.0.0.0:8080",
        "--node",
        "127.0.0.1:8080",
        "--node",
        "127.0.0.1:8081",
    ]);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    let warnings: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("warning"))
        .collect();
    assert_eq!(warnings.len(), 1, "{stdout}");
    assert!(
        warnings[0]
            .contains("its address 127.0.0.1:8080 is this switch's own listener 0.0.0.0:8080"),
        "{stdout}"
    );
}

/// An admin address beyond loopback without a token is called out; with one it is not.
#[test]
fn an_exposed_admin_without_a_token_is_warned_about() {
    let base = [
        "serve",
        "--dry-run",
        "--listen",
        "127.0.0.1:1",
        "--node",
        "127.0.0.1:2",
        "--admin",
        "0.0.0.0:9900",
    ];
    let out = run(&base);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("warning   the admin listener 0.0.0.0:9900 is not on loopback"),
        "{stdout}"
    );
    let token = token_file("dry-run.token", "dry-run-token-0123456789");
    let mut args = base.to_vec();
    args.extend(["--admin-token-file", token.to_str().unwrap()]);
    let out = run(&args);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(!stdout.contains("warning"), "{stdout}");
    assert!(stdout.contains("need the bearer token"), "{stdout}");
    assert!(
        !stdout.contains("dry-run-token"),
        "the token is not printed: {stdout}"
    );
}

/// `--admin-token-file` guards the mutating admin endpoints of a running switch.
#[test]
fn admin_token_file_flag_guards_reload() {
    let (_node, node_addr) = origin(&[]);
    let listen = free_addr();
    let admin = free_addr();
    let token = token_file("serve.token", "serve-token-0123456789");
    let (l, a, n) = (listen.to_string(), admin.to_string(), node_addr.to_string());
    let _switch = spawn(
        &[
            "serve",
            "--listen",
            &l,
            "--admin",
            &a,
            "--node",
            &n,
            "--admin-token-file",
            token.to_str().unwrap(),
        ],
        listen,
    );
    let refused = http(admin, "POST", "/reload");
    assert_eq!(refused.status, 401, "{}", refused.text());
    assert_eq!(
        refused.header("www-authenticate").as_deref(),
        Some("Bearer realm=\"capstan-admin\"")
    );
    let mut s = std::net::TcpStream::connect(admin).unwrap();
    write!(
        s,
        "POST /reload HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer serve-token-0123456789\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("without a configuration file"),
        "past the token, to the reload itself: {answer}"
    );
    assert_eq!(get(admin, "/status").status, 200, "reads stay open");
}

/// `check --resolve` against a real dnsmasq (skipped with a note when it is missing) and a
/// node file: each source's nodes now, its standby and skipped records, and a source that
/// gives no list makes the exit status 1.
#[tokio::test]
async fn check_resolve_prints_what_each_source_gives_now() {
    let records = "\
srv-host=_http._tcp.web.test,a.web.test,8080,0,3
srv-host=_http._tcp.web.test,b.web.test,8081,5,1
srv-host=_http._tcp.web.test,a.web.test,0,0,1
host-record=a.web.test,127.0.0.1
host-record=b.web.test,127.0.0.1
";
    let Some(server) = capstan_discovery::dns::testing::Dnsmasq::start(records, 30).await else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("capstan-check-resolve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("nodes.json"),
        r#"{"nodes": [{"address": "127.0.0.1:9001"}]}"#,
    )
    .unwrap();
    let config = |extra: &str| {
        let path = dir.join("switch.toml");
        let text = format!(
            "listen = [\"127.0.0.1:0\"]\n\
             [[discovery]]\ndns = \"_http._tcp.web.test\"\nresolvers = [\"{}\"]\n\
             [[discovery]]\nfile = \"nodes.json\"\n{extra}",
            server.addr()
        );
        std::fs::write(&path, text).unwrap();
        path
    };
    let out = run(&["check", "--resolve", config("").to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for line in [
        "resolved  dns dns _http._tcp.web.test: 1 nodes",
        "  dns-127.0.0.1:8080 127.0.0.1:8080         weight 3",
        "  standby  127.0.0.1:8081 (b.web.test:8081): priority 5",
        "  skipped  _http._tcp.web.test: a.web.test:0: port 0",
        "resolved  file file ",
        "  file-127.0.0.1:9001 127.0.0.1:9001         weight 1",
    ] {
        assert!(stdout.contains(line), "{line:?} in\n{stdout}");
    }

    let gone = format!(
        "[[discovery]]\ndns = \"gone.test:80\"\nname = \"gone\"\nresolvers = [\"{}\"]\n",
        server.addr()
    );
    let out = run(&["check", "--resolve", config(&gone).to_str().unwrap()]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}{stderr}");
    assert!(
        stdout
            .contains("resolved  gone dns gone.test:80: error: gone.test: no such name (NXDOMAIN)"),
        "{stdout}"
    );
    assert!(
        stderr.contains("1 of 3 discovery sources gave no list"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Kubernetes example cannot run here, but the configuration in its ConfigMap is a
/// valid one with a dns source.
#[test]
fn the_kubernetes_example_holds_a_valid_configuration() {
    let yaml =
        std::fs::read_to_string(repo_root().join("examples/kubernetes/capstan.yaml")).unwrap();
    let toml: String = yaml
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("capstan.toml: |"))
        .skip(1)
        .take_while(|l| l.is_empty() || l.starts_with("    "))
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or(l)))
        .collect();
    assert!(toml.contains("[[discovery]]"), "{toml}");
    let path = std::env::temp_dir().join(format!("capstan-k8s-{}.toml", std::process::id()));
    std::fs::write(&path, &toml).unwrap();
    let out = run(&["check", path.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("discovery web: dns _http._tcp.web.default.svc.cluster.local"),
        "{stdout}"
    );
    let _ = std::fs::remove_file(&path);
}
