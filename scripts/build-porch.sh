#!/usr/bin/env bash
#
# build-porch.sh — build Porch v1.5.3 (the config.yaml generation of its
# function runner) from the Go module proxy, once per machine, and print the
# cache directory on stdout (progress on stderr). It holds:
#
#   porch-server            github.com/nephio-project/porch/cmd/porch
#   porchctl                github.com/nephio-project/porch/cmd/porchctl
#   porch-function-runner   github.com/nephio-project/porch/func/server
#                           (Porch's own Go function runner, the peer we are
#                           compared with in tests and benchmarks)
#   porch-wrapper-server    github.com/nephio-project/porch/func/wrapper-server
#                           (the wrapper server of Porch's function pods)
#   grpc-health-probe       github.com/grpc-ecosystem/grpc-health-probe, the
#                           version Porch's wrapper image ships (its pods'
#                           readiness probe)
#   crds/                   the CustomResourceDefinitions porch-server needs
#                           in the core API server (Repository, PackageRev)
#
# Usage: scripts/build-porch.sh [porch-server|porchctl|porch-function-runner|porch-wrapper-server|grpc-health-probe|crds]
#   With an argument, prints the path of that one artefact instead.
#   Cache: ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/porch/<version>/
#
# The module's go.mod replaces k8s.io/apiserver with a directory that is not
# in the module zip, so `go install MODULE/cmd/porch@VERSION` refuses; a
# throw-away module that requires github.com/nephio-project/porch builds the
# main packages straight out of the dependency instead (the upstream
# k8s.io/apiserver v0.30.3 stands in for the replaced copy). CGO is off, so
# the wasm function runtime (wasmtime, cgo only) is left out, as in Porch's
# own images.
#
# Needs only Go. Idempotent: a stamp records module, version and recipe; when
# it matches and every artefact is present the script answers at once.

set -euo pipefail

MODULE=github.com/nephio-project/porch
VERSION=v1.5.3

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-porch format 2"

DEST="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/porch/$VERSION"
STAMP="$DEST/.stamp"
stamp_content="$STAMP_FORMAT $MODULE@$VERSION"
BINARIES=(porch-server porchctl porch-function-runner porch-wrapper-server grpc-health-probe)
# The grpc-health-probe release Porch's func/Dockerfile-wrapperserver installs.
HEALTH_PROBE=github.com/grpc-ecosystem/grpc-health-probe@v0.4.11

die() { echo "build-porch: error: $*" >&2; exit 1; }

what="${1:-}"
case "$what" in
  "" | porch-server | porchctl | porch-function-runner | porch-wrapper-server | grpc-health-probe | crds) ;;
  *) die "unknown artefact '$what' (porch-server, porchctl, porch-function-runner, porch-wrapper-server, grpc-health-probe or crds)" ;;
esac

answer() {
  if [[ -n "$what" ]]; then echo "$DEST/$what"; else echo "$DEST"; fi
}

complete() {
  [[ -f "$STAMP" && "$(<"$STAMP")" == "$stamp_content" && -d "$DEST/crds" ]] || return 1
  local b
  for b in "${BINARIES[@]}"; do [[ -x "$DEST/$b" ]] || return 1; done
}

if complete; then
  answer
  exit 0
fi

mkdir -p "$DEST"
rm -f "$STAMP"   # a partial build must never look complete

start=$SECONDS
# shellcheck source=scripts/lib/porch-module.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/porch-module.sh"
porch_module porchbuild
src="$porch_src"
echo "build-porch: resolving dependencies" >&2
if ! go get "$MODULE/cmd/porch@$VERSION" "$MODULE/cmd/porchctl@$VERSION" \
  "$MODULE/func/server@$VERSION" "$MODULE/func/wrapper-server@$VERSION" "$HEALTH_PROBE" >"$workdir/get.log" 2>&1; then
  cat "$workdir/get.log" >&2
  die "go get $MODULE@$VERSION failed"
fi

build() { # build OUTPUT PACKAGE
  echo "build-porch: building $1" >&2
  if ! go build -trimpath -ldflags "-s -w" -o "$workdir/bin/$1" "$2" >"$workdir/build.log" 2>&1; then
    cat "$workdir/build.log" >&2
    die "go build $2 failed"
  fi
}
build porch-server "$MODULE/cmd/porch"
build porchctl "$MODULE/cmd/porchctl"
build porch-function-runner "$MODULE/func/server"
build porch-wrapper-server "$MODULE/func/wrapper-server"
build grpc-health-probe "${HEALTH_PROBE%@*}"
"$workdir/bin/porchctl" version >/dev/null 2>&1 || die "the built porchctl does not run"

mkdir -p "$workdir/crds"
cp "$src/api/porchconfig/v1alpha1/config.porch.kpt.dev_repositories.yaml" \
  "$src/internal/api/porchinternal/v1alpha1/config.porch.kpt.dev_packagerevs.yaml" "$workdir/crds/"
chmod -R u+w "$workdir/crds"

for b in "${BINARIES[@]}"; do mv -f "$workdir/bin/$b" "$DEST/$b"; done
rm -rf "$DEST/crds" && mv "$workdir/crds" "$DEST/crds"
printf '%s\n' "$stamp_content" >"$STAMP"
echo "build-porch: Porch $VERSION ready in $((SECONDS - start))s" >&2
answer
