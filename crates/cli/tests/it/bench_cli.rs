//! `capstan bench` as a process: help, one-line errors, a run against `capstan origin`, JSON,
//! report and merge.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_capstan");

fn capstan(args: &[&str]) -> std::process::Output {
    Command::new(BIN).args(args).output().unwrap()
}

#[test]
fn help_documents_options_with_examples() {
    let out = capstan(&["bench", "--help"]);
    assert!(out.status.success());
    let s = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--rate",
        "--clients",
        "--sessions",
        "--replay",
        "--connect-timeout",
        "--burst",
        "--phases",
        "--shard",
        "--json",
        "--report",
        "EXAMPLES",
    ] {
        assert!(s.contains(flag), "help lacks {flag}");
    }
}

#[test]
fn bad_input_is_one_line_and_nonzero() {
    let dir = std::env::temp_dir().join(format!("capstan-bench-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad_list = dir.join("list");
    std::fs::write(&bad_list, "/a notanumber\n").unwrap();
    let bad_log = dir.join("log");
    std::fs::write(&bad_log, "garbage line\n").unwrap();
    let cases: Vec<Vec<String>> = vec![
        vec!["--rate".into(), "10".into(), "--bogus".into()],
        vec!["--rate".into(), "ten".into()],
        vec![
            "--rate".into(),
            "10".into(),
            "--burst".into(),
            "6x50%/1s".into(),
        ],
        vec![
            "--rate".into(),
            "10".into(),
            "--filelist".into(),
            bad_list.display().to_string(),
        ],
        vec!["--replay".into(), bad_log.display().to_string()],
        vec!["--rate".into(), "10".into(), "--shard".into(), "2/2".into()],
    ];
    for extra in cases {
        let mut args = vec!["bench".to_string(), "http://127.0.0.1:9/".to_string()];
        args.extend(extra.clone());
        let out = Command::new(BIN).args(&args).output().unwrap();
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!out.status.success(), "{extra:?} succeeded");
        assert_eq!(err.trim_end().lines().count(), 1, "{extra:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let out = capstan(&["bench", "ftp://x/", "--rate", "1"]);
    assert!(!out.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn runs_against_origin_and_merges() {
    let mut origin = Command::new(BIN)
        .args(["origin", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(origin.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_string();
    let dir = std::env::temp_dir().join(format!("capstan-bench-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("http://{addr}/file500.html");
    let mut files = Vec::new();
    for i in 0..2 {
        let json = dir.join(format!("s{i}.json"));
        let out = capstan(&[
            "bench",
            &url,
            "--rate",
            "200",
            "--duration",
            "1s",
            "--shard",
            &format!("{i}/2"),
            "--json",
            json.to_str().unwrap(),
            "-q",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        files.push(json);
    }
    let report = dir.join("r.html");
    let merged = dir.join("m.json");
    let out = capstan(&[
        "bench",
        "merge",
        files[0].to_str().unwrap(),
        files[1].to_str().unwrap(),
        "--json",
        merged.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    assert_eq!(m["schema"], "capstan-bench/1");
    assert_eq!(m["offered"], 200);
    assert!(m["completed"].as_u64().unwrap() >= 190, "{m}");
    assert!(m["latency_ms"]["corrected"]["p99"].as_f64().unwrap() > 0.0);
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("<svg") && html.contains("capstan bench"));
    let _ = origin.kill();
    let _ = origin.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `capstan bench --polygraph` straight at `capstan origin` (no cache): every response is a
/// miss, the offered hit ratio is the workload's, the JSON has the phases and a time line.
#[test]
fn polygraph_workload_against_an_origin() {
    let (_node, addr) = support::origin(&["--polygraph-think-scale", "0.01"]);
    let dir = std::env::temp_dir().join(format!("capstan-bench-pg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wl = dir.join("wl.toml");
    std::fs::write(
        &wl,
        "robots = 50\nreq_rate = 4\ncache_size = \"256KB\"\n\
         [[phase]]\nname = \"fill\"\nrecurrence = \"5%\"\nfill = \"1x\"\n\
         [[phase]]\nname = \"top\"\nduration = \"3s\"\n",
    )
    .unwrap();
    let json = dir.join("pg.json");
    let url = format!("http://{addr}/");
    let out = support::run(&[
        "bench",
        &url,
        "--polygraph",
        wl.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--duration",
        "60s",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("offDHR%") && stdout.contains("top"),
        "{stdout}"
    );
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let top = &r["phases"][1];
    assert_eq!(top["hits"], 0, "an origin is no cache: {top}");
    assert!(top["offered_dhr"].as_f64().unwrap() > 0.5, "{top}");
    assert!(
        (top["offered_rps"].as_f64().unwrap() - 200.0).abs() < 50.0,
        "{top}"
    );
    assert!(r["timeline"].as_array().unwrap().len() >= 3);
    // A bad workload file is one line.
    std::fs::write(&wl, "robots = 1\n").unwrap();
    let out = support::run(&["bench", &url, "--polygraph", wl.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
