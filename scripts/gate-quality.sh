#!/usr/bin/env bash
# Gate quality on simulated A/A and A/B data (benches/gate_quality.rs): replays `compare` and prints
# the targets table of docs/gate.md with each measured rate, its Wilson 95 % interval and
# PASS/FAIL. It prints, it never fails on a missed target.
#
# Knobs: COMMGATE_GATE_TRIALS (trials per cell, default 1000), COMMGATE_GATE_RESAMPLES (bootstrap
# resamples per comparison, default 1000 as in production), COMMGATE_GATE_THREADS (default 2),
# e.g. COMMGATE_GATE_TRIALS=2000 scripts/gate-quality.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The bench uses the test kit (synthetic inputs), which release builds leave out.
exec cargo bench --bench gate_quality "$@"
