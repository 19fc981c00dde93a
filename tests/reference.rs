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
