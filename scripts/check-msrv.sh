#!/usr/bin/env bash
# Cargo.toml's `rust-version` must be what the locked dependency tree really needs: the highest
# `rust_version` any package in Cargo.lock declares (this package's own left out). A dependency
# update that raises it fails here, naming the package, instead of breaking a user on an older
# toolchain who trusted the figure; a figure set higher than the tree needs fails too.
# Needs only cargo and python3. Exit: 0 equal; 1 different (one line on stderr saying both).
set -euo pipefail
cd "$(dirname "$0")/.."

read -r -d '' CHECK <<'PY' || true
import json, sys

def key(version):
    parts = [int(p) for p in version.split(".")]
    return tuple(parts + [0] * (3 - len(parts)))

meta = json.load(sys.stdin)
members = set(meta["workspace_members"])
own = [p for p in meta["packages"] if p["id"] in members]
deps = [p for p in meta["packages"] if p["id"] not in members and p.get("rust_version")]
declared = own[0].get("rust_version")
need = max(deps, key=lambda p: key(p["rust_version"]))
if declared is None or key(declared) != key(need["rust_version"]):
    sys.exit(f"check-msrv: Cargo.toml says rust-version = \"{declared}\" but the locked dependencies need "
             f"{need['rust_version']} ({need['name']} {need['version']}): set rust-version = \"{need['rust_version']}\"")
print(f"check-msrv: rust-version {declared} is what the locked dependencies need ({need['name']} {need['version']})")
PY

# --locked: a Cargo.lock that no longer matches Cargo.toml is an error here, not silently updated.
metadata=$(cargo metadata --format-version 1 --locked --quiet) || {
  echo "check-msrv: cargo metadata --locked failed (is Cargo.lock up to date?)" >&2
  exit 1
}
python3 -c "$CHECK" <<<"$metadata"
