#!/usr/bin/env bash
# Build commgate from source once and reuse the binary:
#   scripts/build-commgate-cached.sh SOURCE_DIR CACHE_ROOT [OUT_DIR]
#
# The GitHub Action's fallback when the release has no binary for this machine. SOURCE_DIR is a
# commgate source tree (the action's own, $GITHUB_ACTION_PATH); CACHE_ROOT is where built binaries
# are kept between jobs (the action passes $COMMGATE_BUILD_CACHE, else
# ${RUNNER_TOOL_CACHE:-$RUNNER_TEMP}/commgate-build). The binary is looked up in, or built into,
#
#   CACHE_ROOT/VERSION/TARGET/LOCKHASH/src-SRCHASH/{commgate,commgate.sha256}
#
#   VERSION   the package version in SOURCE_DIR/Cargo.toml;
#   TARGET    the target triple: CARGO_BUILD_TARGET when set, else rustc's host (`rustc -vV`), else
#             `uname -m`-`uname -s`;
#   LOCKHASH  the SHA-256 of SOURCE_DIR/Cargo.lock;
#   SRCHASH   the SHA-256 of every file of SOURCE_DIR except target/ and .git/ (their names and
#             SHA-256s): two commits of the same version are two entries, so a binary never runs
#             with an action.yml of another commit.
# RUSTFLAGS and the toolchain's version are not part of the key.
#
# A build: `cargo install --locked --force --root TEMP --path SOURCE_DIR`, then the binary and a
# file with its SHA-256 (`HEX  commgate`, sha256sum's format) are written into a private temporary
# directory, which is renamed into place as the entry: an entry either exists whole or not at all,
# whenever the job is killed. Every use, the first one included, checks the binary against the
# recorded SHA-256 and that the first line of `commgate --version` is `commgate VERSION`; a
# mismatch is a `::warning`, the entry is removed and built again. With OUT_DIR, the binary is
# first copied to OUT_DIR/commgate (a temporary name, renamed into place) and the check is made on
# that copy, the file that will run.
#
# Two jobs on one machine: with `flock`, the second waits on SRCHASH.lock (next to the entry)
# while the first builds, then uses its entry. Without `flock` both build; the first rename wins,
# the second uses the winner's entry (checked as above).
#
# Trust: every directory from CACHE_ROOT down must be a real directory (not a symbolic link),
# owned by the current user and writable by no other user, else the script refuses (exit 1). The
# recorded SHA-256 catches a damaged or half-replaced binary; it does not catch a job of the same
# user that replaces both the binary and its checksum (see docs/ci-security.md).
#
# Output: the path of the checked binary (OUT_DIR/commgate, or the cached one) is the only line on
# stdout; messages, and cargo's output, go to stderr.
# Exit: 0 the binary is ready; 1 anything else (bad arguments, no cargo, an unsafe cache directory,
# a failed build).
set -euo pipefail
umask 022

me="build-commgate-cached"
die() {
  echo "$me: error: $*" >&2
  exit 1
}
say() { echo "$me: $*" >&2; }
warn() { echo "::warning title=commgate::$me: $*" >&2; }

[ "$#" -eq 2 ] || [ "$#" -eq 3 ] ||
  die "usage: build-commgate-cached.sh SOURCE_DIR CACHE_ROOT [OUT_DIR]"
src=$1
root=$2
out=${3:-}
[ -n "$root" ] || die "CACHE_ROOT (where built binaries are kept) is empty"
[ -f "$src/Cargo.toml" ] || die "SOURCE_DIR $src holds no Cargo.toml"
[ -f "$src/Cargo.lock" ] || die "SOURCE_DIR $src holds no Cargo.lock (the build is --locked)"
command -v cargo >/dev/null 2>&1 || die "no cargo on PATH to build commgate: install a Rust toolchain"

sha256_file() { # FILE
  if command -v sha256sum >/dev/null 2>&1; then
    sha256sum -- "$1" | awk '{print $1}'
  else
    shasum -a 256 -- "$1" | awk '{print $1}'
  fi
}
if command -v sha256sum >/dev/null 2>&1; then sha=(sha256sum); else sha=(shasum -a 256); fi

# --- the key -------------------------------------------------------------------------------------
version=$(sed -n 's/^version = "\([^"]*\)"$/\1/p' "$src/Cargo.toml" | head -n 1) || true
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  die "cannot read a release version from $src/Cargo.toml (got '$version')"
triple=${CARGO_BUILD_TARGET:-}
if [ -z "$triple" ]; then
  triple=$(rustc -vV 2>/dev/null | sed -n 's/^host: //p' || true)
fi
if [ -z "$triple" ]; then
  triple="$(uname -m)-$(uname -s | tr '[:upper:]' '[:lower:]')"
