//! A newcomer's first hour (issue 41, item 5), each claim checked as the user meets it: the
//! `capstan` binary as a process on loopback. A listener refuses a port already in use (no
//! silent SO_REUSEPORT sharing); `capstan bench` exits non-zero, with one line, when nothing
//! succeeded or too many requests failed, stops early against a dead target, and its --help
//! examples ask for paths the README's nodes serve; `capstan man` prints every page it lists;
//! `capstan lab` and `capstan sim` name every experiment `--list` shows when given an unknown
//! one; the test nodes' own headers are not named like the switch's; no help shows a default
//! twice; a bad number says in words what is wanted.

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// Runs `capstan ARGS` to its end, killing it after `limit` (a command that should have
/// refused to start, or stopped early, fails the test rather than hanging it).
fn run_within(args: &[&str], limit: Duration) -> Output {
    let child = capstan()
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("capstan starts");
    let mut proc = Proc(child);
    let status = proc.wait_exit(limit);
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    if status.is_some() {
        let _ = proc.0.stdout.take().unwrap().read_to_end(&mut stdout);
        let _ = proc.0.stderr.take().unwrap().read_to_end(&mut stderr);
    }
    let status = status.unwrap_or_else(|| panic!("capstan {args:?} still running after {limit:?}"));
    Output {
        status,
        stdout,
        stderr,
    }
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A command that must refuse to start: exit status 1 and one line on standard error naming
/// the address and why.
fn assert_refused(args: &[&str], addr: SocketAddr) {
    let out = run_within(args, Duration::from_secs(30));
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "capstan {args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("cannot listen on {addr}")) && err.contains("in use"),
        "capstan {args:?}: {err}"
    );
}

#[test]
fn a_listener_refuses_a_port_a_switch_or_a_node_already_serves() {
    // A switch with two workers sharing its port (SO_REUSEPORT within the process).
    let (_node, node) = origin(&["--threads", "1", "--name", "behind"]);
    let listen = free_addr();
    let _switch = spawn(
        &[
            "serve",
            "--listen",
            &listen.to_string(),
            "--node",
            &node.to_string(),
            "--threads",
            "2",
        ],
        listen,
    );
    let at = listen.to_string();
    assert_refused(&["origin", "--listen", &at, "--threads", "2"], listen);
    assert_refused(&["origin", "--listen", &at, "--threads", "1"], listen);
    assert_refused(&["agent", "--listen", &at], listen);
    // The switch alone still answers on its port: every reply came through it.
    for _ in 0..20 {
        let reply = get(listen, "/file500.html");
        assert_eq!(reply.status, 200);
        assert_eq!(reply.header("x-origin-node").as_deref(), Some("behind"));
    }
    // A node with two workers: a second node, or a switch, on its port is refused too.
    let (_first, first) = origin(&["--threads", "2", "--name", "first"]);
    let at = first.to_string();
    assert_refused(&["origin", "--listen", &at, "--threads", "2"], first);
    assert_refused(
        &["serve", "--listen", &at, "--node", &node.to_string()],
        first,
    );
    assert_refused(
        &[
            "serve",
            "--listen",
            &free_addr().to_string(),
            "--admin",
            &at,
            "--node",
            &node.to_string(),
        ],
        first,
    );
    assert_eq!(
        get(first, "/file500.html")
            .header("x-origin-node")
            .as_deref(),
        Some("first")
    );
}

/// A loopback port held by a socket that is bound but does not listen: every connect is
/// refused, and no other socket (nor a connection to itself) can take the port meanwhile.
fn dead_port() -> (socket2::Socket, SocketAddr) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
        .unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap();
    (socket, addr)
}

#[test]
fn bench_against_a_dead_port_stops_early_and_says_why_even_quiet() {
    let (_held, dead) = dead_port();
    let url = format!("http://{dead}/file5k.html");
    let started = Instant::now();
    let args = [
        "bench",
        &url,
        "--clients",
        "50",
        "--keepalive",
        "--duration",
        "60s",
        "-q",
    ];
    let out = run_within(&args, Duration::from_secs(50));
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "it gave up long before the 60 s"
    );
    assert!(out.stdout.is_empty(), "-q: nothing on stdout");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("capstan: no request succeeded:")
            && err.contains("connect_refused")
            && err.contains("stopped after 5 s"),
        "{err}"
    );
    // --max-error-rate 1 accepts any outcome: the whole duration, exit 0, the errors counted.
    let started = Instant::now();
    let out = run_within(
        &[
            "bench",
            &url,
            "--clients",
            "2",
            "--duration",
            "2s",
            "--max-error-rate",
            "1",
        ],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(started.elapsed() >= Duration::from_secs(2));
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("(connect_refused "), "{summary}");
    assert!(!summary.contains("stopped after"), "{summary}");
}

#[test]
fn bench_fails_a_run_of_404s_and_passes_a_good_one() {
    let (_node, node) = origin(&["--threads", "1"]);
    // The README's cluster answers 404 at `/`: every response a failure.
    let root = format!("http://{node}/");
    let out = run_within(
        &["bench", &root, "--clients", "2", "--duration", "1s", "-q"],
        Duration::from_secs(30),
    );
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("no request succeeded") && err.contains("http_4xx"),
        "{err}"
    );
    let file = format!("http://{node}/file5k.html");
    let out = run_within(
        &["bench", &file, "--clients", "2", "--duration", "1s", "-q"],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "-q: silent");
}

