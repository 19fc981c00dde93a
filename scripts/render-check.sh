#!/usr/bin/env bash
# Render commgate's PR comment the way GitHub shows it (GFM + mermaid) in headless Chromium and
# fail when a reader would see it broken: a mermaid error box, an empty chart, a missing verdict
# heading, a table or fence that did not parse, HTML that an unescaped string let in, a comment
# over GitHub's size limit. See docs/rendering.md.
#
#   scripts/render-check.sh [--screenshot] [REPORT.md...]
#
# With report paths it checks those files. Without, it builds commgate (cargo build --locked,
# CARGO_TARGET_DIR respected) and checks the reports it generates in a temporary directory:
# accept (mock backend against a fresh baseline), accept with --traces examples/traces, a trace
# regression (the example traces with a late rank at all_to_all), a confirmed regression (the
# slower fixture result), could-not-evaluate (a mock rank dies), and a
# report over synthetic traces with 3,000 distinct collectives, ten workloads judged together, two
# nccl-tests sweeps (one size slower; unchanged), and the gantt chart of a replayed step at 2, 8
# and 64 ranks and with thousands of kernels per rank (examples/gantt_samples.rs). --screenshot
# writes the first report's full page to docs/img/pr-comment.png.
#
# Installs its own tools, pinned: Debian's chromium (apt-get, when /usr/bin/chromium is missing)
# and the npm packages in scripts/render-check/package-lock.json (npm ci, into
# scripts/render-check/node_modules, ignored by git). Nothing is fetched at render time.
# Exit: 0 every report renders; 1 a report failed (or a generated report had the wrong exit
# code); 2 usage error. When chromium, node or the npm packages cannot be installed: one warning
# line and exit 0, as scripts/lint-actions.sh does — the offline CI is not blocked by the
# renderer's absence, only by its findings.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=scripts/render-check
CHROMIUM=/usr/bin/chromium
LOG=target/render-check-install.log
SCREENSHOT_PATH=docs/img/pr-comment.png

screenshot=()
reports=()
for arg in "$@"; do
  case "$arg" in
    --screenshot) screenshot=(--screenshot "$ROOT/$SCREENSHOT_PATH") ;;
    -h | --help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "render-check: unknown flag $arg (usage: scripts/render-check.sh [--screenshot] [REPORT.md...])" >&2; exit 2 ;;
    *) reports+=("$(realpath -- "$arg")") ;;
  esac
done

mkdir -p target
: >"$LOG"
warn_skip() {
  echo "render-check: warning: $1 (see $LOG); the PR comment's rendering was NOT checked"
  exit 0
}

