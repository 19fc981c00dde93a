#!/usr/bin/env bash
# Test scripts/build-commgate-cached.sh (the Action's source-build fallback) without building
# anything: a fake `cargo`, first on PATH, writes a tiny shell script as the "binary" (it prints
# `commgate VERSION` for --version) and counts its invocations; a fake `rustc` names the target.
# The source is a small directory with a Cargo.toml, a Cargo.lock and one source file.
# Cases: built once and reused; a tampered binary, a binary of another version, a missing checksum
# (each: warning, rebuilt); a new Cargo.lock or source is a new entry; a failed or killed build
# caches nothing; a cache directory that is a symbolic link, writable by others or owned by
# another user is refused; two jobs at once (with flock: one build; without: no torn entry).
# Exit 0 when every case behaves; 1 with the first failing case named.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD="$PWD/scripts/build-commgate-cached.sh"
if ! command -v sha256sum >/dev/null 2>&1; then
  echo "test-build-cache: warning: sha256sum missing; build-commgate-cached.sh NOT tested"
  exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/commgate-test-build-cache.XXXXXX")
bg_pids=()
cleanup() {
  local pid
  for pid in "${bg_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  chmod -R u+w "$tmp" 2>/dev/null || true
  rm -rf -- "$tmp"
}
trap cleanup EXIT

fail() {
  echo "test-build-cache: FAILED: $*" >&2
  exit 1
}

# --- the fakes -----------------------------------------------------------------------------------
fake="$tmp/fakebin"
mkdir -p "$fake"
cat >"$fake/cargo" <<'SH'
#!/bin/sh
# Fake `cargo install --locked --force --root ROOT --path SRC`: counts itself, then writes
# ROOT/bin/commgate, a script printing `commgate VERSION` (FAKE_VERSION, else SRC's version).
echo "cargo $*" >>"$FAKE_CARGO_COUNT"
root="" src=""
while [ "$#" -gt 0 ]; do
  case "$1" in
    --root) root=$2; shift ;;
    --path) src=$2; shift ;;
  esac
  shift
done
[ -n "$root" ] && [ -n "$src" ] || { echo "fake cargo: no --root or --path" >&2; exit 101; }
sleep "${FAKE_CARGO_SLEEP:-0}"
if [ -n "${FAKE_CARGO_FAIL:-}" ]; then echo "error: could not compile commgate (fake)" >&2; exit 101; fi
version=${FAKE_VERSION:-$(sed -n 's/^version = "\([^"]*\)"$/\1/p' "$src/Cargo.toml" | head -n 1)}
mkdir -p "$root/bin"
printf '#!/bin/sh\n# built at %s\ncase "$1" in -V|--version) echo "commgate %s" ;; esac\n' "$$" "$version" >"$root/bin/commgate"
chmod 0755 "$root/bin/commgate"
echo "  Installed package commgate v$version (fake)" >&2
SH
cat >"$fake/rustc" <<'SH'
#!/bin/sh
printf 'rustc 1.91.0 (fake)\nbinary: rustc\nhost: fake64-unknown-linux-gnu\n'
SH
chmod 0755 "$fake/cargo" "$fake/rustc"
export PATH="$fake:$PATH"
export FAKE_CARGO_COUNT="$tmp/cargo-calls"
: >"$FAKE_CARGO_COUNT"
unset CARGO_BUILD_TARGET FAKE_VERSION FAKE_CARGO_FAIL FAKE_CARGO_SLEEP

# A PATH like macOS's: no flock, and an mv without GNU's -T (a wrapper that refuses --version
# and -T); links to every other command on PATH.
noflock="$tmp/noflock-bin"
mkdir -p "$noflock"
real_mv=$(command -v mv)
cat >"$noflock/mv" <<SH
#!/bin/sh
for arg in "\$@"; do
  case "\$arg" in --version | -T) echo "mv: illegal option \$arg (fake BSD mv)" >&2; exit 64 ;; esac
