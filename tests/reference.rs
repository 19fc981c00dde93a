//! References are generated or checked against what they describe, never restated by hand:
//! every direct dependency of the workspace has its row in `docs/crates.md`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;

/// The names declared in the root manifest's `[workspace.dependencies]`.
fn workspace_dependencies(manifest: &str) -> Vec<String> {
    let value: toml::Value = toml::from_str(manifest).expect("Cargo.toml is TOML");
    let deps = value["workspace"]["dependencies"].as_table().expect("[workspace.dependencies]");
    deps.keys().cloned().collect()
}

#[test]
fn every_direct_dependency_has_a_row_in_crates_md() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
    let page = std::fs::read_to_string(root.join("docs/crates.md")).expect("docs/crates.md");
    // A row names its crates in backticks in its first cell.
    let first_cells: Vec<&str> =
        page.lines().filter_map(|l| l.strip_prefix("| ")).filter_map(|l| l.split(" | ").next()).collect();
    let missing: Vec<String> = workspace_dependencies(&manifest)
        .into_iter()
        .filter(|d| !first_cells.iter().any(|cell| cell.contains(&format!("`{d}`"))))
        .collect();
    assert!(missing.is_empty(), "dependencies with no row in docs/crates.md: {missing:?}");
}

/// Every `COMMGATE_*` name in the shipped sources (`src/`, `crates/*/src`) and the files that
/// mention it.
fn variables_in_sources(root: &Path) -> std::collections::BTreeMap<String, Vec<String>> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("a source directory").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    for krate in std::fs::read_dir(root.join("crates")).expect("crates/").flatten() {
        walk(&krate.path().join("src"), &mut files);
    }
    let mut found: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a source file");
        for (at, _) in text.match_indices("\"COMMGATE_") {
            let name: String = text[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if name == "COMMGATE_" {
                continue;
            }
            let shown = file.strip_prefix(root).unwrap_or(&file).display().to_string();
            found.entry(name).or_default().push(shown);
        }
    }
    found
}

/// Not settings: read at build time (`build.rs` sets them for `env!`), a hidden test trigger, the
/// variables of the workflow `init` writes (the workflow reads them, commgate does not), and the
/// prefix of the emulated CUDA libraries' own variables (crates/fakegpu reads them, commgate does
/// not; docs/emulator.md lists each, checked by the crate's tests).
const NOT_SETTINGS: [&str; 6] = [
    "COMMGATE_BUILD_COMMIT",
    "COMMGATE_BUILD_DATE",
    "COMMGATE_TEST_PANIC",
    "COMMGATE_REF",
    "COMMGATE_REPO",
    "COMMGATE_FAKEGPU_",
];

/// A variable read anywhere is declared: with its flag, or among those without one
/// (`crates/core/src/environment.rs`), so that the reference tables list it.
#[test]
fn every_variable_read_is_declared() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let declared = commgate::reference::declared_variables();
    let undeclared: Vec<String> = variables_in_sources(root)
        .into_iter()
        .filter(|(name, _)| !declared.contains(name) && !NOT_SETTINGS.contains(&name.as_str()))
        .map(|(name, files)| format!("{name} ({})", files.join(", ")))
        .collect();
    assert!(undeclared.is_empty(), "variables read but declared nowhere: {undeclared:?}");
    assert!(
        declared.iter().any(|v| v == "COMMGATE_RENDEZVOUS_SECRET") && declared.iter().any(|v| v == "COMMGATE_KEEP")
    );
}

/// The blocks of `docs/formats.md` that `<!-- generated: NAME … -->` and `<!-- end generated:
/// NAME -->` enclose, replaced by what the declarations give now.
fn regenerated(page: &str) -> String {
    let mut out = page.to_string();
    for (name, text) in commgate::reference::blocks() {
        let open = format!("<!-- generated: {name} ");
        let close = format!("<!-- end generated: {name} -->");
        let start = out.find(&open).unwrap_or_else(|| panic!("docs/formats.md has no generated `{name}` block"));
        let body = start + out[start..].find("-->\n").expect("the marker closes") + "-->\n".len();
        let end = out[body..].find(&close).map(|i| body + i).expect("the block ends");
        out.replace_range(body..end, &format!("{}\n", text.trim_matches('\n')));
    }
    out
}

/// A flag, key or variable added, renamed or removed fails here until the page is regenerated
/// (`COMMGATE_REGENERATE_DOCS=1 cargo test --test reference`, which `scripts/regen-docs.sh` runs).
#[test]
fn formats_md_tables_are_what_the_declarations_say() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/formats.md");
    let page = std::fs::read_to_string(&path).expect("docs/formats.md");
    let now = regenerated(&page);
    if std::env::var_os("COMMGATE_REGENERATE_DOCS").is_some() {
        std::fs::write(&path, &now).expect("write docs/formats.md");
        return;
    }
    if now != page {
        let first = page.lines().zip(now.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "docs/formats.md's generated tables differ from the declarations from line {} on:\n  page: {:?}\n  now:  {:?}\n\
             regenerate with scripts/regen-docs.sh",
            first + 1,
            page.lines().nth(first).unwrap_or(""),
            now.lines().nth(first).unwrap_or("")
        );
    }
}
