//! `capstan origin` as users run it: a real process, real loopback HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn capstan() -> Command {
    Command::new(env!("CARGO_BIN_EXE_capstan"))
}

/// Kills the node however the test ends.
struct Node(Child, SocketAddr);

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start a node on port 0 and learn its address from the `listening on` line.
fn start(args: &[&str]) -> Node {
    let mut child = capstan()
        .args(["origin", "--listen", "127.0.0.1:0", "--threads", "1"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("capstan starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("a line on stdout");
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .parse()
        .unwrap();
    Node(child, addr)
}

/// GET on a fresh connection; (status, head, body, elapsed).
fn get(addr: SocketAddr, path: &str) -> (u16, String, Vec<u8>, Duration) {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head, raw[split + 4..].to_vec(), t.elapsed())
}

#[test]
fn help_documents_every_option_with_defaults() {
    let out = capstan().args(["origin", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--config",
        "--listen",
        "--tree",
        "--seed",
        "--files",
        "--resources",
        "--cores",
        "--speed",
        "--data-dir",
        "--cache-fraction",
        "--cpu-light-ms",
        "--cpu-med-ms",
        "--disk-load-ms",
        "--load-interval-ms",
        "--threads",
        "--partition",
        "--remote-penalty",
        "--process-limit",
        "--process-memory",
        "--backlog",
        "--report-listen",
    ] {
        let line = help
            .lines()
            .position(|l| l.trim_start().starts_with(flag) || l.contains(&format!(" {flag} ")))
            .unwrap_or_else(|| panic!("{flag} missing from help"));
        // The option's description (it may wrap, over as many lines as the widest flag leaves
        // it) names its default.
        let lines: Vec<&str> = help.lines().skip(line).collect();
        let end = lines
            .iter()
            .skip(1)
            .position(|l| l.trim_start().starts_with('-') || l.trim().is_empty())
            .map_or(lines.len(), |i| i + 1);
        let text: String = lines[..end].concat();
        assert!(
            text.contains("[default:") || flag == "--config",
            "{flag} has no default in help"
        );
    }
    assert!(help.contains("webstone-2000") && help.contains("/_capstan/load"));
}

#[test]
fn bad_input_is_one_line_and_non_zero() {
    let dir = std::env::temp_dir().join(format!("capstan-origin-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "seed = 1\n\n[node]\ncores = \"two\"\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--tree".into(), "webstone2000".into()], "--tree"),
        (vec!["--speed".into(), "0".into()], "speed"),
        (vec!["--speed".into(), "-1".into()], "speed"),
        (vec!["--cores".into(), "0".into()], "cores"),
        (vec!["--files".into(), "10".into()], "fixed file count"),
        (
            vec!["--config".into(), "/nonexistent/origin.toml".into()],
            "/nonexistent/origin.toml",
        ),
        (vec!["--config".into(), bad.display().to_string()], "line 4"),
        (
            vec!["--partition".into(), "4/4".into()],
            "K must be less than N",
        ),
        (
            vec!["--partition".into(), "0/0".into()],
            "N must be at least 1",
        ),
        (
            vec!["--partition".into(), "1".into()],
            "bad partition \"1\"",
        ),
        (
            vec!["--partition".into(), "a/4".into()],
            "K is not a whole number",
        ),
        (vec!["--partition=-1/4".into()], "K is not a whole number"),
        (
            vec![
                "--partition".into(),
                "0/2".into(),
                "--resources".into(),
                "real".into(),
            ],
            "partition needs resources = emulated",
        ),
        (
            vec!["--remote-penalty".into(), "-0.5".into()],
            "remote_penalty",
        ),
    ];
    for (args, needle) in cases {
        let out = capstan().arg("origin").args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?} should fail");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_node_started_from_the_command_line_serves_and_reports() {
    let node = start(&["--tree", "webstone-2000", "--seed", "3", "--cores", "2"]);
    let (status, head, body, _) = get(node.1, "/file5k_17.html");
    assert_eq!(status, 200);
    assert_eq!(body.len(), 5125);
    assert!(head
        .to_ascii_lowercase()
        .contains("content-type: text/html"));

    let (status, _, _, took) = get(node.1, "/cgi-bin/cpu_med.cgi");
    assert_eq!(status, 200);
    assert!(took >= Duration::from_millis(95), "{took:?}");

    let (status, _, body, _) = get(node.1, "/_capstan/load");
    assert_eq!(status, 200);
    let rep: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(rep["cores"], 2);
    assert_eq!(rep["served"], 2);
    assert_eq!(rep["tree"], "webstone-2000");
    // 100 ms of CPU plus the static file's ~1 ms, over two cores.
    let busy = rep["since_start"]["cpu_busy_s"].as_f64().unwrap();
    assert!((busy - 0.0506).abs() < 0.002, "{busy}");
}

#[test]
fn config_file_and_flags_combine() {
    let dir = std::env::temp_dir().join(format!("capstan-origin-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("node.toml");
    std::fs::write(
        &cfg,
        "tree = \"cap\"\nseed = 5\nfiles = 50\n\n[services]\ncpu_light_ms = 5\n",
    )
    .unwrap();
    // The flag overrides the file's seed; the file's cpu_light_ms stays.
    let node = start(&["--config", cfg.to_str().unwrap(), "--seed", "6"]);
    let (_, _, body, _) = get(node.1, "/_capstan/load");
    let rep: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(rep["tree"], "cap");
    let busy = |rep: &serde_json::Value| rep["since_start"]["cpu_busy_s"].as_f64().unwrap();
    let before = busy(&rep);
    let (status, _, _, _) = get(node.1, "/cgi-bin/cpu_light.cgi");
    assert_eq!(status, 200);
    // The node's modelled CPU time, not the wall clock (which a busy machine stretches): the
    // file's 5 ms, where the default would be 40 ms (both over the default core count).
    let (_, _, body, _) = get(node.1, "/_capstan/load");
    let spent_ms = (busy(&serde_json::from_slice(&body).unwrap()) - before) * 1e3;
    assert!((0.5..15.0).contains(&spent_ms), "{spent_ms} ms");
    let (status, _, _, _) = get(node.1, "/cap/obj000049.html");
    assert_eq!(status, 200);
    assert_eq!(get(node.1, "/cap/obj000050.html").0, 404);

    let listed = capstan()
        .args([
            "origin",
            "--config",
            cfg.to_str().unwrap(),
            "--print-filelist",
        ])
        .output()
        .unwrap();
    assert!(listed.status.success());
    let list =
        capstan_workload::parse_filelist(&String::from_utf8(listed.stdout).unwrap()).unwrap();
    assert_eq!(list.entries.len(), 50);
    let _ = std::fs::remove_dir_all(&dir);
}
