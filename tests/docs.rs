//! The docs are tests. Every ```` ```console ```` block in README.md and docs/*.md is run with the
//! built `commgate` by trycmd and its output compared with what the page shows, so a report in the
//! docs cannot drift from what the binary prints. Volatile parts are redacted in the page itself:
//! `[..]` stands for the rest of a line (a timestamped file name), `...` on its own line for any
//! number of lines (a report shown in part), `[VERSION]` for the crate version. Blocks in any
//! other language (```` ```sh ````, ```` ```text ````) are not run: GPU-only commands, `cargo
//! install`, synopses.
//!
//! Regenerate the pages after a deliberate change of output: `scripts/regen-docs.sh` (which runs
//! `TRYCMD=overwrite cargo test --locked --test docs` and keeps every redaction that still
//! matches).
//!
//! The examples run in a scratch directory holding what they read — copies of the committed
//! `baselines/`, `examples/traces/` and `tests/fixtures/` — so that `check`, which writes its
//! result file under `benchmarks/results/`, leaves nothing in the checkout, and paths print as
//! they do from a fresh clone (`baselines/PAR-MOCK/…`). The environment is cleaned as in
//! `tests/common`: no `COMMGATE_*` setting, no GitHub Actions variable or token, no `CI`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, reason = "a test fails by panicking")]

use std::path::Path;

mod common;
use common::{copy_dir, is_callers_setting};

#[test]
fn docs_examples_match_the_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));

    // Besides `common`'s test of a pure function, this is the only test in this binary, so
    // nothing else reads the environment or the working directory while they change here.
    for (key, _) in std::env::vars_os() {
        if key.to_str().is_none_or(is_callers_setting) {
            std::env::remove_var(&key);
        }
    }
    let work = tempfile::tempdir().expect("tempdir");
    for dir in ["baselines", "examples/traces", "tests/fixtures"] {
        copy_dir(&root.join(dir), &work.path().join(dir));
    }
    std::env::set_current_dir(work.path()).expect("cd");

    let cases = trycmd::TestCases::new();
    cases
        .register_bin("commgate", Path::new(env!("CARGO_BIN_EXE_commgate")))
        .insert_var("[VERSION]", env!("CARGO_PKG_VERSION"))
        .expect("redaction");
    cases.case(root.join("README.md"));
    cases.case(root.join("docs/*.md"));
    cases.run();
}
