#!/usr/bin/env bash
# Regenerate what the docs show after a deliberate change of output:
#   0. the flag, variable and key tables of docs/formats.md, from the declarations (tests/reference.rs);
#   1. every ```console example in README.md and docs/*.md, rewritten with what the binary prints
#      now (tests/docs.rs under TRYCMD=overwrite; `[..]` and `...` redactions that still match are
#      kept, so review the diff for any that a change pushed out);
#   2. the PR-comment screenshot docs/img/pr-comment.png (scripts/render-check.sh --screenshot,
#      which installs its pinned Chromium and npm packages; it warns and skips when it cannot).
# Then run `cargo test --locked --test docs` to see the pages pass as written.
#
#   scripts/regen-docs.sh [--no-screenshot]
set -euo pipefail
cd "$(dirname "$0")/.."

screenshot=1
for arg in "$@"; do
  case "$arg" in
    --no-screenshot) screenshot=0 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "regen-docs: unknown argument $arg (usage: scripts/regen-docs.sh [--no-screenshot])" >&2; exit 2 ;;
  esac
done

COMMGATE_REGENERATE_DOCS=1 cargo test --locked --test reference
TRYCMD=overwrite cargo test --locked --test docs
if [ "$screenshot" -eq 1 ]; then
  scripts/render-check.sh --screenshot
fi
cargo test --locked --test docs
git status --short -- README.md docs 2>/dev/null || true