done
exec "$real_mv" "\$@"
SH
chmod 0755 "$noflock/mv"
IFS=: read -r -a path_dirs <<<"$PATH"
for dir in "${path_dirs[@]}"; do
  for cmd in "$dir"/*; do
    base=${cmd##*/}
    if [ "$base" != flock ] && [ -x "$cmd" ] && [ ! -e "$noflock/$base" ]; then ln -s "$cmd" "$noflock/$base"; fi
  done
done

src="$tmp/src"
mkdir -p "$src/src"
printf '[package]\nname = "commgate"\nversion = "0.7.0"\n' >"$src/Cargo.toml"
printf '# fake lock file\nversion = 4\n' >"$src/Cargo.lock"
printf 'fn main() {}\n' >"$src/src/main.rs"
triple=fake64-unknown-linux-gnu

calls() { wc -l <"$FAKE_CARGO_COUNT" | tr -d ' '; }
run_build() { # CACHE OUT -> rc, stdout in $tmp/stdout, stderr in $tmp/stderr
  rc=0
  "$BUILD" "$src" "$@" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
}
expect_rc() { # WANT CASE
  [ "$rc" -eq "$1" ] || fail "$2: exit $rc, expected $1; stderr: $(cat "$tmp/stderr")"
}
expect_calls() { # WANT CASE
  [ "$(calls)" -eq "$1" ] || fail "$2: cargo ran $(calls) times in all, expected $1"
}
entry_of() { # CACHE: the one entry directory under CACHE for the current source
  local lockhash srchash
  lockhash=$(sha256sum "$src/Cargo.lock" | awk '{print $1}')
  srchash=$(cd "$src" && find . -type f -exec sha256sum {} + | LC_ALL=C sort | sha256sum | awk '{print $1}')
  echo "$1/0.7.0/$triple/$lockhash/src-$srchash"
}
expect_binary() { # PATH CASE: stdout is exactly PATH, and it runs as commgate 0.7.0
  [ "$(cat "$tmp/stdout")" = "$1" ] || fail "$2: stdout is '$(cat "$tmp/stdout")', expected only the line $1"
  [ -x "$1" ] && [ "$("$1" --version)" = "commgate 0.7.0" ] || fail "$2: $1 is not a commgate 0.7.0"
}
expect_good_entry() { # ENTRY CASE: binary and recorded checksum agree; no temporary left
  local entry=$1
  [ -f "$entry/commgate" ] && [ -f "$entry/commgate.sha256" ] || fail "$2: $entry is incomplete: $(ls -a "$entry" 2>&1)"
  (cd "$entry" && sha256sum --check --strict --quiet commgate.sha256) || fail "$2: $entry/commgate does not match its recorded checksum"
  [ "$("$entry/commgate" --version)" = "commgate 0.7.0" ] || fail "$2: the cached binary is not commgate 0.7.0"
  if compgen -G "$(dirname "$entry")/.*build*" >/dev/null || compgen -G "$(dirname "$entry")/.*trash*" >/dev/null; then
    fail "$2: build or trash directories left: $(ls -a "$(dirname "$entry")")"
  fi
}
expect_warning() { # CASE
  grep -q '^::warning title=commgate::' "$tmp/stderr" || fail "$1: no ::warning; stderr: $(cat "$tmp/stderr")"
}

# --- built once, then reused ---------------------------------------------------------------------
cache="$tmp/cache"
entry=$(entry_of "$cache")
run_build "$cache" "$tmp/job1"
expect_rc 0 "first job"
expect_calls 1 "first job"
expect_binary "$tmp/job1/commgate" "first job"
expect_good_entry "$entry" "first job"
grep -q -- '--locked --force --root' "$FAKE_CARGO_COUNT" || fail "first job: cargo not run as cargo install --locked --force --root: $(cat "$FAKE_CARGO_COUNT")"
echo "ok: the first job builds and caches $entry"

