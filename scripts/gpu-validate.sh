#!/usr/bin/env bash
# GPU validation of `commgate bench --backend cuda` against the references the benchmark must
# match: its all-reduce bus bandwidth within 5 % of nccl-tests'
# `all_reduce_perf` at the same size, dtype and GPU count, and its matmul TFLOPS within 5 % of
# `torch.matmul`. Runs all three side by side and prints each ratio against its target.
#
# Needs NVIDIA GPUs (and, for the references, nccl-tests and PyTorch); it is not part of .ci/run.
# With one GPU commgate runs as a smoke run (--allow-single-rank): the matmul is checked, the bus
# bandwidth is not applicable (one rank communicates nothing).
# Knobs (environment), defaults in brackets:
#   GPUS [all visible]   PAYLOAD_ELEMENTS [4194304]   DTYPE [bfloat16|float16|float32]
#   COMPUTE_DIM [2048]   REPEATS [200]   WARMUP [10]
#   COMMGATE [target/release/commgate, built here]   ALL_REDUCE_PERF [all_reduce_perf on PATH]
#   OUT_DIR [a new temporary directory; the result file and the references' logs go there]
# e.g. GPUS=8 DTYPE=float16 scripts/gpu-validate.sh
# Exit: 0 every measured ratio meets its target, 1 one misses it, 2 the run could not be made.
set -euo pipefail
cd "$(dirname "$0")/.."

PAYLOAD_ELEMENTS=${PAYLOAD_ELEMENTS:-4194304}
DTYPE=${DTYPE:-bfloat16}
COMPUTE_DIM=${COMPUTE_DIM:-2048}
REPEATS=${REPEATS:-200}
WARMUP=${WARMUP:-10}
OUT_DIR=${OUT_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/commgate-gpu-validate.XXXXXX")}
mkdir -p "$OUT_DIR"

die() { echo "gpu-validate: $*" >&2; exit 2; }

command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: this script needs NVIDIA GPUs and their driver"
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
  cargo build --release --quiet || die "cargo build --release failed"
  COMMGATE=target/release/commgate
fi
RESULT="$OUT_DIR/commgate.json"
# One GPU is a smoke run (loading, timing, GEMM): commgate refuses one rank unless told so, and
# reports no bus bandwidth for it.
SINGLE_RANK=""
if [ "$GPUS" -eq 1 ]; then SINGLE_RANK=--allow-single-rank; fi
"$COMMGATE" bench --backend cuda --world-size "$GPUS" ${SINGLE_RANK:+"$SINGLE_RANK"} --payload-elements "$PAYLOAD_ELEMENTS" \
  --dtype "$DTYPE" --compute-dim "$COMPUTE_DIM" --warmup "$WARMUP" --repeats "$REPEATS" \
  --output "$RESULT" || die "commgate bench --backend cuda failed (its message is above)"
# Undefined figures are null in the result (busbw with one GPU): printed as "nan".
read -r CG_BUSBW CG_TFLOPS CG_FAILURE < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
m = r.get("metrics") or {}
f = r.get("failure")
num = lambda x: "nan" if x is None else x
print(num(m.get("busbw_gbps")), num(m.get("matmul_tflops")), "none" if f is None else f.get("kind", "failed"))
' "$RESULT") || die "cannot read $RESULT"
[ "$CG_FAILURE" = none ] || die "commgate's run failed ($CG_FAILURE): see the failure in $RESULT"

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

# --- torch.matmul -------------------------------------------------------------------------
TORCH_TFLOPS=""
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  # The same method as commgate's compute_only row: one matmul between two CUDA events per
  # repeat, the median time.
  TORCH_TFLOPS=$(python3 -c '
import sys, torch
n, dtype, warmup, repeats = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
torch.backends.cuda.matmul.allow_tf32 = False  # FP32 as cublasSgemm computes it
dt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[dtype]
a = torch.rand(n, n, device="cuda", dtype=dt) * 2 - 1
b = torch.rand(n, n, device="cuda", dtype=dt) * 2 - 1
c = torch.empty(n, n, device="cuda", dtype=dt)
for _ in range(warmup):
    torch.matmul(a, b, out=c)
torch.cuda.synchronize()
start, stop, times = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
for _ in range(repeats):
    start.record(); torch.matmul(a, b, out=c); stop.record(); stop.synchronize()
    times.append(start.elapsed_time(stop))
times.sort()
print(2 * n**3 / (times[len(times) // 2] * 1e-3) / 1e12)
' "$COMPUTE_DIM" "$DTYPE" "$WARMUP" "$REPEATS") || die "the torch.matmul timing failed"
else
  echo "torch: skipped: no PyTorch with CUDA in python3 (pip install torch)"
fi

# --- ratios ---------------------------------------------------------------------------------
python3 - "$CG_BUSBW" "${NT_BUSBW:-}" "$CG_TFLOPS" "${TORCH_TFLOPS:-}" <<'PY'
import sys
cg_busbw, nt_busbw, cg_tflops, torch_tflops = sys.argv[1:5]
missed = False
print()
print(f"{'measure':<34}{'commgate':>12}{'reference':>12}{'ratio':>9}  target")
for name, mine, ref in [("all-reduce busbw GB/s (nccl-tests)", cg_busbw, nt_busbw),
                        ("matmul TFLOPS (torch.matmul)", cg_tflops, torch_tflops)]:
    if not ref or mine == "nan":
        why = "not applicable with one GPU" if mine == "nan" else "no reference"
        print(f"{name:<34}{float(mine):>12.2f}{'-':>12}{'-':>9}  >= 0.95  ({why})")
        continue
    ratio = float(mine) / float(ref)
    verdict = "PASS" if ratio >= 0.95 else "MISS"
    note = "  (faster than the reference by > 5 %: check the sizes match)" if ratio > 1.05 else ""
    missed |= verdict == "MISS"
    print(f"{name:<34}{float(mine):>12.2f}{float(ref):>12.2f}{ratio:>9.3f}  >= 0.95  {verdict}{note}")
sys.exit(1 if missed else 0)
PY
