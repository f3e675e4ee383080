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

command -v go >/dev/null 2>&1 || die "go is not installed (https://go.dev/dl/)"

mkdir -p "$DEST"
rm -f "$STAMP"   # a partial build must never look complete

workdir="$(mktemp -d)"
trap 'rm -rf "$workdir"' EXIT
cd "$workdir"    # keep any surrounding go.mod / go.work out of the picture

GOMODCACHE_DIR="$(go env GOMODCACHE)"
BASE_PROXY="$(go env GOPROXY)"
export GOWORK=off
export GOTOOLCHAIN=auto
export GOFLAGS="${GOFLAGS:-} -mod=mod"
# sum.golang.org lookups for these modules answer 404 through the proxy here;
# kpt's dependencies are still verified against its own go.sum.
export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}github.com/GoogleContainerTools,github.com/kptdev"

start=$SECONDS
echo "build-kpt: downloading $MODULE@$VERSION" >&2
info="$(go mod download -json "$MODULE@$VERSION" 2>&1)" || true
dir="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$info" | head -n 1)"
[[ -n "$dir" && -d "$dir" ]] || die "cannot download $MODULE@$VERSION: $info"

# `go install MODULE@VERSION` reads the module's @v/list, which the proxy
# refuses: serve it from the local download cache first, then the proxy.
echo "build-kpt: building kpt $VERSION (a few minutes the first time)" >&2
if ! GOBIN="$workdir/bin" GOPROXY="file://$GOMODCACHE_DIR/cache/download,$BASE_PROXY" \
  go install -ldflags "-X github.com/GoogleContainerTools/kpt/run.version=${VERSION#v}" \
  "$MODULE@$VERSION" >"$workdir/build.log" 2>&1; then
  cat "$workdir/build.log" >&2
  die "go install $MODULE@$VERSION failed"
fi
[[ -x "$workdir/bin/kpt" ]] || die "go install $MODULE@$VERSION did not produce a kpt binary"
"$workdir/bin/kpt" version >/dev/null 2>&1 || die "the built kpt binary does not run"

mv -f "$workdir/bin/kpt" "$BIN"
printf '%s\n' "$stamp_content" >"$STAMP"
echo "build-kpt: kpt $VERSION ready in $((SECONDS - start))s" >&2
echo "$BIN"
