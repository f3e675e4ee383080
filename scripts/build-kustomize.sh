#!/usr/bin/env bash
#
# build-kustomize.sh — build the kustomize CLI from the Go module proxy, once
# per machine, and print the path of the binary on stdout (progress on stderr).
#
# Usage: scripts/build-kustomize.sh
#   The binary lands in ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/kustomize/<version>/kustomize.
#
# deploy/ is a set of kustomizations (Porch's manifests with this project's
# images, RBAC and hardening); the deployment tests (tests/deploy.rs) build
# them with this binary, which they find through KRM_FN_KUSTOMIZE_BIN
# (scripts/test.sh sets it). `kubectl kustomize` renders them the same way.
#
# Needs only Go. Idempotent: a stamp file records module, version and format;
# when it matches and the binary is present the script prints the path at once
# without calling go.

set -euo pipefail

# v5.8.2: the newest, v5.8.3, needs a k8s.io/kube-openapi version the
# module proxy refuses (403 "not available").
MODULE=sigs.k8s.io/kustomize/kustomize/v5
VERSION=v5.8.2

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-kustomize format 1"

DEST="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/kustomize/$VERSION"
BIN="$DEST/kustomize"
STAMP="$DEST/.stamp"
stamp_content="$STAMP_FORMAT $MODULE@$VERSION"

die() { echo "build-kustomize: error: $*" >&2; exit 1; }

if [[ -x "$BIN" && -f "$STAMP" && "$(<"$STAMP")" == "$stamp_content" ]]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$DEST"
rm -f "$STAMP"   # a partial build must never look complete

# shellcheck source=scripts/lib/go-proxy.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-proxy.sh"
export CGO_ENABLED=0

start=$SECONDS
echo "build-kustomize: downloading $MODULE@$VERSION" >&2
go_download "$MODULE" "$VERSION" >/dev/null
echo "build-kustomize: building kustomize $VERSION" >&2
go_install_cached "$workdir/bin" "$MODULE" "$VERSION" -trimpath -ldflags "-s -w"
[[ -x "$workdir/bin/kustomize" ]] || die "go install $MODULE@$VERSION did not produce a kustomize binary"
"$workdir/bin/kustomize" version >/dev/null 2>&1 || die "the built kustomize binary does not run"

mv -f "$workdir/bin/kustomize" "$BIN"
printf '%s\n' "$stamp_content" >"$STAMP"
echo "build-kustomize: kustomize $VERSION ready in $((SECONDS - start))s" >&2
echo "$BIN"
