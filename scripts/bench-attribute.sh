#!/usr/bin/env bash
# End-to-end `attribute` benchmark on synthetic Kineto traces (benches/attribute_throughput.rs).
#
# Targets (printed as PASS/FAIL, never asserted): throughput >= 400 MB/s of uncompressed input,
# and peak RSS <= 25 % of the input size (the traces are streamed, never held whole).
# Defaults: 8 ranks x ~40 MB. Override with COMMGATE_BENCH_RANKS and COMMGATE_BENCH_MB_PER_RANK,
# e.g. COMMGATE_BENCH_MB_PER_RANK=200 scripts/bench-attribute.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The bench uses the test kit (synthetic inputs), which release builds leave out.
exec cargo bench --bench attribute_throughput "$@"
