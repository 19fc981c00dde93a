#!/usr/bin/env bash
# Install a released commgate binary: scripts/install-commgate.sh [--allow-http] VERSION DEST [RUN_DIR]
#
# VERSION is a release version, 0.1.0 or v0.1.0. Downloads commgate-VERSION-TARGET.tar.gz and its .sha256 from the GitHub release vVERSION
# (TARGET: x86_64-unknown-linux-gnu or aarch64-unknown-linux-gnu, from `uname -m`), checks the
# SHA-256, and installs the binary as DEST/commgate. DEST is a directory (created if missing).
#
# The verified archive is kept next to the binary (DEST/commgate-VERSION-TARGET.tar.gz). On a later
# run with the same DEST, the checksum is downloaded again and the kept archive is used only if it
# still matches (else it is downloaded again); either way the binary is re-extracted from a verified
# archive, so a binary changed in DEST since the last run is replaced, never trusted.
#
# RUN_DIR (optional): a private directory (created if missing) that also gets the verified
# binary, as RUN_DIR/commgate, written from this run's own extraction rather than copied from DEST:
# when DEST is shared (a runner's tool cache), the caller runs RUN_DIR/commgate, which no other
# job can swap between this check and its use.
#
# DEST and RUN_DIR: no directory in either path may be a symbolic link that this user could have
# put there (one in a directory this user can write), and below $RUNNER_TOOL_CACHE or $RUNNER_TEMP
# (the runner's own directories, when the path lies below one) none at all: a link planted at
# TOOL_CACHE/commgate by an earlier job would send the files elsewhere. Pass the real path
# (`realpath DEST`) instead.
#
# Environment:
#   COMMGATE_RELEASE_BASE_URL  where the releases live [https://github.com/OWNER/commgate/releases/download,
#                              from Cargo.toml's `repository` next to this script]; https only. The
#                              checksum comes from there too: a mirror must be trusted as the
#                              release is.
#
# --allow-http: also accept an http:// COMMGATE_RELEASE_BASE_URL on 127.0.0.1, [::1] or localhost
# (the script's own tests serve a fake release there). Never anything else over plain http.
#
# Exit: 0 installed; 3 no release asset for this version and OS/architecture (the caller may build
# from source instead: `cargo install --locked --path .` in a checkout); 1 anything else: bad
# arguments, a failed download (one line naming the URL and curl's reason), a missing or wrong
# checksum (never a reason to fall back), an unsafe DEST. On failure nothing is left behind: no
# temporary file, and no DEST directory that this run created.
set -euo pipefail
umask 022

DEFAULT_REPOSITORY=https://github.com/commgate/commgate

die() {
  echo "install-commgate: error: $*" >&2
  exit 1
}
no_asset() {
  echo "install-commgate: no release asset: $*; build it from source instead: cargo install --locked --path . (in a checkout of commgate v$version)" >&2
  exit 3
}

allow_http=false
if [ "${1:-}" = --allow-http ]; then
  allow_http=true
  shift
fi
[ "$#" -eq 2 ] || [ "$#" -eq 3 ] || die "usage: install-commgate.sh [--allow-http] VERSION DEST [RUN_DIR] (e.g. 0.1.0 ~/.local/bin)"
version=${1#v}
dest=$2
run_dir=${3:-}
# A release version only (it becomes part of a URL and of file names): 1.2.3 or 1.2.3-rc.1.
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION must look like 1.2.3 or v1.2.3 (or 1.2.3-rc.1), got '$1'"
[ -n "$dest" ] || die "DEST (the directory to install into) is empty"

# --- which asset ---------------------------------------------------------------------------------
os=$(uname -s)
machine=$(uname -m)
[ "$os" = Linux ] || no_asset "commgate releases are built for Linux only (this is $os)"
case "$machine" in
  x86_64 | amd64) target=x86_64-unknown-linux-gnu ;;
  aarch64 | arm64) target=aarch64-unknown-linux-gnu ;;
  *) no_asset "commgate releases are built for x86_64 and aarch64 only (this is $machine)" ;;
esac
asset="commgate-$version-$target.tar.gz"