run_build "$cache" "$tmp/job2"
expect_rc 0 "second job"
expect_calls 1 "second job"
expect_binary "$tmp/job2/commgate" "second job"
grep -q "using the cached build" "$tmp/stderr" || fail "second job: no 'using the cached build': $(cat "$tmp/stderr")"
grep -q '::warning' "$tmp/stderr" && fail "second job: a warning on a good entry: $(cat "$tmp/stderr")"
echo "ok: the second job with the same cache builds nothing"

# Without OUT_DIR the cached binary's own path is printed.
run_build "$cache"
expect_rc 0 "no OUT_DIR"
expect_calls 1 "no OUT_DIR"
expect_binary "$entry/commgate" "no OUT_DIR"
echo "ok: without OUT_DIR the checked cached binary is printed"

# --- entries that are not trusted: warned about, removed, rebuilt ---------------------------------
printf '\n# tampered\n' >>"$entry/commgate"
run_build "$cache" "$tmp/job3"
expect_rc 0 "tampered binary"
expect_calls 2 "tampered binary"
expect_warning "tampered binary"
grep -q "checksum mismatch" "$tmp/stderr" || fail "tampered binary: no checksum mismatch named: $(cat "$tmp/stderr")"
expect_binary "$tmp/job3/commgate" "tampered binary"
expect_good_entry "$entry" "tampered binary"
echo "ok: a tampered cached binary is warned about and rebuilt"

# Binary and checksum replaced together by another version: the version check catches it.
printf '#!/bin/sh\necho "commgate 6.6.6"\n' >"$entry/commgate"
(cd "$entry" && sha256sum commgate >commgate.sha256)
run_build "$cache" "$tmp/job4"
expect_rc 0 "other version"
expect_calls 3 "other version"
expect_warning "other version"
expect_binary "$tmp/job4/commgate" "other version"
expect_good_entry "$entry" "other version"
echo "ok: a cached binary of another version is warned about and rebuilt"

rm "$entry/commgate.sha256"
run_build "$cache" "$tmp/job5"
expect_rc 0 "missing checksum"
expect_calls 4 "missing checksum"
expect_warning "missing checksum"
expect_good_entry "$entry" "missing checksum"
echo "ok: a cached binary without its recorded checksum is rebuilt"

# A changed copy in OUT_DIR from an earlier run is replaced, never trusted.
printf '#!/bin/sh\necho planted\n' >"$tmp/job5/commgate"
run_build "$cache" "$tmp/job5"
expect_rc 0 "planted OUT_DIR binary"
expect_calls 4 "planted OUT_DIR binary"
expect_binary "$tmp/job5/commgate" "planted OUT_DIR binary"
echo "ok: a binary planted in OUT_DIR is replaced by the checked copy"

# --- the key -------------------------------------------------------------------------------------
printf '# fake lock file\nversion = 4\n# another dependency\n' >"$src/Cargo.lock"
new_entry=$(entry_of "$cache")
[ "$new_entry" != "$entry" ] || fail "a new Cargo.lock: same entry path"
run_build "$cache" "$tmp/job6"
expect_rc 0 "new Cargo.lock"
expect_calls 5 "new Cargo.lock"
expect_good_entry "$new_entry" "new Cargo.lock"
printf 'fn main() { println!("changed"); }\n' >"$src/src/main.rs"
newer_entry=$(entry_of "$cache")
run_build "$cache" "$tmp/job7"
expect_rc 0 "new source"
expect_calls 6 "new source"
expect_good_entry "$newer_entry" "new source"
[ -d "$entry" ] && [ -d "$new_entry" ] || fail "new source: the other entries are gone"
echo "ok: another Cargo.lock or another source is another entry"
entry=$newer_entry

CARGO_BUILD_TARGET=other-unknown-linux-gnu run_build "$cache" "$tmp/job8"
expect_rc 0 "CARGO_BUILD_TARGET"
expect_calls 7 "CARGO_BUILD_TARGET"
[ -d "$cache/0.7.0/other-unknown-linux-gnu" ] || fail "CARGO_BUILD_TARGET: not keyed on it: $(ls "$cache/0.7.0")"
echo "ok: CARGO_BUILD_TARGET is the target of the key"

