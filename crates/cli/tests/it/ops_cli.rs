//! Packaging and operation, with `capstan` as a process: `--version`, completions, the man
//! page, `serve --check-only`, and the access log rotated with SIGUSR1 and replayed by
//! `capstan bench --replay`.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use support::*;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("capstan-ops-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn version_names_release_commit_target_and_profile() {
    let out = run(&["--version"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text.trim_end();
    let rest = line
        .strip_prefix(&format!("capstan {} (commit ", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{line}"));
    let fields: Vec<&str> = rest.trim_end_matches(')').split(", ").collect();
    assert_eq!(fields.len(), 3, "{line}");
    let commit = fields[0];
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
        "{line}"
    );
    assert!(fields[1].contains("linux"), "target: {line}");
    assert!(["debug", "release"].contains(&fields[2]), "profile: {line}");
}

#[test]
fn completions_for_each_shell_and_a_one_line_error_for_others() {
    for (shell, marker) in [
        ("bash", "_capstan()"),
        ("zsh", "#compdef capstan"),
        ("fish", "complete -c capstan"),
    ] {
        let out = run(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(
            script.contains(marker),
            "{shell}: {}",
            &script[..200.min(script.len())]
        );
        assert!(script.contains("serve"), "{shell} completes subcommands");
        assert!(
            script.contains("check-only"),
            "{shell} completes serve's flags"
        );
    }
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("tcsh"), "{err}");
}

#[test]
fn man_page_is_roff_naming_the_subcommands() {
    let out = run(&["man"]);
    assert!(out.status.success());
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(
        page.starts_with(".ie \\n(.g") || page.contains(".TH capstan 1"),
        "{page}"
    );
    assert!(page.contains(".TH capstan 1"), "{page}");
    for word in ["serve", "bench", "completions", "SUBCOMMANDS"] {
        assert!(page.contains(word), "man page lacks {word}");
    }
    // `man -l` renders it when man is installed.
    let path = scratch("capstan.1");
    std::fs::write(&path, &page).unwrap();
    match std::process::Command::new("man")
        .args(["-l", "-P", "cat"])
        .arg(&path)
        .env("MANWIDTH", "80")
        .output()
    {
        Ok(out) if out.status.success() => {
            let shown = String::from_utf8_lossy(&out.stdout);
            assert!(shown.contains("capstan"), "{shown}");
        }
        _ => eprintln!("note: man is not installed; the roff was checked as text only"),
    }
}

#[test]
fn check_only_validates_and_exits() {
    let (_node, node) = origin(&[]);
    let good = scratch("good.toml");
    let listen = free_addr();
    std::fs::write(
        &good,
        format!(
            "listen = [\"{listen}\"]\n[access_log]\npath = {:?}\n[[node]]\naddress = \"{node}\"\n",
            scratch("check.log")
        ),
    )
    .unwrap();
    let out = run(&["serve", "--config", good.to_str().unwrap(), "--check-only"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("ok: {}\n", good.display())
    );
    assert!(!accepts(listen), "--check-only does not serve");
    // Flags are checked too, and with them no file is needed.
    let l = listen.to_string();
    let n = node.to_string();
    let out = run(&["serve", "--listen", &l, "--node", &n, "--check-only"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "ok\n");

    let bad = scratch("bad.toml");
    for text in [
        format!(
            "listen = [\"{listen}\"]\n[access_log]\nsample = 0\n[[node]]\naddress = \"{node}\"\n"
        ),
        format!(
            "listen = [\"{listen}\"]\n[access_log]\npath = \"/nonexistent-dir/a.log\"\n\
             [[node]]\naddress = \"{node}\"\n"
        ),
    ] {
        std::fs::write(&bad, &text).unwrap();
        let out = run(&["serve", "--config", bad.to_str().unwrap(), "--check-only"]);
        assert_eq!(out.status.code(), Some(1), "{text}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("access_log"), "{err}");
    }
}

fn lines_in(path: &PathBuf) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// The access log through a rotation (rename, SIGUSR1, new file) and back through the bench:
/// `capstan bench --replay` reads the rotated file and sends its requests to the switch.
#[test]
fn sigusr1_reopens_the_access_log_and_the_bench_replays_it() {
    let (_node, node) = origin(&[]);
    let listen = free_addr();
    let log = scratch("access.log");
    let rotated = scratch("access.log.1");
    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&rotated);
    let config = scratch("logged.toml");
    std::fs::write(
        &config,
        format!(
            "listen = [\"{listen}\"]\n[access_log]\npath = {log:?}\nformat = \"combined\"\n\
             [[node]]\naddress = \"{node}\"\n"
        ),
    )
    .unwrap();
    let mut switch = spawn(&["serve", "--config", config.to_str().unwrap()], listen);
    for path in ["/file500.html", "/file5k.html", "/file500.html"] {
        assert_eq!(get(listen, path).status, 200);
    }
    eventually("3 lines in the log", || lines_in(&log) == 3);
    std::fs::rename(&log, &rotated).unwrap();
    switch.signal("USR1");
    // Until the writer has reopened, lines may still go to the renamed file; after, to the new.
    eventually("a new access.log", || {
        assert_eq!(get(listen, "/file500.html").status, 200);
        lines_in(&log) >= 1
    });
    let moved = lines_in(&rotated);
    assert!(moved >= 3, "{moved}");
    let before = lines_in(&log);
    let replayed = run(&[
        "bench",
        &format!("http://{listen}/"),
        "--replay",
        rotated.to_str().unwrap(),
        "--replay-rate",
        "50",
    ]);
    assert!(
        replayed.status.success(),
        "{}",
        String::from_utf8_lossy(&replayed.stderr)
    );
    // Every replayed request was logged as well, in the new file.
    eventually("the replayed requests logged", || {
        lines_in(&log) >= before + moved
    });
    switch.signal("TERM");
    assert!(switch.wait_exit(Duration::from_secs(10)).unwrap().success());
    let text = std::fs::read_to_string(&rotated).unwrap();
    let entries = capstan_workload::parse_clf(&text).unwrap();
    assert!(entries.entries.iter().all(|e| e.status == 200));
}
