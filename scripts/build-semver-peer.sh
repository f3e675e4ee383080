#!/usr/bin/env bash
#
# build-semver-peer.sh — build the test peer tests/go/semver-peer (answers
# version and constraint questions with github.com/Masterminds/semver/v3,
# the grammar src/domain/version_constraint.rs mirrors) from the Go module
# proxy, once per machine and per version of its files, and print the
# binary's path on stdout (progress on stderr).
#
# Usage: scripts/build-semver-peer.sh
#   Cache: ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/semver-peer/
#   <first 12 hex digits of the sha256 of go.mod, go.sum and main.go>/.
#
# The Masterminds version is the one tests/go/semver-peer/go.mod requires
# (go.sum pins its hash). tests/hermetic/version_constraint_vs_go.rs runs the peer:
#   KRM_FN_SEMVER_PEER="$(scripts/build-semver-peer.sh)" \
#     cargo test --test hermetic version_constraint_vs_go::
#
# Needs only Go. Idempotent: a stamp records the recipe and the files' hash;
# when it matches and the binary is there, the script answers at once.

set -euo pipefail

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-semver-peer format 1"
MODULE=github.com/Masterminds/semver/v3

SRC_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/go/semver-peer"
FILES=(go.mod go.sum main.go)
die() { echo "build-semver-peer: error: $*" >&2; exit 1; }
for f in "${FILES[@]}"; do
  [[ -f "$SRC_DIR/$f" ]] || die "$SRC_DIR/$f is missing"
done
hash="$(cd "$SRC_DIR" && cat "${FILES[@]}" | sha256sum | cut -c1-12)"
VERSION="$(sed -n "s|^require $MODULE \(v[^ ]*\)\$|\1|p" "$SRC_DIR/go.mod")"
[[ -n "$VERSION" ]] || die "$SRC_DIR/go.mod has no 'require $MODULE vX.Y.Z' line"

DEST="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/semver-peer/$hash"
BIN="$DEST/semver-peer"
STAMP="$DEST/.stamp"
stamp_content="$STAMP_FORMAT $MODULE@$VERSION $hash"

if [[ -x "$BIN" && -f "$STAMP" && "$(<"$STAMP")" == "$stamp_content" ]]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$DEST"
rm -f "$STAMP"   # a partial build must never look complete

start=$SECONDS
# shellcheck source=scripts/lib/go-proxy.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-proxy.sh"
export CGO_ENABLED=0
echo "build-semver-peer: downloading $MODULE@$VERSION" >&2
go_download "$MODULE" "$VERSION" >/dev/null
mkdir -p "$workdir/semver-peer" && cd "$workdir/semver-peer"
for f in "${FILES[@]}"; do cp "$SRC_DIR/$f" "$f"; done
echo "build-semver-peer: building against $MODULE@$VERSION" >&2
if ! go build -trimpath -ldflags "-s -w" -o "$workdir/semver-peer.bin" . >"$workdir/build.log" 2>&1; then
  cat "$workdir/build.log" >&2
  die "go build failed"
fi
answer="$(printf 'C\t^1.2\t1.9.0\n' | "$workdir/semver-peer.bin")" || die "the built binary does not run"
[[ "$answer" == $'ok\ttrue' ]] || die "the built binary answered '$answer' to a known question"

mv -f "$workdir/semver-peer.bin" "$BIN"
printf '%s\n' "$stamp_content" >"$STAMP"
echo "build-semver-peer: ready in $((SECONDS - start))s" >&2
echo "$BIN"
