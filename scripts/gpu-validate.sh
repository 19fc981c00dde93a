#!/usr/bin/env bash
# GPU validation of `commgate bench --backend cuda` against the references the benchmark must
# match, in one run of about a minute on one GPU:
#   - the timing gate: whether the windows were gated on this machine, and the four schedules'
#     medians with the gate and without it (COMMGATE_CUDA_GATE=off), side by side;
#   - the matmul: commgate's compute_only TFLOPS within 5 % of `torch.matmul`'s at the same
#     dim and dtype, timed the same way (device time only: the GPU is kept busy while the host
#     queues, so neither includes launch latency);
#   - the all-reduce (2+ GPUs): bus bandwidth within 5 % of nccl-tests' `all_reduce_perf`;
#   - the hardware block: gpu_memory_mib against torch's total_memory, topology (single-gpu on
#     one GPU).
#
# Needs NVIDIA GPUs (and, for the references, PyTorch and nccl-tests); it is not part of .ci/run.
# Knobs (environment), defaults in brackets:
#   GPUS [all visible]   PAYLOAD_ELEMENTS [4194304]   DTYPE [bfloat16|float16|float32]
#   COMPUTE_DIM [2048]   REPEATS [200]   WARMUP [10]   UNGATED [1: also run with the gate off]
#   COMMGATE [cargo build --release here when cargo exists, else target/release/commgate]
#   ALL_REDUCE_PERF [all_reduce_perf on PATH]
#   OUT_DIR [a new temporary directory; the result files and the logs go there]
# e.g. GPUS=8 DTYPE=float16 scripts/gpu-validate.sh
#      COMMGATE=./commgate GPUS=1 scripts/gpu-validate.sh      (a prebuilt binary, no cargo)
# Exit: 0 every check passed, 1 one missed, 2 the run could not be made.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS=0

PAYLOAD_ELEMENTS=${PAYLOAD_ELEMENTS:-4194304}
DTYPE=${DTYPE:-bfloat16}
COMPUTE_DIM=${COMPUTE_DIM:-2048}
REPEATS=${REPEATS:-200}
WARMUP=${WARMUP:-10}
UNGATED=${UNGATED:-1}
OUT_DIR=${OUT_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/commgate-gpu-validate.XXXXXX")}
mkdir -p "$OUT_DIR"

die() { echo "gpu-validate: $*" >&2; exit 2; }

command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: this script needs NVIDIA GPUs and their driver"
command -v python3 >/dev/null 2>&1 || die "python3 not found: it reads the result files"
VISIBLE=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
[ "$VISIBLE" -ge 1 ] || die "no GPU visible to nvidia-smi (CUDA_VISIBLE_DEVICES?)"
GPUS=${GPUS:-$VISIBLE}

case "$DTYPE" in
  bfloat16) ELEM_BYTES=2; NCCL_TESTS_DTYPE=bfloat16 ;;
  float16) ELEM_BYTES=2; NCCL_TESTS_DTYPE=half ;;
  float32) ELEM_BYTES=4; NCCL_TESTS_DTYPE=float ;;
  *) die "DTYPE=$DTYPE: use bfloat16, float16 or float32" ;;
esac
BYTES=$((PAYLOAD_ELEMENTS * ELEM_BYTES))

echo "gpu-validate: $GPUS GPU(s) of $VISIBLE visible: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1)"
echo "  all-reduce $PAYLOAD_ELEMENTS x $DTYPE ($BYTES B per rank), matmul ${COMPUTE_DIM}^3, $REPEATS repeats after $WARMUP warm-up; files in $OUT_DIR"

# --- commgate ------------------------------------------------------------------------------
if [ -z "${COMMGATE:-}" ]; then
  if command -v cargo >/dev/null 2>&1; then
    cargo build --release --quiet || die "cargo build --release failed"
  fi
  COMMGATE=target/release/commgate
fi
[ -x "$COMMGATE" ] || die "$COMMGATE is not an executable commgate: build it (cargo build --release) or set COMMGATE"
BENCH_ARGS=(bench --backend cuda --world-size "$GPUS" --payload-elements "$PAYLOAD_ELEMENTS" --dtype "$DTYPE"
  --compute-dim "$COMPUTE_DIM" --warmup "$WARMUP" --repeats "$REPEATS" --timeout 120 --quiet)
# A world of one rank may need saying so explicitly (newer releases); older ones lack the flag.
if [ "$GPUS" -eq 1 ] && "$COMMGATE" bench --help 2>/dev/null | grep -q -- '--allow-single-rank'; then
  BENCH_ARGS+=(--allow-single-rank)
fi

# bench_run NAME [VAR=VALUE...]: one commgate run, result in $OUT_DIR/NAME.json, stderr in NAME.stderr.
bench_run() {
  local name=$1; shift
  echo "commgate ($name): $COMMGATE ${BENCH_ARGS[*]}${*:+ with $*}"
  if ! env "$@" "$COMMGATE" "${BENCH_ARGS[@]}" --output "$OUT_DIR/$name.json" 2>"$OUT_DIR/$name.stderr"; then
    cat "$OUT_DIR/$name.stderr" >&2
    die "commgate bench --backend cuda ($name) failed (its message is above)"
  fi
  sed 's/^/  | /' "$OUT_DIR/$name.stderr"
}
bench_run gated
if [ "$UNGATED" = 1 ]; then
  bench_run ungated COMMGATE_CUDA_GATE=off