# --- where from ----------------------------------------------------------------------------------
protocols='=https'
if [ -n "${COMMGATE_RELEASE_BASE_URL:-}" ]; then
  base=${COMMGATE_RELEASE_BASE_URL%/}
  # Plain http gives no integrity at all (the checksum comes from the same place): only for a
  # loopback server, and only when the command line asks (a variable could be planted in a CI
  # job's environment by an earlier step; the command line is the caller's own).
  if [[ "$base" =~ ^http://(127\.0\.0\.1|\[::1\]|localhost)(:[0-9]+)?(/[^[:space:]]*)?$ ]] && $allow_http; then
    protocols='=http,https'
  elif [[ "$base" =~ ^http:// ]]; then
    die "COMMGATE_RELEASE_BASE_URL must be an https:// URL, got '$base' (plain http only with --allow-http, on 127.0.0.1, [::1] or localhost)"
  fi
else
  manifest="$(dirname -- "$0")/../Cargo.toml"
  repository=""
  if [ -f "$manifest" ]; then
    repository=$(sed -n 's/^repository = "\([^"]*\)"$/\1/p' "$manifest" | head -n 1)
  fi
  repository=${repository:-$DEFAULT_REPOSITORY}
  [[ "$repository" =~ ^https://github\.com/[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$ ]] ||
    die "Cargo.toml's repository is not a https://github.com/OWNER/NAME URL: '$repository'"
  base="$repository/releases/download"
fi
[[ "$base" =~ ^https?://[^[:space:]]+$ ]] || die "COMMGATE_RELEASE_BASE_URL must be an https:// URL, got '$base'"
url="$base/v$version/$asset"

# --- a safe DEST ---------------------------------------------------------------------------------
# DEST must be a real directory reached through real directories: a symlink planted at it or at a
# directory above it (by an earlier job on a shared runner, e.g. at TOOL_CACHE/commgate) would send
# the files somewhere else. Inside it, every write is a new file made with mktemp (O_EXCL: never
# through an existing name) and renamed over the final name; rename(2) replaces a symlink at
# DEST/commgate instead of writing through it.
#
# no_planted_link NAME PATH: refuses PATH when one of its existing directories is a symbolic link
# that this user could have made (its directory is writable by this user), or any link at all
# below $RUNNER_TOOL_CACHE or $RUNNER_TEMP when PATH lies below one of them (where those
# directories themselves are, links included, is the runner's own business).
no_planted_link() {
  local name=$1 path=$2 root="" r cur parent part
  local -a parts
  [[ "$path" == /* ]] || path="$(pwd -P)/$path"
  for r in "${RUNNER_TOOL_CACHE:-}" "${RUNNER_TEMP:-}"; do
    r=${r%/}
    if [ -n "$r" ] && [[ "$path" == "$r"/* ]] && [ "${#r}" -gt "${#root}" ]; then root=$r; fi
  done
  IFS=/ read -r -d '' -a parts < <(printf '%s\0' "${path#"$root"/}") || true
  cur=$root
  for part in ${parts[@]+"${parts[@]}"}; do
    case $part in
      "" | .) continue ;;
      ..) die "$name $2 contains '..'; pass the directory's real path (realpath)" ;;
    esac
    parent=${cur:-/}
    cur="$cur/$part"
    if [ -L "$cur" ] && { [ -n "$root" ] || [ -w "$parent" ]; }; then
      die "$name $2: $cur is a symbolic link; refusing to write through it (remove it, or pass the real directory: realpath)"
    fi
    [ -e "$cur" ] || break
  done
}
[ -L "$dest" ] && die "DEST $dest is a symbolic link; refusing to install through it (remove it or pass the real directory)"
no_planted_link DEST "$dest"
if [ -n "$run_dir" ]; then
  [ -L "$run_dir" ] && die "RUN_DIR $run_dir is a symbolic link; refusing to write through it"
  no_planted_link RUN_DIR "$run_dir"
fi
# The directories this run creates (DEST and any missing parent), outermost first: on failure
# they are removed again, each only if still empty, so a failed install leaves no empty DEST.
created=()
dir=$dest
while [ ! -e "$dir" ] && [ ! -L "$dir" ]; do
  created=("$dir" ${created[@]+"${created[@]}"})
  parent=$(dirname -- "$dir")
  [ "$parent" != "$dir" ] || break
  dir=$parent
done
mkdir -p -- "$dest" || die "cannot create DEST $dest"
[ -d "$dest" ] && [ ! -L "$dest" ] || die "DEST $dest is not a directory"

work=$(mktemp -d "${TMPDIR:-/tmp}/commgate-install.XXXXXX")
tmp_archive=""
tmp_bin=""
# Nothing half-written is left behind: the work directory and any temp name in DEST go on exit,
# and on failure the directories this run created (innermost first; rmdir removes only empty ones).
cleanup() {
  local rc=$? i
  rm -rf -- "$work"
  if [ -n "$tmp_archive" ]; then rm -f -- "$tmp_archive"; fi
  if [ -n "$tmp_bin" ]; then rm -f -- "$tmp_bin"; fi
  if [ "$rc" -ne 0 ]; then
    for ((i = ${#created[@]} - 1; i >= 0; i--)); do
      rmdir -- "${created[i]}" 2>/dev/null || break
    done
  fi
}
trap cleanup EXIT

# curl: https only (http only with --allow-http, to a loopback server), redirects only to https (GitHub
# redirects release downloads to its object store), retries on transient errors, bounded time.
# Prints the final HTTP status; curl's own exit status is returned, its error message is kept in
# $work/curl.err for download_failed.
# -q (first): no ~/.curlrc, which could turn off certificate checks or add a proxy.
fetch() { # URL OUTFILE
  curl -q --silent --show-error --fail --location \
    --proto "$protocols" --proto-redir "$protocols" \
    --retry 3 --retry-delay 2 --connect-timeout 15 --max-time 300 \
    --write-out '%{http_code}' --output "$2" -- "$1" 2>"$work/curl.err"
}

# One line of our own instead of curl's: the URL, curl's reason (its last message, without the
# `curl: (N) ` prefix), and what to do. Exit 1.
download_failed() { # URL CURL_EXIT
  local reason=""
  if [ -s "$work/curl.err" ]; then
    reason=$(tail -n 1 -- "$work/curl.err" | tr -d '\r')
    reason=${reason#curl: }
    reason=$(printf '%s' "$reason" | sed 's/^([0-9]*) //')
  fi
  echo "install-commgate: could not download $1 (curl: ${reason:-exit $2}); check this machine's network access to ${base%%/releases/*} (and its proxy settings), or set COMMGATE_RELEASE_BASE_URL to a mirror of the releases" >&2
  exit 1
}

sha256_of() { # FILE
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum -- "$1" | awk '{print $1}'
  else
    shasum -a 256 -- "$1" | awk '{print $1}'
  fi
}

# The checksum first: it is small, it says whether this version has an asset for this target, and
# it is fetched afresh on every run (the trusted statement of what the archive must be).
status=0
code=$(fetch "$url.sha256" "$work/asset.sha256") || status=$?
if [ "$status" -ne 0 ]; then
  if [ "$code" = 404 ]; then
    # No checksum: either there is no asset (fall back) or the release is incomplete (fail closed).
    status=0
    code=$(curl -q --silent --show-error --output /dev/null --location --head --proto "$protocols" \
      --proto-redir "$protocols" --connect-timeout 15 --max-time 60 \
      --write-out '%{http_code}' -- "$url" 2>"$work/curl.err") || status=$?
    [ "$status" -eq 0 ] || download_failed "$url" "$status"
    [ "$code" = 404 ] && no_asset "$url (HTTP 404): no commgate $version for $target"
    die "$url exists but its checksum $url.sha256 does not (HTTP 404); refusing an unverified binary"
  fi
  download_failed "$url.sha256" "$status"
fi
# One line, `HEX  NAME` (sha256sum's format), for exactly this asset.
read -r want_sum want_name _ <"$work/asset.sha256" || true
[[ "${want_sum:-}" =~ ^[0-9a-fA-F]{64}$ ]] || die "$url.sha256 holds no SHA-256 checksum"
want_name=${want_name#\*}
[ "$want_name" = "$asset" ] || die "$url.sha256 is the checksum of '$want_name', not of $asset"
want_sum=$(printf '%s' "$want_sum" | tr 'A-F' 'a-f')

# The archive: the one kept in DEST when it still matches, else a fresh download.
kept="$dest/$asset"
archive=""
# Copied first, then the copy hashed and extracted: what is checked is what is installed, even
# if another process swaps the kept file meanwhile.
if [ -f "$kept" ] && [ ! -L "$kept" ] && cp -- "$kept" "$work/$asset" 2>/dev/null &&
  [ "$(sha256_of "$work/$asset")" = "$want_sum" ]; then
  archive="$work/$asset"
  echo "install-commgate: reusing $kept (checksum verified)"
else
  rm -f -- "$work/$asset"
  status=0
  code=$(fetch "$url" "$work/$asset") || status=$?
  if [ "$status" -ne 0 ]; then
    [ "$code" = 404 ] && no_asset "$url (HTTP 404): no commgate $version for $target"
    download_failed "$url" "$status"
  fi
  got_sum=$(sha256_of "$work/$asset")
  [ "$got_sum" = "$want_sum" ] ||
    die "checksum mismatch for $asset: expected $want_sum (from $url.sha256), got $got_sum; nothing installed"
  archive="$work/$asset"
fi

# Extract the one expected member (nothing else in the archive is written anywhere).
member="commgate-$version-$target/commgate"
mkdir "$work/x"
tar -xzf "$archive" -C "$work/x" --no-same-owner --no-same-permissions -- "$member" 2>/dev/null ||
  die "$asset does not contain $member"
[ -f "$work/x/$member" ] && [ ! -L "$work/x/$member" ] || die "$member in $asset is not a regular file"

# Into DEST: temp names, then rename. The binary last, so a DEST/commgate that exists is whole.
tmp_archive=$(mktemp "$dest/.commgate-archive.XXXXXX")
cat -- "$archive" >"$tmp_archive"
mv -fT -- "$tmp_archive" "$kept"
tmp_archive=""
tmp_bin=$(mktemp "$dest/.commgate.XXXXXX")
cat -- "$work/x/$member" >"$tmp_bin"
chmod 0755 -- "$tmp_bin"
mv -fT -- "$tmp_bin" "$dest/commgate"
tmp_bin=""
if [ -n "$run_dir" ]; then
  no_planted_link RUN_DIR "$run_dir"
  mkdir -p -- "$run_dir" && [ -d "$run_dir" ] && [ ! -L "$run_dir" ] || die "cannot create RUN_DIR $run_dir"
  no_planted_link RUN_DIR "$run_dir"
  tmp_bin=$(mktemp "$run_dir/.commgate.XXXXXX")
  cat -- "$work/x/$member" >"$tmp_bin"
  chmod 0755 -- "$tmp_bin"
  mv -fT -- "$tmp_bin" "$run_dir/commgate"
  tmp_bin=""
fi
echo "install-commgate: installed commgate $version ($target) as $dest/commgate"