# --- failed and killed builds cache nothing ------------------------------------------------------
cache="$tmp/cache-fail"
entry=$(entry_of "$cache")
FAKE_CARGO_FAIL=1 run_build "$cache" "$tmp/job-fail"
expect_rc 1 "failed build"
[ ! -e "$entry" ] || fail "failed build: an entry was cached"
if compgen -G "$(dirname "$entry")/.*build*" >/dev/null; then fail "failed build: left $(ls -A "$(dirname "$entry")")"; fi
[ ! -s "$tmp/stdout" ] || fail "failed build: printed a path: $(cat "$tmp/stdout")"
echo "ok: a failed build caches nothing and prints no path"

FAKE_VERSION=0.6.9 run_build "$cache" "$tmp/job-wrong"
expect_rc 1 "build of another version"
[ ! -e "$entry" ] || fail "build of another version: an entry was cached"
echo "ok: a build that is not commgate 0.7.0 is not cached"

if ! command -v setsid >/dev/null 2>&1; then
  echo "test-build-cache: note: no setsid here; the killed-build case is not tested"
else
  calls_before=$(calls)
  FAKE_CARGO_SLEEP=30 setsid "$BUILD" "$src" "$cache" "$tmp/job-killed" >/dev/null 2>&1 &
  killed=$!
  bg_pids+=("$killed")
  for _ in $(seq 1 100); do
    [ "$(calls)" -gt "$calls_before" ] && break
    sleep 0.1
  done
  [ "$(calls)" -gt "$calls_before" ] || fail "killed build: cargo never started"
  kill -KILL -- "-$killed"
  wait "$killed" 2>/dev/null || true
  [ ! -e "$entry" ] || fail "killed build: an entry was cached"
  run_build "$cache" "$tmp/job-after-kill"
  expect_rc 0 "after a killed build"
  if command -v flock >/dev/null 2>&1; then
    expect_good_entry "$entry" "after a killed build"
    echo "ok: a killed build leaves no entry; the next job builds and removes the killed one's leftovers"
  else
    expect_binary "$tmp/job-after-kill/commgate" "after a killed build"
    echo "ok: a killed build leaves no entry; the next job builds"
  fi
fi

# --- two jobs at once ----------------------------------------------------------------------------
concurrent() { # CACHE PATH-FOR-THE-SCRIPT CASE
  local cache=$1 path=$2 a b rca=0 rcb=0
  PATH=$path FAKE_CARGO_SLEEP=2 "$BUILD" "$src" "$cache" "$tmp/ja" >"$tmp/a.out" 2>"$tmp/a.err" &
  a=$!
  PATH=$path FAKE_CARGO_SLEEP=2 "$BUILD" "$src" "$cache" "$tmp/jb" >"$tmp/b.out" 2>"$tmp/b.err" &
  b=$!
  wait "$a" || rca=$?
  wait "$b" || rcb=$?
  [ "$rca" -eq 0 ] && [ "$rcb" -eq 0 ] || fail "$3: exits $rca and $rcb; $(cat "$tmp/a.err" "$tmp/b.err")"
  [ "$(cat "$tmp/a.out")" = "$tmp/ja/commgate" ] && [ "$(cat "$tmp/b.out")" = "$tmp/jb/commgate" ] ||
    fail "$3: printed $(cat "$tmp/a.out") and $(cat "$tmp/b.out")"
  expect_good_entry "$(entry_of "$cache")" "$3"
}
if command -v flock >/dev/null 2>&1; then
  calls_before=$(calls)
  concurrent "$tmp/cache-flock" "$PATH" "two jobs with flock"
  [ "$(calls)" -eq $((calls_before + 1)) ] || fail "two jobs with flock: cargo ran $(($(calls) - calls_before)) times, expected once"
  grep -q "waiting" "$tmp/a.err" "$tmp/b.err" || fail "two jobs with flock: neither waited"
  echo "ok: two jobs at once with flock: one builds, the other waits and uses its build"
