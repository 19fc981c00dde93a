#!/usr/bin/env bash
# Builds commgate's emulated CUDA libraries (crates/fakegpu) when needed and prints the directory
# to put first on LD_LIBRARY_PATH: one shared object linked as libcuda.so.1, libcublas.so.12 and
# libnccl.so.2 (only the .so.2, as pip's nvidia-nccl and Debian's libnccl2 install it, so
# commgate's own NCCL link-and-restart runs too).
#
#   LD_LIBRARY_PATH="$(scripts/fake-gpu.sh)" commgate bench --backend cuda --world-size 2 ...
#
# The emulator is never a GPU: its devices are named "commgate emulated GPU (fakegpu, not a GPU)"
# and commgate labels what it measures there as emulated. Settings and faults: docs/emulator.md.
# Environment: CARGO_TARGET_DIR (where cargo builds; default target/), FAKEGPU_PROFILE (debug).
# Exit: 0 and the directory on stdout; 1 the build failed (cargo's output on stderr).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
profile="${FAKEGPU_PROFILE:-debug}"
case "$profile" in
  debug) flags=() ;;
  release) flags=(--release) ;;
  *) echo "fake-gpu: FAKEGPU_PROFILE=$profile: expected debug or release" >&2; exit 1 ;;
esac
(cd "$root" && cargo build --locked --quiet -p commgate-fakegpu "${flags[@]}" >&2) || {
  echo "fake-gpu: building crates/fakegpu failed (cargo's output above)" >&2
  exit 1
}
lib="$target/$profile/libcommgate_fakegpu.so"
[ -f "$lib" ] || { echo "fake-gpu: $lib was not built" >&2; exit 1; }
dir="$target/fakegpu/$profile"
mkdir -p "$dir"
for name in libcuda.so.1 libcublas.so.12 libnccl.so.2; do
  ln -sfn "$lib" "$dir/$name"
done
echo "$dir"
