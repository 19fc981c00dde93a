#!/usr/bin/env bash
# Lint the workflows `commgate init --fork-prs` generates, with the tools scripts/lint-actions.sh
# installs (zizmor offline, check-jsonschema against the vendored workflow schema, shellcheck on
# every `run:` block). lint-actions.sh runs first: it installs the pinned tools into
# target/lint-venv (or says it could not) and lints action.yml and examples/workflows.
#
# Two scaffolds are linted:
#   - pinned by commit SHA (`--action-ref OWNER/REPO@SHA`): everything, zizmor's default policy;
#   - the default, pinned by the release tag: the same, except that zizmor's `unpinned-uses`
#     policy is told that a `commgate/*` tag pin is deliberate (`ref-pin`). A tag can be moved;
#     the generated file says so and how to pin the SHA instead.
# Usage: scripts/lint-init.sh [COMMGATE_BINARY] (default: this checkout's debug build, built now).
# Exit: 0 clean (or the tools could not be installed: lint-actions.sh warned); 1 a finding.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/lint-actions.sh
BIN=target/lint-venv/bin
if [ ! -x "$BIN/zizmor" ]; then
  echo "lint-init: warning: the lint tools are not installed; the generated workflows were NOT linted"
  exit 0
fi

commgate=${1:-}
if [ -z "$commgate" ]; then
  # Built now, so the scaffold linted is this checkout's.
  cargo build --locked --quiet
  commgate="${CARGO_TARGET_DIR:-target}/debug/commgate"
fi

OUT=target/lint-init
rm -rf "$OUT"
mkdir -p "$OUT"
"$commgate" init --fork-prs --profile LINT --dir "$OUT/tag" >/dev/null
"$commgate" init --fork-prs --profile LINT --dir "$OUT/sha" \
  --action-ref commgate/commgate@0123456789abcdef0123456789abcdef01234567 >/dev/null
cat >"$OUT/zizmor-tag.yml" <<'YML'
rules:
  unpinned-uses:
    config:
      policies:
        "commgate/*": ref-pin
YML

status=0
for variant in sha tag; do
  workflows=("$OUT/$variant"/.github/workflows/*.yml)
  config=()
  if [ "$variant" = tag ]; then config=(--config "$OUT/zizmor-tag.yml"); fi
  echo "== init --fork-prs (pinned by $variant): zizmor"
  "$BIN/zizmor" --offline --strict-collection --no-progress --quiet "${config[@]}" "${workflows[@]}" || status=1
  echo "== check-jsonschema"
  "$BIN/check-jsonschema" --builtin-schema vendor.github-workflows "${workflows[@]}" || status=1
done

echo "== shellcheck (run: blocks)"
SCRIPTS=$OUT/run-blocks
mkdir -p "$SCRIPTS"
"$BIN/python" - "$SCRIPTS" "$OUT"/tag/.github/workflows/*.yml "$OUT"/sha/.github/workflows/*.yml <<'PY' || status=1
import re, sys
from pathlib import Path
from ruamel.yaml import YAML

out, files = Path(sys.argv[1]), sys.argv[2:]
yaml = YAML(typ="safe")
count = 0
for file in files:
    doc = yaml.load(Path(file).read_text())
    for job_id, job in (doc.get("jobs") or {}).items():
        for index, step in enumerate(job.get("steps") or [], 1):
            if "run" not in step:
                continue
            shell = step.get("shell", "bash")
            if not shell.startswith("bash"):
                sys.exit(f"{file}: job {job_id}, step {index}: shell {shell!r} is not checked; add it here")
            body = re.sub(r"\$\{\{.*?\}\}", "GITHUB_EXPRESSION", step["run"], flags=re.S)
            name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{file}.{job_id}.step{index}") + ".sh"
            (out / name).write_text("#!/usr/bin/env bash\nset -eo pipefail\n" + body)
            count += 1
if count == 0:
    sys.exit("no run blocks found: the generated workflows changed shape")
print(f"{count} run blocks")
PY
"$BIN/shellcheck" --shell=bash "$SCRIPTS"/*.sh || status=1

if [ "$status" -eq 0 ]; then
  echo "lint-init: clean"
else
  echo "lint-init: findings above" >&2
fi
exit "$status"