else
  echo "test-build-cache: note: no flock here; the flock case is not tested"
fi
calls_before=$(calls)
concurrent "$tmp/cache-noflock" "$noflock" "two jobs without flock"
echo "ok: two jobs at once without flock: both succeed, the entry is whole ($(($(calls) - calls_before)) builds)"
calls_before=$(calls)
PATH=$noflock run_build "$tmp/cache-noflock" "$tmp/jc"
expect_rc 0 "without flock, reuse"
expect_calls "$calls_before" "without flock, reuse"
echo "ok: without flock a later job reuses the entry"
printf '\n# tampered\n' >>"$(entry_of "$tmp/cache-noflock")/commgate"
PATH=$noflock run_build "$tmp/cache-noflock" "$tmp/jd"
expect_rc 0 "without flock, tampered"
expect_calls $((calls_before + 1)) "without flock, tampered"
expect_warning "without flock, tampered"
expect_good_entry "$(entry_of "$tmp/cache-noflock")" "without flock, tampered"
echo "ok: without flock a tampered binary is warned about and rebuilt"

# --- cache directories that are refused ----------------------------------------------------------
mkdir -p "$tmp/elsewhere"
ln -s "$tmp/elsewhere" "$tmp/cache-link"
calls_before=$(calls)
run_build "$tmp/cache-link" "$tmp/job-link"
expect_rc 1 "symlinked cache"
grep -q "symbolic link" "$tmp/stderr" || fail "symlinked cache: no 'symbolic link': $(cat "$tmp/stderr")"
expect_calls "$calls_before" "symlinked cache"
[ -z "$(ls -A "$tmp/elsewhere")" ] || fail "symlinked cache: files written into its target"
[ ! -s "$tmp/stdout" ] || fail "symlinked cache: printed a path"
echo "ok: a cache directory that is a symbolic link is refused"

mkdir -p "$tmp/cache-deep"
ln -s "$tmp/elsewhere" "$tmp/cache-deep/0.7.0"
run_build "$tmp/cache-deep" "$tmp/job-deep"
expect_rc 1 "symlink inside the cache"
grep -q "symbolic link" "$tmp/stderr" || fail "symlink inside the cache: no 'symbolic link': $(cat "$tmp/stderr")"
[ -z "$(ls -A "$tmp/elsewhere")" ] || fail "symlink inside the cache: files written into its target"
echo "ok: a symbolic link planted inside the cache is refused"

mkdir -p "$tmp/cache-open"
chmod 0777 "$tmp/cache-open"
run_build "$tmp/cache-open" "$tmp/job-open"
expect_rc 1 "cache writable by others"
grep -q "writable by other users" "$tmp/stderr" || fail "cache writable by others: $(cat "$tmp/stderr")"
echo "ok: a cache directory writable by other users is refused"

# Another user's directory: one made and given away when this runs as root, else / (root's).
theirs=/
if [ "$(id -u)" -eq 0 ]; then
  theirs="$tmp/cache-theirs"
  mkdir -p "$theirs"
  chown 65534 "$theirs"
fi
run_build "$theirs" "$tmp/job-theirs"
expect_rc 1 "cache owned by another user"
grep -q "not owned by" "$tmp/stderr" || fail "cache owned by another user: $(cat "$tmp/stderr")"
echo "ok: a cache directory owned by another user is refused"

# --- bad arguments -------------------------------------------------------------------------------
run_build
expect_rc 1 "missing CACHE_ROOT"
rc=0
"$BUILD" "$tmp/nowhere" "$tmp/cache" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
expect_rc 1 "SOURCE_DIR without Cargo.toml"
echo "ok: bad arguments exit 1"

echo "test-build-cache: all cases passed"
