//! What the binary tests share: the repository root and the `commgate` binary run from it in a
//! clean environment (no `COMMGATE_*` setting, no GitHub Actions variable or token, no `CI`), so
//! that neither the developer's shell nor the CI runner can change what a test sees.

// Each test file compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::path::PathBuf;

use assert_cmd::Command;

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn commgate() -> Command {
    let mut cmd = Command::cargo_bin("commgate").expect("binary");
    cmd.current_dir(root());
    for (key, _) in std::env::vars() {
        if key.starts_with("COMMGATE_") || key.starts_with("GITHUB_") || key == "GH_TOKEN" || key == "CI" {
            cmd.env_remove(key);
        }
    }
    cmd
}
