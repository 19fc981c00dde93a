//! The layer table of `src/lib.rs` is true: no shipped module imports a module of a higher layer,
//! and the modules import one another in no circle. Test modules (`#[cfg(test)]` onwards, and
//! files named `tests.rs` or `*_tests.rs`) may reach anywhere and are not read.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The table's modules, layer by layer from the bottom, as `lib.rs` writes them.
fn layers(lib: &str) -> Vec<Vec<String>> {
    lib.lines()
        .filter_map(|l| l.strip_prefix("//! | "))
        .filter(|l| !l.starts_with("layer |") && !l.starts_with("---"))
        .filter_map(|row| row.split(" | ").nth(1))
        .map(|cell| cell.split(", ").map(|m| m.trim_matches('`').to_string()).collect())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The table's name for the module a file belongs to: `decide::<file>` inside `src/decide/`,
/// the top-level module elsewhere.
fn owner(rel: &Path) -> String {
    let parts: Vec<String> =
        rel.components().map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    match parts.as_slice() {
        [top, file, ..] if top == "decide" && file != "mod" => format!("decide::{file}"),
        [top, ..] if top == "decide" => "decide::vocab".to_string(),
        [top, ..] => top.clone(),
        [] => String::new(),
    }
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> String {
    s.trim_start().chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// The items of a `{a, b::{c, d}, e}` group (`s` starts after the `{`), split at its top level.
fn group(s: &str) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0usize, 0usize, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                out.push(&s[start..i]);
                return out;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// The table's names for one path below `crate::` (`rest` starts after it). A path into
/// `decide` that names no file of it (`crate::decide::Decision`, `decide::{self, …}`) is one of
/// the words `decide` re-exports from its vocabulary.
fn targets(rest: &str, files_of_decide: &BTreeSet<String>, out: &mut BTreeSet<String>) {
    let rest = rest.trim_start();
    if let Some(items) = rest.strip_prefix('{') {
        for item in group(items) {
            targets(item, files_of_decide, out);
        }
        return;
    }
    let name = ident(rest);
    if name != "decide" {
        out.insert(name);
        return;
    }
    let after = rest["decide".len()..].strip_prefix("::").unwrap_or("");
    let mut inner = Vec::new();
    match after.trim_start().strip_prefix('{') {
        Some(items) => inner.extend(group(items).into_iter().map(ident)),
        None => inner.push(ident(after)),
    }
    for i in inner {
        let file = if files_of_decide.contains(&i) { i } else { "vocab".to_string() };
        out.insert(format!("decide::{file}"));
    }
}

/// Every module the shipped part of `text` reaches through a `crate::` path.
fn imports(text: &str, files_of_decide: &BTreeSet<String>) -> BTreeSet<String> {
    let shipped = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut out = BTreeSet::new();
    for (at, _) in shipped.match_indices("crate::") {
        targets(&shipped[at + "crate::".len()..], files_of_decide, &mut out);
    }
    out
}

#[test]
fn no_module_imports_a_higher_layer_and_none_imports_in_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = fs::read_to_string(root.join("src/lib.rs")).expect("lib.rs");
    let table = layers(&lib);
    assert!(table.len() >= 5, "lib.rs has its layer table: {table:?}");
    let layer_of: BTreeMap<String, usize> =
        table.iter().enumerate().flat_map(|(i, ms)| ms.iter().map(move |m| (m.clone(), i))).collect();
    let src = root.join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let files_of_decide: BTreeSet<String> = fs::read_dir(src.join("decide"))
        .expect("src/decide")
        .filter_map(|e| e.ok()?.path().file_stem().map(|s| s.to_string_lossy().to_string()))
        .filter(|s| s != "mod")
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&src).expect("under src");
        let name = rel.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if ["lib.rs", "main.rs", "tests.rs"].contains(&name.as_str()) || name.ends_with("_tests.rs") {
            continue;
        }
        let from = owner(rel);
        let Some(&own) = layer_of.get(&from) else {
            wrong.push(format!("{}: module `{from}` is in no layer of lib.rs's table", rel.display()));
            continue;
        };
        let text = fs::read_to_string(path).expect("a source file");
        for to in imports(&text, &files_of_decide).into_iter().filter(|t| *t != from) {
            match layer_of.get(&to) {
                None => wrong.push(format!("{}: imports `{to}`, which is in no layer", rel.display())),
                Some(&l) if l > own => wrong.push(format!(
                    "{}: `{from}` (layer {own}) imports `{to}` (layer {l}), a higher layer",
                    rel.display()
                )),
                Some(_) => {}
            }
            graph.entry(from.clone()).or_default().insert(to);
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // No circle: a depth-first search finds no module on its own path.
    fn visit<'a>(
        m: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<String> {
        if let Some(at) = path.iter().position(|p| *p == m) {
            return Some(format!("{} → {m}", path[at..].join(" → ")));
        }
        if !done.insert(m) {
            return None;
        }
        path.push(m);
        let found = graph.get(m).into_iter().flatten().find_map(|n| visit(n, graph, path, done));
        path.pop();
        found
    }
    let mut done = BTreeSet::new();
    for m in graph.keys() {
        let circle = visit(m, &graph, &mut Vec::new(), &mut done);
        assert_eq!(circle, None, "an import circle");
    }
}

#[test]
fn the_trace_and_statistics_layers_import_no_decision() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for dir in ["trace", "stats", "result"] {
        rust_files(&root.join(dir), &mut files);
    }
    files.extend(["input.rs", "result.rs"].map(|f| root.join(f)));
    for path in files {
        let text = fs::read_to_string(&path).expect("a source file");
        let shipped = text.split("#[cfg(test)]").next().unwrap_or("");
        let is_result = path.ends_with("result.rs");
        for line in shipped.lines().filter(|l| l.contains("crate::decide") || l.contains("crate::hotspots")) {
            // The result file stores the run's decision, a word of the vocabulary.
            assert!(
                is_result && line.contains("crate::decide::vocab::"),
                "{}: {line}: this layer computes, it does not decide",
                path.display()
            );
        }
    }
}
