//! Golden outputs: `capstan check` over every example and a set of bad configs, and the CLI's
//! error messages for bad flags, compared byte for byte with files under `tests/golden/`.
//! They were recorded before the switch, lab and origin were re-layered (issue 30) so that
//! moving code cannot change what a user reads. After an intended change of output, record
//! them again with `CAPSTAN_GOLDEN=record cargo test -p capstan-cli --test golden` and review
//! the diff.

use crate::support;

use std::path::{Path, PathBuf};
use support::{capstan, repo_root};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Runs `capstan ARGS` from the repository's root (so paths in the output are relative, as a
/// user types them) and renders its exit code, stdout and stderr as one text.
fn transcript(args: &[&str]) -> String {
    let out = capstan()
        .args(args)
        .current_dir(repo_root())
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .output()
        .expect("capstan runs");
    format!(
        "$ capstan {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        out.status
            .code()
            .map_or("signal".to_string(), |c| c.to_string()),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Compares each case's transcript with its golden file (or records it), and reports every
/// difference at once.
fn compare(cases: &[(String, Vec<String>)]) {
    let record = std::env::var("CAPSTAN_GOLDEN").as_deref() == Ok("record");
    let mut differing = Vec::new();
    for (name, args) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let got = transcript(&args);
        let path = golden_dir().join(format!("{name}.out"));
        if record {
            std::fs::write(&path, &got).expect("golden file written");
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e} (record with CAPSTAN_GOLDEN=record)",
                path.display()
            )
        });
        if got != want {
            differing.push(format!("{name}:\n--- want\n{want}\n--- got\n{got}"));
        }
    }
    assert!(
        differing.is_empty(),
        "{} of {} outputs differ from tests/golden:\n{}",
        differing.len(),
        cases.len(),
        differing.join("\n")
    );
}

fn toml_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".toml"))
        .collect();
    names.sort();
    names
}

#[test]
fn check_output_of_every_example_is_unchanged() {
    let cases: Vec<(String, Vec<String>)> = toml_files(&repo_root().join("examples"))
        .into_iter()
        .map(|file| {
            let stem = file.trim_end_matches(".toml").to_string();
            (
                format!("example-{stem}"),
                vec!["check".into(), format!("examples/{file}")],
            )
        })
        .collect();
    assert!(cases.len() >= 10, "examples/ holds the example configs");
    compare(&cases);
}

#[test]
fn check_errors_for_bad_configs_are_unchanged() {
    let cases: Vec<(String, Vec<String>)> = toml_files(&golden_dir().join("bad"))
        .into_iter()
        .map(|file| {
            let stem = file.trim_end_matches(".toml").to_string();
            (
                format!("bad-{stem}"),
                vec![
                    "check".into(),
                    format!("crates/cli/tests/golden/bad/{file}"),
                ],
            )
        })
        .collect();
    compare(&cases);
}

#[test]
fn cli_errors_for_bad_flags_are_unchanged() {
    let cases: &[(&str, &[&str])] = &[
        ("cli-check-missing-file", &["check", "/no/such/file.toml"]),
        ("cli-no-subcommand", &[]),
        ("cli-unknown-subcommand", &["steer"]),
        (
            "cli-serve-threads-zero",
            &[
                "serve",
                "--config",
                "examples/balance.toml",
                "--threads",
                "0",
            ],
        ),
        ("cli-serve-bad-listen", &["serve", "--listen", "nowhere"]),
        (
            "cli-serve-dry-run",
            &["serve", "--config", "examples/cap.toml", "--dry-run"],
        ),
        (
            "cli-serve-check-only",
            &["serve", "--config", "examples/balance.toml", "--check-only"],
        ),
        ("cli-origin-bad-listen", &["origin", "--listen", "nowhere"]),
        ("cli-bench-no-url", &["bench"]),
        ("cli-bench-bad-url", &["bench", "not a url"]),
        (
            "cli-bench-bad-rate",
            &["bench", "http://127.0.0.1:9/", "--rate", "fast"],
        ),
        ("cli-lab-unknown-experiment", &["lab", "no-such-experiment"]),
        ("cli-sim-unknown-experiment", &["sim", "no-such-experiment"]),
        (
            "cli-wan-bad-rtt",
            &["wan", "run", "--rtt", "soon", "--", "true"],
        ),
    ];
    let cases: Vec<(String, Vec<String>)> = cases
        .iter()
        .map(|(name, args)| {
            (
                name.to_string(),
                args.iter().map(|a| a.to_string()).collect(),
            )
        })
        .collect();
    compare(&cases);
}
