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
