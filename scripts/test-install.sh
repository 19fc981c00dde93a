#!/usr/bin/env bash
# Test scripts/install-commgate.sh against a fake release served on 127.0.0.1 (no other network).
#
# The fake release is laid out and packaged as .github/workflows/release.yml does it
# (vVERSION/commgate-VERSION-TARGET.tar.gz holding commgate-VERSION-TARGET/commgate, plus
# ASSET.sha256 in sha256sum's format); a tiny shell script stands in for the binary. Versions:
#   0.9.0 good; 0.9.1 archive whose checksum was tampered; 0.9.2 absent; 0.9.3 archive without
#   a checksum. A closed port on 127.0.0.1 stands in for a network failure. The server speaks plain
#   http, which the script accepts only with --allow-http (and only on a loopback address).
# Exit 0 when every case behaves; 1 with the first failing case named.
set -euo pipefail
cd "$(dirname "$0")/.."
INSTALL="$PWD/scripts/install-commgate.sh"

case "$(uname -m)" in
  x86_64 | amd64) target=x86_64-unknown-linux-gnu ;;
  aarch64 | arm64) target=aarch64-unknown-linux-gnu ;;
  *) echo "test-install: skipped: no commgate release target for $(uname -m)"; exit 0 ;;
esac
if ! command -v python3 >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
  echo "test-install: warning: python3 or curl missing; install-commgate.sh NOT tested"
  exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/commgate-test-install.XXXXXX")
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf -- "$tmp"
}
trap cleanup EXIT

fail() {
  echo "test-install: FAILED: $*" >&2
  exit 1
}

# --- the fake release ----------------------------------------------------------------------------
site="$tmp/site"
package() { # VERSION: stage, tar and checksum one asset, as the release workflow does
  local version=$1 name="commgate-$1-$target"
  mkdir -p "$tmp/stage/$name" "$site/v$version"
  printf '#!/bin/sh\necho "commgate %s"\n' "$version" >"$tmp/stage/$name/commgate"
  chmod 0755 "$tmp/stage/$name/commgate"
  tar -czf "$site/v$version/$name.tar.gz" -C "$tmp/stage" "$name"
  (cd "$site/v$version" && sha256sum "$name.tar.gz" >"$name.tar.gz.sha256")
}
package 0.9.0
package 0.9.1
# Tampered: the archive no longer matches its published checksum.
printf 'extra' >>"$site/v0.9.1/commgate-0.9.1-$target.tar.gz"
package 0.9.3
rm "$site/v0.9.3/commgate-0.9.3-$target.tar.gz.sha256"

# --- the server: loopback only, a free port chosen by the kernel ----------------------------------
python3 -u -m http.server --bind 127.0.0.1 --directory "$site" 0 >"$tmp/server.log" 2>&1 &
server_pid=$!
port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/.*port \([0-9][0-9]*\).*/\1/p' "$tmp/server.log" | head -n 1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || fail "python3 -m http.server did not start: $(cat "$tmp/server.log")"
export COMMGATE_RELEASE_BASE_URL="http://127.0.0.1:$port"

run_install() { # VERSION DEST (as given) -> sets rc, output in $tmp/out
  rc=0
  "$INSTALL" --allow-http "$@" >"$tmp/out" 2>&1 || rc=$?
}
requests() { # how many requests the server has answered
  grep -c '"GET \|"HEAD ' "$tmp/server.log" || true
}
expect_rc() { # WANT CASE
  [ "$rc" -eq "$1" ] || fail "$2: exit $rc, expected $1; output: $(cat "$tmp/out")"
}
no_leftovers() { # DIR CASE: no temp file left behind in DEST
  if compgen -G "$1/.commgate*" >/dev/null; then fail "$2: temp files left in $1: $(ls -a "$1")"; fi
}

# good: installed, runs, prints its version.
dest="$tmp/dest"
run_install 0.9.0 "$dest"
expect_rc 0 "good version"
[ -f "$dest/commgate" ] && [ -x "$dest/commgate" ] || fail "good version: no executable $dest/commgate"
[ "$("$dest/commgate" --version)" = "commgate 0.9.0" ] || fail "good version: the installed binary does not run"
no_leftovers "$dest" "good version"
echo "ok: good version installed and runs"

