#!/usr/bin/env bash
# Record Holistic Trace Analysis' numbers for tests/fixtures/hta/reference.json.
#
# Makes two virtual environments (HTA 0.5.0 from PyPI as HolisticTraceAnalysis, HTA 0.6.1 from
# PyPI as traceinsight, the name HTA is published under since 0.6.0), measures every dataset of
# scripts/hta-reference.py with each, checks that the two agree and that the committed
# datasets' numbers are reproduced exactly, and writes the new datasets' entries.
#
#   scripts/hta-reference.sh            check only (exit 1 on any difference)
#   scripts/hta-reference.sh --write    also write tests/fixtures/hta/reference.json
#
# Environment: HTA_VENV_DIR (default /tmp/commgate-hta-venvs) holds the venvs; PYTHON (default
# python3, 3.10 or later: HTA 0.6.1 needs it). pandas and numpy are pinned: HTA 0.5.0/0.6.1 fail
# under pandas 3 on large traces (int16 columns that pandas 3 no longer upcasts).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venvs="${HTA_VENV_DIR:-/tmp/commgate-hta-venvs}"
python="${PYTHON:-python3}"
write=()
[[ "${1:-}" == "--write" ]] && write=(--write)

pins=("pandas==2.2.3" "numpy==1.26.4")
declare -A package=([0.5.0]="HolisticTraceAnalysis==0.5.0" [0.6.1]="traceinsight==0.6.1")

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

measurements=()
for version in 0.5.0 0.6.1; do
  venv="$venvs/hta-$version"
  if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import hta' 2>/dev/null; then
    echo "== creating $venv" >&2
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet "${package[$version]}" "${pins[@]}"
  fi
  echo "== HTA $version" >&2
  # HTA logs every parse at WARNING level; keep only this script's own lines and errors.
  "$venv/bin/python" -W ignore "$root/scripts/hta-reference.py" measure --label "$version" \
    --out "$work/hta-$version.json" 2> "$work/hta-$version.log" || { cat "$work/hta-$version.log" >&2; exit 1; }
  grep -E '^\[' "$work/hta-$version.log" >&2 || true
  measurements+=("$work/hta-$version.json")
done

"$python" "$root/scripts/hta-reference.py" merge "${measurements[@]}" "${write[@]}"
