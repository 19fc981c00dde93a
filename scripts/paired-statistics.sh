#!/usr/bin/env bash
# Which per-run statistic survives a loaded machine (docs/performance.md, "Paired checks on a
# loaded machine"): N rounds, each running three CPU benchmarks in random order (base, base
# again, and a head with NCCL_BUFFSIZE lowered), with one busy loop per core; then, per schedule
# and statistic (median, 25th, 10th and 5th percentile, minimum), the mean change and the
# standard deviation over the rounds of ln(run / first base run).
#
#   scripts/paired-statistics.sh [N] [REPEATS] [BUFFSIZE]   (defaults: 10 rounds, 200, 524288)
#
# COMMGATE_PAIRED_LOAD=0 leaves the busy loops out. Uses target/release/commgate (build it first).
set -euo pipefail
n=${1:-10}
repeats=${2:-200}
buffsize=${3:-524288}
bin=$(cd "$(dirname "$0")/.." && pwd)/target/release/commgate
[ -x "$bin" ] || { echo "build it first: cargo build --release" >&2; exit 2; }
command -v python3 >/dev/null || { echo "needs python3" >&2; exit 2; }
dir=$(mktemp -d)
busy=()
cleanup() { for p in "${busy[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT
if [ "${COMMGATE_PAIRED_LOAD:-1}" != 0 ]; then
  for _ in $(seq "$(nproc)"); do (while :; do :; done) & busy+=($!); done
fi
for i in $(seq "$n"); do
  for arm in $(printf 'A\nB\nC\n' | shuf); do
    if [ "$arm" = C ]; then export NCCL_BUFFSIZE="$buffsize"; else unset NCCL_BUFFSIZE; fi
    COMMGATE_SEED=$i "$bin" bench --backend cpu --repeats "$repeats" --quiet -o "$dir/r$i-$arm.json" >/dev/null 2>&1
  done
done
python3 - "$dir" "$n" "$buffsize" <<'PY'
import json, math, statistics, sys
d, n, buffsize = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def q(xs, p):
    xs = sorted(xs); k = (len(xs) - 1) * p; f = math.floor(k); c = min(f + 1, len(xs) - 1)
    return xs[f] + (xs[c] - xs[f]) * (k - f)
stats = {"median": lambda s: q(s, .5), "p25": lambda s: q(s, .25), "p10": lambda s: q(s, .10),
         "p05": lambda s: q(s, .05), "min": min}
def rows(i, arm):
    r = json.load(open(f"{d}/r{i}-{arm}.json"))
    return {row["schedule"]: row["samples_ms"] for row in r["rows"]}
runs = {(i, a): rows(i, a) for i in range(1, n + 1) for a in "ABC"}
print(f"{n} rounds; ln(run / first base run) over the rounds: mean change, standard deviation")
for sched in ["overlap", "serial", "comm_only", "compute_only"]:
    print(sched)
    for name, f in stats.items():
        cells = []
        for arm, label in [("B", "base/base"), ("C", f"BUFFSIZE {buffsize}/base")]:
            lr = [math.log(f(runs[(i, arm)][sched]) / f(runs[(i, "A")][sched])) for i in range(1, n + 1)]
            cells.append(f"{label} {math.exp(statistics.mean(lr)) - 1:+7.1%} sd {statistics.stdev(lr):.3f}")
        print(f"  {name:6s}  " + "   ".join(cells))
PY