fi

# --- torch.matmul -------------------------------------------------------------------------
TORCH_JSON=""
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  # compute_only's window with the gate: one matmul between two CUDA events, median over the
  # repeats, with nothing of the host's queueing inside. torch.cuda._sleep keeps the GPU busy
  # while the host queues start, matmul and stop, so the start event fires only when the GPU
  # gets to it, not before the host has queued the matmul (without it the window would hold one
  # launch latency: the bias the gate removes from commgate).
  TORCH_JSON=$(python3 -c '
import json, sys, torch
n, dtype, warmup, repeats = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.backends.cuda.matmul.allow_tf32 = False  # FP32 as cublasSgemm computes it
dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]
a = torch.rand(n, n, device="cuda", dtype=dt) * 2 - 1
b = torch.rand(n, n, device="cuda", dtype=dt) * 2 - 1
c = torch.empty(n, n, device="cuda", dtype=dt)
for _ in range(warmup):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
busy = getattr(torch.cuda, "_sleep", None)
start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
def median(hold):
    times = []
    for _ in range(repeats):
        if hold:
            busy(200_000)  # about 0.1 ms of GPU cycles
        start.record(); torch.matmul(a, b, out=c); stop.record(); stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]
flops = 2 * n**3
out = {"plain_tflops": flops / (median(False) * 1e-3) / 1e12,
       "total_memory_mib": torch.cuda.get_device_properties(0).total_memory // (1024 * 1024)}
out["tflops"] = flops / (median(True) * 1e-3) / 1e12 if busy else out["plain_tflops"]
out["held"] = busy is not None
print(json.dumps(out))
' "$COMPUTE_DIM" "$DTYPE" "$WARMUP" "$REPEATS") || die "the torch.matmul timing failed"
else
  echo "torch: skipped: no PyTorch with CUDA in python3 (pip install torch)"
fi

# --- nccl-tests all_reduce_perf --------------------------------------------------------------
NT_BUSBW=""
ALL_REDUCE_PERF=${ALL_REDUCE_PERF:-$(command -v all_reduce_perf || true)}
if [ "$GPUS" -lt 2 ]; then
  echo "nccl-tests: skipped: bus bandwidth needs at least 2 GPUs (an all-reduce over one moves nothing)"
elif [ -z "$ALL_REDUCE_PERF" ] || [ ! -x "$ALL_REDUCE_PERF" ]; then
  echo "nccl-tests: all_reduce_perf not found. Build it and point ALL_REDUCE_PERF at it:"
  echo "  git clone https://github.com/NVIDIA/nccl-tests && make -C nccl-tests CUDA_HOME=/usr/local/cuda NCCL_HOME=<NCCL prefix>"
  echo "  ALL_REDUCE_PERF=\$PWD/nccl-tests/build/all_reduce_perf scripts/gpu-validate.sh"
else
  # One process driving all GPUs (-g), as commgate does without a launcher; -c 0: no data check.
  "$ALL_REDUCE_PERF" -b "$BYTES" -e "$BYTES" -g "$GPUS" -d "$NCCL_TESTS_DTYPE" -o sum \
    -n "$REPEATS" -w "$WARMUP" -c 0 >"$OUT_DIR/all_reduce_perf.log" 2>&1 \
    || die "all_reduce_perf failed: see $OUT_DIR/all_reduce_perf.log"
  # The out-of-place busbw: the column under the header's first "busbw", on the row of our size.
  NT_BUSBW=$(python3 -c '
import sys
size, col = sys.argv[2], None
for line in open(sys.argv[1]):
    tokens = line.split()
    if tokens[:1] == ["#"] and "busbw" in tokens:
        col = tokens.index("busbw") - 1
    elif col is not None and tokens[:1] == [size] and len(tokens) > col:
        print(tokens[col]); break
' "$OUT_DIR/all_reduce_perf.log" "$BYTES")
  [ -n "$NT_BUSBW" ] || die "no row for $BYTES B in $OUT_DIR/all_reduce_perf.log"
fi

# --- report ---------------------------------------------------------------------------------
status=0
python3 - "$OUT_DIR" "$GPUS" "$UNGATED" "${NT_BUSBW:-}" "${TORCH_JSON:-}" <<'PY' || status=$?
import json, os, sys
out_dir, gpus, ungated, nt_busbw, torch_json = sys.argv[1:6]
gpus = int(gpus)
missed = []

def load(name):
    path = os.path.join(out_dir, name)
    with open(path) as f:
        r = json.load(f)
    if r.get("failure"):
        print(f"gpu-validate: {path}: the run failed: {r['failure']}", file=sys.stderr)
        sys.exit(2)
    return r

def note(name):
    with open(os.path.join(out_dir, name + ".stderr")) as f:
        return [l.strip() for l in f if "timing windows are not gated" in l]

gated = load("gated.json")
runs = [("gated", gated)] + ([("ungated", load("ungated.json"))] if ungated == "1" else [])

print()
print("== timing gate")
gated_notes = note("gated")
if gated_notes:
    print(f"  NOT SUPPORTED here: {gated_notes[0]}")
    missed.append("the timing gate was off in the default run")
else:
    print("  supported: the default run's windows were gated (no 'not gated' note on stderr)")
if ungated == "1":
    off_notes = note("ungated")
    print(f"  COMMGATE_CUDA_GATE=off run: {'noted as ungated' if off_notes else 'NO NOTE (expected one)'}")
    if not off_notes:
        missed.append("COMMGATE_CUDA_GATE=off did not print its note")

print()
print("== schedule medians, ms (max over ranks)")
header = f"  {'schedule':<14}" + "".join(f"{name:>12}" for name, _ in runs)
print(header + ("   gated - ungated" if len(runs) == 2 else ""))
medians = {name: {row["schedule"]: row["median_max_rank_ms"] for row in r["rows"]} for name, r in runs}
for schedule in ["comm_only", "compute_only", "serial", "overlap"]:
    cells = [medians[name].get(schedule, float("nan")) for name, _ in runs]
    line = f"  {schedule:<14}" + "".join(f"{v:>12.4f}" for v in cells)
    if len(cells) == 2:
        line += f"{(cells[0] - cells[1]) * 1000:>14.1f} us"
    print(line)
for label, key in [("exposed_comm_ms", "exposed_comm_ms"), ("overlap_ratio", "overlap_ratio")]:
    cells = [r["metrics"].get(key) for _, r in runs]
    cells = [float("nan") if v is None else v for v in cells]  # null: undefined (one rank)
    print(f"  {label:<14}" + "".join(f"{v:>12.4f}" for v in cells))

print()
print("== hardware (gated run)")
hw = gated.get("hardware", {})
sw = gated.get("software", {})
for key in ["gpu_name", "gpu_count", "nodes"]:
    print(f"  {key:<15} {hw.get(key)}")
for key in ["driver", "cuda", "nccl", "commgate"]:
    print(f"  {key:<15} {sw.get(key, hw.get(key))}")
torch_ref = json.loads(torch_json) if torch_json else None
if "gpu_memory_mib" in hw:
    mem = hw["gpu_memory_mib"]
    ref = torch_ref["total_memory_mib"] if torch_ref else None
    verdict = "" if ref is None else ("  PASS (torch: %d)" % ref if mem == ref else "  MISS (torch: %d)" % ref)
    if ref is not None and mem != ref:
        missed.append("gpu_memory_mib differs from torch's total_memory")
    print(f"  {'gpu_memory_mib':<15} {mem}{verdict}")
else:
    print(f"  {'gpu_memory_mib':<15} (not in the result file: this build does not write it)")
if "topology" in hw:
    topo = hw["topology"]
    expect = "single-gpu" if gpus == 1 else None
    verdict = "" if expect is None else ("  PASS" if topo == expect else f"  MISS (expected {expect})")
    if expect is not None and topo != expect:
        missed.append("topology")
    print(f"  {'topology':<15} {topo}{verdict}")
else:
    print(f"  {'topology':<15} (not in the result file: this build does not write it)")

print()
print(f"{'measure':<36}{'commgate':>12}{'reference':>12}{'ratio':>9}  target")
m = gated["metrics"]
checks = [("all-reduce busbw GB/s (nccl-tests)", m.get("busbw_gbps"), float(nt_busbw) if nt_busbw else None),
          ("matmul TFLOPS (torch.matmul)", m.get("matmul_tflops"), torch_ref["tflops"] if torch_ref else None)]
for name, mine, ref in checks:
    if mine is None:  # null in the result: undefined, e.g. busbw with one rank
        why = "not applicable with one GPU" if gpus == 1 else "undefined in the result"
        print(f"{name:<36}{'-':>12}{'-':>12}{'-':>9}  >= 0.95  ({why})")
        continue
    if not ref:
        print(f"{name:<36}{float(mine):>12.2f}{'-':>12}{'-':>9}  >= 0.95  (no reference)")
        continue
    ratio = float(mine) / ref
    verdict = "PASS" if ratio >= 0.95 else "MISS"
    extra = "  (faster than the reference by > 5 %: check the sizes match)" if ratio > 1.05 else ""
    if verdict == "MISS":
        missed.append(name)
    print(f"{name:<36}{float(mine):>12.2f}{ref:>12.2f}{ratio:>9.3f}  >= 0.95  {verdict}{extra}")
if torch_ref:
    held = "" if torch_ref["held"] else " (torch.cuda._sleep missing: the reference holds a launch latency)"
    print(f"  torch.matmul timed plainly (start, matmul, stop on an idle GPU): {torch_ref['plain_tflops']:.2f} TFLOPS{held}")

print()
print("gpu-validate: " + ("all checks passed" if not missed else "MISSED: " + "; ".join(missed)))
sys.exit(1 if missed else 0)
PY
echo "gpu-validate: done in ${SECONDS} s"
exit "$status"