# a leading v (the tag's name) is accepted.
run_install v0.9.0 "$tmp/dest-v"
expect_rc 0 "version with a leading v"
[ "$("$tmp/dest-v/commgate" --version)" = "commgate 0.9.0" ] || fail "version with a leading v: the installed binary does not run"
echo "ok: v0.9.0 is accepted as 0.9.0"

# reuse: the kept archive is used when it still matches the (re-downloaded) checksum...
mv "$site/v0.9.0/commgate-0.9.0-$target.tar.gz" "$tmp/held-back.tar.gz"
printf '#!/bin/sh\necho planted\n' >"$dest/commgate"
run_install 0.9.0 "$dest"
expect_rc 0 "reuse of the kept archive"
grep -q "reusing" "$tmp/out" || fail "reuse: the kept archive was not reused: $(cat "$tmp/out")"
[ "$("$dest/commgate" --version)" = "commgate 0.9.0" ] || fail "reuse: a changed binary in DEST was not replaced"
echo "ok: reinstall reuses the verified archive and replaces a changed binary"
# ...and downloaded again when it does not.
printf 'x' >>"$dest/commgate-0.9.0-$target.tar.gz"
mv "$tmp/held-back.tar.gz" "$site/v0.9.0/commgate-0.9.0-$target.tar.gz"
run_install 0.9.0 "$dest"
expect_rc 0 "changed kept archive"
grep -q "reusing" "$tmp/out" && fail "changed kept archive: reused although its checksum no longer matches"
[ "$("$dest/commgate" --version)" = "commgate 0.9.0" ] || fail "changed kept archive: binary not reinstalled"
echo "ok: a changed kept archive is downloaded again"

# tampered: exit 1, nothing installed, and the DEST it created (with its parents) removed again.
dest="$tmp/new-parent/dest-tampered"
run_install 0.9.1 "$dest"
expect_rc 1 "tampered checksum"
grep -q "checksum mismatch" "$tmp/out" || fail "tampered checksum: no mismatch message: $(cat "$tmp/out")"
[ ! -e "$dest/commgate" ] || fail "tampered checksum: a binary was installed"
[ ! -e "$dest/commgate-0.9.1-$target.tar.gz" ] || fail "tampered checksum: the archive was kept"
[ ! -e "$tmp/new-parent" ] || fail "tampered checksum: left the directories it created: $(find "$tmp/new-parent")"
echo "ok: tampered archive refused (exit 1), nothing installed, no empty DEST left"

# missing version: exit 3 (the Action falls back to building from source), saying how to build.
dest="$tmp/dest-missing"
run_install 0.9.2 "$dest"
expect_rc 3 "missing version"
[ ! -e "$dest" ] || fail "missing version: left the DEST it created: $(ls -a "$dest")"
grep -qF "cargo install --locked --path ." "$tmp/out" || fail "missing version: no 'cargo install --locked --path .' advice: $(cat "$tmp/out")"
echo "ok: missing version exits 3 and says to build with cargo install --locked --path ."

# a DEST that existed before a failure is left in place (empty, as it was).
dest="$tmp/dest-existing"
mkdir -p "$dest"
run_install 0.9.2 "$dest"
expect_rc 3 "missing version, existing DEST"
[ -d "$dest" ] || fail "missing version, existing DEST: a DEST it did not create was removed"
echo "ok: a failure removes only a DEST it created"

# a failed download: one line of the script's own (URL, curl's reason, what to do), exit 1.
dest="$tmp/dest-offline"
COMMGATE_RELEASE_BASE_URL="http://127.0.0.1:1" run_install 0.9.0 "$dest"
expect_rc 1 "failed download"
[ "$(wc -l <"$tmp/out")" -eq 1 ] || fail "failed download: not one line: $(cat "$tmp/out")"
grep -q "^install-commgate: could not download http://127.0.0.1:1/v0.9.0/commgate-0.9.0-$target.tar.gz.sha256 (curl: [^)]" "$tmp/out" ||
  fail "failed download: not the script's own line: $(cat "$tmp/out")"
