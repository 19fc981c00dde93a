#!/usr/bin/env bash
# Write commgate's manual pages: commgate.1 and one page per command (commgate-check.1,
# commgate-baseline-update.1, …), which the binary generates from its own command-line definition
# (`commgate man --dir`), so they say what `--help` says. Pages left from an earlier run (a command
# since removed) are deleted first: only files named commgate.1 or commgate-*.1 in OUT_DIR.
#
#   scripts/gen-man.sh [OUT_DIR]        (default: target/man)
#   man -l target/man/commgate.1        (read one without installing it)
#
# The binary: $COMMGATE when set (the release build you ship), else a release build made here
# with `cargo build --locked --release` (release builds name their commit in the VERSION section).
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."

case "${1:-}" in
  -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
[ $# -le 1 ] || { echo "gen-man: usage: scripts/gen-man.sh [OUT_DIR]" >&2; exit 2; }
# OUT_DIR and $COMMGATE as the caller wrote them (relative to where the script was run from).
out=${1:-"$PWD/target/man"}
case $out in /*) ;; *) out="$caller/$out" ;; esac

if [ -n "${COMMGATE:-}" ]; then
  bin=$COMMGATE
  case $bin in /*) ;; *) bin="$caller/$bin" ;; esac
else
  cargo build --locked --release --quiet --bin commgate
  bin="${CARGO_TARGET_DIR:-target}/release/commgate"
fi
[ -x "$bin" ] || { echo "gen-man: $bin is not an executable file (set COMMGATE=/path/to/commgate)" >&2; exit 2; }

mkdir -p "$out"
rm -f "$out/commgate.1" "$out"/commgate-*.1
"$bin" man --dir "$out" >/dev/null
echo "gen-man: wrote $(ls "$out"/commgate*.1 | wc -l) pages to $out ($("$bin" -V))"