/// A server that answers every other request with a 500 (keep-alive), the rest with a 200.
fn half_failing_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            std::thread::spawn(move || {
                let (mut buf, mut n) = (Vec::new(), 0u64);
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        n += 1;
                        let status = if n % 2 == 0 { "500 Oops" } else { "200 OK" };
                        let reply = format!("HTTP/1.1 {status}\r\nContent-Length: 2\r\n\r\nok");
                        if s.write_all(reply.as_bytes()).is_err() {
                            return;
                        }
                    }
                    match s.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(k) => buf.extend_from_slice(&chunk[..k]),
                    }
                }
            });
        }
    });
    addr
}

#[test]
fn bench_fails_a_run_whose_error_rate_passes_max_error_rate() {
    let url = format!("http://{}/x", half_failing_server());
    let bench = |rate: &str| {
        run_within(
            &[
                "bench",
                &url,
                "--clients",
                "1",
                "--keepalive",
                "--duration",
                "1s",
                "--max-error-rate",
                rate,
                "-q",
            ],
            Duration::from_secs(30),
        )
    };
    let out = bench("0.25");
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("http_5xx") && err.contains("> --max-error-rate 25 %"),
        "{err}"
    );
    let out = bench("60%");
    assert!(out.status.success(), "{}", stderr_of(&out));
}

#[test]
fn bench_help_examples_ask_for_paths_the_readme_nodes_serve() {
    let help = String::from_utf8(run(&["bench", "--help"]).stdout).unwrap();
    let (_node, node) = origin(&["--threads", "1"]);
    // A request source gives the paths itself; the URL is then only the base.
    let sources = ["--tree", "--replay", "--polygraph", "--urls", "--filelist"];
    let mut checked = 0;
    for line in help.lines().map(str::trim) {
        let Some(url) = line
            .split_whitespace()
            .find(|w| w.starts_with("http://") || w.starts_with("https://"))
        else {
            continue;
        };
        let example = line.starts_with("capstan bench") || line.starts_with("sudo capstan bench");
        if !example || sources.iter().any(|s| line.contains(s)) {
            continue;
        }
        let path = url
            .splitn(4, '/')
            .nth(3)
            .map_or("/".to_string(), |p| format!("/{p}"));
        let reply = get(node, &path);
        assert_eq!(reply.status, 200, "{line}: {path} on a README node");
        checked += 1;
    }
    assert!(checked >= 10, "{checked} examples checked:\n{help}");
}

/// `capstan man ARGS`' page, with its exit status.
fn man(path: &[String]) -> Output {
    let mut args = vec!["man".to_string()];
    args.extend(path.iter().cloned());
    capstan().args(&args).output().expect("capstan runs")
}

#[test]
fn every_manual_page_capstan_man_lists_can_be_printed() {
    let mut pages = vec![Vec::<String>::new()];
    let mut seen = 0;
    while let Some(path) = pages.pop() {
        let out = man(&path);
        assert!(out.status.success(), "capstan man {path:?}: {out:?}");
        let page = String::from_utf8(out.stdout).unwrap();
        let name = std::iter::once("capstan".to_string())
            .chain(path.iter().cloned())
            .collect::<Vec<_>>()
            .join("-");
        assert!(
            page.contains(&format!(".TH {name} 1")),
            "capstan man {path:?} is {name}(1): {}",
            &page[..page.len().min(300)]
        );
        // Each page names the pages below it as `NAME\-SUB(1)` in its SUBCOMMANDS section.
        let prefix = format!("{}\\-", name.replace('-', "\\-"));
        for line in page.lines() {
            let Some(sub) = line
                .strip_prefix(&prefix)
                .and_then(|r| r.strip_suffix("(1)"))
            else {
                continue;
            };
            let mut below = path.clone();
            below.push(sub.replace("\\-", "-"));
            pages.push(below);
        }
        seen += 1;
    }
    assert!(seen > 20, "{seen} pages: the subcommands' and theirs");
    let out = man(&["serve".into(), "nosuch".into()]);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains("capstan-serve-nosuch"), "{err}");
}

