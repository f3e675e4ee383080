#!/usr/bin/env bash
# Builds Porch v1.5.3's own end-to-end suite (`test/e2e` of the
# github.com/nephio-project/porch module zip the Go module proxy serves:
# TestE2E, a testify PorchSuite) as a test binary, once per machine, and
# prints the directory holding it:
#
#   e2e.test   `go test -c` of the suite, unchanged
#   src        the suite's package directory, copied from the module (the
#              binary reads its testdata/ relative to the working directory:
#              run it from here)
#   functions/ the KRM functions the suite names that the catalog install
#              (scripts/install-catalog-functions.sh) lacks: the older
#              catalog releases the module proxy serves (apply-setters
#              v0.2.0, set-namespace v0.4.1, starlark v0.3.0 and v0.4.3,
#              each named NAME-VERSION), and the stand-ins of
#              tests/go/porch-e2e-stand-ins (set-labels, set-annotations,
#              search-replace, ensure-name-substring)
#
# tests/beds/porch_suite.rs runs it against porch-server twice, once with
# Porch's function runner and once with ours. Cached under
# ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/porch-e2e/v1.5.3; scripts/build-tools.sh
# calls it right after scripts/build-porch.sh, while Go's build cache still
# holds Porch's packages (only the suite's own packages then compile).
set -euo pipefail

MODULE=github.com/nephio-project/porch
VERSION=v1.5.3

STAMP_FORMAT="build-porch-e2e format 1"
LEGACY_CATALOG=github.com/GoogleContainerTools/kpt-functions-catalog/functions/go
RELEASES=("apply-setters v0.2.0" "set-namespace v0.4.1" "starlark v0.3.0" "starlark v0.4.3")
STAND_INS=(set-labels set-annotations search-replace ensure-name-substring)
STAND_IN_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tests/go/porch-e2e-stand-ins/main.go"

DEST="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/porch-e2e/$VERSION"
STAMP="$DEST/.stamp"
[[ -f "$STAND_IN_SRC" ]] || { echo "build-porch-e2e: error: $STAND_IN_SRC is missing" >&2; exit 1; }
stamp_content="$STAMP_FORMAT $MODULE@$VERSION ${RELEASES[*]} stand-ins $(sha256sum "$STAND_IN_SRC" | cut -c1-12)"

die() { echo "build-porch-e2e: error: $*" >&2; exit 1; }

if [[ -x "$DEST/e2e.test" && -d "$DEST/src/testdata" && -d "$DEST/functions" && -f "$STAMP" && "$(<"$STAMP")" == "$stamp_content" ]]; then
  echo "$DEST"
  exit 0
fi
mkdir -p "$DEST"
rm -f "$STAMP"   # a partial build must never look complete

start=$SECONDS
source "$(dirname "${BASH_SOURCE[0]}")/lib/porch-module.sh"
porch_module porche2e
src="$porch_src"
echo "build-porch-e2e: resolving the suite's dependencies" >&2
if ! go get -t "$MODULE/test/e2e@$VERSION" >"$workdir/get.log" 2>&1; then
  cat "$workdir/get.log" >&2
  die "go get -t $MODULE/test/e2e@$VERSION failed"
fi
echo "build-porch-e2e: building e2e.test" >&2
if ! go test -c -trimpath -ldflags "-s -w" -o "$workdir/e2e.test" "$MODULE/test/e2e" >"$workdir/build.log" 2>&1; then
  cat "$workdir/build.log" >&2
  die "go test -c $MODULE/test/e2e failed"
fi
"$workdir/e2e.test" -test.list '^TestE2E$' | grep -qx TestE2E || die "the built e2e.test does not list TestE2E"

# The stand-ins, from Porch's module graph (kyaml's function framework).
echo "build-porch-e2e: building the stand-ins" >&2
mkdir -p standins "$workdir/functions"
cp "$STAND_IN_SRC" standins/main.go
if ! go build -trimpath -ldflags "-s -w" -o "$workdir/stand-in" ./standins >"$workdir/build.log" 2>&1; then
  cat "$workdir/build.log" >&2
  die "go build of the stand-ins failed"
fi
for f in "${STAND_INS[@]}"; do cp "$workdir/stand-in" "$workdir/functions/$f"; done

# The older catalog releases, static like the catalog install's.
for entry in "${RELEASES[@]}"; do
  read -r fn ver <<<"$entry"
  echo "build-porch-e2e: building $fn $ver" >&2
  go_download "$LEGACY_CATALOG/$fn" "$ver" >/dev/null
  mkdir -p "$workdir/gobin"
  go_install_cached "$workdir/gobin" "$LEGACY_CATALOG/$fn" "$ver" -trimpath -ldflags "-s -w"
  mv -f "$workdir/gobin/$fn" "$workdir/functions/$fn-$ver"
done

rm -rf "$DEST/src"
cp -r "$src/test/e2e" "$DEST/src"
chmod -R u+w "$DEST/src"
mv -f "$workdir/e2e.test" "$DEST/e2e.test"
rm -rf "$DEST/functions" && mv "$workdir/functions" "$DEST/functions"
printf '%s\n' "$stamp_content" >"$STAMP"
echo "build-porch-e2e: ready in $((SECONDS - start))s" >&2
echo "$DEST"
