#!/usr/bin/env bash
#
# build-lychee.sh — install lychee, the link checker, from crates.io once
# per machine, and print the path of the binary on stdout (progress on
# stderr).
#
# Usage: scripts/build-lychee.sh
#   The binary lands in
#   ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/lychee/<version>/bin/lychee.
#
# scripts/check-book.sh runs it offline over the built book and the README:
# every relative link must name a file that exists and every `#fragment` an
# anchor in it. Needs cargo. Idempotent (scripts/lib/cargo-tool.sh).

set -euo pipefail

VERSION=0.24.2

# Bump when the build recipe changes, to force a rebuild.
STAMP_FORMAT="build-lychee format 1"

# shellcheck source=scripts/lib/cargo-tool.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cargo-tool.sh"
build_cargo_tool lychee lychee "$VERSION" "$STAMP_FORMAT" --no-default-features
