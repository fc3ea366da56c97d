//! The documentation a newcomer reads: README.md short, with the main and the
//! test command near the top; BENCHMARKS.md short, linking its history; every
//! relative link in README.md, BENCHMARKS.md and docs/*.md pointing at a file
//! that exists; no README or docs line too long to read.

use std::fs;
use std::path::{Component, Path, PathBuf};

const MAIN_COMMAND: &str = "cargo run --release -p capstan-cli -- lab";
const TEST_COMMAND: &str = "cargo test --workspace --locked";
const README_MAX_LINES: usize = 150;
const BENCHMARKS_MAX_LINES: usize = 400;
const MAX_LINE_CHARS: usize = 400;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Every `*.md` file directly in `docs/`, sorted.
fn docs_pages() -> Vec<PathBuf> {
    let dir = root().join("docs");
    let mut pages: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    pages
}

/// The targets of the inline links `](target)` in `text`, with any
/// `#anchor` and any `"title"` removed; web links and pure anchors skipped.
fn relative_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("](") {
        rest = &rest[start + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].trim();
        let target = target.split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        if target.is_empty()
            || target.starts_with('#')
            || target.starts_with("http://")
            || target.starts_with("https://")
            || target.starts_with("mailto:")
        {
            continue;
        }
        let path = target.split('#').next().unwrap_or("");
        if !path.is_empty() {
            links.push(path.to_string());
        }
    }
    links
}

/// Whether `path` stays inside `root` once its `..` and `.` parts are resolved lexically.
fn inside(root: &Path, path: &Path) -> bool {
    let mut depth: i64 = 0;
    for part in path.strip_prefix(root).unwrap_or(path).components() {
        match part {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return false;
        }
    }
    true
}

#[test]
fn readme_starts_with_the_main_and_the_test_command() {
    let readme = read(&root().join("README.md"));
    let head: Vec<&str> = readme.lines().take(40).collect();
    let head = head.join("\n");
    for command in [MAIN_COMMAND, TEST_COMMAND] {
        assert!(
            head.contains(command),
            "README.md's first 40 lines should show `{command}` (a newcomer should not have to scroll for it)"
        );
    }
}

#[test]
fn readme_and_benchmarks_are_short() {
    for (file, max) in [
        ("README.md", README_MAX_LINES),
        ("BENCHMARKS.md", BENCHMARKS_MAX_LINES),
    ] {
        let lines = read(&root().join(file)).lines().count();
        assert!(
            lines <= max,
            "{file} has {lines} lines, at most {max} allowed: move detail into docs/ or benches/history/"
        );
    }
}

#[test]
fn relative_links_point_at_files_that_exist() {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    files.extend(docs_pages());
    let mut broken = Vec::new();
    for file in &files {
        let dir = file.parent().expect("a file has a folder");
        for link in relative_links(&read(file)) {
            let target = dir.join(&link);
            // A link out of the repository (the design doc beside the checkout) cannot be
            // checked from a clone.
            if !inside(&root, &target) {
                continue;
            }
            if !target.exists() {
                broken.push(format!("{}: {link}", file.display()));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to files that do not exist:\n{}",
        broken.join("\n")
    );
}

#[test]
fn no_readme_or_docs_line_is_too_long() {
    let mut files = vec![root().join("README.md")];
    files.extend(docs_pages());
    let mut long = Vec::new();
    for file in &files {
        for (n, line) in read(file).lines().enumerate() {
            let chars = line.chars().count();
            if chars > MAX_LINE_CHARS {
                long.push(format!("{}:{}: {chars} characters", file.display(), n + 1));
            }
        }
    }
    assert!(
        long.is_empty(),
        "lines over {MAX_LINE_CHARS} characters (split them into prose or a list):\n{}",
        long.join("\n")
    );
}

#[test]
fn every_benchmark_history_is_linked_from_benchmarks_md() {
    let root = root();
    let benchmarks = read(&root.join("BENCHMARKS.md"));
    let linked = relative_links(&benchmarks);
    let dir = root.join("benches/history");
    let entries =
        fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    let mut unlinked = Vec::new();
    for entry in entries {
        let name = entry.expect("a benches/history entry").file_name();
        let name = name.to_string_lossy();
        let target = format!("benches/history/{name}");
        if !linked.iter().any(|link| link == &target) {
            unlinked.push(target);
        }
    }
    unlinked.sort();
    assert!(
        unlinked.is_empty(),
        "history files BENCHMARKS.md does not link to:\n{}",
        unlinked.join("\n")
    );
}
