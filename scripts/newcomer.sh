#!/usr/bin/env bash
# The newcomer scenario, on this machine's real CPU timings: five baseline runs of the cpu
# backend recorded while the machine carries other load, then
#   1. a current run made 2x slower (every step of a real run on the same loaded machine,
#      doubled: a code regression of that size), which the gate must block or refuse in one line;
#   2. TRIES unchanged current runs on the same machine (default 20), none of which may block.
# It prints each verdict's headline and a summary line; it exits 1 when an unchanged run blocked
# or the slower run passed as accept.
#
#   scripts/newcomer.sh [COMMGATE_BINARY] [TRIES]
set -euo pipefail
bin=${1:-target/release/commgate}
tries=${2:-20}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$work"
mkdir baselines
# Other load: one busy process per core, niced, for the whole scenario (a shared runner).
for _ in $(seq "$(nproc)"); do nice -n 5 sh -c 'while :; do :; done' & done
bench() { "$bin" bench --backend cpu --results-dir "$1" >/dev/null 2>&1; ls "$1"/*.json; }
for i in 1 2 3 4 5; do
  "$bin" baseline update --baselines baselines --from "$(bench "base-$i")" >/dev/null
done
check() { "$bin" check --baselines baselines --comment never --result "$1" --format json; }
headline() { python3 -c 'import json,sys; d=json.load(sys.stdin); c=d.get("comparison") or {}; print(d["verdict"], d["blocking"], "|", c.get("headline",""), "| mde", c.get("mde"), "| spread", (c.get("baseline") or {}).get("spread"))'; }
slow=$(bench slow)
python3 - "$slow" <<'PY'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
for row in d["rows"]:
    row["samples_ms"] = [2.0 * s for s in row["samples_ms"]]
json.dump(d, open(p, "w"))
PY
echo "2x slower: $(check "$slow" | headline || true)"
blocked=0
for i in $(seq "$tries"); do
  line=$(check "$(bench "same-$i")" | headline || true)
  echo "unchanged $i: $line"
  case "$line" in *" True |"*) blocked=$((blocked + 1)) ;; esac
done
echo "unchanged runs blocked: $blocked of $tries"
[ "$blocked" -eq 0 ]
