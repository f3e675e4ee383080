#!/usr/bin/env bash
#
# build-kpt.sh — build the real kpt CLI from the Go module proxy, once per
# machine, and print the path of the binary on stdout (progress on stderr).
#
# Usage: scripts/build-kpt.sh
#   The binary lands in ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/kpt/<version>/kpt.
#
# The render conformance tests (tests/render_vs_kpt.rs) and the render
# benchmark (benches/render.rs) run `kpt fn render` from this binary; they find
# it through the KRM_FN_KPT_BIN environment variable that scripts/test.sh sets.
#
# github.com/GoogleContainerTools/kpt v1.0.0-beta.54 is the newest kpt release
# the module proxy serves here (same pin as scripts/fetch-kpt-fixtures.sh).
#
# Needs only Go. Idempotent: a stamp file records module, version and format;
# when it matches and the binary is present the script prints the path at once
# without calling go.

set -euo pipefail

MODULE=github.com/GoogleContainerTools/kpt
VERSION=v1.0.0-beta.54

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-kpt format 1"

DEST="${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/kpt/$VERSION"
BIN="$DEST/kpt"
STAMP="$DEST/.stamp"
stamp_content="$STAMP_FORMAT $MODULE@$VERSION"

die() { echo "build-kpt: error: $*" >&2; exit 1; }

if [[ -x "$BIN" && -f "$STAMP" && "$(<"$STAMP")" == "$stamp_content" ]]; then
  echo "$BIN"
  exit 0
fi

mkdir -p "$DEST"
rm -f "$STAMP"   # a partial build must never look complete

# shellcheck source=scripts/lib/go-proxy.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-proxy.sh"

start=$SECONDS
echo "build-kpt: downloading $MODULE@$VERSION" >&2
go_download "$MODULE" "$VERSION" >/dev/null
echo "build-kpt: building kpt $VERSION (a few minutes the first time)" >&2
go_install_cached "$workdir/bin" "$MODULE" "$VERSION" \
  -ldflags "-X github.com/GoogleContainerTools/kpt/run.version=${VERSION#v}"
[[ -x "$workdir/bin/kpt" ]] || die "go install $MODULE@$VERSION did not produce a kpt binary"
"$workdir/bin/kpt" version >/dev/null 2>&1 || die "the built kpt binary does not run"

mv -f "$workdir/bin/kpt" "$BIN"
printf '%s\n' "$stamp_content" >"$STAMP"
echo "build-kpt: kpt $VERSION ready in $((SECONDS - start))s" >&2
echo "$BIN"
