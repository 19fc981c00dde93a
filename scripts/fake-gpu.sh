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
# Environment: CARGO_TARGET_DIR (where cargo builds; default target/), FAKEGPU_PROFILE (debug or
# release), FAKEGPU_FEATURES (a variant that lacks an entry point: no-wait-value, no-finalize;
# each variant gets its own directory).
# Exit: 0 and the directory on stdout; 1 the build failed (cargo's output on stderr).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
profile="${FAKEGPU_PROFILE:-debug}"
features="${FAKEGPU_FEATURES:-}"
case "$profile" in
  debug) flags=() ;;
  release) flags=(--release) ;;
  *) echo "fake-gpu: FAKEGPU_PROFILE=$profile: expected debug or release" >&2; exit 1 ;;
esac
case "$features" in
  '' | no-wait-value | no-finalize | no-wait-value,no-finalize | no-finalize,no-wait-value) ;;
  *) echo "fake-gpu: FAKEGPU_FEATURES=$features: expected no-wait-value and/or no-finalize" >&2; exit 1 ;;
esac
[ -n "$features" ] && flags+=(--features "$features")
dir="$target/fakegpu/$profile${features:+-${features//,/+}}"
mkdir -p "$target/fakegpu"
# One build and copy at a time: variants share cargo's output file.
exec 9>"$target/fakegpu/.lock"
flock 9
(cd "$root" && cargo build --locked --quiet -p commgate-fakegpu ${flags[@]+"${flags[@]}"} >&2) || {
  echo "fake-gpu: building crates/fakegpu failed (cargo's output above)" >&2
  exit 1
}
lib="$target/$profile/libcommgate_fakegpu.so"
[ -f "$lib" ] || { echo "fake-gpu: $lib was not built" >&2; exit 1; }
mkdir -p "$dir"
# A copy, not a link: the next variant's build replaces cargo's file.
cp "$lib" "$dir/.libcommgate_fakegpu.so.new"
mv -f "$dir/.libcommgate_fakegpu.so.new" "$dir/libcommgate_fakegpu.so"
for name in libcuda.so.1 libcublas.so.12 libnccl.so.2; do
  ln -sfn libcommgate_fakegpu.so "$dir/$name"
done
echo "$dir"
