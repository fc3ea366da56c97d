//! Layers point one way: in every crate of the workspace, the modules' own paths are read as
//! arrows, and an import circle (a strongly connected set of more than one module) fails the
//! test. Checked three ways:
//!
//! - between a crate's top-level modules (`crate::upstream` → `crate::state`), and between the
//!   modules inside each folder (`upstream::pool` → `upstream::codec`): the count of
//!   `../shared/tools/modcycles.py`;
//! - between files, every file its own module: `crate::…`, `super::…` and `self::…` paths and
//!   bare paths into a child module (`tier::x` in `cache/mod.rs`) are arrows to the deepest file
//!   they name, so an item defined in a folder's `mod.rs` or in `lib.rs` is an arrow to that
//!   file. This catches what the first cannot: a parent and its children calling each other
//!   through `super::`, a crate root's error type used by the modules the root declares. A
//!   re-export (`pub use child::X;`) makes a facade, not a dependency: it is no arrow, and nor
//!   is `mod x;`. The count of `../shared/tools/filecycles.py`.
//!
//! Comments and `#[cfg(test)] mod tests` bodies are left out, as test code may reach anywhere.
//!
//! Run with `--nocapture` to see every crate's modules, files, arrows and circles.

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
        // `mod tests { … }` only: a `mod tests;` declaration may have code after it.
        let body = rest
            .strip_prefix("mod")
            .and_then(|r| r.trim_start().strip_prefix("tests"))
            .map(str::trim_start);
        if body.is_some_and(|b| b.starts_with('{')) {
            return Some(at);
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
        if code[..at].ends_with("::") {
            continue;
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

/// A circle between files that is known and being removed, so the test lets it pass: the crate
/// and the circle's files (none today). The test fails on an entry whose circle is gone, so an
/// entry cannot be forgotten.
const ALLOWED_FILE_CIRCLES: &[(&str, &[&str])] = &[];

/// The code with every re-export (`pub use …;`, `pub(crate) use …;`) removed: a facade over a
/// child, not a dependency on it.
fn without_reexports(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while !rest.is_empty() {
        let line_end = rest.find('\n').map_or(rest.len(), |i| i + 1);
        let line = &rest[..line_end];
        if is_reexport(line.trim_start()) {
            match rest.find(';') {
                Some(semi) => {
                    rest = &rest[semi + 1..];
                    continue;
                }
                None => break,
            }
        }
        out.push_str(line);
        rest = &rest[line_end..];
    }
    out
}

/// Whether `text` starts a `pub use` or `pub(…) use` item.
fn is_reexport(text: &str) -> bool {
    let Some(mut after) = text.strip_prefix("pub") else {
        return false;
    };
    if let Some(scoped) = after.strip_prefix('(') {
        match scoped.find(')') {
            Some(close) => after = &scoped[close + 1..],
            None => return false,
        }
    }
    let after_space = after.trim_start();
    after_space.len() < after.len()
        && after_space
            .strip_prefix("use")
            .is_some_and(|r| r.starts_with(char::is_whitespace))
}

/// Every path a file names, each starting with `crate`, `super` or `self` (a bare path into a
/// child module of `module`, `tier::x`, is read as `self::tier::x`), as lists of lower-case
/// segments.
fn rooted_paths(code: &str, module: &[String], files: &BTreeSet<Vec<String>>) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut at = 0;
    while at < code.len() {
        let ch = code[at..].chars().next().unwrap();
        if !(ch.is_alphabetic() || ch == '_') {
            at += ch.len_utf8();
            continue;
        }
        let end = code[at..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(code.len(), |e| at + e);
        let word = &code[at..end];
        let before = code[..at].chars().next_back();
        let starts_path =
            !before.is_some_and(|c| c == '$' || c == ':') && code[end..].starts_with("::");
        if starts_path {
            let rest = &code[end + 2..];
            if matches!(word, "crate" | "super" | "self") {
                paths_at(rest, vec![word.to_string()], &mut paths);
            } else {
                let mut child = module.to_vec();
                child.push(word.to_string());
                if files.contains(&child) {
                    paths_at(rest, vec!["self".to_string(), word.to_string()], &mut paths);
                }
            }
        }
        at = end;
    }
    paths
}

/// The deepest file (as its module path) that `path`, read in `module`, names: `crate::a::b::X`
/// is `a/b.rs` (or `a/b/mod.rs`) when there is one, else `a.rs`, else the crate root.
fn resolve(path: &[String], module: &[String], files: &BTreeSet<Vec<String>>) -> Vec<String> {
    let mut segments = path.iter().map(String::as_str).peekable();
    let mut absolute: Vec<&str> = Vec::new();
    if segments.next_if_eq(&"crate").is_none() {
        absolute = module.iter().map(String::as_str).collect();
        while let Some(s) = segments.next_if(|s| matches!(*s, "self" | "super")) {
            if s == "super" {
                absolute.pop();
            }
        }
    }
    absolute.extend(segments.filter(|s| !matches!(*s, "self" | "super")));
    let mut best = Vec::new();
    for k in 1..=absolute.len() {
        let prefix: Vec<String> = absolute[..k].iter().map(|s| s.to_string()).collect();
        if !files.contains(&prefix) {
            break;
        }
        best = prefix;
    }
    best
}

fn file_name(module: &[String]) -> String {
    if module.is_empty() {
        "(root)".to_string()
    } else {
        module.join("::")
    }
}

/// Arrows between the files of the crate in `src`, every file its own module. Test files
/// (`tests`, `…_tests`) draw none.
fn file_graph(src: &Path) -> (usize, Graph) {
    let mut paths = Vec::new();
    rust_files(src, &mut paths);
    let modules: Vec<(Vec<String>, &PathBuf)> =
        paths.iter().map(|p| (module_path(src, p), p)).collect();
    let files: BTreeSet<Vec<String>> = modules.iter().map(|(m, _)| m.clone()).collect();
    let mut edges = Graph::new();
    for (module, path) in &modules {
        if module.iter().any(|s| s == "tests" || s.ends_with("_tests")) {
            continue;
        }
        let code = without_reexports(&code_only(&std::fs::read_to_string(path).unwrap()));
        let from = file_name(module);
        let targets = edges.entry(from.clone()).or_default();
        for named in rooted_paths(&code, module, &files) {
            let to = file_name(&resolve(&named, module, &files));
            if to != from {
                targets.insert(to);
            }
        }
    }
    (files.len(), edges)
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
fn no_crate_has_a_circle_between_files() {
    let mut failures = Vec::new();
    let mut allowed_seen = BTreeSet::new();
    for src in workspace_crates() {
        let name = src.parent().unwrap().file_name().unwrap().to_string_lossy();
        let (files, edges) = file_graph(&src);
        let arrows: usize = edges.values().map(BTreeSet::len).sum();
        let found = circles(&edges);
        println!(
            "crates/{name}: {files} files, {arrows} arrows, {} circle(s) between files",
            found.len()
        );
        for circle in found {
            let ties: Vec<String> = circle
                .iter()
                .flat_map(|a| {
                    edges[a]
                        .iter()
                        .filter(|b| circle.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            let line = format!(
                "crates/{name}: circle of {} files: {} ({})",
                circle.len(),
                circle.join(", "),
                ties.join("; ")
            );
            let allowed = ALLOWED_FILE_CIRCLES.iter().position(|(krate, files)| {
                *krate == name && files.iter().copied().eq(circle.iter().map(String::as_str))
            });
            match allowed {
                Some(i) => {
                    allowed_seen.insert(i);
                    println!("  allowed (ALLOWED_FILE_CIRCLES): {line}");
                }
                None => {
                    println!("  {line}");
                    failures.push(line);
                }
            }
        }
    }
    for (i, (krate, files)) in ALLOWED_FILE_CIRCLES.iter().enumerate() {
        if !allowed_seen.contains(&i) {
            failures.push(format!(
                "crates/{krate}: the allowed circle of {} is gone: delete its entry from \
                 ALLOWED_FILE_CIRCLES",
                files.join(", ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "import circles between files (a file must not use, directly or through others, a file \
         that uses it; move what both need to a leaf module):\n{}",
        failures.join("\n")
    );
}

/// A crate's `src` folder written to a temporary folder, removed when dropped.
struct TempSrc(PathBuf);

impl TempSrc {
    fn new(name: &str, files: &[(&str, &str)]) -> TempSrc {
        let dir =
            std::env::temp_dir().join(format!("capstan-layers-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (path, text) in files {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        TempSrc(dir)
    }

    fn circles(&self) -> Vec<Vec<String>> {
        circles(&file_graph(&self.0).1)
    }
}

impl Drop for TempSrc {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_circle_between_files_is_found() {
    // A folder's mod.rs that makes its child's policy, and the child that implements the trait
    // defined in that mod.rs, through `super::`.
    let tree = TempSrc::new(
        "super",
        &[
            ("lib.rs", "pub mod evict;\n"),
            (
                "evict/mod.rs",
                "mod lru;\npub trait Policy {}\n\
                 pub fn make() -> Box<dyn Policy> { Box::new(lru::Lru) }\n",
            ),
            (
                "evict/lru.rs",
                "use super::Policy;\npub struct Lru;\nimpl Policy for Lru {}\n",
            ),
        ],
    );
    assert_eq!(tree.circles(), vec![vec!["evict", "evict::lru"]]);

    // The trait in a leaf that both use, re-exported by mod.rs: no circle.
    let tree = TempSrc::new(
        "leaf",
        &[
            ("lib.rs", "pub mod evict;\n"),
            (
                "evict/mod.rs",
                "mod lru;\nmod policy;\npub use policy::Policy;\n\
                 pub fn make() -> Box<dyn Policy> { Box::new(lru::Lru) }\n",
            ),
            (
                "evict/lru.rs",
                "use super::policy::Policy;\npub struct Lru;\nimpl Policy for Lru {}\n",
            ),
            ("evict/policy.rs", "pub trait Policy {}\n"),
        ],
    );
    assert!(tree.circles().is_empty());

    // A crate root's error type used by a module the root calls.
    let tree = TempSrc::new(
        "root",
        &[
            (
                "lib.rs",
                "mod config;\npub enum Error {}\npub fn run() { config::load(); }\n",
            ),
            ("config.rs", "use crate::Error;\npub fn load() {}\n"),
        ],
    );
    assert_eq!(tree.circles(), vec![vec!["(root)", "config"]]);

    // The same with the error in a leaf: re-exports, comments and tests draw no arrow.
    let tree = TempSrc::new(
        "reexport",
        &[
            (
                "lib.rs",
                "mod config;\nmod error;\npub use error::Error;\n\
                 pub fn run() { config::load(); }\n",
            ),
            (
                "config.rs",
                "use crate::error::Error; // crate::Error\npub fn load() {}\n\
                 #[cfg(test)]\nmod tests { use crate::run; }\n",
            ),
            ("error.rs", "pub enum Error {}\n"),
        ],
    );
    assert!(tree.circles().is_empty());

    // Two levels up, and a group.
    let tree = TempSrc::new(
        "deep",
        &[
            ("lib.rs", "mod a;\n"),
            ("a/mod.rs", "mod b;\nfn f() { b::c::g(); }\n"),
            ("a/b/mod.rs", "pub mod c;\n"),
            (
                "a/b/c.rs",
                "use super::super::{self as a};\npub fn g() {}\n",
            ),
        ],
    );
    assert_eq!(tree.circles(), vec![vec!["a", "a::b::c"]]);
}

#[test]
fn file_paths_are_read() {
    let files: BTreeSet<Vec<String>> = [vec![], vec!["a"], vec!["a", "b"], vec!["c"]]
        .iter()
        .map(|m| m.iter().map(|s| s.to_string()).collect())
        .collect();
    let module = vec!["a".to_string()];
    let code =
        "use super::super::x;\nuse self::{b::X, y};\nfn f() { b::z(); c::w(); $crate::c::q(); }";
    let paths: BTreeSet<String> = rooted_paths(code, &module, &files)
        .iter()
        .map(|p| p.join("::"))
        .collect();
    // `c::w()` from `a` names no child of `a`: an outside crate's path, not read.
    assert_eq!(
        paths,
        ["self::b", "self::b::z", "self::y", "super::super::x"]
            .map(String::from)
            .into()
    );
    let resolved = |p: &str| {
        let path: Vec<String> = p.split("::").map(str::to_string).collect();
        file_name(&resolve(&path, &module, &files))
    };
    assert_eq!(resolved("self::b::z"), "a::b");
    assert_eq!(resolved("super::X"), "(root)");
    assert_eq!(resolved("crate::c::Y"), "c");
    assert_eq!(resolved("crate::a::b::Z"), "a::b");
    assert_eq!(
        without_reexports("pub use a::X;\n  pub(crate) use b::{\n    Y,\n};\nuse c::Z;\n"),
        "\n\nuse c::Z;\n"
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