/// The names `--list` prints: the first word of each indented line under a heading, up to
/// `until` (a line starting with it ends the list).
fn listed_names(list: &str, until: &str) -> Vec<String> {
    list.lines()
        .take_while(|l| !l.starts_with(until))
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// The names an unknown name's error lists: `(a, b, c) and no such file` or
/// `(known: a, b; or a .toml file)`.
fn names_in_error(err: &str) -> Vec<String> {
    let inside = err
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map_or("", |(inside, _)| inside);
    let inside = inside.trim_start_matches("known: ");
    let inside = inside.split(';').next().unwrap_or("");
    inside.split(", ").map(|n| n.trim().to_string()).collect()
}

#[test]
fn an_unknown_lab_or_sim_name_lists_every_name_list_shows() {
    for (command, at_least) in [("lab", 25), ("sim", 8)] {
        let list = String::from_utf8(run(&[command, "--list"]).stdout).unwrap();
        // sim --list: the scenarios, before the policies (after the first empty line).
        let list = list.split("\n\n").next().unwrap();
        let names = listed_names(list, "Default:");
        assert!(names.len() >= at_least, "{command} --list: {names:?}");
        let out = run(&[command, "nosuch"]);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        let known = names_in_error(&err);
        let missing: Vec<&String> = names.iter().filter(|n| !known.contains(n)).collect();
        assert!(
            missing.is_empty(),
            "capstan {command} nosuch omits {missing:?}: {err}"
        );
    }
}

#[test]
fn a_nodes_own_headers_are_named_apart_from_the_switchs() {
    let (_node, node) = origin(&["--threads", "1", "--name", "node7"]);
    let miss = get(node, "/file5k.html");
    let hit = get(node, "/file5k.html");
    assert_eq!(miss.header("x-origin-node").as_deref(), Some("node7"));
    assert_eq!(miss.header("x-origin-file-cache").as_deref(), Some("miss"));
    assert_eq!(hit.header("x-origin-file-cache").as_deref(), Some("hit"));
    // Through a switch without --debug-headers, no X-Capstan-* field at all: nothing a user
    // could take for the switch's own.
    for debug in [false, true] {
        let listen = free_addr();
        let mut args = vec![
            "serve".to_string(),
            "--listen".into(),
            listen.to_string(),
            "--node".into(),
            node.to_string(),
            "--threads".into(),
            "1".into(),
        ];
        if debug {
            args.push("--debug-headers".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let _switch = spawn(&args, listen);
        let reply = get(listen, "/file5k.html");
        let theirs: Vec<&str> = reply
            .head
            .lines()
            .filter(|l| l.to_ascii_lowercase().starts_with("x-capstan-"))
            .collect();
        if debug {
            assert!(
                theirs
                    .iter()
                    .any(|l| l.to_ascii_lowercase().starts_with("x-capstan-node:")),
                "{}",
                reply.head
            );
        } else {
            assert!(theirs.is_empty(), "{}", reply.head);
        }
        assert_eq!(reply.header("x-origin-node").as_deref(), Some("node7"));
    }
    let readme = std::fs::read_to_string(repo_root().join("crates/origin/README.md")).unwrap();
    for name in ["X-Origin-Node", "X-Origin-File-Cache"] {
        assert!(
            readme.contains(name),
            "crates/origin/README.md documents {name}"
        );
    }
}

/// Every subcommand path from `capstan help`'s Commands sections, recursively.
fn subcommands(path: Vec<String>) -> Vec<Vec<String>> {
    let mut args = path.clone();
    args.push("--help".into());
    let out = capstan().args(&args).output().unwrap();
    let help = String::from_utf8(out.stdout).unwrap();
    let mut all = vec![path.clone()];
    let commands = help
        .split("\nCommands:\n")
        .nth(1)
        .map(|rest| rest.split("\n\n").next().unwrap_or(""));
    for line in commands.unwrap_or("").lines() {
        let name = match line
            .strip_prefix("  ")
            .and_then(|l| l.split_whitespace().next())
        {
            Some(n) if !line.starts_with("   ") && n != "help" => n,
            _ => continue,
        };
        let mut below = path.clone();
        below.push(name.to_string());
        all.extend(subcommands(below));
    }
    all
}

#[test]
fn no_help_shows_a_default_twice() {
    let paths = subcommands(Vec::new());
    assert!(paths.len() > 12, "{paths:?}");
    for path in paths {
        for flag in ["-h", "--help"] {
            let mut args = path.clone();
            args.push(flag.into());
            let out = capstan().args(&args).output().unwrap();
            let help = String::from_utf8(out.stdout).unwrap();
            // An option's entry: from its `-x`/`--flag` line to the next one.
            let mut entries: Vec<String> = Vec::new();
            for line in help.lines() {
                let t = line.trim_start();
                if t.starts_with('-')
                    || t.starts_with('<')
                    || t.starts_with('[')
                    || entries.is_empty()
                {
                    entries.push(String::new());
                }
                let entry = entries.last_mut().unwrap();
                entry.push_str(t);
                entry.push(' ');
            }
            for entry in entries {
                assert!(
                    entry.matches("[default:").count() <= 1,
                    "capstan {args:?}: {entry}"
                );
            }
        }
    }
}

#[test]
fn a_bad_number_says_in_words_what_is_wanted() {
    for (flag, value, wanted) in [
        (
            "--clients",
            "lots",
            "expected a whole number of clients, e.g. 50",
        ),
        (
            "--rate",
            "fast",
            "expected a rate in requests per second, e.g. 2000",
        ),
        ("--max-error-rate", "2", "expected a share between 0 and 1"),
    ] {
        let out = run(&["bench", "http://127.0.0.1:9/", flag, value]);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains(wanted), "{flag} {value}: {err}");
        assert!(
            !err.contains("usize") && !err.contains("invalid digit"),
            "{err}"
        );
    }
}
