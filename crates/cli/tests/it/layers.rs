//! Layers point one way: in every crate of the workspace, the modules' own `crate::…` paths are
//! read as arrows between modules, and an import circle (a strongly connected set of more than
//! one module) fails the test. Checked at two depths: between a crate's top-level modules
//! (`crate::upstream` → `crate::state`), and between the modules inside each folder
//! (`upstream::pool` → `upstream::codec`). Comments and `#[cfg(test)] mod tests` bodies are
//! left out, as test code may reach anywhere. The same count as `../shared/tools/modcycles.py`.
//!
//! Run with `--nocapture` to see every crate's modules, arrows and circles.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn workspace_crates() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&crates)
        .expect("crates/ is readable")
        .map(|entry| entry.unwrap().path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    dirs.sort();
    dirs
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file belongs to, as its path segments under `src` (`mod.rs`, `lib.rs` and
/// `main.rs` stand for their folder).
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut segments: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        segments.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        segments.pop();
    }
    segments
}

/// The text with comments and a trailing `#[cfg(test)] mod tests { … }` removed.
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if text[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if text[i..].starts_with("/*") {
            match text[i + 2..].find("*/") {
                Some(end) => i += end + 4,
                None => break,
            }
        } else {
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    if let Some(at) = find_test_module(&out) {
        out.truncate(at);
    }
    out
}

fn find_test_module(code: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(found) = code[from..].find("#[cfg(test)]") {
        let at = from + found;
        let rest = code[at + "#[cfg(test)]".len()..].trim_start();
        if let Some(after_mod) = rest.strip_prefix("mod") {
            if after_mod.trim_start().starts_with("tests") {
                return Some(at);
            }
        }
        from = at + 1;
    }
    None
}

fn is_module_name(segment: &str) -> bool {
    let mut chars = segment.chars();
    matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Every module path named after `crate::` in the code, including grouped imports
/// (`crate::{a::X, b::{c::Y}}`), as lists of lower-case segments.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("crate::") {
        let at = from + found;
        from = at + "crate::".len();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue; // `$crate::`, `mycrate::`
        }
        paths_at(&code[from..], Vec::new(), &mut paths);
    }
    paths
}

/// Reads one path (or a `{…}` group of paths) starting at `text`, with `prefix` already read.
fn paths_at(text: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    if let Some(group) = text.strip_prefix('{') {
        for item in split_group(group) {
            paths_at(item.trim_start(), prefix.clone(), out);
        }
        return;
    }
    let mut path = prefix;
    let mut rest = text;
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        let segment = &rest[..end];
        rest = &rest[end..];
        match rest.strip_prefix("::") {
            Some(after) if is_module_name(segment) => {
                path.push(segment.to_string());
                if after.starts_with('{') {
                    return paths_at(after, path, out);
                }
                rest = after;
            }
            _ => {
                // The last segment: a module itself when lower-case (`use crate::cluster;`).
                if is_module_name(segment) && segment != "self" {
                    path.push(segment.to_string());
                }
                break;
            }
        }
    }
    if !path.is_empty() {
        out.push(path);
    }
}

/// The comma-separated items of a `{…}` group (its closing brace ends it).
fn split_group(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&text[start..i]);
                return items;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

/// Arrows between modules at `depth` path segments, within the folder `scope` (empty: the
/// crate's top level).
fn graph(src: &Path, scope: &[String], depth: usize) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut edges = Graph::new();
    for file in files {
        let module = module_path(src, &file);
        if !module.starts_with(scope) || module.len() <= scope.len() {
            continue;
        }
        if module
            .last()
            .is_some_and(|m| m == "tests" || m.ends_with("_tests"))
        {
            continue;
        }
        let from = module[..depth.min(module.len())].join("::");
        let code = code_only(&std::fs::read_to_string(&file).unwrap());
        let targets = edges.entry(from.clone()).or_default();
        for path in crate_paths(&code) {
            if path.len() < depth || !path.starts_with(scope) {
                continue;
            }
            let to = path[..depth].join("::");
            if to != from {
                targets.insert(to);
            }
        }
    }
    edges
}

/// Strongly connected sets of more than one module (Tarjan).
fn circles(edges: &Graph) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        found: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.edges.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// The folders directly under `src` (each a layer whose inner modules are checked as well).
fn folders(src: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn no_crate_has_an_import_circle() {
    let mut failures = Vec::new();
    for src in workspace_crates() {
        let name = src.parent().unwrap().file_name().unwrap().to_string_lossy();
        let mut scopes = vec![(Vec::new(), 1)];
        scopes.extend(folders(&src).into_iter().map(|f| (vec![f], 2)));
        for (scope, depth) in scopes {
            let edges = graph(&src, &scope, depth);
            let modules: BTreeSet<&String> = edges.keys().chain(edges.values().flatten()).collect();
            let arrows: usize = edges.values().map(BTreeSet::len).sum();
            let found = circles(&edges);
            let place = if scope.is_empty() {
                format!("crates/{name}")
            } else {
                format!("crates/{name}/src/{}", scope.join("/"))
            };
            if scope.is_empty() || !found.is_empty() {
                println!(
                    "{place}: {} modules, {arrows} arrows, {} circle(s)",
                    modules.len(),
                    found.len()
                );
            }
            for circle in found {
                let inner: usize = circle
                    .iter()
                    .map(|a| edges[a].iter().filter(|b| circle.contains(b)).count())
                    .sum();
                let line = format!(
                    "{place}: circle of {} modules ({inner} arrows): {}",
                    circle.len(),
                    circle.join(", ")
                );
                println!("  {line}");
                failures.push(line);
            }
        }
    }
    assert!(
        failures.is_empty(),
        "import circles (a module must not import, directly or through others, a module that \
         imports it):\n{}",
        failures.join("\n")
    );
}

#[test]
fn paths_are_read_as_modules() {
    let code = "use crate::{a::X, b::{c::Y, d}, e};\nfn f() { crate::g::h::z(); $crate::no::x; }";
    let mut paths = crate_paths(code);
    paths.sort();
    let want: Vec<Vec<String>> = [
        vec!["a"],
        vec!["b", "c"],
        vec!["b", "d"],
        vec!["e"],
        vec!["g", "h", "z"], // a function's name reads as a module: harmless, it imports nothing
    ]
    .iter()
    .map(|p| p.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(paths, want);
    let stripped = code_only(
        "use crate::a; // crate::b\n/* crate::c */\n#[cfg(test)]\nmod tests { use crate::d; }",
    );
    assert_eq!(crate_paths(&stripped), vec![vec!["a".to_string()]]);
}

#[test]
fn a_circle_is_found() {
    let mut edges = Graph::new();
    edges.insert("a".into(), ["b".to_string()].into());
    edges.insert("b".into(), ["c".to_string()].into());
    edges.insert("c".into(), ["a".to_string(), "d".to_string()].into());
    assert_eq!(circles(&edges), vec![vec!["a", "b", "c"]]);
    edges.get_mut("c").unwrap().remove("a");
    assert!(circles(&edges).is_empty());
}
