#!/usr/bin/env bash
#
# build-porch-client.sh — build the test peer tests/go/porch-runtime-client
# (a caller that dials a function runner as porch-server v1.5.3 does, with
# Porch's own evaluator client package and the grpc-go Porch requires) from
# the Go module proxy, once per machine and per version of its source, and
# print the binary's path on stdout (progress on stderr).
#
# Usage: scripts/build-porch-client.sh
#   Cache: ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/porch-runtime-client/
#   <porch version>-<first 12 hex digits of the source's sha256>/.
#
# A throw-away module requires github.com/nephio-project/porch at the
# version scripts/build-porch.sh builds; the peer imports only its
# func/evaluator package, so the build pulls grpc-go and protobuf, not the
# rest of Porch. tests/beds/replicas.rs runs the peer (KRM_FN_PORCH_CLIENT, or
# this script).
#
# Needs only Go. Idempotent: a stamp records the recipe, module, version and
# source hash; when it matches and the binary is there, the script answers
# at once.

set -euo pipefail

MODULE=github.com/nephio-project/porch
VERSION=v1.5.3

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-porch-client format 1"

SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/go/porch-runtime-client/main.go"
die() { echo "build-porch-client: error: $*" >&2; exit 1; }
[[ -f "$SRC" ]] || die "$SRC is missing"
hash="$(sha256sum "$SRC" | cut -c1-12)"

DEST="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/porch-runtime-client/$VERSION-$hash"
BIN="$DEST/porch-runtime-client"
STAMP="$DEST/.stamp"
stamp_content="$STAMP_FORMAT $MODULE@$VERSION $hash"

if [[ -x "$BIN" && -f "$STAMP" && "$(<"$STAMP")" == "$stamp_content" ]]; then
  echo "$BIN"
  exit 0
fi
mkdir -p "$DEST"
rm -f "$STAMP"   # a partial build must never look complete

start=$SECONDS
# shellcheck source=scripts/lib/porch-module.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/porch-module.sh"
porch_module porchruntimeclient
cp "$SRC" main.go
echo "build-porch-client: resolving dependencies" >&2
if ! go get "$MODULE@$VERSION" >"$workdir/get.log" 2>&1 || ! go mod tidy >>"$workdir/get.log" 2>&1; then
  cat "$workdir/get.log" >&2
  die "resolving $MODULE@$VERSION failed"
fi
echo "build-porch-client: building (grpc-go $(go list -m -f '{{.Version}}' google.golang.org/grpc))" >&2
if ! go build -trimpath -ldflags "-s -w" -o "$workdir/porch-runtime-client" . >"$workdir/build.log" 2>&1; then
  cat "$workdir/build.log" >&2
  die "go build failed"
fi
"$workdir/porch-runtime-client" -h >/dev/null 2>&1 || die "the built binary does not run"

mv -f "$workdir/porch-runtime-client" "$BIN"
printf '%s\n' "$stamp_content" >"$STAMP"
echo "build-porch-client: ready in $((SECONDS - start))s" >&2
echo "$BIN"