grep -q "COMMGATE_RELEASE_BASE_URL" "$tmp/out" || fail "failed download: says nothing of what to do: $(cat "$tmp/out")"
[ ! -e "$dest" ] || fail "failed download: left the DEST it created"
echo "ok: a failed download is one line naming the URL and curl's reason, exit 1: $(cat "$tmp/out")"

# an archive without its checksum: exit 1 (fail closed), not 3.
dest="$tmp/dest-nosum"
run_install 0.9.3 "$dest"
expect_rc 1 "archive without checksum"
[ ! -e "$dest/commgate" ] || fail "archive without checksum: something was installed"
echo "ok: an archive without a checksum is refused (exit 1)"

# a symlink planted at DEST/commgate is replaced, not written through.
dest="$tmp/dest-link"
mkdir -p "$dest"
printf 'victim\n' >"$tmp/victim"
ln -s "$tmp/victim" "$dest/commgate"
ln -s "$tmp/victim" "$dest/commgate-0.9.0-$target.tar.gz"
run_install 0.9.0 "$dest"
expect_rc 0 "symlink at DEST/commgate"
[ "$(cat "$tmp/victim")" = victim ] || fail "symlink at DEST/commgate: the link's target was written"
[ ! -L "$dest/commgate" ] && [ -f "$dest/commgate" ] || fail "symlink at DEST/commgate: still a link"
[ ! -L "$dest/commgate-0.9.0-$target.tar.gz" ] || fail "symlink at the kept archive: still a link"
echo "ok: a symlink planted at DEST/commgate is replaced, its target untouched"

# DEST itself a symlink: refused.
mkdir -p "$tmp/elsewhere"
ln -s "$tmp/elsewhere" "$tmp/dest-is-link"
run_install 0.9.0 "$tmp/dest-is-link"
expect_rc 1 "DEST is a symlink"
[ -z "$(ls -A "$tmp/elsewhere")" ] || fail "DEST is a symlink: files written into its target"
echo "ok: a DEST that is a symlink is refused (exit 1)"

# bad arguments: exit 1, no request made.
run_install '0.9.0/../../x' "$tmp/dest-bad"
expect_rc 1 "bad version string"
run_install 0.9.0
expect_rc 1 "missing DEST"
echo "ok: bad arguments exit 1"

# Plain http without --allow-http: refused before any request (a COMMGATE_RELEASE_BASE_URL planted
# in a CI job's environment cannot choose an unauthenticated download), and never to another host.
before=$(requests)
rc=0
"$INSTALL" 0.9.0 "$tmp/dest-http" >"$tmp/out" 2>&1 || rc=$?
expect_rc 1 "http without --allow-http"
grep -q "must be an https:// URL" "$tmp/out" || fail "http without --allow-http: $(cat "$tmp/out")"
[ ! -e "$tmp/dest-http" ] || fail "http without --allow-http: created DEST"
[ "$(requests)" = "$before" ] || fail "http without --allow-http: the server was asked"
COMMGATE_RELEASE_BASE_URL="http://example.invalid" run_install 0.9.0 "$tmp/dest-http"
expect_rc 1 "http to another host"
grep -q "must be an https:// URL" "$tmp/out" || fail "http to another host: $(cat "$tmp/out")"
echo "ok: plain http is refused unless --allow-http, and then only on a loopback address"

# A symbolic link at a directory above DEST (an earlier job's link at TOOL_CACHE/commgate) or above
# RUN_DIR: refused before anything is written, nothing lands where it points.
mkdir -p "$tmp/elsewhere-parent"
ln -s "$tmp/elsewhere-parent" "$tmp/tc-link"
run_install 0.9.0 "$tmp/tc-link/0.9.0/x86_64"
expect_rc 1 "a link above DEST"
grep -q "tc-link is a symbolic link" "$tmp/out" || fail "a link above DEST: $(cat "$tmp/out")"
[ -z "$(ls -A "$tmp/elsewhere-parent")" ] || fail "a link above DEST: files written through it"
run_install 0.9.0 "$tmp/dest-rparent" "$tmp/tc-link/bin"
expect_rc 1 "a link above RUN_DIR"
[ -z "$(ls -A "$tmp/elsewhere-parent")" ] && [ ! -e "$tmp/dest-rparent" ] ||
  fail "a link above RUN_DIR: something was written"
