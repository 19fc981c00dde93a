#!/usr/bin/env bash
# GPU validation of `commgate bench --backend cuda`: one prepared run on a GPU machine with no
# network, no cargo and no nccl-tests needed, torch installed with pip (which brings pip's cuBLAS
# and NCCL under site-packages/nvidia/*/lib). Estimated time on one H200: about 1.5 minutes
# (8 short commgate runs of 1-10 s each, two Python processes that import torch; 44-45 s measured
# on one H200 on 2026-12-04); with 2+ GPUs
# about 1 minute more (2.5 if the killed peer's survivor takes all of KILL_DEADLINE); under 5
# minutes unless something hangs (each run then stops at its own limit, and once BUDGET seconds
# have passed the runs not started yet are skipped).
#
# commgate runs with torch's libraries only: LD_LIBRARY_PATH is unset for commgate (and for the
# torch reference), so commgate must find cuBLAS and NCCL under site-packages itself.
#
# Checks, one line each: PASS|FAIL|SKIP <name>: <figures and the tolerance>. On one GPU (world
# size 1, --allow-single-rank):
#   gemm-<dtype>-<dim>   commgate's compute_only TFLOPS (2*dim^3 / median) >= 0.95 x the lower of
#                        torch.mm's two: held (CUDA events around one matmul while torch.cuda._sleep
#                        holds the GPU, after an idle gap) and back to back (the GPU never idle);
#                        median of REPEATS after WARMUP; fp32 with TF32 off. A power-bound GEMM
#                        differs between the two: bf16 8192^3 on one H200, 795 vs 695 TFLOPS
#   gate-timing          workload.timing: gated by default, ungated with COMMGATE_CUDA_GATE=off
#                        and with CUDA_LAUNCH_BLOCKING=1 (bf16, GATE_DIM)
#   gate-medians         the compute_only medians of those three: ungated >= gated x 0.97
#   schedules            on the first GEMMS run: serial ~ comm_only + compute_only, and
#                        max(comm_only, compute_only) <= overlap <= serial, each within 10 % or 20 us
#   gpu-memory           hardware.gpu_memory_mib within 1 % of torch's total_memory // 2**20
#   topology             single-gpu and gpu_count 1 for a one-rank run (torch's count shown)
#   libraries            the libcublas, libcublasLt and libnccl files the commgate process mapped
#                        (its /proc/PID/maps, polled while it runs) are the ones torch maps, or
#                        the ones the dynamic loader finds by name (ldconfig -p), which come
#                        first in commgate's search
# With 2+ GPUs, also (on one GPU they print "SKIP ...: not applicable" and are not counted):
#   world-n              all GPUs in one process: finished, world size and gpu_count N, a
#                        multi-GPU topology, a busbw, consistent schedules (BUSBW_BYTES per rank)
#   two-process          RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT, 2 processes: both exit 0
#   killed-peer          2 processes, rank 1 killed after KILL_AFTER s: rank 0 exits non-zero
#                        within KILL_DEADLINE s (its --timeout is KILL_TIMEOUT; after 1 s the job
#                        is usually still forming: a larger KILL_AFTER kills it mid-step)
#   busbw                world-n's busbw >= all_reduce_perf's x (1 - tol), tol 10 % at 256 MiB,
#                        shrinking towards 5 % for larger payloads; a SKIP without all_reduce_perf
# How SKIPs count: a check that applies here but could not run (no torch for the references, no
# all_reduce_perf, BUDGET spent) is one of the M checks and not passed, so the exit is 2 unless a
# check failed; a multi-GPU check on one GPU does not apply: printed, not one of the M.
# The tolerances and the report live in scripts/gpu_validate.py, tested without a GPU on recorded
# outputs: python3 scripts/gpu_validate.py selftest tests/fixtures/gpu-validate
#
# Knobs (environment), defaults in brackets:
#   COMMGATE [./commgate, else the repository's commgate, else target/release/commgate; cargo
#            build --release only when none exists and cargo does]   PYTHON [python3]
#   GEMMS ["bf16:8192 bf16:2048 fp16:8192 fp16:2048 fp32:8192 fp32:2048"; the first is the
#         run the schedules, memory, topology and libraries are read from]   GATE_DIM [2048]
#   WARMUP [10]   REPEATS [100]   BENCH_TIMEOUT [120: commgate's --timeout]   BUDGET [280 s:
#   runs not started by then are skipped]   BUSBW_BYTES [268435456]   KILL_AFTER [1]
#   KILL_TIMEOUT [20]   KILL_DEADLINE [90: commgate's own step deadline is 60 s]
#   ALL_REDUCE_PERF [all_reduce_perf on PATH]
#   EMULATOR [0; 1: run against commgate's emulated GPUs (scripts/fake-gpu.sh, docs/emulator.md)
#            instead of a GPU: 2 devices, GEMMS "bf16:128 fp16:128 fp32:128", GATE_DIM 128,
#            BUSBW_BYTES 1 MiB, COMMGATE_FAKEGPU_GFLOPS 0.5 and _BUSBW_GBPS 0.1 (so that each
#            matmul and all-reduce lasts milliseconds) unless set; no torch, no nccl-tests; the checks against them are
#            not applicable, and the report says it validated the emulator, never a GPU]
#   OUT_DIR [a new temporary directory: results, stderr, maps, torch.json, runs.tsv, plan.txt]
# e.g. COMMGATE=./commgate scripts/gpu-validate.sh
#
# Exit: 0 every check ran and passed ("N of N checks passed"); 1 a check failed; 2 the validation
# could not be made: "not validated: ..." (no GPU, no commgate binary, no python3, or a check that
# could not run, e.g. no torch for the references).
set -euo pipefail

