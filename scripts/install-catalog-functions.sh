#!/usr/bin/env bash
#
# install-catalog-functions.sh — build real KRM functions from the public kpt
# functions catalog (github.com/kptdev/krm-functions-catalog) with `go install`
# through the Go module proxy, and describe them for krm-fn-runner.
#
# Usage: scripts/install-catalog-functions.sh [DEST_DIR]
#   DEST_DIR defaults to ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/catalog
#
# Produces:
#   DEST/bin/<fn>       one executable per function (a KRM function: ResourceList
#                       on stdin, ResourceList on stdout), static and stripped
#   DEST/config.yaml    Porch exec-evaluator config mapping catalog image names to
#                       the binaries; use it with `--functions DEST/bin`
#   DEST/versions.txt   "<fn> <version> <module path>" per function
#   DEST/modules.txt    "<fn> <version> <module source dir>" per function (the
#                       extracted module zip in the Go module cache)
#
# Needs only Go. Idempotent: a stamp file records the pinned table; when it
# matches and every output is present the script exits at once without calling go.

set -euo pipefail

CATALOG=github.com/kptdev/krm-functions-catalog/functions/go
# Pre-2025 module path of the same catalog (before it moved to the kptdev org).
LEGACY_CATALOG=github.com/GoogleContainerTools/kpt-functions-catalog/functions/go
IMAGE_PREFIX=ghcr.io/kptdev/krm-functions-catalog
LEGACY_IMAGE_PREFIX=gcr.io/kpt-fn

# Pinned functions: "<fn> <module path> <version>". The binary is named <fn>.
# These are the catalog releases the module proxy serves (other versions and the
# other catalog functions, e.g. set-labels, set-annotations, search-replace,
# set-image, ensure-name-substring, upsert-resource, answer 403 "not available").
# list-setters only exists there under the legacy module path (a 2021 release).
FUNCTIONS=(
  "apply-replacements $CATALOG/apply-replacements v0.1.5"
  "apply-setters      $CATALOG/apply-setters      v0.2.2"
  "set-namespace      $CATALOG/set-namespace      v0.4.5"
  "starlark           $CATALOG/starlark           v0.5.5"
  "list-setters       $LEGACY_CATALOG/list-setters v0.1.0"
)

# Bump when the layout or the generated files change, to force a rebuild.
STAMP_FORMAT="install-catalog-functions format 2"

DEST="${1:-${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/catalog}"
BIN="$DEST/bin"
STAMP="$DEST/.stamp"

die() { echo "install-catalog-functions: error: $*" >&2; exit 1; }

stamp_content() {
  printf '%s\n' "$STAMP_FORMAT"
  local entry
  for entry in "${FUNCTIONS[@]}"; do
    read -r fn mod ver <<<"$entry"
    printf '%s %s %s\n' "$fn" "$mod" "$ver"
  done
}

# True when a previous run with the same pinned table left every output in place.
up_to_date() {
  [[ -f "$STAMP" && -f "$DEST/config.yaml" && -f "$DEST/versions.txt" && -f "$DEST/modules.txt" ]] || return 1
  [[ "$(<"$STAMP")" == "$(stamp_content)" ]] || return 1
  local entry fn mod ver dir
  for entry in "${FUNCTIONS[@]}"; do
    read -r fn mod ver <<<"$entry"
    [[ -x "$BIN/$fn" ]] || return 1
  done
  while read -r fn ver dir; do
    [[ -d "$dir" ]] || return 1
  done <"$DEST/modules.txt"
}

if up_to_date; then
  exit 0
fi

mkdir -p "$BIN"
rm -f "$STAMP"   # a partial build must never look complete

# shellcheck source=scripts/lib/go-proxy.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/go-proxy.sh"
# Static and stripped: the runner image (images/runner.Containerfile) has no
# libc, and smaller binaries make a smaller image.
export CGO_ENABLED=0

: >"$workdir/versions.txt"
: >"$workdir/modules.txt"
for entry in "${FUNCTIONS[@]}"; do
  read -r fn mod ver <<<"$entry"
  start=$SECONDS

  dir="$(go_download "$mod" "$ver")"
  go_install_cached "$BIN" "$mod" "$ver" -trimpath -ldflags "-s -w"
  built="$BIN/$(basename "$mod")"
  [[ -x "$built" ]] || die "go install $mod@$ver did not produce $built"
  [[ "$built" == "$BIN/$fn" ]] || mv -f "$built" "$BIN/$fn"

  printf '%s %s %s\n' "$fn" "$ver" "$mod" >>"$workdir/versions.txt"
  printf '%s %s %s\n' "$fn" "$ver" "$dir" >>"$workdir/modules.txt"
  echo "built $fn $ver ($mod) in $((SECONDS - start))s"
done

# Porch exec-evaluator config: `function` is the binary's file name in DEST/bin.
# Images: the pinned tag, the minor alias Porch uses (vX.Y), :latest, and the
# legacy gcr.io/kpt-fn names (:unstable is what the catalog's own tests use).
{
  echo "functions:"
  for entry in "${FUNCTIONS[@]}"; do
    read -r fn mod ver <<<"$entry"
    echo "- function: $fn"
    echo "  images:"
    echo "  - $IMAGE_PREFIX/$fn:$ver"
    echo "  - $IMAGE_PREFIX/$fn:${ver%.*}"
    echo "  - $IMAGE_PREFIX/$fn:latest"
    echo "  - $LEGACY_IMAGE_PREFIX/$fn:$ver"
    echo "  - $LEGACY_IMAGE_PREFIX/$fn:${ver%.*}"
    echo "  - $LEGACY_IMAGE_PREFIX/$fn:unstable"
  done
} >"$workdir/config.yaml"

mv -f "$workdir/config.yaml" "$DEST/config.yaml"
mv -f "$workdir/versions.txt" "$DEST/versions.txt"
mv -f "$workdir/modules.txt" "$DEST/modules.txt"
stamp_content >"$STAMP"
echo "catalog functions ready in $DEST (config: $DEST/config.yaml)"