# Below the runner's tool cache no link is accepted, and the tool cache itself may be one (the
# runner's own business).
mkdir -p "$tmp/real-tool-cache/commgate"
ln -s "$tmp/real-tool-cache" "$tmp/tool-cache"
RUNNER_TOOL_CACHE="$tmp/tool-cache" run_install 0.9.0 "$tmp/tool-cache/commgate/0.9.0/x86_64"
expect_rc 0 "a tool cache that is itself a link"
[ "$("$tmp/real-tool-cache/commgate/0.9.0/x86_64/commgate" --version)" = "commgate 0.9.0" ] ||
  fail "a tool cache that is itself a link: not installed"
ln -s "$tmp/elsewhere-parent" "$tmp/real-tool-cache/linked"
RUNNER_TOOL_CACHE="$tmp/tool-cache" run_install 0.9.0 "$tmp/tool-cache/linked/0.9.0"
expect_rc 1 "a link below the tool cache"
[ -z "$(ls -A "$tmp/elsewhere-parent")" ] || fail "a link below the tool cache: files written through it"
# A link in a directory this user cannot write (no one running as this user planted it) is
# followed; only a user other than root can make one.
if [ "$(id -u)" -ne 0 ]; then
  mkdir -p "$tmp/ro" "$tmp/ro-target"
  ln -s "$tmp/ro-target" "$tmp/ro/link"
  chmod a-w "$tmp/ro"
  run_install 0.9.0 "$tmp/ro/link/dest"
  chmod u+w "$tmp/ro"
  expect_rc 0 "a link in a directory this user cannot write"
fi
echo "ok: a symbolic link above DEST or RUN_DIR is refused, the tool cache's own location is not"

# RUN_DIR: the verified binary also lands in a private directory, written from the run's own
# extraction (the Action runs that copy, not the one in the shared tool cache).
run_install 0.9.0 "$tmp/dest-run" "$tmp/private/bin"
expect_rc 0 "RUN_DIR"
[ "$("$tmp/private/bin/commgate" --version)" = "commgate 0.9.0" ] || fail "RUN_DIR: no verified binary in RUN_DIR"
no_leftovers "$tmp/private/bin" "RUN_DIR"
echo "ok: RUN_DIR gets the verified binary too"

# A concurrent process swaps the kept archive for a planted one, again and again: every install
# still ends with the verified binary (the kept file is copied first, and the copy is hashed and
# extracted; hashing the kept file and then copying it by name installed the planted one).
planted="$tmp/planted/commgate-0.9.0-$target"
mkdir -p "$planted"
printf '#!/bin/sh\necho planted\n' >"$planted/commgate"
chmod 0755 "$planted/commgate"
tar -czf "$tmp/planted.tar.gz" -C "$tmp/planted" "commgate-0.9.0-$target"
dest="$tmp/dest-race"
run_install 0.9.0 "$dest"
expect_rc 0 "race: first install"
cp "$dest/commgate-0.9.0-$target.tar.gz" "$tmp/good.tar.gz"
(
  while :; do
    cp "$tmp/planted.tar.gz" "$dest/.swap" && mv -f "$dest/.swap" "$dest/commgate-0.9.0-$target.tar.gz"
    cp "$tmp/good.tar.gz" "$dest/.swap" && mv -f "$dest/.swap" "$dest/commgate-0.9.0-$target.tar.gz"
  done
) 2>/dev/null &
swapper=$!
planted_runs=0
for i in $(seq 1 30); do
  run_install 0.9.0 "$dest" "$tmp/race-bin-$i"
  expect_rc 0 "race: install $i"
  for bin in "$tmp/race-bin-$i/commgate" "$dest/commgate"; do
    [ "$("$bin" --version)" = "commgate 0.9.0" ] || planted_runs=$((planted_runs + 1))
  done
done
kill "$swapper" 2>/dev/null || true
wait "$swapper" 2>/dev/null || true
[ "$planted_runs" -eq 0 ] || fail "race: $planted_runs binaries of 30 installs were unverified"
echo "ok: a kept archive swapped during 30 installs never gets an unverified binary installed"

echo "test-install: all cases passed"