case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
ROOT=$(cd "$here/.." && pwd)
CALLER_DIR=$PWD
cd "$ROOT"
PY="$ROOT/scripts/gpu_validate.py"
PYTHON=${PYTHON:-python3}

not_validated() { echo "not validated: $1"; shift; for line in "$@"; do echo "  $line"; done; exit 2; }

command -v "$PYTHON" >/dev/null 2>&1 \
  || not_validated "no python3 (PYTHON=$PYTHON not found): install Python 3, or point PYTHON at it"

# Nothing the caller set may change what commgate measures: its settings, the timing gate, a
# launcher's rank variables (this script sets them where it launches ranks itself), the dynamic
# loader's path (commgate must find torch's libraries by itself; nccl-tests keeps the caller's).
CALLER_LD_LIBRARY_PATH=${LD_LIBRARY_PATH-}
CALLER_HAD_LD_LIBRARY_PATH=${LD_LIBRARY_PATH+1}
while IFS= read -r var; do
  # The emulator's own variables describe the emulated machine, not commgate's settings.
  case $var in COMMGATE_FAKEGPU_*) ;; COMMGATE_*) unset "$var" ;; esac
done < <(compgen -e)
unset LD_LIBRARY_PATH CUDA_LAUNCH_BLOCKING RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK SLURM_PROCID SLURM_NTASKS \
  SLURM_LOCALID
SECONDS=0