fi
[[ "$triple" =~ ^[A-Za-z0-9_.-]+$ ]] || die "not a target triple: '$triple'"
lockhash=$(sha256_file "$src/Cargo.lock")
srchash=$(cd -- "$src" &&
  find . \( -path ./target -o -path ./.git \) -prune -o -type f -exec "${sha[@]}" {} + |
  LC_ALL=C sort | "${sha[@]}" | awk '{print $1}') || srchash=""
[[ "$lockhash" =~ ^[0-9a-f]{64}$ ]] && [[ "$srchash" =~ ^[0-9a-f]{64}$ ]] ||
  die "cannot compute the SHA-256 of the files in $src (an unreadable file?)"

# --- a safe cache directory ----------------------------------------------------------------------
# The same rule as install-commgate.sh's DEST, and stricter: a symbolic link planted at any level
# (by an earlier job on a shared runner) would send the build somewhere else, and a directory that
# another user owns or can write lets that user swap the binary and its checksum together.
safe_dir() { # DIR: create if missing, then refuse anything but a real directory only we can write
  local dir=$1 perms
  [ -L "$dir" ] && die "$dir is a symbolic link; refusing to use it as the build cache (remove it or pass the real directory)"
  if [ ! -e "$dir" ]; then
    mkdir -- "$dir" 2>/dev/null || [ -d "$dir" ] || die "cannot create the build cache directory $dir"
  fi
  [ -L "$dir" ] && die "$dir is a symbolic link; refusing to use it as the build cache (remove it or pass the real directory)"
  [ -d "$dir" ] || die "$dir is not a directory"
  [ -O "$dir" ] || die "$dir is not owned by $(id -un); refusing to use it as the build cache (remove it or pass a directory of your own)"
  # ls -ld's mode column (drwxr-xr-x) is the same on Linux and macOS; stat's flags are not.
  # shellcheck disable=SC2012
  perms=$(ls -ld -- "$dir" | cut -c1-10)
  case "$perms" in
    ?????w???? | ????????w?) die "$dir is writable by other users ($perms); refusing to use it as the build cache (chmod go-w it or pass another directory)" ;;
  esac
}
[ -L "$root" ] && die "$root is a symbolic link; refusing to use it as the build cache (remove it or pass the real directory)"
parent=$(dirname -- "$root")
mkdir -p -- "$parent" || die "cannot create $parent"
safe_dir "$root"
safe_dir "$root/$version"
safe_dir "$root/$version/$triple"
ldir="$root/$version/$triple/$lockhash"
safe_dir "$ldir"
name="src-$srchash"
entry="$ldir/$name"

if [ -n "$out" ]; then
  [ -L "$out" ] && die "OUT_DIR $out is a symbolic link; refusing to copy the binary through it"
  mkdir -p -- "$out" || die "cannot create OUT_DIR $out"
  [ -d "$out" ] && [ ! -L "$out" ] || die "OUT_DIR $out is not a directory"
  [ ! -d "$out/commgate" ] || die "$out/commgate is a directory"
fi

