#!/usr/bin/env bash
# The paired check on this machine's CPU backend, loaded with one busy loop per core: N checks of
# an unchanged configuration and N of a head that sets NCCL_BUFFSIZE low enough to slow the CPU
# all-reduce (docs/performance.md, "Paired checks on a loaded machine").
#
#   scripts/paired-loaded.sh [N] [BUFFSIZE]      (defaults: 10 checks each, 524288 bytes)
#
# COMMGATE_PAIRED_LOAD=0 runs the same checks without the busy loops (the machine as it is).
# Uses target/release/commgate (build it first). Prints one line per check (verdict, exit code,
# rounds, seconds) and a summary per configuration.
set -euo pipefail
n=${1:-10}
buffsize=${2:-524288}
bin=$(cd "$(dirname "$0")/.." && pwd)/target/release/commgate
[ -x "$bin" ] || { echo "build it first: cargo build --release" >&2; exit 2; }
repo=$(mktemp -d)
busy=()
cleanup() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$repo"; }
trap cleanup EXIT
cd "$repo"
git init -q && git config user.email paired@example.com && git config user.name paired
printf '[bench]\nbackend = "cpu"\n' > commgate.toml
git add commgate.toml && git commit -qm base
if [ "${COMMGATE_PAIRED_LOAD:-1}" != 0 ]; then
  for _ in $(seq "$(nproc)"); do (while :; do :; done) & busy+=($!); done
fi
run() {
  local label=$1 i out rc
  for i in $(seq "$n"); do
    out=$repo/report-$label-$i.json
    start=$(date +%s)
    rc=0
    COMMGATE_SEED=$i "$bin" check --paired --base HEAD --comment never --format json -o "$out" >/dev/null 2>"$repo/err" || rc=$?
    python3 - "$label" "$i" "$rc" "$(( $(date +%s) - start ))" "$out" <<'PY'
import json, sys
label, i, rc, secs, path = sys.argv[1:]
try:
    r = json.load(open(path))
    p = r.get("paired") or {}
    first = (p.get("metrics") or [{}])[0]
    mde = first.get("mde")
    ratio = first.get("ratio")
    said = f", overlap median head/base {ratio:.3f} ± {100 * mde:.1f} %" if ratio and mde is not None else ""
    why = f"; {r['reasons'][0]}" if r['blocking'] and r.get('reasons') else ""
    print(f"{label} {i}: {r['verdict']}{' (blocking)' if r['blocking'] else ''} exit {rc}, {len(p.get('rounds', []))} rounds, {secs} s{said}{why}")
except Exception as e:
    print(f"{label} {i}: no report ({e}), exit {rc}, {secs} s")
PY
  done
}
run unchanged
printf '[bench]\nbackend = "cpu"\n\n[bench.env]\nNCCL_BUFFSIZE = "%s"\n' "$buffsize" > commgate.toml
run "buffsize-$buffsize"