# --- the GPUs ----------------------------------------------------------------------------------
PAYLOAD=() RANK_SIZES=()
case ${EMULATOR:-0} in 0 | 1) ;; *) not_validated "EMULATOR=$EMULATOR: use 1 (commgate's emulated GPUs) or 0" ;; esac
if [ "${EMULATOR:-0}" = 1 ]; then
  # commgate's emulated GPUs, for commgate only: torch and nccl-tests never run against them.
  FAKE_DIR=$("$ROOT/scripts/fake-gpu.sh") || not_validated "the emulator did not build (scripts/fake-gpu.sh)"
  export LD_LIBRARY_PATH="$FAKE_DIR"
  GPUS=2 GPU_SOURCE="commgate's emulator (scripts/fake-gpu.sh), not a GPU" GPU_NAME="commgate emulated GPU"
  GEMMS=${GEMMS:-"bf16:128 fp16:128 fp32:128"} GATE_DIM=${GATE_DIM:-128} BUSBW_BYTES=${BUSBW_BYTES:-1048576}
  # The all-reduces' payload too: the emulator sums on the CPU. Its simulated rates make each
  # matmul and all-reduce last milliseconds, far above what a loaded machine adds.
  PAYLOAD=(--payload-elements 65536) RANK_SIZES=(--payload-elements 65536 --compute-dim "$GATE_DIM")
  export COMMGATE_FAKEGPU_GFLOPS=${COMMGATE_FAKEGPU_GFLOPS:-0.5} COMMGATE_FAKEGPU_BUSBW_GBPS=${COMMGATE_FAKEGPU_BUSBW_GBPS:-0.1}
else
  IFS=$'\t' read -r GPUS GPU_SOURCE GPU_NAME < <("$PYTHON" "$PY" count-gpus 2>/dev/null || printf '0\tcount-gpus failed\t\n') || true
fi
case ${GPUS:-} in '' | *[!0-9]*) GPUS=0 ;; esac
if [ "$GPUS" -lt 1 ]; then
  not_validated "no GPU" "why: ${GPU_SOURCE:-nothing counted}" \
    "(GPUs are counted with torch.cuda.device_count(), else nvidia-smi -L, honouring CUDA_VISIBLE_DEVICES)"
fi