build=""
trash=""
out_tmp=""
cleanup() {
  if [ -n "$build" ]; then rm -rf -- "$build"; fi
  if [ -n "$trash" ]; then rm -rf -- "$trash" 2>/dev/null || true; fi
  if [ -n "$out_tmp" ]; then rm -f -- "$out_tmp"; fi
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# --- one builder at a time -----------------------------------------------------------------------
if command -v flock >/dev/null 2>&1; then
  lockfile="$ldir/$name.lock"
  [ -L "$lockfile" ] && die "$lockfile is a symbolic link; refusing to open it"
  exec 9>>"$lockfile"
  if ! flock -n 9; then
    say "another job is building or checking $entry; waiting for it"
    flock 9
  fi
  # Holding the lock, any build or trash directory of this entry is a killed job's: remove it.
  for stale in "$ldir/.$name.build."* "$ldir/.$name.trash."*; do
    if [ -d "$stale" ] && [ ! -L "$stale" ]; then rm -rf -- "$stale"; fi
  done
fi

# --- checking an entry ---------------------------------------------------------------------------
# check_entry: 0 with $bin set when the entry is good; 1 when there is none; 2 with $bad set.
bin=""
bad=""
check_entry() {
  local file="$entry/commgate" record="$entry/commgate.sha256" want="" what="" got candidate said
  bad=""
  if [ ! -e "$entry" ] && [ ! -L "$entry" ]; then return 1; fi
  if [ -L "$entry" ] || [ ! -d "$entry" ]; then bad="$entry is not a directory"; return 2; fi
  if [ ! -O "$entry" ]; then bad="$entry is not owned by $(id -un)"; return 2; fi
  if [ ! -f "$file" ] || [ -L "$file" ]; then bad="$file is missing or not a regular file"; return 2; fi
  if [ ! -f "$record" ] || [ -L "$record" ]; then bad="its recorded checksum $record is missing"; return 2; fi
  read -r want what _ <"$record" || true
  if ! [[ "$want" =~ ^[0-9a-f]{64}$ ]] || [ "$what" != commgate ]; then
    bad="$record is not a SHA-256 line for commgate"
    return 2
  fi
  candidate=$file
  if [ -n "$out" ]; then
    if [ -n "$out_tmp" ]; then rm -f -- "$out_tmp"; fi
    out_tmp=$(mktemp "$out/.commgate.XXXXXX")
    cat -- "$file" >"$out_tmp"
    chmod 0755 -- "$out_tmp"
    candidate=$out_tmp
  fi
  got=$(sha256_file "$candidate")
  if [ "$got" != "$want" ]; then
    bad="checksum mismatch for $file: recorded $want, got $got"
    return 2
  fi
  said=$("$candidate" --version 2>/dev/null) || said=""
  said=${said%%$'\n'*}
  if [ "$said" != "commgate $version" ]; then
    bad="$file --version prints '$said', not 'commgate $version'"
    return 2
  fi
  if [ -n "$out" ]; then
    mv -f -- "$out_tmp" "$out/commgate"
    out_tmp=""
    bin="$out/commgate"
  else
    bin=$file
  fi
  return 0
}

# Moves the entry aside (one rename, so no one sees half of it), then deletes it.
discard_entry() {
  trash=$(mktemp -d "$ldir/.$name.trash.XXXXXX")
  # Without flock another job may have removed it first.
  mv -- "$entry" "$trash/" 2>/dev/null || [ ! -e "$entry" ] || die "cannot remove $entry"
  rm -rf -- "$trash" 2>/dev/null || warn "could not delete all of $trash"
  trash=""
}

# Renames the directory FROM to TO; fails, leaving TO as it was, when TO already exists.
rename_dir() { # FROM TO
  if mv --version 2>/dev/null | grep -q GNU; then
    mv -T -- "$1" "$2" 2>/dev/null
  else
    # BSD mv has no -T: it would move FROM into an existing TO, so look first (without flock
    # another job may still get there in between; its entry is then left alone below).
    [ ! -e "$2" ] && [ ! -L "$2" ] || return 1
    mv -- "$1" "$2" || return 1
    if [ -e "$2/$(basename -- "$1")" ]; then
      rm -rf -- "${2:?}/$(basename -- "$1")"
      return 1
    fi
  fi
}

status=0
check_entry || status=$?
if [ "$status" -eq 0 ]; then
  say "using the cached build $entry/commgate (SHA-256 and version checked: commgate $version, $triple)"
  printf '%s\n' "$bin"
  exit 0
fi
if [ "$status" -eq 2 ]; then
  warn "the cached build in $entry is not trusted ($bad); removing it and building commgate $version again"
  discard_entry
fi

# --- the build -----------------------------------------------------------------------------------
build=$(mktemp -d "$ldir/.$name.build.XXXXXX")
say "building commgate $version ($triple) from $src: cargo install --locked --force --path $src (once: later jobs reuse $entry)"
# --force: never trust cargo's record that some commgate is installed in the (fresh) root.
cargo install --locked --force --root "$build/root" --path "$src" >&2 ||
  die "cargo install failed (see above); nothing was cached"
built="$build/root/bin/commgate"
[ -f "$built" ] && [ ! -L "$built" ] || die "cargo install left no $built; nothing was cached"
mkdir -- "$build/entry"
cat -- "$built" >"$build/entry/commgate"
chmod 0755 -- "$build/entry/commgate"
said=$("$build/entry/commgate" --version 2>/dev/null) || said=""
said=${said%%$'\n'*}
[ "$said" = "commgate $version" ] ||
  die "the binary built from $src prints '$said' for --version, not 'commgate $version'; nothing was cached"
printf '%s  commgate\n' "$(sha256_file "$build/entry/commgate")" >"$build/entry/commgate.sha256"
if rename_dir "$build/entry" "$entry"; then
  say "cached commgate $version ($triple) in $entry (SHA-256 recorded in commgate.sha256)"
else
  say "another job cached commgate $version in $entry first; using its build"
fi
rm -rf -- "$build"
build=""

# The entry is used as every later job uses it: checked, and copied to OUT_DIR.
status=0
check_entry || status=$?
[ "$status" -eq 0 ] || die "the build cached in $entry does not check out (${bad:-it is missing})"
printf '%s\n' "$bin"