# 1. Tools. Chromium from Debian (with an emoji font, so the verdict icon shows in screenshots).
if [ ! -x "$CHROMIUM" ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" -eq 0 ]; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium fonts-noto-color-emoji; } >>"$LOG" 2>&1 || true
  fi
  [ -x "$CHROMIUM" ] || warn_skip "could not install Debian's chromium with apt-get"
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  warn_skip "node and npm are not installed"
fi
STAMP="$DIR/node_modules/.installed-$(sha256sum "$DIR/package-lock.json" | cut -c1-16)"
if [ ! -f "$STAMP" ]; then
  # npm ci installs exactly the lock file (and removes node_modules first); no install scripts
  # run, so no package downloads a browser of its own.
  (cd "$DIR" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error) >>"$LOG" 2>&1 ||
    warn_skip "could not install the npm packages of $DIR/package-lock.json"
  touch "$STAMP"
fi

# 2. Reports: the given ones, or generated with the built binary.
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if [ "${#reports[@]}" -eq 0 ]; then
  echo "render-check: building commgate (cargo build --locked)"
  cargo build --locked --quiet
  BIN="$(realpath "${CARGO_TARGET_DIR:-target}")/debug/commgate"
  TRACES="$ROOT/examples/traces"
  MANY="$WORK/many-collectives"
  node "$DIR/gen-many-collectives.mjs" "$MANY" 3000 2 >/dev/null

  # commgate runs with a clean environment: no token, no GITHUB_* (it must not comment or write
  # a job summary from here), nothing secret in a child process.
  # EXTRA_ENV adds the test hooks a report needs.
  EXTRA_ENV=()
  cg() { (cd "$WORK" && env -i PATH="$PATH" HOME="$WORK" LANG=C.UTF-8 "${EXTRA_ENV[@]}" "$BIN" "$@"); }
  # gen NAME EXPECTED_EXIT ARGS...: the Markdown comment of `commgate check ARGS` into NAME.md.
  gen() {
    local name=$1 want=$2 got=0
    shift 2
    cg check --comment never --quiet --format markdown "$@" >"$WORK/$name.md" 2>"$WORK/$name.err" || got=$?
    if [ "$got" -ne "$want" ]; then
      echo "render-check: FAIL generating $name: commgate check exited $got, expected $want: $(tail -n 1 "$WORK/$name.err")"
      exit 1
    fi
    reports+=("$WORK/$name.md")
  }

  # A baseline of three mock runs; a second store also keeps the example traces' summary.
  for seed in 1 2 3; do
    cg bench --backend mock --quiet --seed "$seed" --output "run-$seed.json" >/dev/null 2>&1
    cg baseline update --from "run-$seed.json" --baselines store >/dev/null 2>&1
  done
  cp -r "$WORK/store" "$WORK/store-traces"
  profile=$(ls "$WORK/store")
  cg baseline update --traces "$TRACES" --baselines store-traces --environment-profile "$profile" >/dev/null 2>&1

  gen accept-with-traces 0 --backend mock --baselines store-traces --traces "$TRACES"
  # The same traces with every rank but 5 three times longer in all_to_all: a trace regression
  # with cause `wait` and late rank 5 (the trace evidence table, the cause in the hotspots).
  node "$DIR/late-rank.mjs" "$TRACES" "$WORK/late-rank" 5 3
  gen trace-regression 1 --backend mock --baselines store-traces --traces "$WORK/late-rank"
  gen accept 0 --backend mock --baselines store
  gen regression 1 --result "$ROOT/tests/fixtures/compare/current-slower.json" \
    --baselines "$ROOT/tests/fixtures/compare/baselines" --traces "$TRACES"
  EXTRA_ENV=(COMMGATE_MOCK_FAULT=die:1)
  gen could-not-evaluate 2 --backend mock --baselines store
  EXTRA_ENV=()
  gen many-collectives 0 --backend mock --baselines store --traces "$MANY"

  # Ten workloads judged as one family, next to the 3,000-collective attribution: the largest
  # comment shape the gate writes.
  SIZES=1Mi,2Mi,4Mi,8Mi,16Mi,32Mi,64Mi,128Mi,256Mi,512Mi
  for seed in 2 3 4; do
    cg bench --backend mock --quiet --seed "$seed" --payload-sizes "$SIZES" --results-dir "ten-$seed" >/dev/null 2>&1
    cg baseline update --baselines store-ten --from "$WORK"/ten-"$seed"/*.json >/dev/null 2>&1
  done
  gen ten-workloads 0 --backend mock --baselines store-ten --payload-sizes "$SIZES" --traces "$MANY"
  # nccl-tests sweeps (the generator's fixtures): a baseline of five, then one size 10 % slower
  # (the size × busbw table and the busbw-by-size chart) and the same sweep unchanged.
  NCCL="$ROOT/tests/fixtures/nccl-tests"
  cg baseline update --baselines store-nccl --environment-profile H200 --from "$NCCL"/baseline-*.json >/dev/null 2>&1
  gen nccl-tests-slower 1 --baselines store-nccl --environment-profile H200 --result "$NCCL/current-slower.json"
  gen nccl-tests-same 0 --baselines store-nccl --environment-profile H200 --result "$NCCL/current-same.json"
  # The gantt chart of a replayed step (crates/report/src/gantt.rs) over synthetic ranks: 2, 8, 64
  # (folded to three) and 8 of 6,000 kernels each (bars merged to the cap), under a verdict heading.
  cargo run --locked --quiet --example gantt_samples -- "$WORK/gantt" >/dev/null
  for name in gantt-2 gantt-8 gantt-64 gantt-dense; do
    reports+=("$WORK/gantt/$name.md")
  done
fi

# 3. Render.
start=$SECONDS
status=0
node "$DIR/render.mjs" --chromium "$CHROMIUM" "${screenshot[@]}" "${reports[@]}" || status=$?
echo "render-check: rendered ${#reports[@]} report(s) in $((SECONDS - start)) s"
exit "$status"