# --- the commgate binary -------------------------------------------------------------------------
find_commgate() {
  if [ -n "${COMMGATE:-}" ]; then
    case $COMMGATE in /*) ;; *) COMMGATE="$CALLER_DIR/$COMMGATE" ;; esac
    [ -f "$COMMGATE" ] && [ -x "$COMMGATE" ] && return 0
    not_validated "no commgate binary (COMMGATE=$COMMGATE is not an executable file: fix the path, or unset COMMGATE)"
  fi
  local candidate
  for candidate in "$CALLER_DIR/commgate" "$ROOT/commgate" "$ROOT/target/release/commgate"; do
    if [ -f "$candidate" ] && [ -x "$candidate" ]; then COMMGATE=$candidate; return 0; fi
  done
  return 1
}
if ! find_commgate; then
  if command -v cargo >/dev/null 2>&1; then
    echo "gpu-validate: no commgate binary; building one (cargo build --release --offline, then online)"
    cargo build --release --offline --quiet || cargo build --release --quiet || true
  fi
  find_commgate || not_validated "no commgate binary (set COMMGATE=/path/to/commgate, or put a stripped release build at ./commgate: build it elsewhere with cargo build --release and copy target/release/commgate)"
fi
VERSION=$("$COMMGATE" --version 2>&1) || not_validated "$COMMGATE does not run: $VERSION"
HELP=$("$COMMGATE" bench --help 2>&1 || true)
SINGLE_RANK=()
case $HELP in *--allow-single-rank*) SINGLE_RANK=(--allow-single-rank) ;; esac

# --- the plan ------------------------------------------------------------------------------------
GEMMS=${GEMMS:-"bf16:8192 bf16:2048 fp16:8192 fp16:2048 fp32:8192 fp32:2048"}
GATE_DIM=${GATE_DIM:-2048}
WARMUP=${WARMUP:-10}
REPEATS=${REPEATS:-100}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-120}
BUDGET=${BUDGET:-280}
BUSBW_BYTES=${BUSBW_BYTES:-268435456}
KILL_AFTER=${KILL_AFTER:-1}
KILL_TIMEOUT=${KILL_TIMEOUT:-20}
KILL_DEADLINE=${KILL_DEADLINE:-90}
ALL_REDUCE_PERF=${ALL_REDUCE_PERF:-$(command -v all_reduce_perf || true)}
OUT_DIR=${OUT_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/commgate-gpu-validate.XXXXXX")}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
: >"$OUT_DIR/runs.tsv"

read -r -a SPECS <<<"$GEMMS"
[ "${#SPECS[@]}" -gt 0 ] || not_validated "GEMMS is empty: list at least one of bf16:DIM, fp16:DIM, fp32:DIM"
for spec in "${SPECS[@]}"; do
  case $spec in bf16:[0-9]* | fp16:[0-9]* | fp32:[0-9]*) ;; *) not_validated "GEMMS entry $spec: use bf16:DIM, fp16:DIM or fp32:DIM" ;; esac
done
case " ${SPECS[*]} " in *" bf16:$GATE_DIM "*) ;; *) SPECS+=("bf16:$GATE_DIM") ;; esac
PRIMARY="gemm-${SPECS[0]%%:*}-${SPECS[0]#*:}"
{
  echo "gpus=$GPUS"
  echo "gpu_source=$GPU_SOURCE"
  echo "gpu_name=$GPU_NAME"
  echo "emulator=${EMULATOR:-0}"
  echo "primary=$PRIMARY"
  echo "gate_ref=gemm-bf16-$GATE_DIM"
  echo "busbw_bytes=$BUSBW_BYTES"
  echo "kill_after_s=$KILL_AFTER"
  echo "kill_deadline_s=$KILL_DEADLINE"
  echo "all_reduce_perf=$ALL_REDUCE_PERF"
  echo "repeats=$REPEATS"
  echo "warmup=$WARMUP"
} >"$OUT_DIR/plan.txt"

echo "gpu-validate: $GPUS GPU(s) ${GPU_NAME:+($GPU_NAME) }counted by $GPU_SOURCE"
echo "gpu-validate: $VERSION at $COMMGATE; files in $OUT_DIR"
if [ -n "$CALLER_HAD_LD_LIBRARY_PATH" ]; then
  echo "gpu-validate: LD_LIBRARY_PATH=$CALLER_LD_LIBRARY_PATH is unset for commgate and torch (torch's libraries only)"
fi

# A wall-clock limit around each run, on top of commgate's own --timeout.
LIMIT=()
if command -v timeout >/dev/null 2>&1; then LIMIT=(timeout -k 10 $((BENCH_TIMEOUT + 60))); fi

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$OUT_DIR/runs.tsv"; }

# over_budget NAME [NEEDS]: true (and NAME recorded as not run) once BUDGET seconds have passed,
# or would have passed NEEDS seconds from now.
over_budget() {
  if [ $((SECONDS + ${2:-0})) -ge "$BUDGET" ]; then
    record "$1" not-run 0 "the time budget (BUDGET=$BUDGET s) was spent before it started"
    echo "gpu-validate: $1: not run (BUDGET=$BUDGET s spent)"
    return 0
  fi
  return 1
}

# bench NAME WATCH [VAR=VALUE...] -- ARGS...: one commgate bench in $OUT_DIR (NAME.json,
# NAME.stderr, NAME.stdout), with VAR=VALUE in its environment; WATCH=1 also collects the
# libraries it maps into NAME.maps. One line in runs.tsv.
bench() {
  local name=$1 watch=$2 vars=() start=$SECONDS rc=0 pid watcher=""
  shift 2
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  over_budget "$name" && return 0
  (
    cd "$OUT_DIR"
    for var in ${vars[@]+"${vars[@]}"}; do export "${var?}"; done
    exec ${LIMIT[@]+"${LIMIT[@]}"} "$COMMGATE" bench --backend cuda --warmup "$WARMUP" \
      --timeout "$BENCH_TIMEOUT" --quiet "$@" --output "$name.json"
  ) >"$OUT_DIR/$name.stdout" 2>"$OUT_DIR/$name.stderr" &
  pid=$!
  if [ "$watch" = 1 ]; then
    "$PYTHON" "$PY" watch-maps "$pid" "$OUT_DIR/$name.maps" &
    watcher=$!
  fi
  wait "$pid" || rc=$?
  if [ -n "$watcher" ]; then wait "$watcher" || true; fi
  record "$name" "$rc" $((SECONDS - start))
  echo "gpu-validate: $name: exit $rc in $((SECONDS - start)) s${vars[*]:+ (${vars[*]})}"
}

# --- the torch reference: torch.mm timed the same way, the GPU's memory, torch's libraries ------
if [ "${EMULATOR:-0}" = 1 ]; then
  record torch not-run 0 "the emulator: torch would load the emulated libcuda"
elif ! over_budget torch; then
  start=$SECONDS rc=0
  ${LIMIT[@]+"${LIMIT[@]}"} "$PYTHON" "$PY" torch-ref "$OUT_DIR/torch.json" --warmup "$WARMUP" \
    --repeats "$REPEATS" "${SPECS[@]}" >"$OUT_DIR/torch.stdout" 2>"$OUT_DIR/torch.stderr" || rc=$?
  if [ "$rc" -ne 0 ] && grep -q "No module named 'torch'" "$OUT_DIR/torch.stderr"; then
    record torch not-run 0 "torch is not importable by $PYTHON (pip install torch)"
  else
    record torch "$rc" $((SECONDS - start))
  fi
  echo "gpu-validate: torch reference: exit $rc in $((SECONDS - start)) s"
fi

# --- one rank: the GEMMs, the gate, the primary run's hardware and libraries ---------------------
dtype_of() { case $1 in bf16) echo bfloat16 ;; fp16) echo float16 ;; fp32) echo float32 ;; esac; }
ONE_RANK=(--world-size 1 ${SINGLE_RANK[@]+"${SINGLE_RANK[@]}"} --repeats "$REPEATS" ${PAYLOAD[@]+"${PAYLOAD[@]}"})
watch=1
for spec in "${SPECS[@]}"; do
  short=${spec%%:*} dim=${spec#*:}
  bench "gemm-$short-$dim" "$watch" -- "${ONE_RANK[@]}" --dtype "$(dtype_of "$short")" --compute-dim "$dim"
  watch=0
done
bench gate-off 0 COMMGATE_CUDA_GATE=off -- "${ONE_RANK[@]}" --dtype bfloat16 --compute-dim "$GATE_DIM"
bench gate-blocking 0 CUDA_LAUNCH_BLOCKING=1 -- "${ONE_RANK[@]}" --dtype bfloat16 --compute-dim "$GATE_DIM"

# --- two or more GPUs ---------------------------------------------------------------------------
# start_rank NAME RANK PORT ARGS...: one rank of a 2-process job, in the background (PID in $!).
start_rank() {
  local name=$1 rank=$2 port=$3
  shift 3
  (
    cd "$OUT_DIR"
    export RANK="$rank" WORLD_SIZE=2 LOCAL_RANK="$rank" MASTER_ADDR=127.0.0.1 MASTER_PORT="$port"
    export COMMGATE_RENDEZVOUS_SECRET="gpu-validate-$$-$port"
    exec "$COMMGATE" bench --backend cuda --warmup "$WARMUP" --quiet ${RANK_SIZES[@]+"${RANK_SIZES[@]}"} "$@" --output "$name.json"
  ) >"$OUT_DIR/$name.stdout" 2>"$OUT_DIR/$name.stderr" &
}

# running PID: the process exists and is not a zombie.
running() {
  local stat
  read -r stat 2>/dev/null <"/proc/$1/stat" || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

if [ "$GPUS" -ge 2 ]; then
  # All GPUs in one process, at a payload large enough to compare with nccl-tests.
  bench world-n 0 -- --world-size "$GPUS" --repeats "$REPEATS" --dtype bfloat16 --compute-dim "$GATE_DIM" \
    --payload-elements $((BUSBW_BYTES / 2))

  if [ "${EMULATOR:-0}" = 1 ]; then
    record all_reduce_perf not-run 0 "the emulator: nccl-tests needs a GPU"
  elif [ -z "$ALL_REDUCE_PERF" ] || [ ! -x "$ALL_REDUCE_PERF" ]; then
    record all_reduce_perf not-run 0 "all_reduce_perf not found (put nccl-tests' build/ on PATH or set ALL_REDUCE_PERF; build: make -C nccl-tests CUDA_HOME=... NCCL_HOME=...)"
  elif ! over_budget all_reduce_perf; then
    start=$SECONDS rc=0
    (
      if [ -n "$CALLER_HAD_LD_LIBRARY_PATH" ]; then export LD_LIBRARY_PATH="$CALLER_LD_LIBRARY_PATH"; fi
      exec ${LIMIT[@]+"${LIMIT[@]}"} "$ALL_REDUCE_PERF" -b "$BUSBW_BYTES" -e "$BUSBW_BYTES" -g "$GPUS" \
        -d bfloat16 -o sum -n "$REPEATS" -w "$WARMUP" -c 0
    ) >"$OUT_DIR/all_reduce_perf.log" 2>&1 || rc=$?
    record all_reduce_perf "$rc" $((SECONDS - start))
    echo "gpu-validate: all_reduce_perf: exit $rc in $((SECONDS - start)) s"
  fi

  if ! over_budget two-proc; then
    start=$SECONDS rc0=0 rc1=0
    port=$("$PYTHON" "$PY" free-port)
    start_rank two-proc 0 "$port" --repeats "$REPEATS" --timeout "$BENCH_TIMEOUT"
    pid0=$!
    start_rank two-proc-rank1 1 "$port" --repeats "$REPEATS" --timeout "$BENCH_TIMEOUT"
    pid1=$!
    wait "$pid0" || rc0=$?
    wait "$pid1" || rc1=$?
    record two-proc "$rc0" $((SECONDS - start))
    record two-proc-rank1 "$rc1" $((SECONDS - start))
    echo "gpu-validate: two-proc: rank 0 exit $rc0, rank 1 exit $rc1 in $((SECONDS - start)) s"
  fi

  if ! over_budget killed-peer $((KILL_AFTER + KILL_DEADLINE)); then
    rc0=0 note="" status="" secs=0
    port=$("$PYTHON" "$PY" free-port)
    # Enough repeats that the job cannot finish before its peer is killed.
    start_rank killed-peer 0 "$port" --repeats 20000 --timeout "$KILL_TIMEOUT"
    pid0=$!
    start_rank killed-peer-rank1 1 "$port" --repeats 20000 --timeout "$KILL_TIMEOUT"
    pid1=$!
    sleep "$KILL_AFTER"
    running "$pid1" || note="rank 1 had exited by itself before the kill"
    kill -KILL "$pid1" 2>/dev/null || true
    wait "$pid1" 2>/dev/null || true
    killed=$SECONDS
    if ! running "$pid0"; then
      wait "$pid0" || rc0=$?
      status=$rc0 note="early: rank 0 had exited before the kill"
    else
      while running "$pid0" && [ $((SECONDS - killed)) -lt "$KILL_DEADLINE" ]; do sleep 0.5; done
      secs=$((SECONDS - killed))
      if running "$pid0"; then
        kill -KILL "$pid0" 2>/dev/null || true
        wait "$pid0" 2>/dev/null || true
        status=hung
      else
        wait "$pid0" || rc0=$?
        status=$rc0
      fi
    fi
    record killed-peer "$status" "$secs" "$note"
    echo "gpu-validate: killed-peer: rank 0 $([ "$status" = hung ] && echo "still ran (killed)" || echo "exit $status") $secs s after rank 1 was killed${note:+ ($note)}"
  fi
fi

# --- the report ----------------------------------------------------------------------------------
echo
status=0
"$PYTHON" "$PY" report "$OUT_DIR" || status=$?
echo "gpu-validate: done in $SECONDS s; files in $OUT_DIR"
exit "$status"
